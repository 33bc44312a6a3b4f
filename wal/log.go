package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/ring"
)

// Errors a Log returns.
var (
	// ErrOffsetOutOfRange: a read below the log start or past the end.
	ErrOffsetOutOfRange = errors.New("wal: offset out of range")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("wal: log closed")
	// ErrCorrupt marks damage found in stored bytes.
	ErrCorrupt = errors.New("wal: corrupt log")
)

// Log is one partition's log: an ordered list of segments in a directory.
//
// Concurrency: one goroutine, the owner, appends (through a Batch), rolls,
// enforces retention, changes options and closes. Any goroutine may read
// (Read, ReadBytes, ScanHeaders, OffsetForTime, MaxTimestamp, the offset
// accessors) concurrently with the owner: readers see only committed
// batches.
type Log struct {
	dir    string
	opts   Options
	logger *slog.Logger
	// paddingDropped is how many bytes of direct-write padding the
	// recovery at Open cut (PaddingDropped).
	paddingDropped int64
	// perm is opts.Perm, fixed at Open: read by any goroutine (the
	// background flushes write the recovery point, the cleaner its
	// output) while the owner may replace opts.
	perm fsutil.Perm

	// mu guards segs (the slice, not the segments). Readers hold it shared
	// only while they pick segments and take references.
	mu   sync.RWMutex
	segs []*segment

	start atomic.Int64 // log start offset
	end   atomic.Int64 // offset after the last committed batch
	// remoteEnd is the offset below which the object store holds a
	// copy of every segment (tiered logs; SetRemoteEnd).
	remoteEnd atomic.Int64

	// Owner-only state.
	next      int64 // next offset to assign to a staged batch
	unflushed int64 // records appended since the last sync
	// tailDirty: bytes written since the last sync may not be durable
	// (owner only; true after an unclean open, which cannot know).
	tailDirty  bool
	dirtySince time.Time // when the oldest unsynced append happened
	failed     error     // sticky: set by a failed write, refuses appends
	// failedNoSpace: failed is only writes the disk had no room for
	// (Revive may end it).
	failedNoSpace bool
	closed        bool
	toSeal        []*segment
	// undropped: sealed segments the page cache tail has not dropped
	// whole yet, oldest first (owner only; dropSealed).
	undropped []*segment
	// pendingFlush: sealed segments not known durable (see
	// Batch.buildOps), oldest first (owner only).
	pendingFlush []*segment
	staged       *Stage // this log's stage in the Batch being built
	cleanedTo    int64  // compaction has cleaned the segments below this offset
	truncGen     uint64 // bumped by TruncateTo and ResetTo: older compaction plans are void

	// Leader epochs (epoch.go): the committed cache (immutable, any
	// goroutine), the owner's projection including staged batches, and
	// the versions in memory and in the checkpoint file.
	epochs   atomic.Pointer[[]EpochEntry]
	pEpochs  []EpochEntry
	epochVer uint64
	ckMu     sync.Mutex // guards ckVer and writes of the checkpoint file
	ckVer    uint64

	// writeback starts the writeback of a file range through the
	// committing backend (ring.StartWriteback; tests replace it);
	// writebackErr is logged once.
	writeback    func(b ring.Backend, f *os.File, off, n int64) error
	writebackErr bool
	// drop drops a file range from the page cache through the committing
	// backend (ring.DropCache; tests replace it); dropErr is logged once.
	drop    func(b ring.Backend, f *os.File, off, n int64) error
	dropErr bool

	// Background flushes of sealed segments advance the recovery point.
	bg       sync.WaitGroup
	rpMu     sync.Mutex
	rpOffset int64
}

const recoveryPointFile = "recovery-point"

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

// StartOffset is the first offset still in the log.
func (l *Log) StartOffset() int64 { return l.start.Load() }

// EndOffset is the offset the next committed batch will get: the high
// watermark of a single-replica partition.
func (l *Log) EndOffset() int64 { return l.end.Load() }

// Options returns the options in force.
func (l *Log) Options() Options { return l.opts }

