package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testenv"
)

// TestServeUnusableDataDir: a data directory that is a regular file, or
// on a read-only file system, stops `ringlog serve` at startup with exit
// 1 and a message naming the path and the fix.
func TestServeUnusableDataDir(t *testing.T) {
	check := func(t *testing.T, dataDir string, want ...string) {
		t.Helper()
		code, stdout, stderr := runBinary(t, 30*time.Second, serveArgs(t, dataDir)...)
		if code != 1 {
			t.Errorf("exit %d, want 1; stderr:\n%s", code, stderr)
		}
		if strings.Contains(stdout, "ringlog ready") {
			t.Errorf("the broker started on %s", dataDir)
		}
		for _, w := range append([]string{dataDir, "--data-dir"}, want...) {
			if !strings.Contains(stderr, w) {
				t.Errorf("the error lacks %q:\n%s", w, stderr)
			}
		}
	}
	t.Run("regular file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "data")
		if err := os.WriteFile(path, []byte("not a directory\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		check(t, path, "is not a directory", "regular file")
	})
	t.Run("under a regular file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		check(t, filepath.Join(file, "data"), "cannot create data directory")
	})
	t.Run("read-only", func(t *testing.T) {
		dir := t.TempDir()
		testenv.MountTmpfs(t, dir, 1<<20, true)
		check(t, dir, "not writable", "read-only file system", "mount it read-write")
	})
}
