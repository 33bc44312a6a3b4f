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
		{"group", "list and describe consumer groups (members, offsets, lag)", runGroup},
		{"produce", "produce standard input lines to a topic", runProduce},
		{"consume", "print records of a topic", runConsume},
		{"dump-segment", "print and verify segment and index files (offline)", runDumpSegment},
		{"perf", "benchmark a Kafka-compatible broker; charts and flame graphs", runPerf},
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
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(args[1:], stdout, stderr)
			return report(err, stderr)
		}
	}
	fmt.Fprintf(stderr, "ringlog: unknown command %q\n\n", args[0])
	topUsage(stderr)
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

var errHelp = errors.New("help requested")

func topUsage(w io.Writer) {
	fmt.Fprintf(w, "ringlog: a Kafka-compatible streaming log broker\n\nUsage:\n  ringlog <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'ringlog <command> --help' for a command's flags and examples.\n")
}
