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
	var errb bytes.Buffer
	if code := run([]string{"--help"}, &bytes.Buffer{}, &errb); code != cli.ExitOK || !strings.Contains(errb.String(), "moved to the ringlog-perf binary") {
		t.Errorf("--help: exit %d\n%s", code, errb.String())
	}
}
