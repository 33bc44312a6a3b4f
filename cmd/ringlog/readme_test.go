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

// TestReadmeSetup checks the README's two setup commands: `make run` runs
// the broker on the defaults the README names (its serve line, taken from
// `make -n run`, is run with the binary under test and free ports: the
// test cannot take 9092), and `make test` is what .ci/run runs.
func TestReadmeSetup(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	setup := readmeBlocks(t, string(raw), "setup")
	if len(setup) != 1 {
		t.Fatalf("README: %d setup blocks, want 1", len(setup))
	}
	var cmds []string
	for _, l := range strings.Split(setup[0], "\n") {
		if c, _, _ := strings.Cut(l, "#"); strings.TrimSpace(c) != "" {
			cmds = append(cmds, strings.TrimSpace(c))
		}
	}
	if !slices.Equal(cmds, []string{"make run", "make test"}) {
		t.Fatalf("the README's setup block runs %q, want exactly make run and make test", cmds)
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ci), "\nmake test") {
		t.Errorf(".ci/run does not run `make test`:\n%s", ci)
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	ports := []int{consecutivePorts(t, 3)} // make run: native and HTTP on the next two
	data := t.TempDir()
	out, err := exec.Command("make", "-s", "-n", "-C", "../..", "run", fmt.Sprintf("PORT=%d", ports[0]), "DATA="+data).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n run: %v\n%s", err, out)
	}
	var serve string
	for _, l := range strings.Split(strings.ReplaceAll(string(out), "\\\n", " "), "\n") {
		if strings.Contains(l, "bin/ringlog serve") {
			serve = l
		}
	}
	if serve == "" {
		t.Fatalf("make -n run runs no bin/ringlog serve:\n%s", out)
	}
	// The defaults the README promises, with PORT and DATA left alone.
	def, err := exec.Command("make", "-s", "-n", "-C", "../..", "run").CombinedOutput()
	if err != nil || !strings.Contains(string(def), "--data-dir ./data --kafka-addr 127.0.0.1:9092") {
		t.Errorf("make -n run: %v\n%s\nwant --data-dir ./data --kafka-addr 127.0.0.1:9092", err, def)
	}
	serve = strings.Replace(serve, "./bin/ringlog", ringlogBinary(t), 1)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	srv := exec.CommandContext(ctx, "sh", "-c", "exec "+serve)
	ready := &readyWatcher{ready: make(chan string, 1)}
	var srvErr testenv.SyncBuffer
	srv.Stdout, srv.Stderr = ready, &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Signal(syscall.SIGTERM)
		srv.Wait()
	}()
	select {
	case line := <-ready.ready:
		if want := fmt.Sprintf("kafka=127.0.0.1:%d", ports[0]); !strings.Contains(line, want) {
			t.Errorf("make run PORT=%d: ready line %q lacks %s", ports[0], line, want)
		}
	case <-ctx.Done():
		t.Fatalf("make run's serve line printed no ready line:\n%s\n%s", serve, lastChars(srvErr.String(), 4000))
	}
}

// TestReadmeCluster runs the README's three-broker quick start as written,
// in one shell in a fresh directory with ./bin/ringlog the binary under
// test; only its six ports are replaced by free ones. The brokers it
// starts in the background are killed with the shell's process group.
func TestReadmeCluster(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, string(raw), "cluster")
	if len(blocks) != 1 {
		t.Fatalf("README: %d cluster blocks, want 1", len(blocks))
	}
	ports := freePorts(t, 6)
	var pairs []string
	for i, p := range []int{9092, 9093, 9094, 9192, 9193, 9194} {
		pairs = append(pairs, fmt.Sprintf("127.0.0.1:%d", p), fmt.Sprintf("127.0.0.1:%d", ports[i]))
	}
	script := strings.NewReplacer(pairs...).Replace(blocks[0])
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ringlogBinary(t), filepath.Join(work, "bin", "ringlog")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -euxo pipefail\n"+script)
	cmd.Dir = work
	cmd.Env = []string{"HOME=" + work, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Files, not buffers: the background brokers keep the shell's
	// output open after it exits, and Wait would wait for them.
	stdout, err := os.Create(filepath.Join(work, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(work, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = stdout, stderr
	start := time.Now()
	runErr := cmd.Start()
	if runErr == nil {
		pgid := cmd.Process.Pid
		t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
		runErr = cmd.Wait()
	}
	outB, _ := os.ReadFile(stdout.Name())
	errB, _ := os.ReadFile(stderr.Name())
	out := string(outB)
	if runErr != nil {
		t.Fatalf("the README cluster quick start failed (%v) after %v\nstdout:\n%s\nstderr (each command traced with +, the brokers' logs between):\n%s",
			runErr, time.Since(start).Round(time.Millisecond), out, lastChars(string(errB), 20000))
	}
	for _, want := range []string{"Healthy: yes", "3 brokers", `created topic "orders" with 6 partitions, replication factor 3`, "Topic: orders", "6 partitions, replication factor 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("the cluster quick start's output lacks %q:\n%s", want, out)
		}
	}
	// The describe shows six partitions led by all three brokers, each
	// with three in-sync replicas.
	leaders := map[string]bool{}
	rows := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && f[0] >= "0" && f[0] <= "5" && len(f[0]) == 1 && strings.Count(f[3], ",") == 2 {
			rows++
			leaders[f[1]] = true
			if strings.Count(f[4], ",") != 2 {
				t.Errorf("partition %s: ISR %s, want three in sync", f[0], f[4])
			}
		}
	}
	if rows != 6 || len(leaders) != 3 {
		t.Errorf("the describe shows %d partition rows led by %v, want 6 led by brokers 1, 2 and 3:\n%s", rows, leaders, out)
	}
	t.Logf("the cluster quick start ran in %v", time.Since(start).Round(time.Millisecond))
}
