//go:build unix

package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/internal/fsutil"
)

// dataDirLockFile is held locked (flock, exclusive) by the broker that
// serves a data directory, for as long as its process lives.
const dataDirLockFile = ".ringlog.lock"

// lockDataDir creates dir if needed (with perm's mode) and locks it: one broker per data
// directory, since a second one would recover (and truncate) logs the first
// is appending to. It fails, naming the holder, when another process (or
// another Engine of this process) holds the lock. The lock goes with the
// returned file (closing it, or the process ending, releases it).
func lockDataDir(dir string, perm fsutil.Perm) (*os.File, error) {
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("data directory %s is not a directory (it is a %s): remove or move it, or point --data-dir at a directory", dir, fileKind(fi.Mode()))
	}
	if err := perm.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("cannot create data directory %s: %w: create it (writable by this user), or point --data-dir at a writable directory", dir, err)
	}
	path := filepath.Join(dir, dataDirLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, perm.File())
	if err != nil {
		if errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("data directory %s is not writable (%w): the broker writes its logs there; mount it read-write or fix its owner and permissions, or point --data-dir at a writable directory", dir, err)
		}
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		_ = f.Close() // nothing written: the lock was not ours
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s is in use by another ringlog process (%s): stop it, or give this one another data directory (--data-dir)",
				dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	// Who holds it, for the message above; the lock, not this text, is
	// what counts.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(fmt.Sprintf("pid %d\n", os.Getpid())), 0)
	}
	return f, nil
}

// fileKind names what a non-directory path is, for error messages.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m&os.ModeSymlink != 0:
		return "symbolic link"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	}
	return "file"
}

// LockDataDir takes the data directory's lock for an offline tool that
// changes its files (ringlog user): it fails, naming the holder, while a
// broker serves the directory. Close releases it. The directory (and the
// lock file) are created with perm's modes if missing.
func LockDataDir(dir string, perm fsutil.Perm) (io.Closer, error) { return lockDataDir(dir, perm) }
