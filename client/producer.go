package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ringlog/ringlog/internal/keyhash"
)

// Producer errors returned by Send, SendSync, Flush and Close, or carried
// by a Result.
var (
	// ErrProducerClosed: Send after Close, or a record still queued when
	// Close gave up draining (its context ended).
	ErrProducerClosed = errors.New("ringlog producer: closed")
	// ErrBufferFull: the producer's buffer has no room for the record and
	// the producer was built with WithBlockWhenFull(false).
	ErrBufferFull = errors.New("ringlog producer: buffer full")
	// ErrRecordTooLarge: the record alone is larger than the whole buffer
	// (WithBufferBytes), so it can never fit. It wraps ErrBufferFull.
	ErrRecordTooLarge = fmt.Errorf("%w: record larger than the whole buffer", ErrBufferFull)
	// ErrNoTopic: the record's Topic is empty.
	ErrNoTopic = errors.New("ringlog producer: record has no topic")
)

// Producer defaults.
const (
	DefaultLinger         = 5 * time.Millisecond  // WithLinger
	DefaultBatchBytes     = 64 << 10              // WithBatchBytes
	DefaultBatchRecords   = 10000                 // WithBatchRecords
	DefaultBufferBytes    = 32 << 20              // WithBufferBytes
	DefaultRetries        = 5                     // WithRetries
	DefaultRetryBackoff   = 50 * time.Millisecond // WithRetryBackoff, first wait
	DefaultMaxBackoff     = time.Second           // WithRetryBackoff, longest wait
	DefaultDialTimeout    = 10 * time.Second      // WithDialTimeout
	DefaultRequestTimeout = 30 * time.Second      // WithRequestTimeout, WithConsumerTimeout
)

// recordOverhead is what a record adds to a PRODUCE request besides its
// key and value (the two length fields); buffer and batch sizes count it.
const recordOverhead = 8

// keyGroupParallel bounds the requests one batcher of a topic whose
// partition count is unknown has in flight at once (one per distinct key).
const keyGroupParallel = 8

// Result is the outcome of one produced record, given to Send's callback.
type Result struct {
	// Topic is the record's topic.
	Topic string
	// Partition is where the record was appended, or where the last
	// attempt went (-1 when the broker was to pick and never answered).
	Partition int32
	// Offset is the record's offset, -1 when it failed.
	Offset int64
	// Err is nil when the record is in the log. Otherwise the last error
	// (a *Error from the broker, a network error, ErrProducerClosed).
	Err error
	// DeadLetter is the result of writing the failed record to the
	// dead-letter topic (WithDeadLetterTopic): nil when no dead-letter
	// write was attempted. A record with Err != nil and DeadLetter.Err ==
	// nil is parked in the dead-letter topic at DeadLetter.Offset.
	DeadLetter *Result
}

// DeadLetterFormat is the Format of every DeadLetter envelope this
// version writes.
const DeadLetterFormat = "ringlog-dlq/1"

// DeadLetter is the JSON envelope the Producer writes as the value of a
// dead-letter record (the native protocol has no record headers, so the
// original topic, partition, key, error and time travel in the value). The
// dead-letter record's key is the original key, so the failures of one key
// stay in order in one partition of the dead-letter topic.
//
//	{"format":"ringlog-dlq/1","topic":"orders","partition":5,
//	 "key":"b3JkZXItNDI=","value":"eyJ0b3RhbCI6MTB9",
//	 "error":"ringlog produce: unknown topic or partition (code 1)",
//	 "error_code":1,"attempts":6,"failed_at":"2026-05-01T10:00:01.5Z"}
//
// key and value are base64 (standard encoding) or null for a null key or
// value; error_code is the native error code, 0 for a network or other
// client-side error; partition is -1 when the broker was to pick and never
// answered.
type DeadLetter struct {
	Format    string    `json:"format"`     // DeadLetterFormat
	Topic     string    `json:"topic"`      // the original topic
	Partition int32     `json:"partition"`  // the partition of the last attempt
	Key       []byte    `json:"key"`        // the original key
	Value     []byte    `json:"value"`      // the original value
	Error     string    `json:"error"`      // the last error's text
	ErrorCode byte      `json:"error_code"` // its native code, 0 if none
	Attempts  int       `json:"attempts"`   // PRODUCE attempts made
	FailedAt  time.Time `json:"failed_at"`  // when the producer gave up (UTC)
}

