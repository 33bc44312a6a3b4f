package testenv

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// MountTmpfs mounts a tmpfs of size bytes on dir (an existing directory),
// read-only when readOnly, and unmounts it at the test's cleanup. Where
// mounting is not permitted (not root, no CAP_SYS_ADMIN) the test is
// skipped, or failed under RINGLOG_REQUIRE_ROOT.
func MountTmpfs(t testing.TB, dir string, size int64, readOnly bool) {
	t.Helper()
	var flags uintptr
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, fmt.Sprintf("size=%d", size)); err != nil {
		Missing(t, Root, "cannot mount a tmpfs on %s (%v): run as root to test full and read-only disks", dir, err)
		return
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}
