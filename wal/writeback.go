package wal

import (
	"os"
	"slices"

	"github.com/ringlog/ringlog/ring"
)

// hintDrop is Log.drop outside tests: like hintWriteback, through the
// backend that committed the writes.
func hintDrop(b ring.Backend, f *os.File, off, n int64) error {
	return ring.DropCache(b, int(f.Fd()), off, n)
}

// hintWriteback is Log.writeback outside tests: the hint goes to the
// backend that committed the writes, so a ring-backed shard hands it to
// io_uring and the committer (an event loop, on the direct-write path)
// does not wait for the kernel to issue the writes.
func hintWriteback(b ring.Backend, f *os.File, off, n int64) error {
	return ring.StartWriteback(b, int(f.Fd()), off, n)
}

// startWriteback starts the writeback of seg's whole chunks below end that
// were not started yet (owner only), through b, and drops those the page
// cache tail left behind. synced says the stage's fdatasync has just
// written everything below end back: the chunks only count as started. A
// failure is logged once and otherwise ignored: it promises nothing, and
// a failing disk shows up in the fdatasyncs that do.
func (l *Log) startWriteback(b ring.Backend, seg *segment, end, chunk int64, synced bool) {
	end -= end % chunk
	if end <= seg.writeback {
		return
	}
	from := seg.writeback
	seg.writeback = end
	if !synced {
		if err := l.writeback(b, seg.f, from, end-from); err != nil && !l.writebackErr {
			l.writebackErr = true
			l.logger.Warn("starting writeback failed; appends go on", "segment", seg.base, "err", err)
		}
	}
	if tail := l.opts.PageCacheTailBytes; tail > 0 {
		l.dropBehind(b, seg, end-tail, chunk)
	}
}

// dropBehind drops seg's whole chunks below upTo (and below the writeback
// started) that were not dropped yet from the page cache (owner only),
// through b.
func (l *Log) dropBehind(b ring.Backend, seg *segment, upTo, chunk int64) {
	upTo = min(upTo, seg.writeback)
	l.dropTo(b, seg, upTo-upTo%chunk)
}

// folioSpan is the largest page-cache folio the drops allow for (a PMD on
// x86-64): the kernel drops only folios wholly inside a range, so each
// drop starts this far back, aligned, to take the folio that straddled
// the end of the one before.
const folioSpan = 2 << 20

// dropTo drops [seg.dropped, upTo) of seg from the page cache, from the
// folioSpan boundary below (owner only). A failure is logged once, as the
// writeback hint's: the pages stay cached, which costs memory and nothing
// else.
func (l *Log) dropTo(b ring.Backend, seg *segment, upTo int64) {
	if upTo <= seg.dropped {
		return
	}
	// After a truncation dropped is the cut, inside a chunk; it is
	// dropped again from the span's start either way.
	from := seg.dropped - seg.dropped%folioSpan
	seg.dropped = upTo
	if err := l.drop(b, seg.f, from, upTo-from); err != nil && !l.dropErr {
		l.dropErr = true
		l.logger.Warn("dropping written data from the page cache failed; appends go on", "segment", seg.base, "err", err)
	}
}

// dropSealed drops what the page cache tail leaves of the segments rolled
// away from (l.undropped, owner only), whose appends no longer drop
// anything: a sealed segment's bytes lie behind the tail once the
// segments after it hold that many, and all of it is clean once its flush
// after the seal is done (before that, only the chunks written back count,
// as for the active segment). A segment leaves the list once dropped
// whole, deleted, or active again after a truncation.
func (l *Log) dropSealed(b ring.Backend, chunk int64) {
	tail := l.opts.PageCacheTailBytes
	if tail <= 0 || chunk <= 0 { // turned off since (SetOptions)
		for _, s := range l.undropped {
			s.dropPending = false
		}
		l.undropped = l.undropped[:0]
		return
	}
	act := l.active()
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	first := l.undropped[0]
	after := int64(0) // bytes of the segments after the one at hand
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		if s != act && s.dropPending && !s.deleted.Load() {
			upTo := s.size.Load() - max(0, tail-after)
			if !s.flushed.Load() {
				upTo = min(upTo, s.writeback)
				upTo -= upTo % chunk
			}
			l.dropTo(b, s, upTo)
		}
		after += s.size.Load()
		if s == first {
			break
		}
	}
	l.undropped = slices.DeleteFunc(l.undropped, func(s *segment) bool {
		done := s == act || s.deleted.Load() || s.dropped >= s.size.Load()
		if done {
			s.dropPending = false
		}
		return done
	})
}
