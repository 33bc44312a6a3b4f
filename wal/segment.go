package wal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/wal/batch"
)

// File name suffixes of a segment's files.
const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	corruptSuffix   = ".corrupt"
)

func segmentName(base int64, suffix string) string {
	return fmt.Sprintf("%020d%s", base, suffix)
}

// segment is one .log file with its .index and .timeindex.
//
// Ownership: the log's writer goroutine appends (wpos, lastIndexed, maxTs
// bookkeeping); readers on any goroutine use only the atomics, the indexes'
// published entries and the file (by pread), under a reference taken with
// acquire. The segment closes its files when the last reference goes.
type segment struct {
	dir  string
	base int64
	f    *os.File
	idx  offsetIndex
	tidx timeIndex

	// Published for readers, stored after the bytes they describe are
	// written: size is the readable length of the file, end the offset
	// after its last readable batch, maxTs its largest batch timestamp.
	size  atomic.Int64
	end   atomic.Int64
	maxTs atomic.Int64

	// Writer-only bookkeeping.
	wpos          int64 // staged end of the file
	wnext         int64 // staged next offset
	lastIndexed   int64 // position of the last offset-index entry, -1 if none
	maxTsOffset   int64 // base offset of the batch that reached maxTs
	firstAppendMs int64 // timestamp of the first batch, for segment.ms rolls
	sealed        bool  // no longer the active segment, indexes trimmed
	preallocated  int64 // bytes reserved by preallocate at creation
	writeback     int64 // bytes from 0 whose writeback was started
	dropped       int64 // bytes from 0 dropped from the page cache (below writeback)
	dropPending   bool  // sealed and in Log.undropped
	idxOnDisk     int64 // index file sizes found at open, before preallocation
	tidxOnDisk    int64

	// Writer-only, with Options.DirectWrites (direct.go): df is the file
	// opened again with O_DIRECT (nil until the first write), dtail the
	// bytes of the partial block before dtailEnd (-1: unknown, read back
	// from the file), padded whether the file may run past size with
	// zero padding.
	df       *os.File
	dtail    []byte
	dtailEnd int64
	padded   bool

	refs    atomic.Int32
	deleted atomic.Bool

	// flushed: every byte of this sealed segment is known durable (its
	// flush after the seal, a sync that covered it, or found at open).
	// The active segment's is not used.
	flushed atomic.Bool

	// damage is the first damaged batch the scrubber found (nil: none):
	// reads stop before it (checkDamage).
	damage atomic.Pointer[Damage]

	// idxBad is set once a lookup found the offset index disagreeing with
	// the log: from then on lookups walk the log from its start.
	idxBad atomic.Bool

	// recent holds where the last len(recent) committed batches start,
	// each packed as relative base offset << 32 | (position + 1) (0:
	// empty), stored by the writer after the size that makes the batch
	// readable, in a ring at recentNext (writer-only). A consumer at the
	// tail fetches the base offset of a batch committed since its last
	// fetch; finding it here spares the reads of batch headers that the
	// sparse offset index leaves (recentBatch). Truncation empties it.
	recent     [16]atomic.Uint64
	recentNext int
	logger     *slog.Logger

	// aborted are the transactions aborted by markers in this segment
	// (.txnindex), in marker order; guarded by the log's mu (written by
	// the owner under the write lock). txnDirty: the file holds entries
	// not yet synced.
	aborted  []AbortedTxn
	txnDirty bool
	// perm is the mode of the files the segment creates (its log's).
	perm fsutil.Perm
}

func (s *segment) path(suffix string) string {
	return filepath.Join(s.dir, segmentName(s.base, suffix))
}

