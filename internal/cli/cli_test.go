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
	fs := NewFlagSet("t", "", "", io.Discard)
	if _, err := ParseArgs(fs, []string{"x", "-h"}); !errors.Is(err, ErrHelp) {
		t.Errorf("-h: %v, want ErrHelp", err)
	}
	fs = NewFlagSet("t", "", "", io.Discard)
	var ue UsageError
	if _, err := ParseArgs(fs, []string{"-nope"}); !errors.As(err, &ue) {
		t.Errorf("unknown flag: %v, want a UsageError", err)
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
		{"", []string{"--help"}, ExitOK, "Usage: prog <subcommand>"},
	} {
		var errb bytes.Buffer
		code := Report("prog", Dispatch("prog", tc.group, "About.", subs, tc.args, io.Discard, &errb), &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.stderr) {
			t.Errorf("%q %q: exit %d, stderr %q; want %d, %q", tc.group, tc.args, code, errb.String(), tc.code, tc.stderr)
		}
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
