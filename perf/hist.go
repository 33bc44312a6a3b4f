package perf

import (
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram range: 1 µs to 1 hour at 3 significant digits (values are
// recorded in microseconds; anything below 1 µs counts as 0).
const (
	histMaxMicros = int64(time.Hour / time.Microsecond)
	histSigFigs   = 3
)

// Hist is a latency histogram (an HdrHistogram in microseconds). It is not
// safe for concurrent use; each sender or consumer records into its own and
// the results are merged.
type Hist struct {
	h *hdrhistogram.Histogram
}

// NewHist returns an empty histogram.
func NewHist() *Hist {
	return &Hist{h: hdrhistogram.New(1, histMaxMicros, histSigFigs)}
}

// Record adds one latency. Negative values count as 0 and values beyond an
// hour as an hour.
func (h *Hist) Record(d time.Duration) {
	us := int64(d / time.Microsecond)
	if us < 0 {
		us = 0
	}
	if us > histMaxMicros {
		us = histMaxMicros
	}
	_ = h.h.RecordValue(us) // in range by construction
}

// Merge adds every value of o to h.
func (h *Hist) Merge(o *Hist) {
	if o != nil {
		h.h.Merge(o.h)
	}
}

// MergeHists returns a new histogram holding the values of all of hs.
func MergeHists(hs ...*Hist) *Hist {
	out := NewHist()
	for _, h := range hs {
		out.Merge(h)
	}
	return out
}

// Count is the number of recorded values.
func (h *Hist) Count() int64 { return h.h.TotalCount() }

// Percentile returns the value at percentile p (0-100).
func (h *Hist) Percentile(p float64) time.Duration {
	return time.Duration(h.h.ValueAtQuantile(p)) * time.Microsecond
}

// Max returns the largest recorded value (to the histogram's precision).
func (h *Hist) Max() time.Duration { return time.Duration(h.h.Max()) * time.Microsecond }

// Mean returns the mean of the recorded values.
func (h *Hist) Mean() time.Duration {
	return time.Duration(h.h.Mean() * float64(time.Microsecond))
}

// Latency is a latency summary in milliseconds.
type Latency struct {
	// Count is the number of values; Mean and the percentiles P50 ...
	// P9999 (p99.99) and Max are in Unit (always "ms").
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	P9999 float64 `json:"p99_99"`
	Max   float64 `json:"max"`
	Unit  string  `json:"unit"`
	// Comment qualifies the numbers (e.g. closed-loop measurement).
	Comment string `json:"comment,omitempty"`
}

// Summary returns h's percentiles in milliseconds (nil when h is empty).
func (h *Hist) Summary() *Latency {
	if h == nil || h.Count() == 0 {
		return nil
	}
	return &Latency{
		Count: h.Count(),
		Mean:  ms(h.Mean()),
		P50:   ms(h.Percentile(50)),
		P90:   ms(h.Percentile(90)),
		P99:   ms(h.Percentile(99)),
		P999:  ms(h.Percentile(99.9)),
		P9999: ms(h.Percentile(99.99)),
		Max:   ms(h.Max()),
		Unit:  "ms",
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// timeline counts records per whole second since an origin.
type timeline struct {
	origin int64 // UnixNano
	counts []int64
}

func (t *timeline) add(nowN int64) {
	if t.origin == 0 || nowN < t.origin {
		return
	}
	b := int((nowN - t.origin) / int64(time.Second))
	for len(t.counts) <= b {
		t.counts = append(t.counts, 0)
	}
	t.counts[b]++
}

// mergeTimelines sums per-second counts.
func mergeTimelines(ts ...[]int64) []int64 {
	var out []int64
	for _, t := range ts {
		for len(out) < len(t) {
			out = append(out, 0)
		}
		for i, v := range t {
			out[i] += v
		}
	}
	return out
}

// window is what happened in one progress interval.
type window struct {
	records, bytes int64
	latSum, latMax time.Duration
	latN           int64
}

func (w *window) add(n int, lat time.Duration, hasLat bool) {
	w.records++
	w.bytes += int64(n)
	if hasLat {
		w.latN++
		w.latSum += lat
		w.latMax = max(w.latMax, lat)
	}
}

func (w *window) merge(o window) {
	w.records += o.records
	w.bytes += o.bytes
	w.latN += o.latN
	w.latSum += o.latSum
	w.latMax = max(w.latMax, o.latMax)
}

// latTimeline keeps an e2e latency histogram per whole second of receipt
// since an origin, so that a run's tail can be placed in time: spread
// over the run, or a few bad seconds. Its histograms hold 2 significant
// digits (about 45 KB each) to stay small over long runs.
type latTimeline struct {
	origin int64 // UnixNano
	hists  []*hdrhistogram.Histogram
}

func (t *latTimeline) add(nowN int64, lat time.Duration) {
	if t.origin == 0 || nowN < t.origin {
		return
	}
	b := int((nowN - t.origin) / int64(time.Second))
	for len(t.hists) <= b {
		t.hists = append(t.hists, nil)
	}
	if t.hists[b] == nil {
		t.hists[b] = hdrhistogram.New(1, histMaxMicros, 2)
	}
	us := min(max(int64(lat/time.Microsecond), 0), histMaxMicros)
	_ = t.hists[b].RecordValue(us) // in range by construction
}

// merge adds o's seconds to t's (same origin).
func (t *latTimeline) merge(o *latTimeline) {
	for len(t.hists) < len(o.hists) {
		t.hists = append(t.hists, nil)
	}
	for i, h := range o.hists {
		if h == nil {
			continue
		}
		if t.hists[i] == nil {
			t.hists[i] = hdrhistogram.New(1, histMaxMicros, 2)
		}
		t.hists[i].Merge(h)
	}
}

// perSecond returns each second's p99 and max in milliseconds (0 for a
// second without records); nil when nothing was recorded.
func (t *latTimeline) perSecond() (p99, maxMs []float64) {
	if len(t.hists) == 0 {
		return nil, nil
	}
	p99, maxMs = make([]float64, len(t.hists)), make([]float64, len(t.hists))
	for i, h := range t.hists {
		if h == nil {
			continue
		}
		p99[i] = ms(time.Duration(h.ValueAtQuantile(99)) * time.Microsecond)
		maxMs[i] = ms(time.Duration(h.Max()) * time.Microsecond)
	}
	return p99, maxMs
}
