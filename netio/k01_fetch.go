package netio

import (
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/fetchsession"
	"github.com/ringlog/ringlog/wal"
)

// Fetch, key 1, versions 4-17.
//
//   - Record bytes go from the segment files to the socket with sendfile;
//     only the response header is built in user space (fetchwire.go). A
//     partition's records shorter than Config.FetchCopyBelow are read
//     into the header buffer and sent with it instead.
//   - Per partition: whole batches from FetchOffset (a fetch from inside a
//     batch returns that whole batch), up to the partition's MaxBytes and
//     the response's MaxBytes, except that the first batch of the first
//     non-empty partition is always returned whole (KIP-74), so a consumer
//     never stalls. Never past the high watermark.
//   - Long poll: with fewer than MinBytes available the fetch parks until
//     an append to one of its partitions (which wakes exactly the fetches
//     waiting on that partition) brings enough, or MaxWaitMs passes, or
//     the broker drains for shutdown (then it answers at once), or the
//     connection closes (then it ends without an answer).
//   - Isolation level read_committed stops at the last stable offset (the
//     first offset of the oldest open transaction) and lists the aborted
//     transactions overlapping the returned offsets (from the log's
//     .txnindex), so the consumer drops their records; the bytes still go
//     with sendfile. read_uncommitted reads to the high watermark, with
//     no aborted list (null).
//   - Fetch sessions (KIP-227, internal/fetchsession), from version 7: a
//     request with SessionEpoch 0 opens a session of its partitions (its
//     response carries the id; 0 when --fetch-sessions slots are all in
//     recent use), later ones send only the partitions whose position
//     changed (and those to forget) and are answered only with the
//     partitions that have records, an error or new offsets. The session
//     is expanded into a full partition list before resolve, so the rest
//     of the fetch does not know about sessions but for respond's filter.
//   - Topics by id from v13; an unknown id gets UNKNOWN_TOPIC_ID.
//   - CurrentLeaderEpoch (v9+) above ours gets UNKNOWN_LEADER_EPOCH, below
//     ours FENCED_LEADER_EPOCH (KIP-320).
//   - With the authorizer on, each topic needs READ (a follower's fetch:
//     CLUSTER_ACTION on the cluster), else TOPIC_AUTHORIZATION_FAILED.
//   - Cluster mode: only the leader answers (others NOT_LEADER_OR_FOLLOWER),
//     but with --follower-fetching (KIP-392): a read_uncommitted
//     consumer's fetch (v11+) naming a rack other than the leader's gets,
//     for each partition with a live in-sync replica in that rack that has
//     fetched up to its offset (an offset within the leader's log), that
//     replica as PreferredReadReplica and no records, at once; a follower
//     serves such a consumer (whatever its own flag) up to the high
//     watermark the leader last sent it, and wakes its long polls when
//     that moves.
//     A fetch from a follower (ReplicaID, or ReplicaState.ID from v15, a
//     broker id ≥ 0) reads up to the log end rather than the high
//     watermark, and its FetchOffset, which a follower sends only once
//     what it has is durable, moves the high watermark
//     (engine.Partition.FollowerFetched). Its LogStartOffset is the
//     leader's local log start (tiered storage: a follower whose log
//     ends below it starts its log there, and never copies remote
//     segments); a consumer's is the earliest offset, remote or local.
//     Offsets below the local log start are read from tiered storage on
//     the leader and on a follower serving a rack consumer alike.

type fetch struct {
	s   *Server
	r   *request
	req *kmsg.FetchRequest
	// want is the partitions the fetch reads: req.Topics, or an
	// incremental session's partitions (in sc.sess's memory).
	want []kmsg.FetchRequestTopic
	sess fetchsession.Context
	// replica is the fetching follower's broker id, -1 for a consumer.
	replica int32
	// redirected: a partition was answered with a preferred read
	// replica (KIP-392): the fetch answers at once.
	redirected bool
	parts      [][]*engine.Partition // per request topic, per partition
	topics     []fetchTopicResult
	bytes      int64
	// sc backs parts, topics and the response's header bytes; it goes
	// back to the connection once the response is written (done).
	sc *fetchScratch

	// A parked fetch's state (park): the runner's role and its wakes,
	// the flags the timer, the drain and the close set, and what it
	// watches.
	wakes     atomic.Int32
	expired   atomic.Bool
	abandoned atomic.Bool
	waiter    engine.Waiter
	watched   []*engine.Partition // in sc's memory
	timer     *time.Timer
}