// openSegment opens (creating if needed) the three files of the segment at
// base. It does not validate anything; recovery does that.
func openSegment(dir string, base int64, opts *Options, create bool) (*segment, error) {
	s := &segment{dir: dir, base: base, lastIndexed: -1, maxTsOffset: -1, firstAppendMs: -1, dtailEnd: -1, logger: opts.Logger, perm: opts.Perm}
	s.maxTs.Store(-1)
	s.refs.Store(1)
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(s.path(logSuffix), flags, opts.Perm.File())
	if err != nil {
		return nil, fmt.Errorf("segment %d: %w", base, err)
	}
	s.f = f
	if create && opts.Preallocate && opts.SegmentBytes > 0 {
		reserved, err := preallocate(f, opts.SegmentBytes)
		if err != nil {
			opts.Logger.Warn("preallocate failed; continuing without", "segment", s.path(logSuffix), "err", err)
		}
		s.preallocated = reserved
	}
	// A new segment that cannot be made whole (a full disk) leaves no
	// file behind, so a later roll to the same base can create it.
	unmake := func() {
		if create {
			for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
				os.Remove(s.path(suffix))
			}
		}
	}
	idxOnDisk, err := s.idx.open(s.path(indexSuffix), opts.Perm.File(), offsetEntrySize, opts.MaxIndexBytes)
	if err != nil {
		_ = f.Close() // failing already: the error returned says more
		unmake()
		return nil, fmt.Errorf("segment %d index: %w", base, err)
	}
	tcap := opts.MaxIndexBytes / offsetEntrySize * timeEntrySize
	tidxOnDisk, err := s.tidx.open(s.path(timeIndexSuffix), opts.Perm.File(), timeEntrySize, tcap)
	if err != nil {
		_ = s.idx.close()
		_ = f.Close() // failing already: the error returned says more
		unmake()
		return nil, fmt.Errorf("segment %d time index: %w", base, err)
	}
	s.idxOnDisk, s.tidxOnDisk = idxOnDisk, tidxOnDisk
	if create {
		// fdatasync of the new log makes its bytes durable, not its
		// name: without this a power cut could lose a segment whose
		// acknowledged (synced) batches were all in it.
		if err := fsutil.SyncDir(dir); err != nil {
			s.closeFiles()
			unmake()
			return nil, fmt.Errorf("segment %d: sync directory: %w", base, err)
		}
	}
	if !create {
		s.loadTxnIndex()
	}
	s.end.Store(base)
	s.wnext = base
	return s, nil
}

