// Package fsutil holds the file-system steps that make a change durable
// across a crash: syncing a directory (so that the creation, rename or
// removal of one of its entries survives) and replacing a small file
// atomically. The engine's metadata files and the wal's segment swaps use
// them. Perm is the one place the modes of what the broker creates under
// its data directory come from.
package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Perm is who may read what the broker creates under its data
// directory. The zero value is owner-only: files 0600, directories 0700.
// GroupRead also lets the owning group read files and list directories
// (0640, 0750: a backup or monitoring user in the broker's group). The
// process's umask may take more away, never add. Files and directories
// that already exist keep their modes.
//
// It travels as a value (engine.Config.Perm, wal.Options.Perm) to
// every place that creates a file or directory.
type Perm struct {
	// GroupRead: files 0640 and directories 0750 instead of 0600 and
	// 0700.
	GroupRead bool
}

// File is the mode new files are created with.
func (p Perm) File() os.FileMode {
	if p.GroupRead {
		return 0o640
	}
	return 0o600
}

// Dir is the mode new directories are created with.
func (p Perm) Dir() os.FileMode {
	if p.GroupRead {
		return 0o750
	}
	return 0o700
}

// String describes p for logs.
func (p Perm) String() string {
	return fmt.Sprintf("files %04o, directories %04o", uint32(p.File()), uint32(p.Dir()))
}

// MkdirAll creates dir and the parents it lacks with p's directory mode.
func (p Perm) MkdirAll(dir string) error { return os.MkdirAll(dir, p.Dir()) }

// Restrict takes from every file and directory under root (root
// included) the permission bits p would not give it: a tree written by
// code that cannot be told which mode to use (a library) is made p's. It
// only removes bits, never adds, and leaves symbolic links alone. An
// entry removed meanwhile is skipped.
func (p Perm) Restrict(root string) error {
	gone := func(path string, err error) bool { return path != root && errors.Is(err, fs.ErrNotExist) }
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if gone(path, err) {
				return nil
			}
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if gone(path, err) {
				return nil
			}
			return err
		}
		allowed := p.File()
		if d.IsDir() {
			allowed = p.Dir()
		}
		mode := info.Mode().Perm()
		if mode&^allowed == 0 {
			return nil
		}
		special := info.Mode() & (fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		if err := os.Chmod(path, special|mode&allowed); err != nil && !gone(path, err) {
			return err
		}
		return nil
	})
}

// SyncDir fsyncs the directory dir, making the creations, renames and
// removals of its entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// WriteFileAtomic replaces path with data so that a crash leaves either the
// old content or the new one, never a mix: it writes path+".tmp", fsyncs
// it, renames it over path and syncs the directory. On failure the
// temporary file is removed and path is left as it was. The errors are
// *os.PathError values, so errors.Is(err, os.ErrNotExist) tells a missing
// directory. The file gets perm (less the umask) even where a temporary
// file of an interrupted write, with another mode, was left behind.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if errors.Is(err, fs.ErrExist) {
		// The leftover of an interrupted write: made anew, since
		// opening it would keep its mode. Something else there (a
		// directory) is opened as before, to fail with its own error.
		if fi, serr := os.Lstat(tmp); serr == nil && fi.Mode().IsRegular() {
			if err := os.Remove(tmp); err != nil {
				return err
			}
			f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		} else {
			f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_TRUNC, perm)
		}
	}
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// RemoveDurable removes path (a missing file is not an error) and syncs
// its directory, so that the removal survives a crash.
func RemoveDurable(path string) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return SyncDir(filepath.Dir(path))
}
