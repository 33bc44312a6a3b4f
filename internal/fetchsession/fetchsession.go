// Package fetchsession keeps a listener's Kafka fetch sessions (KIP-227):
// which partitions each consumer's session names, at which fetch offsets,
// and what the last response told it of each, so that a client need only
// send the partitions whose fetch position changed, and the broker need
// only answer the partitions that have something new.
//
// A fetch request's SessionID and SessionEpoch pick one of three contexts
// (Cache.Begin):
//
//   - epoch -1 (FinalEpoch): a full request, answered in full, with no
//     session; a session named by SessionID is closed.
//   - epoch 0 (InitialEpoch): a full request that opens a session (and
//     closes the one named by SessionID, if any). The response carries the
//     new session's id, or 0 when every slot holds a session used in the
//     last StaleAfter (the client then fetches without one).
//   - epoch ≥ 1: an incremental request on session SessionID, whose
//     epoch must be the one the last response of that session implied.
//     Its partitions are added to the session or update their fetch
//     position; its forgotten topics leave it. The fetch then reads every
//     partition of the session, and the response carries a partition only
//     if it has records or an error, or its high watermark, last stable
//     offset or log start offset changed since the session last told the
//     client (Session.Report). Partitions that returned records move to
//     the end of the session's order, so under a response byte limit the
//     others get their turn.
//
// Lock order: a Session's mutex before the Cache's; the Cache never waits
// for a Session's mutex while it holds its own (it evicts by flag).
package fetchsession

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The session epochs with a meaning of their own (KIP-227).
const (
	// FinalEpoch asks for a full fetch without a session.
	FinalEpoch int32 = -1
	// InitialEpoch asks for a full fetch that opens a session.
	InitialEpoch int32 = 0
)

// DefaultStaleAfter is how long a session must go unused before a new one
// may take its slot (Kafka's min.incremental.fetch.session.eviction.ms).
const DefaultStaleAfter = 2 * time.Minute

// Observer is told of sessions opened and closed, and of evictions
// (Prometheus gauges and counters satisfy it; several caches may share
// one). Either may be nil.
type Observer struct {
	Sessions  interface{ Add(float64) }
	Evictions interface{ Inc() }
}

// Cache holds at most Slots sessions of one listener. Safe for concurrent
// use.
type Cache struct {
	slots      int
	staleAfter time.Duration
	obs        Observer
	now        func() time.Time

	mu       sync.Mutex
	sessions map[int32]*Session
}

// NewCache returns a cache of at most slots sessions (slots ≤ 0: every
// request is answered without a session), whose sessions may be evicted
// for a new one after staleAfter unused (≤ 0: DefaultStaleAfter).
func NewCache(slots int, staleAfter time.Duration, obs Observer) *Cache {
	if staleAfter <= 0 {
		staleAfter = DefaultStaleAfter
	}
	return &Cache{slots: slots, staleAfter: staleAfter, obs: obs, now: time.Now, sessions: make(map[int32]*Session)}
}

// Len returns the number of sessions held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sessions)
}

// Kind says how a fetch uses its session.
type Kind uint8

// The kinds of fetch contexts.
const (
	// Sessionless: the request's partitions, all of them in the
	// response, session id 0.
	Sessionless Kind = iota
	// Full: a new session; the request's partitions, all of them in the
	// response, with the session's id.
	Full
	// Incremental: the session's partitions, those Report selects in the
	// response, with the session's id.
	Incremental
)

// Context is a fetch's session context, from Cache.Begin.
type Context struct {
	Kind    Kind
	Session *Session // nil when Sessionless
	// refs are the session's entries of the fetched partitions, in the
	// order of the partition list Begin returned (Report's index).
	refs []*entry
}

// Scratch is the memory of one connection's Begin calls, reused from one
// fetch to the next (once the last one's response is encoded).
type Scratch struct {
	topics []kmsg.FetchRequestTopic
	refs   []*entry
}

// ID returns the session id the response carries (0 without a session).
func (x Context) ID() int32 {
	if x.Session == nil {
		return 0
	}
	return x.Session.id
}

// partKey names a session partition: by topic name (fetch versions
// 7-12) or by topic id (13+), never both.
type partKey struct {
	Topic     string
	TopicID   [16]byte
	Partition int32
}

// Result is what a response tells the client of one partition.
type Result struct {
	HighWatermark    int64
	LastStableOffset int64
	LogStartOffset   int64
	Records          bool  // it carries records
	ErrCode          int16 // its error code
}

// Session is one client's fetch session. Its partitions form a list in
// fetch order, indexed by key.
type Session struct {
	id      int32
	byID    bool        // keys by topic id (the session began at version 13+)
	removed atomic.Bool // closed or evicted: no longer in the cache

	// lastUsed (unix nanoseconds) is written under the cache's mutex.
	lastUsed int64

	mu         sync.Mutex
	epoch      int32 // the epoch the next incremental request must carry
	head, tail *entry
	index      map[partKey]*entry
}

