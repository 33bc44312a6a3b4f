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
