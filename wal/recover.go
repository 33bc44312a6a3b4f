package wal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/wal/batch"
)

// Suffixes of files written by rewrites (repair, compaction) before they
// replace a segment; found at open, they are leftovers of an interrupted
// rewrite and are removed (the originals are still whole).
const (
	swapSuffix    = ".swap"
	cleanedSuffix = ".cleaned"
)

// CorruptionError reports damage in the middle of a log: bytes that are not
// a valid batch with valid data after them. That is not a torn tail (an
// interrupted last write), so recovery refuses to drop what follows.
type CorruptionError struct {
	File      string // the segment file
	Pos       int64  // first damaged byte
	Reason    string // what was wrong at Pos
	NextValid int64  // position of the next valid batch in File, or -1 if only later segments hold data
}

func (e *CorruptionError) Error() string {
	after := "later segments hold valid data"
	if e.NextValid >= 0 {
		after = fmt.Sprintf("a valid batch follows at byte %d", e.NextValid)
	}
	return fmt.Sprintf("wal: %s is corrupt at byte %d (%s) and %s: refusing to drop acknowledged data; "+
		"start with repair enabled (ringlog serve --repair-corrupt-logs) to move the damaged bytes to a %s file and keep every valid batch",
		e.File, e.Pos, e.Reason, after, corruptSuffix)
}

// Unwrap lets errors.Is(err, ErrCorrupt) match.
func (e *CorruptionError) Unwrap() error { return ErrCorrupt }

// load opens every segment of the directory and recovers what may be
// unclean:
//
//   - With Options.Clean, every segment is trusted; its indexes are loaded
//     and sanity-checked (and rebuilt from the log when they are missing,
//     short, zeroed or inconsistent).
//   - Otherwise the segments at or after the recovery point (the offset
//     below which everything was flushed, see sealPending) are rescanned
//     batch by batch with CRC32C checks and their indexes rebuilt. The
//     first invalid batch ends the scan: if nothing valid follows it in
//     the log, it is a torn tail and is truncated; if valid batches follow,
//     it is corruption (CorruptionError, or a repair with RepairCorruption).
//
// A TruncateTo or ResetTo interrupted after its commit point is completed
// first (and the log is then treated as unclean); the epoch cache is built
// last (loadEpochs).
func (l *Log) load() error {
	if err := completeSwaps(l.dir, l.logger); err != nil {
		return fmt.Errorf("wal: %s: complete interrupted compaction: %w", l.dir, err)
	}
	clean := l.opts.Clean
	if done, err := completePendingTruncation(l.dir, &l.opts, l.logger); err != nil {
		return fmt.Errorf("wal: %s: complete interrupted truncation: %w", l.dir, err)
	} else if done {
		clean = false
	}
	bases, err := listSegments(l.dir, l.logger)
	if err != nil {
		return err
	}
	rp := int64(math.MaxInt64)
	if !clean {
		rp = readRecoveryPoint(l.dir)
	}
	l.rpOffset = readRecoveryPoint(l.dir)
	if len(bases) == 0 {
		s, err := openSegment(l.dir, 0, &l.opts, true)
		if err != nil {
			return err
		}
		l.segs = []*segment{s}
		return l.loadEpochs(0)
	}
	rescanFrom := int64(math.MaxInt64) // the first offset recovery rescans
	sizes := make([]int64, len(bases))
	for i, b := range bases {
		if fi, err := os.Stat(filepath.Join(l.dir, segmentName(b, logSuffix))); err == nil {
			sizes[i] = fi.Size()
		}
	}
	expected := bases[0]
	for i, base := range bases {
		last := i == len(bases)-1
		if base < expected {
			return fmt.Errorf("wal: %s: segment %d overlaps the previous one, which ends at %d: %w", l.dir, base, expected, ErrCorrupt)
		}
		s, err := openSegment(l.dir, base, &l.opts, false)
		if err != nil {
			return err
		}
		l.segs = append(l.segs, s)
		nextBase := int64(math.MaxInt64)
		laterData := false
		if !last {
			nextBase = bases[i+1]
			for _, sz := range sizes[i+1:] {
				laterData = laterData || sz > 0
			}
		}
		if !clean && (last || nextBase > rp) {
			rescanFrom = min(rescanFrom, base)
			err = l.recoverSegment(s, base, nextBase, laterData)
		} else {
			err = l.loadSegment(s, nextBase, laterData)
		}
		if err != nil {
			return err
		}
		if s.end.Load() > nextBase {
			return fmt.Errorf("wal: %s: segment %d runs to offset %d, past the next segment %d: %w", l.dir, base, s.end.Load(), nextBase, ErrCorrupt)
		}
		expected = s.end.Load()
		if !last {
			// Below the recovery point (or after a clean stop) it was
			// flushed; above it, a kill may have left its bytes in the
			// page cache only: the next sync covers it.
			if nextBase <= rp {
				s.flushed.Store(true)
			} else {
				l.pendingFlush = append(l.pendingFlush, s)
			}
			// Opening extended the index files to their capacity; a
			// sealed segment's indexes end at their last entry.
			s.sealed = true
			if err := s.idx.trim(); err != nil {
				return fmt.Errorf("segment %d: %w", base, err)
			}
			if err := s.tidx.trim(); err != nil {
				return fmt.Errorf("segment %d: %w", base, err)
			}
		}
	}
	// A roll creates the next segment when a batch is staged; a crash
	// before that batch was written leaves it empty, with a base past the
	// previous segment's end. Drop it so offsets stay dense.
	for len(l.segs) > 1 {
		act, prev := l.segs[len(l.segs)-1], l.segs[len(l.segs)-2]
		if act.size.Load() != 0 || act.base == prev.end.Load() {
			break
		}
		l.logger.Warn("removing empty segment left by an interrupted roll", "segment", act.base, "previous_end", prev.end.Load())
		l.segs = l.segs[:len(l.segs)-1]
		if err := act.remove(); err != nil {
			return fmt.Errorf("wal: remove empty segment %d: %w", act.base, err)
		}
		act.release()
		if err := prev.unseal(); err != nil {
			return err
		}
	}
	act := l.active()
	if act.size.Load() > 0 {
		var hdr [batch.HeaderSize]byte
		if h, err := act.readHeader(0, &hdr); err == nil {
			act.firstAppendMs = h.MaxTimestamp
		}
	}
	l.start.Store(l.segs[0].base)
	l.end.Store(act.end.Load())
	l.tailDirty = !clean
	l.next = act.end.Load()
	return l.loadEpochs(rescanFrom)
}

