//go:build !linux

package perf

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ODirectWrite is the O_DIRECT writer reference, which exists on Linux
// only (refs_linux.go): off Linux it fails with an error wrapping
// errors.ErrUnsupported, and the suite reports the reference as skipped.
func ODirectWrite(context.Context, string, time.Duration, int64) (RefResult, error) {
	res := RefResult{Name: "odirect_write"}
	return res, fmt.Errorf("the O_DIRECT writer reference: %w off Linux", errors.ErrUnsupported)
}