// SetOptions changes the options of an open log (owner only). Fields that
// only matter at open (Clean, RepairCorruption) are ignored, and so is
// LeaderEpoch: StartLeaderEpoch changes it. Perm stays as it was at Open.
func (l *Log) SetOptions(o Options) error {
	o.Clean, o.RepairCorruption = l.opts.Clean, l.opts.RepairCorruption
	o.LeaderEpoch, o.crashHook, o.Perm = l.opts.LeaderEpoch, l.opts.crashHook, l.perm
	o.DirectWrites = l.opts.DirectWrites // a broker-wide choice, made at Open
	if o.Logger == nil {
		o.Logger = l.opts.Logger
	}
	if o.Now == nil {
		o.Now = l.opts.Now
	}
	if o.SyncFile == nil {
		o.SyncFile = l.opts.SyncFile
	}
	n, err := o.withDefaults()
	if err != nil {
		return err
	}
	if n.MaxIndexBytes != l.opts.MaxIndexBytes {
		n.MaxIndexBytes = l.opts.MaxIndexBytes // takes effect for new segments only
	}
	l.opts = n
	return nil
}

// Size is the number of bytes in all segments.
func (l *Log) Size() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segs {
		n += s.size.Load()
	}
	return n
}

// SegmentCount is the number of segments.
func (l *Log) SegmentCount() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.segs)
}

// PaddingDropped is how many bytes recovery cut at Open that were the
// zero padding of direct writes (Options.DirectWrites), not data: a
// caller that measures what recovery cut from the files' sizes leaves
// them out.
func (l *Log) PaddingDropped() int64 { return l.paddingDropped }

// Err is the sticky write error that made the log refuse appends, if any.
func (l *Log) Err() error { return l.failed }

// Open opens the log in dir, creating it if needed, and recovers it (see
// recover.go).
func Open(dir string, opts Options) (*Log, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := o.Perm.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	l := &Log{dir: dir, opts: o, perm: o.Perm, logger: o.Logger.With("log", filepath.Base(dir)), writeback: hintWriteback, drop: hintDrop}
	if err := l.load(); err != nil {
		l.closeSegments()
		return nil, err
	}
	return l, nil
}

// listSegments returns the base offsets of the .log files in dir, sorted,
// and removes leftovers of interrupted operations.
func listSegments(dir string, logger *slog.Logger) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	var bases []int64
	logs := map[string]bool{}
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, swapSuffix) || strings.HasSuffix(name, cleanedSuffix):
			// An interrupted rewrite that never reached its commit
			// point (completeSwaps ran first): the originals are intact.
			logger.Info("removing leftover of an interrupted rewrite", "file", name)
			os.Remove(filepath.Join(dir, name))
		case strings.HasSuffix(name, logSuffix):
			stem := strings.TrimSuffix(name, logSuffix)
			base, err := strconv.ParseInt(stem, 10, 64)
			if err != nil || len(stem) != 20 || base < 0 {
				return nil, fmt.Errorf("wal: %s: unexpected file name %q", dir, name)
			}
			bases = append(bases, base)
			logs[stem] = true
		}
	}
	for _, e := range ents {
		name := e.Name()
		for _, suf := range []string{indexSuffix, timeIndexSuffix, txnIndexSuffix} {
			if stem, ok := strings.CutSuffix(name, suf); ok && !logs[stem] {
				logger.Info("removing index without a log", "file", name)
				os.Remove(filepath.Join(dir, name))
			}
		}
	}
	slices.Sort(bases)
	return bases, nil
}

func readRecoveryPoint(dir string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, recoveryPointFile))
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// setRecoveryPoint records that every offset below off is on stable
// storage; it never moves backwards. Best effort: a stale file only makes
// the next unclean recovery scan more.
func (l *Log) setRecoveryPoint(off int64) {
	l.rpMu.Lock()
	defer l.rpMu.Unlock()
	if off <= l.rpOffset {
		return
	}
	l.rpOffset = off
	path := filepath.Join(l.dir, recoveryPointFile)
	tmp := path + ".tmp"
	// A leftover keeps its mode through WriteFile: make it anew.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.logger.Warn("write recovery point", "err", err)
		return
	}
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(off, 10)+"\n"), l.perm.File()); err != nil {
		l.logger.Warn("write recovery point", "err", err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		l.logger.Warn("write recovery point", "err", err)
	}
}

// resetRecoveryPoint sets the recovery point to off, also backwards, and
// durably (TruncateTo and ResetTo, after the background flushes that
// could raise it again have finished). A recovery point above data that is
// rewritten would make the next unclean open trust unflushed bytes.
func (l *Log) resetRecoveryPoint(off int64, force bool) error {
	l.rpMu.Lock()
	defer l.rpMu.Unlock()
	if off >= l.rpOffset && !force {
		return nil
	}
	if err := writeFileDurable(filepath.Join(l.dir, recoveryPointFile), []byte(strconv.FormatInt(off, 10)+"\n"), l.perm); err != nil {
		return fmt.Errorf("wal: %s: recovery point: %w", l.dir, err)
	}
	l.rpOffset = off
	return nil
}

