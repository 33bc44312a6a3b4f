package nativeproto

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	recs := []Record{
		{Offset: 0, Timestamp: 1, Key: nil, Value: nil},
		{Offset: 7, Timestamp: -1, Key: []byte{}, Value: []byte("v")},
		{Offset: 1 << 40, Timestamp: 1700000000000, Key: []byte("key"), Value: bytes.Repeat([]byte{0xab}, 300)},
	}
	var b []byte
	for _, r := range recs {
		before := len(b)
		b = AppendRecord(b, r.Offset, r.Timestamp, r.Key, r.Value)
		if got, want := len(b)-before, RecordOverhead+len(r.Key)+len(r.Value); got != want {
			t.Fatalf("record of %d bytes, want %d", got, want)
		}
	}
	for i, want := range recs {
		got, rest, err := ReadRecord(b)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if got.Offset != want.Offset || got.Timestamp != want.Timestamp ||
			!bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) ||
			(got.Key == nil) != (want.Key == nil) || (got.Value == nil) != (want.Value == nil) {
			t.Fatalf("record %d: got %+v, want %+v", i, got, want)
		}
		b = rest
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left", len(b))
	}
}

func TestReadRecordDamage(t *testing.T) {
	rec := AppendRecord(nil, 42, 1000, []byte("k"), []byte("value"))
	for n := 0; n < len(rec); n++ {
		if _, _, err := ReadRecord(rec[:n]); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("record cut to %d bytes: %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
	// [offset:8][timestamp:8][keyLen:4]["k"][valueLen:4]["value"][crc:4]
	lengths := map[int]bool{}
	for i := 16; i < 20; i++ {
		lengths[i], lengths[i+5] = true, true
	}
	for i := range rec {
		bad := bytes.Clone(rec)
		bad[i] ^= 0x01
		_, _, err := ReadRecord(bad)
		switch {
		case err == nil:
			t.Fatalf("a flipped bit at byte %d went unnoticed", i)
		case !lengths[i] && !errors.Is(err, ErrRecordCRC):
			// A length may make the record look cut short; any other
			// byte is covered by the CRC alone.
			t.Fatalf("flipped bit at byte %d: %v, want ErrRecordCRC", i, err)
		}
	}
}
