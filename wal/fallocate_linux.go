package wal

import (
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves size bytes of disk for f without changing what
// reads return (FALLOC_FL_KEEP_SIZE), so a preallocated segment still ends
// where its data ends. It returns the bytes reserved: size, or 0 with the
// error.
func preallocate(f *os.File, size int64) (int64, error) {
	for {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, size)
		if err == nil {
			return size, nil
		}
		if err != unix.EINTR {
			return 0, err
		}
	}
}

// releasePrealloc gives back the blocks reserved past a sealed segment's
// end.
func releasePrealloc(f *os.File, size, reserved int64) error {
	if reserved <= size {
		return nil
	}
	for {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, size, reserved-size)
		if err != unix.EINTR {
			return err
		}
	}
}

// allocate gives f disk blocks for [off, off+n) (fallocate mode 0, inside
// the file's size here: the size does not change).
func allocate(f *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	for {
		err := unix.Fallocate(int(f.Fd()), 0, off, n)
		if err != unix.EINTR {
			return err
		}
	}
}
