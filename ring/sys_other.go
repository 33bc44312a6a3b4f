//go:build !unix

package ring

import "errors"

// sysScratch holds nothing: this platform has no write path.
type sysScratch struct{}

// writeAll is not supported on this platform: Op.Fd is a Unix descriptor.
func writeAll(int, [][]byte, int64, int64, *sysScratch) (int64, error) {
	return 0, errors.ErrUnsupported
}

// fdatasync is not supported on this platform.
func fdatasync(int) error { return errors.ErrUnsupported }

// dropCache does nothing: the hint promises nothing.
func dropCache(int, int64, int64) error { return nil }

// syncFileRange does nothing: the writeback hint promises nothing.
func syncFileRange(int, int64, int64) error { return nil }
