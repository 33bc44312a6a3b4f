package wal

import (
	"os"

	"golang.org/x/sys/unix"
)

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