// ParseDeadLetter decodes the value of a dead-letter record.
func ParseDeadLetter(value []byte) (DeadLetter, error) {
	var d DeadLetter
	if err := json.Unmarshal(value, &d); err != nil {
		return d, fmt.Errorf("ringlog dead letter: %w", err)
	}
	if d.Format != DeadLetterFormat {
		return d, fmt.Errorf("ringlog dead letter: format %q, want %q", d.Format, DeadLetterFormat)
	}
	return d, nil
}

// ProducerOption configures a Producer.
type ProducerOption func(*producerConfig)

type producerConfig struct {
	linger       time.Duration
	batchBytes   int
	batchRecords int
	bufferBytes  int
	block        bool
	retries      int
	backoff      time.Duration
	maxBackoff   time.Duration
	dlq          string
	partitions   map[string]int32
	dialTimeout  time.Duration
	reqTimeout   time.Duration
}

// WithLinger sets how long a partition's batch waits for more records
// before it is sent (default 5 ms). 0 sends as soon as the partition's
// previous request is answered; records that arrive meanwhile still form
// one batch.
func WithLinger(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.linger = max(d, 0) }
}

// WithBatchBytes sends a partition's batch once it holds this many bytes
// of keys and values (plus 8 per record; default 64 KiB). A larger record
// goes alone.
func WithBatchBytes(n int) ProducerOption {
	return func(c *producerConfig) { c.batchBytes = max(n, 1) }
}

// WithBatchRecords sends a partition's batch once it holds this many
// records (default 10000).
func WithBatchRecords(n int) ProducerOption {
	return func(c *producerConfig) { c.batchRecords = max(n, 1) }
}

// WithBufferBytes bounds the bytes of records sent and not yet completed
// (default 32 MiB); see WithBlockWhenFull.
func WithBufferBytes(n int) ProducerOption {
	return func(c *producerConfig) { c.bufferBytes = max(n, 1) }
}

// WithBlockWhenFull chooses what Send does when the buffer has no room:
// block until there is room or its context ends (true, the default), or
// return ErrBufferFull at once (false).
func WithBlockWhenFull(block bool) ProducerOption {
	return func(c *producerConfig) { c.block = block }
}

// WithRetries sets how many times a failed batch is sent again after its
// first attempt (default 5) when the error is retriable: a network error
// or timeout (the producer reconnects), a *Error whose Retriable() is true,
// or CodeUnknownTopic (as Kafka: the partition may be being created).
// Retried batches may be appended twice (at-least-once).
func WithRetries(n int) ProducerOption {
	return func(c *producerConfig) { c.retries = max(n, 0) }
}

// WithRetryBackoff sets the wait before the first retry (default 50 ms);
// it doubles on each further retry up to maxBackoff (default 1 s).
func WithRetryBackoff(backoff, maxBackoff time.Duration) ProducerOption {
	return func(c *producerConfig) {
		c.backoff = max(backoff, 0)
		c.maxBackoff = max(maxBackoff, c.backoff)
	}
}

// WithDeadLetterTopic sends a record that failed for good (retries
// exhausted, or a non-retriable error) to topic, as a DeadLetter JSON
// envelope, instead of dropping it. Records of topic itself are never
// dead-lettered again.
func WithDeadLetterTopic(topic string) ProducerOption {
	return func(c *producerConfig) { c.dlq = topic }
}

