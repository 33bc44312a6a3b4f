package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/tiered"
	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// Tiered storage (KIP-405). The uploader goroutine
// (runTiering) copies each tiered partition's sealed, durable segments to
// the object store in offset order, one at a time: it records the copy
// as started in the partition's manifest (tiered.Manifest, a file in the
// partition directory), writes the segment's log object and its index
// object, then records it finished and tells the log (SetRemoteEnd),
// whose local retention may then delete the local copy. A copy that a
// crash or an error interrupted is an orphan: the next pass deletes its
// objects before anything else (a retry gets a new segment id), and
// again a while later (a put the dead copy sent may land late), so the
// store never keeps a segment twice. Remote segments expire by
// retention.ms and retention.bytes (the bytes count the remote segments
// and the local ones not yet copied): the manifest marks them
// delete-started, readers stop seeing them, their objects go, then
// their entry.
//
// Reads of offsets below the local log start and within the remote
// segments go through the engine's chunk cache (tiered.Cache): a fetch
// never waits for the store on its event loop; a miss starts a load and
// the fetch answers without those records, or parks until the load
// wakes it. A load that failed is answered KAFKA_STORAGE_ERROR
// (retriable) for a second.
//
// A manifest that cannot be read keeps its partition from tiering (every
// local segment is kept, logged); one that is missing means nothing was
// copied.
//
// In cluster mode the manifest is not a file: it lives in the metadata
// quorum, one SetRemoteLog record per change, which only the partition's
// leader at its leader epoch may write, each naming the version after
// the current one (ClusterHooks.SetRemoteLog). Every replica gets the
// image's version from the publisher (Partition.SetRemoteLog): readers
// see its segments, and local retention deletes what it covers on
// followers too. Only the leader (with its lease) copies and expires;
// a new leader goes on from the image's manifest, its first pass
// deleting the objects of a copy the old leader left unfinished. Every
// write of one pass carries the leader epoch the pass started at, and a
// pass stops when the leadership moves. A write whose answer was lost
// (it may be applied, now or later) leaves the uploader stale: it sends
// that same write again (Apply takes a write it already applied as a
// no-op), or takes the image's manifest once the image has decided that
// version, or once the leadership moved since (the write can no longer
// apply). Orphans are recorded (committed) before their objects are
// deleted.

// Errors of remote reads.
var (
	// errRemotePending: the bytes are being loaded; the partition's
	// waiters are woken when they are there.
	errRemotePending = errors.New("engine: remote data loading")
	// ErrNotRemote: the offset is not in the object store either.
	ErrNotRemote = errors.New("engine: offset not in remote storage")
)

// TierConfig configures tiered storage.
type TierConfig struct {
	// Store is the object store (nil: no tiered storage, and
	// remote.storage.enable is refused).
	Store tiered.Store
	// Prefix starts every object key.
	Prefix string
	// Interval is how often the uploader looks for segments to copy
	// and remote segments to expire (remote.log.manager.task.interval.ms).
	// 0: 5 s.
	Interval time.Duration
	// CacheBytes bounds the chunk cache of remote reads; ChunkBytes is
	// the size of one read. 0: 256 MiB and 1 MiB.
	CacheBytes, ChunkBytes int64
	// MaxBackoff bounds the wait between two failed copies of a
	// partition (doubling from Interval/5). 0: 10 s.
	MaxBackoff time.Duration
	// RequestTimeout is the store client's bound on one request (what
	// Store was made with); an interrupted copy's objects are deleted
	// again twice that long after. 0: 30 s.
	RequestTimeout time.Duration
}

// tier is the engine's tiered storage: the store, the cache, the
// uploader's counters.
type tier struct {
	cfg    TierConfig
	store  tiered.Store
	layout tiered.Layout
	cache  *tiered.Cache
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// orphanGrace is how long the objects of an interrupted copy are
	// deleted again before they are forgotten (twice the request
	// timeout: a put sent before the interruption has landed or failed
	// by then).
	orphanGrace time.Duration

	// held is what fetches hold of remote records until their
	// responses are written; at heldMax, remote reads wait.
	held    atomic.Int64
	heldMax int64

	// batchMax is the largest remote batch read through the chunks (a
	// larger one, up to remoteBatchMax, is read as one range).
	batchMax int64
	// indexes are the decoded index objects (a quarter of the cache).
	indexes *indexCache

	// forgets are the deletions of deleted partitions' objects.
	forgets sync.WaitGroup

	// Counters (metrics).
	copiedBytes, copiedSegments, copyErrors, deletedSegments, fetchedBytes atomic.Int64
}

// TierStats are tiered storage's counters.
type TierStats struct {
	CopiedBytes, CopiedSegments, CopyErrors, DeletedSegments int64
	// FetchedBytes are the record bytes fetches got from remote segments.
	FetchedBytes int64
	// Cache: hits, misses, bytes read from the store, failed reads,
	// bytes held.
	Cache tiered.CacheStats
}

// TierStats returns the counters, and false without tiered storage.
func (e *Engine) TierStats() (TierStats, bool) {
	if e.remote == nil {
		return TierStats{}, false
	}
	r := e.remote
	return TierStats{
		CopiedBytes: r.copiedBytes.Load(), CopiedSegments: r.copiedSegments.Load(), CopyErrors: r.copyErrors.Load(),
		DeletedSegments: r.deletedSegments.Load(), FetchedBytes: r.fetchedBytes.Load(), Cache: r.cache.Stats(),
	}, true
}

func newTier(cfg TierConfig) *tier {
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = 256 << 20
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &tier{
		heldMax: cfg.CacheBytes, orphanGrace: 2 * cfg.RequestTimeout,
		// Every chunk of a batch must be cached at once for the read to
		// see it whole: a batch of a small share of the cache is.
		batchMax: min(remoteBatchMax, cfg.CacheBytes/8),
		indexes:  newIndexCache(cfg.CacheBytes / 4),
		cfg:      cfg, store: cfg.Store, layout: tiered.Layout{Prefix: cfg.Prefix},
		cache: tiered.NewCache(cfg.Store, tiered.CacheConfig{ChunkBytes: cfg.ChunkBytes, MaxBytes: cfg.CacheBytes}),
		ctx:   ctx, cancel: cancel, done: make(chan struct{}),
	}
}

