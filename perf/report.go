package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Result is the outcome of one run: its configuration, the environment,
// throughput over the measured window and latency summaries. It is
// written as one JSON line.
type Result struct {
	// Mode is produce, consume or e2e; Label the run's name in sweeps.
	Mode  string `json:"mode"`
	Label string `json:"label,omitempty"`
	// Topic is the topic the run used.
	Topic string `json:"topic"`
	// Config is the run's configuration (after validation), Env where
	// it ran, Start when the clock started (UTC).
	Config Config    `json:"config"`
	Env    Env       `json:"env"`
	Start  time.Time `json:"start"`
	// MeasuredSeconds is the window the throughput is computed over
	// (warm-up excluded).
	MeasuredSeconds float64 `json:"measured_seconds"`
	// Records and Bytes (keys and values) counted in the window:
	// acknowledged for produce, received for consume and e2e.
	Records       int64   `json:"records"`
	Bytes         int64   `json:"bytes"`
	RecordsPerSec float64 `json:"records_per_sec"`
	// MBPerSec is MiB/s, as "MB/sec" in Kafka's tools.
	MBPerSec float64 `json:"mb_per_sec"`
	// OfferedRate is the configured rate (0: max).
	OfferedRate float64 `json:"offered_rate"`
	// Sent, Acked and Consumed count the whole run, warm-up included.
	// Errors counts failed records (and fetch errors); FirstError is
	// the first.
	Sent       int64  `json:"sent,omitempty"`
	Acked      int64  `json:"acked,omitempty"`
	Consumed   int64  `json:"consumed,omitempty"`
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// ProduceLatency is send (due time) to acknowledgement.
	ProduceLatency *Latency `json:"produce_latency_ms,omitempty"`
	// E2ELatency is due time to the consumer having the record.
	E2ELatency *Latency `json:"e2e_latency_ms,omitempty"`
	// Timeline is the records acknowledged (produce) or received
	// (consume, e2e) in each second since the start, warm-up included.
	Timeline []int64 `json:"timeline_per_sec,omitempty"`
	// TimelineP99 and TimelineMax are the e2e latency's p99 and max of
	// the records received in each second since the start (e2e runs),
	// in milliseconds, warm-up included: where in the run the tail was.
	TimelineP99 []float64 `json:"timeline_e2e_p99_ms,omitempty"`
	TimelineMax []float64 `json:"timeline_e2e_max_ms,omitempty"`
	// LoadGenCores is the CPU the load generator process used during the
	// run, in cores (CPU seconds per second; the whole process, so an
	// in-process broker counts too); BrokerCores the broker's, when its
	// pid was given.
	LoadGenCores float64 `json:"loadgen_cpu_cores"`
	BrokerCores  float64 `json:"broker_cpu_cores,omitempty"`
	// StealCores is the CPU time the hypervisor gave to others while the
	// guest wanted it ("steal" in /proc/stat), over all CPUs, in cores:
	// on a shared VM, a run with steal lost that much of its machine, and
	// its latency tail shows it. Zero where it cannot be read.
	StealCores float64 `json:"steal_cpu_cores,omitempty"`
	// LoadGenRunWait and BrokerRunWait are the time the threads of the
	// load generator and of the broker (when its pid was given) spent
	// runnable but waiting for a CPU during the run, in thread-seconds
	// per second (the run_delay of /proc/PID/task/*/schedstat): on a host
	// with fewer cores than runnable threads, the queueing that shows in
	// the latency tail, which neither side's own code causes.
	LoadGenRunWait float64 `json:"loadgen_run_wait,omitempty"`
	BrokerRunWait  float64 `json:"broker_run_wait,omitempty"`
	// SendLag is how late the load generator handed records to the
	// client relative to their due times (fixed-rate runs): its own
	// share of the latency.
	SendLag *Latency `json:"send_lag_ms,omitempty"`
	// E2EFromSend (raw clients and relay floor, records of 16 bytes or
	// more) is the e2e latency measured from when the record's request
	// was built, just before it was written, instead of from its due
	// time: the load generator's own lateness before sending left out.
	E2EFromSend *Latency `json:"e2e_from_send_ms,omitempty"`
	// IncrementalFetches (raw clients) counts the fetchers' incremental
	// fetches in fetch sessions (KIP-227); 0 when the broker declined.
	IncrementalFetches int64 `json:"incremental_fetches,omitempty"`
}

