package perf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// receiver is one consumer client of a run, reading assigned partitions
// directly (no group: nothing to rebalance, and it works on any broker).
type receiver struct {
	cl  *kgo.Client
	e2e bool
	// target end offsets per partition (consume mode; nil: no end).
	target  map[int32]int64
	pending int // partitions not at their target yet

	measureFrom, measureTo int64 // UnixNano; measureTo 0: no end

	mu            sync.Mutex
	hist          *Hist
	win           window
	total         int64
	measured      int64
	measuredBytes int64
	lastRecord    time.Time
	timeline      timeline
	latTimeline   latTimeline
	errs          int64
	firstErr      error
}

// run polls until ctx ends, the targets are reached, or the group's limit
// of records is reached.
func (r *receiver) run(ctx context.Context, consumed *atomic.Int64, limit int64) {
	for {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		now := time.Now()
		nowN := now.UnixNano()
		r.mu.Lock()
		fs.EachError(func(_ string, _ int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			r.errs++
			if r.firstErr == nil {
				r.firstErr = err
			}
		})
		var n int64
		fs.EachRecord(func(rec *kgo.Record) {
			n++
			size := len(rec.Value) + len(rec.Key)
			var lat time.Duration
			if r.e2e && len(rec.Value) >= 8 {
				due := int64(binary.LittleEndian.Uint64(rec.Value))
				lat = time.Duration(nowN - due)
				if due >= r.measureFrom {
					r.hist.Record(lat)
				}
				r.latTimeline.add(nowN, lat)
			}
			r.win.add(size, lat, r.e2e)
			r.total++
			r.timeline.add(nowN)
			if nowN >= r.measureFrom && (r.measureTo == 0 || nowN <= r.measureTo) {
				r.measured++
				r.measuredBytes += int64(size)
				r.lastRecord = now
			}
			if r.target != nil {
				if end, ok := r.target[rec.Partition]; ok && rec.Offset+1 >= end {
					delete(r.target, rec.Partition)
					r.pending--
				}
			}
		})
		done := r.target != nil && r.pending == 0
		r.mu.Unlock()
		if c := consumed.Add(n); done || (limit > 0 && c >= limit) {
			return
		}
	}
}

func (r *receiver) takeWindow() window {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.win
	r.win = window{}
	return w
}

// consumerGroup is the consumers of a run (not a Kafka consumer group).
type consumerGroup struct {
	recv     []*receiver
	consumed atomic.Int64
	wg       sync.WaitGroup
	cancel   context.CancelFunc
}

