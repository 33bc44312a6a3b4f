package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// SuiteConfig is the standard matrix behind `make perf`.
type SuiteConfig struct {
	// Brokers are the bootstrap addresses.
	Brokers []string `json:"brokers"`
	// DataDir is a folder on the broker's data filesystem, where the
	// O_DIRECT reference writes (empty: the reference is skipped).
	DataDir string `json:"data_dir"`
	// OutRoot is where the results folder <YYYYMMDD-HHMM>-<host> is made;
	// Dir, when set, is the folder itself.
	OutRoot string `json:"out_root"`
	Dir     string `json:"dir,omitempty"`
	// PointDuration and Warmup are those of every max-rate point;
	// LatencyDuration that of every fixed-rate point (same warm-up).
	PointDuration   Duration `json:"point_duration"`
	LatencyDuration Duration `json:"latency_duration"`
	Warmup          Duration `json:"warmup"`
	// RefDuration is the length of each reference measurement.
	RefDuration Duration `json:"ref_duration"`
	// Sizes, Acks and Partitions are the sweep's axes (max rate, one
	// producer).
	Sizes      []int    `json:"sizes"`
	Acks       []string `json:"acks"`
	Partitions []int    `json:"partitions"`
	// Producers are the producer counts tried at the reference point.
	Producers []int `json:"producers"`
	// RefPartitions is the reference point's partition count (16) and
	// RefSize its record size (1024).
	RefPartitions int `json:"ref_partitions"`
	RefSize       int `json:"ref_size"`
	// ManyPartitions is the large-topic point (1000) and ManyWarmup its
	// warm-up. It is measured like the sweep points (same warm-up and
	// duration), so the ratio compares like with like: a longer run
	// reaches the regime where the page cache's writeback sets the pace,
	// which lowers any partition count's rate.
	ManyPartitions int      `json:"many_partitions"`
	ManyWarmup     Duration `json:"many_warmup"`
	// NoSettle skips the sync(2) and wait for the page cache's dirty
	// data before every step.
	NoSettle bool `json:"no_settle,omitempty"`
	// LowRate is the fixed-rate latency point in records/s (10,000) and
	// LoadFractions the fractions of the measured max for the
	// latency-vs-load curve (0.5 is the target's point).
	LowRate       float64   `json:"low_rate"`
	LoadFractions []float64 `json:"load_fractions"`
	// LatencyProcs is the load generator's GOMAXPROCS (Config.Procs) in
	// the fixed-rate runs at up to half of the measured max, where it
	// needs less than a core; faster runs use every CPU. 0: every CPU
	// throughout.
	LatencyProcs int `json:"latency_procs"`
	// Base holds the remaining client settings (linger, batch bytes,
	// buffer, compression, keys, timeout).
	Base Config `json:"base"`
	// BrokerPID is the broker's process id when it runs on this machine
	// (its CPU use goes into every result).
	BrokerPID int `json:"broker_pid,omitempty"`
	// Note is added to the environment (e.g. who shares the cores).
	Note string `json:"note"`
	// RelayCommand starts a relay process for the relay floor points
	// (StartRelayProcess: the program and its arguments, e.g. this
	// ringlog-perf and relay-serve); empty: no floor points.
	RelayCommand []string `json:"relay_command,omitempty"`
	// KfakeCommand starts franz-go's in-memory kfake for the CPU
	// reference points (StartRelayProcess: e.g. this ringlog-perf and
	// kfake-serve); empty: no CPU reference.
	KfakeCommand []string `json:"kfake_command,omitempty"`
}

// DefaultSuite returns the standard matrix.
func DefaultSuite() SuiteConfig {
	return SuiteConfig{
		OutRoot:         "perf/results",
		PointDuration:   Duration(8 * time.Second),
		LatencyDuration: Duration(10 * time.Second),
		Warmup:          Duration(2 * time.Second),
		RefDuration:     Duration(3 * time.Second),
		Sizes:           []int{1024, 100},
		Acks:            []string{"1", "all"},
		Partitions:      []int{1, 2, 4, 8, 16, 32, 64},
		Producers:       []int{1, 2, 4},
		RefPartitions:   16,
		RefSize:         1024,
		ManyPartitions:  1000,
		ManyWarmup:      Duration(2 * time.Second),
		LowRate:         10000,
		LoadFractions:   []float64{0.1, 0.25, 0.5, 0.75, 0.9},
		LatencyProcs:    1,
		Base:            DefaultConfig(ModeProduce),
	}
}

// Target is one goal of the issue and whether it was met.
type Target struct {
	// Name is short; Goal says the target in words; Measured the
	// numbers behind Value (a ratio, or a latency in ms), which is
	// compared with Limit.
	Name     string  `json:"name"`
	Goal     string  `json:"goal"`
	Measured string  `json:"measured"`
	Value    float64 `json:"value"`
	Limit    float64 `json:"limit"`
	// AtMost: the value must not exceed Limit (latency); otherwise it
	// must reach it (ratios).
	AtMost bool `json:"at_most"`
	// Met: the goal was reached.
	Met bool `json:"met"`
	// Missing says why the target could not be measured.
	Missing string `json:"missing,omitempty"`
	// Note qualifies the verdict (e.g. that a ratio above 1 is noise).
	Note string `json:"note,omitempty"`
}

func (t *Target) judge() {
	if t.Missing != "" || math.IsNaN(t.Value) {
		t.Met = false
		return
	}
	if t.AtMost {
		t.Met = t.Value <= t.Limit
	} else {
		t.Met = t.Value >= t.Limit
	}
}

