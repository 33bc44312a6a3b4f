//go:build linux

package ring

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysScratch is the reusable memory of the synchronous write path. Its
// iovec array is heap memory owned by one backend, so steady-state writes
// do not allocate (unix.Pwritev allocates a fresh array for more than eight
// buffers).
type sysScratch struct {
	iov []unix.Iovec
}

// pwritev is the raw system call on an iovec array, without unix.Pwritev's
// per-call allocation.
func pwritev(fd int, iov []unix.Iovec, off int64) (int, syscall.Errno) {
	const longBits = unsafe.Sizeof(uintptr(0)) * 8
	lo := uintptr(off)
	hi := uintptr(uint64(off) >> (longBits - 1) >> 1) // 0 on 64-bit
	r, _, e := unix.Syscall6(unix.SYS_PWRITEV, uintptr(fd),
		uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)), lo, hi, 0)
	return int(r), e
}

// writeAll writes the bytes of bufs from byte skip on (skip is what an
// earlier attempt already wrote) at off+skip, looping on short writes,
// retrying EINTR, and passing at most MaxIovecs iovecs per call. It returns the
// number of bytes it wrote itself (not counting skip) and the error that
// stopped it, nil when everything was written. A call that writes nothing
// and reports no error stops it too, with a nil error.
func writeAll(fd int, bufs [][]byte, off, skip int64, sc *sysScratch) (int64, error) {
	// Find where to start: buffer bi, byte bo within it.
	bi, bo := 0, int64(0)
	for s := skip; bi < len(bufs); bi++ {
		l := int64(len(bufs[bi]))
		if s < l {
			bo = s
			break
		}
		s -= l
	}
	var total int64
	for {
		if want := min(len(bufs)-bi, MaxIovecs); cap(sc.iov) < want {
			sc.iov = make([]unix.Iovec, 0, want)
		}
		iov := sc.iov[:0]
		for k, o := bi, bo; k < len(bufs) && len(iov) < MaxIovecs; k, o = k+1, 0 {
			b := bufs[k][o:]
			if len(b) == 0 {
				continue
			}
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
		if len(iov) == 0 {
			return total, nil
		}
		n, errno := pwritev(fd, iov, off+skip+total)
		clear(iov) // drop the references to the caller's buffers
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return total, errno
		}
		if n <= 0 {
			return total, nil
		}
		total += int64(n)
		// Advance (bi, bo) by n bytes.
		for r := int64(n); bi < len(bufs); bi, bo = bi+1, 0 {
			l := int64(len(bufs[bi])) - bo
			if r < l {
				bo += r
				break
			}
			r -= l
		}
	}
}

// fdatasync is unix.Fdatasync, retrying EINTR.
func fdatasync(fd int) error {
	for {
		err := unix.Fdatasync(fd)
		if err != unix.EINTR {
			return err
		}
	}
}

// dropCache asks the kernel to drop fd's page cache in [off, off+n)
// (posix_fadvise POSIX_FADV_DONTNEED). The kernel drops only clean pages:
// dirty ones and those still under writeback stay, so nothing written is
// lost and a later read of a dropped range reads the file again.
func dropCache(fd int, off, n int64) error {
	for {
		err := unix.Fadvise(fd, off, n, unix.FADV_DONTNEED)
		if err != unix.EINTR {
			return err
		}
	}
}

// syncFileRange starts the writeback of fd's dirty pages in [off, off+n)
// and does not wait for it (sync_file_range with SYNC_FILE_RANGE_WRITE),
// retrying EINTR.
func syncFileRange(fd int, off, n int64) error {
	for {
		err := unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
		if err != unix.EINTR {
			return err
		}
	}
}
