package main

// The subcommands: thin commands over package perf (flags in, progress
// lines and a JSON result line out).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/pprof/profile"

	"github.com/ringlog/ringlog/internal/cli"
	"github.com/ringlog/ringlog/perf"
	"github.com/ringlog/ringlog/perf/flame"
)

// rateFlag is --rate: records/s, or "max".
type rateFlag float64

func (r *rateFlag) String() string {
	if *r == 0 {
		return "max"
	}
	return strconv.FormatFloat(float64(*r), 'g', -1, 64)
}

func (r *rateFlag) Set(s string) error {
	if s == "max" || s == "0" {
		*r = 0
		return nil
	}
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "k"):
		s, mult = strings.TrimSuffix(s, "k"), 1e3
	case strings.HasSuffix(s, "m"):
		s, mult = strings.TrimSuffix(s, "m"), 1e6
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return errors.New("want records per second (e.g. 10000, 50k) or max")
	}
	*r = rateFlag(v * mult)
	return nil
}

// intList is a comma-separated list of positive integers.
type intList []int

func (l *intList) String() string {
	var s []string
	for _, v := range *l {
		s = append(s, strconv.Itoa(v))
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("want a comma-separated list of positive integers, got %q", v)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

// floatList is a comma-separated list of numbers.
type floatList []float64

func (l *floatList) String() string {
	var s []string
	for _, v := range *l {
		s = append(s, strconv.FormatFloat(v, 'g', -1, 64))
	}
	return strings.Join(s, ",")
}

func (l *floatList) Set(v string) error {
	var out []float64
	if strings.TrimSpace(v) == "" {
		*l = nil
		return nil
	}
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a comma-separated list of positive numbers, got %q", v)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

// perfFlags registers the flags of a run on fs, filling c (whose values
// are the defaults).
func perfFlags(fs *flag.FlagSet, c *perf.Config, cf *cli.ConnFlags) {
	cf.Register(fs, time.Duration(c.Timeout), "bound on admin requests, the final flush and draining")
	fs.StringVar(&c.Topic, "topic", "", "topic to use (default: a fresh perf-* topic, deleted afterwards; a named topic that does not exist is created and kept)")
	fs.BoolVar(&c.KeepTopic, "keep-topic", false, "keep the topic the run created")
	fs.IntVar(&c.ReplicationFactor, "replication-factor", c.ReplicationFactor, "replication factor of created topics (-1: the broker's default)")
	fs.IntVar(&c.RecordSize, "record-size", c.RecordSize, "value size in `bytes` (at least 8: the send time travels in the first 8)")
	fs.StringVar(&c.Keys.Kind, "keys", c.Keys.Kind, "key distribution: none (null keys), uniform (over --key-count keys) or hot (--hot-share of records with one key, the rest uniform)")
	fs.IntVar(&c.Keys.Count, "key-count", c.Keys.Count, "distinct keys for --keys uniform|hot")
	fs.Float64Var(&c.Keys.HotShare, "hot-share", c.Keys.HotShare, "share of records carrying the hot key (--keys hot)")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "partitions of a created topic")
	fs.IntVar(&c.Producers, "producers", c.Producers, "producer clients")
	fs.IntVar(&c.Consumers, "consumers", c.Consumers, "consumer clients (consume, e2e); partitions are split among them")
	fs.StringVar(&c.Acks, "acks", c.Acks, "0, 1 or all")
	fs.DurationVar((*time.Duration)(&c.Linger), "linger", c.Linger.D(), "how long a partition's batch waits for more records")
	fs.IntVar(&c.BatchBytes, "batch-bytes", c.BatchBytes, "largest record batch in `bytes`")
	fs.StringVar(&c.Compression, "compression", c.Compression, "none, gzip, snappy, lz4 or zstd")
	fs.IntVar(&c.MaxInflight, "max-inflight", c.MaxInflight, "produce requests in flight per connection for acks 0 and 1 (acks=all is idempotent: 5)")
	fs.IntVar(&c.BufferBytes, "buffer-bytes", c.BufferBytes, "bytes a producer client buffers before sending blocks (keeps max-rate runs saturated)")
	fs.Var((*rateFlag)(&c.Rate), "rate", "target records/s over all producers (e.g. 10000, 50k), or max (default max)")
	fs.DurationVar((*time.Duration)(&c.Duration), "duration", c.Duration.D(), "run time, warm-up included")
	fs.Int64Var(&c.Records, "records", 0, "stop after this many records instead of --duration")
	fs.DurationVar((*time.Duration)(&c.Warmup), "warmup", c.Warmup.D(), "first part of the run left out of the results")
	fs.Int64Var(&c.PrefillBytes, "prefill-bytes", c.PrefillBytes, "consume: bytes written into a topic the run creates before reading it")
	fs.IntVar(&c.FetchBytes, "fetch-bytes", c.FetchBytes, "consumer fetch size per partition in `bytes`")
	fs.DurationVar((*time.Duration)(&c.ReportEvery), "report-every", c.ReportEvery.D(), "interval of the progress lines (0: none)")
	fs.StringVar(&c.Label, "label", "", "name of the run in the result")
	fs.IntVar(&c.Procs, "procs", 0, "GOMAXPROCS of the load generator during the run (0: all CPUs); 1 keeps a generator that needs less than a core from taking CPU from a broker on the same machine")
	c.BrokerPID, _ = strconv.Atoi(os.Getenv("RINGLOG_PID"))
	fs.IntVar(&c.BrokerPID, "broker-pid", c.BrokerPID, "process id of a broker on this machine: its CPU use is reported too (env RINGLOG_PID)")
}

// finishPerfFlags copies the connection flags into c and validates it.
func finishPerfFlags(c *perf.Config, cf *cli.ConnFlags) error {
	seeds, err := cf.Seeds()
	if err != nil {
		return err
	}
	c.Brokers = seeds
	c.Timeout = perf.Duration(cf.Timeout)
	if err := c.Validate(); err != nil {
		return cli.Usagef("%v", err)
	}
	return nil
}

// perfContext is canceled by SIGINT or SIGTERM.
func perfContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

const perfRunExamples = `
Output: a progress line every --report-every in the form of Kafka's perf
tools ("N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max
latency."; MB = 2^20 bytes), a summary line, and last one JSON line with the
configuration, environment (CPU, cores, kernel, Go, broker version and I/O
backend) and results (latency percentiles in ms: p50, p99, p99.9, p99.99,
max). Get it with: ringlog-perf ... | tail -1

With --rate, every record is due at a time given by the schedule alone and
its latency is measured from that time (coordinated omission avoided); at
max rate latency is measured from the send call.

Exit status: 0 done, 1 failed (e.g. nothing acknowledged), 2 usage.
`

func perfRun(mode, synopsis, examples string, run func(context.Context, perf.Config, io.Writer) (*perf.Result, error)) func([]string, io.Writer, io.Writer) error {
	return perfRunNamed(mode, mode, synopsis, examples, run)
}

func perfRunNamed(name, mode, synopsis, examples string, run func(context.Context, perf.Config, io.Writer) (*perf.Result, error)) func([]string, io.Writer, io.Writer) error {
	return func(args []string, stdout, stderr io.Writer) (err error) {
		c := perf.DefaultConfig(mode)
		var cf cli.ConnFlags
		var cpuProfile string
		fs := cli.NewFlagSet(name, synopsis, examples+perfRunExamples, stdout)
		perfFlags(fs, &c, &cf)
		fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the load generator itself to `file`")
		rest, err := cli.ParseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(rest) > 0 {
			return cli.Usagef("%s takes no arguments, got %q", name, rest)
		}
		if err := finishPerfFlags(&c, &cf); err != nil {
			return err
		}
		if cpuProfile != "" {
			f, err := os.Create(cpuProfile)
			if err != nil {
				return err
			}
			defer func() {
				if cerr := f.Close(); cerr != nil && err == nil {
					err = fmt.Errorf("--cpuprofile %s: %w", cpuProfile, cerr)
				}
			}()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		ctx, cancel := perfContext()
		defer cancel()
		res, err := run(ctx, c, stdout)
		if res != nil {
			fmt.Fprintf(stdout, "%s\n", res.JSON())
		}
		return err
	}
}

var runPerfProduce = perfRun(perf.ModeProduce, `
Usage: ringlog-perf produce [flags]

Producer benchmark: --producers clients send --record-size records to a
topic at --rate (or as fast as they are accepted) for --duration.
`, `
Examples:
  ringlog-perf produce --record-size 1024 --partitions 16 --acks 1 --duration 30s
  ringlog-perf produce --acks all --rate 50k --producers 2 --keys uniform --key-count 10000
  ringlog-perf produce --brokers kafka1:9092 --compression zstd --linger 5ms --batch-bytes 262144
`, perf.RunProduce)

var runPerfIngest = perfRunNamed("ingest", perf.ModeProduce, `
Usage: ringlog-perf ingest [flags]

Broker produce throughput: for --duration, --producers connections per
partition leader send one prebuilt Produce request (a batch of
--record-size records for each partition, about --batch-bytes in all,
--compression applied once) over and over, --max-inflight at a time.
No client library builds or encodes records, so this is what the broker
ingests (CRC checks, offsets, writes) without a producer client competing
for the cores (compare with 'ringlog-perf produce'). Max rate only; --acks 1 or
all. MB/s counts record values.
`, `
Examples:
  ringlog-perf ingest --record-size 1024 --partitions 16 --acks 1 --duration 10s
  ringlog-perf ingest --acks all --producers 2 --batch-bytes 262144
`, perf.RunRawProduce)

var runPerfConsume = perfRun(perf.ModeConsume, `
Usage: ringlog-perf consume [flags]

Consumer benchmark: --consumers clients read a topic from offset 0 to the
end offsets found at the start (partitions assigned directly, no group).
Without --topic (or with a topic that does not exist) the run creates a
topic and first fills it with --prefill-bytes of records (not measured).
`, `
Examples:
  ringlog-perf consume --record-size 1024 --partitions 16 --prefill-bytes 1073741824
  ringlog-perf consume --topic events --consumers 4
`, perf.RunConsume)

var runPerfFetch = perfRunNamed("fetch", perf.ModeConsume, `
Usage: ringlog-perf fetch [flags]

Broker fetch throughput: --consumers fetchers read a topic from offset 0
to the end offsets found at the start with plain Fetch requests, counting
record batches from their headers without decoding any record. This is
what the broker delivers, without a client library's decoding competing
for the cores (compare with 'ringlog-perf consume'). MB/s counts batch bytes.
`, `
Examples:
  ringlog-perf fetch --record-size 1024 --partitions 16 --prefill-bytes 1073741824
  ringlog-perf fetch --topic events --consumers 2
`, perf.RunRawFetch)

var runPerfE2E = perfRun(perf.ModeE2E, `
Usage: ringlog-perf e2e [flags]

End-to-end latency: consumers read from the end of the topic while
producers send at --rate; each record carries its scheduled send time and
the consumer measures scheduled send → record received. Produce-ack
latency is reported as well.
`, `
Examples:
  ringlog-perf e2e --rate 10000 --record-size 1024 --partitions 16 --duration 30s
  ringlog-perf e2e --rate 100k --acks all --producers 2 --consumers 2
`, perf.RunE2E)

var runPerfE2ERaw = perfRunNamed("e2e-raw", perf.ModeE2E, `
Usage: ringlog-perf e2e-raw [flags]

End-to-end latency without client libraries: each producer sends the
records that fell due as one plain Produce request with one partition's
batch (the next partition each time, as Kafka's sticky partitioner does
for keyless records), waking at most every --linger, with at most
--max-inflight requests in flight per leader; each consumer long-polls its
share of the partitions with plain Fetch requests in a fetch session
(KIP-227: after the first, each names only the partitions that moved, as
Kafka's consumers do; sessionless when the broker declines). Due times,
latency and output are as in 'ringlog-perf e2e'. The broker does the same work; what
is left out is the client libraries' per-record work, which on cores the
broker shares competes with it (compare the two at the same --rate).
Fixed --rate only; --acks 1 or all.
`, `
Examples:
  ringlog-perf e2e-raw --rate 10000 --record-size 1024 --partitions 16 --duration 30s --procs 1
  ringlog-perf e2e-raw --rate 400k --acks all
`, perf.RunRawE2E)

var runPerfRelayFloor = perfRunNamed("relay-floor", perf.ModeE2E, `
Usage: ringlog-perf relay-floor [flags]

The latency floor this machine sets for any broker: e2e-raw's paced
producers and long-polling consumer (one), talking to a relay in a process
of its own ('ringlog-perf relay-serve', started and stopped by this
command) that does nothing but move the records: no Kafka protocol, no
disk, a goroutine per connection. Each record still costs what it costs
between processes (a timer wake-up, a request and its answer, a long-poll
answer and the next poll), so on a machine the relay shares with the load
generator its latency is what scheduling alone adds; a broker's distance
from it, measured side by side, is the broker's own share. Output is as
in 'ringlog-perf e2e' (the relay's CPU as the broker's). Fixed --rate only;
--brokers, --topic, --partitions, --acks and --compression do not apply.
`, `
Examples:
  ringlog-perf relay-floor --rate 10000 --record-size 1024 --duration 12s --warmup 2s --procs 1
`, func(ctx context.Context, c perf.Config, w io.Writer) (*perf.Result, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("relay-floor: find this program to start the relay: %w", err)
	}
	relay, err := perf.StartRelayProcess(exe, "relay-serve")
	if err != nil {
		return nil, err
	}
	defer relay.Stop()
	c.BrokerPID = relay.PID
	return perf.RunRelayFloor(ctx, c, relay.Addr, w)
})

const relayServeUsage = `
Usage: ringlog-perf relay-serve [--addr host:port]

Serves the relay of 'ringlog-perf relay-floor' (which starts it) until
SIGINT or SIGTERM. Once it listens it prints one line:
  ringlog-perf relay ready addr=HOST:PORT
`

func runRelayServe(args []string, stdout, stderr io.Writer) error {
	return runHelperServe("relay-serve", relayServeUsage, args, stdout, perf.ServeRelay)
}

const kfakeServeUsage = `
Usage: ringlog-perf kfake-serve [--addr host:port]

Serves franz-go's in-memory fake Kafka (kfake, one broker: records kept in
memory, nothing written to disk) until SIGINT or SIGTERM: the CPU reference
of 'ringlog-perf suite', which starts it. Once it listens it prints the
relay's ready line:
  ringlog-perf relay ready addr=HOST:PORT
`

func runKfakeServe(args []string, stdout, stderr io.Writer) error {
	return runHelperServe("kfake-serve", kfakeServeUsage, args, stdout, perf.ServeKfake)
}

// runHelperServe is a helper process the suite starts (relay-serve,
// kfake-serve): it listens on --addr, prints perf.RelayReadyPrefix and the
// address once serve calls its ready, and serves until SIGINT or SIGTERM.
func runHelperServe(name, usage string, args []string, stdout io.Writer, serve func(ctx context.Context, ln net.Listener, ready func()) error) error {
	fs := cli.NewFlagSet(name, usage, "\nExamples:\n  ringlog-perf "+name+" --addr 127.0.0.1:0\n", stdout)
	addr := fs.String("addr", "127.0.0.1:0", "`host:port` to listen on")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("%s takes no arguments, got %q", name, rest)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	ctx, cancel := perfContext()
	defer cancel()
	return serve(ctx, ln, func() { fmt.Fprintf(stdout, "%s%s\n", perf.RelayReadyPrefix, ln.Addr()) })
}

const perfScaleUsage = `
Usage: ringlog-perf scale [flags]

Sweeps partitions and producers at max rate, then runs end-to-end latency
at fractions of the best throughput, and draws the charts (SVG, gonum/plot):
throughput and records/s vs partitions, throughput vs producers, latency
percentiles vs load. Results and charts go to a new folder
<out>/<YYYYMMDD-HHMM>-<host>/ with results.jsonl (one JSON result per line).
`

const perfScaleExamples = `
Examples:
  ringlog-perf scale --sweep-partitions 1,2,4,8,16,32,64 --sweep-producers 1,2,4 --record-size 1024
  ringlog-perf scale --acks all --load 0.1,0.5,0.9 --duration 10s --warmup 2s
  ringlog-perf scale --brokers kafka1:9092 --out /tmp/kafka-results

Exit status: 0 done, 1 a point failed, 2 usage.
`

func runPerfScale(args []string, stdout, stderr io.Writer) error {
	c := perf.DefaultConfig(perf.ModeProduce)
	c.Duration = perf.Duration(6 * time.Second)
	c.Warmup = perf.Duration(time.Second)
	var cf cli.ConnFlags
	parts := intList{1, 2, 4, 8, 16, 32, 64}
	prods := intList{1}
	load := floatList{0.1, 0.25, 0.5, 0.75, 0.9}
	var out, dir string
	fs := cli.NewFlagSet("scale", perfScaleUsage, perfScaleExamples, stdout)
	perfFlags(fs, &c, &cf)
	fs.Var(&parts, "sweep-partitions", "partition counts to sweep (comma-separated)")
	fs.Var(&prods, "sweep-producers", "producer counts to sweep (comma-separated)")
	fs.Var(&load, "load", "fractions of the best throughput for the latency runs (comma-separated; empty: none)")
	fs.StringVar(&out, "out", "perf/results", "folder in which the results folder is made")
	fs.StringVar(&dir, "dir", "", "write into exactly this folder instead")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("scale takes no arguments, got %q", rest)
	}
	if c.Topic != "" {
		return cli.Usagef("scale makes its own topics: --topic is not allowed")
	}
	if err := finishPerfFlags(&c, &cf); err != nil {
		return err
	}
	ctx, cancel := perfContext()
	defer cancel()
	res, err := perf.RunScale(ctx, perf.ScaleConfig{Base: c, Partitions: parts, Producers: prods, LoadFractions: load, OutRoot: out, Dir: dir}, stdout)
	if res != nil {
		fmt.Fprintf(stdout, "results in %s\n", res.Dir)
	}
	return err
}

const perfSuiteUsage = `
Usage: ringlog-perf suite [flags]

The standard matrix of 'make perf' against a running broker: the physical
references (loopback TCP pump, O_DIRECT sequential writer in --data-dir),
max-rate produce for 1 KiB and 100 B records x acks=1/all x 1-64
partitions, producer clients at 16 partitions, 1000 partitions, consume
from offset 0, end-to-end latency at 10k records/s and at fractions of the
max (with franz-go and with raw clients), and the host's latency floor at
10k records/s and half of the max (relay-floor, a relay process started
for it), and the CPU reference: the 1 KiB x 16 acks=1 max-rate point
against franz-go's in-memory kfake (a 'kfake-serve' process) and against
the broker, alternated, for the broker's CPU per record. Writes results.jsonl, charts, targets.json and summary.md (targets met
or missed, with numbers) into <out>/<YYYYMMDD-HHMM>-<host>/.
`

const perfSuiteExamples = `
Examples:
  ringlog-perf suite --brokers 127.0.0.1:9092 --data-dir ./data
  perf/with-broker.sh ./bin/ringlog ./bin/ringlog-perf suite      # what 'make perf' runs
  ringlog-perf suite --brokers kafka1:9092 --data-dir /var/lib/kafka --out /tmp/kafka-results

--brokers and --data-dir default to $RINGLOG_BROKERS and $RINGLOG_DATA_DIR
(set by perf/with-broker.sh).

Exit status: 0 done (targets may be missed: see summary.md), 1 failed, 2 usage.
`

func runPerfSuite(args []string, stdout, stderr io.Writer) error {
	sc := perf.DefaultSuite()
	var cf cli.ConnFlags
	fs := cli.NewFlagSet("suite", perfSuiteUsage, perfSuiteExamples, stdout)
	cf.Register(fs, 30*time.Second, "bound on admin requests, flushes and draining")
	fs.StringVar(&sc.DataDir, "data-dir", os.Getenv("RINGLOG_DATA_DIR"), "folder on the broker's data filesystem for the O_DIRECT reference (env RINGLOG_DATA_DIR; empty: skipped)")
	fs.StringVar(&sc.OutRoot, "out", sc.OutRoot, "folder in which the results folder is made")
	fs.StringVar(&sc.Dir, "dir", "", "write into exactly this folder instead")
	fs.DurationVar((*time.Duration)(&sc.PointDuration), "point-duration", sc.PointDuration.D(), "length of each max-rate point, warm-up included")
	fs.DurationVar((*time.Duration)(&sc.LatencyDuration), "latency-duration", sc.LatencyDuration.D(), "length of each fixed-rate latency run, warm-up included")
	fs.DurationVar((*time.Duration)(&sc.Warmup), "warmup", sc.Warmup.D(), "warm-up of every run")
	fs.DurationVar((*time.Duration)(&sc.RefDuration), "ref-duration", sc.RefDuration.D(), "length of each reference measurement")
	fs.Var((*intList)(&sc.Partitions), "sweep-partitions", "partition counts of the sweep")
	fs.Var((*intList)(&sc.Producers), "sweep-producers", "producer counts at the reference point")
	fs.IntVar(&sc.ManyPartitions, "many-partitions", sc.ManyPartitions, "partitions of the large-topic point (0: skip)")
	fs.DurationVar((*time.Duration)(&sc.ManyWarmup), "many-warmup", sc.ManyWarmup.D(), "warm-up of the large-topic point")
	fs.BoolVar(&sc.NoSettle, "no-settle", false, "do not sync(2) and wait for dirty page-cache data to drain before each step")
	fs.Var((*rateFlag)(&sc.LowRate), "low-rate", "records/s of the low-rate latency target")
	fs.Var((*floatList)(&sc.LoadFractions), "load", "fractions of the max for the latency-vs-load curve")
	fs.IntVar(&sc.LatencyProcs, "latency-procs", sc.LatencyProcs, "GOMAXPROCS of the load generator in latency runs at up to half of the max (0: all CPUs)")
	fs.StringVar(&sc.Note, "note", "", "free text added to the environment in every result")
	noFloor := fs.Bool("no-relay-floor", false, "skip the relay floor points (they start this program as 'ringlog-perf relay-serve')")
	noKfake := fs.Bool("no-kfake", false, "skip the CPU reference points against franz-go's in-memory kfake (they start this program as 'ringlog-perf kfake-serve')")
	sc.BrokerPID, _ = strconv.Atoi(os.Getenv("RINGLOG_PID"))
	fs.IntVar(&sc.BrokerPID, "broker-pid", sc.BrokerPID, "process id of the broker when it runs here: its CPU use is reported (env RINGLOG_PID)")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("suite takes no arguments, got %q", rest)
	}
	seeds, err := cf.Seeds()
	if err != nil {
		return err
	}
	sc.Brokers = seeds
	sc.Base.Brokers = seeds
	sc.Base.Timeout = perf.Duration(cf.Timeout)
	if sc.Warmup.D() >= sc.PointDuration.D() || sc.Warmup.D() >= sc.LatencyDuration.D() {
		return cli.Usagef("--warmup must be shorter than --point-duration and --latency-duration")
	}
	if sc.LowRate <= 0 {
		return cli.Usagef("--low-rate must be a rate, not max")
	}
	if sc.LatencyProcs < 0 {
		return cli.Usagef("--latency-procs must be 0 (all CPUs) or more")
	}
	if !*noFloor || !*noKfake {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("suite: find this program to start the relay floor's relay and kfake (or pass --no-relay-floor --no-kfake): %w", err)
		}
		if !*noFloor {
			sc.RelayCommand = []string{exe, "relay-serve"}
		}
		if !*noKfake {
			sc.KfakeCommand = []string{exe, "kfake-serve"}
		}
	}
	ctx, cancel := perfContext()
	defer cancel()
	res, err := perf.RunSuite(ctx, sc, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "perf: done in %s; results in %s\n", res.Elapsed.D(), res.Dir)
	for _, t := range res.Targets {
		state := "MISSED"
		if t.Met {
			state = "met"
		}
		meas := t.Measured
		if t.Missing != "" {
			meas = "not measured: " + t.Missing
		}
		fmt.Fprintf(stdout, "perf: target %-6s %s: %s\n", state, t.Name, meas)
	}
	if len(res.Failures) > 0 {
		return fmt.Errorf("%d step(s) failed (see %s/summary.md)", len(res.Failures), res.Dir)
	}
	return nil
}

