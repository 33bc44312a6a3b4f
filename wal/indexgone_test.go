package wal

import (
	"os"
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// An index file can vanish while its segment is live: distrustIndex
// removes one found wrong (and a reader of an older segment of the same
// name may). The index keeps no descriptor, so these check that a removed
// index costs only its rebuild at the next open: the log still closes
// cleanly, rolls (releasing its preallocated space) and truncates.

func TestRemovedActiveIndexClosesCleanly(t *testing.T) {
	be := ring.NewPortable()
	defer be.Close()
	l := openLog(t, t.TempDir(), Options{IndexIntervalBytes: 64})
	for i := 0; i < 20; i++ {
		appendOne(t, l, be, makeBatch(t, i, 2, 32, 1_000+int64(i)), true)
	}
	l.active().distrustIndex("test")
	appendOne(t, l, be, makeBatch(t, 20, 2, 32, 1_100), true) // no entry can be reserved: none is written
	if err := l.Close(); err != nil {
		t.Fatalf("close with the active segment's index removed: %v", err)
	}
}

func TestRemovedSealedIndexTruncates(t *testing.T) {
	be := ring.NewPortable()
	defer be.Close()
	l := openLog(t, t.TempDir(), Options{SegmentBytes: 1500, IndexIntervalBytes: 64})
	defer l.Close()
	for i := 0; i < 40; i++ {
		appendOne(t, l, be, makeBatch(t, i, 2, 32, 1_000+int64(i)), true)
	}
	first := l.segs[0]
	first.distrustIndex("test")
	if _, err := l.TruncateTo(first.base + 3); err != nil {
		t.Fatalf("truncate into a segment whose index was removed: %v", err)
	}
	appendOne(t, l, be, makeBatch(t, int(first.base+3), 2, 32, 2_000), true)
}

func TestRemovedIndexRollReleasesPreallocation(t *testing.T) {
	be := ring.NewPortable()
	defer be.Close()
	l := openLog(t, t.TempDir(), Options{SegmentBytes: 8 << 20, Preallocate: true, IndexIntervalBytes: 64})
	defer l.Close()
	appendOne(t, l, be, makeBatch(t, 0, 2, 32, 1_000), true)
	s := l.active()
	s.distrustIndex("test")
	if err := l.roll(); err != nil {
		t.Fatal(err)
	}
	l.sealPending()
	l.bg.Wait()
	st, err := os.Stat(s.path(timeIndexSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != s.tidx.entries.Load()*timeEntrySize {
		t.Fatalf("time index not trimmed after the offset index was removed: %d bytes", st.Size())
	}
	if st, _ := os.Stat(s.path(logSuffix)); st.Size() != s.size.Load() {
		t.Fatalf("log keeps %d bytes preallocated past its %d", st.Size(), s.size.Load())
	}
}
