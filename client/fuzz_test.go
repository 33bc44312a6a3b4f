package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/nativeproto"
)

// FuzzDecodeRecords decodes arbitrary bytes as a fetch response's records.
// It never panics, never allocates for more records than the bytes can
// hold, and what it accepts re-encodes to exactly the input.
func FuzzDecodeRecords(f *testing.F) {
	var b []byte
	b = nativeproto.AppendRecord(b, 0, 1700000000000, []byte("k"), []byte("v"))
	b = nativeproto.AppendRecord(b, 1, -1, nil, nil)
	b = nativeproto.AppendRecord(b, 2, 5, []byte{}, bytes.Repeat([]byte{7}, 40))
	f.Add(b, 3)
	f.Add(b, 2)
	f.Add(b[:len(b)-1], 3)
	bad := bytes.Clone(b)
	bad[20] ^= 1
	f.Add(bad, 3)
	f.Add([]byte{}, -1)
	f.Add([]byte{}, 1<<30)
	f.Fuzz(func(t *testing.T, b []byte, count int) {
		recs, err := DecodeRecords(b, count, "t", 4)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if len(recs) != count {
			t.Fatalf("%d records, want %d", len(recs), count)
		}
		var re []byte
		for _, r := range recs {
			if r.Topic != "t" || r.Partition != 4 {
				t.Fatalf("record %+v lost its topic or partition", r)
			}
			re = nativeproto.AppendRecord(re, r.Offset, r.Timestamp, r.Key, r.Value)
		}
		if !bytes.Equal(re, b) {
			t.Fatalf("records re-encode as %x, were %x", re, b)
		}
	})
}

// FuzzResponses answers each of the Conn's requests with arbitrary bytes
// from a fake broker (behind a correct frame header, or raw so that the
// framing is fuzzed too), then closes the connection. Every call returns
// (no hang) with either a result or an error, and a huge length prefix
// costs no more memory than the bytes that were sent.
func FuzzResponses(f *testing.F) {
	frame := func(key byte, payload []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(payload)+1))
		return append(append(b, key), payload...)
	}
	produceOK := make([]byte, nativeproto.ProduceResponseLen)
	binary.BigEndian.PutUint64(produceOK[5:], 42)
	fetchOK := binary.BigEndian.AppendUint32([]byte{0}, 1)
	fetchOK = append(fetchOK, make([]byte, nativeproto.FetchResponseHeaderLen-len(fetchOK))...)
	fetchOK = nativeproto.AppendRecord(fetchOK, 7, 8, []byte("k"), []byte("v"))
	for op, payload := range [][]byte{produceOK, fetchOK, {nativeproto.CreateOK}, {0}, make([]byte, 9)} {
		f.Add(uint8(op), false, payload)
		f.Add(uint8(op), true, frame(opKeys[op], payload))
	}
	f.Add(uint8(1), true, []byte{0x7f, 0xff, 0xff, 0xff, apiFetch, 0})
	f.Add(uint8(0), true, []byte{0xff, 0xff, 0xff, 0xff, apiProduce})
	f.Add(uint8(2), true, []byte{0, 0, 0, 2, apiFetch, 0})
	f.Fuzz(func(t *testing.T, op uint8, raw bool, resp []byte) {
		op %= uint8(len(opKeys))
		if !raw {
			resp = frame(opKeys[op], resp)
		}
		cli, srv := net.Pipe()
		served := make(chan struct{})
		go func() {
			defer close(served)
			defer srv.Close()
			var hdr [nativeproto.HeaderLen]byte
			if _, err := io.ReadFull(srv, hdr[:]); err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, srv, int64(binary.BigEndian.Uint32(hdr[:4]))-1); err != nil {
				return
			}
			srv.Write(resp) // fails once the client closes: whatever it left unread
		}()
		c := newConn(cli)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		switch op {
		case 0:
			_, _, err = c.Produce(ctx, "t", 0, []Record{{Value: []byte("v")}})
		case 1:
			var recs []Record
			recs, err = c.Fetch(ctx, "t", 0, 0, 1<<20)
			for _, r := range recs {
				if r.Topic != "t" {
					t.Fatalf("fetched %+v", r)
				}
			}
		case 2:
			err = c.CreateTopic(ctx, "t", 1)
		case 3:
			err = c.CommitOffset(ctx, "g", "t", 0, 1)
		case 4:
			_, err = c.FetchOffset(ctx, "g", "t", 0)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("op %d hung on response %x", op, resp)
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error")
		}
		c.Close()
		<-served
	})
}

// opKeys are the API keys of FuzzResponses' operations, in op order.
var opKeys = []byte{apiProduce, apiFetch, apiCreateTopic, apiCommitOffset, apiFetchOffset}

// TestReadFullBoundsAllocation checks that a length prefix far beyond the
// bytes sent allocates about what was sent, not the announced size.
func TestReadFullBoundsAllocation(t *testing.T) {
	sent := bytes.Repeat([]byte{1}, 100<<10)
	allocs := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := readFull(bytes.NewReader(sent), MaxFrame-1); !errors.Is(err, io.ErrUnexpectedEOF) {
				b.Fatalf("read of a short frame: %v", err)
			}
		}
	})
	if per := allocs.AllocedBytesPerOp(); per > 1<<20 {
		t.Fatalf("reading %d bytes of a frame announced at %d allocated %d bytes", len(sent), MaxFrame-1, per)
	}
	got, err := readFull(bytes.NewReader(sent), len(sent))
	if err != nil || !bytes.Equal(got, sent) {
		t.Fatalf("whole frame: %d bytes, %v", len(got), err)
	}
}
