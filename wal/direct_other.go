//go:build !linux

package wal

import (
	"errors"
	"fmt"
	"os"
)

// openDirect fails off Linux: Options.DirectWrites is Linux only.
func openDirect(*os.File) (*os.File, error) {
	return nil, fmt.Errorf("open with O_DIRECT: %w", errors.ErrUnsupported)
}
