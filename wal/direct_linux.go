package wal

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openDirect opens f's file again, write-only with O_DIRECT, through
// /proc/self/fd: the same inode even if the name was replaced since. f
// keeps serving buffered reads.
func openDirect(f *os.File) (*os.File, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open with O_DIRECT (direct writes need a file system that supports it): %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
