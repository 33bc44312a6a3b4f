package perf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// ScaleConfig is a sweep: a max-rate produce run for every (producers,
// partitions) pair, then end-to-end latency runs at fractions of the best
// throughput found.
type ScaleConfig struct {
	// Base is the configuration of every point (Partitions, Producers
	// and Rate are set per point).
	Base Config `json:"base"`
	// Partitions and Producers are the sweep's axes.
	Partitions []int `json:"partitions"`
	Producers  []int `json:"producers"`
	// LoadFractions are the fractions of the best throughput at which
	// the latency runs go (empty: no latency runs).
	LoadFractions []float64 `json:"load_fractions"`
	// OutRoot is the folder under which the results folder
	// <YYYYMMDD-HHMM>-<host> is made; Dir, when set, is the folder itself.
	OutRoot string `json:"out_root"`
	Dir     string `json:"dir,omitempty"`
}

// ScaleResult is a sweep's outcome.
type ScaleResult struct {
	// Config is the sweep, Env where it ran (from its first point),
	// Started and Elapsed its time.
	Config  ScaleConfig `json:"config"`
	Env     Env         `json:"env"`
	Started time.Time   `json:"started"`
	Elapsed Duration    `json:"elapsed"`
	// Dir holds results.jsonl, the charts and summary.md.
	Dir string `json:"dir"`
	// Throughput are the max-rate points, Latency the fixed-rate e2e
	// runs, Charts the chart files written.
	Throughput []*Result `json:"throughput"`
	Latency    []*Result `json:"latency"`
	Charts     []string  `json:"charts"`
}

// ResultsDir makes and returns a fresh results folder under root named by
// the time and host: <YYYYMMDD-HHMM>-<host> (with -2, -3 ... when taken).
func ResultsDir(root string, now time.Time) (string, error) {
	host := HostEnv().Host
	if host == "" {
		host = "host"
	}
	host = strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' {
			return '_'
		}
		return r
	}, host)
	base := filepath.Join(root, now.Format("20060102-1504")+"-"+host)
	dir := base
	for i := 2; ; i++ {
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !os.IsExist(err) {
			if err := os.MkdirAll(root, 0o755); err != nil {
				return "", err
			}
			if err := os.Mkdir(dir, 0o755); err == nil {
				return dir, nil
			} else if !os.IsExist(err) {
				return "", err
			}
		}
		dir = fmt.Sprintf("%s-%d", base, i)
	}
}

// jsonl appends JSON lines to a file. The first failed write is kept:
// close reports it, so a run whose results.jsonl lost a line says so.
type jsonl struct {
	mu  sync.Mutex
	f   *os.File
	err error
}

func openJSONL(path string) (*jsonl, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &jsonl{f: f}, nil
}

func (j *jsonl) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err = j.f.Write(append(b, '\n')); err != nil && j.err == nil {
		j.err = fmt.Errorf("writing %s: %w", j.f.Name(), err)
	}
	return err
}

// close closes the file and reports the first failed write, if any.
func (j *jsonl) close() error {
	err := j.f.Close()
	if err != nil {
		err = fmt.Errorf("closing %s: %w", j.f.Name(), err)
	}
	return errors.Join(j.err, err)
}

