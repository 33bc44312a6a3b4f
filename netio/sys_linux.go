package netio

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/metrics"
	"github.com/ringlog/ringlog/wal"
)

// sendIovecs sends iov with one sendmsg on the socket fd, with MSG_MORE
// when more bytes of the same response follow, so TCP sends them in the
// same segment. It uses the raw system call because unix.SendmsgBuffers
// allocates an iovec array per call.
func sendIovecs(fd int, iov []unix.Iovec, more bool) (int, error) {
	flags := 0
	if more {
		flags = unix.MSG_MORE
	}
	var msg unix.Msghdr
	msg.Iov = &iov[0]
	msg.SetIovlen(len(iov))
	n, _, errno := unix.Syscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), uintptr(flags))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// sendFile sends the start of f (at most 1 GiB) to the socket fd with
// sendfile, without copying it through user space, and advances f.Pos
// past what it sent, counting it in m.SendfileBytes. It returns 0 and no
// error when the file has no bytes at f.Pos.
func sendFile(fd int, f *wal.FileRange, m *metrics.Metrics) (int, error) {
	n, err := unix.Sendfile(fd, int(f.File.Fd()), &f.Pos, int(min(f.Len, 1<<30)))
	if n > 0 {
		m.SendfileBytes.Add(float64(n))
	}
	return n, err
}

// socketPair is a connected pair of Unix stream sockets, close-on-exec
// (the TLS front end's bridge).
func socketPair() ([2]int, error) {
	return unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
}