// WithTopicPartitions tells the producer that topic has n partitions, so
// it partitions the topic's records itself: murmur2 of the key as Kafka's
// default partitioner (keyhash.Partition), strict round-robin for null
// keys. Without it (the native protocol has no metadata request), records
// go with partition -1 and the broker picks: the same murmur2 for keys,
// and round-robin per request for null keys (a batch of null-key records
// stays together, like Kafka's sticky partitioner).
func WithTopicPartitions(topic string, n int32) ProducerOption {
	return func(c *producerConfig) {
		if n > 0 {
			c.partitions[topic] = n
		}
	}
}

// WithDialTimeout bounds each connection attempt (default 10 s).
func WithDialTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.dialTimeout = d }
}

// WithRequestTimeout bounds each PRODUCE request (default 30 s). A request
// that times out counts as a network error: the producer reconnects and
// retries.
func WithRequestTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.reqTimeout = d }
}

// SendOption changes how one record is sent.
type SendOption func(*sendConfig)

type sendConfig struct {
	partition int32
	explicit  bool
}

// ToPartition sends the record to partition p, bypassing the partitioner
// (-1: the broker picks). Record.Partition is ignored by Send, so a
// fetched record can be produced elsewhere without pinning its partition.
func ToPartition(p int32) SendOption {
	return func(s *sendConfig) { s.partition, s.explicit = p, true }
}

// Producer sends records to a broker's native listener in batches, one
// batch per topic-partition in flight at a time (so records of one
// partition stay in order), with retries, a bounded buffer and an optional
// dead-letter topic. Its methods are safe for concurrent use.
//
// Ownership: every topic-partition (or, for a topic whose partition count
// is unknown, every topic) gets one batcher goroutine, started on its first
// record and stopped by Close; it alone takes records from its queue,
// sends them and runs their callbacks. All batchers share one pipelined
// Conn (whose reader is the only other goroutine), replaced after a
// network error. The queues, the buffer accounting and the flush waiters
// are guarded by one mutex.
type Producer struct {
	addr string
	cfg  producerConfig

	runCtx context.Context // canceled when Close gives up draining
	abort  context.CancelFunc
	wg     sync.WaitGroup // batchers

	connMu sync.Mutex
	conn   *Conn

	mu          sync.Mutex
	batchers    map[batchKey]*batcher
	rr          map[string]uint32 // null-key round-robin per topic
	bufUsed     int
	roomCh      chan struct{} // closed (and replaced) when room is freed
	roomWaiters int
	seq         uint64 // sequence of the next record
	outstanding int    // records sent and not completed
	waiters     []*flushWaiter
	flushing    int  // Flush calls in progress: no lingering
	closed      bool // Close called: Send refused, no lingering
	stopping    bool // batchers exit once empty; enqueue fails
	closeDone   chan struct{}
}

type batchKey struct {
	topic     string
	partition int32
}

type flushWaiter struct {
	target    uint64 // records with seq < target
	remaining int
	done      chan struct{}
}

// pending is one record between Send and its result.
type pending struct {
	rec       Record
	partition int32
	size      int
	seq       uint64
	enq       time.Time
	urgent    bool // SendSync: do not linger
	cb        func(Result)
	parent    *pending // a dead-letter record: the original
	parentRes Result   // the original's result, DeadLetter to be filled
}

type batcher struct {
	p      *Producer
	key    batchKey
	queue  []*pending
	bytes  int
	urgent int
	wake   chan struct{}
}

// NewProducer connects to the native listener at addr.
func NewProducer(addr string, opts ...ProducerOption) (*Producer, error) {
	cfg := producerConfig{
		linger: DefaultLinger, batchBytes: DefaultBatchBytes, batchRecords: DefaultBatchRecords,
		bufferBytes: DefaultBufferBytes, block: true, retries: DefaultRetries,
		backoff: DefaultRetryBackoff, maxBackoff: DefaultMaxBackoff,
		partitions: map[string]int32{}, dialTimeout: DefaultDialTimeout, reqTimeout: DefaultRequestTimeout,
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.dialTimeout)
	defer cancel()
	c, err := Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	p := &Producer{addr: addr, cfg: cfg, conn: c,
		batchers: map[batchKey]*batcher{}, rr: map[string]uint32{},
		roomCh: make(chan struct{}), closeDone: make(chan struct{})}
	p.runCtx, p.abort = context.WithCancel(context.Background())
	return p, nil
}