// loadSegment opens a segment that needs no rescan: its indexes are checked
// and, if they do not hold up, rebuilt from the log.
func (l *Log) loadSegment(s *segment, nextBase int64, laterData bool) error {
	fi, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("segment %d: %w", s.base, err)
	}
	size := fi.Size()
	limitRel := int64(-1)
	if nextBase != math.MaxInt64 {
		limitRel = nextBase - s.base
	}
	why := ""
	switch {
	case s.idxOnDisk%offsetEntrySize != 0:
		why = "offset index size is not a whole number of entries"
	case s.tidxOnDisk%timeEntrySize != 0:
		why = "time index size is not a whole number of entries"
	case s.idxOnDisk == 0 && size > 0:
		why = "offset index is missing or empty"
	case s.tidxOnDisk == 0 && size > 0:
		// A closed segment with data has at least its seal entry; without
		// one, its largest timestamp (retention by time, lookups by time)
		// would come from the tail batches only.
		why = "time index is missing or empty"
	}
	if why == "" {
		s.idx.entries.Store(s.idxOnDisk / offsetEntrySize)
		s.tidx.entries.Store(s.tidxOnDisk / timeEntrySize)
		if err := s.idx.sane(size, limitRel); err != nil {
			why = "offset index: " + err.Error()
		} else if err := s.tidx.sane(limitRel); err != nil {
			why = "time index: " + err.Error()
		}
	}
	if why == "" {
		why = l.loadTail(s, size)
	}
	if why != "" {
		l.logger.Warn("rebuilding segment indexes from the log", "segment", s.base, "reason", why)
		return l.recoverSegment(s, s.base, nextBase, laterData)
	}
	return nil
}

// loadTail walks the batch headers after the last index entry of a trusted
// segment to find its end offset and largest timestamp, and checks the time
// index against the batch it names. It returns why the indexes cannot be
// trusted, or "".
func (l *Log) loadTail(s *segment, size int64) string {
	var hdr [batch.HeaderSize]byte
	pos := int64(0)
	next := s.base
	if rel, p, ok := s.idx.last(); ok {
		pos, next = int64(p), s.base+int64(rel)
		s.lastIndexed = pos
	}
	if ts, rel, ok := s.tidx.last(); ok {
		// The entry names the batch that reached ts: check it does.
		off := s.base + int64(rel)
		_, h, err := s.findBatch(off, size)
		if err != nil || h.BaseOffset != off || h.MaxTimestamp != ts {
			return fmt.Sprintf("time index entry (%d, +%d) does not match the log", ts, rel)
		}
		s.maxTs.Store(ts)
		s.maxTsOffset = off
	}
	for pos < size {
		h, err := s.readHeader(pos, &hdr)
		if err != nil {
			return "log tail: " + err.Error()
		}
		if h.Magic != batch.Magic || pos+int64(h.Size()) > size || h.BaseOffset < next {
			return fmt.Sprintf("log tail: no valid batch at byte %d", pos)
		}
		if h.MaxTimestamp > s.maxTs.Load() {
			s.maxTs.Store(h.MaxTimestamp)
			s.maxTsOffset = h.BaseOffset
		}
		next = h.NextOffset()
		pos += int64(h.Size())
	}
	s.size.Store(size)
	s.wpos = size
	s.end.Store(next)
	s.wnext = next
	return ""
}

