package netio

import (
	"errors"
	"io"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/wal"
)

// copyRange is the portable stand-in for sendfile, used off Linux (it is
// built everywhere so that its tests run on Linux too). It reads up to
// len(buf) bytes of f at f.Pos and writes them to the socket fd with one
// write, then advances f.Pos past the bytes the socket took. Like
// sendfile, it returns 0 and no error when the file has no bytes at
// f.Pos, and the write's error (EAGAIN, EINTR, ...) when it took nothing.
func copyRange(fd int, f *wal.FileRange, buf []byte) (int, error) {
	buf = buf[:min(int64(len(buf)), f.Len)]
	k, err := f.File.ReadAt(buf, f.Pos)
	if k == 0 {
		if errors.Is(err, io.EOF) {
			return 0, nil
		}
		return 0, err
	}
	n, err := unix.Write(fd, buf[:k])
	if n < 0 {
		n = 0
	}
	f.Pos += int64(n)
	return n, err
}
