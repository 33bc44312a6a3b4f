package tiered

import (
	"context"
	"errors"
	"io"
)

// ErrNotFound is a Store's answer for a key it does not hold.
var ErrNotFound = errors.New("tiered: object not found")

// Store is an object store: whole objects written once, read by byte
// range, deleted. Implementations are safe for concurrent use.
type Store interface {
	// Put writes the object key with the size bytes of body (read from
	// its start; it may be read more than once, to sign or to retry).
	Put(ctx context.Context, key string, body io.ReadSeeker, size int64) error
	// GetRange returns up to n bytes of key from off: fewer only at the
	// object's end. A missing key is ErrNotFound.
	GetRange(ctx context.Context, key string, off, n int64) ([]byte, error)
	// Delete removes key; a key that is not there is not an error.
	Delete(ctx context.Context, key string) error
}