// active is the segment appends go to (owner only).
func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

// roll starts a new active segment at l.next (owner only). The old one is
// sealed once its staged bytes are committed.
func (l *Log) roll() error { return l.rollAt(l.next) }

// rollAt is roll with the new segment named base (at least l.next: a
// replica batch after a compaction gap names its segment).
func (l *Log) rollAt(base int64) error {
	old := l.active()
	s, err := openSegment(l.dir, base, &l.opts, true)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.segs = append(l.segs, s)
	l.mu.Unlock()
	l.toSeal = append(l.toSeal, old)
	l.prunePendingFlush()
	if !l.tailDirty && !l.staged.writes(old) {
		old.flushed.Store(true) // the last sync covered all of it
	} else {
		l.pendingFlush = append(l.pendingFlush, old)
	}
	l.logger.Debug("rolled segment", "base", s.base, "previous", old.base, "previous_bytes", old.wpos)
	return nil
}

// flushedPrefixEnd is the end of the longest run of sealed segments,
// from the log's first, all known durable (-1: none is).
func (l *Log) flushedPrefixEnd() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	end := int64(-1)
	for _, s := range l.segs[:max(0, len(l.segs)-1)] {
		if !s.flushed.Load() {
			break
		}
		end = s.end.Load()
	}
	return end
}

// sealPending seals segments rolled away from, once nothing staged is
// left in them, and flushes them in the background to advance the recovery
// point. The epoch checkpoint is brought up to date before the recovery
// point moves past the entries it lacks.
func (l *Log) sealPending() {
	epochs, ver := l.epochList(), l.epochVer
	syncFile := l.opts.SyncFile // SetOptions may replace l.opts meanwhile
	for _, s := range l.toSeal {
		if err := s.seal(); err != nil {
			l.logger.Warn("seal segment", "base", s.base, "err", err)
		}
		if l.opts.PageCacheTailBytes > 0 && l.opts.WritebackBytes > 0 && !s.dropPending && s.dropped < s.size.Load() {
			s.dropPending = true
			l.undropped = append(l.undropped, s)
		}
		if !s.acquire() {
			continue
		}
		l.bg.Add(1)
		go func() {
			defer l.bg.Done()
			defer s.release()
			if err := syncFile(s.f); err != nil {
				l.logger.Warn("flush sealed segment", "base", s.base, "err", err)
				return
			}
			// The indexes too: a segment below the recovery point is
			// not re-scanned, so its indexes must be on disk as well.
			// Unflushed, it stays above the recovery point, and a
			// restart rebuilds them from the log.
			if err := errors.Join(s.idx.sync(), s.tidx.sync()); err != nil {
				l.logger.Warn("flush sealed segment's indexes; recovery point not advanced", "base", s.base, "err", err)
				return
			}
			s.flushed.Store(true)
			if err := l.persistEpochs(epochs, ver); err != nil {
				l.logger.Warn("write leader epoch checkpoint; recovery point not advanced", "err", err)
				return
			}
			// Flushes end in any order: the recovery point moves to the
			// end of the sealed segments flushed so far from the start,
			// never past one still unflushed.
			l.setRecoveryPoint(l.flushedPrefixEnd())
		}()
	}
	l.toSeal = l.toSeal[:0]
}

// needsRoll reports whether a batch of size bytes ending at offset last
// must go to a new segment (owner only).
func (l *Log) needsRoll(size int, last int64) bool {
	s := l.active()
	if s.wpos == 0 {
		return false
	}
	switch {
	case s.wpos+int64(size) > l.opts.SegmentBytes:
		return true
	case s.idx.full() || s.tidx.full():
		return true
	case !s.canHold(last):
		return true
	case l.opts.SegmentAge > 0 && s.firstAppendMs >= 0 &&
		l.opts.Now().UnixMilli()-s.firstAppendMs >= l.opts.SegmentAge.Milliseconds():
		return true
	}
	return false
}

// FlushDue reports whether unsynced data is older than FlushInterval (owner
// only); the owner then stages a sync with Batch.Sync.
func (l *Log) FlushDue(now time.Time) bool {
	return l.opts.FlushInterval > 0 && l.unflushed > 0 && now.Sub(l.dirtySince) >= l.opts.FlushInterval
}

