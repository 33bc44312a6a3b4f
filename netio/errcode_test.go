package netio

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/internal/nativeproto"
	"github.com/ringlog/ringlog/wal"
)

// TestErrCodeOuterKafkaErrorWins maps errors shaped like the engine's (a
// Kafka error wrapped first, the cause after it) to error codes: the cause
// stays reachable with errors.Is, yet the outermost Kafka error decides
// the code, even when the cause holds another Kafka error or a wal error
// with a code of its own.
func TestErrCodeOuterKafkaErrorWins(t *testing.T) {
	enospc := &os.PathError{Op: "write", Path: "t-0/00000000000000000000.log", Err: syscall.ENOSPC}
	storage := fmt.Errorf("%w: t-0: %w", kerr.KafkaStorageError, enospc)
	coord := fmt.Errorf("%w: write %s: %w", kerr.CoordinatorNotAvailable, "__consumer_offsets", storage)
	outOfRange := fmt.Errorf("%w: t-0 is offline: %w", kerr.KafkaStorageError, wal.ErrOffsetOutOfRange)
	for _, c := range []struct {
		name   string
		err    error
		code   int16
		native byte
	}{
		{"storage error caused by ENOSPC", storage, kerr.KafkaStorageError.Code, nativeproto.CodeStorageError},
		{"coordinator error caused by a storage error", coord, kerr.CoordinatorNotAvailable.Code, nativeproto.CodeNotAvailable},
		{"storage error caused by a wal error", outOfRange, kerr.KafkaStorageError.Code, nativeproto.CodeStorageError},
		{"bare wal error", fmt.Errorf("read: %w", wal.ErrOffsetOutOfRange), kerr.OffsetOutOfRange.Code, nativeproto.CodeOffsetOutOfRange},
		{"bare I/O error", enospc, kerr.UnknownServerError.Code, nativeproto.CodeNotAvailable},
	} {
		if got := errCode(c.err); got != c.code {
			t.Errorf("%s: errCode %v, want %v", c.name, kerr.ErrorForCode(got), kerr.ErrorForCode(c.code))
		}
		if got := NativeCodeFor(c.err); got != c.native {
			t.Errorf("%s: native code %d, want %d", c.name, got, c.native)
		}
	}
	if !errors.Is(coord, syscall.ENOSPC) || !errors.Is(coord, kerr.KafkaStorageError) {
		t.Error("the cause is lost")
	}
	// The message keeps the detail and the cause, without repeating the
	// outer error's name (the code says it).
	want := "write __consumer_offsets: " + storage.Error()
	if got := errMessage(coord); got == nil || *got != want {
		t.Errorf("errMessage = %v, want %q", got, want)
	}
}
