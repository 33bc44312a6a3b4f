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
		{"group", "list, describe, reset and delete consumer groups", runGroup},
		{"cluster", "the cluster at a glance: brokers, controller, leaders, under-replicated and offline partitions", runCluster},
		{"txn", "list transactional producers and their open transactions", runTxn},
		{"produce", "produce standard input lines to a topic", runProduce},
		{"consume", "print records of a topic", runConsume},
		{"user", "add, list and delete SASL/SCRAM users (of a running broker, or offline with --data-dir)", runUser},
		{"acl", "add, list and delete ACLs of a running broker or cluster", runACL},
		{"tls", "make a CA and broker and client certificates (tls init)", runTLS},
		{"dump-segment", "print and verify segment and index files (offline)", runDumpSegment},
		{"dev-s3", "serve a local S3-compatible object store for trying tiered storage (not for production)", runDevS3},
		{"recover-metadata", "rebuild a lost or damaged topic registry from its backup and the logs (offline)", runRecoverMetadata},
		{"perf", "moved to the ringlog-perf binary (benchmarks, charts, flame graphs)", runPerfMoved},
		{"version", "print the version, Go version and source revision", runVersion},
	}
}

func main() {
	os.Exit(int(run(os.Args[1:], os.Stdout, os.Stderr)))
}

func run(args []string, stdout, stderr io.Writer) cli.ExitCode {
	if len(args) == 0 {
		topUsage(stderr)
		return cli.ExitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		topUsage(stdout) // asked for: output, not an error
		return cli.ExitOK
	}
	if args[0] == "--version" || args[0] == "-version" {
		return cli.Report("ringlog", runVersion(args[1:], stdout, stderr), stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return cli.Report("ringlog", c.run(args[1:], stdout, stderr), stderr)
		}
	}
	topUsage(stderr)
	msg := fmt.Sprintf("ringlog: unknown command %q", args[0])
	if s := closestCommand(args[0]); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	fmt.Fprintln(stderr, msg)
	return cli.ExitUsage
}

// closestCommand is the command nearest to name by edit distance, when
// near enough to be a typo.
func closestCommand(name string) string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return cli.Closest(name, names)
}

func topUsage(w io.Writer) {
	fmt.Fprintf(w, "ringlog: a Kafka-compatible streaming log broker\n\nUsage:\n  ringlog <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-18s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'ringlog <command> --help' for a command's flags and examples, 'ringlog --version' for the version.\n")
}

// runPerfMoved tells whoever runs 'ringlog perf' where the benchmarks went.
func runPerfMoved(_ []string, _, _ io.Writer) error {
	return cli.Usagef("perf moved to its own binary, ringlog-perf ('make build-perf' puts it in bin/; or go run ./cmd/ringlog-perf): the broker binary does not link the load generator and its chart renderers")
}
