package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrConsumerClosed is returned by a Consumer's methods after Close, and
// by a Poll or Run that Close interrupted.
var ErrConsumerClosed = errors.New("ringlog consumer: closed")

// Consumer defaults.
const (
	DefaultFetchMaxBytes  = 1 << 20                // WithFetchMaxBytes
	DefaultIdleMin        = time.Millisecond       // WithIdleBackoff, first sleep
	DefaultIdleMax        = 200 * time.Millisecond // WithIdleBackoff, longest sleep
	DefaultCommitInterval = time.Second            // WithCommitInterval
)

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string // topic name
	Partition int32  // partition index, from 0
}

// StartPosition is where a Consumer starts in a partition for which its
// group has no committed offset.
type StartPosition int

const (
	// StartEarliest starts at offset 0 (the native protocol cannot ask
	// for the log start offset; see Consumer).
	StartEarliest StartPosition = iota
	// StartLatest starts at the partition's end when the consumer first
	// polls it: only records produced after that are consumed. The end is
	// found by probing with FETCH (see Consumer).
	StartLatest
)

// ConsumerOption configures a Consumer.
type ConsumerOption func(*consumerConfig)

type consumerConfig struct {
	start          StartPosition
	maxBytes       int32
	idleMin        time.Duration
	idleMax        time.Duration
	commitInterval time.Duration
	timeout        time.Duration
}

// WithStartAt chooses where to start in a partition without a committed
// offset (default StartEarliest).
func WithStartAt(s StartPosition) ConsumerOption {
	return func(c *consumerConfig) { c.start = s }
}

// WithFetchMaxBytes sets the maxBytes of each FETCH (default 1 MiB); a
// fetch still returns one record larger than that.
func WithFetchMaxBytes(n int32) ConsumerOption {
	return func(c *consumerConfig) { c.maxBytes = max(n, 1) }
}