// close stops the uploader (an upload in flight is cancelled: its copy
// stays copy-started, an orphan the next start cleans) and the cache.
func (r *tier) close() {
	r.cancel()
	<-r.done
	r.forgets.Wait()
	r.cache.Close()
}

// partitionTier is one partition's tiered state. The manifest is the
// uploader's (under mu); readers use the published view.
type partitionTier struct {
	mu       sync.Mutex
	manifest *tiered.Manifest
	broken   error // the manifest could not be read: no tiering
	gone     bool  // the partition was deleted: its objects are going
	retryAt  time.Time
	failures int
	// clustered: the manifest is the metadata quorum's (cluster mode);
	// imaged is the latest the publisher handed in (nil: none yet).
	// epoch is the leader epoch of the uploader's pass. pending, when
	// set, is the write whose answer was lost (it may be applied, at
	// pendingEpoch): the uploader is stale until it knows.
	clustered    bool
	imaged       atomic.Pointer[tiered.Manifest]
	epoch        int32
	pending      *tiered.Manifest
	pendingEpoch int32
	// confirmed is the last remote segment a follower found in its own
	// store (confirmRemoteEnd); missing, the one it did not find.
	confirmed, missing string

	view atomic.Pointer[remoteView]
}

// remoteView is what readers see: the finished remote segments, in
// offset order, of one version of the manifest (immutable).
type remoteView struct {
	version int64
	segs    []tiered.RemoteSegment
}

// start is the first remote offset, -1 with none.
func (v *remoteView) start() int64 {
	if v == nil || len(v.segs) == 0 {
		return -1
	}
	return v.segs[0].Base
}

// end is the offset after the last remote segment (0 with none).
func (v *remoteView) end() int64 {
	if v == nil || len(v.segs) == 0 {
		return 0
	}
	return v.segs[len(v.segs)-1].End
}

// find returns the segment holding offset.
func (v *remoteView) find(offset int64) (tiered.RemoteSegment, bool) {
	if v == nil {
		return tiered.RemoteSegment{}, false
	}
	i := sort.Search(len(v.segs), func(i int) bool { return v.segs[i].End > offset })
	if i == len(v.segs) || v.segs[i].Base > offset {
		return tiered.RemoteSegment{}, false
	}
	return v.segs[i], true
}

func (pt *partitionTier) publish() { pt.publishOf(pt.manifest) }

// publishOf shows readers m's finished segments, unless they see a later
// version already (the uploader and the publisher both publish).
func (pt *partitionTier) publishOf(m *tiered.Manifest) {
	var segs []tiered.RemoteSegment
	for _, s := range m.Segments {
		if s.State == tiered.CopyFinished {
			segs = append(segs, s)
		}
	}
	next := &remoteView{version: m.Version, segs: segs}
	for {
		cur := pt.view.Load()
		if cur != nil && cur.version > next.version {
			return
		}
		if pt.view.CompareAndSwap(cur, next) {
			return
		}
	}
}

// loadTier reads p's manifest (at open when the partition's topic is
// tiered, else the first time the uploader, or in cluster mode the
// publisher, sees it tiered) and tells the log what is copied.
func (e *Engine) loadTier(p *Partition) {
	if e.remote == nil || p.log == nil {
		return
	}
	pt := &partitionTier{}
	if p.rep != nil {
		// The metadata's manifest: none until the publisher hands it in
		// (SetRemoteLog), and none there means nothing was copied. A
		// file in the directory is from before: never read.
		// The publisher and the uploader may both get here first: one
		// state wins, whatever the other had.
		pt.clustered = true
		pt.manifest = &tiered.Manifest{}
		pt.publish()
		p.tier.CompareAndSwap(nil, pt)
		return
	}
	m, err := tiered.LoadManifest(p.dir)
	if err == nil && m.TopicID != "" && m.TopicID != p.topic.ID.String() {
		// A deleted topic's, left by a copy that finished while its
		// directory was renamed away: its objects are that topic's
		// deletion's. Nothing of this topic was copied.
		e.logger.Warn("tiered storage: ignoring the manifest of another topic in the partition directory", "partition", p.String(), "manifest_topic_id", m.TopicID)
		m = &tiered.Manifest{}
	}
	if err != nil {
		pt.broken = err
		pt.manifest = &tiered.Manifest{}
		e.logger.Error("tiered storage off for this partition: its manifest cannot be read; every local segment is kept", "partition", p.String(), "err", err)
	} else {
		pt.manifest = m
	}
	pt.publish()
	// What was copied stays copied even when retention expired it all
	// since (the view is empty then): never copied again.
	if end := max(pt.view.Load().end(), pt.manifest.CopiedEnd); end > 0 {
		p.log.SetRemoteEnd(end)
	}
	p.tier.Store(pt)
}

// tierOf returns p's tiered state, creating it (a topic that became
// tiered after its partitions opened).
func (e *Engine) tierOf(p *Partition) *partitionTier {
	if pt := p.tier.Load(); pt != nil {
		return pt
	}
	e.loadTier(p)
	return p.tier.Load()
}