// RunScale runs the sweep, writing results.jsonl and the charts
// (throughput_vs_partitions.svg, records_vs_partitions.svg,
// throughput_vs_producers.svg when more than one producer count,
// latency_vs_load.svg when there are latency runs) into the results
// folder. Each point prints one line to progress.
func RunScale(ctx context.Context, sc ScaleConfig, progress io.Writer) (_ *ScaleResult, err error) {
	if len(sc.Partitions) == 0 || len(sc.Producers) == 0 {
		return nil, fmt.Errorf("scale: give at least one partition count and one producer count")
	}
	for _, f := range sc.LoadFractions {
		if f <= 0 {
			return nil, fmt.Errorf("scale: load fraction %v must be positive", f)
		}
	}
	base := sc.Base
	base.Mode = ModeProduce
	if err := base.Validate(); err != nil {
		return nil, err
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
	res := &ScaleResult{Config: sc, Dir: dir, Started: time.Now().UTC()}
	clock := newStepClock(len(sc.Partitions)*len(sc.Producers)+len(sc.LoadFractions), time.Now)
	clock.startPhase("throughput", len(sc.Partitions)*len(sc.Producers))
	line := func(format string, args ...any) {
		pos := clock.step()
		if progress != nil {
			fmt.Fprintf(progress, "%s %s\n", pos, fmt.Sprintf(format, args...))
		}
	}
	for _, np := range sc.Producers {
		for _, n := range sc.Partitions {
			c := base
			c.Partitions, c.Producers, c.Rate = n, np, 0
			c.Label = fmt.Sprintf("produce producers=%d partitions=%d", np, n)
			r, err := RunProduce(ctx, c, nil)
			if err != nil {
				return res, fmt.Errorf("%s: %w", c.Label, err)
			}
			res.Throughput = append(res.Throughput, r)
			if err := out.write(r); err != nil {
				return res, err
			}
			line("%s: %.0f records/s, %.1f MB/s%s", c.Label, r.RecordsPerSec, r.MBPerSec, latNote("ack", r.ProduceLatency))
		}
	}
	if len(sc.LoadFractions) > 0 {
		clock.startPhase("latency", len(sc.LoadFractions))
		best := res.Throughput[0]
		for _, r := range res.Throughput {
			if r.RecordsPerSec > best.RecordsPerSec {
				best = r
			}
		}
		for _, f := range sc.LoadFractions {
			c := base
			c.Mode = ModeE2E
			c.Partitions, c.Producers = best.Config.Partitions, best.Config.Producers
			c.Rate = f * best.RecordsPerSec
			c.Label = fmt.Sprintf("e2e %.0f%% of max (%.0f records/s) producers=%d partitions=%d", f*100, c.Rate, c.Producers, c.Partitions)
			r, err := RunE2E(ctx, c, nil)
			if err != nil {
				return res, fmt.Errorf("%s: %w", c.Label, err)
			}
			res.Latency = append(res.Latency, r)
			if err := out.write(r); err != nil {
				return res, err
			}
			line("%s: %.0f records/s%s", c.Label, r.RecordsPerSec, latNote("e2e", r.E2ELatency))
		}
	}
	charts, err := scaleCharts(dir, base, res.Throughput, res.Latency)
	res.Charts = charts
	if err != nil {
		return res, err
	}
	res.Elapsed = Duration(time.Since(clock.began).Round(time.Second))
	if len(res.Throughput) > 0 {
		res.Env = res.Throughput[0].Env
	}
	f, err := os.Create(filepath.Join(dir, "summary.md"))
	if err != nil {
		return res, err
	}
	if err := WriteScaleSummary(f, res); err != nil {
		_ = f.Close() // failing already: the error returned says more
		return res, fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	return res, f.Close()
}

// WriteScaleSummary writes a sweep's markdown summary: environment, the
// throughput and latency tables, and the charts.
func WriteScaleSummary(w io.Writer, res *ScaleResult) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	e, base := res.Env, res.Config.Base
	p("# ringlog-perf scale: %s\n\n", filepath.Base(res.Dir))
	p("Measured %s on `%s` in %s against %s.\n\n", res.Started.Format("2006-01-02 15:04 UTC"), orUnknown(e.Host), res.Elapsed.D(), strings.Join(base.Brokers, ","))
	p("| | |\n|---|---|\n")
	p("| CPU | %s, %d logical CPUs (GOMAXPROCS %d) |\n", orUnknown(e.CPUModel), e.Cores, e.GOMAXPROCS)
	p("| kernel | %s (%s/%s) |\n", orUnknown(e.Kernel), e.OS, e.Arch)
	p("| Go | %s |\n", orUnknown(e.GoVersion))
	p("| broker | io.backend %s, %d broker(s); highest API versions served (ApiVersions): %s |\n", orUnknown(e.BrokerBackend), e.BrokerCount, orUnknown(e.BrokerAPIs))
	p("| records | %s, acks=%s, linger %s, compression %s |\n", sizeName(base.RecordSize), base.Acks, base.Linger.D(), base.Compression)
	p("\n## Throughput (max rate, %s measured after %s warm-up)\n\n", (base.Duration - base.Warmup).D(), base.Warmup.D())
	p("| producers | partitions | records/s | MB/s | ack p50 ms | ack p99 ms | ack max ms | CPU cores loadgen / broker | broker CPU µs/record |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Throughput {
		l := r.ProduceLatency
		if l == nil {
			l = &Latency{}
		}
		p("| %d | %d | %.0f | %.1f | %.2f | %.2f | %.2f | %s | %s |\n", r.Config.Producers, r.Config.Partitions, r.RecordsPerSec, r.MBPerSec, l.P50, l.P99, l.Max, cpuCell(r), usPerRecordCell(r))
	}
	p("\nMB = 2^20 bytes, as in Kafka's tools. Ack latency of max-rate runs is closed-loop (from the send call, with the client's buffer full) and mostly shows queueing.\n")
	if len(res.Latency) > 0 {
		p("\n## End-to-end latency at fractions of the best throughput\n\n")
		p("| offered records/s | achieved records/s | e2e p50 ms | p99 ms | p99.9 ms | p99.99 ms | max ms | CPU cores loadgen / broker | broker CPU µs/record | steal cores |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range res.Latency {
			l := r.E2ELatency
			if l == nil {
				l = &Latency{}
			}
			p("| %.0f | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %s | %s |\n", r.OfferedRate, r.RecordsPerSec, l.P50, l.P99, l.P999, l.P9999, l.Max, cpuCell(r), usPerRecordCell(r), stealCell(r))
		}
	}
	if len(res.Charts) > 0 {
		p("\n## Charts\n\n")
		for _, c := range res.Charts {
			name := filepath.Base(c)
			p("![%s](%s)\n\n", strings.TrimSuffix(name, ".svg"), name)
		}
	}
	p("`results.jsonl`: one JSON line per run (configuration, environment, throughput, latency percentiles).\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func latNote(name string, l *Latency) string {
	if l == nil {
		return ""
	}
	return fmt.Sprintf(", %s latency p50 %.2f ms p99 %.2f ms p99.9 %.2f ms", name, l.P50, l.P99, l.P999)
}

// scaleCharts draws a sweep's charts into dir and returns their paths.
func scaleCharts(dir string, base Config, tp, lat []*Result) ([]string, error) {
	var files []string
	for _, nc := range scaleChartSet(base, tp, lat) {
		p := filepath.Join(dir, nc.name)
		if err := nc.chart.Save(p); err != nil {
			return files, err
		}
		files = append(files, p)
	}
	return files, nil
}

// scaleChartSet is a sweep's charts, by file name.
func scaleChartSet(base Config, tp, lat []*Result) []namedChart {
	var set []namedChart
	byProducers := map[int][]*Result{}
	var prods []int
	var parts []float64
	seenPart := map[int]bool{}
	for _, r := range tp {
		np := r.Config.Producers
		if _, ok := byProducers[np]; !ok {
			prods = append(prods, np)
		}
		byProducers[np] = append(byProducers[np], r)
		if !seenPart[r.Config.Partitions] {
			seenPart[r.Config.Partitions] = true
			parts = append(parts, float64(r.Config.Partitions))
		}
	}
	sort.Ints(prods)
	sort.Float64s(parts)
	desc := fmt.Sprintf("%d B records, acks=%s", base.RecordSize, base.Acks)
	var mb, recs []Series
	for _, np := range prods {
		s1 := Series{Name: fmt.Sprintf("%d producer(s)", np)}
		s2 := s1
		for _, r := range byProducers[np] {
			s1.X = append(s1.X, float64(r.Config.Partitions))
			s1.Y = append(s1.Y, r.MBPerSec)
			s2.X = append(s2.X, float64(r.Config.Partitions))
			s2.Y = append(s2.Y, r.RecordsPerSec)
		}
		mb, recs = append(mb, s1), append(recs, s2)
	}
	save := func(name string, c Chart) { set = append(set, namedChart{name, c}) }
	save("throughput_vs_partitions.svg", Chart{Title: "Produce throughput vs partitions (" + desc + ")",
		XLabel: "partitions", YLabel: "MB/s", Categories: parts, Series: mb})
	save("records_vs_partitions.svg", Chart{Title: "Produce records/s vs partitions (" + desc + ")",
		XLabel: "partitions", YLabel: "records/s", Categories: parts, Series: recs})
	if len(prods) > 1 {
		var ss []Series
		for _, n := range parts {
			s := Series{Name: fmt.Sprintf("%g partitions", n)}
			for _, r := range tp {
				if float64(r.Config.Partitions) == n {
					s.X = append(s.X, float64(r.Config.Producers))
					s.Y = append(s.Y, r.MBPerSec)
				}
			}
			ss = append(ss, s)
		}
		var ticks []float64
		for _, np := range prods {
			ticks = append(ticks, float64(np))
		}
		save("throughput_vs_producers.svg", Chart{Title: "Produce throughput vs producers (" + desc + ")",
			XLabel: "producers", YLabel: "MB/s", Categories: ticks, Series: ss})
	}
	if len(lat) > 0 {
		save("latency_vs_load.svg", latencyChart("End-to-end latency vs load ("+desc+")", lat))
	}
	return set
}

// latencyChart draws the e2e percentiles of fixed-rate runs against their
// offered rate.
func latencyChart(title string, runs []*Result) Chart {
	names := []string{"p50", "p99", "p99.9", "p99.99", "max"}
	ss := make([]Series, len(names))
	for i := range ss {
		ss[i].Name = names[i]
	}
	for _, r := range runs {
		l := r.E2ELatency
		if l == nil {
			continue
		}
		for i, v := range []float64{l.P50, l.P99, l.P999, l.P9999, l.Max} {
			ss[i].X = append(ss[i].X, r.OfferedRate)
			ss[i].Y = append(ss[i].Y, max(v, 0.001))
		}
	}
	return Chart{Title: title, XLabel: "offered load (records/s)", YLabel: "latency (ms, log)", LogY: true, Series: ss}
}
