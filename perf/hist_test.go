package perf

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestHistMergeEqualsSingle: percentiles of histograms merged from parts
// equal those of one histogram fed every value.
func TestHistMergeEqualsSingle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	one := NewHist()
	parts := []*Hist{NewHist(), NewHist(), NewHist(), NewHist()}
	for i := 0; i < 200000; i++ {
		// A long-tailed mix: mostly ~100 µs, some ms, a few seconds.
		var d time.Duration
		switch x := rng.Float64(); {
		case x < 0.9:
			d = time.Duration(50+rng.IntN(200)) * time.Microsecond
		case x < 0.999:
			d = time.Duration(1+rng.IntN(20)) * time.Millisecond
		default:
			d = time.Duration(rng.IntN(3000)) * time.Millisecond
		}
		one.Record(d)
		parts[i%len(parts)].Record(d)
	}
	merged := MergeHists(parts...)
	if merged.Count() != one.Count() {
		t.Fatalf("count %d, want %d", merged.Count(), one.Count())
	}
	for _, p := range []float64{0, 1, 50, 90, 99, 99.9, 99.99, 100} {
		if g, w := merged.Percentile(p), one.Percentile(p); g != w {
			t.Errorf("p%v: merged %v, single %v", p, g, w)
		}
	}
	if merged.Max() != one.Max() || merged.Mean() != one.Mean() {
		t.Errorf("max/mean: merged %v/%v, single %v/%v", merged.Max(), merged.Mean(), one.Max(), one.Mean())
	}
	// Merging into an existing histogram adds to it.
	a := NewHist()
	a.Record(time.Millisecond)
	a.Merge(one)
	if a.Count() != one.Count()+1 {
		t.Errorf("merge into non-empty: count %d", a.Count())
	}
}

// TestHistPercentiles checks known percentiles at the histogram's
// precision (3 significant digits).
func TestHistPercentiles(t *testing.T) {
	h := NewHist()
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	near := func(name string, got, want time.Duration) {
		t.Helper()
		if diff := got - want; diff < -want/500 || diff > want/500 {
			t.Errorf("%s = %v, want %v (±0.2%%)", name, got, want)
		}
	}
	near("p50", h.Percentile(50), 5000*time.Microsecond)
	near("p99", h.Percentile(99), 9900*time.Microsecond)
	near("p99.9", h.Percentile(99.9), 9990*time.Microsecond)
	near("max", h.Max(), 10000*time.Microsecond)
	s := h.Summary()
	if s.Count != 10000 || s.P50 < 4.99 || s.P50 > 5.01 || s.P9999 < s.P999 || s.Max < s.P9999 || s.Unit != "ms" {
		t.Errorf("summary %+v", s)
	}
	// Out-of-range values are clamped, not lost.
	h2 := NewHist()
	h2.Record(-time.Second)
	h2.Record(2 * time.Hour)
	if h2.Count() != 2 || h2.Percentile(0) != 0 || h2.Max() < time.Hour-time.Minute {
		t.Errorf("clamping: count %d min %v max %v", h2.Count(), h2.Percentile(0), h2.Max())
	}
	if NewHist().Summary() != nil {
		t.Error("summary of an empty histogram should be nil")
	}
}

func TestWindowMerge(t *testing.T) {
	var a, b window
	a.add(100, 2*time.Millisecond, true)
	a.add(100, 4*time.Millisecond, true)
	b.add(50, 0, false)
	b.add(10, 9*time.Millisecond, true)
	a.merge(b)
	if a.records != 4 || a.bytes != 260 || a.latN != 3 || a.latSum != 15*time.Millisecond || a.latMax != 9*time.Millisecond {
		t.Errorf("merged window %+v", a)
	}
	line := produceLine(a, 2*time.Second)
	if line != "4 records sent, 2.0 records/sec (0.00 MB/sec), 5.0 ms avg latency, 9.0 ms max latency." {
		t.Errorf("progress line %q", line)
	}
}

func TestLatTimelinePerSecond(t *testing.T) {
	origin := time.Unix(1000, 0).UnixNano()
	a := latTimeline{origin: origin}
	b := latTimeline{origin: origin}
	a.add(origin-1, time.Hour) // before the origin: ignored
	for i := range 100 {
		a.add(origin+int64(i), time.Millisecond) // second 0
	}
	a.add(origin+int64(2*time.Second), 7*time.Millisecond)
	b.add(origin+int64(2*time.Second)+5, 3*time.Millisecond)
	b.add(origin+int64(3*time.Second), -time.Millisecond) // counts as 0
	a.merge(&b)
	p99, maxMs := a.perSecond()
	if len(p99) != 4 || len(maxMs) != 4 {
		t.Fatalf("%d and %d seconds, want 4", len(p99), len(maxMs))
	}
	near := func(got, want float64) bool { return got >= want*0.99 && got <= want*1.01 }
	if !near(p99[0], 1) || !near(maxMs[0], 1) {
		t.Errorf("second 0: p99 %v max %v, want 1 ms", p99[0], maxMs[0])
	}
	if p99[1] != 0 || maxMs[1] != 0 {
		t.Errorf("second 1 without records: p99 %v max %v, want 0", p99[1], maxMs[1])
	}
	if !near(maxMs[2], 7) || !near(p99[2], 7) {
		t.Errorf("second 2: p99 %v max %v, want 7 ms (2 records: 3 and 7 ms)", p99[2], maxMs[2])
	}
	if maxMs[3] != 0 {
		t.Errorf("second 3: max %v, want 0", maxMs[3])
	}
	var empty latTimeline
	if p, m := empty.perSecond(); p != nil || m != nil {
		t.Errorf("empty timeline: %v %v, want nil", p, m)
	}
}
