package batch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

func build(t testing.TB, codec Codec, n int, valueSize int) []byte {
	t.Helper()
	b := NewBuilder()
	for i := 0; i < n; i++ {
		v := bytes.Repeat([]byte{byte('a' + i%26)}, valueSize)
		var key []byte
		if i%2 == 0 {
			key = []byte(fmt.Sprintf("key-%d", i))
		}
		b.Add(1_700_000_000_000+int64(i), key, v, []RecordHeader{{Key: "h", Value: []byte{byte(i)}}})
	}
	out, err := b.Build(nil, codec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBuildValidateRoundTrip(t *testing.T) {
	for _, c := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		t.Run(c.String(), func(t *testing.T) {
			data := build(t, c, 10, 100)
			h, err := Validate(data, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if h.RecordCount != 10 || h.LastOffsetDelta != 9 || h.Codec() != c {
				t.Fatalf("header %+v", h)
			}
			if h.BaseTimestamp != 1_700_000_000_000 || h.MaxTimestamp != 1_700_000_000_009 {
				t.Fatalf("timestamps %d %d", h.BaseTimestamp, h.MaxTimestamp)
			}
			it, _, err := Records(data, &h, nil)
			if err != nil {
				t.Fatal(err)
			}
			i := 0
			for r := range it.All() {
				if int(r.OffsetDelta) != i || len(r.Value) != 100 || r.Value[0] != byte('a'+i) {
					t.Fatalf("record %d: %+v", i, r)
				}
				if (i%2 == 0) != (r.Key != nil) {
					t.Fatalf("record %d key %q", i, r.Key)
				}
				hs, err := r.Headers()
				if err != nil || len(hs) != 1 || hs[0].Key != "h" || hs[0].Value[0] != byte(i) {
					t.Fatalf("record %d headers %v %v", i, hs, err)
				}
				i++
			}
			if it.Err() != nil || i != 10 {
				t.Fatalf("walked %d records, err %v", i, it.Err())
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	good := build(t, CodecNone, 3, 10)
	mutate := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	resum := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[offCRC:], Checksum(b))
		return b
	}
	cases := []struct {
		name  string
		data  []byte
		lim   Limits
		class Class
	}{
		{"short", good[:30], Limits{}, ClassCorrupt},
		{"length too long", mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], uint32(len(b))); return b }), Limits{}, ClassCorrupt},
		{"truncated", good[:len(good)-1], Limits{}, ClassCorrupt},
		{"bad crc", mutate(func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }), Limits{}, ClassCorrupt},
		{"magic 1", mutate(func(b []byte) []byte { b[offMagic] = 1; return b }), Limits{}, ClassUnsupported},
		{"too large", good, Limits{MaxBatchBytes: len(good) - 1}, ClassTooLarge},
		{"count mismatch", mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[offRecordCount:], 4); return resum(b) }), Limits{}, ClassInvalid},
		{"delta mismatch", mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 5); return resum(b) }), Limits{}, ClassInvalid},
		{"zero records", mutate(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offRecordCount:], 0)
			binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 0xffffffff)
			return resum(b)
		}), Limits{}, ClassInvalid},
		{"control", mutate(func(b []byte) []byte { b[offAttributes+1] |= AttrControl; return resum(b) }), Limits{}, ClassInvalid},
		{"transactional without a producer id", mutate(func(b []byte) []byte { b[offAttributes+1] |= AttrTransactional; return resum(b) }), Limits{}, ClassInvalid},
		{"bad codec", mutate(func(b []byte) []byte { b[offAttributes+1] |= 7; return resum(b) }), Limits{}, ClassCorrupt},
		{"record garbage", mutate(func(b []byte) []byte { b[HeaderSize] = 0x7f; return resum(b) }), Limits{}, ClassInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Validate(tc.data, tc.lim)
			if err == nil {
				t.Fatal("accepted")
			}
			if got := ClassOf(err); got != tc.class {
				t.Fatalf("class %v, want %v (%v)", got, tc.class, err)
			}
		})
	}
}

