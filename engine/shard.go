package engine

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// AppendRequest is one produce to one partition, handed to the partition's
// shard. Batches must have passed batch.Validate and stay untouched until
// Done is called. Done runs while the shard's work is held (on the shard
// goroutine, or, for an Inline request, on the caller's goroutine before
// Append returns) and must not block.
type AppendRequest struct {
	Partition *Partition
	Batches   [][]byte
	Headers   []batch.Header // parsed headers of Batches
	// Acks is the producer's acks: -1 (all) asks for fdatasync unless
	// write caching is on; 0 and 1 are acknowledged from the page cache.
	Acks int16
	// Bytes is what the request counts against the shard's queue bound.
	Bytes int
	// Timeout bounds how long an acks=all produce of a replicated
	// partition waits for the high watermark (the produce's timeout_ms; 0:
	// DefaultAckTimeout).
	Timeout time.Duration
	// Replica marks a follower's append of batches fetched from the
	// leader: offsets and epochs are kept (wal AppendReplica), always
	// synced, no idempotence check (the producer state follows the
	// batches).
	Replica bool
	// Internal marks a coordinator's own write (offsets, transaction
	// state): a producer id on it (a transactional offset commit) has no
	// sequence to check, as Kafka's coordinator writes carry none.
	Internal bool
	// Marker, when set, makes the request a transaction marker: the
	// shard writes the control batch (Batches and Headers are unused).
	Marker *TxnMarker
	// Inline lets Append write the request on the caller's goroutine
	// when the shard is idle (the direct-write fast path): Done may then
	// run before Append returns, so the caller must be ready for that and
	// must not hold a lock that a Done callback of another request could
	// take. Only requests that need no fdatasync go inline, so the caller
	// never waits for the disk, only for a write into the page cache.
	Inline bool
	Done   func(AppendResult)
}

// AppendResult is the outcome of an AppendRequest.
type AppendResult struct {
	BaseOffset     int64
	LogAppendTime  int64 // -1 for CreateTime topics
	LogStartOffset int64
	Err            error
}

// Shard is a writer goroutine: it owns a set of partitions' logs and
// producer state, drains its queue of appends, stages all of them in one
// wal.Batch and submits it to its I/O backend in one go (group commit:
// every append of a drain shares one submission and, per partition, one
// fdatasync), then completes them. It also runs its partitions'
// housekeeping (retention, flush.ms) and control functions (Do, Call).
//
// Whoever does the shard's work holds work: the goroutine for each pass,
// or an appender on the direct-write fast path (Append of an Inline
// request that finds the shard idle: nothing queued, no pass running),
// which writes its one request itself instead of waking the goroutine,
// saving two goroutine handoffs per produce. Everything the goroutine owns
// belongs to the holder of work, so the fast path keeps one writer per
// log and the order of appends.
type Shard struct {
	id      int
	eng     *Engine
	backend ring.Backend

	work sync.Mutex // held by the shard goroutine's pass or an inline append

	mu          sync.Mutex // guards queue, queuedBytes, roomWaiters, ctl, stopping
	queue       []*AppendRequest
	queuedBytes int64
	passBytes   int64 // a pass's bound (Config.PassBytes)
	limit       int64
	roomWaiters []func()
	ctl         []func()
	stopping    bool

	wake chan struct{}
	done chan struct{}

	// Owned by the shard goroutine.
	parts   map[*Partition]struct{}
	batch   wal.Batch
	staged  []stagedAppend
	touched map[*Partition]struct{}
	spare   []*AppendRequest
	one     [1]*AppendRequest // an inline append's request
	// A pass's requests split by whether their partition syncs in it
	// (drain), and the partitions that do.
	unsynced, synced []*AppendRequest
	syncing          map[*Partition]struct{}
	lastKeep         time.Time
	stopErr          error
}

type stagedAppend struct {
	req    *AppendRequest
	ticket wal.Ticket
	res    AppendResult
	staged bool // false: answered without a write (dup, error)
	// syncOnly: a retried duplicate under acks=all, answered with the
	// offsets it got the first time once an fdatasync of its log made
	// them durable (ticket).
	syncOnly bool
	// last is the request's last offset (staged, or the retried batches'):
	// what an acks=all produce of a replicated partition waits for.
	last int64
}

