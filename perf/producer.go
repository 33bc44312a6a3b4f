package perf

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// keyGen draws record keys from a run's key distribution.
type keyGen struct {
	kind string
	keys [][]byte
	hot  float64
	rng  *rand.Rand
}

func newKeyGen(d KeyDist, seed uint64) *keyGen {
	g := &keyGen{kind: d.Kind, hot: d.HotShare, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
	if d.Kind != "none" {
		g.keys = make([][]byte, d.Count)
		for i := range g.keys {
			g.keys[i] = fmt.Appendf(nil, "key-%08d", i)
		}
	}
	return g
}

// next returns the key of the next record (nil: no key). Keys are shared
// read-only slices.
func (g *keyGen) next() []byte {
	switch g.kind {
	case "uniform":
		return g.keys[g.rng.IntN(len(g.keys))]
	case "hot":
		if g.rng.Float64() < g.hot {
			return g.keys[0]
		}
		return g.keys[g.rng.IntN(len(g.keys))]
	}
	return nil
}

// sender is one producer client of a run with its own statistics.
type sender struct {
	cl       *kgo.Client
	topic    string
	size     int
	keys     *keyGen
	template []byte

	// Records due before measureFrom are warm-up: not in the latency
	// histograms. Acks between measureFrom and measureTo count for
	// throughput (measureTo zero: no end).
	measureFrom, measureTo int64 // UnixNano

	sent atomic.Int64

	mu            sync.Mutex
	ack, lag      *Hist
	win           window
	acked, errs   int64
	firstErr      error
	measured      int64
	measuredBytes int64
	lastAck       time.Time
	timeline      timeline

	freeMu sync.Mutex
	free   []*kgo.Record
}

func newSender(c *Config, topic string, id int) (*sender, error) {
	cl, err := kgo.NewClient(append(c.producerOpts(), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return nil, err
	}
	s := &sender{cl: cl, topic: topic, size: c.RecordSize, keys: newKeyGen(c.Keys, uint64(id)+1),
		ack: NewHist(), lag: NewHist()}
	// Values are random capital letters, as in Kafka's perf tool: a bit
	// compressible, like text.
	rng := rand.New(rand.NewPCG(uint64(id)+77, 1))
	s.template = make([]byte, c.RecordSize)
	for i := range s.template {
		s.template[i] = byte('A' + rng.IntN(26))
	}
	return s, nil
}

// get returns a record to send: a recycled one or a new one.
func (s *sender) get() *kgo.Record {
	s.freeMu.Lock()
	if n := len(s.free); n > 0 {
		r := s.free[n-1]
		s.free = s.free[:n-1]
		s.freeMu.Unlock()
		*r = kgo.Record{Value: r.Value, Topic: s.topic}
		return r
	}
	s.freeMu.Unlock()
	v := make([]byte, s.size)
	copy(v, s.template)
	return &kgo.Record{Value: v, Topic: s.topic}
}

// put recycles a record whose promise has run (the client no longer
// touches it).
func (s *sender) put(r *kgo.Record) {
	s.freeMu.Lock()
	s.free = append(s.free, r)
	s.freeMu.Unlock()
}

// promise runs (serially, on the client's promise goroutine) when a record
// is acknowledged or failed.
func (s *sender) promise(r *kgo.Record, err error) {
	now := time.Now()
	due := int64(binary.LittleEndian.Uint64(r.Value))
	lat := time.Duration(now.UnixNano() - due)
	n := len(r.Value) + len(r.Key)
	s.mu.Lock()
	if err != nil {
		s.errs++
		if s.firstErr == nil {
			s.firstErr = err
		}
	} else {
		s.acked++
		s.timeline.add(now.UnixNano())
		s.win.add(n, lat, true)
		if due >= s.measureFrom {
			s.ack.Record(lat)
		}
		if t := now.UnixNano(); t >= s.measureFrom && (s.measureTo == 0 || t <= s.measureTo) {
			s.measured++
			s.measuredBytes += int64(n)
			s.lastAck = now
		}
	}
	s.mu.Unlock()
	s.put(r)
}

// fail records an error of the sender itself (not of a record).
func (s *sender) fail(err error) {
	s.mu.Lock()
	s.errs++
	if s.firstErr == nil {
		s.firstErr = err
	}
	s.mu.Unlock()
}

// run sends records until end (or limit records, when limit > 0), on
// the schedule when sched is not nil, else as fast as the client accepts
// them (it blocks when its buffer is full).
func (s *sender) run(ctx context.Context, sched *Schedule, end time.Time, limit int64, stop *atomic.Bool) {
	var p *pacer
	var quantum time.Duration
	var lastWake time.Time
	if sched != nil {
		var err error
		if p, err = newPacer(); err != nil {
			s.fail(err)
			return
		}
		defer p.close()
		quantum = pacerQuantum(sched.Rate)
	}
	for i := int64(0); limit == 0 || i < limit; i++ {
		if stop.Load() || ctx.Err() != nil {
			return
		}
		var due time.Time
		if sched != nil {
			due = sched.Due(i)
			if limit == 0 && !due.Before(end) {
				return
			}
			if err := waitDue(p, due, sched.Interval(), quantum, &lastWake); err != nil {
				s.fail(err)
				return
			}
		} else {
			due = time.Now()
			if limit == 0 && !due.Before(end) {
				return
			}
		}
		r := s.get()
		binary.LittleEndian.PutUint64(r.Value, uint64(due.UnixNano()))
		r.Key = s.keys.next()
		if sched != nil {
			lag := time.Since(due)
			s.mu.Lock()
			if due.UnixNano() >= s.measureFrom {
				s.lag.Record(lag)
			}
			s.mu.Unlock()
		}
		s.sent.Add(1)
		s.cl.Produce(ctx, r, s.promise)
	}
}

// takeWindow returns and resets the current progress window.
func (s *sender) takeWindow() window {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.win
	s.win = window{}
	return w
}

// producerGroup is the producers of a run.
type producerGroup struct {
	cfg     *Config
	senders []*sender
	stop    atomic.Bool
	wg      sync.WaitGroup
}

func newProducerGroup(c *Config, topic string) (*producerGroup, error) {
	g := &producerGroup{cfg: c}
	for i := 0; i < c.Producers; i++ {
		s, err := newSender(c, topic, i)
		if err != nil {
			g.close()
			return nil, err
		}
		g.senders = append(g.senders, s)
	}
	return g, nil
}

// warm makes every producer connect before the clock starts (the topic's
// metadata is loaded with the first record, within the warm-up).
func (g *producerGroup) warm(ctx context.Context) error {
	for _, s := range g.senders {
		if err := s.cl.Ping(ctx); err != nil {
			return fmt.Errorf("producer cannot reach the brokers: %w", err)
		}
	}
	return nil
}

// start launches the senders: from start (the schedule's origin) to end;
// limit is the total record count (0: none).
func (g *producerGroup) start(ctx context.Context, start, measureFrom, end time.Time, limit int64) {
	c := g.cfg
	var scheds []Schedule
	if c.Rate > 0 {
		scheds = ProducerSchedules(start, c.Rate, len(g.senders))
	}
	for i, s := range g.senders {
		s.measureFrom = measureFrom.UnixNano()
		s.timeline.origin = start.UnixNano()
		if c.Records == 0 {
			s.measureTo = end.UnixNano()
		}
		var sched *Schedule
		if scheds != nil {
			sched = &scheds[i]
		}
		var lim int64
		if limit > 0 {
			lim = limit / int64(len(g.senders))
			if int64(i) < limit%int64(len(g.senders)) {
				lim++
			}
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			s.run(ctx, sched, end, lim, &g.stop)
		}()
	}
}

// finish waits for the senders and flushes every client (bounded by the
// run's timeout).
func (g *producerGroup) finish(ctx context.Context) error {
	g.wg.Wait()
	fctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout.D())
	defer cancel()
	var ferr error
	for _, s := range g.senders {
		if err := s.cl.Flush(fctx); err != nil && ferr == nil {
			ferr = fmt.Errorf("flushing the producers: %w", err)
		}
	}
	return ferr
}

func (g *producerGroup) close() {
	for _, s := range g.senders {
		s.cl.Close()
	}
}

func (g *producerGroup) takeWindow() window {
	var w window
	for _, s := range g.senders {
		w.merge(s.takeWindow())
	}
	return w
}

func (g *producerGroup) sent() int64 {
	var n int64
	for _, s := range g.senders {
		n += s.sent.Load()
	}
	return n
}

// produceTotals is what the producers measured.
type produceTotals struct {
	ack, lag             *Hist
	acked, errs          int64
	firstErr             error
	measured, measuredBy int64
	lastAck              time.Time
	timeline             []int64
}

func (g *producerGroup) totals() produceTotals {
	t := produceTotals{ack: NewHist(), lag: NewHist()}
	for _, s := range g.senders {
		s.mu.Lock()
		t.ack.Merge(s.ack)
		t.lag.Merge(s.lag)
		t.acked += s.acked
		t.errs += s.errs
		if t.firstErr == nil {
			t.firstErr = s.firstErr
		}
		t.measured += s.measured
		t.measuredBy += s.measuredBytes
		t.timeline = mergeTimelines(t.timeline, s.timeline.counts)
		if s.lastAck.After(t.lastAck) {
			t.lastAck = s.lastAck
		}
		s.mu.Unlock()
	}
	return t
}

// RunProduce runs a produce benchmark: Producers clients send records of
// RecordSize bytes to the topic at Rate (or as fast as they can) for
// Duration (or Records records). Progress lines go to progress (may be
// nil); the result is returned.
func RunProduce(ctx context.Context, c Config, progress io.Writer) (*Result, error) {
	r, err := startRun(ctx, &c, ModeProduce)
	if err != nil {
		return nil, err
	}
	defer r.close(ctx)
	g, err := newProducerGroup(&c, r.topic)
	if err != nil {
		return nil, err
	}
	defer g.close()
	if err := g.warm(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	measureFrom := start.Add(c.Warmup.D())
	end := start.Add(c.Duration.D())
	cpu0 := sampleCPU(c.BrokerPID)
	g.start(ctx, start, measureFrom, end, c.Records)
	rep := startReporter(progress, c.ReportEvery.D(), plannedLength(c), func(elapsed time.Duration, w window) string {
		return produceLine(w, elapsed)
	}, g.takeWindow)
	ferr := g.finish(ctx)
	rep.stop()
	t := g.totals()
	res := r.result(start)
	res.setCPU(cpu0, sampleCPU(c.BrokerPID))
	res.Sent = g.sent()
	res.Acked = t.acked
	res.Errors = t.errs
	if t.firstErr != nil {
		res.FirstError = t.firstErr.Error()
	} else if ferr != nil {
		res.FirstError = ferr.Error()
	}
	measured := end.Sub(measureFrom)
	if c.Records > 0 {
		measured = t.lastAck.Sub(measureFrom)
	}
	res.setThroughput(t.measured, t.measuredBy, measured)
	res.Timeline = t.timeline
	res.ProduceLatency = t.ack.Summary()
	if c.Rate > 0 {
		res.SendLag = t.lag.Summary()
	} else if res.ProduceLatency != nil {
		res.ProduceLatency.Comment = "closed loop (rate=max): measured from the send call"
	}
	finalLine(progress, res)
	if res.Acked == 0 {
		return res, fmt.Errorf("no record was acknowledged: %s", res.FirstError)
	}
	return res, nil
}