type entry struct {
	key                partKey
	fetchOffset        int64
	logStartOffset     int64 // the client's (a follower's log start)
	maxBytes           int32
	currentLeaderEpoch int32
	lastFetchedEpoch   int32
	// gone: forgotten by a request, or the session ended.
	gone bool
	// What the last response told the client (told: there was one); the
	// high watermark is -1 after an error, so that the partition is
	// answered again once the error is gone.
	told                          bool
	sentHW, sentLSO, sentLogStart int64
	prev, next                    *entry
}

// Begin gives the fetch request req (of the given version) its context,
// opening, updating or closing sessions as its SessionID and SessionEpoch
// ask. It returns the partitions the fetch reads: req.Topics itself,
// except for an incremental fetch, whose session's partitions it writes
// into sc's memory (grouped into runs of one topic, in session order).
// The context keeps sc's memory (nil: fresh memory) until the fetch's
// response is encoded.
// A nonzero error code (FETCH_SESSION_ID_NOT_FOUND,
// INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR) is the
// response's: it carries no partitions, and no session.
func (c *Cache) Begin(req *kmsg.FetchRequest, version int16, sc *Scratch) (Context, []kmsg.FetchRequestTopic, int16) {
	if version < 7 {
		return Context{}, req.Topics, 0 // no sessions before version 7
	}
	byID := version >= 13
	if sc == nil {
		sc = new(Scratch)
	}
	if req.SessionEpoch == FinalEpoch || req.SessionEpoch == InitialEpoch {
		if req.SessionID != 0 {
			c.remove(req.SessionID)
		}
		if req.SessionEpoch == FinalEpoch || c.slots <= 0 {
			return Context{}, req.Topics, 0
		}
		clear(sc.refs)
		s := &Session{byID: byID, epoch: 1, index: make(map[partKey]*entry)}
		sc.refs = s.update(req.Topics, nil, sc.refs[:0], true)
		if !c.add(s) {
			return Context{}, req.Topics, 0
		}
		return Context{Kind: Full, Session: s, refs: sc.refs}, req.Topics, 0
	}

	c.mu.Lock()
	s := c.sessions[req.SessionID]
	if s != nil {
		s.lastUsed = c.now().UnixNano()
	}
	c.mu.Unlock()
	if s == nil {
		return Context{}, nil, kerr.FetchSessionIDNotFound.Code
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.removed.Load():
		return Context{}, nil, kerr.FetchSessionIDNotFound.Code
	case s.byID != byID:
		return Context{}, nil, kerr.FetchSessionTopicIDError.Code
	case s.epoch != req.SessionEpoch:
		return Context{}, nil, kerr.InvalidFetchSessionEpoch.Code
	}
	s.update(req.Topics, req.ForgottenTopics, nil, false)
	if len(s.index) == 0 {
		// Nothing left to fetch: the session ends, and the (empty)
		// request is answered without one.
		c.remove(s.id)
		return Context{}, req.Topics[:0], 0
	}
	s.epoch = nextEpoch(s.epoch)
	clear(sc.refs)
	sc.topics, sc.refs = s.expand(sc.topics, sc.refs[:0])
	return Context{Kind: Incremental, Session: s, refs: sc.refs}, sc.topics, 0
}

func nextEpoch(e int32) int32 {
	if e == math.MaxInt32 {
		return 1
	}
	return e + 1
}

// add gives s an id and a slot, evicting the least recently used session
// if every slot is taken and that one is stale; it reports false when
// none is.
func (c *Cache) add(s *Session) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now().UnixNano()
	if len(c.sessions) >= c.slots {
		var lru *Session
		for _, o := range c.sessions {
			if lru == nil || o.lastUsed < lru.lastUsed {
				lru = o
			}
		}
		if lru == nil || now-lru.lastUsed < int64(c.staleAfter) {
			return false
		}
		lru.removed.Store(true)
		delete(c.sessions, lru.id)
		c.observe(-1)
		if c.obs.Evictions != nil {
			c.obs.Evictions.Inc()
		}
	}
	for {
		id := rand.Int32() // [0, MaxInt32): never negative
		if _, taken := c.sessions[id]; id != 0 && !taken {
			s.id = id
			break
		}
	}
	s.lastUsed = now
	c.sessions[s.id] = s
	c.observe(1)
	return true
}

// remove closes session id, if the cache holds it.
func (c *Cache) remove(id int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[id]; s != nil {
		s.removed.Store(true)
		delete(c.sessions, id)
		c.observe(-1)
	}
}

func (c *Cache) observe(delta float64) {
	if c.obs.Sessions != nil {
		c.obs.Sessions.Add(delta)
	}
}