func newShard(e *Engine, id int) (*Shard, error) {
	s := &Shard{
		id: id, eng: e, limit: e.cfg.ShardQueueBytes, passBytes: e.cfg.PassBytes,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		parts: map[*Partition]struct{}{}, touched: map[*Partition]struct{}{},
		syncing: map[*Partition]struct{}{},
	}
	ready := make(chan error, 1)
	go s.run(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return s, nil
}

// ID is the shard's index.
func (s *Shard) ID() int { return s.id }

// QueuedBytes is what is queued now.
func (s *Shard) QueuedBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queuedBytes
}

// HasRoom reports whether the shard accepts more appends now.
func (s *Shard) HasRoom() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queuedBytes < s.limit
}

// OnRoom registers fn to be called once, from the shard goroutine, when the
// queue drains below its bound (immediately if it already is).
func (s *Shard) OnRoom(fn func()) {
	s.mu.Lock()
	if s.queuedBytes < s.limit || s.stopping {
		s.mu.Unlock()
		fn()
		return
	}
	s.roomWaiters = append(s.roomWaiters, fn)
	s.mu.Unlock()
}

// Append queues req. Admission is the caller's job: it checks HasRoom
// first and, when the shard is full, stops reading from its connection and
// waits for OnRoom. A request admitted is always queued, so the bound can
// be overshot by the requests admitted at the same moment (one per event
// loop at most).
//
// An Inline request that needs no fdatasync is written at once on the
// caller's goroutine when nothing is queued or running on the shard (see
// Shard); otherwise it is queued like any other.
//
// A client's append to an internal topic (one not marked Internal,
// Replica or a marker) is refused INVALID_TOPIC_EXCEPTION, whatever the
// ACLs allowed.
func (s *Shard) Append(req *AppendRequest) {
	if req.Partition.topic.Internal && !req.Internal && !req.Replica && req.Marker == nil {
		// Only the broker writes its internal topics: a client's produce
		// to __consumer_offsets could forge any group's commits.
		req.Done(AppendResult{Err: fmt.Errorf("%w: %s is an internal topic, written by the broker only", kerr.InvalidTopicException, req.Partition.topic.Name),
			LogAppendTime: -1, LogStartOffset: -1})
		return
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		req.Done(AppendResult{Err: fmt.Errorf("%w: broker is shutting down", kerr.NotLeaderForPartition), LogAppendTime: -1, LogStartOffset: -1})
		return
	}
	// Nothing queued and no pass running: no earlier append or control
	// function can be ahead of req, so writing it now keeps their order.
	// (TryLock under mu never waits, so the order work → mu of a pass
	// cannot deadlock with it.)
	if req.Inline && len(s.queue) == 0 && len(s.ctl) == 0 && s.mayInline(req) && s.work.TryLock() {
		s.mu.Unlock()
		s.one[0] = req
		s.write(s.one[:])
		s.one[0] = nil
		s.eng.stats.InlineAppends.Add(1)
		s.work.Unlock()
		return
	}
	s.queue = append(s.queue, req)
	s.queuedBytes += int64(req.Bytes)
	s.mu.Unlock()
	s.signal()
}

// Do runs fn on the shard goroutine, asynchronously, in the order of Do
// and Call. Once the shard is stopping, fn is dropped. Called from the
// shard goroutine itself, Do does not run fn before returning: fn runs on
// the goroutine's next pass.
func (s *Shard) Do(fn func()) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	s.ctl = append(s.ctl, fn)
	s.mu.Unlock()
	s.signal()
}

// Call runs fn on the shard goroutine and returns its error (an error
// without running fn once the shard is stopping).
//
// Call must not be called from the shard goroutine: not from a function
// run by Do or Call, an AppendRequest's Done, an OnRoom callback, or
// anything they call synchronously. fn would wait in the queue behind the
// function that is waiting for it, and both would wait forever; code
// already on the shard goroutine calls fn directly instead. For the same
// reason, the caller of Call must not hold a lock that the shard goroutine
// may take meanwhile (in a queued function or a Done callback).
func (s *Shard) Call(fn func() error) error {
	errc := make(chan error, 1)
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return errors.New("engine: shard stopped")
	}
	s.ctl = append(s.ctl, func() { errc <- fn() })
	s.mu.Unlock()
	s.signal()
	return <-errc
}