// runTiering is the uploader's goroutine.
func (e *Engine) runTiering() {
	r := e.remote
	defer close(r.done)
	for {
		more := e.tierPass()
		wait := r.cfg.Interval
		if more {
			wait = 0 // a backlog: go on after the other partitions had their turn
		}
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// copiesPerTurn is how many segments one partition copies before the
// next partition gets its turn (and a deletion of its topic, pt.mu).
const copiesPerTurn = 4

// tierPass copies and expires what is due on every tiered partition. It
// reports whether some partition has more to copy now.
func (e *Engine) tierPass() (more bool) {
	r := e.remote
	storeFailed := false
	for _, t := range e.Topics() {
		if t.Internal || t.Deleted() || !t.Config().RemoteStorage() {
			continue
		}
		for _, p := range t.Partitions() {
			if r.ctx.Err() != nil {
				return false
			}
			if !p.Hosted() || p.log == nil || p.removed.Load() || p.Offline() != nil {
				continue
			}
			pt := e.tierOf(p)
			if pt == nil || pt.broken != nil || e.now().Before(pt.retryAt) {
				continue
			}
			if pt.clustered && !e.leadsTiered(p) {
				// One failed look at the store (down, slow) is enough for
				// this pass: the rest of the followed partitions wait.
				if err := e.followImage(p, pt, !storeFailed); err != nil {
					storeFailed = true
					e.logger.Warn("tiered storage: cannot confirm a followed partition's copies in the store; its local copies are kept meanwhile", "partition", p.String(), "err", err)
				}
				continue
			}
			pmore, err := e.tierPartition(p, pt, t.Config())
			if err != nil {
				if r.ctx.Err() != nil {
					return false
				}
				r.copyErrors.Add(1)
				pt.failures++
				wait := min(r.cfg.Interval/5<<min(pt.failures, 16), r.cfg.MaxBackoff)
				pt.retryAt = e.now().Add(wait)
				e.logger.Warn("tiered storage: will retry", "partition", p.String(), "in", wait, "err", err)
				continue
			}
			more = more || pmore
			pt.failures, pt.retryAt = 0, time.Time{}
		}
	}
	return more
}

// errRemoved: the partition was deleted while it was being copied.
var errRemoved = errors.New("engine: partition deleted")

// tierPartition cleans p's orphans, copies up to copiesPerTurn of its
// segments that are due, and expires its remote segments past retention;
// more says whether it has more to copy.
//
// Copies go in offset order with no gap: the next one must start where
// the store ends (or, with nothing copied, at the local log start). A
// segment that does not (its start was merged into one that was
// copied, or offsets are missing locally) stops the partition's copies,
// logged at every try: nothing is deleted, and the local disk keeps
// everything, until someone looks.
func (e *Engine) tierPartition(p *Partition, pt *partitionTier, cfg *TopicConfig) (more bool, err error) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.gone || p.removed.Load() {
		return false, nil
	}
	if pt.clustered {
		pt.epoch = p.LeaderEpoch()
		if err := e.settle(p, pt, true); err != nil {
			return false, err
		}
	}
	if err := e.cleanOrphans(p, pt); err != nil {
		return false, err
	}
	l := p.log
	// The copied end never moves back, even when retention expired every
	// remote segment (the view is empty then).
	next := max(pt.view.Load().end(), l.RemoteEnd(), l.StartOffset(), pt.manifest.CopiedEnd)
	segs := l.CopyableSegments(next, p.LastStableOffset(), copiesPerTurn+1)
	defer func() {
		for _, ss := range segs {
			ss.Release()
		}
	}()
	more, cerr := e.copySegments(p, pt, segs, next)
	// Retention of the remote segments goes on whatever the copies do.
	if err := e.expireRemote(p, pt, cfg); err != nil {
		return false, errors.Join(cerr, err)
	}
	return more, cerr
}

// copySegments copies segs in order from next, up to copiesPerTurn
// (uploader, pt.mu held); more says whether it stopped with more to do.
func (e *Engine) copySegments(p *Partition, pt *partitionTier, segs []*wal.SealedSegment, next int64) (more bool, err error) {
	copied := 0
	for _, ss := range segs {
		if e.remote.ctx.Err() != nil {
			return false, nil
		}
		if copied == copiesPerTurn {
			return true, nil
		}
		if ss.Base != next {
			return false, fmt.Errorf("the next segment to copy starts at %d, not at %d where the copies end: copies stop here (is the topic compacted, or were offsets lost?)", ss.Base, next)
		}
		if ss.Size == 0 {
			continue // nothing to copy; its end is its base
		}
		if err := e.copySegment(p, pt, ss); err != nil {
			return false, err
		}
		next = ss.End
		copied++
	}
	return false, nil
}

// cleanOrphans deletes the objects of copies that never finished and
// finishes deletions that were started (uploader, pt.mu held).
func (e *Engine) cleanOrphans(p *Partition, pt *partitionTier) error {
	m := pt.manifest
	now := e.now().UnixMilli()
	// First the unfinished segments become orphans, recorded before
	// their objects go: a manifest never names as finished a segment
	// whose objects were deleted, whoever writes it next.
	moved := &tiered.Manifest{CopiedEnd: m.CopiedEnd, Orphans: slices.Clone(m.Orphans)}
	var gone []tiered.RemoteSegment
	for _, s := range m.Segments {
		if s.State == tiered.CopyFinished {
			moved.Segments = append(moved.Segments, s)
			continue
		}
		// Kept a while: a put the interrupted copy sent may still land
		// (the store answers requests whose sender is gone).
		s.State, s.DeletedAt = tiered.DeleteStarted, now
		moved.Orphans = append(moved.Orphans, s)
		gone = append(gone, s)
	}
	if len(gone) > 0 {
		if err := e.saveManifest(p, pt, moved); err != nil {
			return err
		}
		pt.manifest = moved
		for _, s := range gone {
			if err := e.deleteObjects(p, s); err != nil {
				return err
			}
			e.logger.Info("tiered storage: removed an unfinished segment", "partition", p.String(), "base", s.Base, "id", s.ID)
		}
	}
	// Then the orphans past their grace are deleted again and forgotten.
	m = pt.manifest
	kept := &tiered.Manifest{CopiedEnd: m.CopiedEnd, Segments: slices.Clone(m.Segments)}
	forgot := false
	for _, s := range m.Orphans {
		if now-s.DeletedAt < e.remote.orphanGrace.Milliseconds() {
			kept.Orphans = append(kept.Orphans, s)
			continue
		}
		if err := e.deleteObjects(p, s); err != nil {
			return err
		}
		forgot = true
	}
	if !forgot {
		return nil
	}
	if err := e.saveManifest(p, pt, kept); err != nil {
		return err
	}
	pt.manifest = kept
	return nil
}

// saveManifest writes m as p's manifest, stamped with its topic's id and
// the version after pt's: a file on a single node, a SetRemoteLog
// record through the controller in cluster mode, at the pass's leader
// epoch (uploader, pt.mu held).
func (e *Engine) saveManifest(p *Partition, pt *partitionTier, m *tiered.Manifest) error {
	m.TopicID = p.topic.ID.String()
	m.Version = pt.manifest.Version + 1
	if !pt.clustered {
		return m.Save(p.dir, e.cfg.Perm)
	}
	if err := e.checkLeads(p, pt); err != nil {
		return err
	}
	if err := e.writeRemoteLog(p, pt.epoch, m); err != nil {
		// Refused (a new leader, a version written already) or lost on
		// the way: settle finds out before the next write. One that can
		// never apply (not sent, too large, not a manifest) is no
		// pending write: resending it would stop the partition's
		// retention for good.
		if !errors.Is(err, errNeverApplies) && !errors.Is(err, kerr.InvalidRequest) {
			pt.pending, pt.pendingEpoch = m, pt.epoch
		}
		return err
	}
	return nil
}

// errNeverApplies wraps a manifest write that was not sent.
var errNeverApplies = errors.New("tiered storage: the remote log manifest was not sent")

// writeRemoteLog sends m to the metadata as p's manifest at leaderEpoch.
func (e *Engine) writeRemoteLog(p *Partition, leaderEpoch int32, m *tiered.Manifest) error {
	h := e.clusterHooks()
	if h == nil || h.SetRemoteLog == nil {
		return fmt.Errorf("%w: no way to the metadata quorum", errNeverApplies)
	}
	b, err := m.Encode()
	if err != nil {
		return fmt.Errorf("%w: %w", errNeverApplies, err)
	}
	if err := h.SetRemoteLog(p.topic.ID, p.Index, leaderEpoch, m.Version, b); err != nil {
		return fmt.Errorf("tiered storage: write the remote log manifest (version %d): %w", m.Version, err)
	}
	return nil
}

// errNotLeading: the pass's leadership ended (cluster mode).
var errNotLeading = errors.New("tiered storage: no longer the partition's leader at the epoch this pass started at")

// checkLeads refuses to go on with a pass (a write, a put, a delete)
// once this broker no longer leads p at the pass's epoch (cluster mode).
func (e *Engine) checkLeads(p *Partition, pt *partitionTier) error {
	if pt.clustered && (!e.leadsTiered(p) || p.LeaderEpoch() != pt.epoch) {
		return errNotLeading
	}
	return nil
}

// leadsTiered reports whether this broker copies and expires p's remote
// segments (cluster mode): it leads p, with its lease.
func (e *Engine) leadsTiered(p *Partition) bool {
	if p.Role() != RoleLeader {
		return false
	}
	h := e.clusterHooks()
	return h == nil || h.MayLead == nil || h.MayLead()
}

// errUnsettled: a write's fate is unknown yet.
var errUnsettled = errors.New("tiered storage: waiting for the metadata to show whether the last change of the remote log manifest was applied")

// settle makes pt's manifest the metadata's (cluster mode, uploader,
// pt.mu held): the image's when it is newer; after a write whose answer
// was lost, the image's once it has decided that version or the
// leadership moved since the write (it can no longer apply), else, when
// leading, the same write sent again (taken as a no-op if it was
// applied). errUnsettled: not known yet.
func (e *Engine) settle(p *Partition, pt *partitionTier, leading bool) error {
	// The epoch before the image: the publisher hands in the image before
	// the role, so an epoch seen here comes with its image or a later one.
	epoch := p.LeaderEpoch()
	im := pt.imaged.Load()
	if pt.pending == nil {
		if im != nil && im.Version > pt.manifest.Version {
			pt.manifest = im.Clone()
		}
		return nil
	}
	switch {
	case im != nil && im.Version >= pt.pending.Version, epoch != pt.pendingEpoch:
		// (The publisher hands in the image's manifest before the role
		// of the same image: after a leadership move, imaged holds every
		// write applied before it, this uploader's own included.)
		if im != nil && im.Version >= pt.manifest.Version {
			pt.manifest = im.Clone()
		}
	case leading:
		if err := e.writeRemoteLog(p, pt.pendingEpoch, pt.pending); err != nil {
			return err
		}
		pt.manifest = pt.pending
	default:
		return errUnsettled
	}
	pt.pending = nil
	pt.publish()
	if leading {
		// (A follower's copied end moves in confirmRemoteEnd.)
		if end := max(pt.view.Load().end(), pt.manifest.CopiedEnd); end > 0 {
			p.log.SetRemoteEnd(end)
		}
	}
	return nil
}

// followImage keeps a replica's uploader state on the image's manifest
// while it does not lead (what a deletion of the topic deletes), and
// lets its local retention delete what that manifest covers once its own
// store shows it.
func (e *Engine) followImage(p *Partition, pt *partitionTier, confirm bool) error {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if err := e.settle(p, pt, false); err != nil && !errors.Is(err, errUnsettled) {
		e.logger.Warn("tiered storage", "partition", p.String(), "err", err)
	}
	if !confirm {
		return nil
	}
	return e.confirmRemoteEnd(p, pt)
}

// confirmRemoteEnd moves a follower's copied end (Log.SetRemoteEnd: its
// local retention deletes below it) to the end of the manifest it
// follows, once this broker's own store holds the index object of the
// last finished segment: a broker given another store than the leader's
// keeps its local copies, and says so once per segment (uploader, pt.mu
// held). The error is the store's, but for a missing object.
func (e *Engine) confirmRemoteEnd(p *Partition, pt *partitionTier) error {
	m := pt.manifest
	end := m.CopiedEnd
	if end <= p.log.RemoteEnd() {
		return nil
	}
	var last *tiered.RemoteSegment
	for i := range m.Segments {
		if m.Segments[i].State == tiered.CopyFinished {
			last = &m.Segments[i]
		}
	}
	if last != nil && last.ID != pt.confirmed {
		r := e.remote
		keys := r.layout.Keys(p.topic.Name, p.topic.ID, p.Index, last.Base, last.ID)
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.RequestTimeout)
		_, err := r.store.GetRange(ctx, keys.Index, 0, 1)
		cancel()
		switch {
		case errors.Is(err, tiered.ErrNotFound):
			if pt.missing != last.ID {
				pt.missing = last.ID
				e.logger.Warn("tiered storage: this broker's store does not hold the last remote segment the metadata names (expired since, or its --remote-storage-* flags differ from the leader's): its local copies are kept", "partition", p.String(), "base", last.Base, "id", last.ID, "key", keys.Index)
			}
			return nil
		case err != nil:
			return err
		}
		pt.confirmed = last.ID
	}
	p.log.SetRemoteEnd(end)
	return nil
}