func (res *Result) setThroughput(records, bytes int64, window time.Duration) {
	res.Records, res.Bytes = records, bytes
	res.MeasuredSeconds = window.Seconds()
	if window > 0 {
		res.RecordsPerSec = float64(records) / window.Seconds()
		res.MBPerSec = float64(bytes) / MiB / window.Seconds()
	}
}

// SecondsToReach returns after how many seconds from the start the
// per-second timeline first reached frac of the measured rate (0 when
// never).
func (res *Result) SecondsToReach(frac float64) int {
	for i, n := range res.Timeline {
		if float64(n) >= frac*res.RecordsPerSec {
			return i + 1
		}
	}
	return 0
}

// JSON returns the result as one line of JSON (no newline).
func (res *Result) JSON() []byte {
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Appendf(nil, `{"error":%q}`, err.Error())
	}
	return b
}

// run is what every benchmark run sets up: an admin client, the topic and
// the environment facts.
type run struct {
	cfg       *Config
	adm       *admin
	topic     string
	created   bool
	env       Env
	prevProcs int // GOMAXPROCS before the run, restored by close (0: unchanged)
}

func newRun(ctx context.Context, c *Config) (*run, error) {
	adm, err := newAdmin(c)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, c.Timeout.D())
	defer cancel()
	if err := adm.cl.Ping(actx); err != nil {
		adm.close()
		return nil, fmt.Errorf("cannot reach the brokers %v: %w", c.Brokers, err)
	}
	topic, parts, created, err := adm.prepareTopic(actx, c)
	if err != nil {
		adm.close()
		return nil, err
	}
	c.Partitions = parts
	if c.Consumers > parts && c.Mode != ModeProduce {
		if created && c.Topic == "" && !c.KeepTopic {
			adm.deleteTopic(actx, topic)
		}
		adm.close()
		return nil, fmt.Errorf("%d consumers for %d partitions: at most one consumer per partition", c.Consumers, parts)
	}
	r := &run{cfg: c, adm: adm, topic: topic, created: created, env: BrokerEnv(actx, adm.adm, HostEnv())}
	if c.Procs > 0 {
		r.prevProcs = runtime.GOMAXPROCS(c.Procs)
		r.env.GOMAXPROCS = c.Procs
	}
	return r, nil
}

// startRun validates c for a run of mode and sets the run up; the caller
// closes it.
func startRun(ctx context.Context, c *Config, mode string) (*run, error) {
	c.Mode = mode
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return newRun(ctx, c)
}

// endOffsets are the end offsets of the run's topic, asked within its
// timeout.
func (r *run) endOffsets(ctx context.Context) (map[int32]int64, error) {
	actx, cancel := context.WithTimeout(ctx, r.cfg.Timeout.D())
	defer cancel()
	return r.adm.endOffsets(actx, r.topic)
}

// prefill fills a topic the run created with PrefillBytes of records at
// full speed, before anything is measured; a topic it found is read as
// it is.
func (r *run) prefill(ctx context.Context, progress io.Writer) error {
	if !r.created {
		return nil
	}
	return prefill(ctx, *r.cfg, r.topic, progress)
}

// close deletes the topic when the run created it under a generated name
// (and is not to keep it); named topics are kept.
func (r *run) close(ctx context.Context) {
	if r.prevProcs > 0 {
		runtime.GOMAXPROCS(r.prevProcs)
	}
	if r.created && r.cfg.Topic == "" && !r.cfg.KeepTopic {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Timeout.D())
		_ = r.adm.deleteTopic(dctx, r.topic)
		cancel()
	}
	r.adm.close()
}

func (r *run) result(start time.Time) *Result {
	return &Result{Mode: r.cfg.Mode, Label: r.cfg.Label, Topic: r.topic, Config: *r.cfg, Env: r.env,
		Start: start.UTC(), OfferedRate: r.cfg.Rate}
}

// reporter prints a progress line every interval.
type reporter struct {
	done chan struct{}
	wg   sync.WaitGroup
}

// startReporter calls take every interval and prints line's text for the
// window to w, followed by the time elapsed and left of a run planned to
// last total (0: unknown, e.g. bounded by a record count). A nil w or a
// zero interval prints nothing.
func startReporter(w io.Writer, every, total time.Duration, line func(time.Duration, window) string, take func() window) *reporter {
	r := &reporter{done: make(chan struct{})}
	if w == nil || every <= 0 {
		return r
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		began := time.Now()
		last := began
		for {
			select {
			case <-r.done:
				return
			case now := <-t.C:
				win := take()
				fmt.Fprintln(w, line(now.Sub(last), win)+" "+timeLeft(now.Sub(began), total))
				last = now
			}
		}
	}()
	return r
}

