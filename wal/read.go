package wal

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ringlog/ringlog/wal/batch"
)

// FileRange is a region of a segment file holding whole batches, ready to
// be sent with sendfile.
type FileRange struct {
	File *os.File
	Pos  int64
	Len  int64
}

// Chunk is the result of a Read: file ranges and the segment references
// that keep them readable. Release it when the bytes are sent. A Chunk can
// be reused for the next Read after Release.
type Chunk struct {
	Ranges []FileRange
	// Bytes is the total length of Ranges.
	Bytes int64
	// FirstOffset is the base offset of the first batch, NextOffset the
	// offset after the last one (valid when Bytes > 0).
	FirstOffset, NextOffset int64
	segs                    []*segment
}

// Release drops the references taken by Read.
func (c *Chunk) Release() {
	for _, s := range c.segs {
		s.release()
	}
	clear(c.segs)
	c.segs = c.segs[:0]
	clear(c.Ranges)
	c.Ranges = c.Ranges[:0]
	c.Bytes = 0
}

// Read fills c with the batches from offset on: whole batches only, at
// least one when there is one (even if it exceeds maxBytes), then more
// while the total stays within maxBytes, never a batch whose base offset is
// at or past upTo. A read from an offset inside a batch returns that whole
// batch (the consumer skips the records before its offset, as with Kafka).
// Reads cross segment boundaries. An offset below the log start or past
// the end is ErrOffsetOutOfRange; the end itself reads nothing.
//
// c must be empty (new or released); the caller releases it.
func (l *Log) Read(c *Chunk, offset int64, maxBytes int, upTo int64) error {
	end := l.end.Load()
	if upTo > end {
		upTo = end
	}
	l.mu.RLock()
	if len(l.segs) == 0 {
		l.mu.RUnlock()
		return ErrClosed
	}
	start := l.start.Load()
	if offset < start || offset > end {
		l.mu.RUnlock()
		return fmt.Errorf("%w: %d not in [%d, %d]", ErrOffsetOutOfRange, offset, start, end)
	}
	if offset >= upTo {
		l.mu.RUnlock()
		return nil
	}
	i := l.segmentForLocked(offset)
	if i < 0 {
		i = 0
	}
	// Take references on the segments this read may touch.
	for j := i; j < len(l.segs); j++ {
		if l.segs[j].base >= upTo && j > i {
			break
		}
		if l.segs[j].acquire() {
			c.segs = append(c.segs, l.segs[j])
		}
	}
	l.mu.RUnlock()

	budget := int64(maxBytes)
	first := true
	for _, s := range c.segs {
		if s.base >= upTo && !first {
			break
		}
		done, err := readSegment(c, s, offset, &budget, upTo, &first)
		if err != nil {
			if c.Bytes > 0 && errors.Is(err, ErrCorrupt) {
				break // serve the sound batches before the damage
			}
			return err
		}
		if done {
			break
		}
	}
	return nil
}

