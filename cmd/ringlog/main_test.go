package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/internal/cli"
)

// TestPerfMoved: 'ringlog perf ...' is a usage error that names the
// ringlog-perf binary, so old scripts fail loudly and say where to go.
func TestPerfMoved(t *testing.T) {
	for _, args := range [][]string{{"perf"}, {"perf", "suite", "--out", "x"}} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if code != cli.ExitUsage || !strings.Contains(errb.String(), "ringlog-perf") || out.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
	// Help asked for is output (stdout, so it can be paged or grepped);
	// no command at all is a usage error (stderr, exit 2).
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != cli.ExitOK || !strings.Contains(out.String(), "moved to the ringlog-perf binary") || errb.Len() != 0 {
		t.Errorf("--help: exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(nil, &out, &errb); code != cli.ExitUsage || !strings.Contains(errb.String(), "Commands:") || out.Len() != 0 {
		t.Errorf("no command: exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
}
