package engine

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/wal"
)

// OffsetsTopic is the internal compacted topic holding committed offsets
// and group metadata.
const OffsetsTopic = "__consumer_offsets"

// Topic is a named, ordered set of partitions with one configuration.
type Topic struct {
	Name     string
	ID       TopicID
	Internal bool

	eng *Engine
	// adminMu serialises the admin changes of this topic (new
	// partitions, config, deletion); taken before Engine.metaMu.
	adminMu sync.Mutex
	parts   atomic.Pointer[[]*Partition] // grows with CreatePartitions
	config  atomic.Pointer[TopicConfig]
	deleted atomic.Bool
}

// Partitions returns the topic's partitions (do not modify the slice).
func (t *Topic) Partitions() []*Partition { return *t.parts.Load() }

// Partition returns partition i, or nil.
func (t *Topic) Partition(i int32) *Partition {
	ps := t.Partitions()
	if i < 0 || int(i) >= len(ps) {
		return nil
	}
	return ps[i]
}

// Config returns the topic's configuration.
func (t *Topic) Config() *TopicConfig { return t.config.Load() }

// Deleted reports whether the topic was deleted.
func (t *Topic) Deleted() bool { return t.deleted.Load() }

// applyConfig hands a new configuration to every partition's log, on the
// partitions' shards.
func (t *Topic) applyConfig(cfg *TopicConfig) {
	for _, p := range t.Partitions() {
		p := p
		p.shard.Do(func() {
			if p.log == nil {
				return
			}
			o := cfg.walOptions(p.log.Options())
			if err := p.log.SetOptions(o); err != nil {
				t.eng.logger.Warn("apply topic config", "partition", p.String(), "err", err)
			}
		})
	}
}

// Partition is one partition of a topic: its log, the fetches waiting for
// it, its idempotent-producer state, and counters.
type Partition struct {
	Index int32

	topic *Topic
	dir   string
	shard *Shard

	// log is set before the partition is published and never changes
	// until the partition is removed; nil when it could not be opened.
	log     *wal.Log
	offline atomic.Pointer[errBox] // why the partition is offline, if it is

	// producers is owned by the shard goroutine, and so is openTxns
	// (producer id -> first offset of its open transaction here).
	producers map[int64]*producerState
	openTxns  map[int64]int64
	// producerStateOnDisk is what the producer-state snapshot file holds
	// (as read at open or last written; shard goroutine): a shutdown
	// does not write it again unchanged.
	producerStateOnDisk []byte
	// unstable is 1 + the smallest first offset of an open transaction
	// (0: none), published by the shard for LastStableOffset.
	unstable atomic.Int64
	// guards are the producers verified with their transaction
	// coordinators (cluster mode; txnverify.go).
	guards txnGuards

	waitMu  sync.Mutex
	waiters []*Waiter

	removed atomic.Bool
	// notHosted: the partition's log lives on another broker (cluster
	// mode); it has no log here and never gets one.
	notHosted bool

	// rep is the replication state in cluster mode (nil: single node);
	// role, leaderEpoch, isrSize and hw mirror it for
	// lock-free reads on the hot paths.
	rep         *replication
	role        atomic.Int32
	leaderEpoch atomic.Int32
	isrSize     atomic.Int32
	hw          atomic.Int64

	// retryAt is when the shard next checks whether a full disk that
	// took the partition offline has room again (shard goroutine).
	retryAt time.Time

	// tier is the partition's tiered storage (remote.go; nil: none
	// yet).
	tier atomic.Pointer[partitionTier]

	// recoveryCut is how many segment bytes the last unclean start's
	// recovery removed (set once by Open's loader).
	recoveryCut int64

	// Counters for metrics.
	BytesIn    atomic.Int64
	RecordsIn  atomic.Int64
	BytesOut   atomic.Int64
	RecordsOut atomic.Int64
}

// Topic returns the partition's topic.
func (p *Partition) Topic() *Topic { return p.topic }

// Shard returns the writer shard that owns the partition.
func (p *Partition) Shard() *Shard { return p.shard }

func (p *Partition) String() string { return p.topic.Name + "-" + strconv.Itoa(int(p.Index)) }

// Log returns the partition's log, or an error when the partition is
// offline (its log could not be opened, or a write failed) or removed.
//
// In cluster mode only the leader serves clients: on a follower, or before
// this broker knows its role, Log answers NOT_LEADER_OR_FOLLOWER (the
// replication paths use ReplicaLog).
func (p *Partition) Log() (*wal.Log, error) {
	l, err := p.ReplicaLog()
	if err != nil {
		return nil, err
	}
	if p.rep != nil && Role(p.role.Load()) != RoleLeader {
		return nil, fmt.Errorf("%w: this broker does not lead %s", kerr.NotLeaderForPartition, p)
	}
	return l, nil
}

type errBox struct{ err error }

// Offline returns why the partition is out of service (its log could not
// be opened, or a write to it failed), or nil.
func (p *Partition) Offline() error {
	if b := p.offline.Load(); b != nil {
		return b.err
	}
	return nil
}

func (p *Partition) setOffline(err error) { p.offline.Store(&errBox{err}) }