// SuiteResult is everything the suite measured.
type SuiteResult struct {
	// Config is the matrix, Env where it ran, Dir the results folder,
	// Started and Elapsed its time; TCP and ODirect the references;
	// Sweep the max-rate points, ProdRuns the producer-count points,
	// Many the large-topic point, Consume and Latency those runs;
	// Targets the judged goals, Charts the chart files (in Dir), and
	// Failures the steps that failed.
	Config   SuiteConfig `json:"config"`
	Env      Env         `json:"env"`
	Dir      string      `json:"dir"`
	Started  time.Time   `json:"started"`
	Elapsed  Duration    `json:"elapsed"`
	TCP      RefResult   `json:"tcp"`
	ODirect  RefResult   `json:"odirect"`
	Sweep    []*Result   `json:"sweep"`
	ProdRuns []*Result   `json:"producer_runs"`
	Many     *Result     `json:"many_partitions,omitempty"`
	// RawProduce sends prebuilt batches with plain Produce requests at
	// the reference point, acks=1 and all (RunRawProduce).
	RawProduce []*Result `json:"raw_produce,omitempty"`
	Consume    []*Result `json:"consume"`
	// RawConsume reads the same topic with plain Fetch requests, counting
	// batches from their headers (RunRawFetch).
	RawConsume []*Result `json:"raw_consume,omitempty"`
	Latency    []*Result `json:"latency"`
	// RawLatency repeats the acks=1 latency points with plain Produce
	// and Fetch requests (RunRawE2E): the same offered rates, without
	// the clients' per-record work on the shared cores.
	RawLatency []*Result `json:"raw_latency,omitempty"`
	// Floor is the relay floor (RunRelayFloor) at the low rate and at
	// half of the max: the latency this machine gives a process that only
	// moves the records, the same clients' pattern, run alongside.
	Floor []*Result `json:"relay_floor,omitempty"`
	// CPURef is the CPU reference: the reference point at max rate
	// against kfake (in-memory, nothing written) and against the broker,
	// alternated, for the broker's CPU per record against kfake's.
	CPURef   []*Result `json:"cpu_ref,omitempty"`
	Targets  []Target  `json:"targets"`
	Charts   []string  `json:"charts"`
	Failures []string  `json:"failures,omitempty"`
	// ReclaimWaits counts the steps after which the suite waited for the
	// hypervisor to take back memory the step freed, ReclaimWaited their
	// time in all (settler).
	ReclaimWaits  int      `json:"reclaim_waits,omitempty"`
	ReclaimWaited Duration `json:"reclaim_waited,omitempty"`
	// Redrawn: the report was drawn again from results.jsonl
	// (ReadSuite), Elapsed estimated from the runs' start times.
	Redrawn  bool `json:"redrawn,omitempty"`
	refPoint map[string]*Result
}

// refLine is a reference measurement in results.jsonl.
type refLine struct {
	Mode string    `json:"mode"`
	Ref  RefResult `json:"ref"`
	Env  Env       `json:"env"`
}

