//go:build !linux

package engine

// fileDescriptors is unknown off Linux: only MaxPartitions bounds
// creation there.
func fileDescriptors() (limit, inUse int, ok bool) { return 0, 0, false }

// diskFree is unknown off Linux: a full disk's partition retries its
// writes on every check.
func diskFree(string) (int64, bool) { return 0, false }

// diskSize is unknown off Linux.
func diskSize(string) (total, usable int64, ok bool) { return 0, 0, false }
