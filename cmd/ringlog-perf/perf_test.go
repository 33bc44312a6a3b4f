package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/ringlog/ringlog/internal/cli"
)

// TestPerfCommandLine checks ringlog-perf's help, usage errors (exit
// 2), failures (exit 1) and the flamegraph subcommand on a profile file.
func TestPerfCommandLine(t *testing.T) {
	runIn := func(args ...string) (cli.ExitCode, string, string) {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	for _, sub := range []string{"produce", "consume", "e2e", "e2e-raw", "relay-floor", "relay-serve", "kfake-serve", "scale", "suite", "report", "flamegraph"} {
		code, stdout, stderr := runIn(sub, "--help")
		if code != cli.ExitOK || !strings.Contains(stdout, "Usage: ringlog-perf "+sub) || !strings.Contains(stdout, "Examples:") || stderr != "" {
			t.Errorf("%s --help: exit %d\nstdout %s\nstderr %s", sub, code, stdout, stderr)
		}
		// A default spelt in the description and printed again by the
		// flag package reads "(default 10000) (default 10000)".
		for _, line := range strings.Split(stdout, "\n") {
			if strings.Count(line, "(default ") > 1 {
				t.Errorf("%s --help prints a default twice: %q", sub, line)
			}
		}
	}
	if code, _, stderr := runIn(); code != cli.ExitUsage || !strings.Contains(stderr, "flamegraph") {
		t.Errorf("no subcommand: exit %d\n%s", code, stderr)
	}
	usage := [][]string{
		{"produce", "--acks", "2"},
		{"produce", "--record-size", "4"},
		{"produce", "--rate", "fast"},
		{"produce", "--keys", "zipf"},
		{"produce", "--compression", "brotli"},
		{"produce", "--warmup", "10s", "--duration", "5s"},
		{"e2e", "extra-arg"},
		{"relay-serve", "extra-arg"},
		{"kfake-serve", "extra-arg"},
		{"scale", "--sweep-partitions", "1,x"},
		{"scale", "--topic", "t"},
		{"suite", "--warmup", "1m"},
		{"flamegraph", "--out", "x.svg"},
		{"report"},
		{"produce", "--brokers", ""},
	}
	for _, args := range usage {
		if code, _, stderr := runIn(args...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, stderr)
		}
	}

	// Nothing listens: exit 1 with a message, within the timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if code, _, stderr := runIn("produce", "--brokers", addr, "--timeout", "1s", "--duration", "2s", "--warmup", "0s"); code != cli.ExitError || !strings.Contains(stderr, "cannot reach") {
		t.Errorf("unreachable broker: exit %d\n%s", code, stderr)
	}

	// flamegraph from a file.
	dir := t.TempDir()
	fn := &profile.Function{ID: 1, Name: "main.hot"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}},
		Sample:   []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{1e9}}},
		Location: []*profile.Location{loc}, Function: []*profile.Function{fn}}
	pf := filepath.Join(dir, "cpu.pb.gz")
	f, _ := os.Create(pf)
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out := filepath.Join(dir, "cpu.svg")
	// An idle process's profile: no samples, no empty picture, exit 1.
	idle := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}}}
	ipf := filepath.Join(dir, "idle.pb.gz")
	fi, _ := os.Create(ipf)
	if err := idle.Write(fi); err != nil {
		t.Fatal(err)
	}
	fi.Close()
	iout := filepath.Join(dir, "idle.svg")
	if code, _, stderr := runIn("flamegraph", "--pprof", ipf, "--out", iout); code != cli.ExitError || !strings.Contains(stderr, "no samples") {
		t.Errorf("flamegraph of an idle profile: exit %d, want 1 saying no samples\n%s", code, stderr)
	}
	if _, err := os.Stat(iout); err == nil {
		t.Errorf("flamegraph of an idle profile left %s behind", iout)
	}
	code, stdout, stderr := runIn("flamegraph", "--pprof", pf, "--out", out, "--top", "3")
	if code != cli.ExitOK || !strings.Contains(stdout, "100.00% flat") || !strings.Contains(stdout, "main.hot") {
		t.Fatalf("flamegraph: exit %d\n%s%s", code, stdout, stderr)
	}
	if b, err := os.ReadFile(out); err != nil || !bytes.Contains(b, []byte("main.hot 100.0%")) {
		t.Errorf("flamegraph SVG: %v", err)
	}
	if code, _, _ := runIn("flamegraph", "--pprof", pf, "--out", out, "--sample", "alloc_space"); code != cli.ExitError {
		t.Errorf("unknown sample type: exit %d, want 1", code)
	}
}