// RunSuite runs the standard matrix against the brokers and writes
// results.jsonl, the charts, targets.json and summary.md into a fresh
// results folder. One progress line per step goes to progress.
func RunSuite(ctx context.Context, sc SuiteConfig, progress io.Writer) (_ *SuiteResult, err error) {
	if len(sc.Brokers) == 0 {
		return nil, fmt.Errorf("suite: no brokers")
	}
	dir := sc.Dir
	if dir == "" {
		var err error
		if dir, err = ResultsDir(sc.OutRoot, time.Now()); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out, err := openJSONL(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, out.close()) }()
	sr := &SuiteResult{Config: sc, Dir: dir, Started: time.Now().UTC(), refPoint: map[string]*Result{}}
	st := newSettler()
	if !sc.NoSettle {
		wctx, stop := context.WithCancel(ctx)
		var watching sync.WaitGroup
		watching.Add(1)
		go func() { defer watching.Done(); st.watch(wctx) }()
		defer func() { stop(); watching.Wait() }()
	}
	env := HostEnv()
	env.Note = sc.Note

	base := sc.Base
	base.Brokers = sc.Brokers
	base.BrokerPID = sc.BrokerPID
	base.Warmup = sc.Warmup
	base.ReportEvery = 0
	base.Producers, base.Consumers, base.Keys.Kind = 1, 1, "none"

	// The phases and their steps (one progress line each).
	moreProducers := 0
	for _, np := range sc.Producers {
		if np != 1 {
			moreProducers++
		}
	}
	manySteps := 0
	if sc.ManyPartitions > 0 {
		manySteps = 1
	}
	phaseSteps := map[string]int{
		"references":    2,
		"sweep":         len(sc.Sizes) * len(sc.Acks) * len(sc.Partitions),
		"producers":     moreProducers + 2,
		"consume":       4,
		"latency":       2 + len(sc.LoadFractions),
		"raw latency":   1 + len(sc.LoadFractions),
		"relay floor":   floorSteps(sc),
		"cpu reference": cpuRefSteps(sc),
		"many":          manySteps,
	}
	steps := 0
	for _, n := range phaseSteps {
		steps += n
	}
	clock := newStepClock(steps, time.Now)
	phase := func(name string) { clock.startPhase(name, phaseSteps[name]) }
	say := func(format string, args ...any) {
		pos := clock.step()
		defer func() {
			if !sc.NoSettle {
				st.settle(ctx)
			}
		}()
		if progress != nil {
			fmt.Fprintf(progress, "perf %s %s\n", pos, fmt.Sprintf(format, args...))
		}
	}
	fail := func(what string, err error) {
		msg := fmt.Sprintf("%s: %v", what, err)
		sr.Failures = append(sr.Failures, msg)
		if progress != nil {
			fmt.Fprintf(progress, "perf: FAILED %s\n", msg)
		}
	}

	// 1. The physical references, with the broker idle.
	phase("references")
	if !sc.NoSettle {
		st.settle(ctx)
	}
	if r, err := TCPLoopback(ctx, sc.RefDuration.D()); err != nil {
		r.Error = err.Error()
		sr.TCP = r
		fail("tcp loopback reference", err)
	} else {
		sr.TCP = r
		say("reference: loopback TCP pump %.0f MB/s", r.MBPerSec)
	}
	out.write(refLine{Mode: "ref", Ref: sr.TCP, Env: env})
	if sc.DataDir == "" {
		sr.ODirect = RefResult{Name: "odirect_write", Error: "no --data-dir given"}
		say("reference: O_DIRECT writer skipped (no data dir)")
	} else if r, err := ODirectWrite(ctx, sc.DataDir, sc.RefDuration.D(), 4<<30); errors.Is(err, errors.ErrUnsupported) {
		r.Error = err.Error()
		sr.ODirect = r
		say("reference: O_DIRECT writer skipped (%v)", err)
	} else if err != nil {
		r.Error = err.Error()
		sr.ODirect = r
		fail("O_DIRECT reference", err)
	} else {
		sr.ODirect = r
		say("reference: O_DIRECT sequential writer %.0f MB/s", r.MBPerSec)
	}
	out.write(refLine{Mode: "ref", Ref: sr.ODirect, Env: env})

	point := func(c Config, keep bool) (*Result, error) {
		c.KeepTopic = keep
		r, err := RunProduce(ctx, c, nil)
		if err == nil {
			r.Env.Note = sc.Note
			out.write(r)
			if sr.Env.Host == "" {
				sr.Env = r.Env
			}
		}
		return r, err
	}

	// 2. The sweep: sizes x acks x partitions at max rate.
	phase("sweep")
	var keptTopic string
	for _, size := range sc.Sizes {
		for _, acks := range sc.Acks {
			for _, n := range sc.Partitions {
				c := base
				c.RecordSize, c.Acks, c.Partitions, c.Rate = size, acks, n, 0
				c.Duration = sc.PointDuration
				c.Label = fmt.Sprintf("produce %s acks=%s partitions=%d", sizeName(size), acks, n)
				keep := size == sc.RefSize && acks == "1" && n == sc.RefPartitions
				r, err := point(c, keep)
				if err != nil {
					fail(c.Label, err)
					say("%s: failed", c.Label)
					continue
				}
				if keep {
					keptTopic = r.Topic
				}
				sr.Sweep = append(sr.Sweep, r)
				say("%s: %.0f records/s, %.1f MB/s%s", c.Label, r.RecordsPerSec, r.MBPerSec, latNote("ack", r.ProduceLatency))
			}
		}
	}
	refOne := sr.find(sc.RefSize, "1", sc.RefPartitions, 1)

	// 3. More producers at the reference point.
	phase("producers")
	if refOne != nil {
		sr.ProdRuns = append(sr.ProdRuns, refOne)
	}
	for _, np := range sc.Producers {
		if np == 1 {
			continue
		}
		c := base
		c.RecordSize, c.Acks, c.Partitions, c.Producers, c.Rate = sc.RefSize, "1", sc.RefPartitions, np, 0
		c.Duration = sc.PointDuration
		c.Label = fmt.Sprintf("produce %s acks=1 partitions=%d producers=%d", sizeName(sc.RefSize), sc.RefPartitions, np)
		r, err := point(c, false)
		if err != nil {
			fail(c.Label, err)
			say("%s: failed", c.Label)
			continue
		}
		sr.ProdRuns = append(sr.ProdRuns, r)
		say("%s: %.0f records/s, %.1f MB/s%s", c.Label, r.RecordsPerSec, r.MBPerSec, latNote("ack", r.ProduceLatency))
	}

	// 3b. The broker's ingest rate at the reference point, without a
	// producer client's per-record work on the shared cores.
	for _, acks := range []string{"1", "all"} {
		c := base
		c.RecordSize, c.Acks, c.Partitions, c.Rate = sc.RefSize, acks, sc.RefPartitions, 0
		c.Duration = sc.PointDuration
		c.Label = fmt.Sprintf("raw produce %s acks=%s partitions=%d", sizeName(sc.RefSize), acks, sc.RefPartitions)
		r, err := RunRawProduce(ctx, c, nil)
		if err != nil {
			fail(c.Label, err)
			say("%s: failed", c.Label)
			continue
		}
		r.Env.Note = sc.Note
		out.write(r)
		sr.RawProduce = append(sr.RawProduce, r)
		say("%s: %.0f records/s, %.1f MB/s%s", c.Label, r.RecordsPerSec, r.MBPerSec, latNote("request", r.ProduceLatency))
	}

	// 4. Consume the reference point's topic from offset 0.
	phase("consume")
	for _, nc := range []int{1, 2} {
		if keptTopic == "" {
			clock.skip(1)
			continue
		}
		c := base
		c.Mode = ModeConsume
		c.Topic, c.RecordSize, c.Consumers, c.Warmup = keptTopic, sc.RefSize, nc, 0
		c.Duration = Duration(max(2*sc.PointDuration.D(), 30*time.Second))
		c.Label = fmt.Sprintf("consume %s from offset 0, %d consumer(s), %d partitions", sizeName(sc.RefSize), nc, sc.RefPartitions)
		r, err := RunConsume(ctx, c, nil)
		if err != nil {
			fail(c.Label, err)
			say("%s: failed", c.Label)
			continue
		}
		r.Env.Note = sc.Note
		out.write(r)
		sr.Consume = append(sr.Consume, r)
		say("%s: %.0f records/s, %.1f MB/s", c.Label, r.RecordsPerSec, r.MBPerSec)
	}
	for _, nc := range []int{1, 2} {
		if keptTopic == "" {
			continue
		}
		c := base
		c.Topic, c.RecordSize, c.Consumers, c.Warmup = keptTopic, sc.RefSize, nc, 0
		c.Duration = Duration(max(2*sc.PointDuration.D(), 30*time.Second))
		c.Label = fmt.Sprintf("raw fetch %s from offset 0, %d fetcher(s), %d partitions", sizeName(sc.RefSize), nc, sc.RefPartitions)
		r, err := RunRawFetch(ctx, c, nil)
		if err != nil {
			fail(c.Label, err)
			say("%s: failed", c.Label)
			continue
		}
		r.Env.Note = sc.Note
		out.write(r)
		sr.RawConsume = append(sr.RawConsume, r)
		say("%s: %.0f records/s, %.1f MB/s", c.Label, r.RecordsPerSec, r.MBPerSec)
	}
	if keptTopic != "" {
		if adm, err := newAdmin(&base); err == nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), base.Timeout.D())
			adm.deleteTopic(dctx, keptTopic)
			cancel()
			adm.close()
		}
		if !sc.NoSettle {
			st.settle(ctx)
		}
	}

	// 5. End-to-end latency at fixed rates.
	phase("latency")
	// latWith runs one fixed-rate e2e point with run (the franz-go
	// clients or the raw ones) and adds it to *into.
	latWith := func(run func(context.Context, Config, io.Writer) (*Result, error), into *[]*Result, acks string, rate float64, label string) *Result {
		c := base
		c.Mode = ModeE2E
		c.RecordSize, c.Acks, c.Partitions, c.Rate = sc.RefSize, acks, sc.RefPartitions, rate
		if refOne == nil || rate <= 0.5*refOne.RecordsPerSec {
			c.Procs = sc.LatencyProcs
		}
		c.Duration = sc.LatencyDuration
		c.Label = label
		r, err := run(ctx, c, nil)
		if err != nil {
			fail(c.Label, err)
			say("%s: failed", c.Label)
			return nil
		}
		r.Env.Note = sc.Note
		out.write(r)
		*into = append(*into, r)
		say("%s: %.0f records/s%s%s", c.Label, r.RecordsPerSec, latNote("e2e", r.E2ELatency), lagNote(r.SendLag))
		return r
	}
	lat := func(acks string, rate float64, label string) *Result {
		return latWith(RunE2E, &sr.Latency, acks, rate, label)
	}
	lowLabel := func(acks string) string {
		return fmt.Sprintf("e2e %s acks=%s partitions=%d at %.0f records/s", sizeName(sc.RefSize), acks, sc.RefPartitions, sc.LowRate)
	}
	sr.refPoint["low"] = lat("1", sc.LowRate, lowLabel("1"))
	sr.refPoint["low_all"] = lat("all", sc.LowRate, lowLabel("all"))
	var rates []float64 // of the load fractions
	if refOne != nil {
		for _, f := range sc.LoadFractions {
			rates = append(rates, f*refOne.RecordsPerSec)
			r := lat("1", f*refOne.RecordsPerSec, fmt.Sprintf("e2e %s acks=1 partitions=%d at %.0f%% of max (%.0f records/s)",
				sizeName(sc.RefSize), sc.RefPartitions, f*100, f*refOne.RecordsPerSec))
			if f == 0.5 {
				sr.refPoint["half"] = r
			}
		}
	} else {
		clock.skip(len(sc.LoadFractions))
	}

	// 5b. The same acks=1 points with the raw clients.
	phase("raw latency")
	rawLat := func(rate float64, label string) *Result {
		return latWith(RunRawE2E, &sr.RawLatency, "1", rate, label)
	}
	sr.refPoint["raw_low"] = rawLat(sc.LowRate, "raw "+lowLabel("1"))
	for i, rate := range rates {
		f := sc.LoadFractions[i]
		r := rawLat(rate, fmt.Sprintf("raw e2e %s acks=1 partitions=%d at %.0f%% of max (%.0f records/s)", sizeName(sc.RefSize), sc.RefPartitions, f*100, rate))
		if f == 0.5 {
			sr.refPoint["raw_half"] = r
		}
	}
	if rates == nil {
		clock.skip(len(sc.LoadFractions))
	}

	// 5c. The host's floor at the target rates: the same paced producer
	// and long-polling consumer, a relay that only moves the records.
	phase("relay floor")
	// runFloor is RunRelayFloor against a relay process of its own,
	// started for the run (its CPU is read as the broker's would be).
	runFloor := func(ctx context.Context, c Config, w io.Writer) (*Result, error) {
		relay, err := StartRelayProcess(sc.RelayCommand[0], sc.RelayCommand[1:]...)
		if err != nil {
			return nil, err
		}
		c.BrokerPID = relay.PID
		r, err := RunRelayFloor(ctx, c, relay.Addr, w)
		if serr := relay.Stop(); err == nil && serr != nil {
			err = fmt.Errorf("stop the relay: %w", serr)
		}
		return r, err
	}
	floorAt := func(rate float64, label string) *Result {
		return latWith(runFloor, &sr.Floor, "1", rate, label)
	}
	if len(sc.RelayCommand) > 0 {
		sr.refPoint["floor_low"] = floorAt(sc.LowRate, fmt.Sprintf("relay floor %s at %.0f records/s", sizeName(sc.RefSize), sc.LowRate))
		if refOne != nil && slices.Contains(sc.LoadFractions, 0.5) {
			rate := 0.5 * refOne.RecordsPerSec
			sr.refPoint["floor_half"] = floorAt(rate, fmt.Sprintf("relay floor %s at 50%% of max (%.0f records/s)", sizeName(sc.RefSize), rate))
		} else {
			clock.skip(1)
		}
	}

	// 5d. The CPU reference: the reference point at max rate against
	// kfake, which keeps the records in memory and writes nothing, and
	// against the broker, alternated, each kfake in a fresh process (it
	// keeps every record it was sent).
	phase("cpu reference")
	if len(sc.KfakeCommand) > 0 {
		for round := 1; round <= cpuRefRounds; round++ {
			for _, kfake := range []bool{true, false} {
				c := base
				c.RecordSize, c.Acks, c.Partitions, c.Rate = sc.RefSize, "1", sc.RefPartitions, 0
				c.Duration = sc.PointDuration
				c.Label = fmt.Sprintf("%s broker, produce %s acks=1 partitions=%d, round %d", cpuRefPrefix, sizeName(sc.RefSize), sc.RefPartitions, round)
				var proc *RelayProcess
				if kfake {
					var err error
					if proc, err = StartRelayProcess(sc.KfakeCommand[0], sc.KfakeCommand[1:]...); err != nil {
						fail("start kfake", err)
						say("kfake round %d: failed", round)
						continue
					}
					c.Brokers, c.BrokerPID = []string{proc.Addr}, proc.PID
					c.Label = fmt.Sprintf("%s kfake, produce %s acks=1 partitions=%d, round %d", cpuRefPrefix, sizeName(sc.RefSize), sc.RefPartitions, round)
				}
				r, err := point(c, false)
				if proc != nil {
					if serr := proc.Stop(); err == nil && serr != nil {
						err = fmt.Errorf("stop kfake: %w", serr)
					}
				}
				if err != nil {
					fail(c.Label, err)
					say("%s: failed", c.Label)
					continue
				}
				sr.CPURef = append(sr.CPURef, r)
				say("%s: %.0f records/s, broker CPU %s µs per record", c.Label, r.RecordsPerSec, usPerRecord(r))
			}
		}
	}

	phase("many")
	// 6. Many partitions, last: a thousand partitions' files stay in the
	// page cache and would disturb the steps after it.
	if sc.ManyPartitions > 0 {
		c := base
		c.RecordSize, c.Acks, c.Partitions, c.Rate = sc.RefSize, "1", sc.ManyPartitions, 0
		c.Warmup = max(sc.ManyWarmup, sc.Warmup)
		c.Duration = sc.PointDuration - sc.Warmup + c.Warmup
		c.Label = fmt.Sprintf("produce %s acks=1 partitions=%d", sizeName(sc.RefSize), sc.ManyPartitions)
		if r, err := point(c, false); err != nil {
			fail(c.Label, err)
			say("%s: failed", c.Label)
		} else {
			sr.Many = r
			say("%s: %.0f records/s, %.1f MB/s after a %s warm-up (half that rate reached after %ds)%s", c.Label, r.RecordsPerSec, r.MBPerSec,
				c.Warmup.D(), r.SecondsToReach(0.5), latNote("ack", r.ProduceLatency))
		}
	}

	if sr.Env.Host == "" {
		sr.Env = env
	}
	sr.Env.Note = sc.Note
	sr.Elapsed = Duration(time.Since(clock.began).Round(time.Second))
	sr.ReclaimWaits, sr.ReclaimWaited = st.waits, Duration(st.waited.Round(time.Second))
	return sr, sr.WriteReport(dir, fail)
}