// timeLeft is "[elapsed of total, left]" for a run planned to last total,
// "[elapsed]" when its length is unknown (0).
func timeLeft(elapsed, total time.Duration) string {
	el := elapsed.Round(time.Second)
	if total <= 0 {
		return fmt.Sprintf("[%s elapsed]", el)
	}
	return fmt.Sprintf("[%s of %s, %s left]", el, total.Round(time.Second), max(total-elapsed, 0).Round(time.Second))
}

// plannedLength is how long a run of c lasts: its duration, or unknown
// (0) when a record count ends it.
func plannedLength(c Config) time.Duration {
	if c.Records > 0 {
		return 0
	}
	return c.Duration.D()
}

func (r *reporter) stop() {
	close(r.done)
	r.wg.Wait()
}

// produceLine is a progress line in the form of Kafka's
// ProducerPerformance.
func produceLine(w window, d time.Duration) string {
	s := d.Seconds()
	var avg float64
	if w.latN > 0 {
		avg = ms(w.latSum) / float64(w.latN)
	}
	return fmt.Sprintf("%d records sent, %.1f records/sec (%.2f MB/sec), %.1f ms avg latency, %.1f ms max latency.",
		w.records, float64(w.records)/s, float64(w.bytes)/MiB/s, avg, ms(w.latMax))
}

// consumeLine is a progress line for consumers (with end-to-end latency
// when the window has some).
func consumeLine(w window, d time.Duration) string {
	s := d.Seconds()
	line := fmt.Sprintf("%d records consumed, %.1f records/sec (%.2f MB/sec)", w.records, float64(w.records)/s, float64(w.bytes)/MiB/s)
	if w.latN > 0 {
		line += fmt.Sprintf(", %.1f ms avg e2e latency, %.1f ms max e2e latency", ms(w.latSum)/float64(w.latN), ms(w.latMax))
	}
	return line + "."
}

// finalLine prints the run's summary in words to w (nil: nothing).
func finalLine(w io.Writer, res *Result) {
	if w == nil {
		return
	}
	verb := "sent"
	if res.Mode != ModeProduce {
		verb = "consumed"
	}
	line := fmt.Sprintf("%s: %d records %s, %.1f records/sec (%.2f MB/sec) over %.1fs", res.Mode, res.Records, verb,
		res.RecordsPerSec, res.MBPerSec, res.MeasuredSeconds)
	lat := func(name string, l *Latency) {
		if l != nil {
			line += fmt.Sprintf(", %s latency ms p50 %.3f p99 %.3f p99.9 %.3f p99.99 %.3f max %.3f", name, l.P50, l.P99, l.P999, l.P9999, l.Max)
		}
	}
	lat("produce", res.ProduceLatency)
	lat("e2e", res.E2ELatency)
	lat("e2e from send", res.E2EFromSend)
	if res.Errors > 0 {
		line += fmt.Sprintf(", %d errors (first: %s)", res.Errors, res.FirstError)
	}
	fmt.Fprintln(w, line+".")
}

