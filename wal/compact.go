package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/wal/batch"
)

// Compaction (cleanup.policy=compact) keeps the newest record of each key.
//
// It works on sealed segments only (the active one is never rewritten),
// in three steps so it does not stall appends or reads:
//
//  1. PlanCompaction (owner goroutine) picks the sealed segments old enough
//     to clean (min.compaction.lag) and takes references on them.
//  2. CompactionPlan.Build (any goroutine, the slow part) maps every key to
//     its newest offset across those segments, then rewrites them, merged
//     into groups of at most SegmentBytes, as <base>.log.cleaned files:
//     a record survives when it is its key's newest and is not a tombstone
//     (null value) older than delete.retention.ms. Offsets never change:
//     batches keep their base offset and last offset delta, records their
//     offset deltas, so compaction leaves gaps, never renumbers. A batch
//     whose records are all gone is kept empty when it is the last batch
//     of its producer (so idempotent producers' sequence state survives)
//     or the last of its group (so segment end offsets survive).
//  3. InstallCompaction (owner goroutine) swaps each group in, crash-safely:
//     rename <base>.log.cleaned to <base>.log.swap (the commit point),
//     delete the originals, rename the swap to <base>.log. Open completes
//     a swap interrupted after the commit point (see completeSwaps) and
//     discards an interrupted .cleaned file.

// CompactOptions configure one compaction pass.
type CompactOptions struct {
	// DeleteRetention is how long tombstones are kept (delete.retention.ms).
	DeleteRetention time.Duration
	// MinLag keeps segments with records younger than this uncleaned
	// (min.compaction.lag.ms).
	MinLag time.Duration
	// MinDirtyRatio skips the pass when less than this share of the
	// cleanable bytes was written since the last pass
	// (min.cleanable.dirty.ratio).
	MinDirtyRatio float64
	// Unstable, when set, is the first offset an open transaction still
	// holds (the partition's last stable offset): segments reaching it
	// stay uncleaned, since what is kept of them depends on whether the
	// transaction commits. 0: no transaction is open.
	Unstable int64
	// Committed, when set, is the end of what is committed (a
	// replicated partition's high watermark): segments reaching past it
	// stay uncleaned, since a new leader may truncate what lies there,
	// and a key's newer record that goes away must not have removed an
	// older one. 0: no bound (a single broker).
	Committed int64
}

// CompactionPlan is one pass over a log's sealed segments.
type CompactionPlan struct {
	log    *Log
	opts   CompactOptions
	segs   []*segment // referenced until Install or Abort
	now    int64
	gen    uint64 // the log's truncation generation when planned
	groups []*cleanedGroup
	// aborted: the log's aborted transactions from the plan's first
	// segment on, by producer (Build).
	aborted map[int64][]AbortedTxn
}

// abortedBatch reports whether h holds data of an aborted transaction:
// its records are dropped, as nothing reads them.
func (p *CompactionPlan) abortedBatch(h *batch.Header) bool {
	if !h.Transactional() || h.Control() {
		return false
	}
	for _, a := range p.aborted[h.ProducerID] {
		if a.FirstOffset <= h.BaseOffset && h.BaseOffset <= a.LastOffset {
			return true
		}
	}
	return false
}

type cleanedGroup struct {
	srcs  []*segment
	path  string // the .cleaned log file
	bytes int64
	kept  int64 // records kept
	drop  int64 // records removed
}

// CompactionStats sums up an installed pass.
type CompactionStats struct {
	Segments      int
	BytesBefore   int64
	BytesAfter    int64
	RecordsKept   int64
	RecordsPruned int64
}