// mayInline reports whether req may take the direct-write fast path: a
// small produce whose acknowledgement waits for no fdatasync (and no
// replica). A large one is handed to the shard goroutine even when the
// shard is idle: its page-cache copy then overlaps the event loop's
// reading of the next request instead of holding the loop, and the
// handoff the fast path saves is small next to that copy.
func (s *Shard) mayInline(req *AppendRequest) bool {
	return req.Bytes <= InlineMaxBytes && req.Marker == nil && !req.Replica && !s.syncs(req, req.Partition.topic.Config())
}

// InlineMaxBytes is the largest append the direct-write fast path takes.
// A caller sending many appends for one request (a Kafka produce to many
// partitions) should set Inline only when the whole request is this small.
// 1 MiB is Kafka's default max.request.size, so a client's usual requests
// qualify. It was 64 KiB, which sent larger requests to the shard
// goroutines so that their page-cache copies would run on other cores;
// measured on 2 vCPUs, that copy cost several times more per byte on the
// shard goroutine than on the goroutine that had just read the request
// (copy_folio_from_iter_atomic: 65% of the broker's CPU at 672 MB/s,
// against 16% at 574 MB/s inline), and raising the limit cut the broker's
// CPU at max rate by about a quarter.
const InlineMaxBytes = 1 << 20

func (s *Shard) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// adopt makes p one of the shard's partitions (p's log must be open).
func (s *Shard) adopt(p *Partition) {
	s.Do(func() { s.parts[p] = struct{}{} })
}

// disown forgets p (shard goroutine only).
func (s *Shard) disown(p *Partition) { delete(s.parts, p) }

// housekeepingTick is how often a shard checks flush.ms deadlines.
const housekeepingTick = 100 * time.Millisecond

func (s *Shard) run(ready chan<- error) {
	// The shard's ring is a plain one (no SingleIssuer), so any thread may
	// submit to it: the goroutine stays unlocked, because waking a
	// goroutine locked to its thread costs the scheduler a thread
	// handoff (two futex calls) on every request at low rates.
	be, fallback, err := ring.New(ring.Options{Kind: s.eng.cfg.Backend})
	if err != nil {
		ready <- fmt.Errorf("engine: shard %d: I/O backend: %w", s.id, err)
		close(s.done)
		return
	}
	if fallback != "" && s.id == 0 {
		s.eng.logger.Warn("io_uring unavailable; syncs run one by one", "reason", fallback)
	}
	if wrap := s.eng.cfg.WrapBackend; wrap != nil {
		be = wrap(s.id, be)
	}
	s.backend = be
	ready <- nil
	tick := time.NewTicker(housekeepingTick)
	defer tick.Stop()
	s.lastKeep = time.Now()
	for {
		housekeep := false
		select {
		case <-s.wake:
		case <-tick.C:
			housekeep = true
		}
		s.work.Lock()
		if housekeep {
			s.housekeeping()
		}
		s.mu.Lock()
		ctl := s.ctl
		s.ctl = nil
		stopping := s.stopping
		s.mu.Unlock()
		for _, fn := range ctl {
			fn()
		}
		s.drain()
		if stopping {
			s.mu.Lock()
			left := len(s.queue) + len(s.ctl)
			s.mu.Unlock()
			if left == 0 {
				s.shutdown()
				// work stays held: nothing may touch the closed logs.
				return
			}
		}
		s.work.Unlock()
	}
}

// drain writes everything queued, pass by pass: each pass takes requests
// from the head of the queue up to passBytes (at least one), so a deep
// queue is answered as it is written rather than all at the end, and the
// first request of a pass waits for at most passBytes of writes and their
// syncs (the bound on the group commit's latency). Within a pass, the
// partitions that need no fdatasync are written and answered first, then
// those that sync: an acks=1 produce never waits behind another
// partition's fdatasync, while each partition's requests stay in one
// submission, in order.
//
// It writes only what was queued when it started: requests queued since
// signalled the goroutine, which runs its control functions and
// housekeeping before it drains again, so a steady stream of produces
// cannot starve them.
func (s *Shard) drain() {
	s.mu.Lock()
	left := len(s.queue)
	s.mu.Unlock()
	for left > 0 {
		s.mu.Lock()
		n, bytes := 0, int64(0)
		for n < left && (n == 0 || bytes+int64(s.queue[n].Bytes) <= s.passBytes) {
			bytes += int64(s.queue[n].Bytes)
			n++
		}
		queued := s.queue
		reqs := queued[:n]
		s.queue = append(s.spare[:0], queued[n:]...)
		clear(queued[n:]) // moved: the array is the next spare
		s.mu.Unlock()
		left -= n
		released := s.writePass(reqs)
		clear(reqs)
		s.spare = reqs[:0]

		s.mu.Lock()
		s.queuedBytes -= released
		var waiters []func()
		if s.queuedBytes < s.limit {
			waiters = s.roomWaiters
			s.roomWaiters = nil
		}
		s.mu.Unlock()
		for _, fn := range waiters {
			fn()
		}
	}
}

