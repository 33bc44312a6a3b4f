// Command ringlog is the one ringlog binary: the broker (serve) and the
// tools around it.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// exitCode is returned by commands to say how the process should end.
type exitCode int

// Exit codes scripts can rely on.
const (
	exitOK    exitCode = 0
	exitError exitCode = 1 // the operation failed
	exitUsage exitCode = 2 // bad flags or arguments
)

// usageError marks errors caused by how the command was called.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the broker", runServe},
		{"topic", "create, list, describe, alter and delete topics", runTopic},
		{"group", "list, describe, reset and delete consumer groups", runGroup},
		{"produce", "produce standard input lines to a topic", runProduce},
		{"consume", "print records of a topic", runConsume},
		{"dump-segment", "print and verify segment and index files (offline)", runDumpSegment},
		{"perf", "benchmark a Kafka-compatible broker; charts and flame graphs", runPerf},
		{"version", "print the version, Go version and source revision", runVersion},
	}
}

func main() {
	os.Exit(int(run(os.Args[1:], os.Stdout, os.Stderr)))
}

func run(args []string, stdout, stderr io.Writer) exitCode {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		topUsage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "--version" || args[0] == "-version" {
		return report(runVersion(args[1:], stdout, stderr), stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(args[1:], stdout, stderr)
			return report(err, stderr)
		}
	}
	topUsage(stderr)
	msg := fmt.Sprintf("ringlog: unknown command %q", args[0])
	if s := closestCommand(args[0]); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	fmt.Fprintln(stderr, msg)
	return exitUsage
}

func report(err error, stderr io.Writer) exitCode {
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "ringlog: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stderr, "ringlog: %v\n", err)
	return exitError
}

// closestCommand is the command nearest to name by edit distance, when
// near enough to be a typo.
func closestCommand(name string) string {
	best, bestD := "", 0
	for _, c := range commands() {
		if d := editDistance(name, c.name); best == "" || d < bestD {
			best, bestD = c.name, d
		}
	}
	if bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

var errHelp = errors.New("help requested")

func topUsage(w io.Writer) {
	fmt.Fprintf(w, "ringlog: a Kafka-compatible streaming log broker\n\nUsage:\n  ringlog <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'ringlog <command> --help' for a command's flags and examples, 'ringlog --version' for the version.\n")
}