// PlanCompaction returns the pass to run, or nil when nothing is cleanable
// (owner goroutine).
func (l *Log) PlanCompaction(o CompactOptions) *CompactionPlan {
	if l.closed || l.failed != nil {
		return nil
	}
	now := l.opts.Now()
	l.mu.RLock()
	var segs []*segment
	var total, dirty int64
	for _, s := range l.segs[:len(l.segs)-1] {
		if !s.sealed {
			break
		}
		if o.MinLag > 0 && s.maxTs.Load() > now.Add(-o.MinLag).UnixMilli() {
			break
		}
		if o.Unstable > 0 && s.end.Load() > o.Unstable {
			break
		}
		if o.Committed > 0 && s.end.Load() > o.Committed {
			break
		}
		segs = append(segs, s)
		total += s.size.Load()
		if s.base >= l.cleanedTo {
			dirty += s.size.Load()
		}
	}
	l.mu.RUnlock()
	if len(segs) == 0 || total == 0 {
		return nil
	}
	if dirty == 0 || float64(dirty)/float64(total) < o.MinDirtyRatio {
		return nil
	}
	p := &CompactionPlan{log: l, opts: o, now: now.UnixMilli(), gen: l.truncGen}
	for _, s := range segs {
		if !s.acquire() {
			p.Abort()
			return nil
		}
		p.segs = append(p.segs, s)
	}
	return p
}

// Abort drops the plan's references and its files.
func (p *CompactionPlan) Abort() {
	for _, g := range p.groups {
		if g.path != "" {
			os.Remove(g.path)
		}
	}
	p.groups = nil
	for _, s := range p.segs {
		s.release()
	}
	p.segs = nil
}

// forEachBatch reads the segments' batches in order.
func forEachBatch(segs []*segment, fn func(s *segment, b []byte, h *batch.Header) error) error {
	var buf []byte
	for _, s := range segs {
		size := s.size.Load()
		for pos := int64(0); pos < size; {
			var hdr [batch.HeaderSize]byte
			h, err := s.readHeader(pos, &hdr)
			if err != nil {
				return err
			}
			n := int64(h.Size())
			if pos+n > size {
				return fmt.Errorf("segment %d: batch at %d runs past the end: %w", s.base, pos, ErrCorrupt)
			}
			if int64(cap(buf)) < n {
				buf = make([]byte, n)
			}
			b := buf[:n]
			if _, err := s.f.ReadAt(b, pos); err != nil {
				return fmt.Errorf("segment %d: read batch at %d: %w", s.base, pos, err)
			}
			if err := fn(s, b, &h); err != nil {
				return err
			}
			pos += n
		}
	}
	return nil
}