// newConsumerGroup splits the partitions (with their start offsets)
// round-robin over c.Consumers clients. targets, when not nil, are the end
// offsets at which each partition is done.
func newConsumerGroup(c *Config, topic string, start map[int32]int64, targets map[int32]int64, e2e bool) (*consumerGroup, error) {
	parts := make([]int32, 0, len(start))
	for p := range start {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	g := &consumerGroup{}
	for i := 0; i < c.Consumers; i++ {
		assign := map[int32]kgo.Offset{}
		r := &receiver{e2e: e2e, hist: NewHist()}
		if targets != nil {
			r.target = map[int32]int64{}
		}
		for j := i; j < len(parts); j += c.Consumers {
			p := parts[j]
			assign[p] = kgo.NewOffset().At(start[p])
			if targets != nil && targets[p] > start[p] {
				r.target[p] = targets[p]
				r.pending++
			}
		}
		cl, err := kgo.NewClient(c.consumerOpts(topic, assign)...)
		if err != nil {
			g.close()
			return nil, err
		}
		r.cl = cl
		g.recv = append(g.recv, r)
	}
	return g, nil
}

func (g *consumerGroup) warm(ctx context.Context) error {
	for _, r := range g.recv {
		if err := r.cl.Ping(ctx); err != nil {
			return fmt.Errorf("consumer cannot reach the brokers: %w", err)
		}
	}
	return nil
}

// start launches the receivers; they record e2e latency for records due
// from measureFrom, count throughput between measureFrom and measureTo
// (zero: no end), and keep a per-second timeline from origin.
func (g *consumerGroup) start(ctx context.Context, origin, measureFrom, measureTo time.Time, limit int64) {
	ctx, g.cancel = context.WithCancel(ctx)
	for _, r := range g.recv {
		r.measureFrom = measureFrom.UnixNano()
		r.timeline.origin = origin.UnixNano()
		r.latTimeline.origin = origin.UnixNano()
		if !measureTo.IsZero() {
			r.measureTo = measureTo.UnixNano()
		}
		if r.target != nil && r.pending == 0 {
			continue
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			r.run(ctx, &g.consumed, limit)
		}()
	}
}

// wait waits for the receivers to finish by themselves, at most d; then
// stops them.
func (g *consumerGroup) wait(d time.Duration) {
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
	g.stopNow()
}

func (g *consumerGroup) stopNow() {
	if g.cancel != nil {
		g.cancel()
	}
	g.wg.Wait()
}

func (g *consumerGroup) close() {
	for _, r := range g.recv {
		if r.cl != nil {
			r.cl.Close()
		}
	}
}

func (g *consumerGroup) takeWindow() window {
	var w window
	for _, r := range g.recv {
		w.merge(r.takeWindow())
	}
	return w
}

// consumeTotals is what the consumers measured.
type consumeTotals struct {
	hist                 *Hist
	total                int64
	measured, measuredBy int64
	lastRecord           time.Time
	timeline             []int64
	latTimeline          latTimeline
	errs                 int64
	firstErr             error
}

func (g *consumerGroup) totals() consumeTotals {
	t := consumeTotals{hist: NewHist()}
	for _, r := range g.recv {
		r.mu.Lock()
		t.hist.Merge(r.hist)
		t.total += r.total
		t.measured += r.measured
		t.measuredBy += r.measuredBytes
		t.timeline = mergeTimelines(t.timeline, r.timeline.counts)
		t.latTimeline.merge(&r.latTimeline)
		if r.lastRecord.After(t.lastRecord) {
			t.lastRecord = r.lastRecord
		}
		t.errs += r.errs
		if t.firstErr == nil {
			t.firstErr = r.firstErr
		}
		r.mu.Unlock()
	}
	return t
}

// RunConsume runs a consume benchmark: Consumers clients read the topic
// from offset 0 up to the end offsets found at the start (or Records
// records, or until Duration passes). A topic the run creates is first
// filled with PrefillBytes of records at full speed (acks=1); that part
// is not measured.
func RunConsume(ctx context.Context, c Config, progress io.Writer) (*Result, error) {
	r, err := startRun(ctx, &c, ModeConsume)
	if err != nil {
		return nil, err
	}
	defer r.close(ctx)
	if err := r.prefill(ctx, progress); err != nil {
		return nil, err
	}
	ends, err := r.endOffsets(ctx)
	if err != nil {
		return nil, err
	}
	starts := map[int32]int64{}
	var available int64
	for p, e := range ends {
		starts[p] = 0
		available += e
	}
	if available == 0 {
		return nil, fmt.Errorf("topic %q is empty: nothing to consume (produce into it first, or let the run create and fill a topic)", r.topic)
	}
	g, err := newConsumerGroup(&c, r.topic, starts, ends, false)
	if err != nil {
		return nil, err
	}
	defer g.close()
	if err := g.warm(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	measureFrom := start.Add(c.Warmup.D())
	cpu0 := sampleCPU(c.BrokerPID)
	g.start(ctx, start, measureFrom, time.Time{}, c.Records)
	rep := startReporter(progress, c.ReportEvery.D(), plannedLength(c), func(d time.Duration, w window) string { return consumeLine(w, d) }, g.takeWindow)
	g.wait(c.Duration.D())
	rep.stop()
	t := g.totals()
	res := r.result(start)
	res.setCPU(cpu0, sampleCPU(c.BrokerPID))
	res.Consumed = t.total
	res.Errors = t.errs
	if t.firstErr != nil {
		res.FirstError = t.firstErr.Error()
	}
	res.setThroughput(t.measured, t.measuredBy, t.lastRecord.Sub(measureFrom))
	res.Timeline = t.timeline
	finalLine(progress, res)
	if t.measured == 0 {
		return res, fmt.Errorf("no record consumed after the %v warm-up (%d in all, %d available): raise --prefill-bytes or lower --warmup", c.Warmup.D(), t.total, available)
	}
	return res, nil
}

// prefill writes PrefillBytes of records into topic at full speed.
func prefill(ctx context.Context, c Config, topic string, progress io.Writer) error {
	n := max(c.PrefillBytes/int64(c.RecordSize), 1)
	if c.Records > 0 {
		n = max(n, c.Records)
	}
	if progress != nil {
		fmt.Fprintf(progress, "prefilling %q with %d records of %d bytes\n", topic, n, c.RecordSize)
	}
	pc := c
	pc.Mode, pc.Acks, pc.Rate, pc.Records, pc.Warmup = ModeProduce, "1", 0, n, 0
	g, err := newProducerGroup(&pc, topic)
	if err != nil {
		return err
	}
	defer g.close()
	now := time.Now()
	g.start(ctx, now, now, time.Time{}, n)
	if err := g.finish(ctx); err != nil {
		return err
	}
	if t := g.totals(); t.errs > 0 {
		return fmt.Errorf("prefill: %d records failed: %v", t.errs, t.firstErr)
	}
	return nil
}
