package wal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// What a follower needs from its log: AppendReplica (copy the leader's
// batches as they are), TruncateTo (drop a divergent tail) and ResetTo
// (start over at the leader's log start).

// ErrOffsetOrder is returned for a replica batch whose base offset is
// below the log end (or below the end of the batch before it).
var ErrOffsetOrder = errors.New("wal: replica batch offsets go backwards")

// AppendReplica stages record batches fetched from the partition's leader
// for log l, keeping their offsets, leader epochs and timestamps: nothing
// in them is rewritten. Each batch must be a whole stored batch that
// passes batch.CheckStored (length, magic, CRC32C) and carries a leader
// epoch (ErrCorrupt otherwise),
// start at or after the end of the one before it (the first at or after
// the log end; compaction on the leader leaves gaps, ErrOffsetOrder
// otherwise), and not lower the leader epoch below data already in the
// log (ErrEpochOrder). Everything is checked before anything is staged: a
// refused call leaves no trace. A batch after a gap that needs a new
// segment names it by its own base offset.
//
// The stage is the same as Append's: it joins the Batch's single
// submission, sync asks for fdatasync before it completes (Ticket.Synced),
// the epoch cache learns the new epochs when it commits. Results carry
// the batches' own offsets and AppendTime -1.
func (b *Batch) AppendReplica(l *Log, batches [][]byte, sync bool) (Ticket, error) {
	if l.closed {
		return Ticket{}, ErrClosed
	}
	if l.failed != nil {
		return Ticket{}, l.failed
	}
	next := l.next
	projected := l.pEpochs
	newEpochs := false
	for i, data := range batches {
		h, err := batch.CheckStored(data)
		if err != nil {
			return Ticket{}, fmt.Errorf("wal: %s: replica batch %d: %w: %w", l.dir, i, ErrCorrupt, err)
		}
		if h.BaseOffset < next {
			return Ticket{}, fmt.Errorf("%w: %s: batch %d at offset %d, log end %d", ErrOffsetOrder, l.dir, i, h.BaseOffset, next)
		}
		if h.NextOffset() <= h.BaseOffset {
			return Ticket{}, fmt.Errorf("wal: %s: replica batch %d: offsets from %d overflow: %w", l.dir, i, h.BaseOffset, ErrCorrupt)
		}
		if h.LeaderEpoch < 0 {
			// A leader stamps every batch; epochs that never decrease
			// are what lets Open rebuild the cache by bisection.
			return Ticket{}, fmt.Errorf("wal: %s: replica batch %d at offset %d has no leader epoch (%d): %w", l.dir, i, h.BaseOffset, h.LeaderEpoch, ErrCorrupt)
		}
		// A new epoch, or an entry without data yet that this batch ends.
		if n := len(projected); n == 0 || projected[n-1].Epoch != h.LeaderEpoch || projected[n-1].StartOffset >= next {
			p, changed, err := assignEpoch(projected, h.LeaderEpoch, h.BaseOffset, next)
			if err != nil {
				return Ticket{}, fmt.Errorf("wal: %s: replica batch %d: %w", l.dir, i, err)
			}
			projected, newEpochs = p, newEpochs || changed
		}
		next = h.NextOffset()
	}
	st := b.stageFor(l, sync)
	tk := Ticket{st: st, first: len(st.Results), n: len(batches)}
	if newEpochs {
		st.epochs, l.pEpochs = projected, projected
	}
	for _, data := range batches {
		h, _ := batch.ParseHeader(data)
		last := h.LastOffset()
		if l.needsRoll(len(data), last) {
			if err := l.rollAt(h.BaseOffset); err != nil {
				l.failed, l.failedNoSpace = fmt.Errorf("wal: %s: roll: %w", l.dir, err), isNoSpace(err)
				return Ticket{}, l.failed
			}
		}
		s := l.active()
		if s.firstAppendMs < 0 {
			s.firstAppendMs = l.opts.Now().UnixMilli()
		}
		st.push(l, s, data, Appended{BaseOffset: h.BaseOffset, LastOffset: last, AppendTime: -1}, h.MaxTimestamp, int64(h.LastOffsetDelta)+1)
	}
	st.syncIfFlushDue(l)
	return tk, nil
}

// AppendReplica is the one-log convenience: stage batches with
// Batch.AppendReplica, submit them with backend, return the results.
func (l *Log) AppendReplica(backend ring.Backend, batches [][]byte, sync bool) ([]Appended, error) {
	return submitOne(backend, func(b *Batch) (Ticket, error) { return b.AppendReplica(l, batches, sync) })
}