// segmentForLocked returns the index of the segment that may hold off: the last
// one whose base is at most off. Caller holds mu.
func (l *Log) segmentForLocked(off int64) int {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > off })
	return i - 1
}

// EnforceRetention deletes whole segments that are past retention by age
// or by size (owner only), never the active one unless it is itself
// expired (then it is rolled first). It returns the number deleted.
func (l *Log) EnforceRetention() (int, error) {
	if l.closed {
		return 0, ErrClosed
	}
	now := l.opts.Now().UnixMilli()
	if l.opts.Tiered {
		return l.enforceLocalRetention(now)
	}
	var victims []*segment
	l.mu.RLock()
	total := int64(0)
	for _, s := range l.segs {
		total += s.size.Load()
	}
	n := len(l.segs)
	for i, s := range l.segs {
		last := i == n-1
		expired := l.opts.RetentionAge > 0 && s.size.Load() > 0 &&
			s.maxTs.Load() >= 0 && now-s.maxTs.Load() > l.opts.RetentionAge.Milliseconds()
		oversize := l.opts.RetentionBytes > 0 && total-s.size.Load() >= l.opts.RetentionBytes
		if !expired && !oversize {
			break
		}
		if last {
			if !expired || s.wpos != s.size.Load() {
				break
			}
		}
		victims = append(victims, s)
		total -= s.size.Load()
	}
	l.mu.RUnlock()
	return l.deleteOldest(victims)
}

// deleteOldest removes victims, the oldest segments of the log (owner
// only), rolling first when the active segment is one of them.
func (l *Log) deleteOldest(victims []*segment) (int, error) {
	if len(victims) == 0 {
		return 0, nil
	}
	if victims[len(victims)-1] == l.active() {
		if err := l.roll(); err != nil {
			return 0, err
		}
		l.sealPending()
	}
	l.mu.Lock()
	l.segs = l.segs[len(victims):]
	newStart := l.segs[0].base
	l.mu.Unlock()
	if newStart > l.start.Load() {
		l.start.Store(newStart)
		l.trimEpochsFromStart(newStart)
	}
	var errs []error
	for _, s := range victims {
		l.logger.Info("retention deleted segment", "base", s.base, "bytes", s.size.Load(), "end", s.end.Load())
		if err := s.remove(); err != nil {
			errs = append(errs, err)
		}
		s.release()
	}
	return len(victims), errors.Join(errs...)
}

// Close flushes everything to stable storage, trims the indexes and
// releases the files (owner only). Readers holding references keep them
// until they release.
func (l *Log) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	l.sealPending()
	l.bg.Wait()
	for _, s := range l.segs {
		if err := s.syncTxnIndex(); err != nil {
			errs = append(errs, fmt.Errorf("sync %s: %w", s.path(txnIndexSuffix), err))
		}
	}
	if len(l.segs) > 0 {
		s := l.active()
		if err := s.trimPadding(); err != nil {
			errs = append(errs, err)
		}
		if l.failed == nil {
			if err := l.opts.SyncFile(s.f); err != nil {
				errs = append(errs, fmt.Errorf("flush %s: %w", s.path(logSuffix), err))
			}
		}
		s.maybeTimeEntry()
		if err := s.idx.trim(); err != nil {
			errs = append(errs, err)
		}
		if err := s.tidx.trim(); err != nil {
			errs = append(errs, err)
		}
		if s.preallocated > 0 {
			if err := releasePrealloc(s.f, s.size.Load(), s.preallocated); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 && l.failed == nil {
			if err := l.persistEpochs(l.epochList(), l.epochVer); err != nil {
				errs = append(errs, err)
			} else {
				l.setRecoveryPoint(l.end.Load())
			}
		}
	}
	l.closeSegments()
	return errors.Join(errs...)
}

func (l *Log) closeSegments() {
	l.mu.Lock()
	segs := l.segs
	l.segs = nil
	l.mu.Unlock()
	for _, s := range segs {
		s.release()
	}
}

// Delete closes the log and removes its directory.
func (l *Log) Delete() error {
	l.failed = ErrClosed
	cerr := l.Close()
	if err := os.RemoveAll(l.dir); err != nil {
		return fmt.Errorf("wal: delete %s: %w", l.dir, err)
	}
	return cerr
}