// WithIdleBackoff sets the sleep after a round of fetches that found
// nothing: min at first (default 1 ms), doubling up to max (default
// 200 ms), back to min when records arrive. The native FETCH answers at
// once, so this bounds both the idle request rate and the latency.
func WithIdleBackoff(min, max time.Duration) ConsumerOption {
	return func(c *consumerConfig) {
		if min <= 0 {
			min = time.Microsecond
		}
		c.idleMin, c.idleMax = min, maxDur(max, min)
	}
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

// WithCommitInterval sets how often Run commits the handled offsets
// (default 1 s); 0 commits after every handled record. Run and Close
// always commit what was handled before they return.
func WithCommitInterval(d time.Duration) ConsumerOption {
	return func(c *consumerConfig) { c.commitInterval = max(d, 0) }
}

// WithConsumerTimeout bounds the dial and each request (default 30 s; the
// dial in NewConsumer uses 10 s at most).
func WithConsumerTimeout(d time.Duration) ConsumerOption {
	return func(c *consumerConfig) { c.timeout = d }
}

// Consumer polls a fixed set of partitions for one group and commits, per
// partition, the offset after the last handled record (at-least-once: a
// record is committed only after it was handled, so one that was not is
// received again by the group's next consumer).
//
// Positions. On the first poll of a partition the consumer reads the
// group's committed offset (FETCH_OFFSET) and resumes there. With nothing
// committed it starts at WithStartAt: StartEarliest is offset 0, which is
// the log start unless retention has deleted the oldest records (the
// native protocol has no way to ask for the log start; the fetch then
// fails with CodeOffsetOutOfRange and Poll returns that error).
// StartLatest finds the partition's end by probing FETCH with maxBytes 1:
// exponentially, then by bisection, using that a fetch at the end returns
// no records and past it CodeOffsetOutOfRange (about 2·log2(end) small
// requests, once per partition).
//
// Polling. Poll fetches the assigned partitions round-robin, one FETCH at
// a time, and returns the first non-empty answer, so successive polls take
// turns. After a round that found nothing it sleeps with a doubling
// backoff (WithIdleBackoff), since the native FETCH does not long-poll. A
// partition whose topic does not exist yet counts as empty. Network
// errors and retriable broker errors are retried (reconnecting) until
// Poll's context ends.
//
// One goroutine at a time polls (Poll or Run); Commit, MarkHandled and
// Close may be called from others. The Consumer starts no goroutines of
// its own besides its Conn's reader.
type Consumer struct {
	addr  string
	group string
	cfg   consumerConfig
	parts []*partState
	byTP  map[TopicPartition]*partState
	next  int           // round-robin start of the next poll
	idle  time.Duration // current idle backoff, 0 after data

	busy   chan struct{} // held by Poll and Run (capacity 1)
	ctx    context.Context
	cancel context.CancelFunc // interrupts Poll, by Close

	mu     sync.Mutex // guards the fields below and partState's handled/committed
	conn   *Conn
	closed bool // Close called
	done   bool // Close finished: no more dials
}

type partState struct {
	tp        TopicPartition
	resolved  bool  // pos is known
	pos       int64 // next offset to fetch (poller only)
	handled   int64 // offset after the last handled record, -1: none
	committed int64 // last committed offset, -1: none by us
}

// NewConsumer connects to the native listener at addr to consume the
// given partitions for group.
func NewConsumer(addr, group string, assignments []TopicPartition, opts ...ConsumerOption) (*Consumer, error) {
	cfg := consumerConfig{maxBytes: DefaultFetchMaxBytes, idleMin: DefaultIdleMin, idleMax: DefaultIdleMax,
		commitInterval: DefaultCommitInterval, timeout: DefaultRequestTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if group == "" {
		return nil, errors.New("ringlog consumer: empty group")
	}
	if len(assignments) == 0 {
		return nil, errors.New("ringlog consumer: no partitions assigned")
	}
	c := &Consumer{addr: addr, group: group, cfg: cfg, byTP: map[TopicPartition]*partState{}, busy: make(chan struct{}, 1)}
	for _, tp := range assignments {
		if _, dup := c.byTP[tp]; dup {
			continue
		}
		ps := &partState{tp: tp, handled: -1, committed: -1}
		c.parts = append(c.parts, ps)
		c.byTP[tp] = ps
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(cfg.timeout, DefaultDialTimeout))
	defer cancel()
	conn, err := Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// Assignments returns the consumer's partitions.
func (c *Consumer) Assignments() []TopicPartition {
	out := make([]TopicPartition, len(c.parts))
	for i, ps := range c.parts {
		out[i] = ps.tp
	}
	return out
}

// Position returns the offset the consumer fetches next in tp. Before the
// first poll of tp it resolves it first (the group's committed offset, or
// the start position), as the first poll would; calling it for every
// partition pins StartLatest to the ends at that moment. It waits for a
// Poll or Run in progress on another goroutine.
func (c *Consumer) Position(ctx context.Context, tp TopicPartition) (int64, error) {
	ps := c.byTP[tp]
	if ps == nil {
		return -1, fmt.Errorf("ringlog consumer: %s/%d is not assigned", tp.Topic, tp.Partition)
	}
	if err := c.acquire(ctx); err != nil {
		return -1, err
	}
	defer c.release()
	if !ps.resolved {
		conn, err := c.getConn(ctx)
		if err != nil {
			return -1, err
		}
		if err := c.resolve(ctx, conn, ps); err != nil {
			return -1, c.check(ctx, conn, err)
		}
	}
	return ps.pos, nil
}

// acquire takes the poller role, waiting for another Poll or Run.
func (c *Consumer) acquire(ctx context.Context) error {
	select {
	case c.busy <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return ErrConsumerClosed
	}
	if c.ctx.Err() != nil {
		<-c.busy
		return ErrConsumerClosed
	}
	return nil
}

func (c *Consumer) release() { <-c.busy }

// Poll returns the next records of one assigned partition, in offset
// order, waiting (without busy polling) until there are some or ctx ends.
// It advances the fetch position but commits nothing: mark what was
// handled with MarkHandled, then Commit, or use Run.
func (c *Consumer) Poll(ctx context.Context) ([]Record, error) {
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	defer c.release()
	return c.poll(ctx)
}

func (c *Consumer) poll(ctx context.Context) ([]Record, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	var lastErr error
	for {
		recs, err := c.pollRound(ctx)
		if len(recs) > 0 {
			c.idle = 0
			return recs, nil
		}
		if err != nil && ctx.Err() == nil {
			if !transient(err) {
				return nil, err
			}
			lastErr = err
		}
		if c.idle == 0 {
			c.idle = c.cfg.idleMin
		} else {
			c.idle = min(c.idle*2, c.cfg.idleMax)
		}
		t := time.NewTimer(c.idle)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			if c.ctx.Err() != nil {
				return nil, ErrConsumerClosed
			}
			if lastErr != nil {
				return nil, fmt.Errorf("%w (last error: %w)", ctx.Err(), lastErr)
			}
			return nil, ctx.Err()
		}
	}
}

// transient reports whether Poll retries err: network errors and timeouts,
// and retriable broker codes.
func transient(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Retriable()
	}
	return !errors.Is(err, ErrCorruptRecord) && !errors.Is(err, ErrConsumerClosed)
}

// pollRound fetches each partition once, from where the last poll
// stopped, and returns the first records found. A transient error on one
// partition does not stop the round; it is returned if nothing is found.
func (c *Consumer) pollRound(ctx context.Context) ([]Record, error) {
	var lastErr error
	n := len(c.parts)
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		idx := (c.next + i) % n
		ps := c.parts[idx]
		recs, err := c.fetchPart(ctx, ps)
		if err != nil {
			if !transient(err) {
				return nil, fmt.Errorf("%s/%d: %w", ps.tp.Topic, ps.tp.Partition, err)
			}
			lastErr = err
			continue
		}
		if len(recs) > 0 {
			c.next = (idx + 1) % n
			ps.pos = recs[len(recs)-1].Offset + 1
			return recs, nil
		}
	}
	return nil, lastErr
}

