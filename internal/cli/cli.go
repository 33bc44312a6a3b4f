// Package cli is the command-line plumbing shared by ringlog's binaries
// (ringlog and ringlog-perf): exit codes and usage errors, flag sets whose
// help shows a synopsis and examples, flags accepted anywhere among the
// arguments, subcommand dispatch, and the --brokers / --timeout flags of
// every command that talks to a broker.
//
// It knows nothing about what the commands do.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// ExitCode is how a command's process ends; scripts can rely on it.
type ExitCode int

// Exit codes.
const (
	ExitOK    ExitCode = 0
	ExitError ExitCode = 1 // the operation failed
	ExitUsage ExitCode = 2 // bad flags or arguments
)

// UsageError marks an error caused by how the command was called.
type UsageError struct{ msg string }

// Error returns the message.
func (e UsageError) Error() string { return e.msg }

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return UsageError{fmt.Sprintf(format, args...)}
}

// ErrHelp is returned by a command that printed its help on request: the
// process exits with ExitOK.
var ErrHelp = errors.New("help requested")

// Report prints a command's error as "prog: message" on stderr (nothing
// for nil and ErrHelp) and returns the exit code it calls for.
func Report(prog string, err error, stderr io.Writer) ExitCode {
	if err == nil || errors.Is(err, ErrHelp) {
		return ExitOK
	}
	fmt.Fprintf(stderr, "%s: %v\n", prog, err)
	var ue UsageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	return ExitError
}

// NewFlagSet makes a flag set whose usage is the given synopsis, the flags
// and the examples. The usage is printed to stdout, and only on request
// (--help or -h): help is output a user may page or grep, not an error.
func NewFlagSet(name, synopsis, examples string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\nFlags:\n", strings.TrimLeft(synopsis, "\n"))
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), examples)
	}
	return fs
}

// ParseFlags parses args with fs the flag package's way (flags first).
// --help prints the usage to fs's output and returns ErrHelp; a bad flag
// returns a UsageError naming the flag and, when one is close enough to be
// a typo, the flag that was probably meant, and pointing at --help (the
// usage itself is not printed: the error stays readable on a terminal).
func ParseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	// The flag package prints its own error line and the usage on every
	// failure; silence both.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		if usage != nil {
			usage()
		} else {
			fs.PrintDefaults()
		}
		return ErrHelp
	}
	msg := strings.Replace(err.Error(), " -", " --", 1)
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		msg = "unknown flag --" + name
		if s := closestFlag(fs, name); s != "" {
			msg += " (did you mean --" + s + "?)"
		}
	}
	return UsageError{fmt.Sprintf("%s: %s; --help lists the flags", fs.Name(), msg)}
}

// closestFlag is the flag of fs nearest to name, if near enough to be a
// typo ("" otherwise).
func closestFlag(fs *flag.FlagSet, name string) string {
	name = strings.TrimLeft(name, "-")
	if i := strings.IndexByte(name, '='); i >= 0 {
		name = name[:i]
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return Closest(name, names)
}

// Closest is the candidate nearest to name by edit distance, when it is
// near enough to be a typo of it; "" otherwise.
func Closest(name string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		if d := editDistance(name, c); best == "" || d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// ParseArgs parses flags placed anywhere among the arguments (the flag
// package alone stops at the first argument) and returns the arguments.
// Everything after "--" is an argument.
func ParseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := ParseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// Subcommand is one verb of a command group such as "ringlog topic".
type Subcommand struct {
	Name    string
	Summary string
	Run     func(args []string, stdout, stderr io.Writer) error
}

// Dispatch runs the subcommand args[0] of the group (e.g. prog "ringlog",
// group "topic"; an empty group when the subcommands are the program's
// own, as in "ringlog-perf produce"). about is printed under the usage
// line.
func Dispatch(prog, group, about string, subs []Subcommand, args []string, stdout, stderr io.Writer) error {
	cmd, prefix := prog, ""
	if group != "" {
		cmd, prefix = prog+" "+group, group+": "
	}
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s <subcommand> [flags] [arguments]\n\n%s\n\nSubcommands:\n", cmd, about)
		for _, s := range subs {
			fmt.Fprintf(w, "  %-14s %s\n", s.Name, s.Summary)
		}
		fmt.Fprintf(w, "\nRun '%s <subcommand> --help' for its flags and examples.\n", cmd)
	}
	if len(args) == 0 {
		usage(stderr)
		return Usagef("%smissing subcommand", prefix)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout) // asked for: output, not an error
		return ErrHelp
	}
	names := make([]string, len(subs))
	for i, s := range subs {
		if s.Name == args[0] {
			return s.Run(args[1:], stdout, stderr)
		}
		names[i] = s.Name
	}
	return Usagef("%sunknown subcommand %q (want one of: %s; see '%s --help')", prefix, args[0], strings.Join(names, ", "), cmd)
}

// BrokersEnv overrides the default of --brokers.
const BrokersEnv = "RINGLOG_BROKERS"

// DefaultBrokers is the default of --brokers when BrokersEnv is not set.
const DefaultBrokers = "127.0.0.1:9092"

// ConnFlags are the flags of every command that talks to a broker.
type ConnFlags struct {
	// Brokers is --brokers as given: a comma-separated host:port list.
	Brokers string
	// Timeout is --timeout.
	Timeout time.Duration
}

// Register registers --brokers and --timeout (with the given default and
// help) on fs.
func (c *ConnFlags) Register(fs *flag.FlagSet, timeout time.Duration, timeoutHelp string) {
	def := strings.TrimSpace(os.Getenv(BrokersEnv))
	if def == "" {
		def = DefaultBrokers
	}
	fs.StringVar(&c.Brokers, "brokers", def, "comma-separated `host:port` list of brokers to start from (env "+BrokersEnv+")")
	fs.DurationVar(&c.Timeout, "timeout", timeout, timeoutHelp)
}

// Seeds splits --brokers into addresses, refusing an empty list and
// entries that are not host:port.
func (c *ConnFlags) Seeds() ([]string, error) {
	var out []string
	for _, s := range strings.Split(c.Brokers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, Usagef("--brokers is empty: give host:port (e.g. %s), or set %s", DefaultBrokers, BrokersEnv)
	}
	for _, s := range out {
		if strings.Contains(s, "/") {
			return nil, Usagef("--brokers: %q is not host:port", s)
		}
		if _, port, err := net.SplitHostPort(s); err == nil {
			if p, perr := strconv.Atoi(port); perr != nil || p <= 0 || p > 65535 {
				return nil, Usagef("--brokers: bad port in %q", s)
			}
		}
	}
	return out, nil
}
