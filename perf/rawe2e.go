package perf

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/wal/batch"
)

// rawFetchVersion is the Fetch version the raw e2e fetchers send: v11
// (Kafka 2.3) is the newest one that is not flexible and names topics
// rather than ids, so its frames are plain to build and read.
const rawFetchVersion = 11

// RunRawE2E is RunE2E without client libraries, for a broker that shares
// its cores with the load generator: each producer sends the records that
// fell due as one Produce request with one partition's record batch, built
// in place (the next partition each time, as the sticky partitioner of
// Kafka's clients does for keyless records; at most c.BatchBytes of
// values each), up to c.MaxInflight requests in flight per leader; each
// consumer long-polls its share of the partitions with plain Fetch
// requests in a fetch session (rawFetcher.run) and reads every record's
// due time. As in RunE2E, the schedule
// alone sets the due times (a sender that falls behind sends what is due
// at once, and the delay counts), and latency is measured from them. What
// it saves is the clients' per-record work (partitioning, encoding, record
// objects, promise callbacks) and their goroutine handoffs, about 80 µs of
// generator CPU per record at low rates with franz-go, which on 2 shared
// cores takes turns with the broker. The broker does the same work either
// way: it checks every batch's CRC, writes every byte and sends every
// record to the consumers.
func RunRawE2E(ctx context.Context, c Config, progress io.Writer) (*Result, error) {
	c.Mode = ModeE2E
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Rate <= 0 || c.Records > 0 {
		return nil, errors.New("raw e2e runs at a fixed --rate for --duration (no --records)")
	}
	acks, codec, err := rawWire(&c)
	if err != nil {
		return nil, err
	}
	r, err := newRun(ctx, &c)
	if err != nil {
		return nil, err
	}
	defer r.close(ctx)
	actx, cancel := context.WithTimeout(ctx, c.Timeout.D())
	defer cancel()
	leaders, err := r.adm.leaders(actx, r.topic)
	if err != nil {
		return nil, err
	}
	ends, err := r.adm.endOffsets(actx, r.topic)
	if err != nil {
		return nil, err
	}
	return rawE2E(ctx, &c, r, leaders, ends, acks, codec, progress)
}

// rawE2E is the measured part of RunRawE2E.
func rawE2E(ctx context.Context, c *Config, r *run, leaders map[string][]int32, ends map[int32]int64, acks int16, codec batch.Codec, progress io.Writer) (*Result, error) {
	st := newRawE2EStats()
	fctx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	var fetchers []*rawFetcher
	defer func() {
		for _, f := range fetchers {
			f.conn.Close()
		}
	}()
	for i := 0; i < c.Consumers; i++ {
		for addr, parts := range leaders {
			var share []int32
			for _, p := range parts {
				if int(p)%c.Consumers == i {
					share = append(share, p)
				}
			}
			if len(share) == 0 {
				continue
			}
			f, err := dialRawFetcher(ctx, c, addr, r.topic, share, ends, st)
			if err != nil {
				return nil, err
			}
			fetchers = append(fetchers, f)
		}
	}
	var senders []*rawSender
	defer func() {
		for _, s := range senders {
			s.close()
		}
	}()
	for i := 0; i < c.Producers; i++ {
		s, err := dialRawSender(ctx, c, r.topic, leaders, acks, codec, uint64(i), st)
		if err != nil {
			return nil, err
		}
		senders = append(senders, s)
	}

	start := time.Now()
	st.measureFrom = start.Add(c.Warmup.D()).UnixNano()
	end := start.Add(c.Duration.D())
	st.measureTo = end.UnixNano()
	st.timeline.origin = start.UnixNano()
	st.latTimeline.origin = start.UnixNano()
	cpu0 := sampleCPU(c.BrokerPID)
	var fwg sync.WaitGroup
	for _, f := range fetchers {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			if err := f.run(fctx); err != nil && fctx.Err() == nil {
				st.fail(err)
			}
		}()
	}
	rep := startReporter(progress, c.ReportEvery.D(), plannedLength(*c), func(d time.Duration, w window) string { return consumeLine(w, d) }, st.takeWindow)
	var swg sync.WaitGroup
	for i, sched := range ProducerSchedules(start, c.Rate, len(senders)) {
		swg.Add(1)
		go func() {
			defer swg.Done()
			if err := senders[i].run(ctx, sched, end); err != nil {
				st.fail(err)
			}
		}()
	}
	swg.Wait()
	st.waitConsumed(ctx, c.Timeout.D())
	stopFetch()
	for _, f := range fetchers {
		f.conn.SetReadDeadline(time.Now()) // ends a long poll at once
	}
	fwg.Wait()
	rep.stop()

	res := r.result(start)
	res.setCPU(cpu0, sampleCPU(c.BrokerPID))
	return st.finish(res, c, start, end, progress)
}