// recoverSegment rescans s, verifying every batch, rebuilding both indexes,
// and deals with the first invalid batch (torn tail, corruption, repair,
// the padding of a direct write). nextBase is the base offset of the
// segment after s (math.MaxInt64: none, or not known), laterData whether
// a later segment holds data.
func (l *Log) recoverSegment(s *segment, minOffset, nextBase int64, laterData bool) error {
	fi, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("segment %d: %w", s.base, err)
	}
	size := fi.Size()
	sc := scanner{f: s.f, size: size, seg: s}
	s.forgetBatches()
	s.idx.reset()
	s.tidx.reset()
	s.idx.entries.Store(0)
	s.tidx.entries.Store(0)
	s.lastIndexed, s.maxTsOffset = -1, -1
	s.maxTs.Store(-1)
	pos, next := int64(0), minOffset
	for pos < size {
		h, reason := sc.batchAt(pos, next)
		if reason != "" && l.opts.DirectWrites && (!laterData || next == nextBase) && IsDirectPadding(s.f, pos, size) {
			// Not data: the zeros a direct write pads its last block
			// with, left by a stop before the segment was cut back to
			// its data. Only in a log written so, and before later
			// data only where the data reaches the next segment: a
			// roll happens at the log's end. Anything else that reads
			// as zeros may be lost data (a torn tail, or corruption).
			level := slog.LevelInfo
			if laterData {
				level = slog.LevelWarn
			}
			l.logger.Log(context.Background(), level, "dropping the padding of a direct write", "segment", s.path(logSuffix), "at", pos, "dropped_bytes", size-pos)
			if err := s.f.Truncate(pos); err != nil {
				return fmt.Errorf("segment %d: cut the padding of a direct write: %w", s.base, err)
			}
			l.paddingDropped += size - pos
			break
		}
		if reason != "" {
			q := sc.searchValid(pos+1, next)
			if q < 0 && !laterData {
				l.logger.Warn("truncating torn tail", "segment", s.path(logSuffix), "at", pos, "dropped_bytes", size-pos, "reason", reason)
				if err := s.f.Truncate(pos); err != nil {
					return fmt.Errorf("segment %d: truncate torn tail: %w", s.base, err)
				}
				break
			}
			cerr := &CorruptionError{File: s.path(logSuffix), Pos: pos, Reason: reason, NextValid: q}
			if !l.opts.RepairCorruption {
				return cerr
			}
			l.logger.Error("repairing corrupt segment", "err", cerr)
			if err := l.repairSegment(s, minOffset); err != nil {
				return fmt.Errorf("%w; repair failed: %w", cerr, err)
			}
			return l.recoverSegment(s, minOffset, nextBase, laterData)
		}
		s.indexBatch(h.BaseOffset, pos, h.Size(), h.MaxTimestamp, l.opts.IndexIntervalBytes)
		next = h.NextOffset()
		pos += int64(h.Size())
	}
	s.size.Store(pos)
	s.wpos = pos
	s.end.Store(next)
	s.wnext = next
	return nil
}