// readSegment adds the batches of s from offset to c. It reports done when
// the budget or upTo stopped it (so the next segment must not be read).
func readSegment(c *Chunk, s *segment, offset int64, budget *int64, upTo int64, first *bool) (bool, error) {
	size := s.size.Load()
	segEnd := s.end.Load()
	if size == 0 || segEnd <= offset {
		return false, nil
	}
	if pos, ok := s.recentBatch(offset); ok && pos < size && segEnd <= upTo && size-pos <= *budget {
		// A consumer at the tail: the batch starting at offset was
		// committed lately and the rest of the segment fits, so no
		// header needs reading.
		if s.damage.Load() == nil {
			return addSpan(c, s.f, pos, size, offset, segEnd, size, upTo, budget, first), nil
		}
	}
	pos, h, err := s.findBatch(offset, size)
	if errors.Is(err, io.EOF) {
		return false, nil // offset is in a compaction gap at the segment's end
	}
	if err != nil {
		return true, err
	}
	if h.BaseOffset >= upTo {
		return true, nil
	}
	startPos := pos
	endPos := pos
	nextOff := h.BaseOffset

	if segEnd <= upTo && (size-pos <= *budget || *first && size-pos == int64(h.Size())) {
		// The rest of the segment fits: no need to walk it.
		endPos = size
		nextOff = segEnd
	} else {
		// Skip ahead with the index by position, then walk headers.
		var hdr [batch.HeaderSize]byte
		limit := pos + *budget
		skipped := false
		if segEnd <= upTo && !s.idxBad.Load() {
			if rel, p := s.idx.lookupPos(limit); p > pos {
				endPos, nextOff, skipped = p, s.base+int64(rel), true
			}
		}
		for endPos < size {
			var bh batch.Header
			if endPos == pos {
				bh = h
			} else if bh, err = s.readHeader(endPos, &hdr); err != nil && !skipped {
				return true, err
			}
			if skipped {
				// The entry skipped to must name the batch found there.
				skipped = false
				if err != nil || bh.Magic != batch.Magic || bh.BaseOffset != nextOff {
					s.distrustIndex(fmt.Sprintf("entry (+%d, byte %d) does not name the batch there", nextOff-s.base, endPos))
					endPos, nextOff = pos, h.BaseOffset
					continue
				}
			}
			if bh.BaseOffset >= upTo {
				break
			}
			if endPos+int64(bh.Size())-startPos > *budget && !(*first && endPos == startPos) {
				break
			}
			endPos += int64(bh.Size())
			nextOff = bh.NextOffset()
		}
	}
	if cut, err := s.checkDamage(startPos, endPos); err != nil {
		return true, err
	} else if cut < endPos {
		// Serve the sound batches before the damage; the next read
		// (from the damaged offset) gets the error.
		endPos, nextOff = cut, s.damage.Load().Offset
		addSpan(c, s.f, startPos, endPos, h.BaseOffset, nextOff, endPos, upTo, budget, first)
		return true, nil
	}
	return addSpan(c, s.f, startPos, endPos, h.BaseOffset, nextOff, size, upTo, budget, first), nil
}

// addSpan adds the batches of f in [start, end) (of a segment of size
// bytes), whose offsets run from firstOff to nextOff, to c, and reports
// whether the read is done: the span stopped before the segment's end, or
// reached upTo, or used up the budget.
func addSpan(c *Chunk, f *os.File, start, end, firstOff, nextOff, size, upTo int64, budget *int64, first *bool) bool {
	n := end - start
	if n <= 0 {
		return true
	}
	if c.Bytes == 0 {
		c.FirstOffset = firstOff
	}
	c.Ranges = append(c.Ranges, FileRange{File: f, Pos: start, Len: n})
	c.Bytes += n
	c.NextOffset = nextOff
	*budget -= n
	*first = false
	return end < size || nextOff >= upTo || *budget <= 0
}

// ReadBytes is Read followed by copying the ranges into dst (for callers
// that need the bytes in memory: the native protocol, compaction, tests).
func (l *Log) ReadBytes(dst []byte, offset int64, maxBytes int, upTo int64) ([]byte, error) {
	var c Chunk
	defer c.Release()
	if err := l.Read(&c, offset, maxBytes, upTo); err != nil {
		return dst, err
	}
	for _, r := range c.Ranges {
		start := len(dst)
		dst = append(dst, make([]byte, r.Len)...)
		if _, err := r.File.ReadAt(dst[start:], r.Pos); err != nil {
			return dst[:start], fmt.Errorf("wal: read %d bytes at %d: %w", r.Len, r.Pos, err)
		}
	}
	return dst, nil
}

// ScanHeaders calls fn with the header of every committed batch from the
// batch holding offset `from` to the end (any goroutine). It reads headers
// only. fn returning an error stops the scan with that error.
func (l *Log) ScanHeaders(from int64, fn func(h *batch.Header) error) error {
	var c Chunk
	defer c.Release()
	l.mu.RLock()
	end := l.end.Load()
	i := l.segmentForLocked(from)
	if i < 0 {
		i = 0
	}
	for j := i; j < len(l.segs); j++ {
		if l.segs[j].acquire() {
			c.segs = append(c.segs, l.segs[j])
		}
	}
	l.mu.RUnlock()
	var hdr [batch.HeaderSize]byte
	for _, s := range c.segs {
		size := s.size.Load()
		pos := int64(0)
		if from > s.base {
			var err error
			pos, _, err = s.findBatch(from, size)
			if errors.Is(err, io.EOF) {
				continue
			}
			if err != nil {
				return err
			}
		}
		for pos < size {
			h, err := s.readHeader(pos, &hdr)
			if err != nil {
				return err
			}
			if h.BaseOffset >= end {
				return nil
			}
			if err := fn(&h); err != nil {
				return err
			}
			pos += int64(h.Size())
		}
	}
	return nil
}

