package wal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// flipByte flips one byte of a segment file at pos, as a bad disk would.
func flipByte(t *testing.T, path string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}

// TestScrubFindsAndFencesDamage: a byte flipped in a sealed segment is
// found by ScrubSegment with the offset it starts at; reads serve the
// batches before it and refuse the damaged one (never its bytes); the
// other segments stay readable; truncating at the damage leaves a sound
// log that appends again.
func TestScrubFindsAndFencesDamage(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 4 << 10})
	defer l.Close()
	be := ring.NewPortable()
	defer be.Close()
	for i := 0; i < 40; i++ {
		appendOne(t, l, be, makeBatch(t, i, 4, 100, 1_700_000_000_000), false)
	}
	sealed := l.SealedSegments()
	if len(sealed) < 3 {
		t.Fatalf("%d sealed segments, want 3 or more", len(sealed))
	}
	// Every sealed segment is sound.
	var buf []byte
	for _, base := range sealed {
		n, b, err := l.ScrubSegment(base, buf, nil)
		buf = b
		if err != nil || n == 0 {
			t.Fatalf("sound segment %d: %d bytes, %v", base, n, err)
		}
	}
	// A flip in the third batch of the second sealed segment.
	victim := sealed[1]
	var hdr [batch.HeaderSize]byte
	f, err := os.Open(filepath.Join(dir, segmentName(victim, logSuffix)))
	if err != nil {
		t.Fatal(err)
	}
	var pos, third int64
	var thirdOff int64
	for i := 0; i < 3; i++ {
		if _, err := f.ReadAt(hdr[:], pos); err != nil {
			t.Fatal(err)
		}
		h, _ := batch.ParseHeader(hdr[:])
		third, thirdOff = pos, h.BaseOffset
		pos += int64(h.Size())
	}
	f.Close()
	flipByte(t, filepath.Join(dir, segmentName(victim, logSuffix)), third+batch.HeaderSize+10)

	_, _, err = l.ScrubSegment(victim, nil, nil)
	var d *Damage
	if !errors.As(err, &d) || !errors.Is(err, ErrCorrupt) || d.Segment != victim || d.Pos != third || d.Offset != thirdOff {
		t.Fatalf("scrub of the damaged segment: %v, want damage at byte %d, offset %d", err, third, thirdOff)
	}
	// Reads before the damage stop there; at it, an error, not bytes.
	var c Chunk
	if err := l.Read(&c, victim, 1<<20, l.EndOffset()); err != nil || c.NextOffset != thirdOff {
		t.Fatalf("read from the damaged segment's start: next %d, %v; want the batches before offset %d", c.NextOffset, err, thirdOff)
	}
	c.Release()
	if err := l.Read(&c, thirdOff, 1<<20, l.EndOffset()); !errors.Is(err, ErrCorrupt) || c.Bytes != 0 {
		t.Fatalf("read at the damage: %d bytes, %v; want ErrCorrupt and nothing", c.Bytes, err)
	}
	c.Release()
	if err := l.Read(&c, sealed[2], 1<<20, l.EndOffset()); err != nil || c.Bytes == 0 {
		t.Fatalf("read of the next segment: %d bytes, %v", c.Bytes, err)
	}
	c.Release()
	// Truncating at the damage (a follower about to fetch it again).
	end, err := l.TruncateAtDamage(d)
	if err != nil || end != thirdOff {
		t.Fatalf("truncate at the damage: end %d, %v; want %d", end, err, thirdOff)
	}
	readAll(t, l, false)
	if got := appendOne(t, l, be, makeBatch(t, 99, 2, 10, 1_700_000_000_000), true); got.BaseOffset != thirdOff {
		t.Fatalf("append after the truncation at %d: offset %d", thirdOff, got.BaseOffset)
	}
	for _, base := range l.SealedSegments() {
		if _, _, err := l.ScrubSegment(base, nil, nil); err != nil {
			t.Fatalf("after the truncation segment %d: %v", base, err)
		}
	}
}

// TestScrubDamageAtASegmentStart: damage in the first batch of a segment
// (its header) truncates the whole segment away.
func TestScrubDamageAtASegmentStart(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 4 << 10})
	defer l.Close()
	be := ring.NewPortable()
	defer be.Close()
	for i := 0; i < 30; i++ {
		appendOne(t, l, be, makeBatch(t, i, 4, 100, 1_700_000_000_000), false)
	}
	sealed := l.SealedSegments()
	victim := sealed[1]
	flipByte(t, filepath.Join(dir, segmentName(victim, logSuffix)), 9) // batchLength
	_, _, err := l.ScrubSegment(victim, nil, nil)
	var d *Damage
	if !errors.As(err, &d) || d.Pos != 0 || d.Offset != victim {
		t.Fatalf("damage at the segment start: %v", err)
	}
	if end, err := l.TruncateAtDamage(d); err != nil || end != victim {
		t.Fatalf("truncate: end %d, %v; want %d", end, err, victim)
	}
	readAll(t, l, false)
}
