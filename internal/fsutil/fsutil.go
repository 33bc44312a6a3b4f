// Package fsutil holds the file-system steps that make a change durable
// across a crash: syncing a directory (so that the creation, rename or
// removal of one of its entries survives) and replacing a small file
// atomically. The engine's metadata files and the wal's segment swaps use
// them.
package fsutil

import (
	"os"
	"path/filepath"
)

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
// directory.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
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