// The pending-truncation marker is the commit point of TruncateTo and
// ResetTo: written (durably) before anything is changed, removed when
// everything is done. Open completes an operation whose marker it finds.
const truncationMarkerFile = "truncation-pending"

// Marker kinds.
const (
	markTruncate = "truncate"
	markReset    = "reset"
)

// Steps at which crashHook is called (tests).
const (
	stepPrepare      = "prepare" // before the commit point
	stepMarker       = "marker"
	stepRecoveryPt   = "recovery-point"
	stepEpochs       = "epochs"
	stepSegments     = "segments-removed"
	stepSegmentCut   = "segment-cut"
	stepSynced       = "synced"
	stepDone         = "done"
	stepCompleteSegs = "complete-segments"
	stepCompleteMeta = "complete-meta"
)

func encodeMarker(kind string, off int64) []byte {
	return []byte(kind + " " + strconv.FormatInt(off, 10) + "\n")
}

// parseMarker decodes a truncation marker: "truncate <offset>\n" or
// "reset <offset>\n", offset non-negative.
func parseMarker(b []byte) (string, int64, error) {
	line, ok := strings.CutSuffix(string(b), "\n")
	kind, num, ok2 := strings.Cut(line, " ")
	if !ok || !ok2 || kind != markTruncate && kind != markReset {
		return "", 0, fmt.Errorf("%q is not \"truncate|reset <offset>\"", b)
	}
	off, err := strconv.ParseInt(num, 10, 64)
	if err != nil || off < 0 || strconv.FormatInt(off, 10) != num {
		return "", 0, fmt.Errorf("bad offset %q", num)
	}
	return kind, off, nil
}

func (l *Log) hook(step string) error {
	return callHook(&l.opts, step)
}

func callHook(o *Options, step string) error {
	if o.crashHook != nil {
		return o.crashHook(step)
	}
	return nil
}

// TruncateTo removes every batch holding an offset at or after off, and
// returns the new log end (owner only, nothing staged). A batch that
// straddles off (starts below it, ends at or after it) is removed whole,
// as Kafka does: the new end is the offset after the last batch kept,
// which is off itself unless off falls inside a batch or in a compaction
// gap (then it is lower). Later segments are deleted, the segment holding
// the new end is cut and its indexes trimmed; the epoch cache drops the
// entries starting at or after the new end. off at or past the end
// changes no data and only drops an epoch entry starting exactly at off (a
// leader epoch that never appended). off below the log start is
// ErrOffsetOutOfRange (use ResetTo).
//
// The caller clamps its high watermark to the returned end. Readers that
// started before the call may still return batches past it; a read racing
// the cut of the file gets a short read (an error), as in Kafka.
//
// Crash safety: a durable marker is the commit point. A crash before it
// leaves the old log; after it, Open completes the truncation, so recovery
// yields exactly the old or the truncated log. The recovery point drops
// to the new end first, so a later unclean open rescans what follows. An
// error after the commit point fails the log (Err) until it is reopened.
func (l *Log) TruncateTo(off int64) (int64, error) {
	if err := l.checkQuiet("truncate"); err != nil {
		return l.end.Load(), err
	}
	start, end := l.start.Load(), l.end.Load()
	if off < start {
		return end, fmt.Errorf("%w: %s: truncate to %d, below the log start %d", ErrOffsetOutOfRange, l.dir, off, start)
	}
	if off >= end {
		return end, l.truncateEpochsDurably(off)
	}
	a, cut, newEnd, err := l.planTruncation(off)
	if err != nil {
		return end, err
	}
	return l.truncatePlanned(end, a, cut, newEnd)
}