// Send queues rec for rec.Topic and returns; cb (may be nil) later gets
// the record's Result, on a producer goroutine: it must not block, nor call
// Flush, Close or SendSync. Callbacks of one partition (of one key, for a
// topic whose partition count is unknown) run in send order; others may
// run concurrently.
// Key and Value are kept, not copied, until then: do not modify them.
// Record.Partition, Offset and Timestamp are ignored (see ToPartition; the
// broker stamps the time).
//
// ctx bounds only the wait for buffer room; once queued, the record is
// delivered, retried or dead-lettered regardless. Send returns an error,
// and cb is not called, when the record was not queued: ErrNoTopic,
// ErrProducerClosed, ErrBufferFull, ErrRecordTooLarge or ctx.Err().
func (p *Producer) Send(ctx context.Context, rec Record, cb func(Result), opts ...SendOption) error {
	return p.send(ctx, rec, cb, false, opts)
}

// SendSync sends rec and waits for its result. The record does not wait
// for the linger time (records queued with it go along). The error is the
// Result's Err, or Send's error, or ctx.Err() when ctx ends first (the
// record may still be delivered then).
func (p *Producer) SendSync(ctx context.Context, rec Record, opts ...SendOption) (Result, error) {
	done := make(chan Result, 1)
	if err := p.send(ctx, rec, func(r Result) { done <- r }, true, opts); err != nil {
		return Result{Topic: rec.Topic, Partition: -1, Offset: -1, Err: err}, err
	}
	select {
	case r := <-done:
		return r, r.Err
	case <-ctx.Done():
		return Result{Topic: rec.Topic, Partition: -1, Offset: -1, Err: ctx.Err()}, ctx.Err()
	}
}

func (p *Producer) send(ctx context.Context, rec Record, cb func(Result), urgent bool, opts []SendOption) error {
	if rec.Topic == "" {
		return ErrNoTopic
	}
	var sc sendConfig
	for _, o := range opts {
		o(&sc)
	}
	size := recordOverhead + len(rec.Key) + len(rec.Value)
	if size > p.cfg.bufferBytes {
		return ErrRecordTooLarge
	}
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return ErrProducerClosed
		}
		if p.bufUsed+size <= p.cfg.bufferBytes {
			break
		}
		if !p.cfg.block {
			p.mu.Unlock()
			return ErrBufferFull
		}
		if err := ctx.Err(); err != nil {
			p.mu.Unlock()
			return err
		}
		ch := p.roomCh
		p.roomWaiters++
		p.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		p.mu.Lock()
		p.roomWaiters--
		if err != nil {
			p.mu.Unlock()
			return err
		}
	}
	part := sc.partition
	if !sc.explicit {
		part = p.partitionLocked(&rec)
	}
	pd := &pending{rec: Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value}, partition: part,
		size: size, seq: p.seq, cb: cb, urgent: urgent}
	p.seq++
	p.bufUsed += size
	p.outstanding++
	p.enqueueLocked(pd)
	p.mu.Unlock()
	return nil
}

// partitionLocked is the partitioner: Kafka's murmur2 for keys and strict
// round-robin for null keys when the topic's count is known, else -1.
func (p *Producer) partitionLocked(rec *Record) int32 {
	n := p.cfg.partitions[rec.Topic]
	if n <= 0 {
		return -1
	}
	if rec.Key != nil {
		return keyhash.Partition(rec.Key, n)
	}
	c := p.rr[rec.Topic]
	p.rr[rec.Topic] = c + 1
	return int32(c % uint32(n))
}