// repairSegment rewrites s keeping every valid batch, in order, and moving
// each damaged byte range into the segment's .corrupt file.
func (l *Log) repairSegment(s *segment, minOffset int64) error {
	fi, err := s.f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	sc := scanner{f: s.f, size: size, seg: s}
	type span struct{ from, to int64 }
	var good, bad []span
	pos, next := int64(0), minOffset
	for pos < size {
		h, reason := sc.batchAt(pos, next)
		if reason == "" {
			good = append(good, span{pos, pos + int64(h.Size())})
			next = h.NextOffset()
			pos += int64(h.Size())
			continue
		}
		q := sc.searchValid(pos+1, next)
		if q < 0 {
			q = size
		}
		bad = append(bad, span{pos, q})
		pos = q
	}
	copyRanges := func(dst *os.File, spans []span) error {
		buf := make([]byte, 1<<20)
		for _, sp := range spans {
			for p := sp.from; p < sp.to; {
				n := min(int64(len(buf)), sp.to-p)
				if _, err := s.f.ReadAt(buf[:n], p); err != nil {
					return err
				}
				if _, err := dst.Write(buf[:n]); err != nil {
					return err
				}
				p += n
			}
		}
		return dst.Sync()
	}
	cf, err := os.OpenFile(s.path(corruptSuffix), os.O_WRONLY|os.O_CREATE|os.O_APPEND, l.perm.File())
	if err != nil {
		return err
	}
	err = copyRanges(cf, bad)
	if cerr := cf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("save damaged bytes: %w", err)
	}
	// Written aside, then renamed over the original in one step; a crash
	// before the rename leaves a .cleaned file that the next open removes.
	swap := s.path(logSuffix) + cleanedSuffix
	sf, err := os.OpenFile(swap, os.O_RDWR|os.O_CREATE|os.O_TRUNC, l.perm.File())
	if err != nil {
		return err
	}
	if err := copyRanges(sf, good); err != nil {
		_ = sf.Close() // failing already: the error returned says more
		_ = os.Remove(swap)
		return fmt.Errorf("write repaired segment: %w", err)
	}
	if err := os.Rename(swap, s.path(logSuffix)); err != nil {
		_ = sf.Close() // failing already: the error returned says more
		return err
	}
	old := s.f
	s.f = sf
	old.Close() // the damaged original, only read here
	for _, b := range bad {
		l.logger.Error("moved damaged bytes aside", "segment", s.path(logSuffix), "from", b.from, "to", b.to, "file", s.path(corruptSuffix))
	}
	// The rename is durable only once the directory is.
	if err := fsutil.SyncDir(l.dir); err != nil {
		return fmt.Errorf("sync directory after the repair: %w", err)
	}
	return nil
}

// scanner reads a segment file through a window buffer for recovery.
type scanner struct {
	f      *os.File
	size   int64
	seg    *segment
	buf    []byte
	bufPos int64
}

const scanWindow = 1 << 20

// get returns n bytes at pos, or an error if the file is shorter.
func (sc *scanner) get(pos int64, n int) ([]byte, error) {
	if pos < 0 || pos+int64(n) > sc.size {
		return nil, io.ErrUnexpectedEOF
	}
	if pos >= sc.bufPos && pos+int64(n) <= sc.bufPos+int64(len(sc.buf)) {
		off := pos - sc.bufPos
		return sc.buf[off : off+int64(n)], nil
	}
	want := int64(max(n, scanWindow))
	if pos+want > sc.size {
		want = sc.size - pos
	}
	if int64(cap(sc.buf)) < want {
		sc.buf = make([]byte, want)
	}
	sc.buf = sc.buf[:want]
	if _, err := sc.f.ReadAt(sc.buf, pos); err != nil && !errors.Is(err, io.EOF) {
		sc.buf = sc.buf[:0]
		return nil, err
	}
	sc.bufPos = pos
	return sc.buf[:n], nil
}

// batchAt checks the stored batch at pos: its header, its length against
// the file, offsets that do not go backwards, and its CRC32C. It returns
// the header, or why the bytes at pos are not a valid batch.
func (sc *scanner) batchAt(pos int64, minOffset int64) (batch.Header, string) {
	hb, err := sc.get(pos, batch.HeaderSize)
	if err != nil {
		return batch.Header{}, fmt.Sprintf("only %d bytes left, less than a batch header", sc.size-pos)
	}
	h, _ := batch.ParseHeader(hb)
	switch {
	case h.Magic != batch.Magic:
		return h, fmt.Sprintf("magic %d", h.Magic)
	case h.Length < batch.HeaderSize-batch.LogOverhead:
		return h, fmt.Sprintf("batch length %d", h.Length)
	case pos+int64(h.Size()) > sc.size:
		return h, fmt.Sprintf("batch of %d bytes runs past the end of the file", h.Size())
	case h.BaseOffset < minOffset:
		return h, fmt.Sprintf("base offset %d goes back before %d", h.BaseOffset, minOffset)
	case h.LastOffsetDelta < 0 || !sc.seg.canHold(h.LastOffset()):
		return h, fmt.Sprintf("last offset delta %d", h.LastOffsetDelta)
	}
	b, err := sc.get(pos, h.Size())
	if err != nil {
		return h, "read: " + err.Error()
	}
	if batch.Checksum(b) != h.CRC {
		return h, "CRC32C mismatch"
	}
	return h, ""
}

// searchValid looks for the first valid batch at or after from (whose
// offsets do not go back before minOffset); -1 if there is none.
func (sc *scanner) searchValid(from int64, minOffset int64) int64 {
	for q := from; q+batch.HeaderSize <= sc.size; q++ {
		hb, err := sc.get(q, batch.HeaderSize)
		if err != nil {
			return -1
		}
		if hb[16] != batch.Magic {
			continue
		}
		if _, reason := sc.batchAt(q, minOffset); reason == "" {
			return q
		}
	}
	return -1
}
