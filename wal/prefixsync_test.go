package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// recordingBackend runs ops on a portable backend and remembers, per
// batch, the files it synced, in order.
type recordingBackend struct {
	inner  ring.Backend
	synced [][]string
}

func (r *recordingBackend) Name() string { return "recording" }
func (r *recordingBackend) Close() error { return r.inner.Close() }
func (r *recordingBackend) Run(ops []ring.Op) error {
	var names []string
	for _, op := range ops {
		if op.Kind == ring.OpFdatasync {
			p, _ := os.Readlink("/proc/self/fd/" + itoa(op.Fd))
			names = append(names, p)
		}
	}
	r.synced = append(r.synced, names)
	return r.inner.Run(ops)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestSyncCoversEarlierSegments: an unsynced (acks=1) append fills a
// segment, the log rolls, and a synced (acks=all) append goes to the new
// segment. Its batch must sync the earlier segment first (linked ahead of
// its own writes and sync), so that a power cut cannot keep the
// acknowledged batch and lose the unsynced bytes before it; once synced,
// the earlier segment is not synced again. The same holds after a
// restart without a clean stop, for a sealed segment above the recovery
// point.
func TestSyncCoversEarlierSegments(t *testing.T) {
	dir := t.TempDir()
	rb := &recordingBackend{inner: ring.NewPortable()}
	opts := Options{SegmentBytes: 2048, MaxIndexBytes: 1 << 16}
	l := openLog(t, dir, opts)
	if _, err := l.Append(rb, [][]byte{makeBatch(t, 1, 4, 300, 1)}, false); err != nil {
		t.Fatal(err)
	}
	first := l.active().path(logSuffix)
	if _, err := l.Append(rb, [][]byte{makeBatch(t, 2, 4, 300, 2)}, false); err != nil {
		t.Fatal(err)
	}
	if l.active().path(logSuffix) == first {
		t.Fatal("the second append did not roll the 2 KiB segment")
	}
	// The first segment's background flush runs after the roll; put the
	// log back in the window before it completes.
	l.bg.Wait()
	l.segs[0].flushed.Store(false)
	l.pendingFlush = append(l.pendingFlush[:0], l.segs[0])
	rb.synced = nil
	if _, err := l.Append(rb, [][]byte{makeBatch(t, 3, 1, 10, 3)}, true); err != nil {
		t.Fatal(err)
	}
	if len(rb.synced) != 1 || len(rb.synced[0]) != 2 || rb.synced[0][0] != first || rb.synced[0][1] != l.active().path(logSuffix) {
		t.Fatalf("the acks=all batch synced %v; want %s, then the active segment", rb.synced, first)
	}
	rb.synced = nil
	if _, err := l.Append(rb, [][]byte{makeBatch(t, 4, 1, 10, 4)}, true); err != nil {
		t.Fatal(err)
	}
	if len(rb.synced) != 1 || len(rb.synced[0]) != 1 {
		t.Fatalf("the next acks=all batch synced %v; want only the active segment", rb.synced)
	}
	// A kill before the background flush advanced the recovery point:
	// the sealed segment is above it, so after the restart its bytes may
	// be in the page cache only, and the first sync covers it.
	l.bg.Wait()
	for _, s := range l.segs {
		s.closeFiles()
	}
	if err := os.Remove(filepath.Join(dir, recoveryPointFile)); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, dir, opts)
	if len(l2.pendingFlush) != 1 || l2.pendingFlush[0].path(logSuffix) != first {
		t.Fatalf("after the restart %d segments are pending a flush; want the sealed one above the recovery point", len(l2.pendingFlush))
	}
	rb.synced = nil
	if _, err := l2.Append(rb, [][]byte{makeBatch(t, 5, 1, 10, 5)}, true); err != nil {
		t.Fatal(err)
	}
	if len(rb.synced) != 1 || len(rb.synced[0]) != 2 || rb.synced[0][0] != first {
		t.Fatalf("after the restart the acks=all batch synced %v; want %s, then the active segment", rb.synced, first)
	}
}

// TestRecoveryPointWaitsForEarlierFlushes: sealed segments' background
// flushes may end in any order; the recovery point (below which an
// unclean open trusts the files without a rescan) must stop at the first
// segment not yet flushed, not jump to the end of a later one.
func TestRecoveryPointWaitsForEarlierFlushes(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{SegmentBytes: 2048, MaxIndexBytes: 1 << 16})
	for i := range 4 {
		if _, err := l.Append(ring.NewPortable(), [][]byte{makeBatch(t, i, 4, 300, int64(i))}, false); err != nil {
			t.Fatal(err)
		}
	}
	l.bg.Wait()
	if len(l.segs) < 4 {
		t.Fatalf("%d segments, want at least 4", len(l.segs))
	}
	for _, s := range l.segs {
		s.flushed.Store(false)
	}
	l.segs[1].flushed.Store(true)
	l.segs[2].flushed.Store(true)
	if got := l.flushedPrefixEnd(); got != -1 {
		t.Fatalf("recovery point candidate %d with the first segment unflushed; want -1", got)
	}
	l.segs[0].flushed.Store(true)
	if got, want := l.flushedPrefixEnd(), l.segs[2].end.Load(); got != want {
		t.Fatalf("recovery point candidate %d, want %d (the end of the third segment)", got, want)
	}
}