// enqueueLocked appends pd to its batcher's queue, starting the batcher if
// needed. The caller checked that the producer is not stopping.
func (p *Producer) enqueueLocked(pd *pending) {
	pd.enq = time.Now()
	k := batchKey{pd.rec.Topic, pd.partition}
	if k.partition < -1 {
		k.partition = -1
	}
	b := p.batchers[k]
	if b == nil {
		b = &batcher{p: p, key: k, wake: make(chan struct{}, 1)}
		p.batchers[k] = b
		p.wg.Add(1)
		go b.run()
	}
	wasEmpty := len(b.queue) == 0
	b.queue = append(b.queue, pd)
	b.bytes += pd.size
	if pd.urgent {
		b.urgent++
	}
	if wasEmpty || pd.urgent || b.fullLocked() {
		b.signal()
	}
}

func (b *batcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (p *Producer) wakeAllLocked() {
	for _, b := range p.batchers {
		b.signal()
	}
}

func (b *batcher) fullLocked() bool {
	return b.bytes >= b.p.cfg.batchBytes || len(b.queue) >= b.p.cfg.batchRecords
}

// Flush sends every queued record without waiting for the linger time and
// waits until all records sent before the call have their results (and
// their callbacks have returned), or ctx ends.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	if p.outstanding == 0 {
		p.mu.Unlock()
		return nil
	}
	w := &flushWaiter{target: p.seq, remaining: p.outstanding, done: make(chan struct{})}
	p.waiters = append(p.waiters, w)
	p.flushing++
	p.wakeAllLocked()
	p.mu.Unlock()
	var err error
	select {
	case <-w.done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.mu.Lock()
	p.flushing--
	for i, x := range p.waiters {
		if x == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	return err
}

// Close stops accepting records, drains (sends everything queued and
// waits for the results, as Flush), stops the producer's goroutines and
// closes the connection. When ctx ends first, the records still queued or
// in flight fail with ErrProducerClosed and Close returns ctx.Err(). A
// second Close waits for the first.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		done := p.closeDone
		p.mu.Unlock()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.closed = true
	close(p.roomCh) // wake blocked Sends: they see closed
	p.roomCh = make(chan struct{})
	p.wakeAllLocked()
	p.mu.Unlock()

	err := p.Flush(ctx)
	if err != nil {
		p.abort()
		p.dropConn(nil)
	}
	p.mu.Lock()
	p.stopping = true
	p.wakeAllLocked()
	p.mu.Unlock()
	p.wg.Wait()
	p.abort()
	p.dropConn(nil)
	close(p.closeDone)
	return err
}

// run is a batcher's goroutine: wait for records, linger, send, repeat.
func (b *batcher) run() {
	p := b.p
	defer p.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		p.mu.Lock()
		batch, wait, exit, failed := b.nextLocked(time.Now())
		p.mu.Unlock()
		if failed != nil {
			res := make([]Result, len(failed))
			for i, pd := range failed {
				res[i] = Result{Topic: pd.rec.Topic, Partition: pd.partition, Offset: -1, Err: ErrProducerClosed}
			}
			p.deliver(failed, res)
		}
		if exit {
			return
		}
		if batch != nil {
			b.send(batch)
			continue
		}
		var tc <-chan time.Time
		if wait >= 0 {
			t.Reset(wait)
			tc = t.C
		}
		select {
		case <-b.wake:
		case <-tc:
		}
	}
}

// nextLocked decides the batcher's next step: a batch to send, or how long
// to wait (-1: until woken), or exit. failed are records to fail because
// Close gave up.
func (b *batcher) nextLocked(now time.Time) (batch []*pending, wait time.Duration, exit bool, failed []*pending) {
	p := b.p
	if p.stopping && p.runCtx.Err() != nil && len(b.queue) > 0 {
		failed = b.queue
		b.queue, b.bytes, b.urgent = nil, 0, 0
	}
	if len(b.queue) == 0 {
		if p.stopping {
			delete(p.batchers, b.key)
			return nil, 0, true, failed
		}
		return nil, -1, false, failed
	}
	age := now.Sub(b.queue[0].enq)
	if !b.fullLocked() && b.urgent == 0 && p.flushing == 0 && !p.closed && age < p.cfg.linger {
		return nil, p.cfg.linger - age, false, failed
	}
	n, bytes := 0, 0
	for n < len(b.queue) && n < p.cfg.batchRecords {
		s := b.queue[n].size
		if n > 0 && bytes+s > p.cfg.batchBytes {
			break
		}
		bytes += s
		if b.queue[n].urgent {
			b.urgent--
		}
		n++
	}
	batch = make([]*pending, n)
	copy(batch, b.queue)
	clear(b.queue[:n])
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil
	}
	b.bytes -= bytes
	return batch, 0, false, failed
}

