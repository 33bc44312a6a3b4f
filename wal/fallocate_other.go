//go:build !linux

package wal

import "os"

// preallocate reserves nothing off Linux (Options.Preallocate is a Linux
// feature): it returns 0 bytes reserved and no error, so segments are
// created as on a file system without fallocate.
func preallocate(*os.File, int64) (int64, error) { return 0, nil }

// releasePrealloc has nothing to give back off Linux: preallocate never
// reserves anything there.
func releasePrealloc(*os.File, int64, int64) error { return nil }

// allocate gives f disk blocks for [off, off+n) by writing zeros there
// (the range is not in use yet: an index grows into it next), so that a
// full disk fails this write instead of a later store through the index's
// memory mapping.
func allocate(f *os.File, off, n int64) error {
	zeros := make([]byte, min(n, 64<<10))
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}
