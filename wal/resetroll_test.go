package wal

import (
	"bytes"
	"testing"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// A log reset to the leader's start rolls its segments at SegmentBytes
// like any other: the leader it may become copies them one by one to
// tiered storage.
func TestResetToRolls(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	opts := Options{SegmentBytes: 1500, IndexIntervalBytes: 200}
	dir := t.TempDir()
	l, _ := truncLog(t, dir, be, opts)
	defer l.Close()
	if err := l.ResetTo(1000); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		b := replicaBatch(t, i, 1000+int64(i)*2, 7, 2)
		if _, err := l.AppendReplica(be, [][]byte{b}, false); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.SegmentCount(); n < 3 {
		t.Fatalf("%d segments after 40 batches reset at 1000; segment bytes 1500", n)
	}
}

// CopyableSegments from an offset inside a sealed segment gives that
// segment's part from the batch at that offset (a new leader going on
// with the copies of one that rolled its segments elsewhere); from an
// offset where no batch starts, the segment whole.
func TestCopyableSegmentsTail(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	l := openLog(t, t.TempDir(), Options{SegmentBytes: 1 << 20})
	defer l.Close()
	var all [][]byte
	for i := 0; i < 10; i++ {
		b := makeBatch(t, i, 2, 16, int64(1000+i))
		all = append(all, b)
		appendOne(t, l, be, b, true)
	}
	appendOne(t, l, be, makeBatch(t, 99, 2, 16, 2000), true)
	if err := l.roll(); err != nil {
		t.Fatal(err)
	}
	appendOne(t, l, be, makeBatch(t, 100, 2, 16, 2001), true)
	segs := l.CopyableSegments(8, l.EndOffset(), 2)
	if len(segs) != 1 {
		t.Fatalf("%d segments from offset 8", len(segs))
	}
	ss := segs[0]
	defer ss.Release()
	if ss.Base != 8 || ss.End != 22 {
		t.Fatalf("from 8: [%d, %d)", ss.Base, ss.End)
	}
	got := make([]byte, ss.Size)
	if _, err := ss.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	first, _ := batch.ParseHeader(got)
	if first.BaseOffset != 8 || !bytes.Equal(got[:len(all[4])][12:], all[4][12:]) {
		t.Fatalf("the part starts with the batch at %d", first.BaseOffset)
	}
	// Offset 9 is inside a batch: the whole segment.
	whole := l.CopyableSegments(9, l.EndOffset(), 2)
	defer whole[0].Release()
	if whole[0].Base != 0 {
		t.Fatalf("from 9 (inside a batch): base %d, want the whole segment", whole[0].Base)
	}
}
