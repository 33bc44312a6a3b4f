package wal

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback starts the writeback of seg's whole chunks below end that
// were not started yet (owner only). A failure is logged once and
// otherwise ignored: it promises nothing, and a failing disk shows up in
// the fdatasyncs that do.
func (l *Log) startWriteback(seg *segment, end, chunk int64) {
	end -= end % chunk
	if end <= seg.writeback {
		return
	}
	from := seg.writeback
	seg.writeback = end
	if err := l.writeback(seg.f, from, end-from); err != nil && !l.writebackErr {
		l.writebackErr = true
		l.logger.Warn("starting writeback failed; appends go on", "segment", seg.base, "err", err)
	}
}

// syncFileRange asks the kernel to start writing back [off, off+n) of f
// without waiting for it.
func syncFileRange(f *os.File, off, n int64) error {
	for {
		err := unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
		if err != unix.EINTR {
			return err
		}
	}
}
