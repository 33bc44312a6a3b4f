package perf

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSuite is a suite result with made-up numbers: targets 1, 3, 5 and
// 7 met, 2, 4 and 6 missed.
func fakeSuite(dir string) *SuiteResult {
	sc := DefaultSuite()
	sc.Brokers = []string{"127.0.0.1:9092"}
	point := func(size int, acks string, parts, producers int, mb float64) *Result {
		c := DefaultConfig(ModeProduce)
		c.RecordSize, c.Acks, c.Partitions, c.Producers = size, acks, parts, producers
		return &Result{Mode: ModeProduce, Config: c, MBPerSec: mb, RecordsPerSec: mb * MiB / float64(size),
			ProduceLatency: &Latency{P50: 1, P99: 2, P999: 3, P9999: 4, Max: 5}}
	}
	sr := &SuiteResult{Config: sc, Dir: dir, Env: Env{Host: "h", CPUModel: "cpu", Cores: 2, Kernel: "Linux 6.18", BrokerBackend: "hybrid"},
		TCP: RefResult{Name: "tcp_loopback", MBPerSec: 1000}, ODirect: RefResult{Name: "odirect_write", MBPerSec: 800},
		refPoint: map[string]*Result{}}
	for _, size := range sc.Sizes {
		for _, acks := range sc.Acks {
			for _, n := range sc.Partitions {
				mb := 450.0
				if acks == "all" {
					mb = 200
				}
				if n == 32 && acks == "1" && size == 1024 {
					mb = 500
				}
				sr.Sweep = append(sr.Sweep, point(size, acks, n, 1, mb))
			}
		}
	}
	sr.ProdRuns = []*Result{sr.find(1024, "1", 16, 1), point(1024, "1", 16, 2, 430)}
	sr.Many = point(1024, "1", 1000, 1, 420)
	rawOne, rawAll := point(1024, "1", 16, 1, 600), point(1024, "all", 16, 1, 540)
	rawOne.Label, rawAll.Label = "raw produce acks=1", "raw produce acks=all"
	sr.RawProduce = []*Result{rawOne, rawAll}
	cons := point(1024, "1", 16, 1, 900)
	cons.Mode, cons.Config.Consumers = ModeConsume, 1
	sr.Consume = []*Result{cons}
	lat := func(rate, p99 float64) *Result {
		r := point(1024, "1", 16, 1, rate*1024/MiB)
		r.Mode, r.OfferedRate = ModeE2E, rate
		r.E2ELatency = &Latency{P50: p99 / 3, P99: p99, P999: p99 * 2, P9999: p99 * 3, Max: p99 * 4}
		r.SendLag = &Latency{P99: 0.05}
		return r
	}
	sr.refPoint["low"] = lat(10000, 1.4)
	sr.refPoint["half"] = lat(230000, 3)
	sr.Latency = []*Result{sr.refPoint["low"], lat(46000, 1.2), sr.refPoint["half"], lat(400000, 40)}
	sr.refPoint["raw_low"] = lat(10000, 0.8)
	sr.refPoint["raw_half"] = lat(230000, 2.5)
	sr.refPoint["raw_half"].E2EFromSend = &Latency{P99: 1.25, P999: 2.5}
	sr.RawLatency = []*Result{sr.refPoint["raw_low"], lat(46000, 0.9), sr.refPoint["raw_half"], lat(400000, 20)}
	sr.refPoint["floor_low"] = lat(10000, 0.5)
	sr.refPoint["floor_half"] = lat(230000, 1.5)
	sr.refPoint["floor_low"].Mode, sr.refPoint["floor_half"].Mode = ModeFloor, ModeFloor
	sr.Floor = []*Result{sr.refPoint["floor_low"], sr.refPoint["floor_half"]}
	// CPU reference: the broker at 1.0 and 1.2 µs per record, kfake at
	// 3.0 and 3.5: 1.10 and 3.25 over both rounds.
	cpuRef := func(who string, round int, rps, cores float64) *Result {
		r := point(1024, "1", 16, 1, rps*1024/MiB)
		r.Label = fmt.Sprintf("%s %s, produce 1KiB acks=1 partitions=16, round %d", cpuRefPrefix, who, round)
		r.Records, r.RecordsPerSec, r.BrokerCores = 1e6, rps, cores
		return r
	}
	sr.CPURef = []*Result{cpuRef("kfake", 1, 200000, 0.6), cpuRef("broker", 1, 500000, 0.5),
		cpuRef("kfake", 2, 200000, 0.7), cpuRef("broker", 2, 500000, 0.6)}
	return sr
}