// send delivers one batch. A batch of a topic whose partition count is
// unknown (partition -1) is split by key, because the broker places a
// whole request by its first record's key: each distinct key (and the null
// keys together) becomes its own request.
func (b *batcher) send(batch []*pending) {
	if b.key.partition >= 0 || len(batch) == 1 {
		b.sendGroup(batch)
		return
	}
	groups := groupByKey(batch)
	if len(groups) == 1 {
		b.sendGroup(groups[0])
		return
	}
	sem := make(chan struct{}, keyGroupParallel)
	var wg sync.WaitGroup
	for _, g := range groups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			b.sendGroup(g)
		}()
	}
	wg.Wait()
}

func groupByKey(batch []*pending) [][]*pending {
	idx := map[string]int{}
	null := -1
	var groups [][]*pending
	for _, pd := range batch {
		var i int
		var ok bool
		if pd.rec.Key == nil {
			i, ok = null, null >= 0
			if !ok {
				null = len(groups)
			}
		} else {
			i, ok = idx[string(pd.rec.Key)]
			if !ok {
				idx[string(pd.rec.Key)] = len(groups)
			}
		}
		if !ok {
			i = len(groups)
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], pd)
	}
	return groups
}

// sendGroup sends records as one PRODUCE request (all or none), with
// retries, then delivers their results or dead-letters them.
func (b *batcher) sendGroup(g []*pending) {
	p := b.p
	recs := make([]Record, len(g))
	for i, pd := range g {
		recs[i] = Record{Key: pd.rec.Key, Value: pd.rec.Value}
	}
	var (
		part     = b.key.partition
		base     int64
		err      error
		attempts int
	)
	for {
		attempts++
		part, base, err = p.produceOnce(b.key.topic, b.key.partition, recs)
		if err == nil {
			break
		}
		if p.runCtx.Err() != nil {
			err = fmt.Errorf("%w (last error: %w)", ErrProducerClosed, err)
			break
		}
		if !produceRetriable(err) || attempts > p.cfg.retries {
			break
		}
		if !p.sleep(p.backoff(attempts)) {
			err = fmt.Errorf("%w (last error: %w)", ErrProducerClosed, err)
			break
		}
	}
	res := make([]Result, len(g))
	for i, pd := range g {
		res[i] = Result{Topic: pd.rec.Topic, Partition: part, Offset: -1, Err: err}
		if err == nil {
			res[i].Offset = base + int64(i)
		}
	}
	if err != nil && p.cfg.dlq != "" && b.key.topic != p.cfg.dlq && p.runCtx.Err() == nil {
		g, res = p.deadLetter(g, res, attempts)
		if len(g) == 0 {
			return
		}
	}
	p.deliver(g, res)
}

// produceOnce is one PRODUCE attempt on the shared connection.
func (p *Producer) produceOnce(topic string, partition int32, recs []Record) (int32, int64, error) {
	c, err := p.getConn()
	if err != nil {
		return partition, -1, err
	}
	ctx, cancel := context.WithTimeout(p.runCtx, p.cfg.reqTimeout)
	defer cancel()
	part, base, err := c.Produce(ctx, topic, partition, recs)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			p.dropConn(c) // network error, timeout or a bad answer
		}
	}
	return part, base, err
}

