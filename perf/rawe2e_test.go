package perf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/ringlog/ringlog/wal/batch"
)

// rawTestBatches is two stored-format batches, offsets 10-12 (lz4) and
// 13, whose values carry a due time and, 1 ms after it, a send time, as
// the raw producer stamps them.
func rawTestBatches(t testing.TB, due int64) []byte {
	t.Helper()
	b := batch.NewBuilder()
	var out []byte
	for i, n := range []int{3, 1} {
		b.Reset()
		for j := 0; j < n; j++ {
			v := make([]byte, 32)
			stampRecord(v, due, due+int64(time.Millisecond))
			b.Add(due/int64(time.Millisecond), nil, v, nil)
		}
		codec := batch.CodecNone
		if i == 0 {
			codec = batch.CodecLZ4
		}
		start := len(out)
		var err error
		if out, err = b.Build(out, codec); err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint64(out[start:], uint64(10+3*i)) // base offset
	}
	return out
}

// TestRawFetchRecords: the raw fetcher counts each record from the fetch
// offset on once, measures it from the due time in its value, skips what
// lies before the offset and stops at a partial batch.
func TestRawFetchRecords(t *testing.T) {
	now := time.Now()
	due := now.Add(-3 * time.Millisecond).UnixNano()
	b := rawTestBatches(t, due)
	for _, tc := range []struct {
		name           string
		data           []byte
		from, wantNext int64
		wantRecords    int64
	}{
		{"both batches", b, 10, 14, 4},
		{"from inside the first", b, 12, 14, 2},
		{"a partial second batch", b[:len(b)-5], 10, 13, 3},
		{"a partial header", b[:20], 10, 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newRawE2EStats()
			st.measureTo = now.Add(time.Hour).UnixNano()
			f := &rawFetcher{st: st}
			next, err := f.records(tc.data, tc.from, now)
			if err != nil || next != tc.wantNext || f.st.consumed != tc.wantRecords {
				t.Fatalf("next %d, records %d, %v; want %d, %d", next, f.st.consumed, err, tc.wantNext, tc.wantRecords)
			}
			if tc.wantRecords > 0 {
				if p50 := f.st.e2e.Percentile(50); p50 < 2*time.Millisecond || p50 > 4*time.Millisecond {
					t.Errorf("e2e latency %v, want about 3ms", p50)
				}
				if n, p50 := f.st.fromSend.Count(), f.st.fromSend.Percentile(50); n != tc.wantRecords || p50 < time.Millisecond || p50 > 3*time.Millisecond {
					t.Errorf("e2e from send: %d records, p50 %v; want %d, about 2ms", n, p50, tc.wantRecords)
				}
			}
		})
	}
	// A corrupt batch is an error, not a panic or a silent skip.
	bad := bytes.Clone(b)
	binary.BigEndian.PutUint32(bad[57:], 99) // record count
	f := &rawFetcher{st: newRawE2EStats()}
	if _, err := f.records(bad, 10, now); err == nil {
		t.Errorf("a batch claiming 99 records: no error")
	}
}

// FuzzRawResponses feeds arbitrary bytes to what the raw clients decode
// from a broker: a Fetch response's record batches (rawFetcher.records,
// walkBatches) and a size-prefixed response frame (readFrame,
// checkProduceResponse). Nothing may panic; offsets never go backwards.
func FuzzRawResponses(f *testing.F) {
	b := rawTestBatches(f, time.Now().UnixNano())
	f.Add(b, int64(10))
	f.Add(b[:len(b)-5], int64(11))
	f.Add([]byte{}, int64(0))
	f.Add([]byte{0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0}, int64(-1))
	f.Fuzz(func(t *testing.T, data []byte, from int64) {
		fe := &rawFetcher{st: newRawE2EStats()}
		if next, err := fe.records(data, from, time.Now()); err == nil && next < from {
			t.Fatalf("records: next %d before %d", next, from)
		}
		if _, n, _ := walkBatches(data, from); n > int64(len(data)) {
			t.Fatalf("walkBatches: %d bytes of %d", n, len(data))
		}
		if frame, err := readFrame(bufio.NewReader(bytes.NewReader(data)), nil); err == nil {
			_ = checkProduceResponse(frame)
		}
	})
}