// writePass writes one pass: the requests of partitions that sync in it
// after those of partitions that do not (see drain). It returns the bytes
// the requests counted against the queue.
func (s *Shard) writePass(reqs []*AppendRequest) int64 {
	for _, req := range reqs {
		if s.mustSync(req) {
			s.syncing[req.Partition] = struct{}{}
		}
	}
	if len(s.syncing) == 0 {
		return s.write(reqs)
	}
	for _, req := range reqs {
		if _, ok := s.syncing[req.Partition]; ok {
			s.synced = append(s.synced, req)
		} else {
			s.unsynced = append(s.unsynced, req)
		}
	}
	clear(s.syncing)
	var released int64
	if len(s.unsynced) > 0 {
		released += s.write(s.unsynced)
	}
	released += s.write(s.synced)
	clear(s.unsynced)
	clear(s.synced)
	s.unsynced, s.synced = s.unsynced[:0], s.synced[:0]
	return released
}

// mustSync reports whether req's acknowledgement waits for an fdatasync:
// a replica append, or a produce or marker under acks=all (unless write
// caching is on).
func (s *Shard) mustSync(req *AppendRequest) bool {
	return req.Replica || s.syncs(req, req.Partition.topic.Config())
}

// write stages reqs, submits them to the backend in one go, completes
// each one and wakes the fetches of the partitions it appended to; it
// returns the bytes the requests counted against the queue. The caller
// holds work.
func (s *Shard) write(reqs []*AppendRequest) (released int64) {
	for _, req := range reqs {
		s.stage(req)
		released += int64(req.Bytes)
	}
	start := time.Now()
	syncs := false
	if s.batch.Len() > 0 {
		if err := s.batch.Submit(s.backend); err != nil {
			s.eng.logger.Error("I/O submission failed", "shard", s.id, "err", err)
		}
		for i := range s.staged {
			if s.staged[i].staged && s.staged[i].ticket.Synced() {
				syncs = true
				break
			}
		}
	}
	st := &s.eng.stats
	st.Submissions.Add(1)
	if syncs {
		d := time.Since(start)
		st.Syncs.Add(1)
		st.SyncNanos.Add(int64(d))
		if obs := s.eng.cfg.ObserveSync; obs != nil {
			obs(d)
		}
	}
	for i := range s.staged {
		sa := &s.staged[i]
		p := sa.req.Partition
		if sa.staged || sa.syncOnly {
			if err := sa.ticket.Err(); err != nil {
				sa.res.Err = fmt.Errorf("%w: %s: %w", kerr.KafkaStorageError, p, err)
				p.setOffline(err)
			} else if sa.staged {
				res := sa.ticket.Results()
				sa.res.BaseOffset = res[0].BaseOffset
				sa.res.LogAppendTime = res[0].AppendTime
				var n int64
				for _, b := range sa.req.Batches {
					n += int64(len(b))
				}
				sa.last = res[len(res)-1].LastOffset
				p.BytesIn.Add(n)
				p.RecordsIn.Add(res[len(res)-1].LastOffset - res[0].BaseOffset + 1)
				st.BytesWritten.Add(n)
				s.touched[p] = struct{}{}
			}
		}
		if p.log != nil {
			sa.res.LogStartOffset = p.log.StartOffset()
		}
		if p.rep != nil && sa.req.Acks == -1 && !sa.req.Replica && sa.res.Err == nil {
			p.parkAck(sa.req, sa.res, sa.last)
			continue
		}
		sa.req.Done(sa.res)
	}
	for p := range s.touched {
		if p.rep != nil {
			// A leader whose ISR is itself alone commits at once.
			p.rep.mu.Lock()
			done := p.advanceHWLocked()
			p.rep.mu.Unlock()
			p.completeAcks(done)
		}
		p.notify()
		delete(s.touched, p)
	}
	s.batch.Reset()
	clear(s.staged)
	s.staged = s.staged[:0]
	return released
}

