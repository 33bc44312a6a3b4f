package main

// The README's quickstart, run as written: its marked shell blocks are
// extracted and executed against the binary under test and a broker it
// started, so README and behaviour cannot drift apart.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testenv"
)

// readmeBlocks returns the ```sh blocks that directly follow an HTML
// comment <!-- marker --> in the README.
func readmeBlocks(t *testing.T, readme, marker string) []string {
	t.Helper()
	var blocks []string
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "<!-- "+marker+" -->" {
			continue
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```sh" {
			t.Fatalf("README line %d: <!-- %s --> is not followed by a ```sh block", i+1, marker)
		}
		var b []string
		j := i + 2
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			b = append(b, lines[j])
		}
		if j == len(lines) {
			t.Fatalf("README line %d: unterminated ```sh block", i+2)
		}
		blocks = append(blocks, strings.Join(b, "\n"))
		i = j
	}
	return blocks
}

// TestReadmeQuickstart runs the quickstart: the install block (its `make
// build` checked with `make -n` against the Makefile, the rest run as
// written, with ./bin/ringlog being the binary under test), then every
// <!-- quickstart --> block, in one shell, against a fresh broker found
// through RINGLOG_BROKERS (the README's commands use the default broker
// address, which a test cannot take).
func TestReadmeQuickstart(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	install := readmeBlocks(t, readme, "quickstart:install")
	steps := readmeBlocks(t, readme, "quickstart")
	if len(install) != 1 || len(steps) == 0 {
		t.Fatalf("README: %d quickstart:install blocks (want 1) and %d quickstart blocks (want some)", len(install), len(steps))
	}
	for _, b := range append(slices.Clone(install), steps...) {
		for _, l := range strings.Split(b, "\n") {
			if strings.Contains(l, " | describe") || strings.Contains(l, " | alter") || strings.Contains(l, " | delete") {
				t.Errorf("README quickstart line %q is a pseudo-pipeline: one command per line", l)
			}
		}
	}

	// `make build` must put the binary where the PATH line looks.
	if _, err := exec.LookPath("make"); err == nil {
		out, err := exec.Command("make", "-n", "-C", "../..", "build").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "-o bin/ringlog ./cmd/ringlog") {
			t.Errorf("make -n build: %v\n%s\nwant a go build -o bin/ringlog ./cmd/ringlog", err, out)
		}
	} else {
		t.Log("make not installed: the build step is not checked")
	}
	var script []string
	sawBuild := false
	for _, l := range strings.Split(install[0], "\n") {
		if strings.TrimSpace(l) == "make build" {
			sawBuild = true
			continue
		}
		script = append(script, l)
	}
	if !sawBuild {
		t.Errorf("the README's install block has no `make build` line:\n%s", install[0])
	}
	script = append(script, steps...)

	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ringlogBinary(t), filepath.Join(work, "bin", "ringlog")); err != nil {
		t.Fatal(err)
	}
	b := startServe(t, t.TempDir(), "--group-initial-rebalance-delay", "0")

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -euxo pipefail\n"+strings.Join(script, "\n"))
	cmd.Dir = work
	// PATH without any other ringlog, so the README's PATH line is what
	// finds the binary.
	cmd.Env = []string{"HOME=" + work, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", brokersEnv + "=" + b.Kafka}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("the README quickstart failed (%v) after %v\nstdout:\n%s\nstderr (each command traced with +):\n%s",
			err, time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"ringlog ", `created topic "orders"`, "k1=hello", "k2=world", "k3=again", "Group: billing", "Total lag: 0", "Dry run: nothing committed"} {
		if !strings.Contains(out, want) {
			t.Errorf("quickstart output lacks %q:\n%s", want, out)
		}
	}
	// The two group runs print the three records once between them.
	for _, v := range []string{"hello", "world", "again"} {
		if n := strings.Count(out, "\n"+v+"\n"); n != 1 {
			t.Errorf("the quickstart's group runs printed %q %d times, want once:\n%s", v, n, out)
		}
	}
	t.Logf("quickstart ran in %v", time.Since(start).Round(time.Millisecond))
}

// TestReadmeSecurity runs the README's security quick start as written:
// the <!-- security --> blocks in one shell, around the
// <!-- security:serve --> command, which runs as its own process (the
// README runs it in another terminal). Only the two ports are replaced,
// by free ones, since the test cannot take 9092 and 9095.
func TestReadmeSecurity(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	steps := readmeBlocks(t, readme, "security")
	serve := readmeBlocks(t, readme, "security:serve")
	if len(steps) != 2 || len(serve) != 1 {
		t.Fatalf("README: %d security blocks (want 2, before and after the broker) and %d security:serve blocks (want 1)", len(steps), len(serve))
	}
	ports := freePorts(t, 2)
	swap := strings.NewReplacer("127.0.0.1:9092", fmt.Sprintf("127.0.0.1:%d", ports[0]), "127.0.0.1:9095", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ringlogBinary(t), filepath.Join(work, "bin", "ringlog")); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + work, "PATH=" + filepath.Join(work, "bin") + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run := func(script string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "bash", "-c", "set -euxo pipefail\n"+swap.Replace(script))
		cmd.Dir, cmd.Env = work, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("the README security block failed (%v)\n%s\nstdout:\n%s\nstderr (each command traced with +):\n%s", err, script, stdout.String(), stderr.String())
		}
		return stdout.String() + stderr.String()
	}
	run(steps[0])

	srv := exec.CommandContext(ctx, "bash", "-c", "exec "+swap.Replace(serve[0]))
	srv.Dir, srv.Env = work, env
	ready := &readyWatcher{ready: make(chan string, 1)}
	var srvErr testenv.SyncBuffer
	srv.Stdout, srv.Stderr = ready, &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGTERM)
		srv.Wait()
		if t.Failed() {
			t.Logf("ringlog serve stderr:\n%s", lastChars(srvErr.String(), 6000))
		}
	})
	select {
	case <-ready.ready:
	case <-time.After(startTimeout):
		t.Fatalf("the README's serve command printed no ready line in %v:\n%s", startTimeout, lastChars(srvErr.String(), 4000))
	}
	out := run(steps[1])
	for _, want := range []string{`created topic "orders"`, "TOPIC_AUTHORIZATION_FAILED", "ringlog acl add", "User:ANONYMOUS", "k1=paid"} {
		if !strings.Contains(out, want) {
			t.Errorf("the security quick start's output lacks %q:\n%s", want, out)
		}
	}
	// The files tls init and user add wrote are owner-only where secret.
	for _, f := range []string{"tls/ca-key.pem", "tls/broker-key.pem", "secure-data/security.json"} {
		fi, err := os.Stat(filepath.Join(work, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v: a secret readable by others", f, fi.Mode().Perm())
		}
	}
}
