// Command ringlog is the broker binary: the broker (serve) and the tools
// around it. The benchmark harness is the separate binary ringlog-perf
// (cmd/ringlog-perf), so that this one does not link the load generator
// and its chart and flame-graph renderers.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/ringlog/ringlog/internal/cli"
)

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
		{"perf", "moved to the ringlog-perf binary (benchmarks, charts, flame graphs)", runPerfMoved},
	}
}

func main() {
	os.Exit(int(run(os.Args[1:], os.Stdout, os.Stderr)))
}

func run(args []string, stdout, stderr io.Writer) cli.ExitCode {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		topUsage(stderr)
		if len(args) == 0 {
			return cli.ExitUsage
		}
		return cli.ExitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return cli.Report("ringlog", c.run(args[1:], stdout, stderr), stderr)
		}
	}
	fmt.Fprintf(stderr, "ringlog: unknown command %q\n\n", args[0])
	topUsage(stderr)
	return cli.ExitUsage
}

func topUsage(w io.Writer) {
	fmt.Fprintf(w, "ringlog: a Kafka-compatible streaming log broker\n\nUsage:\n  ringlog <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'ringlog <command> --help' for a command's flags and examples.\n")
}

// runPerfMoved tells whoever runs 'ringlog perf' where the benchmarks went.
func runPerfMoved(_ []string, _, _ io.Writer) error {
	return cli.Usagef("perf moved to its own binary, ringlog-perf ('make build-perf' puts it in bin/; or go run ./cmd/ringlog-perf): the broker binary does not link the load generator and its chart renderers")
}