// rawE2EStats is what the raw senders and fetchers of a run measured,
// under one lock (taken once per request or fetch response, not per
// record).
type rawE2EStats struct {
	// Records due before measureFrom are warm-up; records received
	// between measureFrom and measureTo count for throughput (UnixNano).
	measureFrom, measureTo int64

	mu                      sync.Mutex
	e2e, ack, lag, fromSend *Hist
	win                     window
	timeline                timeline
	latTimeline             latTimeline
	sent, acked, consumed   int64
	measured, measuredBytes int64
	errs                    int64
	firstErr                error

	// incremental counts the fetchers' incremental fetches.
	incremental atomic.Int64
}

func newRawE2EStats() *rawE2EStats {
	return &rawE2EStats{e2e: NewHist(), ack: NewHist(), lag: NewHist(), fromSend: NewHist()}
}

// waitConsumed waits up to timeout for the consumers to see every
// acknowledged record.
func (s *rawE2EStats) waitConsumed(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		s.mu.Lock()
		done := s.consumed >= s.acked
		s.mu.Unlock()
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// finish fills res with what s measured in the run from start to end,
// prints its final line to progress and says whether the run failed:
// records acknowledged but never consumed, nothing measured, or an error
// on the way.
func (s *rawE2EStats) finish(res *Result, c *Config, start, end time.Time, progress io.Writer) (*Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res.Sent, res.Acked, res.Consumed, res.Errors = s.sent, s.acked, s.consumed, s.errs
	if s.firstErr != nil {
		res.FirstError = s.firstErr.Error()
	}
	res.setThroughput(s.measured, s.measuredBytes, end.Sub(start.Add(c.Warmup.D())))
	res.Timeline = s.timeline.counts
	res.TimelineP99, res.TimelineMax = s.latTimeline.perSecond()
	res.E2ELatency = s.e2e.Summary()
	res.ProduceLatency = s.ack.Summary()
	res.SendLag = s.lag.Summary()
	res.E2EFromSend = s.fromSend.Summary()
	res.IncrementalFetches = s.incremental.Load()
	finalLine(progress, res)
	switch {
	case s.consumed < s.acked:
		return res, fmt.Errorf("consumers saw %d of %d acknowledged records within %v", s.consumed, s.acked, c.Timeout.D())
	case res.E2ELatency == nil:
		return res, fmt.Errorf("no record measured end to end: %s", res.FirstError)
	case s.firstErr != nil:
		return res, s.firstErr
	}
	return res, nil
}

// acks records the acknowledgement, at now, of the records of indexes
// [from, to) of sched: their ack latency from their due times.
func (s *rawE2EStats) acks(sched Schedule, from, to int64, now time.Time) {
	s.mu.Lock()
	s.acked += to - from
	for k := from; k < to; k++ {
		if d := sched.Due(k); d.UnixNano() >= s.measureFrom {
			s.ack.Record(now.Sub(d))
		}
	}
	s.mu.Unlock()
}

// consume records one record of n bytes, due at due, received at nowN
// (UnixNano), and when sent is not 0 (the record carries it, see
// stampRecord) its latency from there. The caller holds s.mu.
func (s *rawE2EStats) consume(due, sent int64, n int, nowN int64) {
	lat := time.Duration(nowN - due)
	if due >= s.measureFrom {
		s.e2e.Record(lat)
		if sent != 0 {
			s.fromSend.Record(time.Duration(nowN - sent))
		}
	}
	s.win.add(n, lat, true)
	s.consumed++
	s.timeline.add(nowN)
	s.latTimeline.add(nowN, lat)
	if nowN >= s.measureFrom && nowN <= s.measureTo {
		s.measured++
		s.measuredBytes += int64(n)
	}
}

func (s *rawE2EStats) fail(err error) {
	s.mu.Lock()
	s.errs++
	if s.firstErr == nil {
		s.firstErr = err
	}
	s.mu.Unlock()
}

func (s *rawE2EStats) takeWindow() window {
	s.mu.Lock()
	w := s.win
	s.win = window{}
	s.mu.Unlock()
	return w
}

// rawSender is one raw producer: a connection per partition leader and
// the partitions in the order its requests take them.
type rawSender struct {
	c     *Config
	topic string
	acks  int16
	codec batch.Codec
	st    *rawE2EStats
	conns []*rawProduceLink
	parts []rawPart
	// perBatch caps the records of one batch (c.BatchBytes of values:
	// what fell due during a stall goes out as several requests).
	perBatch int64
	// turn counts the requests sent: request i goes to parts[i % len].
	turn int
	// sched is the sender's schedule (set by run).
	sched Schedule
	value []byte // the record value; its first 8 bytes are patched
	b     *batch.Builder
}

// rawPart is a partition and the index of its leader's link.
type rawPart struct {
	partition int32
	link      int
}

// rawProduceLink is a sender's connection to one leader with the
// requests it has in flight, answered in order.
type rawProduceLink struct {
	addr     string
	conn     net.Conn
	frame    []byte
	corr     int32
	inflight chan rawInflight // capacity MaxInflight; closed by the sender
	done     chan error       // the reader's end
}

// rawInflight is a request in flight with the records of indexes
// [from, to) of the sender's schedule.
type rawInflight struct {
	from, to int64
}

func dialRawSender(ctx context.Context, c *Config, topic string, leaders map[string][]int32, acks int16, codec batch.Codec, id uint64, st *rawE2EStats) (*rawSender, error) {
	s := &rawSender{c: c, topic: topic, acks: acks, codec: codec, st: st, b: batch.NewBuilder(),
		perBatch: int64(max(1, c.BatchBytes/c.RecordSize))}
	addrs := make([]string, 0, len(leaders))
	for a := range leaders {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	for i, a := range addrs {
		for _, p := range leaders[a] {
			s.parts = append(s.parts, rawPart{partition: p, link: i})
		}
	}
	sort.Slice(s.parts, func(i, j int) bool { return s.parts[i].partition < s.parts[j].partition })
	s.turn = int(id) // producers start on different partitions
	for _, a := range addrs {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", a)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("raw e2e producer: %w", err)
		}
		s.conns = append(s.conns, &rawProduceLink{addr: a, conn: conn,
			inflight: make(chan rawInflight, max(1, c.MaxInflight)), done: make(chan error, 1)})
	}
	// Random capital letters, as the other producers send.
	rng := rand.New(rand.NewPCG(id+77, 1))
	s.value = make([]byte, c.RecordSize)
	for i := range s.value {
		s.value[i] = byte('A' + rng.IntN(26))
	}
	return s, nil
}

func (s *rawSender) close() {
	for _, l := range s.conns {
		l.conn.Close()
	}
}

// run sends the records due from sched.Start to end, then waits for
// their answers.
func (s *rawSender) run(ctx context.Context, sched Schedule, end time.Time) error {
	s.sched = sched
	for _, l := range s.conns {
		go func() { l.done <- s.readAnswers(l) }()
	}
	err := s.send(ctx, end)
	for _, l := range s.conns {
		close(l.inflight)
	}
	// A reader's failure comes first: it is why a write then failed on
	// the connection the reader closed.
	var rerr error
	for _, l := range s.conns {
		if e := <-l.done; e != nil && rerr == nil {
			rerr = e
		}
	}
	if rerr != nil {
		return rerr
	}
	return err
}

// send is the sender's loop (paceRecords). Like the sticky partitioner
// of Kafka's clients (KIP-480) for records without a key, each request
// fills one partition's batch and the next request takes the next
// partition.
func (s *rawSender) send(ctx context.Context, end time.Time) error {
	return paceRecords(ctx, s.sched, end, s.c.Linger.D(), s.perBatch, s.st, s.sendBatch)
}

// paceRecords sends sched's records due before end: it waits for the
// next due record, then hands every record that is due, at most perBatch
// at a time, to send (indexes [from, to) of sched), recording how late
// each one left. It wakes at most every linger (as a producer client's
// linger: records wait up to that long for the next wake-up, which sends
// them together).
func paceRecords(ctx context.Context, sched Schedule, end time.Time, linger time.Duration, perBatch int64, st *rawE2EStats, send func(from, to int64) error) error {
	p, err := newPacer()
	if err != nil {
		return err
	}
	defer p.close()
	quantum := max(pacerQuantum(sched.Rate), linger)
	total := int64(math.Ceil(end.Sub(sched.Start).Seconds() * sched.Rate)) // records due before end
	for total > 0 && !sched.Due(total-1).Before(end) {
		total--
	}
	var lastWake time.Time
	for next := int64(0); next < total; {
		if ctx.Err() != nil {
			return nil
		}
		if err := waitDue(p, sched.Due(next), sched.Interval(), quantum, &lastWake); err != nil {
			return err
		}
		now := time.Now()
		upto := next + 1 // next is due (or the pacer woke a hair early)
		for upto < total && upto-next < perBatch && !sched.Due(upto).After(now) {
			upto++
		}
		st.mu.Lock()
		for k := next; k < upto; k++ {
			if d := sched.Due(k); d.UnixNano() >= st.measureFrom {
				st.lag.Record(now.Sub(d))
			}
		}
		st.sent += upto - next
		st.mu.Unlock()
		if err := send(next, upto); err != nil {
			return err
		}
		next = upto
	}
	return nil
}

// sendBatch sends the records of indexes [from, to) as one Produce
// request (v7: transactional id, acks, timeout, one topic, one partition
// with one record batch) to the next partition, waiting for a free
// in-flight slot on its leader's connection first.
func (s *rawSender) sendBatch(from, to int64) error {
	part := s.parts[s.turn%len(s.parts)]
	s.turn++
	l := s.conns[part.link]
	s.b.Reset()
	sent := time.Now().UnixNano()
	for k := from; k < to; k++ {
		due := s.sched.Due(k).UnixNano()
		stampRecord(s.value, due, sent)
		s.b.Add(due/int64(time.Millisecond), nil, s.value, nil)
	}
	f := l.frame[:0]
	f = append(f, 0, 0, 0, 0) // size
	f = binary.BigEndian.AppendUint16(f, 0)
	f = binary.BigEndian.AppendUint16(f, rawProduceVersion)
	f = binary.BigEndian.AppendUint32(f, uint32(l.corr))
	f = appendString(f, "ringlog-perf-raw")
	f = binary.BigEndian.AppendUint16(f, 0xffff) // no transactional id
	f = binary.BigEndian.AppendUint16(f, uint16(s.acks))
	f = binary.BigEndian.AppendUint32(f, uint32(s.c.Timeout.D().Milliseconds()))
	f = binary.BigEndian.AppendUint32(f, 1) // topics
	f = appendString(f, s.topic)
	f = binary.BigEndian.AppendUint32(f, 1) // partitions
	f = binary.BigEndian.AppendUint32(f, uint32(part.partition))
	sizeAt := len(f)
	f = append(f, 0, 0, 0, 0)
	f, err := s.b.Build(f, s.codec)
	if err != nil {
		return fmt.Errorf("raw e2e producer: build a batch: %w", err)
	}
	binary.BigEndian.PutUint32(f[sizeAt:], uint32(len(f)-sizeAt-4))
	binary.BigEndian.PutUint32(f, uint32(len(f)-4))
	l.frame = f
	l.inflight <- rawInflight{from: from, to: to} // blocks while MaxInflight are unanswered
	l.corr++
	if _, err := l.conn.Write(f); err != nil {
		return fmt.Errorf("raw e2e produce to %s: %w", l.addr, err)
	}
	return nil
}

// readAnswers reads l's Produce responses in order until its in-flight
// queue is closed and drained, recording each record's ack latency from
// its due time. After a failure it closes the connection (the sender's
// next write fails) and drains the queue, so the sender never blocks on
// it.
func (s *rawSender) readAnswers(l *rawProduceLink) error {
	err := s.readAnswersUntilErr(l)
	if err != nil {
		l.conn.Close()
		for range l.inflight {
		}
	}
	return err
}

func (s *rawSender) readAnswersUntilErr(l *rawProduceLink) error {
	br := bufio.NewReaderSize(l.conn, 64<<10)
	var body []byte
	for req := range l.inflight {
		var err error
		if body, err = readFrame(br, body); err != nil {
			return fmt.Errorf("raw e2e producer: read a produce response from %s: %w", l.addr, err)
		}
		if err := checkProduceResponse(body); err != nil {
			return fmt.Errorf("raw e2e: %w", err)
		}
		s.st.acks(s.sched, req.from, req.to, time.Now())
	}
	return nil
}

// stampRecord writes a raw record's due time (bytes 0-7, little-endian
// UnixNano) and, in a value of 16 bytes or more, when its request was
// built (bytes 8-15).
func stampRecord(v []byte, due, sent int64) {
	binary.LittleEndian.PutUint64(v, uint64(due))
	if len(v) >= 16 {
		binary.LittleEndian.PutUint64(v[8:], uint64(sent))
	}
}

// readStamps reads what stampRecord wrote (sent 0: not carried).
func readStamps(v []byte) (due, sent int64) {
	due = int64(binary.LittleEndian.Uint64(v))
	if len(v) >= 16 {
		sent = int64(binary.LittleEndian.Uint64(v[8:]))
	}
	return due, sent
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// rawFetcher long-polls one leader for a share of the partitions.
type rawFetcher struct {
	c       *Config
	addr    string
	conn    net.Conn
	br      *bufio.Reader
	req     *kmsg.FetchRequest
	fmtr    *kmsg.RequestFormatter
	st      *rawE2EStats
	scratch []byte
	body    []byte // the response buffer, as large as a response may be
}

// rawFetchMaxBytes is the most a raw e2e fetcher asks for in one
// response (FetchRequest.MaxBytes).
const rawFetchMaxBytes = 64 << 20

func dialRawFetcher(ctx context.Context, c *Config, addr, topic string, parts []int32, ends map[int32]int64, st *rawE2EStats) (*rawFetcher, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("raw e2e fetcher: %w", err)
	}
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(rawFetchVersion)
	req.ReplicaID = -1
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 500, 1, rawFetchMaxBytes
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	for _, p := range parts {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, ends[p], int32(c.FetchBytes)
		rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = []kmsg.FetchRequestTopic{rt}
	return &rawFetcher{c: c, addr: addr, conn: conn, br: bufio.NewReaderSize(conn, 256<<10), req: req,
		fmtr: kmsg.NewRequestFormatter(kmsg.FormatterClientID("ringlog-perf-raw")), st: st,
		// Headers on top of the records (a response may pass MaxBytes by
		// a partition's first batch: readFrame grows it then).
		body: prefaulted(rawFetchMaxBytes + 1<<20)}, nil
}

// run fetches until ctx ends (or the connection is closed under it).
//
// It keeps a fetch session (KIP-227), as Kafka's consumers do: the first
// request names every partition and opens the session (epoch 0), later
// ones name only the partitions whose position moved (epochs 1, 2, ...),
// and the broker answers only the partitions with something new. A broker
// that declines (session id 0) gets full sessionless fetches (epoch -1); a
// session the broker lost (FETCH_SESSION_ID_NOT_FOUND,
// INVALID_FETCH_SESSION_EPOCH) starts over with a full fetch.
func (f *rawFetcher) run(ctx context.Context) error {
	var frame []byte
	body := f.body
	full := f.req // every partition, at the positions consumed up to
	parts := full.Topics[0].Partitions
	index := map[int32]int{}
	for i, p := range parts {
		index[p.Partition] = i
	}
	inc := *full
	incTopics := []kmsg.FetchRequestTopic{{Topic: full.Topics[0].Topic, Partitions: make([]kmsg.FetchRequestTopicPartition, 0, len(parts))}}
	moved := make([]bool, len(parts)) // position changed since the last request
	var sessionID, epoch int32        // epoch 0: open a session next
	sessionless := false
	for corr := int32(0); ctx.Err() == nil; corr++ {
		req := full
		switch {
		case sessionless:
			full.SessionID, full.SessionEpoch = 0, -1
		case epoch == 0:
			full.SessionID, full.SessionEpoch = 0, 0
		default:
			ps := incTopics[0].Partitions[:0]
			for i, m := range moved {
				if m {
					ps = append(ps, parts[i])
				}
			}
			incTopics[0].Partitions = ps
			inc.Topics = incTopics[:min(len(ps), 1)]
			inc.SessionID, inc.SessionEpoch = sessionID, epoch
			req = &inc
		}
		clear(moved)
		frame = f.fmtr.AppendRequest(frame[:0], req, corr)
		if _, err := f.conn.Write(frame); err != nil {
			return fmt.Errorf("raw e2e fetch from %s: %w", f.addr, err)
		}
		var err error
		if body, err = readFrame(f.br, body); err != nil {
			return fmt.Errorf("raw e2e fetch from %s: %w", f.addr, err)
		}
		now := time.Now()
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(rawFetchVersion)
		if err := resp.ReadFrom(body[4:]); err != nil {
			return fmt.Errorf("raw e2e fetch: decode a fetch response: %w", err)
		}
		switch resp.ErrorCode {
		case 0:
		case kerr.FetchSessionIDNotFound.Code, kerr.InvalidFetchSessionEpoch.Code:
			if sessionless || epoch == 0 {
				return fmt.Errorf("raw e2e fetch from %s: a full fetch got %w", f.addr, kerr.ErrorForCode(resp.ErrorCode))
			}
			epoch = 0
			continue
		default:
			return fmt.Errorf("raw e2e fetch from %s: %w", f.addr, kerr.ErrorForCode(resp.ErrorCode))
		}
		switch {
		case sessionless:
		case epoch == 0 && resp.SessionID == 0:
			sessionless = true
		case epoch == 0:
			sessionID, epoch = resp.SessionID, 1
		default:
			f.st.incremental.Add(1)
			if epoch++; epoch < 0 {
				epoch = 1 // after MaxInt32 (KIP-227)
			}
		}
		f.st.mu.Lock()
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				i, ok := index[p.Partition]
				if !ok {
					continue
				}
				if p.ErrorCode != 0 {
					f.st.mu.Unlock()
					return fmt.Errorf("raw e2e fetch %s-%d: %w", t.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
				}
				rp := &parts[i]
				next, err := f.records(p.RecordBatches, rp.FetchOffset, now)
				if err != nil {
					f.st.mu.Unlock()
					return fmt.Errorf("raw e2e fetch %s-%d: %w", t.Topic, p.Partition, err)
				}
				if next != rp.FetchOffset {
					rp.FetchOffset = next
					moved[i] = true
				}
			}
		}
		f.st.mu.Unlock()
	}
	return nil
}

// records walks the whole batches of b, records every record from offset
// from on (its e2e latency measured from the due time in its value), and
// returns the offset after the last batch. The caller holds f.st.mu.
func (f *rawFetcher) records(b []byte, from int64, now time.Time) (int64, error) {
	st := f.st
	nowN := now.UnixNano()
	for len(b) >= batch.HeaderSize {
		h, err := batch.ParseHeader(b)
		if err != nil {
			return from, err
		}
		size := h.Size()
		if size < batch.HeaderSize {
			return from, fmt.Errorf("a batch of %d bytes at offset %d", size, h.BaseOffset)
		}
		if size > len(b) {
			break // the partial batch a fetch can end with
		}
		if !h.Control() {
			it, scratch, err := batch.Records(b[:size], &h, f.scratch)
			f.scratch = scratch
			if err != nil {
				return from, err
			}
			for {
				rec, ok := it.Next()
				if !ok {
					break
				}
				if h.BaseOffset+int64(rec.OffsetDelta) < from || len(rec.Value) < 8 {
					continue
				}
				due, sent := readStamps(rec.Value)
				st.consume(due, sent, len(rec.Value)+len(rec.Key), nowN)
			}
			if err := it.Err(); err != nil {
				return from, err
			}
		}
		from = max(from, h.NextOffset())
		b = b[size:]
	}
	return from, nil
}