func handleFetch(s *Server, r *request) frameOutcome {
	sc := r.conn.takeFetchScratch()
	req := sc.request()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	f := &fetch{s: s, r: r, req: req, replica: req.ReplicaID, sc: sc}
	if r.version >= 15 {
		f.replica = req.ReplicaState.ID
	}
	if f.replica < 0 {
		f.replica = -1
	}
	var code int16
	f.sess, f.want, code = s.fetchSessions.Begin(req, r.version, &sc.sess)
	if code != 0 {
		r.failed = true
		f.respond(code)
		return frameDone
	}
	f.resolve()
	f.read()
	if f.bytes >= int64(req.MinBytes) || req.MaxWaitMillis <= 0 || f.hasError() || f.redirected || s.draining.Load() {
		f.respond(0)
		return frameDone
	}
	f.release()
	f.park()
	return frameDone
}

// fetchScratch is the memory a fetch needs besides its request: the
// per-partition results and the response's header bytes. A consumer's
// fetches follow one another on its connection, so each connection keeps
// the scratch of its last answered fetch (conn.spareFetch) for the next
// one, which then resolves, reads and encodes without allocating. A
// scratch is handed back only once its response is written or dropped:
// the response's byte runs are slices of buf.
type fetchScratch struct {
	req    kmsg.FetchRequest // the decoded request (request)
	sess   fetchsession.Scratch
	topics []fetchTopicResult
	parts  [][]*engine.Partition
	buf    []byte // the response's byte runs (encodeFetch)
	out    []part // the response's parts (encodeFetch)
	// watched backs a parked fetch's watch list (park, unpark).
	watched []*engine.Partition
}

// maxSpareFetchBuf is the largest response buffer a connection keeps for
// its next fetch; a larger one (many partitions' records copied) goes to
// the garbage collector.
const maxSpareFetchBuf = 256 << 10

// takeFetchScratch returns the connection's spare scratch, or a new one.
func (c *conn) takeFetchScratch() *fetchScratch {
	if sc := c.spareFetch.Swap(nil); sc != nil {
		return sc
	}
	return new(fetchScratch)
}

// request returns sc's request, emptied for a decode: every field is
// zero (a field of a version the next request does not have must not
// survive from the last one) but the topic array keeps its memory. (kmsg
// allocates each topic's partitions afresh.)
func (sc *fetchScratch) request() *kmsg.FetchRequest {
	clear(sc.req.Topics)
	sc.req = kmsg.FetchRequest{Topics: sc.req.Topics[:0]}
	return &sc.req
}

// resize makes sc hold n topics whose results are reset, keeping the
// memory of earlier fetches (their chunks were released).
func (sc *fetchScratch) resize(n int) {
	sc.topics = slices.Grow(sc.topics[:0], n)[:n]
	sc.parts = slices.Grow(sc.parts[:0], n)[:n]
}

// resizeTopic makes topic i hold n partitions, reset to zero values but
// for the memory of their chunks and aborted lists.
func (sc *fetchScratch) resizeTopic(i, n int) {
	tr := &sc.topics[i]
	tr.parts = slices.Grow(tr.parts[:0], n)[:n]
	for j := range tr.parts {
		pr := &tr.parts[j]
		*pr = fetchPartResult{chunk: pr.chunk, aborted: pr.aborted[:0]}
	}
	sc.parts[i] = slices.Grow(sc.parts[i][:0], n)[:n]
	clear(sc.parts[i])
}