// cpuRefPrefix starts the labels of the CPU reference points, and
// cpuRefRounds is how many rounds of them (kfake, then the broker) run.
const (
	cpuRefPrefix = "cpu reference:"
	cpuRefRounds = 2
)

// cpuRefSteps is the number of CPU reference points the suite runs.
func cpuRefSteps(sc SuiteConfig) int {
	if len(sc.KfakeCommand) == 0 {
		return 0
	}
	return 2 * cpuRefRounds
}

// usPerRecord is r's broker CPU per record in µs, "?" where the broker's
// CPU was not read.
func usPerRecord(r *Result) string {
	if r.BrokerCores <= 0 || r.RecordsPerSec <= 0 {
		return "?"
	}
	return fmt.Sprintf("%.2f", r.BrokerCores/r.RecordsPerSec*1e6)
}

// floorSteps is the number of relay floor points the suite runs.
func floorSteps(sc SuiteConfig) int {
	if len(sc.RelayCommand) == 0 {
		return 0
	}
	return 2
}

// keptUp says whether a fixed-rate run's load generator kept to its
// schedule closely enough to judge a latency limit of limitMs: at least
// 95% of the offered rate delivered, and its sends no later than limitMs
// at p99. A generator later than the limit itself (its one P busy with
// encoding and decoding: the franz-go one at 0.9-0.95 of a core from
// 120k 1 KiB records/s on the 2-vCPU host) measured its own delay.
func keptUp(r *Result, limitMs float64) bool {
	return r != nil && r.E2ELatency != nil && r.OfferedRate > 0 && r.RecordsPerSec >= 0.95*r.OfferedRate &&
		(r.SendLag == nil || r.SendLag.P99 <= limitMs)
}