func TestSuiteTargetsAndSummary(t *testing.T) {
	dir := t.TempDir()
	sr := fakeSuite(dir)
	sr.Targets = sr.targets()
	want := []struct {
		met   bool
		value float64
	}{
		{true, 600.0 / 800}, // produce (best: raw) vs min(tcp, odirect)
		{false, 200.0 / 450},
		{true, 0.9},
		{false, 1.4},
		{true, 2.8}, // p99.9 at the low rate
		{true, 3},
		{true, 420.0 / 500},
		{true, 1.1 / 3.25}, // CPU per record vs kfake
		{true, 0.3},        // added p99 at the low rate: 0.8 − 0.5
		{true, 2.5 / 1.5},  // raw p99 vs the floor's at half of max
		{false, 1.4 / 0.8}, // franz-go vs raw at the low rate
	}
	if len(sr.Targets) != len(want) {
		t.Fatalf("%d targets", len(sr.Targets))
	}
	for i, w := range want {
		tg := sr.Targets[i]
		if tg.Met != w.met || tg.Value < w.value-1e-9 || tg.Value > w.value+1e-9 || tg.Missing != "" {
			t.Errorf("target %d %s: met %v value %v (%s), want %v %v", i, tg.Name, tg.Met, tg.Value, tg.Measured, w.met, w.value)
		}
	}
	var fails []string
	sr.Charts = sr.charts(dir, func(what string, err error) { fails = append(fails, what+": "+err.Error()) })
	if len(fails) > 0 || len(sr.Charts) != 5 {
		t.Fatalf("charts %v, failures %v", sr.Charts, fails)
	}
	for _, c := range sr.Charts {
		if st, err := os.Stat(filepath.Join(dir, c)); err != nil || st.Size() < 1000 {
			t.Errorf("chart %s: %v", c, err)
		}
	}
	var buf bytes.Buffer
	if err := WriteSummary(&buf, sr); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	for _, s := range []string{"8 of 11 met", "0.800 ms − 0.500 ms = 0.300 ms", "2.500 ms / 1.500 ms = 1.67", "1.400 ms / 0.800 ms = 1.75 (franz-go's send lag p99 0.050 ms)", "1.10 µs / 3.25 µs per record (broker / kfake, 2 and 2 rounds) = 0.34", "| produce vs physical |", "**met**", "missed", "600.0 MB/s (raw produce acks=1) / 800.0 MB/s = 0.75; franz-go producers: 450.0 MB/s (1 producer(s)) = 0.56",
		"raw producer: 540.0 / 600.0 MB/s = 0.90", "| raw produce | all | 1 |",
		"same 2 vCPUs", "![throughput_vs_partitions](throughput_vs_partitions.svg)", "| 1KiB | all | 64 |", "p99 1.400 ms at 10000 records/s",
		"p99 1.400 ms at 10000 records/s (p50 0.467, p99.9 2.800, max 5.600); raw clients: p99 0.800 ms, p99.9 1.600 ms",
		"p99.9 2.800 ms at 10000 records/s", "## End-to-end latency with raw clients", "| 230000 | 230000 | 0.833 | 2.500 | 5.000 |",
		"![latency_vs_load_raw](latency_vs_load_raw.svg)",
		"raw clients: p99 0.800 ms, p99.9 1.600 ms (CPU cores loadgen / broker 0.00 / -); host floor (relay-floor, no broker): p99 0.500 ms, p99.9 1.000 ms",
		"host floor (relay-floor, no broker): p99 1.500 ms, p99.9 3.000 ms", "## Latency floor of the host (relay-floor)", "| 0.00 | - | 1.250 / 2.500 |\n", "| 0.00 | - | - |\n", "| 230000 | 230000 | 0.500 | 1.500 | 3.000 |"} {
		if !strings.Contains(md, s) {
			t.Errorf("summary lacks %q", s)
		}
	}
	if strings.Contains(md, "noise") {
		t.Errorf("acks=all below acks=1 called noise")
	}
	// acks=all ahead of acks=1: met, but said to be noise.
	sr.find(1024, "all", 16, 1).MBPerSec = 500
	sr.Targets = sr.targets()
	buf.Reset()
	if err := WriteSummary(&buf, sr); err != nil {
		t.Fatal(err)
	}
	if tg := sr.Targets[1]; !tg.Met || !strings.Contains(buf.String(), "the 11% it is ahead is run-to-run noise") {
		t.Errorf("acks=all 500 vs acks=1 450: met %v, summary:\n%s", tg.Met, buf.String())
	}
	// A franz-go generator that fell behind its schedule measured
	// itself: the raw clients' run at that rate is judged instead.
	kgoHalf := sr.refPoint["half"]
	kgoHalf.RecordsPerSec, kgoHalf.E2ELatency.P99, kgoHalf.SendLag.P99 = 0.7*kgoHalf.OfferedRate, 2800, 300
	half := sr.targets()[5]
	if half.Value != 2.5 || !half.Met || !strings.Contains(half.Note, "judged on the raw clients: the franz-go load generator fell behind (161000 of 230000 records/s offered, send lag p99 300.00 ms against a limit of 5 ms)") ||
		!strings.Contains(half.Measured, "; franz-go: p99 2800.000 ms") || !strings.Contains(half.Measured, "host floor (relay-floor, no broker): p99 1.500 ms") {
		t.Errorf("half of max with a lagging franz-go run: %+v", half)
	}
	// One that delivered the whole rate but sent later than the limit
	// at p99 measured itself too.
	kgoHalf.RecordsPerSec, kgoHalf.SendLag.P99 = kgoHalf.OfferedRate, 8.6
	half = sr.targets()[5]
	if half.Value != 2.5 || !strings.Contains(half.Note, "send lag p99 8.60 ms against a limit of 5 ms") {
		t.Errorf("half of max with a late franz-go generator: %+v", half)
	}
	// The raw clients late as well: nothing better to judge on, the
	// franz-go run is judged.
	sr.refPoint["raw_half"].SendLag.P99 = 6
	half = sr.targets()[5]
	if half.Value != 2800 || half.Met || half.Note != "" {
		t.Errorf("half of max with both generators late: %+v", half)
	}
	sr.refPoint["raw_half"].SendLag.P99 = 0.05
	kgoHalf.SendLag.P99 = 4.9
	if half = sr.targets()[5]; half.Value != 2800 || half.Note != "" {
		t.Errorf("half of max with a franz-go generator within the limit: %+v", half)
	}
	// A missing measurement is a miss that says why.
	sr.Many = nil
	sr.CPURef = sr.CPURef[1:2] // the broker's round 1 without kfake's
	delete(sr.refPoint, "floor_low")
	delete(sr.refPoint, "floor_half")
	ts := sr.targets()
	for _, tg := range ts[6:10] {
		if tg.Met || tg.Missing == "" {
			t.Errorf("missing point: %+v", tg)
		}
	}
	if tg := ts[10]; tg.Missing != "" {
		t.Errorf("franz-go vs raw needs no floor: %+v", tg)
	}
}