// fetchPart resolves the partition's position if needed, then fetches.
func (c *Consumer) fetchPart(ctx context.Context, ps *partState) ([]Record, error) {
	conn, err := c.getConn(ctx)
	if err != nil {
		return nil, err
	}
	if !ps.resolved {
		if err := c.resolve(ctx, conn, ps); err != nil {
			return nil, c.check(ctx, conn, err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	recs, err := conn.Fetch(rctx, ps.tp.Topic, ps.tp.Partition, ps.pos, c.cfg.maxBytes)
	var e *Error
	if errors.As(err, &e) && e.Code == CodeUnknownTopic {
		return nil, nil // not created yet: nothing to read
	}
	return recs, c.check(ctx, conn, err)
}

// check drops the connection after a network error or a request timeout
// (not when ctx itself ended: the connection stays in sync), so the next
// request redials.
func (c *Consumer) check(ctx context.Context, conn *Conn, err error) error {
	var e *Error
	if err != nil && ctx.Err() == nil && !errors.As(err, &e) && !errors.Is(err, ErrCorruptRecord) {
		c.mu.Lock()
		if c.conn == conn {
			conn.Close()
			c.conn = nil
		}
		c.mu.Unlock()
	}
	return err
}

func (c *Consumer) getConn(ctx context.Context) (*Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		select {
		case <-c.conn.closed:
			c.conn = nil
		default:
			return c.conn, nil
		}
	}
	if c.done {
		return nil, ErrConsumerClosed
	}
	dctx, cancel := context.WithTimeout(ctx, min(c.cfg.timeout, DefaultDialTimeout))
	defer cancel()
	conn, err := Dial(dctx, c.addr)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	return conn, nil
}

// resolve sets the partition's first position: the committed offset, or
// the start position.
func (c *Consumer) resolve(ctx context.Context, conn *Conn, ps *partState) error {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	off, err := conn.FetchOffset(rctx, c.group, ps.tp.Topic, ps.tp.Partition)
	if err != nil {
		return err
	}
	if off < 0 {
		if c.cfg.start == StartLatest {
			if off, err = c.findEnd(rctx, conn, ps.tp); err != nil {
				return err
			}
		} else {
			off = 0
		}
	} else {
		c.mu.Lock()
		ps.committed = max(ps.committed, off)
		c.mu.Unlock()
	}
	ps.pos, ps.resolved = off, true
	return nil
}

// findEnd finds a partition's end offset (the next offset to be written)
// with FETCH alone: a fetch below the end returns a record, at the end
// none, past it CodeOffsetOutOfRange. A missing topic's end is 0.
func (c *Consumer) findEnd(ctx context.Context, conn *Conn, tp TopicPartition) (int64, error) {
	// probe: 1 below the end, 0 at the end, 2 past it.
	probe := func(off int64) (int, error) {
		recs, err := conn.Fetch(ctx, tp.Topic, tp.Partition, off, 1)
		var e *Error
		switch {
		case errors.As(err, &e) && e.Code == CodeOffsetOutOfRange:
			return 2, nil
		case errors.As(err, &e) && e.Code == CodeUnknownTopic:
			return 0, nil
		case err != nil:
			return 0, err
		case len(recs) == 0:
			return 0, nil
		}
		return 1, nil
	}
	lo := int64(0) // lo < end, once probed
	switch r, err := probe(0); {
	case err != nil:
		return 0, err
	case r == 0:
		return 0, nil
	case r == 2:
		return 0, &Error{Code: CodeOffsetOutOfRange, Op: "find end (offset 0 is below the log start)"}
	}
	hi := int64(1) // grows until past the end
	for {
		r, err := probe(hi)
		if err != nil {
			return 0, err
		}
		if r == 0 {
			return hi, nil
		}
		if r == 2 {
			break
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		r, err := probe(mid)
		if err != nil {
			return 0, err
		}
		switch r {
		case 0:
			return mid, nil
		case 1:
			lo = mid
		default:
			hi = mid
		}
	}
	return lo + 1, nil
}

// MarkHandled records that recs were handled: Commit then commits, for
// each of their partitions, the offset after the highest one. Records of
// partitions not assigned to the consumer are ignored.
func (c *Consumer) MarkHandled(recs ...Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		if ps := c.byTP[TopicPartition{r.Topic, r.Partition}]; ps != nil && r.Offset+1 > ps.handled {
			ps.handled = r.Offset + 1
		}
	}
}

// Commit commits, for every partition with handled records not yet
// committed, the offset after the last handled record (COMMIT_OFFSET, the
// group's offsets as on the Kafka side).
func (c *Consumer) Commit(ctx context.Context) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrConsumerClosed
	}
	return c.commit(ctx)
}

