package wal

import (
	"fmt"

	"github.com/ringlog/ringlog/internal/fsutil"
)

// writeFileDurable replaces path with data so that a crash at any point
// leaves either the old or the new content, and the new content is on
// stable storage when it returns (fsutil.WriteFileAtomic), created with
// perm's file mode.
func writeFileDurable(path string, data []byte, perm fsutil.Perm) error {
	if err := fsutil.WriteFileAtomic(path, data, perm.File()); err != nil {
		return fmt.Errorf("write %s durably: %w", path, err)
	}
	return nil
}

// removeFileDurable removes path (absent is fine) and makes the removal
// durable.
func removeFileDurable(path string) error {
	if err := fsutil.RemoveDurable(path); err != nil {
		return fmt.Errorf("remove %s durably: %w", path, err)
	}
	return nil
}