// stage checks one request (partition state, idempotence) and stages its
// batches, or records its answer.
func (s *Shard) stage(req *AppendRequest) {
	s.staged = append(s.staged, stagedAppend{req: req, res: AppendResult{LogAppendTime: -1, LogStartOffset: -1}})
	sa := &s.staged[len(s.staged)-1]
	p := req.Partition
	if req.Replica {
		s.stageReplica(sa)
		return
	}
	l, err := p.Log()
	if err != nil {
		sa.res.Err = err
		return
	}
	if p.rep != nil {
		if h := s.eng.clusterHooks(); h != nil && h.MayLead != nil && !h.MayLead() {
			sa.res.Err = fmt.Errorf("%w: %s: this broker's leadership lease has lapsed (no heartbeat reached the controller for a session)", kerr.NotLeaderForPartition, p)
			return
		}
	}
	if req.Marker != nil {
		s.stageMarker(sa, l)
		return
	}
	cfg := p.topic.Config()
	if req.Acks == -1 {
		if err := p.checkISRForAcks(); err != nil {
			sa.res.Err = err
			return
		}
	}
	if p.rep != nil {
		// Cluster mode: a transactional batch needs its producer's
		// verification, still standing now that it is staged after
		// any marker queued before it (txnverify.go).
		for i := range req.Headers {
			if h := &req.Headers[i]; h.Transactional() {
				if err := p.checkTxnGuard(h.ProducerID, h.ProducerEpoch); err != nil {
					sa.res.Err = err
					return
				}
			}
		}
	}
	// Idempotence: every batch of the request must pass. The producer
	// state is updated only once the whole request is staged, so a batch
	// that follows a new batch of the same producer and epoch in this
	// request must continue that batch's sequence (as Kafka checks each
	// batch against the state its predecessors left).
	dups := 0
	var firstDup, lastDup *seqEntry
	var prev *batch.Header
	for i := range req.Headers {
		h := &req.Headers[i]
		if !h.Idempotent() || req.Internal {
			continue
		}
		var c seqCheck
		if prev != nil && dups == 0 && prev.ProducerID == h.ProducerID && prev.ProducerEpoch == h.ProducerEpoch {
			if want := nextSeq(prev.LastSequence()); h.BaseSequence != want {
				c.err = fmt.Errorf("%w: producer %d epoch %d sent sequence %d, expected %d", kerr.OutOfOrderSequenceNumber, h.ProducerID, h.ProducerEpoch, h.BaseSequence, want)
			}
		} else {
			c = p.checkSequence(h)
		}
		prev = h
		if c.err != nil {
			sa.res.Err = c.err
			return
		}
		if c.dup != nil {
			if dups == 0 {
				firstDup = c.dup
			}
			lastDup = c.dup
			dups++
		}
	}
	if dups > 0 {
		if dups != len(req.Headers) {
			sa.res.Err = fmt.Errorf("%w: a request mixes retried and new batches", kerr.OutOfOrderSequenceNumber)
			return
		}
		// A retry: acknowledge it with the offsets it got the first time.
		sa.res.BaseOffset = firstDup.FirstOffset
		sa.res.LogAppendTime = firstDup.Timestamp
		sa.last = lastDup.LastOffset
		if s.syncs(req, cfg) {
			// The first time may not have been synced (the ack was
			// lost because the broker died before the sync; the
			// bytes survived in the page cache): sync before this
			// acknowledgement promises them.
			tk, err := s.batch.Sync(l)
			if err != nil {
				sa.res.Err = fmt.Errorf("%w: %s: %w", kerr.KafkaStorageError, p, err)
				return
			}
			sa.ticket, sa.syncOnly = tk, true
		}
		return
	}
	sync := s.syncs(req, cfg)
	tk, err := s.batch.Append(l, req.Batches, sync)
	if err != nil {
		sa.res.Err = fmt.Errorf("%w: %s: %w", kerr.KafkaStorageError, p, err)
		if l.Err() != nil {
			p.setOffline(err) // the log refuses appends until reopened
		}
		return
	}
	sa.ticket = tk
	sa.staged = true
	res := tk.Results()
	for i := range req.Headers {
		h := &req.Headers[i]
		if h.Idempotent() && !req.Internal {
			p.recordSequence(h, res[i].BaseOffset, res[i].LastOffset, res[i].AppendTime)
		}
		if h.Transactional() {
			p.beginTxn(h.ProducerID, res[i].BaseOffset)
		}
	}
}