// resolve finds the partitions named by the request and sets up results.
func (f *fetch) resolve() {
	f.sc.resize(len(f.want))
	f.topics, f.parts = f.sc.topics, f.sc.parts
	for i := range f.want {
		rt := &f.want[i]
		tr := &f.topics[i]
		tr.name, tr.id = rt.Topic, rt.TopicID
		var t *engine.Topic
		if f.r.version >= 13 {
			t = f.s.eng.TopicByID(engine.TopicID(rt.TopicID))
		} else {
			t = f.s.eng.Topic(rt.Topic)
		}
		// READ on the topic (CLUSTER_ACTION on the cluster for a
		// follower's fetch), checked once per topic.
		denied := false
		if t != nil {
			if f.replica >= 0 {
				denied = !f.r.clusterAllowed(kmsg.ACLOperationClusterAction)
			} else {
				denied = !f.r.topicAllowed(kmsg.ACLOperationRead, t.Name)
			}
		} else if f.r.version < 13 && !f.r.topicAllowed(kmsg.ACLOperationRead, rt.Topic) {
			denied = true // an unknown name: no existence leak
		}
		f.sc.resizeTopic(i, len(rt.Partitions))
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			pr := &tr.parts[j]
			pr.partition = rp.Partition
			pr.hw, pr.lso, pr.logStart = -1, -1, -1
			pr.redirect = 0
			switch {
			case denied:
				pr.errCode = kerr.TopicAuthorizationFailed.Code
			case t == nil && f.r.version >= 13:
				pr.errCode = kerr.UnknownTopicID.Code
			case t == nil:
				pr.errCode = kerr.UnknownTopicOrPartition.Code
			default:
				if p := t.Partition(rp.Partition); p == nil {
					pr.errCode = kerr.UnknownTopicOrPartition.Code
				} else if err := p.CheckLeaderEpoch(rp.CurrentLeaderEpoch); err != nil {
					pr.errCode = errCode(err)
				} else {
					f.parts[i][j] = p
				}
			}
		}
	}
}

// consumerRack is the rack of a consumer that follower fetching may
// serve (KIP-392): cluster mode, a consumer's Fetch v11+ naming its rack,
// read_uncommitted; else "". A follower serves such a consumer whatever
// its own --follower-fetching (which only decides whether a leader sends
// consumers elsewhere), so that enabling it broker by broker loops no
// one.
func (f *fetch) consumerRack() string {
	if f.s.cfg.Cluster == nil || f.replica >= 0 || f.r.version < 11 || f.req.IsolationLevel != 0 {
		return ""
	}
	return f.req.Rack
}

// preferredReplica is the replica a consumer in rack reading p from
// offset should go to, when this broker (its leader, with
// --follower-fetching) is in another rack: the first live in-sync
// replica in that rack that has fetched up to offset, the offset being
// within this log (an offset out of range is answered here, so the
// consumer can reset); -1 to read here.
func (s *Server) preferredReplica(p *engine.Partition, l *wal.Log, rack string, offset int64) int32 {
	if offset < l.StartOffset() || offset > p.HighWatermark() {
		return -1
	}
	img := s.cfg.Cluster.Image()
	self := s.eng.NodeID()
	if b, ok := img.Broker(self); !ok || b.Rack == rack {
		return -1
	}
	return p.ReadReplica(offset, func(id int32) bool {
		b, ok := img.Broker(id)
		return ok && id != self && !b.Fenced && b.Rack == rack
	})
}