func (c *Consumer) commit(ctx context.Context) error {
	type todo struct {
		ps  *partState
		off int64
	}
	var list []todo
	c.mu.Lock()
	for _, ps := range c.parts {
		if ps.handled > ps.committed {
			list = append(list, todo{ps, ps.handled})
		}
	}
	c.mu.Unlock()
	if len(list) == 0 {
		return nil
	}
	conn, err := c.getConn(ctx)
	if err != nil {
		return fmt.Errorf("ringlog consumer: commit: %w", err)
	}
	var errs []error
	for _, t := range list {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
		err := c.check(ctx, conn, conn.CommitOffset(rctx, c.group, t.ps.tp.Topic, t.ps.tp.Partition, t.off))
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%d: %w", t.ps.tp.Topic, t.ps.tp.Partition, err))
			continue
		}
		c.mu.Lock()
		t.ps.committed = max(t.ps.committed, t.off)
		c.mu.Unlock()
	}
	return errors.Join(errs...)
}

// HandlerError is Run's error when the handler failed: Record was not
// committed, and the consumer's position in its partition is back at it.
type HandlerError struct {
	Record Record // the record the handler failed on
	Err    error  // the handler's error
}

// Error names the record and the handler's error.
func (e *HandlerError) Error() string {
	return fmt.Sprintf("ringlog consumer: handler failed on %s/%d@%d: %v",
		e.Record.Topic, e.Record.Partition, e.Record.Offset, e.Err)
}

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }

// Run polls and calls handler for each record in order, and commits a
// record's partition past it only after handler returned nil for it
// (commit-after-handle, at-least-once), every WithCommitInterval.
//
// When handler fails, Run commits what was handled before, moves the
// partition's position back to the failed record (a later Poll or Run
// receives it again, as does the group's next consumer) and returns a
// *HandlerError. When ctx ends it commits what was handled and returns
// ctx.Err(); when Close interrupts it, ErrConsumerClosed (Close commits).
// A record whose handler is running when ctx ends is finished first.
func (c *Consumer) Run(ctx context.Context, handler func(context.Context, Record) error) error {
	if err := c.acquire(ctx); err != nil {
		return err
	}
	defer c.release()
	lastCommit := time.Now()
	finish := func(err error) error {
		if c.ctx.Err() != nil {
			return ErrConsumerClosed // Close commits
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.timeout)
		defer cancel()
		if cerr := c.commit(cctx); cerr != nil {
			return errors.Join(err, cerr)
		}
		return err
	}
	for {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if c.cfg.commitInterval > 0 && c.uncommitted() {
			pctx, cancel = context.WithDeadline(ctx, lastCommit.Add(c.cfg.commitInterval))
		}
		recs, err := c.poll(pctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil && c.ctx.Err() == nil && pctx.Err() != nil {
				// Only the commit deadline passed.
				if err := c.periodicCommit(ctx); err != nil {
					return finish(err)
				}
				lastCommit = time.Now()
				continue
			}
			if ctx.Err() != nil {
				return finish(ctx.Err())
			}
			return finish(err)
		}
		for _, r := range recs {
			if err := handler(ctx, r); err != nil {
				c.byTP[TopicPartition{r.Topic, r.Partition}].pos = r.Offset
				return finish(&HandlerError{Record: r, Err: err})
			}
			c.MarkHandled(r)
			if ctx.Err() != nil || c.ctx.Err() != nil {
				// Unhandled records of this poll are fetched again later.
				c.byTP[TopicPartition{r.Topic, r.Partition}].pos = r.Offset + 1
				if ctx.Err() != nil {
					return finish(ctx.Err())
				}
				return finish(ErrConsumerClosed)
			}
			if c.cfg.commitInterval == 0 || time.Since(lastCommit) >= c.cfg.commitInterval {
				if err := c.periodicCommit(ctx); err != nil {
					return finish(err)
				}
				lastCommit = time.Now()
			}
		}
	}
}

// periodicCommit is Run's commit: a transient failure (network, timeout,
// a retriable code) is left for the next commit, which still covers the
// same records.
func (c *Consumer) periodicCommit(ctx context.Context) error {
	err := c.commit(ctx)
	if err != nil && transient(err) {
		return nil
	}
	return err
}

func (c *Consumer) uncommitted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ps := range c.parts {
		if ps.handled > ps.committed {
			return true
		}
	}
	return false
}

// Close interrupts a Poll or Run in progress (waiting for a running
// handler to return), commits what was handled and closes the connection.
// It returns the commit's error, or ctx.Err() when ctx ends first.
func (c *Consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	var err error
	select {
	case c.busy <- struct{}{}:
		err = c.commit(ctx)
	case <-ctx.Done():
		err = ctx.Err()
	}
	c.mu.Lock()
	c.done = true
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	c.mu.Unlock()
	return err
}
