package main

// The README's quickstart, run as written: its marked shell blocks are
// extracted and executed against the binary under test and a broker it
// started, so README and behaviour cannot drift apart.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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