// TruncateAtDamage truncates the log at a damage ScrubSegment found: at the
// damaged batch's position, so the log ends at the offset after the last
// sound batch before it (a follower then refetches the rest from its
// leader). It does not walk the damaged bytes, as TruncateTo would. Owner
// only, with the crash safety of TruncateTo.
func (l *Log) TruncateAtDamage(d *Damage) (int64, error) {
	if err := l.checkQuiet("truncate"); err != nil {
		return l.end.Load(), err
	}
	end := l.end.Load()
	i := slices.IndexFunc(l.segs, func(s *segment) bool { return s.base == d.Segment })
	if i < 0 || d.Pos >= l.segs[i].size.Load() {
		return end, ErrSegmentGone
	}
	a, cut, newEnd := i, d.Pos, d.Offset
	if d.Pos == 0 {
		if i == 0 {
			a, cut, newEnd = 0, 0, l.segs[0].base
		} else {
			p := l.segs[i-1]
			a, cut, newEnd = i-1, p.size.Load(), p.end.Load()
		}
	}
	if newEnd < l.start.Load() {
		return end, fmt.Errorf("%w: %s: damage at %d is below the log start %d", ErrOffsetOutOfRange, l.dir, newEnd, l.start.Load())
	}
	return l.truncatePlanned(end, a, cut, newEnd)
}

// truncatePlanned carries out a planned truncation (planTruncation): segment
// a becomes the active one, cut at byte cut, and the log ends at newEnd.
func (l *Log) truncatePlanned(end int64, a int, cut, newEnd int64) (int64, error) {
	// No background flush may raise the recovery point past the cut.
	l.bg.Wait()
	if err := l.step(stepPrepare); err != nil {
		return end, err
	}
	marker := filepath.Join(l.dir, truncationMarkerFile)
	if err := writeFileDurable(marker, encodeMarker(markTruncate, newEnd), l.perm); err != nil {
		return end, fmt.Errorf("wal: %s: truncate: %w", l.dir, err)
	}
	if err := l.afterCommit(l.truncateCommitted(a, cut, newEnd)); err != nil {
		return l.end.Load(), err
	}
	return newEnd, nil
}

// afterCommit fails the log when an operation past its commit point did
// not finish (Open completes it); a simulated crash (crashHook) is
// returned as is.
func (l *Log) afterCommit(err error) error {
	var ce crashError
	if err == nil || errors.As(err, &ce) {
		return err
	}
	if l.failed == nil {
		l.failed = err
		l.logger.Error("truncation failed after its commit point; refusing appends until reopened", "err", err)
	}
	return err
}

// crashError wraps an error returned by crashHook.
type crashError struct{ err error }

func (e crashError) Error() string { return "simulated crash: " + e.err.Error() }

func (e crashError) Unwrap() error { return e.err }

func (l *Log) step(name string) error {
	if err := l.hook(name); err != nil {
		return crashError{err}
	}
	return nil
}

// truncateEpochsDurably drops the epoch entries starting at or after off
// and brings the checkpoint up to date even when nothing is dropped: a
// leader's entry the file still holds but the cache superseded lazily
// must not come back if the log end returns to its offset.
func (l *Log) truncateEpochsDurably(off int64) error {
	if next, changed := truncateEpochsFromEnd(l.epochList(), off); changed {
		return l.replaceEpochsDurably(next)
	}
	return l.persistEpochs(l.epochList(), l.epochVer)
}

// planTruncation finds where TruncateTo(off) cuts, for start <= off < end:
// segment a becomes the active one, cut at byte cut, and the log ends at
// newEnd. Owner only: the owner is the only writer of segs, so it reads
// them (and headers) without taking mu.
func (l *Log) planTruncation(off int64) (a int, cut, newEnd int64, err error) {
	i := max(l.segmentForLocked(off), 0)
	s := l.segs[i]
	size := s.size.Load()
	pos, kept := size, s.end.Load()
	if off < s.end.Load() {
		if pos, kept, err = s.cutPoint(off, size); err != nil {
			return 0, 0, 0, fmt.Errorf("wal: %s: truncate: %w", l.dir, err)
		}
	}
	if pos > 0 {
		return i, pos, kept, nil
	}
	if i == 0 {
		return 0, 0, s.base, nil
	}
	// Nothing of segment i stays: it goes too, and the one before ends
	// the log where it ends.
	p := l.segs[i-1]
	return i - 1, p.size.Load(), p.end.Load(), nil
}

// cutPoint returns the position of the first batch of s holding an offset
// at or after off (base <= off < end) and the offset after the batch
// before it (meaningless when pos is 0).
func (s *segment) cutPoint(off, size int64) (pos, keptEnd int64, err error) {
	k := s.idx.countRelBelow(s.relOffset(off)) - 1
	for {
		p := int64(0)
		if k >= 0 {
			_, pp := s.idx.entry(k)
			p = int64(pp)
		}
		// The batch at an index entry before off may itself straddle
		// off; then the walk starts one entry earlier to learn where
		// the batch before it ends.
		pos, keptEnd, err = s.walkCut(p, off, size)
		if err != nil || pos > p || p == 0 {
			return pos, keptEnd, err
		}
		k--
	}
}

