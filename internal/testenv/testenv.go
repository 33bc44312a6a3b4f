// Package testenv lets a test that needs something of the machine (io_uring,
// an installed client) skip where it is missing, and fail instead when the
// environment says it must be there: CI sets the flags (.ci/run), so a
// machine that lost io_uring or a tool shows up as a failure, not as a
// quietly skipped test.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"testing"
)

// Environment variables that turn a skip into a failure when set to
// anything but "" or "0".
const (
	// IOURing requires io_uring (and the ring features the tests use).
	IOURing = "RINGLOG_REQUIRE_IOURING"
	// Kcat requires librdkafka's kcat on the PATH.
	Kcat = "RINGLOG_REQUIRE_KCAT"
	// Root requires the privileges to mount file systems (the disk-full
	// and read-only data directory tests mount small tmpfs instances).
	Root = "RINGLOG_REQUIRE_ROOT"
)

// Required reports whether the environment variable flag asks for the
// capability to be present.
func Required(flag string) bool {
	v := os.Getenv(flag)
	return v != "" && v != "0"
}

// Missing ends t because a capability is missing: t.Skip normally, t.Fatal
// when flag is set. The message says why, and which flag made it fail.
func Missing(t testing.TB, flag, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required(flag) {
		t.Fatalf("%s (required: %s is set)", msg, flag)
		return
	}
	t.Skip(msg)
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers: a
// log sink for a broker's goroutines, or a child process's output copied
// while the test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