// read reads every resolved partition within the budgets.
func (f *fetch) read() {
	budget := int64(f.req.MaxBytes)
	if budget <= 0 {
		budget = 1 << 31
	}
	first := true
	f.bytes = 0
	f.redirected = false
	rack := f.consumerRack()
	redirect := rack != "" && f.s.cfg.FollowerFetching // (a leader sends rack consumers elsewhere)
	for i := range f.want {
		for j := range f.want[i].Partitions {
			p := f.parts[i][j]
			if p == nil {
				continue
			}
			rp := &f.want[i].Partitions[j]
			pr := &f.topics[i].parts[j]
			pr.errCode, pr.redirect = 0, 0
			l, err := p.Log()
			fromFollower := false
			if err != nil && rack != "" {
				// A consumer sent here as the preferred read replica.
				if fl, ferr := p.FollowerLog(); ferr == nil {
					l, err, fromFollower = fl, nil, true
				}
			}
			if err != nil {
				pr.errCode = errCode(err)
				continue
			}
			if redirect && !fromFollower {
				if id := f.s.preferredReplica(p, l, rack, rp.FetchOffset); id >= 0 {
					pr.redirect, f.redirected = id+1, true
					continue // no records: the consumer goes there
				}
			}
			upTo := p.HighWatermark()
			pr.hw, pr.lso, pr.logStart = upTo, p.LastStableOffset(), p.LogStartOffset()
			if fromFollower {
				pr.lso = upTo
			}
			pr.readCommitted = f.req.IsolationLevel == 1 && f.replica < 0
			pr.aborted = pr.aborted[:0]
			if pr.readCommitted {
				upTo = pr.lso
			}
			if f.replica >= 0 {
				// The local log's start, also with OFFSET_OUT_OF_RANGE:
				// a follower below it does not copy tiered storage but
				// starts its log there.
				pr.logStart = l.StartOffset()
				if err := p.FollowerFetched(f.replica, rp.FetchOffset); err != nil {
					pr.errCode = errCode(err)
					continue
				}
				upTo = l.EndOffset()
				hw := p.HighWatermark() // the follower's fetch may have moved it
				pr.hw, pr.lso = hw, hw
			}
			max := min(int64(rp.PartitionMaxBytes), budget)
			if max <= 0 && !first {
				continue
			}
			err = l.Read(&pr.chunk, rp.FetchOffset, int(max), upTo)
			if errors.Is(err, wal.ErrOffsetOutOfRange) && f.replica < 0 && rp.FetchOffset < l.StartOffset() {
				// Below the local log: tiered storage may hold it.
				pr.chunk.Release()
				pr.remote, err = p.ReadRemote(rp.FetchOffset, max, upTo, &f.r.conn.remoteQuota)
				switch {
				case !errors.Is(err, engine.ErrNotRemote):
				case fromFollower && rp.FetchOffset >= p.LogStartOffset():
					// Between what this follower's metadata says is
					// remote and its local log (its metadata lags the
					// leader's): not out of range, try again.
					err = kerr.OffsetNotAvailable
				default:
					err = wal.ErrOffsetOutOfRange
				}
			}
			if err != nil {
				pr.errCode = errCode(err)
				if errors.Is(err, wal.ErrOffsetOutOfRange) {
					pr.errCode = kerr.OffsetOutOfRange.Code
				}
				pr.chunk.Release()
				pr.remote.Release()
				continue
			}
			n, _, next := pr.records()
			if n > max && !first {
				pr.chunk.Release() // only the first non-empty partition may exceed
				pr.remote.Release()
				continue
			}
			if pr.readCommitted && n > 0 {
				pr.aborted = p.AbortedTxnsFor(pr.aborted, rp.FetchOffset, next, &pr.remote)
			}
			if n > 0 {
				first = false
				budget -= n
				f.bytes += n
			}
		}
	}
}

func (f *fetch) hasError() bool {
	for i := range f.topics {
		for j := range f.topics[i].parts {
			if f.topics[i].parts[j].errCode != 0 {
				return true
			}
		}
	}
	return false
}

func (f *fetch) release() {
	for i := range f.topics {
		for j := range f.topics[i].parts {
			f.topics[i].parts[j].chunk.Release()
			f.topics[i].parts[j].remote.Release()
		}
	}
}

// park waits for enough bytes (MinBytes), MaxWaitMs, the connection's
// close or the server's drain, without a goroutine: the fetch watches its
// partitions with a Waiter whose Wake is the fetch's own wake, so the
// append that brings the bytes (on its shard's goroutine, or on an event
// loop by the direct-write fast path) reads and answers the fetch at once,
// with no handoff to another goroutine. The timer (time.AfterFunc), the
// close (conn.close) and the drain (Server.Drain) only set a flag and wake
// it the same way.
//
// Exactly one caller at a time runs the fetch (settle): wakes counts the
// wakes since the runner last looked, and whoever raises it from 0 runs;
// the others return at once, and the runner looks again before it lets
// go. So a wake never waits, never takes a lock, and none is lost — which
// keeps the notifier free of lock order with the fetch, even when reading
// one fetch (a follower's, moving the high watermark) wakes another. park
// holds the runner's role while it sets up, so no wake runs a fetch whose
// watches, timer or registration are not all in place.
func (f *fetch) park() {
	f.wakes.Store(1)
	c := f.r.conn
	if !c.park(f) {
		// Closed already: nobody to answer.
		f.r.finish()
		return
	}
	f.waiter.Wake = f.wake
	f.watched = f.sc.watched[:0]
	for i := range f.parts {
		for _, p := range f.parts[i] {
			if p != nil {
				p.Watch(&f.waiter)
				f.watched = append(f.watched, p)
			}
		}
	}
	f.sc.watched = f.watched
	f.timer = time.AfterFunc(time.Duration(f.req.MaxWaitMillis)*time.Millisecond, func() {
		f.expired.Store(true)
		f.wake()
	})
	select {
	case <-f.s.drained:
		// Drain may have looked for parked fetches before this one
		// registered: answer with what there is now.
		f.expired.Store(true)
	default:
	}
	// Data may have arrived between the first read and Watch.
	f.settle()
}