func (s *segment) walkCut(p, off, size int64) (int64, int64, error) {
	var hdr [batch.HeaderSize]byte
	kept := s.base
	for p < size {
		h, err := s.readHeader(p, &hdr)
		if err != nil {
			return 0, 0, err
		}
		if h.LastOffset() >= off {
			return p, kept, nil
		}
		kept = h.NextOffset()
		p += int64(h.Size())
	}
	return size, kept, nil
}

// truncateCommitted carries out a truncation whose marker is durable.
func (l *Log) truncateCommitted(a int, cut, newEnd int64) error {
	if err := l.step(stepMarker); err != nil {
		return err
	}
	if err := l.resetRecoveryPoint(newEnd, false); err != nil {
		return err
	}
	if err := l.step(stepRecoveryPt); err != nil {
		return err
	}
	if err := l.truncateEpochsDurably(newEnd); err != nil {
		return err
	}
	if err := l.step(stepEpochs); err != nil {
		return err
	}
	// Readers stop at the new end from now on.
	l.end.Store(newEnd)
	l.next = newEnd
	l.truncGen++
	l.cleanedTo = min(l.cleanedTo, newEnd)
	l.mu.Lock()
	gone := slices.Clone(l.segs[a+1:])
	clear(l.segs[a+1:])
	l.segs = l.segs[:a+1]
	l.mu.Unlock()
	if err := l.DropAbortedTxnsFrom(newEnd); err != nil {
		return err
	}
	for j := len(gone) - 1; j >= 0; j-- {
		s := gone[j]
		l.logger.Info("truncation deleted segment", "base", s.base, "end", s.end.Load())
		err := s.remove()
		s.release()
		if err != nil {
			return fmt.Errorf("wal: %s: truncate: %w", l.dir, err)
		}
	}
	if err := l.step(stepSegments); err != nil {
		return err
	}
	s := l.segs[a]
	if s.sealed {
		if err := s.unseal(); err != nil {
			return err
		}
	}
	if cut < s.size.Load() {
		if err := l.cutSegment(s, cut, newEnd); err != nil {
			return err
		}
	}
	if err := l.step(stepSegmentCut); err != nil {
		return err
	}
	if err := l.opts.SyncFile(s.f); err != nil {
		return fmt.Errorf("wal: %s: truncate: sync segment %d: %w", l.dir, s.base, err)
	}
	if err := fsutil.SyncDir(l.dir); err != nil {
		return fmt.Errorf("wal: %s: truncate: %w", l.dir, err)
	}
	if err := l.step(stepSynced); err != nil {
		return err
	}
	if err := removeFileDurable(filepath.Join(l.dir, truncationMarkerFile)); err != nil {
		return fmt.Errorf("wal: %s: truncate: %w", l.dir, err)
	}
	l.logger.Info("truncated log", "end", newEnd, "segments", len(l.segs))
	return l.step(stepDone)
}

// cutSegment shortens s to cut bytes ending at offset newEnd: published
// size and end first, then the indexes, then the file; the bookkeeping of
// the tail (largest timestamp, last index entry) is recomputed from the
// remaining indexes and headers.
func (l *Log) cutSegment(s *segment, cut, newEnd int64) error {
	s.end.Store(newEnd)
	s.size.Store(cut)
	if d := s.damage.Load(); d != nil && cut <= d.Pos {
		s.damage.Store(nil) // the damaged bytes are gone
	}
	s.forgetBatches()
	s.idx.truncateEntries(s.idx.countPosAtMost(cut - 1))
	s.tidx.truncateEntries(s.tidx.countRelBelow(newEnd - s.base))
	if err := s.f.Truncate(cut); err != nil {
		return fmt.Errorf("wal: %s: truncate segment %d: %w", l.dir, s.base, err)
	}
	s.preallocated = 0
	s.writeback = min(s.writeback, cut)
	s.dropped = min(s.dropped, cut)
	s.maxTs.Store(-1)
	s.maxTsOffset, s.lastIndexed = -1, -1
	if why := l.loadTail(s, cut); why != "" {
		l.logger.Warn("rebuilding indexes of a truncated segment", "segment", s.base, "reason", why)
		if err := l.recoverSegment(s, s.base, math.MaxInt64, false); err != nil {
			return err
		}
	}
	if cut == 0 {
		s.firstAppendMs = -1
	}
	return nil
}

