package perf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadSuiteCommitted reads the committed result set back and draws
// its report again into a temporary folder.
func TestReadSuiteCommitted(t *testing.T) {
	matches, err := filepath.Glob("results/*/results.jsonl")
	if err != nil || len(matches) == 0 {
		t.Fatalf("no committed results.jsonl: %v", err)
	}
	sr, err := ReadSuite(matches[len(matches)-1])
	if err != nil {
		t.Fatal(err)
	}
	sc := sr.Config
	if len(sr.Sweep) != len(sc.Sizes)*len(sc.Acks)*len(sc.Partitions) || len(sc.Partitions) < 2 {
		t.Errorf("sweep: %d runs for sizes %v acks %v partitions %v", len(sr.Sweep), sc.Sizes, sc.Acks, sc.Partitions)
	}
	if sr.Many == nil || sr.Many.Config.Partitions != sc.ManyPartitions || sc.ManyPartitions <= sc.Partitions[len(sc.Partitions)-1] {
		t.Errorf("large-topic point %+v, config %d", sr.Many, sc.ManyPartitions)
	}
	if len(sr.ProdRuns) < 2 || sr.ProdRuns[0].Config.Producers != 1 || len(sr.Consume) == 0 || len(sr.Latency) == 0 {
		t.Errorf("producer runs %d, consume %d, latency %d", len(sr.ProdRuns), len(sr.Consume), len(sr.Latency))
	}
	if sr.refPoint["low"] == nil || sr.refPoint["half"] == nil || sr.TCP.MBPerSec <= 0 {
		t.Errorf("latency targets' points or TCP reference missing: %v %v", sr.refPoint, sr.TCP)
	}
	dir := t.TempDir()
	var fails []string
	if err := sr.WriteReport(dir, func(what string, err error) { fails = append(fails, what+": "+err.Error()) }); err != nil || len(fails) > 0 {
		t.Fatalf("report: %v %v", err, fails)
	}
	charts := 4
	if len(sr.RawLatency) > 0 { // suites since the raw clients' latency points
		charts = 5
		if sr.refPoint["raw_low"] == nil || sr.refPoint["raw_half"] == nil {
			t.Errorf("raw latency points without the targets' ones: %v", sr.refPoint)
		}
	}
	if len(sr.Floor) > 0 { // suites since the relay floor points
		if sr.refPoint["floor_low"] == nil || sr.refPoint["floor_half"] == nil {
			t.Errorf("relay floor points without the targets' ones: %v", sr.refPoint)
		}
	}
	if len(sr.Targets) != 11 || len(sr.Charts) != charts {
		t.Errorf("%d targets, charts %v", len(sr.Targets), sr.Charts)
	}
	for _, tg := range sr.Targets {
		older := tg.Name == "CPU per record vs kfake" && len(sr.CPURef) == 0 || // suites before the CPU reference
			strings.Contains(tg.Name, "low rate") && len(sr.Floor) == 0 || // suites before the relay floor
			strings.Contains(tg.Name, "floor") && len(sr.Floor) == 0
		if tg.Missing != "" && !older {
			t.Errorf("target %s not measured: %s", tg.Name, tg.Missing)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "drawn again from `results.jsonl`") {
		t.Errorf("redrawn summary does not say so")
	}
}

func TestReadSuiteRejects(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"garbage":   "not json\n",
		"not suite": `{"mode":"ref","ref":{"name":"tcp_loopback"}}` + "\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadSuite(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