const perfReportUsage = `
Usage: ringlog-perf report --from DIR/results.jsonl [--dir DIR]

Reads the results.jsonl a suite wrote and draws its charts, judges its
targets and writes targets.json and summary.md again, with this binary's
report code, without measuring anything: for a result set measured
before the charts or the summary changed. The files go next to the JSONL
unless --dir names another folder.
`

const perfReportExamples = `
Examples:
  ringlog-perf report --from perf/results/20261130-1135-vm/results.jsonl
  ringlog-perf report --from results.jsonl --dir /tmp/redrawn

Exit status: 0 done, 1 the file is unreadable or a chart failed, 2 usage.
`

func runPerfReport(args []string, stdout, stderr io.Writer) error {
	var from, dir string
	fs := cli.NewFlagSet("report", perfReportUsage, perfReportExamples, stdout)
	fs.StringVar(&from, "from", "", "the suite's results.jsonl")
	fs.StringVar(&dir, "dir", "", "folder to write into (default: the JSONL's)")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("report takes no arguments, got %q", rest)
	}
	if from == "" {
		return cli.Usagef("report: give --from DIR/results.jsonl")
	}
	sr, err := perf.ReadSuite(from)
	if err != nil {
		return err
	}
	if dir == "" {
		dir = filepath.Dir(from)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	sr.Dir = dir
	var fails []string
	if err := sr.WriteReport(dir, func(what string, err error) { fails = append(fails, fmt.Sprintf("%s: %v", what, err)) }); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and summary.md, targets.json into %s\n", strings.Join(sr.Charts, ", "), dir)
	if len(fails) > 0 {
		return fmt.Errorf("%s", strings.Join(fails, "; "))
	}
	return nil
}