// ResetTo deletes every segment and starts an empty log at off, with an
// empty epoch cache (owner only, nothing staged): the follower's answer to
// a leader whose log starts past the follower's end. The new active
// segment is named by off; start and end are off.
//
// Crash safety: as TruncateTo, a durable marker is the commit point; Open
// completes a reset interrupted after it.
func (l *Log) ResetTo(off int64) error {
	if err := l.checkQuiet("reset"); err != nil {
		return err
	}
	if off < 0 {
		return fmt.Errorf("wal: %s: reset to negative offset %d", l.dir, off)
	}
	l.bg.Wait()
	if err := l.step(stepPrepare); err != nil {
		return err
	}
	marker := filepath.Join(l.dir, truncationMarkerFile)
	if err := writeFileDurable(marker, encodeMarker(markReset, off), l.perm); err != nil {
		return fmt.Errorf("wal: %s: reset: %w", l.dir, err)
	}
	return l.afterCommit(l.resetCommitted(off))
}

func (l *Log) resetCommitted(off int64) error {
	if err := l.step(stepMarker); err != nil {
		return err
	}
	if err := l.replaceEpochsDurably([]EpochEntry{}); err != nil {
		return err
	}
	if err := l.step(stepEpochs); err != nil {
		return err
	}
	if err := l.resetRecoveryPoint(off, true); err != nil {
		return err
	}
	if err := l.step(stepRecoveryPt); err != nil {
		return err
	}
	old := slices.Clone(l.segs) // owner: segs is ours to read
	for j := len(old) - 1; j >= 0; j-- {
		if err := old[j].remove(); err != nil {
			return fmt.Errorf("wal: %s: reset: %w", l.dir, err)
		}
	}
	if err := l.step(stepSegments); err != nil {
		return err
	}
	s, err := openSegment(l.dir, off, &l.opts, true)
	if err != nil {
		return fmt.Errorf("wal: %s: reset: %w", l.dir, err)
	}
	l.mu.Lock()
	l.segs = []*segment{s}
	l.start.Store(off)
	l.end.Store(off)
	l.mu.Unlock()
	l.next = off
	l.truncGen++
	l.cleanedTo = off
	l.unflushed = 0
	for _, o := range old {
		o.release()
	}
	if err := fsutil.SyncDir(l.dir); err != nil {
		return fmt.Errorf("wal: %s: reset: %w", l.dir, err)
	}
	if err := l.step(stepSynced); err != nil {
		return err
	}
	if err := removeFileDurable(filepath.Join(l.dir, truncationMarkerFile)); err != nil {
		return fmt.Errorf("wal: %s: reset: %w", l.dir, err)
	}
	l.logger.Info("reset log", "start", off)
	return l.step(stepDone)
}