func TestPatchKeepsCRC(t *testing.T) {
	data := build(t, CodecLZ4, 5, 50)
	SetBaseOffset(data, 12345)
	SetLeaderEpoch(data, 7)
	h, err := Validate(data, Limits{})
	if err != nil {
		t.Fatalf("patching base offset and epoch broke the batch: %v", err)
	}
	if h.BaseOffset != 12345 || h.LeaderEpoch != 7 || h.LastOffset() != 12349 {
		t.Fatalf("%+v", h)
	}
	SetLogAppendTime(data, 42)
	h, err = Validate(data, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !h.LogAppendTime() || h.MaxTimestamp != 42 {
		t.Fatalf("%+v", h)
	}
}

func TestSplit(t *testing.T) {
	a, b := build(t, CodecNone, 2, 5), build(t, CodecGzip, 3, 5)
	got, err := Split(append(append([]byte(nil), a...), b...), nil)
	if err != nil || len(got) != 2 || !bytes.Equal(got[0], a) || !bytes.Equal(got[1], b) {
		t.Fatalf("%d batches, %v", len(got), err)
	}
	if _, err := Split(append(append([]byte(nil), a...), b[:20]...), nil); err == nil {
		t.Fatal("split accepted a truncated second batch")
	}
}

func TestXerialSnappy(t *testing.T) {
	src := bytes.Repeat([]byte("ringlog "), 1000)
	block, _ := Compress(CodecSnappy, nil, src[:3000])
	block2, _ := Compress(CodecSnappy, nil, src[3000:])
	framed := append([]byte(nil), xerialMagic...)
	framed = binary.BigEndian.AppendUint32(framed, 1)
	framed = binary.BigEndian.AppendUint32(framed, 1)
	framed = binary.BigEndian.AppendUint32(framed, uint32(len(block)))
	framed = append(framed, block...)
	framed = binary.BigEndian.AppendUint32(framed, uint32(len(block2)))
	framed = append(framed, block2...)
	out, err := Decompress(CodecSnappy, nil, framed)
	if err != nil || !bytes.Equal(out, src) {
		t.Fatalf("xerial decode: %v", err)
	}
}

func TestValidateDoesNotAllocate(t *testing.T) {
	data := build(t, CodecNone, 50, 20)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Validate(data, Limits{}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Validate allocates %v times", allocs)
	}
}

func BenchmarkValidate(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10, 256 << 10} {
		for _, codec := range []Codec{CodecNone, CodecLZ4} {
			b.Run(fmt.Sprintf("bytes=%d/codec=%s", size, codec), func(b *testing.B) {
				n := size / 100
				data := build(b, codec, n, 90)
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := Validate(data, Limits{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// A batch's CRC computed over its pieces, cut anywhere (inside the
// header too), is Checksum's.
func TestChecksumParts(t *testing.T) {
	b := build(t, CodecNone, 5, 40)
	want := Checksum(b)
	for i := 0; i <= len(b); i++ {
		for _, j := range []int{i, min(i+7, len(b)), len(b)} {
			if got := ChecksumParts([][]byte{b[:i], b[i:j], b[j:]}); got != want {
				t.Fatalf("cut at %d and %d: %08x, want %08x", i, j, got, want)
			}
		}
	}
}

// Next answers a malformed record with false and a zero Record, not the
// fields parsed before the fault.
func TestIterNextZeroRecordOnError(t *testing.T) {
	// Attributes, timestamp delta 7, offset delta 0, key "k", then a value
	// of 100 bytes that are not there.
	body := []byte{0}
	body = binary.AppendVarint(body, 7)
	body = binary.AppendVarint(body, 0)
	body = binary.AppendVarint(body, 1)
	body = append(body, 'k')
	body = binary.AppendVarint(body, 100)
	recs := append(binary.AppendVarint(nil, int64(len(body))), body...)
	var it Iter
	it.Reset(recs, 1)
	r, ok := it.Next()
	if ok || it.Err() == nil {
		t.Fatalf("malformed record: ok %v, err %v", ok, it.Err())
	}
	if r.TimestampDelta != 0 || r.Key != nil || r.Attributes != 0 || r.HeaderCount != 0 {
		t.Fatalf("Next returned %+v with false", r)
	}
}

// All yields every record Next would, stops where a loop breaks, and
// leaves a malformed record to Err.
func TestIterAll(t *testing.T) {
	b := build(t, CodecNone, 3, 1)
	h, err := Validate(b, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	it, _, err := Records(b, &h, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for r := range it.All() {
		got = append(got, r.Value...)
		if len(got) == 2 {
			break
		}
	}
	for r := range it.All() { // the walk goes on where the loop left it
		got = append(got, r.Value...)
	}
	if string(got) != "abc" || it.Err() != nil {
		t.Fatalf("got %q, err %v", got, it.Err())
	}
	it.Reset(b[HeaderSize:len(b)-1], h.RecordCount) // the last byte cut off
	n := 0
	for range it.All() {
		n++
	}
	if n != 2 || it.Err() == nil {
		t.Fatalf("a cut record: %d yielded, err %v", n, it.Err())
	}
}