// produceRetriable: transport errors, retriable codes, and an unknown
// topic or partition (as Kafka, which may be a partition being created).
func produceRetriable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Retriable() || e.Code == CodeUnknownTopic
	}
	return true
}

func (p *Producer) backoff(attempt int) time.Duration {
	d := p.cfg.backoff
	for i := 1; i < attempt && d < p.cfg.maxBackoff; i++ {
		d *= 2
	}
	return min(d, p.cfg.maxBackoff)
}

// sleep waits d, false when Close gave up meanwhile.
func (p *Producer) sleep(d time.Duration) bool {
	if d <= 0 {
		return p.runCtx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.runCtx.Done():
		return false
	}
}

// getConn returns the shared connection, dialing a new one after a
// failure.
func (p *Producer) getConn() (*Conn, error) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.conn != nil {
		select {
		case <-p.conn.closed:
			p.conn = nil
		default:
			return p.conn, nil
		}
	}
	if err := p.runCtx.Err(); err != nil {
		return nil, ErrProducerClosed
	}
	ctx, cancel := context.WithTimeout(p.runCtx, p.cfg.dialTimeout)
	defer cancel()
	c, err := Dial(ctx, p.addr)
	if err != nil {
		return nil, err
	}
	p.conn = c
	return c, nil
}

// dropConn closes c (nil: whatever is current) if it is still the shared
// connection; its calls in flight fail and are retried on a new one.
func (p *Producer) dropConn(c *Conn) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.conn != nil && (c == nil || c == p.conn) {
		p.conn.Close()
		p.conn = nil
	}
}

// deadLetter queues an envelope of every failed record of g in the
// dead-letter topic. Records whose envelope cannot be queued (the producer
// is stopping) are returned to be delivered with their error now.
func (p *Producer) deadLetter(g []*pending, res []Result, attempts int) ([]*pending, []Result) {
	var code byte
	var e *Error
	if errors.As(res[0].Err, &e) {
		code = e.Code
	}
	now := time.Now().UTC()
	children := make([]*pending, len(g))
	for i, pd := range g {
		env, err := json.Marshal(DeadLetter{Format: DeadLetterFormat, Topic: pd.rec.Topic, Partition: res[i].Partition,
			Key: pd.rec.Key, Value: pd.rec.Value, Error: res[i].Err.Error(), ErrorCode: code,
			Attempts: attempts, FailedAt: now})
		if err != nil { // cannot happen for these field types
			env = []byte(`{"format":"` + DeadLetterFormat + `"}`)
		}
		children[i] = &pending{rec: Record{Topic: p.cfg.dlq, Key: pd.rec.Key, Value: env},
			size: recordOverhead + len(pd.rec.Key) + len(env), parent: pd, parentRes: res[i]}
	}
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		for i := range res {
			res[i].DeadLetter = &Result{Topic: p.cfg.dlq, Partition: -1, Offset: -1, Err: ErrProducerClosed}
		}
		return g, res
	}
	for _, c := range children {
		c.partition = p.partitionLocked(&c.rec)
		p.enqueueLocked(c)
	}
	p.mu.Unlock()
	return nil, nil
}

// deliver runs the callbacks of completed records, then releases their
// buffer space and counts them for Flush. A completed dead-letter record
// completes its original.
func (p *Producer) deliver(items []*pending, res []Result) {
	for i, pd := range items {
		if pd.parent != nil {
			r := pd.parentRes
			dl := res[i]
			r.DeadLetter = &dl
			items[i], res[i] = pd.parent, r
		}
	}
	for i, pd := range items {
		if pd.cb != nil {
			pd.cb(res[i])
		}
	}
	p.mu.Lock()
	for _, pd := range items {
		p.bufUsed -= pd.size
		p.outstanding--
		for _, w := range p.waiters {
			if pd.seq < w.target {
				w.remaining--
				if w.remaining == 0 {
					close(w.done)
				}
			}
		}
	}
	if p.roomWaiters > 0 {
		close(p.roomCh)
		p.roomCh = make(chan struct{})
	}
	p.mu.Unlock()
}