// completePendingTruncation finishes a TruncateTo or ResetTo whose marker
// Open finds, working on the files before they are loaded, and reports
// whether it did. Every step is idempotent, so a crash here is completed
// by the next Open.
//
//   - truncate t: delete the segments whose base is at or after t (all
//     their batches are past the cut; the first segment stays, emptied, if
//     that is all of them), cut the last one before the first batch that
//     holds an offset at or after t (walking headers; a header that does
//     not hold up also ends the walk, the data from there on is an
//     unsynced tail the recovery would drop anyway) and delete its
//     indexes (recovery rebuilds them), drop the epoch entries from t on,
//     lower the recovery point to t.
//   - reset off: delete every segment, create the empty segment off,
//     empty the epoch cache, set the recovery point to off.
func completePendingTruncation(dir string, o *Options, logger *slog.Logger) (bool, error) {
	marker := filepath.Join(dir, truncationMarkerFile)
	b, err := os.ReadFile(marker)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	kind, off, err := parseMarker(b)
	if err != nil {
		return false, fmt.Errorf("%s: %w: %w", truncationMarkerFile, ErrCorrupt, err)
	}
	logger.Warn("completing an interrupted truncation", "kind", kind, "offset", off)
	bases, err := segmentFiles(dir)
	if err != nil {
		return false, err
	}
	step := func(name string) error {
		if err := callHook(o, name); err != nil {
			return crashError{err}
		}
		return nil
	}
	removeSeg := func(base int64) error {
		for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, txnIndexSuffix} {
			if err := os.Remove(filepath.Join(dir, segmentName(base, suf))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		return nil
	}
	epochs, ckErr := readEpochCheckpoint(dir)
	rp := off
	switch kind {
	case markReset:
		for i := len(bases) - 1; i >= 0; i-- {
			if err := removeSeg(bases[i]); err != nil {
				return false, err
			}
		}
		f, err := os.OpenFile(filepath.Join(dir, segmentName(off, logSuffix)), os.O_RDWR|os.O_CREATE|os.O_TRUNC, o.Perm.File())
		if err != nil {
			return false, err
		}
		if err := f.Close(); err != nil {
			return false, err
		}
		if err := fsutil.SyncDir(dir); err != nil {
			return false, err
		}
		if err := step(stepCompleteSegs); err != nil {
			return false, err
		}
		epochs, ckErr = []EpochEntry{}, nil
	case markTruncate:
		keep := 0
		for keep < len(bases) && bases[keep] < off {
			keep++
		}
		if keep == 0 && len(bases) > 0 {
			keep = 1
		}
		for i := len(bases) - 1; i >= keep; i-- {
			if err := removeSeg(bases[i]); err != nil {
				return false, err
			}
		}
		for keep > 0 {
			pos, size, err := cutFile(filepath.Join(dir, segmentName(bases[keep-1], logSuffix)), off)
			if err != nil {
				return false, err
			}
			if pos == 0 && keep > 1 {
				// Nothing of it stays: it goes, and the one before ends
				// the log (all of its batches end before this base).
				if err := removeSeg(bases[keep-1]); err != nil {
					return false, err
				}
				keep--
				continue
			}
			if pos < size {
				for _, suf := range []string{indexSuffix, timeIndexSuffix, txnIndexSuffix} {
					if err := os.Remove(filepath.Join(dir, segmentName(bases[keep-1], suf))); err != nil && !errors.Is(err, os.ErrNotExist) {
						return false, err
					}
				}
			}
			break
		}
		if err := fsutil.SyncDir(dir); err != nil {
			return false, err
		}
		if err := step(stepCompleteSegs); err != nil {
			return false, err
		}
		if ckErr == nil && epochs != nil {
			epochs, _ = truncateEpochsFromEnd(epochs, off)
		}
		rp = min(rp, readRecoveryPoint(dir)) // it only goes down here
	}
	if ckErr != nil {
		// Unreadable: Open rebuilds the cache from the batch headers.
		if err := removeFileDurable(filepath.Join(dir, epochCheckpointFile)); err != nil {
			return false, err
		}
	} else if epochs != nil {
		if err := writeFileDurable(filepath.Join(dir, epochCheckpointFile), encodeEpochCheckpoint(epochs), o.Perm); err != nil {
			return false, err
		}
	}
	if err := writeFileDurable(filepath.Join(dir, recoveryPointFile), []byte(strconv.FormatInt(rp, 10)+"\n"), o.Perm); err != nil {
		return false, err
	}
	if err := step(stepCompleteMeta); err != nil {
		return false, err
	}
	if err := removeFileDurable(marker); err != nil {
		return false, err
	}
	return true, nil
}

// segmentFiles lists the base offsets of dir's .log files, sorted.
func segmentFiles(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var bases []int64
	for _, e := range ents {
		stem, ok := strings.CutSuffix(e.Name(), logSuffix)
		if !ok || len(stem) != 20 {
			continue
		}
		if base, err := strconv.ParseInt(stem, 10, 64); err == nil && base >= 0 {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	return bases, nil
}

// cutFile truncates the segment file at path before its first batch
// holding an offset at or after off, or before the first header that does
// not hold up, and makes the new size durable. It returns the cut position
// and the file's size before.
func cutFile(path string, off int64) (_, _ int64, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	size := fi.Size()
	var hdr [batch.HeaderSize]byte
	pos, next := int64(0), int64(-1)
	for pos < size {
		if _, err := f.ReadAt(hdr[:], pos); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, 0, err
		}
		h, _ := batch.ParseHeader(hdr[:])
		if h.Magic != batch.Magic || h.Length < batch.HeaderSize-batch.LogOverhead ||
			pos+int64(h.Size()) > size || h.BaseOffset < next || h.LastOffsetDelta < 0 || h.LastOffset() >= off {
			break
		}
		next = h.NextOffset()
		pos += int64(h.Size())
	}
	if pos < size {
		if err := f.Truncate(pos); err != nil {
			return 0, 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, 0, err
		}
	}
	return pos, size, nil
}
