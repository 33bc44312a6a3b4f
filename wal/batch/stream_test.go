package batch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// withRecords builds a batch of codec around hand-made records: count
// is what the header declares, whatever recs hold.
func withRecords(t testing.TB, codec Codec, count int32, recs []byte) []byte {
	t.Helper()
	b := NewBuilder()
	b.recs, b.count = recs, count
	out, err := b.Build(nil, codec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// recodec relabels a batch's records as compressed with codec, leaving
// their bytes as they are, and fixes the CRC: a batch whose payload is
// not what its header says.
func recodec(b []byte, codec Codec) []byte {
	b = bytes.Clone(b)
	attrs := binary.BigEndian.Uint16(b[offAttributes:])&^AttrCodecMask | uint16(codec)
	binary.BigEndian.PutUint16(b[offAttributes:], attrs)
	binary.BigEndian.PutUint32(b[offCRC:], Checksum(b))
	return b
}

// TestValidateLooksInsideCompressedBatches: what Kafka's log validator
// refuses inside a compressed batch is refused here too, for every codec,
// as INVALID_RECORD (the CRC matched: the producer built it so).
func TestValidateLooksInsideCompressedBatches(t *testing.T) {
	rec := func(delta int32, key []byte, hdrs []RecordHeader) []byte {
		return AppendRecord(nil, 0, delta, key, []byte("v"), hdrs)
	}
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	nullHeaderKey := func() []byte {
		// AppendRecord cannot write a null header key: patch one in.
		r := rec(0, []byte("k"), []RecordHeader{{Key: "h", Value: []byte("x")}})
		i := bytes.LastIndex(r, []byte("h"))
		out := append(bytes.Clone(r[:i-1]), 0x01) // varint -1
		out = append(out, r[i+1:]...)
		out[0]-- // zigzag length one byte shorter
		return out
	}()
	for _, codec := range []Codec{CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		cases := []struct {
			name  string
			batch []byte
			lim   Limits
		}{
			{"lying offset deltas", withRecords(t, codec, 2, join(rec(0, nil, nil), rec(1000, nil, nil))), Limits{}},
			{"deltas out of order", withRecords(t, codec, 2, join(rec(1, nil, nil), rec(0, nil, nil))), Limits{}},
			{"fewer records than declared", withRecords(t, codec, 3, join(rec(0, nil, nil), rec(1, nil, nil))), Limits{}},
			{"more records than declared", withRecords(t, codec, 1, join(rec(0, nil, nil), rec(0, nil, nil))), Limits{}},
			{"trailing garbage", withRecords(t, codec, 1, join(rec(0, nil, nil), []byte{1, 2, 3})), Limits{}},
			{"a record that does not parse", withRecords(t, codec, 1, []byte{0x10, 0, 0, 0}), Limits{}},
			{"a null key on a compacted topic", withRecords(t, codec, 2, join(rec(0, []byte("k"), nil), rec(1, nil, nil))), Limits{RequireKeys: true}},
			{"a null header key", withRecords(t, codec, 1, nullHeaderKey), Limits{}},
			{"a payload that is not " + codec.String(), recodec(build(t, CodecNone, 5, 30), codec), Limits{}},
		}
		for _, c := range cases {
			_, err := Validate(c.batch, c.lim)
			if ClassOf(err) != ClassInvalid {
				t.Errorf("%s, %s: %v, want ClassInvalid", codec, c.name, err)
			}
		}
		// The same records, well formed, pass.
		good := withRecords(t, codec, 2, join(rec(0, []byte("k"), nil), rec(1, []byte("k2"), []RecordHeader{{Key: "h"}})))
		if _, err := Validate(good, Limits{RequireKeys: true}); err != nil {
			t.Errorf("%s: a good batch: %v", codec, err)
		}
	}
	// Uncompressed batches get the same checks.
	if _, err := Validate(withRecords(t, CodecNone, 1, nullHeaderKey), Limits{}); ClassOf(err) != ClassInvalid {
		t.Errorf("uncompressed null header key: %v", err)
	}
	if _, err := Validate(withRecords(t, CodecNone, 1, rec(0, nil, nil)), Limits{RequireKeys: true}); ClassOf(err) != ClassInvalid {
		t.Errorf("uncompressed null key on a compacted topic: %v", err)
	}
}

// zeros is a zstd batch of one record whose value is n zero bytes: a
// decompression bomb when n is large (it compresses ~10^4:1).
func zeros(t testing.TB, n int) []byte {
	t.Helper()
	var rec []byte
	rec = binary.AppendVarint(rec, int64(1+1+1+1+varintLen(int64(n))+n+1))
	rec = append(rec, 0, 0, 0, 1) // attributes, ts delta 0, offset delta 0, null key (-1)
	rec = binary.AppendVarint(rec, int64(n))
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc.Reset(&buf)
	enc.Write(rec)
	chunk := make([]byte, 1<<20)
	for left := n; left > 0; left -= len(chunk) {
		enc.Write(chunk[:min(left, len(chunk))])
	}
	enc.Write([]byte{0}) // header count 0
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	b := withRecords(t, CodecNone, 1, buf.Bytes())
	return recodec(b, CodecZstd)
}

// TestValidateBoundsDecompression: a batch that decompresses past the
// limit is refused as too large, having decompressed little past it, with
// memory for a window, not the batch.
func TestValidateBoundsDecompression(t *testing.T) {
	bomb := zeros(t, 256<<20)
	t.Logf("bomb: %d bytes, 256 MiB of records", len(bomb))
	var st Stream
	h, _ := ParseHeader(bomb)
	if err := st.Reset(bomb, &h, 1<<20); err != nil {
		t.Fatal(err)
	}
	_, ok := st.Skip()
	if ok || ClassOf(st.Err()) != ClassTooLarge {
		t.Fatalf("skip over the limit: %v %v", ok, st.Err())
	}
	if st.src.produced > 1<<20+streamWindow {
		t.Fatalf("decompressed %d bytes for a 1 MiB limit", st.src.produced)
	}
	st.Close()
	// Many small records: the walk stops once the decoder produced more
	// than the limit.
	many := build(t, CodecZstd, 20000, 1000)
	h, _ = ParseHeader(many)
	if err := st.Reset(many, &h, 1<<20); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := st.Skip(); !ok {
			break
		}
	}
	if ClassOf(st.Err()) != ClassTooLarge || st.src.produced > 1<<20+streamWindow {
		t.Fatalf("20 MB of records under a 1 MiB limit: %v after %d bytes", st.Err(), st.src.produced)
	}
	st.Close()
	// Validate with a limit above the bomb walks it in a window: the heap
	// does not grow by the bomb's size.
	allocs := testing.AllocsPerRun(1, func() {
		if _, err := Validate(bomb, Limits{MaxUncompressedBytes: 512 << 20}); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("validating 256 MiB of records: %v allocations", allocs)
	if _, err := Validate(bomb, Limits{MaxUncompressedBytes: 64 << 20}); ClassOf(err) != ClassTooLarge {
		t.Fatalf("bomb under a 64 MiB limit: %v, want ClassTooLarge", err)
	}
}

// TestStreamNextMatchesRecords: Next yields what Records does, for every
// codec, and ends cleanly.
func TestStreamNextMatchesRecords(t *testing.T) {
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		data := build(t, codec, 200, 300)
		h, err := Validate(data, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		it, _, err := Records(data, &h, nil)
		if err != nil {
			t.Fatal(err)
		}
		var st Stream
		if err := st.Reset(data, &h, 0); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			want, ok1 := it.Next()
			got, ok2 := st.Next()
			if ok1 != ok2 {
				t.Fatalf("%s record %d: Records %v, Stream %v (%v)", codec, n, ok1, ok2, st.Err())
			}
			if !ok1 {
				break
			}
			if got.OffsetDelta != want.OffsetDelta || !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) ||
				!bytes.Equal(got.RawHeaders, want.RawHeaders) {
				t.Fatalf("%s record %d differs", codec, n)
			}
			n++
		}
		if st.Err() != nil || n != 200 {
			t.Fatalf("%s: %d records, %v", codec, n, st.Err())
		}
		st.Close()
	}
}

// TestValidateCompressedAllocations: validating a compressed batch
// reuses pooled decoders, so a steady producer's batches cost few
// allocations.
func TestValidateCompressedAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	for _, codec := range []Codec{CodecGzip, CodecLZ4, CodecZstd} {
		data := build(t, codec, 100, 100)
		Validate(data, Limits{})
		allocs := testing.AllocsPerRun(50, func() {
			if _, err := Validate(data, Limits{}); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 4 {
			t.Errorf("%s: %v allocations per validation", codec, allocs)
		}
	}
}

func BenchmarkValidateCompressed(b *testing.B) {
	for _, codec := range []Codec{CodecNone, CodecLZ4, CodecZstd, CodecSnappy, CodecGzip} {
		b.Run(fmt.Sprintf("records=16x1KiB/codec=%s", codec), func(b *testing.B) {
			data := build(b, codec, 16, 1024)
			b.SetBytes(16 * 1024)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Validate(data, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