// syncs says whether req's append must be fdatasynced before it is
// acknowledged: acks=all, or any append of a replicated partition's
// leader (CLUSTER.md b: the high watermark counts its own log end as
// durable), unless write caching is on.
func (s *Shard) syncs(req *AppendRequest, cfg *TopicConfig) bool {
	return (req.Acks == -1 || req.Partition.rep != nil) && !cfg.WriteCaching() && !s.eng.cfg.WriteCaching
}

// stageReplica stages a follower's append of the leader's batches, synced,
// and follows their idempotent producers (so that this replica, once
// leader, deduplicates retries as the old leader would have).
func (s *Shard) stageReplica(sa *stagedAppend) {
	req := sa.req
	p := req.Partition
	l, err := p.ReplicaLog()
	if err != nil {
		sa.res.Err = err
		return
	}
	if p.rep != nil && Role(p.role.Load()) == RoleLeader {
		sa.res.Err = fmt.Errorf("%w: %s: this broker leads it now", kerr.NotLeaderForPartition, p)
		return
	}
	tk, err := s.batch.AppendReplica(l, req.Batches, true)
	if err != nil {
		sa.res.Err = fmt.Errorf("%s: replica append: %w", p, err)
		if l.Err() != nil {
			p.setOffline(err)
		}
		return
	}
	sa.ticket = tk
	sa.staged = true
	for _, b := range req.Batches {
		h, err := batch.ParseHeader(b)
		if err != nil || !h.Idempotent() {
			continue
		}
		// Follow the transactions too, so that this replica knows the
		// open ones (its last stable offset, the aborted index) when it
		// becomes leader.
		if h.Control() {
			typ, ce, err := batch.ParseControl(b, &h)
			if err != nil {
				p.topic.eng.logger.Warn("skipping an unreadable replicated control batch", "partition", p.String(), "offset", h.BaseOffset, "err", err)
				continue
			}
			if err := p.endTxn(h.ProducerID, h.ProducerEpoch, typ == batch.ControlCommit, ce, h.BaseOffset); err != nil {
				p.topic.eng.logger.Error("aborted-transaction index", "partition", p.String(), "err", err)
			}
			continue
		}
		if h.Transactional() {
			p.beginTxn(h.ProducerID, h.BaseOffset)
		}
		if st := p.producers[h.ProducerID]; st != nil && h.ProducerEpoch < st.Epoch {
			continue
		}
		ts := int64(-1)
		if h.LogAppendTime() {
			ts = h.MaxTimestamp
		}
		p.recordSequence(&h, h.BaseOffset, h.LastOffset(), ts)
	}
}

// housekeeping enforces retention and flush.ms for the shard's partitions.
func (s *Shard) housekeeping() {
	now := s.eng.now()
	retention := now.Sub(s.lastKeep) >= s.eng.cfg.RetentionCheckInterval
	if retention {
		s.lastKeep = now
	}
	var b wal.Batch
	type flush struct {
		p  *Partition
		tk wal.Ticket
	}
	var flushes []flush
	for p := range s.parts {
		if p.rep != nil {
			p.expireAcks(now)
		}
		if p.log == nil {
			continue
		}
		if p.Offline() != nil {
			s.retryFullDisk(p, now)
			continue
		}
		if p.log.FlushDue(now) {
			if tk, err := b.Sync(p.log); err == nil {
				flushes = append(flushes, flush{p, tk})
			}
		}
		if retention {
			if n := p.expireProducers(now); n > 0 {
				s.eng.logger.Info("forgot idle producers", "partition", p.String(), "producers", n, "producer_id_expiration", s.eng.cfg.ProducerIDExpiration)
			}
			if n, err := p.log.EnforceRetention(); err != nil {
				s.eng.logger.Warn("retention", "partition", p.String(), "err", err)
			} else if n > 0 {
				s.eng.logger.Info("retention deleted segments", "partition", p.String(), "segments", n, "log_start", p.log.StartOffset())
			}
		}
	}
	if b.Len() > 0 {
		if err := b.Submit(s.backend); err != nil {
			s.eng.logger.Error("flush submission failed", "shard", s.id, "err", err)
		}
		// A failed flush.ms fdatasync takes the partition offline like a
		// failed append: what it should have made durable may be gone.
		for _, f := range flushes {
			if err := f.tk.Err(); err != nil {
				f.p.setOffline(err)
			}
		}
		b.Reset()
	}
}