// wake asks for the parked fetch to be looked at again (see park).
func (f *fetch) wake() {
	if f.wakes.Add(1) == 1 {
		f.settle()
	}
}

// settle runs the parked fetch until it is answered or no wake is left
// unseen (the caller holds the runner's role).
func (f *fetch) settle() {
	for {
		n := f.wakes.Load()
		if f.step() {
			// Answered: the role is never given back, so later wakes
			// return at once.
			return
		}
		if f.wakes.Add(-n) == 0 {
			return
		}
	}
}

// step looks at the parked fetch once: abandoned with its connection, it
// ends silently; with enough bytes, an error, or past MaxWaitMs (or
// draining), it answers. It reports whether the fetch is over.
func (f *fetch) step() bool {
	if f.abandoned.Load() {
		f.unpark()
		f.r.finish()
		return true
	}
	f.read()
	if f.bytes >= int64(f.req.MinBytes) || f.hasError() || f.redirected || f.expired.Load() {
		f.unpark()
		f.respond(0)
		return true
	}
	f.release()
	return false
}

// unpark stops the timer and the watches and forgets the fetch on its
// connection (runner only).
func (f *fetch) unpark() {
	f.timer.Stop()
	for _, p := range f.watched {
		p.Unwatch(&f.waiter)
	}
	clear(f.watched)
	f.r.conn.unpark(f)
}

// expire answers a parked fetch now with what there is (the server's
// drain).
func (f *fetch) expire() {
	f.expired.Store(true)
	f.wake()
}

// abandon ends a parked fetch whose connection closed, without an answer.
func (f *fetch) abandon() {
	f.abandoned.Store(true)
	f.wake()
}

// respond queues the response; the chunks are released once sent. With
// a session, the session learns what the response tells the client, and
// an incremental response leaves out the partitions with nothing new.
func (f *fetch) respond(errCode int16) {
	f.sess.StartReport()
	k := 0 // the partition's index in the fetched list (Report)
	for i := range f.topics {
		tr := &f.topics[i]
		for j := range tr.parts {
			pr := &tr.parts[j]
			if pr.errCode != 0 {
				f.r.failed = true
			}
			n, firstOff, next := pr.records()
			if p := f.parts[i]; p != nil && p[j] != nil && n > 0 {
				p[j].BytesOut.Add(n)
				from := max(f.want[i].Partitions[j].FetchOffset, firstOff)
				p[j].RecordsOut.Add(next - from)
			}
			pr.omit = !f.sess.Report(k, fetchsession.Result{
				HighWatermark: pr.hw, LastStableOffset: pr.lso, LogStartOffset: pr.logStart,
				Records: n > 0 || pr.redirect > 0, ErrCode: pr.errCode,
			})
			k++
		}
	}
	f.sess.EndReport()
	parts, copied := encodeFetch(f.r, errCode, f.sess.ID(), f.topics, int64(f.r.conn.srv.cfg.FetchCopyBelow), f.sc)
	if copied > 0 {
		f.r.conn.srv.metrics.CopiedBytes.Add(float64(copied))
	}
	f.r.count()
	f.r.conn.complete(f.r.resp, parts, f.done)
	f.r.finish()
}

// done runs once the response is written or dropped: it releases the
// chunks and hands the scratch back to the connection. Nothing else
// touches the scratch by then: a wake that comes after the answer
// returns without running the fetch (settle).
func (f *fetch) done() {
	f.release()
	sc := f.sc
	f.sc, f.topics, f.parts = nil, nil, nil
	clear(sc.out)
	sc.out = sc.out[:0]
	if cap(sc.buf) > maxSpareFetchBuf {
		sc.buf = nil
	}
	f.r.conn.spareFetch.Store(sc)
}