func (s *Session) key(topic string, id [16]byte, partition int32) partKey {
	if s.byID {
		return partKey{TopicID: id, Partition: partition}
	}
	return partKey{Topic: topic, Partition: partition}
}

// update applies a request's partitions (added, or their positions
// updated) and its forgotten topics (removed). With collect, it appends
// the entry of each of the request's partitions to refs, in order.
func (s *Session) update(topics []kmsg.FetchRequestTopic, forgotten []kmsg.FetchRequestForgottenTopic, refs []*entry, collect bool) []*entry {
	for i := range topics {
		rt := &topics[i]
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			k := s.key(rt.Topic, rt.TopicID, rp.Partition)
			e := s.index[k]
			if e == nil {
				e = &entry{key: k}
				s.index[k] = e
				s.pushBack(e)
			}
			e.fetchOffset, e.logStartOffset, e.maxBytes = rp.FetchOffset, rp.LogStartOffset, rp.PartitionMaxBytes
			e.currentLeaderEpoch, e.lastFetchedEpoch = rp.CurrentLeaderEpoch, rp.LastFetchedEpoch
			if collect {
				refs = append(refs, e)
			}
		}
	}
	for i := range forgotten {
		ft := &forgotten[i]
		for _, p := range ft.Partitions {
			k := s.key(ft.Topic, ft.TopicID, p)
			if e := s.index[k]; e != nil {
				s.unlink(e)
				e.gone = true
				delete(s.index, k)
			}
		}
	}
	return refs
}

// expand writes the session's partitions into dst's memory as request
// topics: a topic per run of partitions of one topic, in session order;
// it appends their entries to refs in the same order.
func (s *Session) expand(dst []kmsg.FetchRequestTopic, refs []*entry) ([]kmsg.FetchRequestTopic, []*entry) {
	dst = dst[:0]
	var cur *kmsg.FetchRequestTopic
	for e := s.head; e != nil; e = e.next {
		if cur == nil || cur.Topic != e.key.Topic || cur.TopicID != e.key.TopicID {
			if len(dst) < cap(dst) {
				dst = dst[:len(dst)+1]
				parts := dst[len(dst)-1].Partitions[:0]
				dst[len(dst)-1] = kmsg.FetchRequestTopic{Partitions: parts}
			} else {
				dst = append(dst, kmsg.FetchRequestTopic{})
			}
			cur = &dst[len(dst)-1]
			cur.Topic, cur.TopicID = e.key.Topic, e.key.TopicID
		}
		cur.Partitions = append(cur.Partitions, kmsg.FetchRequestTopicPartition{
			Partition:          e.key.Partition,
			CurrentLeaderEpoch: e.currentLeaderEpoch,
			FetchOffset:        e.fetchOffset,
			LastFetchedEpoch:   e.lastFetchedEpoch,
			LogStartOffset:     e.logStartOffset,
			PartitionMaxBytes:  e.maxBytes,
			HighWatermark:      math.MaxInt64,
		})
		refs = append(refs, e)
	}
	return dst, refs
}

// StartReport locks the session (if any) for the Report calls of one
// response; EndReport unlocks it.
func (x Context) StartReport() {
	if x.Session != nil {
		x.Session.mu.Lock()
	}
}

// EndReport ends what StartReport began.
func (x Context) EndReport() {
	if x.Session != nil {
		x.Session.mu.Unlock()
	}
}

// Report records what the response tells the client of the i-th
// partition of the list Begin returned, between StartReport and
// EndReport, and reports whether the response carries that partition:
// always, but for an incremental response, which carries it only with
// records or an error, or when its high watermark, last stable offset or
// log start offset is not what the session last told the client. A
// partition that returns records moves to the end of the session's order.
func (x Context) Report(i int, r Result) bool {
	if x.Session == nil {
		return true
	}
	e := x.refs[i]
	if e.gone {
		// Forgotten by a later request meanwhile: answer it anyway;
		// the client ignores what it no longer fetches.
		return true
	}
	s := x.Session
	send := x.Kind != Incremental || !e.told || r.Records || r.ErrCode != 0 ||
		e.sentHW != r.HighWatermark || e.sentLSO != r.LastStableOffset || e.sentLogStart != r.LogStartOffset
	e.told = true
	e.sentHW, e.sentLSO, e.sentLogStart = r.HighWatermark, r.LastStableOffset, r.LogStartOffset
	if r.ErrCode != 0 {
		e.sentHW = -1
	}
	if r.Records && e != s.tail {
		s.unlink(e)
		s.pushBack(e)
	}
	return send
}

func (s *Session) pushBack(e *entry) {
	e.prev, e.next = s.tail, nil
	if s.tail != nil {
		s.tail.next = e
	} else {
		s.head = e
	}
	s.tail = e
}

func (s *Session) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nil, nil
}
