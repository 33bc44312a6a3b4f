//go:build !linux

package netio

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/metrics"
	"github.com/ringlog/ringlog/wal"
)

// copyChunk is the most bytes one copyRange call moves.
const copyChunk = 64 << 10

// Off Linux the response path is a development fallback: byte parts go out
// with unix.SendmsgBuffers (an iovec array allocated per call, no
// MSG_MORE) and file ranges are copied through user space (copyRange), so
// fetches cost a copy and count in CopiedBytes instead of SendfileBytes.

// sendIovecs sends iov with one sendmsg on the socket fd. There is no
// MSG_MORE here, so more is ignored.
func sendIovecs(fd int, iov []unix.Iovec, _ bool) (int, error) {
	bufs := make([][]byte, len(iov))
	for i, v := range iov {
		bufs[i] = unsafe.Slice(v.Base, v.Len)
	}
	return unix.SendmsgBuffers(fd, bufs, nil, nil, 0)
}

// sendFile copies the start of f to the socket fd through a user-space
// buffer (see copyRange) and advances f.Pos past what it sent, counting it
// in m.CopiedBytes. It returns 0 and no error when the file has no bytes
// at f.Pos.
func sendFile(fd int, f *wal.FileRange, m *metrics.Metrics) (int, error) {
	n, err := copyRange(fd, f, make([]byte, min(f.Len, copyChunk)))
	if n > 0 {
		m.CopiedBytes.Add(float64(n))
	}
	return n, err
}

// socketPair is a connected pair of Unix stream sockets, close-on-exec
// (the TLS front end's bridge; no SOCK_CLOEXEC here, so it is set after).
func socketPair() ([2]int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fds[0])
		unix.CloseOnExec(fds[1])
	}
	return fds, err
}