// HighWatermark is the offset after the last committed record: the end of
// what consumers may read. On a single node it is the log end offset; in
// cluster mode, the smallest durable log end over the ISR (replica.go).
func (p *Partition) HighWatermark() int64 {
	if p.log == nil {
		return -1
	}
	if p.rep != nil {
		return p.hw.Load()
	}
	return p.log.EndOffset()
}

// LogStartOffset is the first offset still in the log: in the object
// store when it holds older data than the local log (tiered storage).
func (p *Partition) LogStartOffset() int64 {
	if p.log == nil {
		return -1
	}
	local := p.log.StartOffset()
	if pt := p.tier.Load(); pt != nil {
		if rs := pt.view.Load().start(); rs >= 0 && rs < local {
			return rs
		}
	}
	return local
}

// LocalStartOffset is the local log's first offset (below it, only
// tiered storage may hold records).
func (p *Partition) LocalStartOffset() int64 {
	if p.log == nil {
		return -1
	}
	return p.log.StartOffset()
}

// LeaderEpoch is the partition's leader epoch: on a single node, never a
// leader change, so always 0 (every stored batch carries it); in cluster
// mode, the epoch of the metadata's leader as this broker last learned it.
func (p *Partition) LeaderEpoch() int32 {
	if p.rep != nil {
		return p.leaderEpoch.Load()
	}
	return 0
}

// Hosted reports whether the partition's log lives on this broker (always,
// but in cluster mode).
func (p *Partition) Hosted() bool { return !p.notHosted }

// remove takes the partition out of service: its shard closes the log and
// moves the directory aside for deletion (stray: renames it to
// <dir>.<topic id>-stray and keeps it); waiting fetches are woken. With
// forget (its topic is deleted, and not stray), its objects in tiered
// storage go too.
func (p *Partition) remove(stray, forget bool) {
	p.removed.Store(true)
	var parked []pendingAck
	p.shard.Call(func() error {
		p.shard.disown(p)
		if r := p.rep; r != nil {
			// A leader moved away (reassignment) or deleted: the
			// produces waiting for their replication are answered
			// now, not left to a shard that no longer owns p.
			r.mu.Lock()
			parked, r.acks = r.acks, nil
			r.followers, r.pendingISR = nil, nil
			r.st.Role = RoleNone
			p.role.Store(int32(RoleNone))
			r.mu.Unlock()
		}
		if p.log == nil {
			return nil
		}
		err := p.log.Close()
		if forget && !stray {
			p.topic.eng.forgetRemote(p)
		}
		if stray {
			return errors.Join(err, keepAside(p.dir, p.topic.ID))
		}
		gone := p.dir + "." + p.topic.ID.String() + deleteSuffix
		if rerr := os.Rename(p.dir, gone); rerr != nil {
			err = errors.Join(err, rerr)
			os.RemoveAll(p.dir)
		} else {
			go os.RemoveAll(gone)
		}
		return err
	})
	for _, a := range parked {
		a.res.Err = fmt.Errorf("%w: %s: this broker no longer holds it", kerr.NotLeaderForPartition, p)
		a.req.Done(a.res)
	}
	p.notify()
}

// Waiter is a fetch parked until any of the partitions it watches gets new
// data (or it times out). Register it on each partition with Watch, wait
// on C (or be called on Wake), then Unwatch.
type Waiter struct {
	// C receives a value when a watched partition's high watermark moves
	// (when Wake is nil).
	C chan struct{}
	// Wake, when set, is called instead, on the goroutine that moved the
	// high watermark (a shard's, an event loop's on the direct-write
	// fast path, a follower fetch's), with no engine lock held. It must
	// not block: it may answer the fetch at once (a non-blocking send)
	// but must not wait for anything.
	Wake func()
}

// NewWaiter returns a waiter.
func NewWaiter() *Waiter { return &Waiter{C: make(chan struct{}, 1)} }

// Watch registers w for appends to p.
func (p *Partition) Watch(w *Waiter) {
	p.waitMu.Lock()
	p.waiters = append(p.waiters, w)
	p.waitMu.Unlock()
}

// Watchers is how many waiters watch p now.
func (p *Partition) Watchers() int {
	p.waitMu.Lock()
	defer p.waitMu.Unlock()
	return len(p.waiters)
}

// Unwatch removes w from p.
func (p *Partition) Unwatch(w *Waiter) {
	p.waitMu.Lock()
	for i, x := range p.waiters {
		if x == w {
			last := len(p.waiters) - 1
			p.waiters[i] = p.waiters[last]
			p.waiters[last] = nil
			p.waiters = p.waiters[:last]
			break
		}
	}
	p.waitMu.Unlock()
}

// notify wakes exactly the fetches waiting on this partition: their
// Wake functions run here, after waitMu is released (a woken fetch may
// Unwatch).
func (p *Partition) notify() {
	p.waitMu.Lock()
	if len(p.waiters) == 0 {
		p.waitMu.Unlock()
		return
	}
	var buf [8]func()
	wakes := buf[:0]
	for _, w := range p.waiters {
		if w.Wake != nil {
			wakes = append(wakes, w.Wake)
			continue
		}
		select {
		case w.C <- struct{}{}:
		default:
		}
	}
	p.waitMu.Unlock()
	for _, fn := range wakes {
		fn()
	}
}