// SetRemoteLog hands the partition the metadata's manifest of its remote
// segments, at version (cluster mode; the publisher calls it for every
// replica, and a version it has is a no-op): readers see its finished
// segments, and on a follower local retention then deletes what they
// cover (confirmRemoteEnd).
func (p *Partition) SetRemoteLog(version int64, b []byte) {
	e := p.topic.eng
	if e.remote == nil && version > 0 && p.log != nil {
		e.noStore.Do(func() {
			e.logger.Error("tiered storage: this broker hosts replicas of tiered topics but has no object store (--remote-storage-endpoint): it cannot read their remote data, nor delete their local copies; give every broker the same store", "partition", p.String())
		})
	}
	if e.remote == nil || p.log == nil || p.rep == nil || version <= 0 {
		return
	}
	pt := e.tierOf(p)
	if pt == nil || !pt.clustered {
		return
	}
	if cur := pt.imaged.Load(); cur != nil && cur.Version >= version {
		return
	}
	m, err := tiered.DecodeManifest(b)
	if err == nil && m.TopicID != p.topic.ID.String() {
		err = fmt.Errorf("%w: it names topic id %q", tiered.ErrBadManifest, m.TopicID)
	}
	if err != nil {
		// The controller checked it before proposing it: never seen.
		e.logger.Error("tiered storage: the metadata's remote log manifest does not decode; this replica ignores it", "partition", p.String(), "version", version, "err", err)
		return
	}
	m.Version = version
	pt.imaged.Store(m)
	pt.publishOf(m)
	// (Local retention follows on the uploader's goroutine, once this
	// broker's store shows the copies: confirmRemoteEnd.)
}

