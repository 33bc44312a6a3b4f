package wal

import (
	"fmt"
	"io"
	"slices"
)

// Tiered storage's side of the log: the sealed segments the uploader
// copies, the offset below which copies exist, and local retention.

// SealedSegment is a segment that is no longer written, held open for a
// reader until Release: what the tiered-storage uploader copies.
type SealedSegment struct {
	// Base is its first offset, End the offset after its last batch,
	// Size its length in bytes, MaxTimestamp its largest batch timestamp
	// (-1: none).
	Base, End, Size, MaxTimestamp int64
	// Aborted are the aborted transactions whose abort marker it holds.
	Aborted []AbortedTxn
	s       *segment
	// from is where in the segment's file Base's batch starts (0 but
	// for a segment copied from the middle, see CopyableSegments).
	from int64
}

// ReadAt reads the segment's bytes (io.ReaderAt), never past Size.
func (ss *SealedSegment) ReadAt(p []byte, off int64) (int, error) {
	if off >= ss.Size {
		return 0, io.EOF
	}
	short := false
	if rest := ss.Size - off; int64(len(p)) > rest {
		p, short = p[:rest], true
	}
	n, err := ss.s.f.ReadAt(p, ss.from+off)
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

// Release lets the segment's files close once the log is done with them.
func (ss *SealedSegment) Release() { ss.s.release() }

// CopyableSegments returns, referenced, up to max sealed segments whose base
// is at or after from and whose end is at or below upTo, oldest first
// (any goroutine). A segment qualifies only when every batch in it is
// committed and durable (its background flush done): a copy never holds
// bytes a power cut could take back from the local log. The caller
// releases each.
//
// A segment that holds from past its base comes first as its part from
// the batch starting at from (a replica that became the leader rolled
// its segments elsewhere than the leader whose copies it goes on with);
// when no batch starts at from, it comes whole, and the caller sees the
// mismatch.
func (l *Log) CopyableSegments(from, upTo int64, max int) []*SealedSegment {
	var out []*SealedSegment
	end := l.end.Load()
	l.mu.RLock()
	defer l.mu.RUnlock()
	for i := 0; i+1 < len(l.segs) && len(out) < max; i++ {
		s, next := l.segs[i], l.segs[i+1]
		segEnd := s.end.Load()
		if s.base < from && segEnd <= from {
			continue
		}
		// Commits are in order: the log's end past the next segment's
		// base means every batch of this one is committed.
		if next.base > end || segEnd > upTo || !s.flushed.Load() || s.damage.Load() != nil {
			break
		}
		if !s.acquire() {
			break
		}
		ss := &SealedSegment{
			Base: s.base, End: segEnd, Size: s.size.Load(), MaxTimestamp: s.maxTs.Load(),
			Aborted: append([]AbortedTxn(nil), s.aborted...), s: s,
		}
		if s.base < from {
			ss.tail(from)
		}
		out = append(out, ss)
	}
	return out
}

// tail makes ss its part from the batch that starts at offset from, if
// one does (else it stays whole).
func (ss *SealedSegment) tail(from int64) {
	pos, h, err := ss.s.findBatch(from, ss.Size)
	if err != nil || h.BaseOffset != from {
		return
	}
	ss.Base, ss.from, ss.Size = from, pos, ss.Size-pos
	ss.Aborted = slices.DeleteFunc(ss.Aborted, func(a AbortedTxn) bool { return a.LastOffset < from })
}

// SetRemoteEnd says the object store holds a copy of every segment that
// ends at or below off (tiered logs): local retention may delete those.
// It never moves back.
func (l *Log) SetRemoteEnd(off int64) {
	for {
		cur := l.remoteEnd.Load()
		if off <= cur || l.remoteEnd.CompareAndSwap(cur, off) {
			return
		}
	}
}

// RemoteEnd is the offset below which the object store holds every
// segment (SetRemoteEnd).
func (l *Log) RemoteEnd() int64 { return l.remoteEnd.Load() }

// enforceLocalRetention is EnforceRetention for a tiered log: the oldest
// segments past the local limits go, but only those already copied and
// never the active one (it is not copied until sealed).
func (l *Log) enforceLocalRetention(now int64) (int, error) {
	copied := l.remoteEnd.Load()
	var victims []*segment
	l.mu.RLock()
	total := int64(0)
	for _, s := range l.segs {
		total += s.size.Load()
	}
	for _, s := range l.segs[:len(l.segs)-1] {
		expired := l.opts.LocalRetentionAge > 0 && s.maxTs.Load() >= 0 &&
			now-s.maxTs.Load() > l.opts.LocalRetentionAge.Milliseconds()
		oversize := l.opts.LocalRetentionBytes > 0 && total-s.size.Load() >= l.opts.LocalRetentionBytes
		if (!expired && !oversize) || s.end.Load() > copied {
			break
		}
		victims = append(victims, s)
		total -= s.size.Load()
	}
	l.mu.RUnlock()
	n, err := l.deleteOldest(victims)
	if err != nil {
		return n, fmt.Errorf("wal: %s: local retention: %w", l.dir, err)
	}
	return n, nil
}

// SizeFrom is the number of bytes in the segments whose base is at or
// after off (any goroutine).
func (l *Log) SizeFrom(off int64) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segs {
		if s.base >= off {
			n += s.size.Load()
		}
	}
	return n
}