const perfFlamegraphUsage = `
Usage: ringlog-perf flamegraph --pprof URL|FILE --out FILE.svg [flags]

Reads a pprof profile (from a URL such as a broker's
http://HOST:PORT/debug/pprof/profile?seconds=30 or /debug/pprof/allocs, or
from a file) and draws it as a flame graph SVG: the root at the bottom,
callees above their callers, widths proportional to the sample value. It
also prints the top functions by flat and cumulative share. A profile
without samples (a process idle while profiled) is an error: nothing is
written and the exit status is 1.
`

const perfFlamegraphExamples = `
Examples:
  ringlog-perf flamegraph --pprof 'http://127.0.0.1:9094/debug/pprof/profile?seconds=20' --out cpu.svg
  ringlog-perf flamegraph --pprof 'http://127.0.0.1:9094/debug/pprof/allocs?seconds=20' --sample alloc_space --out allocs.svg
  ringlog-perf flamegraph --pprof cpu.pb.gz --out cpu.svg --title "ringlog CPU"

Exit status: 0 written, 1 failed, 2 usage.
`

func runPerfFlamegraph(args []string, stdout, stderr io.Writer) error {
	var src, out, sample, title, save string
	var top int
	var timeout time.Duration
	fs := cli.NewFlagSet("flamegraph", perfFlamegraphUsage, perfFlamegraphExamples, stdout)
	fs.StringVar(&src, "pprof", "", "profile `URL` (http:// or https://) or file")
	fs.StringVar(&out, "out", "", "file to write: .svg (or .png)")
	fs.StringVar(&sample, "sample", "", "sample type to draw (default: the profile's default, e.g. cpu; allocs: alloc_space or alloc_objects)")
	fs.StringVar(&title, "title", "", "title of the graph (default: the source)")
	fs.StringVar(&save, "save-profile", "", "also write the raw profile to this `file` (.pb.gz)")
	fs.IntVar(&top, "top", 15, "print this many top functions (0: none)")
	fs.DurationVar(&timeout, "timeout", 5*time.Minute, "bound on fetching the profile")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("flamegraph takes no arguments, got %q", rest)
	}
	if src == "" || out == "" {
		return cli.Usagef("flamegraph: give --pprof and --out")
	}
	raw, err := readProfileSource(src, timeout)
	if err != nil {
		return err
	}
	p, err := profile.ParseData(raw)
	if err != nil {
		return fmt.Errorf("%s: not a pprof profile: %w", src, err)
	}
	if save != "" {
		if err := os.WriteFile(save, raw, 0o644); err != nil {
			return err
		}
	}
	if title == "" {
		title = src
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	format := "svg"
	if strings.HasSuffix(strings.ToLower(out), ".png") {
		format = "png"
	}
	if err := flame.Write(f, p, flame.Options{Title: title, SampleType: sample, Format: format}); err != nil {
		_ = f.Close() // failing already: the error returned says more
		_ = os.Remove(out)
		if errors.Is(err, flame.ErrNoSamples) {
			return fmt.Errorf("%s: %w: the process was idle while profiled; profile it under load (e.g. run ringlog-perf produce meanwhile); no %s written", src, err, out)
		}
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", out)
	if top > 0 {
		total, flat, cum, err := flame.TopFunctions(p, sample, top)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "total %d; top %d by flat (self) share:\n", total, len(flat))
		for _, s := range flat {
			fmt.Fprintf(stdout, "  %6.2f%% flat %6.2f%% cum  %s\n", s.FlatPct, s.CumPct, s.Name)
		}
		fmt.Fprintf(stdout, "top %d by cumulative share:\n", len(cum))
		for _, s := range cum {
			fmt.Fprintf(stdout, "  %6.2f%% cum %6.2f%% flat  %s\n", s.CumPct, s.FlatPct, s.Name)
		}
	}
	return nil
}

