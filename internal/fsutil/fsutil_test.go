package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "meta.json")
	for _, content := range []string{"first\n", "second, longer than the first\n", "3\n"} {
		if err := WriteFileAtomic(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != content {
			t.Fatalf("content %q, want %q", got, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640", fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file (no temporary left)", len(entries))
	}
}

func TestWriteFileAtomicFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFileAtomic(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory where the temporary file would go makes the write fail
	// after the old file exists.
	if err := os.Mkdir(path+".tmp", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, []byte("new"), 0o644); err == nil {
		t.Fatal("write over a blocked temporary path succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Fatalf("after a failed write the file holds %q, want the old content", got)
	}

	err := WriteFileAtomic(filepath.Join(dir, "missing", "f"), []byte("x"), 0o644)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("write into a missing directory: %v, want os.ErrNotExist", err)
	}
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("sync of a missing directory: %v, want os.ErrNotExist", err)
	}
}

// umask is the process's file mode creation mask, read from
// /proc/self/status (reading it with syscall.Umask would change it for
// a moment, under the other tests' feet); ok is false where it cannot be.
func umask(t *testing.T) (os.FileMode, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err != nil {
				t.Fatalf("Umask line %q: %v", line, err)
			}
			return os.FileMode(m), true
		}
	}
	return 0, false
}

func TestPermModes(t *testing.T) {
	for _, tc := range []struct {
		p         Perm
		file, dir os.FileMode
	}{{Perm{}, 0o600, 0o700}, {Perm{GroupRead: true}, 0o640, 0o750}} {
		if tc.p.File() != tc.file || tc.p.Dir() != tc.dir {
			t.Fatalf("%+v: file %v dir %v, want %v %v", tc.p, tc.p.File(), tc.p.Dir(), tc.file, tc.dir)
		}
		root := t.TempDir()
		dir := filepath.Join(root, "a", "b")
		if err := tc.p.MkdirAll(dir); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "f")
		if err := WriteFileAtomic(path, []byte("x"), tc.p.File()); err != nil {
			t.Fatal(err)
		}
		mask, known := umask(t)
		for p, want := range map[string]os.FileMode{filepath.Join(root, "a"): tc.dir, dir: tc.dir, path: tc.file} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got&^want != 0 || known && got != want&^mask {
				t.Errorf("%+v: %s has mode %v, want %v (umask %v)", tc.p, p, got, want, mask)
			}
		}
	}
}

// TestWriteFileAtomicLeftoverTemp: the temporary file of an interrupted
// write, left with a wider mode, does not hand that mode to the file.
func TestWriteFileAtomicLeftoverTemp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path+".tmp", []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path+".tmp", 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, []byte("whole"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v after a leftover temporary file of mode 0644, want 0600", fi.Mode().Perm())
	}
}

func TestPermRestrict(t *testing.T) {
	root := filepath.Join(t.TempDir(), "tree")
	sub := filepath.Join(root, "sub")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	files := map[string]os.FileMode{filepath.Join(root, "wide"): 0o666, filepath.Join(sub, "narrow"): 0o400,
		filepath.Join(sub, "group"): 0o640, outside: 0o644}
	for p, m := range files {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sub, 0o775|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := (Perm{}).Restrict(root); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{root: os.ModeDir | 0o700, sub: os.ModeDir | os.ModeSetgid | 0o700,
		filepath.Join(root, "wide"): 0o600, filepath.Join(sub, "narrow"): 0o400, filepath.Join(sub, "group"): 0o600,
		outside: 0o644} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v after Restrict, want %v", p, fi.Mode(), want)
		}
	}
	// Group access keeps the group's read bits and takes the rest.
	if err := os.Chmod(filepath.Join(sub, "group"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := (Perm{GroupRead: true}).Restrict(sub); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(sub, "group")); err != nil || fi.Mode() != 0o640 {
		t.Errorf("group file after a group-readable Restrict: %v %v, want 0640", fi.Mode(), err)
	}
}