// TimestampOffset is the answer to a lookup by time.
type TimestampOffset struct {
	Offset    int64
	Timestamp int64
}

// OffsetForTime returns the first record whose timestamp is at or after ts,
// found through the time index and, inside the batch, by decoding its
// records (decompressing if needed). ok is false when no record is that
// late (ListOffsets then answers the end offset).
func (l *Log) OffsetForTime(ts int64) (TimestampOffset, bool, error) {
	var c Chunk
	defer c.Release()
	l.mu.RLock()
	for _, s := range l.segs {
		if s.maxTs.Load() >= ts && s.acquire() {
			c.segs = append(c.segs, s)
			break
		}
	}
	l.mu.RUnlock()
	if len(c.segs) == 0 {
		return TimestampOffset{}, false, nil
	}
	s := c.segs[0]
	size := s.size.Load()
	end := l.end.Load()
	rel := s.tidx.lookup(ts)
	var hdr [batch.HeaderSize]byte
	pos, h := s.seek(rel, size, &hdr)
	have := h.BaseOffset >= 0 // seek read the header at pos
	var buf []byte
	for pos < size {
		if !have {
			var err error
			if h, err = s.readHeader(pos, &hdr); err != nil {
				return TimestampOffset{}, false, err
			}
		}
		have = false
		if h.BaseOffset >= end {
			break
		}
		if h.MaxTimestamp >= ts {
			if !h.LogAppendTime() {
				buf = append(buf[:0], make([]byte, h.Size())...)
				if _, err := s.f.ReadAt(buf, pos); err != nil {
					return TimestampOffset{}, false, fmt.Errorf("wal: read batch at %d: %w", pos, err)
				}
			}
			got, err := RecordAtOrAfter(buf, &h, ts)
			return got, err == nil, err
		}
		pos += int64(h.Size())
	}
	return TimestampOffset{}, false, nil
}

// RecordAtOrAfter returns the first record of batch b (header h, whose
// MaxTimestamp is at or after ts) with a timestamp at or after ts,
// decoding its records (decompressing if needed). A LogAppendTime batch
// is its base offset, and b may then be nil: its records all carry
// MaxTimestamp.
func RecordAtOrAfter(b []byte, h *batch.Header, ts int64) (TimestampOffset, error) {
	if h.LogAppendTime() {
		return TimestampOffset{Offset: h.BaseOffset, Timestamp: h.MaxTimestamp}, nil
	}
	it, _, err := batch.Records(b, h, nil)
	if err != nil {
		return TimestampOffset{}, err
	}
	for r := range it.All() {
		if t := h.BaseTimestamp + r.TimestampDelta; t >= ts {
			return TimestampOffset{Offset: h.BaseOffset + int64(r.OffsetDelta), Timestamp: t}, nil
		}
	}
	// maxTimestamp promised a record this late: trust it.
	return TimestampOffset{Offset: h.BaseOffset, Timestamp: h.MaxTimestamp}, nil
}

// MaxTimestamp returns the offset and timestamp of the record with the
// largest timestamp in the log (ListOffsets MAX_TIMESTAMP); ok false when
// the log is empty. With ties, the first such record wins.
func (l *Log) MaxTimestamp() (TimestampOffset, bool, error) {
	mt := int64(-1)
	l.mu.RLock()
	for _, s := range l.segs {
		mt = max(mt, s.maxTs.Load())
	}
	l.mu.RUnlock()
	if mt < 0 {
		return TimestampOffset{}, false, nil
	}
	return l.OffsetForTime(mt)
}