// deleteObjects removes a remote segment's objects and its cached
// chunks.
func (e *Engine) deleteObjects(p *Partition, s tiered.RemoteSegment) error {
	return e.deleteSegmentObjects(p.topic.Name, p.topic.ID, p.Index, s)
}

// deleteSegmentObjects removes the objects of segment s of a partition,
// its cached chunks and its decoded index.
func (e *Engine) deleteSegmentObjects(topic string, id TopicID, partition int32, s tiered.RemoteSegment) error {
	r := e.remote
	keys := r.layout.Keys(topic, id, partition, s.Base, s.ID)
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	for _, k := range []string{keys.Index, keys.Log} {
		if err := r.store.Delete(ctx, k); err != nil {
			return err
		}
		r.cache.Forget(k)
	}
	r.indexes.forget(s.ID)
	return nil
}

// copySegment copies one sealed segment (not empty): started in the manifest, the
// log object, the index object, finished in the manifest, then the log
// may drop its local copy (uploader, pt.mu held).
func (e *Engine) copySegment(p *Partition, pt *partitionTier, ss *wal.SealedSegment) error {
	r := e.remote
	ix, err := tiered.BuildIndex(ss, ss.Base, ss.End, ss.Size, ss.Aborted)
	if err != nil {
		return err
	}
	if ix.MaxBatch > remoteBatchMax {
		// It could not be read back: it stays local, and so does
		// everything after it.
		return fmt.Errorf("segment %d holds a batch of %d bytes; remote reads take batches up to %d: copies stop here", ss.Base, ix.MaxBatch, remoteBatchMax)
	}
	idx := ix.Encode()
	seg := tiered.RemoteSegment{
		ID: tiered.NewSegmentID(), State: tiered.CopyStarted, Base: ss.Base, End: ss.End,
		Size: ss.Size, IndexSize: int64(len(idx)), MaxTimestamp: ss.MaxTimestamp, Aborted: ss.Aborted,
	}
	started := pt.manifest.Clone()
	started.Segments = append(started.Segments, seg)
	if p.removed.Load() {
		return errRemoved
	}
	if err := e.saveManifest(p, pt, started); err != nil {
		return err
	}
	pt.manifest = started
	keys := r.layout.Keys(p.topic.Name, p.topic.ID, p.Index, seg.Base, seg.ID)
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Minute)
	defer cancel()
	// (In cluster mode a put stops here once the leadership moved: the
	// new leader deletes what this copy wrote, and what lands later is
	// deleted again after orphanGrace.)
	if err := e.checkLeads(p, pt); err != nil {
		return err
	}
	if err := r.store.Put(ctx, keys.Log, io.NewSectionReader(ss, 0, ss.Size), ss.Size); err != nil {
		return err
	}
	if err := e.checkLeads(p, pt); err != nil {
		return err
	}
	if err := r.store.Put(ctx, keys.Index, bytes.NewReader(idx), int64(len(idx))); err != nil {
		return err
	}
	finished := pt.manifest.Clone()
	finished.Segments[len(finished.Segments)-1].State = tiered.CopyFinished
	finished.CopiedEnd = max(finished.CopiedEnd, seg.End)
	if p.removed.Load() {
		// Its directory may be another topic's now: the objects are
		// the deletion's (forgetRemote) to remove.
		return errRemoved
	}
	if err := e.saveManifest(p, pt, finished); err != nil {
		return err
	}
	pt.manifest = finished
	pt.publish()
	p.log.SetRemoteEnd(seg.End)
	r.copiedBytes.Add(seg.Size)
	r.copiedSegments.Add(1)
	e.logger.Info("tiered storage: copied segment", "partition", p.String(), "base", seg.Base, "end", seg.End, "bytes", seg.Size, "id", seg.ID)
	return nil
}

