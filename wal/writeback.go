package wal

import (
	"os"

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
// through b. A failure is logged once, as the writeback hint's: the pages
// stay cached, which costs memory and nothing else.
func (l *Log) dropBehind(b ring.Backend, seg *segment, upTo, chunk int64) {
	upTo = min(upTo, seg.writeback)
	upTo -= upTo % chunk
	// After a truncation dropped is the cut, inside a chunk.
	from := seg.dropped - seg.dropped%chunk
	if upTo <= from || upTo <= seg.dropped {
		return
	}
	seg.dropped = upTo
	if err := l.drop(b, seg.f, from, upTo-from); err != nil && !l.dropErr {
		l.dropErr = true
		l.logger.Warn("dropping written data from the page cache failed; appends go on", "segment", seg.base, "err", err)
	}
}