// acquire takes a reader's reference; false if the segment is already gone.
func (s *segment) acquire() bool {
	for {
		n := s.refs.Load()
		if n <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release drops a reference, closing the files with the last one.
func (s *segment) release() {
	if s.refs.Add(-1) == 0 {
		s.closeFiles()
	}
}

func (s *segment) closeFiles() {
	s.idx.close()
	s.tidx.close()
	if s.df != nil {
		// Its writes went to the disk, not the page cache: a failed
		// close loses none of them, and fdatasync covers the rest.
		if err := s.df.Close(); err != nil {
			s.logger.Warn("close the segment's O_DIRECT file", "segment", s.base, "err", err)
		}
	}
	s.f.Close()
}

// remove unlinks the segment's files; open references keep reading them.
func (s *segment) remove() error {
	s.deleted.Store(true)
	var errs []error
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, txnIndexSuffix} {
		if err := os.Remove(s.path(suf)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// relOffset is offset relative to the segment base, as the indexes store it.
func (s *segment) relOffset(off int64) uint32 { return uint32(off - s.base) }

// canHold reports whether offsets up to last fit the 4-byte relative
// offsets of the indexes.
func (s *segment) canHold(last int64) bool { return last-s.base <= math.MaxInt32 }

// indexBatch records a committed batch in the sparse and time indexes.
func (s *segment) indexBatch(base int64, pos int64, size int, maxTs int64, interval int) {
	if maxTs > s.maxTs.Load() {
		s.maxTs.Store(maxTs)
		s.maxTsOffset = base
	}
	if s.lastIndexed >= 0 && pos-s.lastIndexed < int64(interval) {
		return
	}
	if s.idx.full() || !s.idx.reserve() {
		return
	}
	s.idx.append(s.relOffset(base), uint32(pos))
	s.lastIndexed = pos
	s.maybeTimeEntry()
}

// noteBatch records that the committed batch with base offset base starts
// at pos (writer only, after the size that covers it is stored).
func (s *segment) noteBatch(base, pos int64) {
	s.recent[s.recentNext%len(s.recent)].Store(uint64(s.relOffset(base))<<32 | uint64(pos+1))
	s.recentNext++
}

// forgetBatches empties recent (writer only): after a truncation a base
// offset may come back at another position.
func (s *segment) forgetBatches() {
	for i := range s.recent {
		s.recent[i].Store(0)
	}
}

// recentBatch returns the position of the recently committed batch whose
// base offset is off, if recent has it.
func (s *segment) recentBatch(off int64) (int64, bool) {
	rel := off - s.base
	if rel < 0 || rel > math.MaxUint32 {
		return 0, false
	}
	for i := range s.recent {
		if v := s.recent[i].Load(); v != 0 && v>>32 == uint64(rel) {
			return int64(v&math.MaxUint32) - 1, true
		}
	}
	return 0, false
}

// maybeTimeEntry appends (maxTs, offset of maxTs) to the time index when
// the segment's largest timestamp grew past the last entry.
func (s *segment) maybeTimeEntry() {
	mt := s.maxTs.Load()
	if mt < 0 || s.tidx.full() {
		return
	}
	if last, _, ok := s.tidx.last(); ok && mt <= last {
		return
	}
	if !s.tidx.reserve() {
		return
	}
	s.tidx.append(mt, s.relOffset(s.maxTsOffset))
}

// seal finishes a segment that is no longer active: a last time-index
// entry for its largest timestamp, indexes trimmed to their entries.
func (s *segment) seal() error {
	if s.sealed {
		return nil
	}
	s.sealed = true
	s.maybeTimeEntry()
	// Every step, whatever the others did: a failed index trim must not
	// keep the preallocated space of the log reserved.
	var errs []error
	if err := s.idx.trim(); err != nil {
		errs = append(errs, fmt.Errorf("segment %d: trim index: %w", s.base, err))
	}
	if err := s.tidx.trim(); err != nil {
		errs = append(errs, fmt.Errorf("segment %d: trim time index: %w", s.base, err))
	}
	if err := s.trimPadding(); err != nil {
		errs = append(errs, err)
	}
	// No more direct writes: the descriptor and the block go (an unseal
	// opens the one and reads the other back).
	if s.df != nil {
		if err := s.df.Close(); err != nil {
			errs = append(errs, fmt.Errorf("segment %d: close its O_DIRECT file: %w", s.base, err))
		}
		s.df = nil
	}
	s.dtail, s.dtailEnd = nil, -1
	if s.preallocated > 0 {
		if err := releasePrealloc(s.f, s.size.Load(), s.preallocated); err != nil {
			errs = append(errs, fmt.Errorf("segment %d: release preallocated space: %w", s.base, err))
		}
	}
	return errors.Join(errs...)
}

// unseal makes a sealed segment appendable again (recovery dropped the
// empty segment after it): its index files grow back to their mapping.
func (s *segment) unseal() error {
	s.sealed = false
	if err := s.idx.extend(); err != nil {
		return fmt.Errorf("segment %d: %w", s.base, err)
	}
	if err := s.tidx.extend(); err != nil {
		return fmt.Errorf("segment %d: %w", s.base, err)
	}
	return nil
}

// readHeader reads the batch header at pos into hdr.
func (s *segment) readHeader(pos int64, hdr *[batch.HeaderSize]byte) (batch.Header, error) {
	if _, err := s.f.ReadAt(hdr[:], pos); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return batch.Header{}, fmt.Errorf("segment %d: read batch header at %d: %w", s.base, pos, err)
	}
	h, err := batch.ParseHeader(hdr[:])
	if err != nil {
		return h, err
	}
	if h.Length < batch.HeaderSize-batch.LogOverhead {
		return h, fmt.Errorf("segment %d: batch at %d has length %d: %w", s.base, pos, h.Length, ErrCorrupt)
	}
	return h, nil
}

// findBatch returns the position of the batch holding off (or the first
// batch after off, when off fell in a gap left by compaction), walking
// headers from the sparse index entry at or before off. limit is the
// readable size.
func (s *segment) findBatch(off int64, limit int64) (int64, batch.Header, error) {
	var hdr [batch.HeaderSize]byte
	pos, h := s.seek(s.relOffset(max(off, s.base)), limit, &hdr)
	have := h.BaseOffset >= 0 // seek read the header at pos
	for pos < limit {
		var err error
		if !have {
			h, err = s.readHeader(pos, &hdr)
		}
		have = false
		if err != nil {
			return 0, h, err
		}
		if h.LastOffset() >= off {
			return pos, h, nil
		}
		pos += int64(h.Size())
	}
	return limit, batch.Header{}, io.EOF
}

// seek returns where to walk batch headers from to reach relative offset
// rel: the position of the last offset-index entry at or before rel, after
// checking that a batch starting at that entry's offset is there, with its
// header. When the index disagrees with the log (a damaged index that
// passed the checks at open), the segment stops trusting it, says so, and
// seek returns the segment's start with a header whose BaseOffset is -1
// (not read yet).
func (s *segment) seek(rel uint32, limit int64, hdr *[batch.HeaderSize]byte) (int64, batch.Header) {
	unread := batch.Header{BaseOffset: -1}
	if s.idxBad.Load() {
		return 0, unread
	}
	erel, pos := s.idx.lookupEntry(rel)
	if pos == 0 || pos >= limit {
		// The segment's start, or an entry the writer published just
		// before the size that makes its batch readable.
		return 0, unread
	}
	h, err := s.readHeader(pos, hdr)
	if err == nil && h.Magic == batch.Magic && h.BaseOffset == s.base+int64(erel) {
		return pos, h
	}
	s.distrustIndex(fmt.Sprintf("entry (+%d, byte %d) does not name the batch there", erel, pos))
	return 0, unread
}

// distrustIndex makes lookups walk the log instead of using the offset
// index, and removes the index file so that the next open rebuilds it.
func (s *segment) distrustIndex(why string) {
	if s.idxBad.Swap(true) {
		return
	}
	var err error
	if !s.deleted.Load() { // a deleted segment's name may be a new segment's
		err = os.Remove(s.path(indexSuffix))
	}
	s.logger.Error("offset index disagrees with the log; reads walk the segment and the next start rebuilds the index",
		"segment", s.path(logSuffix), "reason", why, "remove_err", err)
}