// expireRemote deletes the oldest remote segments past retention.ms or
// retention.bytes (uploader, pt.mu held). The bytes count the remote
// segments and the local data not yet copied.
func (e *Engine) expireRemote(p *Partition, pt *partitionTier, cfg *TopicConfig) error {
	if !cfg.Delete() {
		return nil
	}
	retBytes, retAge := cfg.long("retention.bytes"), msDuration(cfg.long("retention.ms"))
	v := pt.view.Load()
	total := p.log.SizeFrom(v.end())
	for _, s := range v.segs {
		total += s.Size
	}
	now := e.now().UnixMilli()
	var victims []tiered.RemoteSegment
	for _, s := range v.segs {
		oversize := retBytes > 0 && total-s.Size >= retBytes
		expired := retAge > 0 && s.MaxTimestamp >= 0 && now-s.MaxTimestamp > retAge.Milliseconds()
		if !oversize && !expired {
			break
		}
		victims = append(victims, s)
		total -= s.Size
	}
	if len(victims) == 0 {
		return nil
	}
	marked := pt.manifest.Clone()
	for i := range victims {
		marked.Segments[i].State = tiered.DeleteStarted
	}
	if err := e.saveManifest(p, pt, marked); err != nil {
		return err
	}
	pt.manifest = marked
	pt.publish()
	for _, s := range victims {
		if err := e.deleteObjects(p, s); err != nil {
			return err
		}
		e.remote.deletedSegments.Add(1)
		e.logger.Info("tiered storage: retention deleted remote segment", "partition", p.String(), "base", s.Base, "end", s.End, "bytes", s.Size)
	}
	left := marked.Clone()
	left.Segments = left.Segments[len(victims):]
	if err := e.saveManifest(p, pt, left); err != nil {
		return err
	}
	pt.manifest = left
	return nil
}

// RemoteEnd is the offset after the last segment in the object store
// (KIP-1005's latest tiered offset is one less), and false when none is.
func (p *Partition) RemoteEnd() (int64, bool) {
	if pt := p.tier.Load(); pt != nil {
		if v := pt.view.Load(); len(v.segs) > 0 {
			return v.end(), true
		}
	}
	return 0, false
}

// RemoteRead is what ReadRemote found: whole batches from the object
// store, as slices of the cache's chunks (immutable: a chunk the cache
// evicts stays valid for whoever holds it).
type RemoteRead struct {
	// Parts are the batches' bytes, in order; Bytes is their length.
	Parts [][]byte
	Bytes int64
	// FirstOffset is the first batch's base offset, NextOffset the
	// offset after the last batch.
	FirstOffset, NextOffset int64
	// Aborted are the aborted transactions whose markers the segment
	// read holds (AbortedTxnsFor counts them).
	Aborted []wal.AbortedTxn
	held    *atomic.Int64
	quota   *RemoteQuota
}

// Release gives the read's bytes back to the bound on remote bytes held
// by fetches (call it once the response is written or dropped).
func (r *RemoteRead) Release() {
	if r.held != nil {
		r.held.Add(-r.Bytes)
		r.quota.held.Add(-r.Bytes)
	}
	*r = RemoteRead{}
}

// Bounds of remote reads: the bytes one partition's read takes (beyond
// its first batch), the largest batch a remote segment may hold (a
// segment with a larger one is not copied), and (tier.held, bounded by
// the cache size) the bytes all fetches hold until their responses are
// written.
const (
	remoteReadMax  = 4 << 20
	remoteBatchMax = 64 << 20 // and at most an eighth of the cache (tier.batchMax)
)

// ReadRemote reads the batches from offset on out of the object store,
// as wal.Log.Read does locally: whole batches, at least one, more while
// they fit maxBytes, none at or past upTo, within one remote segment. It
// never waits for the store: with the bytes not cached it returns an
// empty read after starting their load, whose end wakes the partition's
// watchers. ErrNotRemote: the store does not hold offset. A failed load
// or damaged remote bytes: KAFKA_STORAGE_ERROR.
func (p *Partition) ReadRemote(offset int64, maxBytes int64, upTo int64, quota *RemoteQuota) (RemoteRead, error) {
	e := p.topic.eng
	pt := p.tier.Load()
	if e.remote == nil || pt == nil {
		return RemoteRead{}, ErrNotRemote
	}
	seg, ok := pt.view.Load().find(offset)
	if !ok {
		return RemoteRead{}, ErrNotRemote
	}
	r := e.remote
	if r.held.Load() >= r.heldMax || quota.held.Load() >= r.heldMax/remoteQuotaShare {
		// Fetches hold as much as the cache, or this connection its
		// share (a client that does not read its responses): this one
		// answers without these records (the consumer asks again).
		return RemoteRead{}, nil
	}
	out, err := e.readRemote(p, pt, seg, offset, min(maxBytes, remoteReadMax), upTo, (*partitionWaker)(p))
	if errors.Is(err, errRemotePending) || errors.Is(err, tiered.ErrBusy) {
		return RemoteRead{}, nil
	}
	if err != nil {
		return RemoteRead{}, fmt.Errorf("%w: %s: remote segment %d: %w", kerr.KafkaStorageError, p, seg.Base, err)
	}
	r.fetchedBytes.Add(out.Bytes)
	if out.Bytes > 0 {
		out.held, out.quota = &r.held, quota
		r.held.Add(out.Bytes)
		quota.held.Add(out.Bytes)
		// Its segment's aborted transactions: the fetch's list must have
		// them even if retention expires the segment meanwhile.
		out.Aborted = seg.Aborted
	}
	return out, nil
}

// RemoteQuota counts the remote bytes one client's fetches hold until
// their responses are written (a connection's): at most a sixteenth of
// the cache, so that a client that stops reading cannot hold them all.
type RemoteQuota struct{ held atomic.Int64 }

// remoteQuotaShare: a quota is the cache's size over this.
const remoteQuotaShare = 16

