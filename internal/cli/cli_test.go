package cli

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseArgs: flags are accepted before, between and after the
// arguments; everything after "--" is an argument; -h is ErrHelp and a bad
// flag a UsageError.
func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		n    int
	}{
		{[]string{"a", "-n", "3", "b"}, []string{"a", "b"}, 3},
		{[]string{"-n", "2", "a"}, []string{"a"}, 2},
		{[]string{"a", "--", "-n", "5"}, []string{"a", "-n", "5"}, 1},
		{nil, nil, 1},
	} {
		fs := NewFlagSet("t", "", "", io.Discard)
		n := fs.Int("n", 1, "")
		pos, err := ParseArgs(fs, tc.args)
		if err != nil || !slices.Equal(pos, tc.pos) || *n != tc.n {
			t.Errorf("%q: args %q, n %d, err %v; want %q, %d", tc.args, pos, *n, err, tc.pos, tc.n)
		}
	}
	var help bytes.Buffer
	fs := NewFlagSet("t", "Usage: t [flags]", "Examples: t -n 2\n", &help)
	fs.Int("n", 1, "how many")
	if _, err := ParseArgs(fs, []string{"x", "-h"}); !errors.Is(err, ErrHelp) {
		t.Errorf("-h: %v, want ErrHelp", err)
	}
	if got := help.String(); !strings.Contains(got, "Usage: t [flags]") || !strings.Contains(got, "how many") || !strings.Contains(got, "Examples: t -n 2") {
		t.Errorf("-h printed %q, want the synopsis, the flags and the examples", got)
	}
	// A bad flag is one line, naming the likely flag and --help; the
	// usage is not printed.
	help.Reset()
	fs = NewFlagSet("t", "Usage: t [flags]", "", &help)
	fs.Int("count", 1, "")
	var ue UsageError
	if _, err := ParseArgs(fs, []string{"-coutn"}); !errors.As(err, &ue) || err.Error() != "t: unknown flag --coutn (did you mean --count?); --help lists the flags" {
		t.Errorf("unknown flag: %v, want a UsageError naming --count and --help", err)
	}
	if help.Len() != 0 {
		t.Errorf("a bad flag printed %q", help.String())
	}
}

// TestDispatchAndReport: a subcommand runs with the rest of the
// arguments; a missing or unknown one is a usage error (exit 2) that
// names the command; help exits 0; other errors exit 1.
func TestDispatchAndReport(t *testing.T) {
	var got []string
	subs := []Subcommand{
		{Name: "ok", Summary: "succeeds", Run: func(args []string, _, _ io.Writer) error { got = args; return nil }},
		{Name: "fail", Summary: "fails", Run: func([]string, io.Writer, io.Writer) error { return errors.New("boom") }},
	}
	for _, tc := range []struct {
		group  string
		args   []string
		code   ExitCode
		stderr string
	}{
		{"topic", []string{"ok", "x", "y"}, ExitOK, ""},
		{"topic", []string{"fail"}, ExitError, "prog: boom\n"},
		{"topic", nil, ExitUsage, "prog: topic: missing subcommand"},
		{"topic", []string{"frob"}, ExitUsage, `prog: topic: unknown subcommand "frob" (want one of: ok, fail; see 'prog topic --help')`},
		{"", []string{"frob"}, ExitUsage, `prog: unknown subcommand "frob" (want one of: ok, fail; see 'prog --help')`},
		{"topic", nil, ExitUsage, "Usage: prog topic <subcommand>"},
	} {
		var errb bytes.Buffer
		code := Report("prog", Dispatch("prog", tc.group, "About.", subs, tc.args, io.Discard, &errb), &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.stderr) {
			t.Errorf("%q %q: exit %d, stderr %q; want %d, %q", tc.group, tc.args, code, errb.String(), tc.code, tc.stderr)
		}
	}
	// Help asked for goes to stdout, and nothing to stderr.
	var out, errb bytes.Buffer
	if code := Report("prog", Dispatch("prog", "", "About.", subs, []string{"--help"}, &out, &errb), &errb); code != ExitOK ||
		!strings.Contains(out.String(), "Usage: prog <subcommand>") || errb.Len() != 0 {
		t.Errorf("--help: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("subcommand got %q", got)
	}
}

// TestConnFlags: --brokers defaults to BrokersEnv, then DefaultBrokers;
// Seeds splits and checks it.
func TestConnFlags(t *testing.T) {
	t.Setenv(BrokersEnv, "")
	var c ConnFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.Register(fs, 7*time.Second, "")
	if c.Brokers != DefaultBrokers || c.Timeout != 7*time.Second {
		t.Errorf("defaults: %q %v", c.Brokers, c.Timeout)
	}
	t.Setenv(BrokersEnv, " h1:1,h2:2 ")
	c = ConnFlags{}
	c.Register(flag.NewFlagSet("t", flag.ContinueOnError), 0, "")
	if seeds, err := c.Seeds(); err != nil || !slices.Equal(seeds, []string{"h1:1", "h2:2"}) {
		t.Errorf("from %s: %q, %v", BrokersEnv, seeds, err)
	}
	for _, bad := range []string{"", " , ", "http://h:1", "h:0", "h:x"} {
		c.Brokers = bad
		var ue UsageError
		if _, err := c.Seeds(); !errors.As(err, &ue) {
			t.Errorf("--brokers %q: %v, want a UsageError", bad, err)
		}
	}
}