func readProfileSource(src string, timeout time.Duration) ([]byte, error) {
	if !strings.HasPrefix(src, "http://") && !strings.HasPrefix(src, "https://") {
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	cl := &http.Client{Timeout: timeout}
	resp, err := cl.Get(src)
	if err != nil {
		return nil, fmt.Errorf("fetching the profile: %w (is the broker running with --http-addr?)", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching the profile: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

const perfRebalanceUsage = `
Usage: ringlog-perf rebalance [flags]

A consumer group of --members consumers reads a topic of --partitions
partitions under a steady load of --rate records/s; then one more member
starts. For each protocol (--protocols: consumer is KIP-848 with the
broker's uniform assignor; cooperative is the classic protocol with the
cooperative-sticky balancer; eager the classic protocol with range;
upgrade has cooperative members and a KIP-848 newcomer, so the live group
switches protocols as it absorbs it), and each of --rounds rounds on a
fresh topic and group, it reports:

  absorb_ms         from the new member's start until it consumed from its
                    fair share of partitions (partitions / (members+1))
  kept_pause_ms     the longest a partition that kept its consumer went
                    without a delivery, from the new member's start to one
                    second after it was absorbed (a stop-the-world
                    rebalance pauses these too)
  moved_pause_ms    the same for the partitions that moved
  paused_partitions how many partitions went more than 1 s without one

One JSON line per round, then a table of the medians over the rounds.
`

func runPerfRebalance(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("rebalance", perfRebalanceUsage, "\nExamples:\n  ringlog-perf rebalance --brokers 127.0.0.1:9092 --members 10 --partitions 64\n", stdout)
	var cf cli.ConnFlags
	cf.Register(fs, 10*time.Second, "timeout of each admin request")
	c := perf.RebalanceConfig{}
	fs.IntVar(&c.Members, "members", 10, "members in the group before one more joins")
	fs.IntVar(&c.Partitions, "partitions", 64, "partitions of the topic")
	fs.IntVar(&c.Rate, "rate", 2000, "records per second over all partitions")
	fs.IntVar(&c.Rounds, "rounds", 3, "rounds per protocol")
	protocols := fs.String("protocols", "consumer,cooperative,eager", "protocols to run: consumer (KIP-848), cooperative, eager (classic), upgrade (classic members, a KIP-848 newcomer)")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("rebalance takes no arguments, got %q", rest)
	}
	if c.Members < 1 || c.Partitions < c.Members+1 || c.Rate < 1 || c.Rounds < 1 {
		return cli.Usagef("--members must be at least 1, --partitions more than --members, --rate and --rounds at least 1")
	}
	seeds, err := cf.Seeds()
	if err != nil {
		return cli.Usagef("%v", err)
	}
	c.Brokers = seeds
	c.Protocols = strings.Split(*protocols, ",")
	ctx, cancel := perfContext()
	defer cancel()
	byProto := map[string][]perf.RebalanceResult{}
	err = perf.RunRebalance(ctx, c, func(r perf.RebalanceResult) {
		fmt.Fprintln(stdout, r.JSON())
		byProto[r.Protocol] = append(byProto[r.Protocol], r)
	})
	fmt.Fprintf(stdout, "\n| protocol | members | absorb ms | kept partitions' max pause ms | moved partitions' max pause ms | partitions paused > 1 s |\n|---|---|---|---|---|---|\n")
	for _, p := range c.Protocols {
		rs := byProto[p]
		if len(rs) == 0 {
			continue
		}
		med := func(f func(perf.RebalanceResult) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			sort.Float64s(v)
			return v[len(v)/2]
		}
		fmt.Fprintf(stdout, "| %s | %d→%d | %.0f | %.0f | %.0f | %.0f |\n", p, c.Members, c.Members+1,
			med(func(r perf.RebalanceResult) float64 { return r.AbsorbMs }),
			med(func(r perf.RebalanceResult) float64 { return r.KeptPauseMs }),
			med(func(r perf.RebalanceResult) float64 { return r.MovedPauseMs }),
			med(func(r perf.RebalanceResult) float64 { return float64(r.PausedPartitions) }))
	}
	return err
}

const perfShareUsage = `
Usage: ringlog-perf share [flags]

A topic of one partition holds --records records of --value-bytes; a
share group (KIP-932) of each of --consumers consumers in turn reads it,
each consumer accepting every record it gets (after --work per record:
a sleep standing for the processing a queue spreads over its
consumers). Each of --rounds rounds uses a fresh topic and group. It
reports, per round:

  records_per_sec  records accepted per second, from the consumers' start
                   until every record was delivered
  redelivered      deliveries beyond a record's first (0 expected)
  busiest_share    the largest share of the records one consumer took

One JSON line per round, then a table of the medians over the rounds.
`

func runPerfShare(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("share", perfShareUsage, "\nExamples:\n  ringlog-perf share --brokers 127.0.0.1:9092 --consumers 1,4,16 --records 200000\n  ringlog-perf share --consumers 1,4,16 --records 20000 --work 1ms\n", stdout)
	var cf cli.ConnFlags
	cf.Register(fs, 10*time.Second, "timeout of each admin request")
	c := perf.ShareConfig{}
	consumers := fs.String("consumers", "1,4,16", "consumer counts to run, comma-separated")
	fs.IntVar(&c.Records, "records", 200000, "records in the partition")
	fs.IntVar(&c.ValueBytes, "value-bytes", 100, "bytes of each record's value")
	fs.DurationVar(&c.Work, "work", 0, "processing time per record in a consumer")
	fs.IntVar(&c.MaxRecords, "max-records", 500, "records each share fetch asks for (kgo.ShareMaxRecords); with many consumers of one partition keep consumers × 2 × this under the broker's --group-share-max-record-locks (2000)")
	fs.IntVar(&c.Rounds, "rounds", 3, "rounds per consumer count")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("share takes no arguments, got %q", rest)
	}
	for _, f := range strings.Split(*consumers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return cli.Usagef("--consumers %q: want positive counts, comma-separated", *consumers)
		}
		c.Consumers = append(c.Consumers, n)
	}
	if c.Records < 1 || c.ValueBytes < 0 || c.Work < 0 || c.Rounds < 1 || c.MaxRecords < 1 {
		return cli.Usagef("--records, --rounds and --max-records must be at least 1, --value-bytes and --work not negative")
	}
	seeds, err := cf.Seeds()
	if err != nil {
		return cli.Usagef("%v", err)
	}
	c.Brokers = seeds
	ctx, cancel := perfContext()
	defer cancel()
	byN := map[int][]perf.ShareResult{}
	err = perf.RunShare(ctx, c, func(r perf.ShareResult) {
		fmt.Fprintln(stdout, r.JSON())
		byN[r.Consumers] = append(byN[r.Consumers], r)
	})
	fmt.Fprintf(stdout, "\n| consumers | work per record | max records | records/s | redelivered | busiest consumer's share |\n|---|---|---|---|---|---|\n")
	for _, n := range c.Consumers {
		rs := byN[n]
		if len(rs) == 0 {
			continue
		}
		med := func(f func(perf.ShareResult) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			sort.Float64s(v)
			return v[len(v)/2]
		}
		fmt.Fprintf(stdout, "| %d | %v | %d | %.0f | %.0f | %.2f |\n", n, c.Work, c.MaxRecords,
			med(func(r perf.ShareResult) float64 { return r.PerSecond }),
			med(func(r perf.ShareResult) float64 { return float64(r.Redelivered) }),
			med(func(r perf.ShareResult) float64 { return r.Busiest }))
	}
	return err
}