// readRemote reads batches of seg from offset; wake is told when a
// missing piece arrives. errRemotePending: something is being loaded
// (remoteWait turns it into a wait, for ListOffsets).
func (e *Engine) readRemote(p *Partition, pt *partitionTier, seg tiered.RemoteSegment, offset, maxBytes, upTo int64, wake tiered.Waker) (RemoteRead, error) {
	r := e.remote
	keys := r.layout.Keys(p.topic.Name, p.topic.ID, p.Index, seg.Base, seg.ID)
	ix, err := e.remoteIndex(pt, seg, keys, wake)
	if err != nil {
		return RemoteRead{}, err
	}
	entry := ix.Lookup(offset)
	pos, next := entry.Pos, entry.Offset
	first := true
	var out RemoteRead
	var hdr [batch.HeaderSize]byte
	var pieces [][]byte
	for pos < seg.Size {
		// A batch read as one range has its header in it (the header's
		// chunk may be what the range evicted).
		big := r.cache.Peek(tiered.ChunkKey{Object: keys.Log, Index: tiered.RangeRead, Off: pos})
		if len(big) >= batch.HeaderSize {
			copy(hdr[:], big)
		} else if pieces, err = r.pieces(keys.Log, seg.Size, pos, batch.HeaderSize, wake, pieces[:0]); err != nil {
			break
		} else {
			joinPieces(hdr[:0], pieces)
		}
		h, cerr := tiered.CheckHeader(hdr[:], pos, seg.Size, next, seg.End)
		if cerr == nil && first && h.BaseOffset != entry.Offset {
			cerr = fmt.Errorf("the index says offset %d is at %d, the batch there starts at %d", entry.Offset, pos, h.BaseOffset)
		}
		if cerr != nil {
			return RemoteRead{}, cerr
		}
		first = false
		next = h.LastOffset() + 1
		if h.LastOffset() < offset {
			pos += int64(h.Size())
			continue
		}
		size := int64(h.Size())
		if size > remoteBatchMax {
			return RemoteRead{}, fmt.Errorf("batch at %d (offset %d) of %d bytes: remote batches are read up to %d", pos, h.BaseOffset, size, remoteBatchMax)
		}
		if h.BaseOffset >= upTo || (out.Bytes > 0 && out.Bytes+size > maxBytes) {
			break
		}
		n := len(out.Parts)
		if size > r.batchMax {
			// Too large to be sure of all its chunks at once: read
			// whole, as one range.
			b := big
			if b == nil {
				if b, err = r.cache.Chunk(tiered.ChunkKey{Object: keys.Log, Index: tiered.RangeRead, Off: pos}, pos+size, wake); err != nil {
					break
				}
			}
			if b == nil {
				err = errRemotePending
				break
			}
			if int64(len(b)) != size {
				return RemoteRead{}, fmt.Errorf("batch at %d: %d bytes read, %d expected", pos, len(b), size)
			}
			out.Parts = append(out.Parts, b)
		} else if out.Parts, err = r.pieces(keys.Log, seg.Size, pos, size, wake, out.Parts); err != nil {
			break
		}
		if batch.ChecksumParts(out.Parts[n:]) != h.CRC {
			return RemoteRead{}, fmt.Errorf("batch at %d (offset %d): CRC32C mismatch", pos, h.BaseOffset)
		}
		if out.Bytes == 0 {
			out.FirstOffset = h.BaseOffset
		}
		out.Bytes += size
		out.NextOffset = next
		pos += size
	}
	if out.Bytes > 0 {
		// A sequential reader comes back for what follows: the next
		// chunks load while it consumes these.
		cs := r.cache.ChunkBytes()
		for i := int64(1); i <= prefetchChunks; i++ {
			r.cache.Prefetch(tiered.ChunkKey{Object: keys.Log, Index: (pos-1)/cs + i}, seg.Size)
		}
		return out, nil
	}
	if err != nil {
		return RemoteRead{}, err
	}
	return out, nil
}

// prefetchChunks is how many chunks past a read are loaded ahead.
const prefetchChunks = 2

// joinPieces appends the pieces to dst (a header that straddles chunks).
func joinPieces(dst []byte, pieces [][]byte) []byte {
	for _, b := range pieces {
		dst = append(dst, b...)
	}
	return dst
}

// remoteIndex returns seg's decoded index object, loading it through the
// cache.
func (e *Engine) remoteIndex(pt *partitionTier, seg tiered.RemoteSegment, keys tiered.SegmentKeys, wake tiered.Waker) (*tiered.Index, error) {
	ix := e.remote.indexes.get(seg.ID)
	if ix != nil {
		return ix, nil
	}
	b, err := e.remote.cache.Chunk(tiered.ChunkKey{Object: keys.Index, Index: tiered.WholeObject}, seg.IndexSize, wake)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, errRemotePending
	}
	ix, err = tiered.DecodeIndex(b)
	if err != nil {
		return nil, err
	}
	if ix.Base != seg.Base || ix.End != seg.End || ix.Size != seg.Size {
		return nil, fmt.Errorf("%w: it describes [%d, %d) of %d bytes, the manifest [%d, %d) of %d", tiered.ErrBadIndex, ix.Base, ix.End, ix.Size, seg.Base, seg.End, seg.Size)
	}
	e.remote.indexes.put(seg.ID, ix, seg.IndexSize)
	return ix, nil
}

// pieces appends to dst the n bytes of object (of size bytes) at off,
// as slices of the cached chunks; errRemotePending when one is loading
// (its load started). On an error dst comes back as it was.
func (r *tier) pieces(object string, size, off, n int64, wake tiered.Waker, dst [][]byte) ([][]byte, error) {
	cs := r.cache.ChunkBytes()
	if off+n > size {
		return dst, fmt.Errorf("range %d+%d past the object's %d bytes", off, n, size)
	}
	keep := len(dst)
	pending := false
	for at := off; at < off+n; {
		i := at / cs
		c, err := r.cache.Chunk(tiered.ChunkKey{Object: object, Index: i}, size, wake)
		if err != nil {
			return dst[:keep], err
		}
		end := min((i+1)*cs, off+n)
		if c == nil {
			pending = true
		} else if !pending {
			if int64(len(c)) < end-i*cs {
				return dst[:keep], fmt.Errorf("chunk %d of %s has %d bytes", i, object, len(c))
			}
			dst = append(dst, c[at-i*cs:end-i*cs:end-i*cs])
		}
		at = end
	}
	if pending {
		return dst[:keep], errRemotePending
	}
	return dst, nil
}