// retryFullDisk brings back a partition that a full disk took offline
// (its log failed only for writes that found no room: wal's
// FailedForSpace), every DiskFullRetry, once the disk has
// DiskFullResumeBytes free: the log cuts back the failed writes (nothing
// they carried was acknowledged) and accepts appends again, and the
// idempotent producers' state is rebuilt from the log, forgetting the
// sequences of the batches that failed so their retries are written.
// A single broker's partitions only: a replica in cluster mode stays
// offline until a restart, while the other replicas serve.
func (s *Shard) retryFullDisk(p *Partition, now time.Time) {
	if p.rep != nil || !p.log.FailedForSpace() || now.Before(p.retryAt) {
		return
	}
	p.retryAt = now.Add(s.eng.cfg.DiskFullRetry)
	if free, ok := diskFree(p.dir); ok && free < s.eng.cfg.DiskFullResumeBytes {
		return
	}
	if err := p.log.Revive(); err != nil {
		s.eng.logger.Warn("partition stays offline", "partition", p.String(), "err", err)
		return
	}
	p.reloadProducerState()
	p.offline.Store(nil)
	s.eng.logger.Info("partition back online: the disk has room again", "partition", p.String())
	p.notify()
}

// EnforceRetentionNow runs retention on every partition of the shard
// immediately (tests, admin).
func (s *Shard) EnforceRetentionNow() {
	s.Call(func() error {
		for p := range s.parts {
			if p.log != nil && p.Offline() == nil {
				p.log.EnforceRetention()
			}
		}
		return nil
	})
}

// shutdownWorkers is how many partitions a stopping shard closes at once:
// a close is mostly waiting for fdatasyncs, which overlap (10,000 idle
// partitions took 13.8 s to stop one at a time).
const shutdownWorkers = 16

// closePartitions saves each partition's producer state and high
// watermark and closes its log, shutdownWorkers at a time (from the
// shard goroutine, which owns them and waits: nothing else touches
// them meanwhile).
func closePartitions(parts []*Partition) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	next := make(chan *Partition)
	for range min(shutdownWorkers, len(parts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				var perr []error
				if err := p.saveProducerState(); err != nil {
					perr = append(perr, fmt.Errorf("%s: producer state: %w", p, err))
				}
				if p.rep != nil {
					if err := p.saveHighWatermark(); err != nil {
						perr = append(perr, fmt.Errorf("%s: high watermark: %w", p, err))
					}
				}
				if err := p.log.Close(); err != nil {
					perr = append(perr, fmt.Errorf("%s: %w", p, err))
				}
				if p.log.Err() != nil {
					perr = append(perr, fmt.Errorf("%s: %w", p, p.log.Err()))
				}
				if len(perr) > 0 {
					mu.Lock()
					errs = append(errs, perr...)
					mu.Unlock()
				}
			}
		}()
	}
	for _, p := range parts {
		next <- p
	}
	close(next)
	wg.Wait()
	return errs
}

// stop answers what is queued, closes the shard's logs (flushing them)
// and ends the goroutine.
func (s *Shard) stop() error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		<-s.done
		return s.stopErr
	}
	s.stopping = true
	s.mu.Unlock()
	s.signal()
	<-s.done
	return s.stopErr
}

func (s *Shard) shutdown() {
	var closing []*Partition
	for p := range s.parts {
		if p.rep != nil {
			p.rep.mu.Lock()
			acks := p.rep.acks
			p.rep.acks = nil
			p.rep.mu.Unlock()
			for _, a := range acks {
				a.res.Err = fmt.Errorf("%w: broker is shutting down", kerr.NotLeaderForPartition)
				a.req.Done(a.res)
			}
		}
		if p.log != nil {
			closing = append(closing, p)
		}
	}
	errs := closePartitions(closing)
	s.backend.Close()
	s.mu.Lock()
	waiters := s.roomWaiters
	s.roomWaiters = nil
	s.mu.Unlock()
	for _, fn := range waiters {
		fn()
	}
	s.stopErr = errors.Join(errs...)
	close(s.done)
}
