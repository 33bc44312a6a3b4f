package engine

import (
	"os"

	"golang.org/x/sys/unix"
)

// fileDescriptors returns the process's open-file limit (the soft
// RLIMIT_NOFILE, which the Go runtime raises to the hard one at start)
// and how many descriptors are open now.
func fileDescriptors() (limit, inUse int, ok bool) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY {
		return 0, 0, false
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, 0, false
	}
	return int(rl.Cur), len(ents), true
}

// diskFree is the bytes an unprivileged writer may still use on the file
// system holding path.
func diskFree(path string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * st.Bsize, true
}

// diskSize is the size of the file system holding path, and the bytes
// an unprivileged writer may still use on it.
func diskSize(path string) (total, usable int64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, false
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, true
}