// remoteWait runs read until it stops being pending (woken by the
// loads it starts; a busy cache is asked again shortly) or ctx ends.
func remoteWait[T any](ctx context.Context, read func(wake tiered.Waker) (T, error)) (T, error) {
	ch := make(chanWaker, 1)
	for {
		v, err := read(ch)
		var wait <-chan time.Time
		switch {
		case errors.Is(err, tiered.ErrBusy):
			wait = time.After(20 * time.Millisecond)
		case errors.Is(err, errRemotePending):
			// Woken by the load; a look now and then regardless.
			wait = time.After(100 * time.Millisecond)
		default:
			return v, err
		}
		select {
		case <-ch:
		case <-wait:
		case <-ctx.Done():
			return v, fmt.Errorf("%w: reading remote storage: %w", kerr.KafkaStorageError, ctx.Err())
		}
	}
}

// chanWaker wakes a waiting goroutine (a send that never blocks).
type chanWaker chan struct{}

// Wake implements tiered.Waker.
func (w chanWaker) Wake() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// partitionWaker wakes the fetches parked on a partition (one waker per
// partition, so the cache tells it once per load).
type partitionWaker Partition

// Wake implements tiered.Waker.
func (w *partitionWaker) Wake() { (*Partition)(w).notify() }

// RemoteOffsetForTime finds, in the object store, the first record whose
// timestamp is at or after ts (ListOffsets): ok false when no remote
// segment has one. It waits for the store (bounded by ctx).
func (p *Partition) RemoteOffsetForTime(ctx context.Context, ts int64) (wal.TimestampOffset, bool, error) {
	e := p.topic.eng
	pt := p.tier.Load()
	if e.remote == nil || pt == nil {
		return wal.TimestampOffset{}, false, nil
	}
	v := pt.view.Load()
	for _, seg := range v.segs {
		if seg.MaxTimestamp < ts {
			continue
		}
		keys := e.remote.layout.Keys(p.topic.Name, p.topic.ID, p.Index, seg.Base, seg.ID)
		ix, err := remoteWait(ctx, func(wake tiered.Waker) (*tiered.Index, error) { return e.remoteIndex(pt, seg, keys, wake) })
		if err != nil {
			return wal.TimestampOffset{}, false, err
		}
		entry, ok := ix.LookupTime(ts)
		if !ok {
			continue // the manifest's maximum is a later batch's: none here after all
		}
		for off := entry.Offset; off < seg.End; {
			rd, err := remoteWait(ctx, func(wake tiered.Waker) (RemoteRead, error) {
				return e.readRemote(p, pt, seg, off, 1<<20, seg.End, wake)
			})
			if err != nil {
				return wal.TimestampOffset{}, false, fmt.Errorf("%w: %w", kerr.KafkaStorageError, err)
			}
			if rd.Bytes == 0 {
				break
			}
			if got, ok, err := firstAtOrAfter(joinPieces(nil, rd.Parts), ts); err != nil || ok {
				return got, ok, err
			}
			off = rd.NextOffset
		}
	}
	return wal.TimestampOffset{}, false, nil
}

// firstAtOrAfter finds the first record at or after ts in whole batches.
func firstAtOrAfter(b []byte, ts int64) (wal.TimestampOffset, bool, error) {
	for len(b) >= batch.HeaderSize {
		h, err := batch.ParseHeader(b)
		if err != nil {
			return wal.TimestampOffset{}, false, err
		}
		if h.Length < 0 || h.Size() > len(b) {
			return wal.TimestampOffset{}, false, fmt.Errorf("%w: a remote batch of %d bytes in %d", kerr.KafkaStorageError, h.Size(), len(b))
		}
		one := b[:h.Size()]
		b = b[h.Size():]
		if h.MaxTimestamp >= ts {
			got, err := wal.RecordAtOrAfter(one, &h, ts)
			return got, err == nil, err
		}
	}
	return wal.TimestampOffset{}, false, nil
}

// RemoteMaxTimestamp is the largest batch timestamp in the object store
// (-1: none).
func (p *Partition) RemoteMaxTimestamp() int64 {
	mt := int64(-1)
	if pt := p.tier.Load(); pt != nil {
		for _, s := range pt.view.Load().segs {
			mt = max(mt, s.MaxTimestamp)
		}
	}
	return mt
}

// remoteAborted appends the aborted transactions of the remote segments
// whose data may lie in [from, upTo) (see wal.Log.AbortedTxns). Those of
// segments still local too are also in the local log's list:
// AbortedTxns drops the duplicates.
func (p *Partition) remoteAborted(dst []wal.AbortedTxn, from, upTo int64) []wal.AbortedTxn {
	pt := p.tier.Load()
	if pt == nil {
		return dst
	}
	for _, s := range pt.view.Load().segs {
		if s.End > from {
			dst = appendAborted(dst, s.Aborted, from, upTo)
		}
	}
	return dst
}

// appendAborted appends those of list whose data may lie in [from, upTo):
// marker at or after from, first offset before upTo.
func appendAborted(dst, list []wal.AbortedTxn, from, upTo int64) []wal.AbortedTxn {
	for _, a := range list {
		if a.LastOffset >= from && a.FirstOffset < upTo {
			dst = append(dst, a)
		}
	}
	return dst
}

// dedupAborted drops repeated transactions (the same abort marker) from
// a, keeping the first of each, in linear time.
func dedupAborted(a []wal.AbortedTxn) []wal.AbortedTxn {
	type key struct{ pid, last int64 }
	seen := make(map[key]struct{}, len(a))
	out := a[:0]
	for _, t := range a {
		k := key{t.ProducerID, t.LastOffset}
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		out = append(out, t)
	}
	return out
}

// RemoteStatus is a tiered partition's state in the object store.
type RemoteStatus struct {
	// Start and End bound the offsets the store holds (-1 and 0 when it
	// holds none); Bytes is their size.
	Start, End, Bytes int64
	// CopyLag is the local bytes not copied yet (the active segment
	// included: it is copied once sealed).
	CopyLag int64
}

// RemoteStatus returns the partition's tiered state, and false when it is
// not tiered.
func (p *Partition) RemoteStatus() (RemoteStatus, bool) {
	pt := p.tier.Load()
	if pt == nil || p.log == nil {
		return RemoteStatus{}, false
	}
	v := pt.view.Load()
	st := RemoteStatus{Start: v.start(), End: v.end(), CopyLag: p.log.SizeFrom(p.log.RemoteEnd())}
	for _, s := range v.segs {
		st.Bytes += s.Size
	}
	return st, true
}
