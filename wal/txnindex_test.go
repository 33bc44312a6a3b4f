package wal

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// txnBatch builds a transactional batch of producer pid with keyed records.
func txnBatch(t *testing.T, pid int64, seq int32, keys ...string) []byte {
	t.Helper()
	b := batch.NewBuilder()
	b.ProducerID, b.ProducerEpoch, b.BaseSequence, b.Transactional = pid, 0, seq, true
	for _, k := range keys {
		b.Add(1, []byte(k), []byte("txn-"+k), nil)
	}
	out, err := b.Build(nil, batch.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAbortedTxnIndex(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 300, MaxIndexBytes: 1 << 12})
	first := appendOne(t, l, be, txnBatch(t, 5, 0, "a", "b"), false).BaseOffset
	appendOne(t, l, be, txnBatch(t, 6, 0, "c"), false)
	marker := appendOne(t, l, be, batch.AppendControl(nil, 5, 0, batch.ControlAbort, 0, 1), false).BaseOffset
	if err := l.AddAbortedTxn(AbortedTxn{ProducerID: 5, FirstOffset: first, LastOffset: marker, LastStableOffset: 2}); err != nil {
		t.Fatal(err)
	}
	if err := l.AddAbortedTxn(AbortedTxn{ProducerID: 5, FirstOffset: first, LastOffset: marker}); err == nil {
		t.Fatal("an entry not past the last one was accepted")
	}
	for i := 0; i < 10; i++ { // roll a few segments
		appendOne(t, l, be, makeBatch(t, i, 3, 40, 1), false)
	}
	check := func(l *Log, from, upTo int64, want int) {
		t.Helper()
		if got := l.AbortedTxns(nil, from, upTo); len(got) != want {
			t.Fatalf("AbortedTxns(%d, %d) = %+v, want %d entries", from, upTo, got, want)
		}
	}
	check(l, 0, math.MaxInt64, 1)
	check(l, marker, marker+1, 1)
	check(l, marker+1, math.MaxInt64, 0) // marker before the range
	check(l, 0, first, 0)                // data after the range
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened, the entry comes from the segment's .txnindex.
	l = openLog(t, dir, Options{SegmentBytes: 300, MaxIndexBytes: 1 << 12})
	check(l, 0, math.MaxInt64, 1)
	idx := filepath.Join(dir, segmentName(0, txnIndexSuffix))
	if fi, err := os.Stat(idx); err != nil || fi.Size() != txnEntrySize {
		t.Fatalf("txnindex file: %v %v", fi, err)
	}
	// A torn entry (crash mid-write) is dropped at open.
	f, _ := os.OpenFile(idx, os.O_WRONLY|os.O_APPEND, 0)
	f.Write(make([]byte, 10))
	f.Close()
	l.Close()
	l = openLog(t, dir, Options{SegmentBytes: 300, MaxIndexBytes: 1 << 12})
	check(l, 0, math.MaxInt64, 1)
	// Dropping from the marker removes it and its file.
	if err := l.DropAbortedTxnsFrom(marker); err != nil {
		t.Fatal(err)
	}
	check(l, 0, math.MaxInt64, 0)
	if _, err := os.Stat(idx); !os.IsNotExist(err) {
		t.Fatalf("txnindex of no entries still there: %v", err)
	}
	l.Close()
}

func TestCompactionDropsAbortedDataKeepsMarkers(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 400, MaxIndexBytes: 1 << 12})
	appendOne(t, l, be, keyedBatch(t, 1, [2]*string{s("k"), s("committed-before")}), false)
	first := appendOne(t, l, be, txnBatch(t, 7, 0, "k"), false).BaseOffset // aborted below
	marker := appendOne(t, l, be, batch.AppendControl(nil, 7, 0, batch.ControlAbort, 0, 1), false).BaseOffset
	if err := l.AddAbortedTxn(AbortedTxn{ProducerID: 7, FirstOffset: first, LastOffset: marker}); err != nil {
		t.Fatal(err)
	}
	commitData := appendOne(t, l, be, txnBatch(t, 8, 0, "j"), false).BaseOffset
	commit := appendOne(t, l, be, batch.AppendControl(nil, 8, 0, batch.ControlCommit, 0, 1), false).BaseOffset
	for i := 0; i < 12; i++ {
		appendOne(t, l, be, keyedBatch(t, 1, [2]*string{s("other"), s("x")}), false)
	}
	// An open transaction at the end holds back every segment reaching it.
	if p := l.PlanCompaction(CompactOptions{Unstable: first}); p != nil {
		t.Fatalf("a segment holding the unstable offset %d was planned: %d segments", first, len(p.segs))
	}
	compactNow(t, l, CompactOptions{})
	buf, err := l.ReadBytes(nil, l.StartOffset(), 1<<20, l.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{}
	var markers []int64
	for len(buf) > 0 {
		n := int(batch.BatchLength(buf)) + batch.LogOverhead
		h, err := batch.CheckStored(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		if h.Control() {
			markers = append(markers, h.BaseOffset)
		} else {
			it, _, _ := batch.Records(buf[:n], &h, nil)
			for r, ok := it.Next(); ok; r, ok = it.Next() {
				values[string(r.Key)] = string(r.Value)
			}
		}
		buf = buf[n:]
	}
	if values["k"] != "committed-before" {
		t.Fatalf("key k = %q: the aborted transaction's record replaced the committed one", values["k"])
	}
	if values["j"] != "txn-j" {
		t.Fatalf("committed transactional record lost: %q (data at %d)", values["j"], commitData)
	}
	if len(markers) != 2 || markers[0] != marker || markers[1] != commit {
		t.Fatalf("markers after compaction %v, want [%d %d]", markers, marker, commit)
	}
	if got := l.AbortedTxns(nil, 0, math.MaxInt64); len(got) != 1 || got[0].LastOffset != marker {
		t.Fatalf("aborted index after compaction: %+v", got)
	}
	l.Close()
}
