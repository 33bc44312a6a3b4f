//go:build !linux

package testenv

import "testing"

// MountTmpfs mounts a tmpfs on dir on Linux; elsewhere there is no tmpfs
// to mount, so the test is skipped, or failed under RINGLOG_REQUIRE_ROOT.
func MountTmpfs(t testing.TB, dir string, size int64, readOnly bool) {
	t.Helper()
	Missing(t, Root, "cannot mount a tmpfs on %s: tmpfs mounts are Linux-only", dir)
}