// lagP99 is a run's send lag p99 in ms (0 when not measured).
func lagP99(r *Result) float64 {
	if r == nil || r.SendLag == nil {
		return 0
	}
	return r.SendLag.P99
}

func lagNote(l *Latency) string {
	if l == nil {
		return ""
	}
	return fmt.Sprintf(" (send lag p99 %.2f ms)", l.P99)
}

func sizeName(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

// find returns the sweep point of that size, acks and partitions (and
// producer count), or nil.
func (sr *SuiteResult) find(size int, acks string, parts, producers int) *Result {
	for _, r := range append(append([]*Result{}, sr.Sweep...), sr.ProdRuns...) {
		c := r.Config
		if c.RecordSize == size && c.Acks == acks && c.Partitions == parts && c.Producers == producers {
			return r
		}
	}
	return nil
}

// targets judges the goals.
func (sr *SuiteResult) targets() []Target {
	sc := sr.Config
	var ts []Target
	one := sr.find(sc.RefSize, "1", sc.RefPartitions, 1)
	all := sr.find(sc.RefSize, "all", sc.RefPartitions, 1)

	t1 := Target{Name: "produce vs physical", Goal: fmt.Sprintf("%s records, acks=1, %d partitions: produce ≥ 50%% of min(loopback TCP, O_DIRECT write)", sizeName(sc.RefSize), sc.RefPartitions), Limit: 0.5}
	phys := math.NaN()
	switch {
	case sr.TCP.MBPerSec > 0 && sr.ODirect.MBPerSec > 0:
		phys = min(sr.TCP.MBPerSec, sr.ODirect.MBPerSec)
	case sr.TCP.MBPerSec > 0:
		phys = sr.TCP.MBPerSec
		t1.Goal += " (O_DIRECT missing: TCP only)"
	}
	// The best of the franz-go producer runs (1, 2, 4 clients) and the
	// raw producer at acks=1, as the consume target takes the best of
	// its clients; both are reported.
	var bestP, bestKgoP *Result
	for _, r := range sr.ProdRuns {
		if bestKgoP == nil || r.MBPerSec > bestKgoP.MBPerSec {
			bestKgoP = r
		}
	}
	bestP = bestKgoP
	for _, r := range sr.RawProduce {
		if r.Config.Acks == "1" && (bestP == nil || r.MBPerSec > bestP.MBPerSec) {
			bestP = r
		}
	}
	if bestP == nil || math.IsNaN(phys) {
		t1.Missing = "point or references missing"
	} else {
		t1.Value = bestP.MBPerSec / phys
		t1.Measured = fmt.Sprintf("%.1f MB/s (%s) / %.1f MB/s = %.2f", bestP.MBPerSec, bestP.Label, phys, t1.Value)
		if bestKgoP != nil && bestKgoP != bestP {
			t1.Measured += fmt.Sprintf("; franz-go producers: %.1f MB/s (%d producer(s)) = %.2f", bestKgoP.MBPerSec, bestKgoP.Config.Producers, bestKgoP.MBPerSec/phys)
		}
	}
	ts = append(ts, t1)

	t2 := Target{Name: "acks=all vs acks=1", Goal: fmt.Sprintf("%s, %d partitions: acks=all (fdatasync) ≥ 60%% of acks=1", sizeName(sc.RefSize), sc.RefPartitions), Limit: 0.6}
	if one == nil || all == nil || one.MBPerSec == 0 {
		t2.Missing = "point missing"
	} else {
		t2.Value = all.MBPerSec / one.MBPerSec
		t2.Measured = fmt.Sprintf("%.1f MB/s / %.1f MB/s = %.2f", all.MBPerSec, one.MBPerSec, t2.Value)
		if t2.Value > 1 {
			t2.Note = fmt.Sprintf("acks=all does the work of acks=1 plus an fdatasync, so it cannot be faster: "+
				"the %.0f%% it is ahead is run-to-run noise between two single runs (each point is measured once), "+
				"read it as no measurable cost of acks=all at this point, not as a gain", (t2.Value-1)*100)
		}
		var rawOne, rawAll *Result
		for _, r := range sr.RawProduce {
			if r.Config.Acks == "1" {
				rawOne = r
			} else {
				rawAll = r
			}
		}
		if rawOne != nil && rawAll != nil && rawOne.MBPerSec > 0 {
			t2.Measured += fmt.Sprintf("; raw producer: %.1f / %.1f MB/s = %.2f", rawAll.MBPerSec, rawOne.MBPerSec, rawAll.MBPerSec/rawOne.MBPerSec)
		}
	}
	ts = append(ts, t2)

	t3 := Target{Name: "consume vs TCP", Goal: "consume from offset 0 ≥ 70% of loopback TCP", Limit: 0.7}
	var bestC, bestKgo *Result
	for _, r := range append(append([]*Result(nil), sr.Consume...), sr.RawConsume...) {
		if bestC == nil || r.MBPerSec > bestC.MBPerSec {
			bestC = r
		}
	}
	for _, r := range sr.Consume {
		if bestKgo == nil || r.MBPerSec > bestKgo.MBPerSec {
			bestKgo = r
		}
	}
	if bestC == nil || sr.TCP.MBPerSec == 0 {
		t3.Missing = "consume run or TCP reference missing"
	} else {
		t3.Value = bestC.MBPerSec / sr.TCP.MBPerSec
		t3.Measured = fmt.Sprintf("%.1f MB/s (%s) / %.1f MB/s = %.2f", bestC.MBPerSec, bestC.Label, sr.TCP.MBPerSec, t3.Value)
		if bestKgo != nil && bestKgo != bestC {
			t3.Measured += fmt.Sprintf("; franz-go consumers, decoding every record: %.1f MB/s = %.2f", bestKgo.MBPerSec, bestKgo.MBPerSec/sr.TCP.MBPerSec)
		}
	}
	ts = append(ts, t3)

	// latTarget judges the p99 (p999: the p99.9) of the franz-go run at
	// a rate, or of the raw clients' run when the franz-go load generator
	// fell behind its schedule (keptUp: it then measured itself, not the
	// broker) and the raw clients did not,
	// and adds the other run and the host's floor at that rate.
	latTarget := func(name, goal string, kgo, raw, floor *Result, limit float64, p999 bool) Target {
		t := Target{Name: name, Goal: goal, Limit: limit, AtMost: true}
		r, other, otherName := kgo, raw, "raw clients"
		if !keptUp(kgo, limit) && keptUp(raw, limit) {
			r, other, otherName = raw, kgo, "franz-go"
			t.Note = fmt.Sprintf("judged on the raw clients: the franz-go load generator fell behind (%.0f of %.0f records/s offered, send lag p99 %.2f ms against a limit of %g ms), so its run measured the generator", kgo.RecordsPerSec, kgo.OfferedRate, lagP99(kgo), limit)
		}
		if r == nil || r.E2ELatency == nil {
			t.Missing = "latency run missing"
			return t
		}
		l := r.E2ELatency
		if p999 {
			t.Value = l.P999
			t.Measured = fmt.Sprintf("p99.9 %.3f ms at %.0f records/s (p99 %.3f, p99.99 %.3f, max %.3f)", t.Value, r.OfferedRate, l.P99, l.P9999, l.Max)
		} else {
			t.Value = l.P99
			t.Measured = fmt.Sprintf("p99 %.3f ms at %.0f records/s (p50 %.3f, p99.9 %.3f, max %.3f)", t.Value, r.OfferedRate, l.P50, l.P999, l.Max)
		}
		// The other clients' run: the raw clients show what the broker
		// does without the clients' per-record work on the cores it
		// shares.
		if other != nil && other.E2ELatency != nil {
			t.Measured += fmt.Sprintf("; %s: p99 %.3f ms, p99.9 %.3f ms (CPU cores loadgen / broker %s)", otherName, other.E2ELatency.P99, other.E2ELatency.P999, cpuCell(other))
		}
		// The host's relay floor: what any broker's latency here
		// includes (the floor's own numbers have no broker in them).
		if floor != nil && floor.E2ELatency != nil {
			t.Measured += fmt.Sprintf("; host floor (relay-floor, no broker): p99 %.3f ms, p99.9 %.3f ms", floor.E2ELatency.P99, floor.E2ELatency.P999)
		}
		return t
	}
	lowGoal := func(what string, limit float64) string {
		return fmt.Sprintf("end-to-end %s ≤ %g ms at %.0f records/s (acks=1)", what, limit, sc.LowRate)
	}
	ts = append(ts,
		latTarget("e2e p99 at low rate", lowGoal("p99", 1), sr.refPoint["low"], sr.refPoint["raw_low"], sr.refPoint["floor_low"], 1, false),
		latTarget("e2e p99.9 at low rate", lowGoal("p99.9", 3), sr.refPoint["low"], sr.refPoint["raw_low"], sr.refPoint["floor_low"], 3, true),
		latTarget("e2e p99 at 50% of max", "end-to-end p99 ≤ 5 ms at 50% of max throughput (acks=1)", sr.refPoint["half"], sr.refPoint["raw_half"], sr.refPoint["floor_half"], 5, false))

	t5 := Target{Name: "many partitions", Goal: fmt.Sprintf("%d partitions ≥ 80%% of the best throughput of the sweep (%s, acks=1)", sc.ManyPartitions, sizeName(sc.RefSize)), Limit: 0.8}
	var best *Result
	for _, r := range sr.Sweep {
		if r.Config.RecordSize == sc.RefSize && r.Config.Acks == "1" && (best == nil || r.MBPerSec > best.MBPerSec) {
			best = r
		}
	}
	if sr.Many == nil || best == nil {
		t5.Missing = "point missing"
	} else {
		t5.Value = sr.Many.MBPerSec / best.MBPerSec
		t5.Measured = fmt.Sprintf("%.1f MB/s / %.1f MB/s (best, %d partitions) = %.2f", sr.Many.MBPerSec, best.MBPerSec, best.Config.Partitions, t5.Value)
	}
	ts = append(ts, t5, cpuRefTarget(sr.CPURef))
	ts = append(ts, floorTargets(sc, sr.refPoint)...)
	for i := range ts {
		ts[i].judge()
	}
	return ts
}

// charts draws the suite's charts into dir and returns their file names.
func (sr *SuiteResult) charts(dir string, fail func(string, error)) []string {
	var files []string
	for _, nc := range sr.chartSet() {
		if err := nc.chart.Save(filepath.Join(dir, nc.name)); err != nil {
			fail("chart "+nc.name, err)
			continue
		}
		files = append(files, nc.name)
	}
	return files
}

// namedChart is a chart and the file name it is saved under.
type namedChart struct {
	name  string
	chart Chart
}

// chartSet is the suite's charts, by file name.
func (sr *SuiteResult) chartSet() []namedChart {
	var set []namedChart
	save := func(name string, c Chart) { set = append(set, namedChart{name, c}) }
	var parts []float64
	for _, n := range sr.Config.Partitions {
		parts = append(parts, float64(n))
	}
	if sr.Many != nil {
		parts = append(parts, float64(sr.Many.Config.Partitions))
	}
	var mb, recs []Series
	for _, size := range sr.Config.Sizes {
		for _, acks := range sr.Config.Acks {
			s1 := Series{Name: fmt.Sprintf("%s acks=%s", sizeName(size), acks)}
			s2 := s1
			for _, r := range sr.Sweep {
				if r.Config.RecordSize == size && r.Config.Acks == acks && r.Config.Producers == 1 {
					s1.X, s1.Y = append(s1.X, float64(r.Config.Partitions)), append(s1.Y, r.MBPerSec)
					s2.X, s2.Y = append(s2.X, float64(r.Config.Partitions)), append(s2.Y, r.RecordsPerSec)
				}
			}
			mb, recs = append(mb, s1), append(recs, s2)
		}
	}
	if m := sr.Many; m != nil {
		// A point of its own, not the sweep's continuation: no line joins
		// it to the sweep's last point.
		name := fmt.Sprintf("%s acks=%s, %d partitions", sizeName(m.Config.RecordSize), m.Config.Acks, m.Config.Partitions)
		mb = append(mb, Series{Name: name, X: []float64{float64(m.Config.Partitions)}, Y: []float64{m.MBPerSec}, PointsOnly: true})
		recs = append(recs, Series{Name: name, X: []float64{float64(m.Config.Partitions)}, Y: []float64{m.RecordsPerSec}, PointsOnly: true})
	}
	refs := fmt.Sprintf("\n(references: loopback TCP %.0f MB/s, O_DIRECT %.0f MB/s)", sr.TCP.MBPerSec, sr.ODirect.MBPerSec)
	save("throughput_vs_partitions.svg", Chart{Title: "Produce throughput vs partitions, max rate, 1 producer" + refs,
		XLabel: "partitions", YLabel: "MB/s", Categories: parts, Series: mb})
	save("records_vs_partitions.svg", Chart{Title: "Produce records/s vs partitions, max rate, 1 producer",
		XLabel: "partitions", YLabel: "records/s", Categories: parts, Series: recs})
	if len(sr.ProdRuns) > 1 {
		s := Series{Name: fmt.Sprintf("%s acks=1 %d partitions", sizeName(sr.Config.RefSize), sr.Config.RefPartitions)}
		var ticks []float64
		for _, r := range sr.ProdRuns {
			s.X, s.Y = append(s.X, float64(r.Config.Producers)), append(s.Y, r.MBPerSec)
			ticks = append(ticks, float64(r.Config.Producers))
		}
		save("throughput_vs_producers.svg", Chart{Title: "Produce throughput vs producer clients", XLabel: "producers",
			YLabel: "MB/s", Categories: ticks, Series: []Series{s}})
	}
	var curve []*Result
	for _, r := range sr.Latency {
		if r.Config.Acks == "1" {
			curve = append(curve, r)
		}
	}
	if len(curve) > 0 {
		save("latency_vs_load.svg", latencyChart(fmt.Sprintf("End-to-end latency vs load (%s, acks=1, %d partitions)",
			sizeName(sr.Config.RefSize), sr.Config.RefPartitions), curve))
	}
	if len(sr.RawLatency) > 0 {
		save("latency_vs_load_raw.svg", latencyChart(fmt.Sprintf("End-to-end latency vs load, raw clients (%s, acks=1, %d partitions)",
			sizeName(sr.Config.RefSize), sr.Config.RefPartitions), sr.RawLatency))
	}
	return set
}

// cpuRefTarget judges the broker's CPU per record against kfake's over
// the CPU reference points: each side's broker CPU seconds over its
// records, all its rounds together.
func cpuRefTarget(runs []*Result) Target {
	t := Target{Name: "CPU per record vs kfake", Goal: "broker CPU per record ≤ 0.5x franz-go's in-memory kfake's at max rate (reference point, acks=1), measured alternately in the same run", Limit: 0.5, AtMost: true}
	var cpu, recs [2]float64 // [0] the broker, [1] kfake
	var rounds [2]int
	for _, r := range runs {
		side := 0
		if strings.HasPrefix(r.Label, cpuRefPrefix+" kfake") {
			side = 1
		}
		if r.BrokerCores <= 0 || r.RecordsPerSec <= 0 {
			continue
		}
		secs := float64(r.Records) / r.RecordsPerSec
		cpu[side] += r.BrokerCores * secs
		recs[side] += float64(r.Records)
		rounds[side]++
	}
	if rounds[0] == 0 || rounds[1] == 0 {
		t.Missing = "CPU reference points missing (no kfake, or the broker's CPU not read: --broker-pid)"
		return t
	}
	us := func(side int) float64 { return cpu[side] / recs[side] * 1e6 }
	t.Value = us(0) / us(1)
	t.Measured = fmt.Sprintf("%.2f µs / %.2f µs per record (broker / kfake, %d and %d rounds) = %.2f", us(0), us(1), rounds[0], rounds[1], t.Value)
	return t
}

// floorTargets are the latency goals restated against the host's floor
// (issue 42): what the broker adds to the relay floor's p99 at the low
// rate, the raw clients' p99 against the floor's at half of the max, and
// the franz-go clients' p99 against the raw clients' at the low rate (how
// much of the tail is the client library's). The raw clients judge the
// broker: on shared cores the franz-go generator's own work is in its
// numbers.
func floorTargets(sc SuiteConfig, ref map[string]*Result) []Target {
	p99 := func(r *Result) (float64, bool) {
		if r == nil || r.E2ELatency == nil {
			return 0, false
		}
		return r.E2ELatency.P99, true
	}
	added := Target{Name: "added p99 at low rate", Goal: fmt.Sprintf("the broker's added e2e p99 (raw clients' p99 − relay floor's p99, same run) ≤ 0.3 ms at %.0f records/s", sc.LowRate), Limit: 0.3, AtMost: true}
	raw, okRaw := p99(ref["raw_low"])
	floor, okFloor := p99(ref["floor_low"])
	if okRaw && okFloor {
		added.Value = math.Round((raw-floor)*1000) / 1000 // µs, as shown
		added.Measured = fmt.Sprintf("%.3f ms − %.3f ms = %.3f ms", raw, floor, added.Value)
	} else {
		added.Missing = "raw clients' or relay floor's low-rate run missing"
	}
	half := Target{Name: "p99 vs floor at 50% of max", Goal: "raw clients' e2e p99 ≤ 2x the relay floor's p99 at 50% of max (acks=1, same run)", Limit: 2, AtMost: true}
	raw, okRaw = p99(ref["raw_half"])
	floor, okFloor = p99(ref["floor_half"])
	if okRaw && okFloor && floor > 0 {
		half.Value = raw / floor
		half.Measured = fmt.Sprintf("%.3f ms / %.3f ms = %.2f", raw, floor, half.Value)
	} else {
		half.Missing = "raw clients' or relay floor's run at half of the max missing"
	}
	client := Target{Name: "franz-go vs raw clients at low rate", Goal: fmt.Sprintf("franz-go's e2e p99 ≤ 1.3x the raw clients' at %.0f records/s (acks=1, same run)", sc.LowRate), Limit: 1.3, AtMost: true}
	kgo, okKgo := p99(ref["low"])
	raw, okRaw = p99(ref["raw_low"])
	if okKgo && okRaw && raw > 0 {
		client.Value = kgo / raw
		client.Measured = fmt.Sprintf("%.3f ms / %.3f ms = %.2f", kgo, raw, client.Value)
		if r := ref["low"]; r.SendLag != nil {
			client.Measured += fmt.Sprintf(" (franz-go's send lag p99 %.3f ms)", r.SendLag.P99)
		}
	} else {
		client.Missing = "franz-go's or the raw clients' low-rate run missing"
	}
	return []Target{added, half, client}
}