// Build computes the newest offset of every key and writes the cleaned
// segments. It runs on any goroutine; the log keeps serving meanwhile.
func (p *CompactionPlan) Build() error {
	latest := map[string]int64{}
	lastOfProducer := map[int64]int64{} // producer id -> base offset of its last batch
	p.aborted = map[int64][]AbortedTxn{}
	for _, a := range p.log.AbortedTxns(nil, p.segs[0].base, math.MaxInt64) {
		p.aborted[a.ProducerID] = append(p.aborted[a.ProducerID], a)
	}
	var scratch []byte
	err := forEachBatch(p.segs, func(_ *segment, b []byte, h *batch.Header) error {
		if h.ProducerID >= 0 {
			lastOfProducer[h.ProducerID] = h.BaseOffset
		}
		if h.Control() || p.abortedBatch(h) {
			// A marker's key is not a record key; an aborted
			// transaction's records never count as a key's newest.
			return nil
		}
		it, sc, err := batch.Records(b, h, scratch)
		scratch = sc
		if err != nil {
			return fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)
		}
		for {
			r, ok := it.Next()
			if !ok {
				return it.Err()
			}
			if r.Key != nil {
				latest[string(r.Key)] = h.BaseOffset + int64(r.OffsetDelta)
			}
		}
	})
	if err != nil {
		return fmt.Errorf("wal: compaction of %s: map keys: %w", p.log.dir, err)
	}
	// Group consecutive segments into outputs of at most SegmentBytes.
	maxBytes := p.log.opts.SegmentBytes
	var groups [][]*segment
	var cur []*segment
	var curBytes int64
	for _, s := range p.segs {
		sz := s.size.Load()
		if len(cur) > 0 && (curBytes+sz > maxBytes || s.end.Load()-cur[0].base > 1<<31-1) {
			groups = append(groups, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, s)
		curBytes += sz
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	deleteBefore := int64(-1)
	if p.opts.DeleteRetention > 0 {
		deleteBefore = p.now - p.opts.DeleteRetention.Milliseconds()
	} else {
		deleteBefore = p.now
	}
	for _, srcs := range groups {
		g := &cleanedGroup{srcs: srcs, path: filepath.Join(p.log.dir, segmentName(srcs[0].base, logSuffix)+cleanedSuffix)}
		p.groups = append(p.groups, g)
		if err := p.writeGroup(g, latest, lastOfProducer, deleteBefore); err != nil {
			return fmt.Errorf("wal: compaction of %s: %w", p.log.dir, err)
		}
	}
	return nil
}

// writeGroup writes one cleaned output file.
func (p *CompactionPlan) writeGroup(g *cleanedGroup, latest map[string]int64, lastOfProducer map[int64]int64, deleteBefore int64) (err error) {
	f, err := os.OpenFile(g.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, p.log.perm.File())
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	var out, scratch, recs []byte
	// The group's last batch is kept (maybe empty) to keep its end offset.
	var lastBase int64 = -1
	if err := forEachBatch(g.srcs[len(g.srcs)-1:], func(_ *segment, _ []byte, h *batch.Header) error {
		lastBase = h.BaseOffset
		return nil
	}); err != nil {
		return fmt.Errorf("reading the last batch of segment %d: %w", g.srcs[len(g.srcs)-1].base, err)
	}
	err = forEachBatch(g.srcs, func(_ *segment, b []byte, h *batch.Header) error {
		if h.Control() {
			// Markers stay: read_committed consumers need them to
			// end the transactions whose data is still here.
			out = append(out, b...)
			return nil
		}
		aborted := p.abortedBatch(h)
		it, sc, err := batch.Records(b, h, scratch)
		scratch = sc
		if err != nil {
			return err
		}
		recs = recs[:0]
		kept, total := int32(0), int32(0)
		maxTs := int64(-1)
		for {
			r, ok := it.Next()
			if !ok {
				if err := it.Err(); err != nil {
					return err
				}
				break
			}
			total++
			off := h.BaseOffset + int64(r.OffsetDelta)
			ts := h.BaseTimestamp + r.TimestampDelta
			if h.LogAppendTime() {
				ts = h.MaxTimestamp
			}
			keep := !aborted && r.Key != nil && latest[string(r.Key)] == off && !(r.Value == nil && ts < deleteBefore)
			if !keep {
				continue
			}
			kept++
			maxTs = max(maxTs, ts)
			recs = appendRawRecord(recs, &r)
		}
		g.kept += int64(kept)
		g.drop += int64(total - kept)
		switch {
		case kept == total:
			out = append(out, b...)
		case kept > 0:
			out, err = rebuildBatch(out, h, recs, kept, maxTs)
			if err != nil {
				return err
			}
		case h.BaseOffset == lastBase || h.ProducerID >= 0 && lastOfProducer[h.ProducerID] == h.BaseOffset:
			out, err = rebuildBatch(out, h, nil, 0, h.MaxTimestamp)
			if err != nil {
				return err
			}
		}
		if len(out) >= 1<<20 {
			if _, err := f.Write(out); err != nil {
				return err
			}
			g.bytes += int64(len(out))
			out = out[:0]
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := f.Write(out); err != nil {
		return err
	}
	g.bytes += int64(len(out))
	return f.Sync()
}

// appendRawRecord re-encodes a record with its original deltas.
func appendRawRecord(dst []byte, r *batch.Record) []byte {
	body := make([]byte, 0, 32+len(r.Key)+len(r.Value)+len(r.RawHeaders))
	body = append(body, byte(r.Attributes))
	body = binary.AppendVarint(body, r.TimestampDelta)
	body = binary.AppendVarint(body, int64(r.OffsetDelta))
	body = appendVarBytes(body, r.Key)
	body = appendVarBytes(body, r.Value)
	body = binary.AppendVarint(body, int64(r.HeaderCount))
	body = append(body, r.RawHeaders...)
	dst = binary.AppendVarint(dst, int64(len(body)))
	return append(dst, body...)
}

func appendVarBytes(dst, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(v)))
	return append(dst, v...)
}

// rebuildBatch writes a batch with the same offsets, producer fields and
// codec as h but only the given records.
func rebuildBatch(dst []byte, h *batch.Header, recs []byte, count int32, maxTs int64) ([]byte, error) {
	codec := h.Codec()
	if count == 0 {
		codec = batch.CodecNone
	}
	start := len(dst)
	dst = append(dst, make([]byte, batch.HeaderSize)...)
	var err error
	if dst, err = batch.Compress(codec, dst, recs); err != nil {
		return dst[:start], err
	}
	b := dst[start:]
	be := binary.BigEndian
	be.PutUint64(b[0:], uint64(h.BaseOffset))
	be.PutUint32(b[8:], uint32(len(b)-batch.LogOverhead))
	be.PutUint32(b[12:], uint32(h.LeaderEpoch))
	b[16] = batch.Magic
	attrs := uint16(h.Attributes)&^uint16(batch.AttrCodecMask) | uint16(codec)
	be.PutUint16(b[21:], attrs)
	be.PutUint32(b[23:], uint32(h.LastOffsetDelta))
	be.PutUint64(b[27:], uint64(h.BaseTimestamp))
	be.PutUint64(b[35:], uint64(maxTs))
	be.PutUint64(b[43:], uint64(h.ProducerID))
	be.PutUint16(b[51:], uint16(h.ProducerEpoch))
	be.PutUint32(b[53:], uint32(h.BaseSequence))
	be.PutUint32(b[57:], uint32(count))
	be.PutUint32(b[17:], batch.Checksum(b))
	return dst, nil
}

// InstallCompaction swaps the cleaned groups in (owner goroutine). A
// group whose source segments are no longer all in the log (retention
// deleted some meanwhile) is dropped, and so is a whole plan made before
// a TruncateTo or ResetTo (a truncated segment may be sealed again later
// with other batches at the same offsets).
func (l *Log) InstallCompaction(p *CompactionPlan) (CompactionStats, error) {
	defer p.Abort()
	var st CompactionStats
	if l.closed || l.failed != nil {
		return st, ErrClosed
	}
	if p.gen != l.truncGen {
		return st, nil
	}
	for _, g := range p.groups {
		if !l.holdsRun(g.srcs) {
			continue
		}
		before := int64(0)
		for _, s := range g.srcs {
			before += s.size.Load()
		}
		ns, err := l.swapIn(g)
		if err != nil {
			return st, err
		}
		g.path = "" // consumed
		st.Segments += len(g.srcs)
		st.BytesBefore += before
		st.BytesAfter += ns.size.Load()
		st.RecordsKept += g.kept
		st.RecordsPruned += g.drop
		l.cleanedTo = max(l.cleanedTo, ns.end.Load())
	}
	return st, nil
}

// holdsRun reports whether segs are consecutive members of l.segs.
func (l *Log) holdsRun(segs []*segment) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for i, s := range l.segs {
		if s != segs[0] {
			continue
		}
		if i+len(segs) > len(l.segs)-1 { // never the active segment
			return false
		}
		for j, x := range segs {
			if l.segs[i+j] != x {
				return false
			}
		}
		return true
	}
	return false
}

// swapIn replaces g's source segments by its cleaned file.
func (l *Log) swapIn(g *cleanedGroup) (*segment, error) {
	base := g.srcs[0].base
	swap := filepath.Join(l.dir, segmentName(base, logSuffix)+swapSuffix)
	if err := os.Rename(g.path, swap); err != nil {
		return nil, fmt.Errorf("wal: compaction: %w", err)
	}
	if err := fsutil.SyncDir(l.dir); err != nil {
		return nil, fmt.Errorf("wal: compaction: %w", err)
	}
	// Committed: from here a crash is completed by completeSwaps (which
	// drops the merged segments' aborted-transaction entries: the
	// cleaned file no longer holds aborted data, only markers).
	var aborted []AbortedTxn
	l.mu.RLock()
	for _, s := range g.srcs {
		aborted = append(aborted, s.aborted...)
	}
	l.mu.RUnlock()
	for _, s := range g.srcs {
		s.deleted.Store(true)
		if err := s.remove(); err != nil {
			return nil, fmt.Errorf("wal: compaction: remove segment %d: %w", s.base, err)
		}
	}
	if err := os.Rename(swap, filepath.Join(l.dir, segmentName(base, logSuffix))); err != nil {
		return nil, fmt.Errorf("wal: compaction: %w", err)
	}
	if err := fsutil.SyncDir(l.dir); err != nil {
		// Past the commit point: a crash that loses this rename leaves
		// the .swap file, which the next open completes (completeSwaps).
		l.logger.Warn("compaction: sync the directory after the swap", "dir", l.dir, "err", err)
	}
	ns, err := openSegment(l.dir, base, &l.opts, false)
	if err != nil {
		return nil, err
	}
	ns.flushed.Store(true) // written and synced before the rename
	ns.aborted = aborted
	if err := ns.rewriteTxnIndex(); err != nil {
		l.logger.Warn("compaction: write the aborted-transaction index", "segment", base, "err", err)
	}
	last := g.srcs[len(g.srcs)-1]
	if err := l.recoverSegment(ns, base, math.MaxInt64, true); err != nil {
		ns.release()
		return nil, err
	}
	if ns.end.Load() != last.end.Load() {
		l.logger.Error("compacted segment ends at a different offset", "segment", base, "end", ns.end.Load(), "want", last.end.Load())
	}
	ns.end.Store(last.end.Load())
	ns.wnext = last.end.Load()
	if err := ns.seal(); err != nil {
		ns.release()
		return nil, err
	}
	l.mu.Lock()
	for i, s := range l.segs {
		if s == g.srcs[0] {
			rest := append([]*segment{ns}, l.segs[i+len(g.srcs):]...)
			l.segs = append(l.segs[:i:i], rest...)
			break
		}
	}
	l.mu.Unlock()
	for _, s := range g.srcs {
		s.release() // the log's own reference
	}
	return ns, nil
}

// completeSwaps finishes compactions interrupted after their commit
// point: a <base>.log.swap file replaces every segment whose offsets it
// covers. Called by Open before the segments are listed.
func completeSwaps(dir string, logger interface{ Warn(string, ...any) }) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if len(name) != 20+len(logSuffix)+len(swapSuffix) || filepath.Ext(name) != swapSuffix {
			continue
		}
		var base int64
		if _, err := fmt.Sscanf(name[:20], "%d", &base); err != nil {
			continue
		}
		swap := filepath.Join(dir, name)
		end, err := lastOffsetOf(swap)
		if err != nil {
			logger.Warn("discarding an unreadable compaction swap file", "file", name, "err", err)
			os.Remove(swap)
			continue
		}
		for _, o := range ents {
			on := o.Name()
			if len(on) != 20+len(logSuffix) || filepath.Ext(on) != logSuffix {
				continue
			}
			var ob int64
			if _, err := fmt.Sscanf(on[:20], "%d", &ob); err != nil || ob < base || ob >= end {
				continue
			}
			for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, txnIndexSuffix} {
				os.Remove(filepath.Join(dir, segmentName(ob, suf)))
			}
		}
		if err := os.Rename(swap, filepath.Join(dir, segmentName(base, logSuffix))); err != nil {
			return err
		}
		logger.Warn("completed an interrupted compaction swap", "segment", base, "end", end)
	}
	return fsutil.SyncDir(dir)
}

// lastOffsetOf returns the offset after the last batch of a segment file.
func lastOffsetOf(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var hdr [batch.HeaderSize]byte
	end := int64(-1)
	for pos := int64(0); ; {
		if _, err := f.ReadAt(hdr[:], pos); err != nil {
			if errors.Is(err, io.EOF) && end >= 0 {
				return end, nil
			}
			return 0, err
		}
		h, err := batch.ParseHeader(hdr[:])
		if err != nil || h.Length < batch.HeaderSize-batch.LogOverhead {
			return 0, fmt.Errorf("bad batch at %d", pos)
		}
		end = h.NextOffset()
		pos += int64(h.Size())
	}
}
