package wal

import (
	"bytes"
	"testing"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// TestTailReadsUseRecentBatches: a read at the base offset of a batch
// committed lately finds it in the segment's recent batches, without the
// offset index (which, sparse, would need header reads), and returns the
// same bytes as a walk; after a truncation the same offset, written again
// with other data at another position, reads the new batch.
func TestTailReadsUseRecentBatches(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	l := openLog(t, t.TempDir(), Options{IndexIntervalBytes: 1 << 20}) // one index entry: the walk is long
	defer l.Close()
	var batches [][]byte
	var bases []int64
	for i := 0; i < 40; i++ {
		b := makeBatch(t, i, 1+i%3, 50, int64(1000+i))
		batches = append(batches, b)
		bases = append(bases, appendOne(t, l, be, b, false).BaseOffset)
	}
	seg := l.active()
	for i := 40 - len(seg.recent); i < 40; i++ {
		pos, ok := seg.recentBatch(bases[i])
		if !ok {
			t.Fatalf("batch %d (offset %d) not among the recent ones", i, bases[i])
		}
		got, err := l.ReadBytes(nil, bases[i], 1<<20, l.EndOffset())
		if err != nil {
			t.Fatal(err)
		}
		if want := bytes.Join(batches[i:], nil); !sameBatches(got, want) {
			t.Fatalf("read at %d (recent, position %d): %d bytes, want the %d of batches %d on", bases[i], pos, len(got), len(want), i)
		}
	}
	if _, ok := seg.recentBatch(bases[40-len(seg.recent)-1]); ok {
		t.Errorf("batch %d is still among the %d recent ones", 40-len(seg.recent)-1, len(seg.recent))
	}
	// Off a batch boundary, or older than the ring: the index and the
	// walk, as before.
	if got, err := l.ReadBytes(nil, bases[5]+1, 1<<20, l.EndOffset()); err != nil || !sameBatches(got, bytes.Join(batches[5:], nil)) {
		t.Fatalf("read inside batch 5: %d bytes, %v", len(got), err)
	}
	// A budget smaller than the rest: the walk, which stops at it.
	if got, err := l.ReadBytes(nil, bases[35], len(batches[35])+1, l.EndOffset()); err != nil || !sameBatches(got, batches[35]) {
		t.Fatalf("read of batch 35 with a budget of one batch: %d bytes, %v", len(got), err)
	}

	// Truncate to batch 30 and write other batches there.
	if _, err := l.TruncateTo(bases[30]); err != nil {
		t.Fatal(err)
	}
	if _, ok := seg.recentBatch(bases[31]); ok {
		t.Fatalf("a recent batch outlived the truncation")
	}
	var again [][]byte
	for i := 0; i < 5; i++ {
		b := makeBatch(t, 100+i, 4, 70, int64(2000+i)) // other sizes: other positions
		again = append(again, b)
		appendOne(t, l, be, b, false)
	}
	if len(again[0]) == len(batches[30]) {
		t.Fatal("the test needs batch sizes that differ")
	}
	for _, off := range []int64{bases[30], bases[31], bases[32]} { // the last two: inside the first new batch now
		got, err := l.ReadBytes(nil, off, 1<<20, l.EndOffset())
		if err != nil || !sameBatches(got, bytes.Join(again, nil)) {
			t.Fatalf("read at %d after the truncation: %d bytes, %v; want the new batches", off, len(got), err)
		}
	}
}

// sameBatches compares stored batches with the batches as built: equal
// but for the base offsets and leader epochs the log sets (outside the
// CRC).
func sameBatches(stored, built []byte) bool {
	if len(stored) != len(built) {
		return false
	}
	// normalized is a copy of batches with those two fields zeroed.
	normalized := func(batches []byte) []byte {
		out := bytes.Clone(batches)
		for rest := out; len(rest) >= batch.HeaderSize; {
			n := min(int(batch.BatchLength(rest))+batch.LogOverhead, len(rest))
			clear(rest[0:8])
			clear(rest[12:16])
			rest = rest[n:]
		}
		return out
	}
	s, b := normalized(stored), normalized(built)
	return bytes.Equal(s, b)
}
