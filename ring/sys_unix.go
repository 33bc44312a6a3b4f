//go:build unix && !linux

package ring

import "golang.org/x/sys/unix"

// sysScratch holds nothing off Linux: this path writes buffer by buffer.
type sysScratch struct{}

// writeAll writes the bytes of bufs from byte skip on at off+skip with
// pwrite, one buffer at a time, looping on short writes and retrying EINTR.
// It returns the bytes it wrote itself and the error that stopped it.
func writeAll(fd int, bufs [][]byte, off, skip int64, _ *sysScratch) (int64, error) {
	var total int64
	pos := int64(0)
	for _, b := range bufs {
		if pos+int64(len(b)) <= skip {
			pos += int64(len(b))
			continue
		}
		if pos < skip {
			b = b[skip-pos:]
			pos = skip
		}
		for len(b) > 0 {
			n, err := unix.Pwrite(fd, b, off+pos)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return total, err
			}
			if n <= 0 {
				return total, nil
			}
			b = b[n:]
			pos += int64(n)
			total += int64(n)
		}
	}
	return total, nil
}

// fdatasync is fsync here: not every Unix has fdatasync.
func fdatasync(fd int) error {
	for {
		err := unix.Fsync(fd)
		if err != unix.EINTR {
			return err
		}
	}
}

// dropCache does nothing: the hint promises nothing, and the page cache
// stays in the kernel's charge.
func dropCache(int, int64, int64) error { return nil }

// syncFileRange does nothing: only Linux has sync_file_range, and the
// writeback hint promises nothing.
func syncFileRange(int, int64, int64) error { return nil }
