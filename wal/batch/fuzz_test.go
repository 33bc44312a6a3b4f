package batch

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzValidate feeds arbitrary bytes to the batch validator: it must never
// panic, and whatever it accepts must survive the broker's patches and walk
// cleanly.
func FuzzValidate(f *testing.F) {
	for _, c := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		f.Add(build(f, c, 3, 20))
	}
	f.Add(build(f, CodecNone, 1, 0))
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Validate(data, Limits{MaxBatchBytes: 1 << 20})
		if err != nil {
			if ClassOf(err) == 0 {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		cp := bytes.Clone(data)
		SetBaseOffset(cp, 1<<40)
		SetLeaderEpoch(cp, 3)
		if _, err := Validate(cp, Limits{}); err != nil {
			t.Fatalf("patched batch no longer valid: %v", err)
		}
		it, _, err := Records(data, &h, nil)
		if err != nil {
			return // a compressed payload that does not decompress
		}
		for r := range it.All() {
			_, _ = r.Headers()
		}
	})
}

// FuzzDecompress checks every codec's decoder on arbitrary input: errors,
// never panics, never more than MaxDecompressedBytes.
func FuzzDecompress(f *testing.F) {
	src := bytes.Repeat([]byte("abc"), 100)
	for _, c := range []Codec{CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		out, err := Compress(c, nil, src)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(c), out)
	}
	f.Fuzz(func(t *testing.T, codec uint8, data []byte) {
		out, err := Decompress(Codec(codec%5), nil, data)
		if err == nil && len(out) > MaxDecompressedBytes {
			t.Fatalf("decompressed %d bytes", len(out))
		}
	})
}

// FuzzControlRecord reads control batches as the broker does when it
// replays a log (stored bytes, CRC-checked, then the control record).
func FuzzControlRecord(f *testing.F) {
	f.Add(AppendControl(nil, 1, 0, ControlCommit, 0, 1))
	f.Add(AppendControl(nil, 7, 3, ControlAbort, 9, 2))
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHeader(data)
		if err != nil {
			return
		}
		typ, ce, err := ParseControl(data, &h)
		if err != nil {
			if ClassOf(err) == 0 {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if typ != ControlAbort && typ != ControlCommit {
			t.Fatalf("type %d accepted", typ)
		}
		// What parses rebuilds to a marker that parses the same.
		again := AppendControl(nil, h.ProducerID, h.ProducerEpoch, typ, max(ce, 0), 1)
		h2, err := ParseHeader(again)
		if err != nil {
			t.Fatal(err)
		}
		if typ2, ce2, err := ParseControl(again, &h2); err != nil || typ2 != typ || ce2 != max(ce, 0) {
			t.Fatalf("rebuilt marker: %v %d %v, want %v %d", typ2, ce2, err, typ, max(ce, 0))
		}
	})
}

// FuzzStream walks arbitrary bytes as a batch's records under every codec,
// as a produce's validation (Skip) and a native fetch (Next) do: errors are
// classified, nothing panics, and the decoder never produces more than the
// limit (plus its read-ahead window), however the bytes lie.
func FuzzStream(f *testing.F) {
	recs := AppendRecord(nil, 0, 0, []byte("k"), []byte("v"), []RecordHeader{{Key: "h"}})
	recs = AppendRecord(recs, 5, 1, nil, bytes.Repeat([]byte("x"), 100), nil)
	for _, c := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		out, err := Compress(c, nil, recs)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(c), int32(2), false, out)
	}
	f.Add(uint8(CodecSnappy), int32(1), true, append(bytes.Clone(xerialMagic), make([]byte, 12)...))
	f.Fuzz(func(t *testing.T, codec uint8, count int32, next bool, payload []byte) {
		const limit = 64 << 10
		b := make([]byte, HeaderSize, HeaderSize+len(payload))
		b = append(b, payload...)
		binary.BigEndian.PutUint16(b[offAttributes:], uint16(codec%5))
		binary.BigEndian.PutUint32(b[offRecordCount:], uint32(count))
		h, err := ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		var st Stream
		defer st.Close()
		if err := st.Reset(b, &h, limit); err != nil {
			if ClassOf(err) == 0 {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		for i := 0; i < 1000; i++ {
			var ok bool
			if next {
				_, ok = st.Next()
			} else {
				_, ok = st.Skip()
			}
			if !ok {
				break
			}
		}
		if err := st.Err(); err != nil && ClassOf(err) == 0 {
			t.Fatalf("unclassified error %v", err)
		}
		if st.src.produced > limit+streamWindow {
			t.Fatalf("decoded %d bytes under a limit of %d", st.src.produced, limit)
		}
	})
}
