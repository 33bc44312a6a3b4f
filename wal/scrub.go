package wal

import (
	"errors"
	"fmt"
	"io"

	"github.com/ringlog/ringlog/wal/batch"
)

// Scrubbing: a sealed segment is re-read and every batch checked (framing,
// magic, CRC32C), so that damage the disk did after the write (a flipped
// bit) is found before a consumer meets it. A damaged segment is marked:
// reads serve the batches before the damage and return ErrCorrupt for the
// damaged one and everything after it in that segment, never the damaged
// bytes (a consumer that does not check CRCs would take them). The mark
// lasts until truncation cuts the segment below the damage (a follower
// refetching from its leader) or retention deletes the segment.

// Damage is what ScrubSegment found wrong in a segment.
type Damage struct {
	// Segment is the damaged segment's base offset; Pos the file
	// position of the first damaged batch.
	Segment, Pos int64
	// Offset is the first offset the damage may cover: the offset after
	// the last sound batch before it (the damaged batch's own header may
	// be what is damaged).
	Offset int64
	// Reason says what was wrong.
	Reason string
}

func (d *Damage) Error() string {
	return fmt.Sprintf("segment %d: damaged batch at byte %d (offset %d on): %s", d.Segment, d.Pos, d.Offset, d.Reason)
}

// Unwrap makes a Damage an ErrCorrupt.
func (d *Damage) Unwrap() error { return ErrCorrupt }

// ErrSegmentGone is ScrubSegment's answer for a segment that is no longer
// a sealed segment of the log (deleted by retention or compaction, or
// truncated into the active one).
var ErrSegmentGone = errors.New("wal: segment gone")

// SealedSegments returns the base offsets of the log's sealed segments
// (every one but the active), oldest first. Safe on any goroutine.
func (l *Log) SealedSegments() []int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.segs) == 0 {
		return nil
	}
	out := make([]int64, 0, len(l.segs)-1)
	for _, s := range l.segs[:len(l.segs)-1] {
		out = append(out, s.base)
	}
	return out
}

// ScrubSegment re-reads the sealed segment based at base, batch by batch
// through buf (grown as a batch needs; the caller keeps it for the next
// call), checking each with batch.CheckStored and that offsets increase,
// and calls pace with the bytes read after each batch (for the caller's
// rate limit). It returns the bytes checked and the buffer, and, when a
// batch is damaged, marks the segment (see Damage) and returns the damage
// as the error. Safe on any goroutine: it reads with a reference, as
// fetches do.
func (l *Log) ScrubSegment(base int64, buf []byte, pace func(int)) (int64, []byte, error) {
	l.mu.RLock()
	var s *segment
	for i, seg := range l.segs {
		if seg.base == base && i < len(l.segs)-1 && seg.acquire() {
			s = seg
		}
	}
	l.mu.RUnlock()
	if s == nil {
		return 0, buf, ErrSegmentGone
	}
	defer s.release()
	size := s.size.Load()
	next := s.base
	var read int64
	var hdr [batch.HeaderSize]byte
	damaged := func(pos int64, format string, args ...any) (int64, []byte, error) {
		d := &Damage{Segment: s.base, Pos: pos, Offset: next, Reason: fmt.Sprintf(format, args...)}
		if old := s.damage.Load(); old == nil || old.Pos > pos {
			s.damage.Store(d)
		}
		return read, buf, d
	}
	for pos := int64(0); pos < size; {
		if size-pos < batch.HeaderSize {
			return damaged(pos, "%d bytes at the end are not a batch", size-pos)
		}
		if _, err := s.f.ReadAt(hdr[:], pos); err != nil {
			return read, buf, fmt.Errorf("segment %d: read at %d: %w", s.base, pos, err)
		}
		h, err := batch.ParseHeader(hdr[:])
		n := int64(h.Size())
		switch {
		case err != nil:
			return damaged(pos, "%v", err)
		case n < batch.HeaderSize || n > size-pos:
			return damaged(pos, "batch length %d does not fit the segment's %d bytes from there", h.Length, size-pos)
		case h.BaseOffset < next:
			return damaged(pos, "base offset %d below %d, the end of the batch before", h.BaseOffset, next)
		}
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		b := buf[:n]
		if _, err := s.f.ReadAt(b, pos); err != nil {
			if errors.Is(err, io.EOF) {
				return damaged(pos, "batch cut short")
			}
			return read, buf, fmt.Errorf("segment %d: read at %d: %w", s.base, pos, err)
		}
		if _, err := batch.CheckStored(b); err != nil {
			return damaged(pos, "%v", err)
		}
		next = h.NextOffset()
		pos += n
		read += n
		if pace != nil {
			pace(int(n))
		}
	}
	return read, buf, nil
}

// checkDamage limits a read span [start, end) of s to the bytes before a
// damage the scrubber marked: it returns the new end, or an error when the
// span starts at or past the damage.
func (s *segment) checkDamage(start, end int64) (int64, error) {
	d := s.damage.Load()
	if d == nil || end <= d.Pos {
		return end, nil
	}
	if start >= d.Pos {
		return start, fmt.Errorf("%w (found by the scrubber; not served)", d)
	}
	return d.Pos, nil
}
