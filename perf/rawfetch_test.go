package perf

import (
	"encoding/binary"
	"testing"
)

func TestWalkBatches(t *testing.T) {
	mk := func(base int64, lastDelta, count int32, size int) []byte {
		b := make([]byte, size)
		binary.BigEndian.PutUint64(b, uint64(base))
		binary.BigEndian.PutUint32(b[8:], uint32(size-12))
		binary.BigEndian.PutUint32(b[23:], uint32(lastDelta))
		binary.BigEndian.PutUint32(b[57:], uint32(count))
		return b
	}
	var b []byte
	b = append(b, mk(10, 4, 5, 100)...)
	b = append(b, mk(15, 1, 2, 80)...)
	b = append(b, mk(17, 9, 10, 300)[:120]...) // cut short by the fetch size
	next, bytes, recs := walkBatches(b, 10)
	if next != 17 || bytes != 180 || recs != 7 {
		t.Fatalf("next %d bytes %d records %d", next, bytes, recs)
	}
	if next, _, _ := walkBatches(nil, 42); next != 42 {
		t.Fatalf("empty fetch moved the offset to %d", next)
	}
}
