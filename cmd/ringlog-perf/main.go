// Command ringlog-perf is ringlog's benchmark harness: load generators that
// measure any Kafka-compatible broker over the Kafka protocol (ringlog or
// another: point --brokers at it), the standard matrix behind 'make perf'
// with its charts and summary, and a flame-graph renderer for pprof
// profiles.
//
// It is a binary of its own, apart from the broker's (cmd/ringlog), so that
// the broker does not link the load generator, the statistics and the
// plotting stack (gonum/plot, fonts, image and PDF encoders) it never uses.
package main

import (
	"io"
	"os"

	"github.com/ringlog/ringlog/internal/cli"
)

const about = "Benchmarks any Kafka-compatible broker over the Kafka protocol (ringlog or another: point --brokers at it),\nand renders flame graphs of pprof profiles."

func main() {
	os.Exit(int(run(os.Args[1:], os.Stdout, os.Stderr)))
}

// run runs the subcommand named by args[0] and returns the exit code.
func run(args []string, stdout, stderr io.Writer) cli.ExitCode {
	return cli.Report("ringlog-perf", cli.Dispatch("ringlog-perf", "", about, []cli.Subcommand{
		{Name: "produce", Summary: "producer throughput and ack latency", Run: runPerfProduce},
		{Name: "ingest", Summary: "broker produce throughput: prebuilt batches in plain Produce requests, no client library", Run: runPerfIngest},
		{Name: "consume", Summary: "consumer throughput, reading a topic from offset 0", Run: runPerfConsume},
		{Name: "fetch", Summary: "broker fetch throughput: plain Fetch requests, no record decoding", Run: runPerfFetch},
		{Name: "e2e", Summary: "end-to-end latency (send → consume) at a fixed rate", Run: runPerfE2E},
		{Name: "e2e-raw", Summary: "end-to-end latency with plain Produce and Fetch requests, no client library", Run: runPerfE2ERaw},
		{Name: "relay-floor", Summary: "the latency floor of this machine: e2e-raw's clients and a relay that only moves the records", Run: runPerfRelayFloor},
		{Name: "relay-serve", Summary: "serve the relay of relay-floor (which starts it)", Run: runRelayServe},
		{Name: "kfake-serve", Summary: "serve franz-go's in-memory kfake, the suite's CPU reference (the suite starts it)", Run: runKfakeServe},
		{Name: "share", Summary: "share-group (KIP-932 queue) throughput with 1, 4, 16 consumers of one partition", Run: runPerfShare},
		{Name: "rebalance", Summary: "how long a consumer group takes to absorb one more member, and what it pauses: KIP-848 vs classic", Run: runPerfRebalance},
		{Name: "scale", Summary: "sweep partitions and producers; charts and JSONL", Run: runPerfScale},
		{Name: "suite", Summary: "the standard matrix of 'make perf' with targets and a summary", Run: runPerfSuite},
		{Name: "report", Summary: "draw a suite's charts, targets and summary again from its results.jsonl", Run: runPerfReport},
		{Name: "flamegraph", Summary: "render a pprof profile (URL or file) as a flame graph SVG", Run: runPerfFlamegraph},
	}, args, stdout, stderr), stderr)
}