// writeJSONFile writes v indented to path.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteSummary writes the suite's markdown summary: environment, targets
// (met or missed, with numbers), references, tables of every run, and the
// charts.
func WriteSummary(w io.Writer, sr *SuiteResult) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	e := sr.Env
	sc := sr.Config
	p("# ringlog-perf: %s\n\n", filepath.Base(sr.Dir))
	p("Measured %s on `%s` in %s.\n\n", sr.Started.Format("2006-01-02 15:04 UTC"), e.Host, sr.Elapsed.D())
	if sr.Redrawn {
		p("Charts, targets and this summary were drawn again from `results.jsonl` by `ringlog-perf report` (the total time above is estimated from the runs' start times; facts the runs did not record read \"unknown\").\n\n")
	}
	p("| | |\n|---|---|\n")
	p("| CPU | %s, %d logical CPUs (GOMAXPROCS %d) |\n", e.CPUModel, e.Cores, e.GOMAXPROCS)
	p("| kernel | %s (%s/%s) |\n", e.Kernel, e.OS, e.Arch)
	p("| Go | %s |\n", e.GoVersion)
	backend := e.BrokerBackend
	if backend == "" {
		backend = "(not reported)"
	}
	p("| broker | io.backend %s, %d broker(s), at %s; highest API versions served (ApiVersions): %s |\n", backend, e.BrokerCount, strings.Join(sc.Brokers, ","), orUnknown(e.BrokerAPIs))
	p("\n**Hardware caveat.** The broker and the load generator ran on the same %d vCPUs "+
		"of one shared VM and talked over loopback; every producer, consumer and broker goroutine competes "+
		"for those cores, so absolute numbers are a floor for what the broker does on its own cores. "+
		"The CPU columns below show how the cores were split (load generator / broker, in cores). "+
		"Compare ratios measured in the same run.", e.Cores)
	if e.Note != "" {
		p(" %s", e.Note)
	}
	p("\n\n## Targets\n\n")
	met := 0
	for _, t := range sr.Targets {
		if t.Met {
			met++
		}
	}
	p("%d of %d met.\n\n| target | goal | measured | result |\n|---|---|---|---|\n", met, len(sr.Targets))
	for _, t := range sr.Targets {
		res := "missed"
		if t.Met {
			res = "**met**"
		}
		meas := t.Measured
		if t.Missing != "" {
			meas, res = "not measured: "+t.Missing, "missed"
		}
		cmp := "≥"
		if t.AtMost {
			cmp = "≤"
		}
		if t.Note != "" {
			meas += " — " + t.Note
		}
		p("| %s | %s | %s (need %s %g) | %s |\n", t.Name, t.Goal, meas, cmp, t.Limit, res)
	}
	p("\n## Physical references\n\n| reference | MB/s | how |\n|---|---|---|\n")
	for _, r := range []RefResult{sr.TCP, sr.ODirect} {
		if r.Error != "" {
			p("| %s | - | failed: %s |\n", r.Name, r.Error)
			continue
		}
		p("| %s | %.1f | %s; %.2f GiB in %.1fs |\n", r.Name, r.MBPerSec, r.Detail, float64(r.Bytes)/(1<<30), r.Seconds)
	}
	p("\n## Produce sweep (max rate, 1 producer, %s measured after %s warm-up)\n\n", (sc.PointDuration - sc.Warmup).D(), sc.Warmup.D())
	p("| record | acks | partitions | records/s | MB/s | ack p50 ms | ack p99 ms | ack p99.9 ms | ack max ms | CPU cores loadgen / broker | broker CPU µs/record |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	rows := append(append([]*Result{}, sr.Sweep...), func() []*Result {
		if sr.Many != nil {
			return []*Result{sr.Many}
		}
		return nil
	}()...)
	for _, r := range rows {
		l := r.ProduceLatency
		if l == nil {
			l = &Latency{}
		}
		p("| %s | %s | %d | %.0f | %.1f | %.2f | %.2f | %.2f | %.2f | %s | %s |\n", sizeName(r.Config.RecordSize), r.Config.Acks, r.Config.Partitions,
			r.RecordsPerSec, r.MBPerSec, l.P50, l.P99, l.P999, l.Max, cpuCell(r), usPerRecordCell(r))
	}
	if sr.Many != nil {
		p("\nThe %d-partition point is measured after a %s warm-up: after creating that many partitions the broker reached half of its measured rate only %ds after the run started (per-second timeline in results.jsonl).\n",
			sr.Many.Config.Partitions, sr.Many.Config.Warmup.D(), sr.Many.SecondsToReach(0.5))
	}
	p("\nAck latency of max-rate runs is closed-loop (from the send call, with the client's buffer full) and mostly shows queueing.\n")
	if len(sr.ProdRuns) > 1 || len(sr.RawProduce) > 0 {
		p("\n## Producer clients (%s, %d partitions)\n\n", sizeName(sc.RefSize), sc.RefPartitions)
		p("franz-go producers build, partition and encode every record; the raw producer (`perf ingest`) sends one prebuilt Produce request (a batch per partition, ~1 MB in all) over and over, up to 5 in flight: the broker's ingest rate without a producer client's per-record work competing for the same cores. The broker checks every batch's CRC and writes every byte either way.\n\n")
		p("| client | acks | producers | records/s | MB/s | CPU cores loadgen / broker | broker CPU µs/record |\n|---|---|---|---|---|---|---|\n")
		for _, r := range sr.ProdRuns {
			p("| franz-go | %s | %d | %.0f | %.1f | %s | %s |\n", r.Config.Acks, r.Config.Producers, r.RecordsPerSec, r.MBPerSec, cpuCell(r), usPerRecordCell(r))
		}
		for _, r := range sr.RawProduce {
			p("| raw produce | %s | %d | %.0f | %.1f | %s | %s |\n", r.Config.Acks, r.Config.Producers, r.RecordsPerSec, r.MBPerSec, cpuCell(r), usPerRecordCell(r))
		}
	}
	if len(sr.Consume) > 0 || len(sr.RawConsume) > 0 {
		p("\n## Consume from offset 0 (%s records, %d partitions, data in the page cache)\n\n", sizeName(sc.RefSize), sc.RefPartitions)
		p("franz-go consumers decode every record (MB/s of keys and values); raw fetchers send Fetch requests and count the batches from their headers (MB/s of record batches): the broker's delivery rate without a client's decoding competing for the same cores.\n\n")
		p("| client | consumers | records | records/s | MB/s | CPU cores loadgen / broker |\n|---|---|---|---|---|---|\n")
		for _, r := range sr.Consume {
			p("| franz-go | %d | %d | %.0f | %.1f | %s |\n", r.Config.Consumers, r.Records, r.RecordsPerSec, r.MBPerSec, cpuCell(r))
		}
		for _, r := range sr.RawConsume {
			p("| raw fetch | %d | %d | %.0f | %.1f | %s |\n", r.Config.Consumers, r.Records, r.RecordsPerSec, r.MBPerSec, cpuCell(r))
		}
	}
	if len(sr.Latency) > 0 {
		p("\n## End-to-end latency at fixed rates (%s, 1 producer, 1 consumer, %s measured after %s warm-up)\n\n", sizeName(sc.RefSize), (sc.LatencyDuration - sc.Warmup).D(), sc.Warmup.D())
		p("Latency is measured from each record's scheduled send time (coordinated omission avoided); send lag is how late the load generator itself was. Generator Ps is the load generator's GOMAXPROCS: runs at up to half of the max use %d (it needs less than a core there, and its idle Ps' spinning would take CPU from the broker on shared cores).\n\n", sc.LatencyProcs)
		p("Broker CPU µs/record is the broker's CPU time per record, the produce and the fetch of it together; steal is the CPU the hypervisor gave to other guests meanwhile (cores, from /proc/stat): a run with steal lost that much of its 2 cores, and its tail shows it.\n\n")
		p("| acks | offered rec/s | achieved rec/s | p50 ms | p99 ms | p99.9 ms | p99.99 ms | max ms | ack p99 ms | send lag p99 ms | generator Ps | CPU cores loadgen / broker | broker CPU µs/record | steal cores | run wait loadgen / broker |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range sr.Latency {
			p("| %s | %s |\n", r.Config.Acks, latencyCells(r))
		}
	}
	// runTable writes a section of latency runs at the acks=1 rates:
	// heading, what was measured, and a row per run (server names whose
	// CPU the server columns show).
	runTable := func(title, about, server string, rs []*Result) {
		if len(rs) == 0 {
			return
		}
		p("\n## %s\n\n%s\n\n", title, about)
		p("| offered rec/s | achieved rec/s | p50 ms | p99 ms | p99.9 ms | p99.99 ms | max ms | ack p99 ms | send lag p99 ms | generator Ps | CPU cores loadgen / %s | %s CPU µs/record | steal cores | run wait loadgen / %s | from send p99 / p99.9 ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", server, server, server)
		for _, r := range rs {
			fs := "-"
			if f := r.E2EFromSend; f != nil {
				fs = fmt.Sprintf("%.3f / %.3f", f.P99, f.P999)
			}
			p("| %s | %s |\n", latencyCells(r), fs)
		}
	}
	runTable("End-to-end latency with raw clients (same rates, acks=1)",
		"`ringlog-perf e2e-raw`: the producer sends what fell due as one plain Produce request per wake-up (one partition's batch, the next partition each time, as Kafka's sticky partitioner does for keyless records), the consumer long-polls with plain Fetch requests in a fetch session (KIP-227, as Kafka's consumers keep one; runs before 2026-12-05 fetched without); due times and latency as above. The broker does the same work; the load generator's share of the cores shrinks to the system calls. The last column measures each record from when its request was built instead of its due time: the generator's lateness before sending left out.",
		"broker", sr.RawLatency)
	runTable("Latency floor of the host (relay-floor)",
		"`ringlog-perf relay-floor`: the raw clients' paced producer and long-polling consumer (1 KiB records, one frame per wake-up) against a relay process that only moves the records (Go's net package, no Kafka protocol, no disk). Each record still costs a timer wake-up, a request and its answer, a long-poll answer and the next poll between two processes, so on shared cores its latency is what scheduling alone adds: a floor for any broker here.",
		"relay", sr.Floor)
	if len(sr.Charts) > 0 {
		p("\n## Charts\n\n")
		for _, c := range sr.Charts {
			p("![%s](%s)\n\n", strings.TrimSuffix(c, filepath.Ext(c)), c)
		}
	}
	if len(sr.Failures) > 0 {
		p("\n## Failures\n\n")
		for _, f := range sr.Failures {
			p("- %s\n", f)
		}
	}
	p("\n## How it was run\n\n`ringlog-perf suite` (see perf/README.md) against %s; max-rate points %s long with %s warm-up, latency runs %s; references %s each. ", strings.Join(sc.Brokers, ","), sc.PointDuration.D(), sc.Warmup.D(), sc.LatencyDuration.D(), sc.RefDuration.D())
	if !sc.NoSettle {
		p("Before every step the page cache's dirty data was flushed (sync(2)) so that one step's writeback does not run into the next. ")
		if sr.ReclaimWaits > 0 {
			p("After %d steps that freed %d MiB or more, the suite waited %s in all, every CPU busy, until the hypervisor had taken the freed memory back (steal quiet for %d s; see perf/README.md, \"Freed memory on a VM\"). ",
				sr.ReclaimWaits, reclaimFreed>>20, sr.ReclaimWaited.D(), quietWindows)
		}
	}
	p("Every run uses its own fresh topic (deleted afterwards); producers use linger 0, 1 MB batches, a 32 MiB client buffer, no compression, null keys.\n")
	p("\n## Files\n\n`results.jsonl`: one JSON line per run (configuration, environment, throughput, latency percentiles) and per reference; `targets.json`: the targets above.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// latencyCells are a fixed-rate e2e run's cells of the latency tables,
// from the offered rate to the run-queue wait.
func latencyCells(r *Result) string {
	l, a, g := r.E2ELatency, r.ProduceLatency, r.SendLag
	if l == nil {
		l = &Latency{}
	}
	if a == nil {
		a = &Latency{}
	}
	if g == nil {
		g = &Latency{}
	}
	return fmt.Sprintf("%.0f | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %d | %s | %s | %s", r.OfferedRate, r.RecordsPerSec,
		l.P50, l.P99, l.P999, l.P9999, l.Max, a.P99, g.P99, r.Env.GOMAXPROCS, cpuCell(r), usPerRecordCell(r), stealCell(r)) + " | " + runWaitCell(r)
}

// runWaitCell is "loadgen / broker" run-queue wait of a run (thread-seconds
// per second runnable without a CPU; "-" where not read).
func runWaitCell(r *Result) string {
	if r.LoadGenRunWait == 0 && r.BrokerRunWait == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f / %.2f", r.LoadGenRunWait, r.BrokerRunWait)
}

// BrokerMicrosPerRecord is the broker's CPU time per record of the run
// (BrokerCores over the record rate), in µs; 0 without the broker's CPU.
func (r *Result) BrokerMicrosPerRecord() float64 {
	if r.BrokerCores == 0 || r.RecordsPerSec == 0 {
		return 0
	}
	return r.BrokerCores * 1e6 / r.RecordsPerSec
}

// usPerRecordCell is BrokerMicrosPerRecord for a table, "-" without it.
func usPerRecordCell(r *Result) string {
	if us := r.BrokerMicrosPerRecord(); us > 0 {
		return fmt.Sprintf("%.2f", us)
	}
	return "-"
}

// stealCell is StealCores for a table.
func stealCell(r *Result) string {
	return fmt.Sprintf("%.2f", r.StealCores)
}

// cpuCell is "loadgen / broker" cores of a run.
func cpuCell(r *Result) string {
	if r.BrokerCores == 0 {
		return fmt.Sprintf("%.2f / -", r.LoadGenCores)
	}
	return fmt.Sprintf("%.2f / %.2f", r.LoadGenCores, r.BrokerCores)
}

func orUnknown(s string) string {
	if s == "" {
		return "version unknown"
	}
	return s
}
