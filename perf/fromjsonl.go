package perf

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ReadSuite rebuilds a suite's result from the results.jsonl it wrote,
// so that its charts, targets and summary can be drawn again (with newer
// report code) without measuring again. The matrix is read back from the
// runs' configurations and labels; what the JSONL does not hold (e.g.
// the broker's data dir, the run's total time) is left at its default or
// estimated from the runs' start times.
func ReadSuite(path string) (*SuiteResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := DefaultSuite()
	sc.Sizes, sc.Acks, sc.Partitions, sc.Producers, sc.LoadFractions = nil, nil, nil, []int{1}, nil
	sr := &SuiteResult{Config: sc, Dir: filepath.Dir(path), Redrawn: true, refPoint: map[string]*Result{}}
	var last time.Time
	afterSweep := false
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; s.Scan(); n++ {
		var probe struct {
			Mode string `json:"mode"`
		}
		if err := json.Unmarshal(s.Bytes(), &probe); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if probe.Mode == "ref" {
			var rl refLine
			if err := json.Unmarshal(s.Bytes(), &rl); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			switch rl.Ref.Name {
			case "tcp_loopback":
				sr.TCP = rl.Ref
			case "odirect_write":
				sr.ODirect = rl.Ref
			}
			sr.Config.RefDuration = Duration(time.Duration(rl.Ref.Seconds * float64(time.Second)).Round(time.Second))
			continue
		}
		r := &Result{}
		if err := json.Unmarshal(s.Bytes(), r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if sr.Env.Host == "" {
			sr.Env, sr.Started = r.Env, r.Start
			sr.Config.Brokers = r.Config.Brokers
			sr.Config.Note = r.Env.Note
		}
		if end := r.Start.Add(r.Config.Duration.D()); end.After(last) {
			last = end
		}
		c := r.Config
		switch {
		case r.Mode == ModeProduce && strings.HasPrefix(r.Label, cpuRefPrefix):
			sr.CPURef = append(sr.CPURef, r)
			afterSweep = true
		case r.Mode == ModeProduce && strings.HasPrefix(r.Label, "raw produce"):
			sr.RawProduce = append(sr.RawProduce, r)
			afterSweep = true
		case r.Mode == ModeProduce && c.Producers > 1:
			sr.ProdRuns = append(sr.ProdRuns, r)
			sr.Config.Producers = append(sr.Config.Producers, c.Producers)
			afterSweep = true
		case r.Mode == ModeProduce && afterSweep:
			// The large-topic point runs last, after everything else.
			sr.Many = r
			sr.Config.ManyPartitions, sr.Config.ManyWarmup = c.Partitions, c.Warmup
		case r.Mode == ModeProduce:
			sr.Sweep = append(sr.Sweep, r)
			sr.Config.PointDuration, sr.Config.Warmup = c.Duration, c.Warmup
			if !slices.Contains(sr.Config.Sizes, c.RecordSize) {
				sr.Config.Sizes = append(sr.Config.Sizes, c.RecordSize)
			}
			if !slices.Contains(sr.Config.Acks, c.Acks) {
				sr.Config.Acks = append(sr.Config.Acks, c.Acks)
			}
			if !slices.Contains(sr.Config.Partitions, c.Partitions) {
				sr.Config.Partitions = append(sr.Config.Partitions, c.Partitions)
			}
		case r.Mode == ModeConsume && strings.HasPrefix(r.Label, "raw fetch"):
			sr.RawConsume = append(sr.RawConsume, r)
			afterSweep = true
		case r.Mode == ModeConsume:
			sr.Consume = append(sr.Consume, r)
			afterSweep = true
		case r.Mode == ModeFloor:
			sr.Floor = append(sr.Floor, r)
			if strings.Contains(r.Label, "% of max") {
				sr.refPoint["floor_half"] = r
			} else {
				sr.refPoint["floor_low"] = r
			}
		case r.Mode == ModeE2E && strings.HasPrefix(r.Label, "raw e2e"):
			sr.RawLatency = append(sr.RawLatency, r)
			switch {
			case strings.Contains(r.Label, "at 50% of max"):
				sr.refPoint["raw_half"] = r
			case !strings.Contains(r.Label, "% of max"):
				sr.refPoint["raw_low"] = r
			}
		case r.Mode == ModeE2E:
			sr.Latency = append(sr.Latency, r)
			sr.Config.LatencyDuration = c.Duration
			afterSweep = true
			switch {
			case strings.Contains(r.Label, "% of max"):
				var pct float64
				if i := strings.Index(r.Label, " at "); i >= 0 {
					fmt.Sscanf(r.Label[i+4:], "%g%%", &pct)
				}
				sr.Config.LoadFractions = append(sr.Config.LoadFractions, pct/100)
				if pct == 50 {
					sr.refPoint["half"] = r
				}
			case c.Acks == "1":
				sr.refPoint["low"] = r
				sr.Config.LowRate = r.OfferedRate
			default:
				sr.refPoint["low_all"] = r
			}
		default:
			return nil, fmt.Errorf("%s:%d: a %q run is no part of a suite", path, n, r.Mode)
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(sr.Sweep) == 0 {
		return nil, fmt.Errorf("%s: no produce sweep: not a suite's results", path)
	}
	if one := sr.find(sr.Config.RefSize, "1", sr.Config.RefPartitions, 1); one != nil {
		sr.ProdRuns = append([]*Result{one}, sr.ProdRuns...)
	}
	if !last.IsZero() {
		sr.Elapsed = Duration(last.Sub(sr.Started).Round(time.Second))
	}
	return sr, nil
}

// WriteReport judges the targets and writes the charts, targets.json and
// summary.md into dir; a chart that cannot be drawn goes to fail.
func (sr *SuiteResult) WriteReport(dir string, fail func(string, error)) error {
	sr.Targets = sr.targets()
	sr.Charts = sr.charts(dir, fail)
	if err := writeJSONFile(filepath.Join(dir, "targets.json"), sr.Targets); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "summary.md"))
	if err != nil {
		return err
	}
	if err := WriteSummary(f, sr); err != nil {
		_ = f.Close() // failing already: the error returned says more
		return fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	return f.Close()
}
