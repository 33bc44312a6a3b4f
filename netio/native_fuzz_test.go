package netio_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/client"
	"github.com/ringlog/ringlog/netio"
)

// FuzzNativeFrame sends arbitrary native-protocol input to a real broker
// over TCP (one broker per fuzz process). Byte 0 picks the framing: 0 sends
// the rest behind its correct length (so payload decoding is fuzzed), 1
// sends it as is (framing is fuzzed). Oracles: every answer is a well
// formed frame carrying the request's api key, and afterwards the broker
// still answers a produce and a fetch on a fresh connection.
func FuzzNativeFrame(f *testing.F) {
	b := startBroker(f, withServer(func(c *netio.Config) { c.MaxRequestBytes = 1 << 20 }))
	ctx := context.Background()
	c, err := client.Dial(ctx, b.NativeAddr)
	if err != nil {
		f.Fatal(err)
	}
	if err := c.CreateTopic(ctx, "fz", 2); err != nil {
		f.Fatal(err)
	}
	c.Close()
	str := func(b []byte, s string) []byte {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		return append(b, s...)
	}
	produce := str([]byte{0}, "fz")
	produce = binary.BigEndian.AppendUint32(produce, 0xffffffff)
	produce = binary.BigEndian.AppendUint32(produce, 2)
	produce = binary.BigEndian.AppendUint32(produce, 1)
	produce = append(produce, 'k')
	produce = binary.BigEndian.AppendUint32(produce, 2)
	produce = append(produce, 'v', 'v')
	produce = binary.BigEndian.AppendUint32(produce, 0xffffffff)
	produce = binary.BigEndian.AppendUint32(produce, 1)
	produce = append(produce, 'x')
	fetch := str([]byte{1}, "fz")
	fetch = binary.BigEndian.AppendUint32(fetch, 0)
	fetch = binary.BigEndian.AppendUint64(fetch, 0)
	fetch = binary.BigEndian.AppendUint32(fetch, 1000)
	create := str([]byte{2}, "fz2")
	create = binary.BigEndian.AppendUint32(create, 1)
	commit := str(str([]byte{3}, "g"), "fz")
	commit = binary.BigEndian.AppendUint32(commit, 0)
	commit = binary.BigEndian.AppendUint64(commit, 1)
	fetchOff := str(str([]byte{4}, "g"), "fz")
	fetchOff = binary.BigEndian.AppendUint32(fetchOff, 0)
	for _, seed := range [][]byte{produce, fetch, create, commit, fetchOff, {9}, {}} {
		f.Add(append([]byte{0}, seed...))
	}
	f.Add([]byte{1, 0, 0, 0, 1, 1})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		mode, body := in[0]%2, in[1:]
		nc, err := net.DialTimeout("tcp", b.NativeAddr, time.Second)
		if err != nil {
			t.Fatalf("broker unreachable: %v", err)
		}
		frame := body
		if mode == 0 {
			if len(body) == 0 {
				nc.Close()
				return
			}
			frame = binary.BigEndian.AppendUint32(nil, uint32(len(body)))
			frame = append(frame, body...)
		}
		nc.SetDeadline(time.Now().Add(200 * time.Millisecond))
		nc.Write(frame)
		var hdr [5]byte
		if _, err := io.ReadFull(nc, hdr[:]); err == nil {
			n := binary.BigEndian.Uint32(hdr[:4])
			if n < 1 || n > 1<<20 {
				t.Fatalf("answer with length %d", n)
			}
			if mode == 0 && hdr[4] != body[0] {
				t.Fatalf("answer carries api key %d for request %d", hdr[4], body[0])
			}
		}
		nc.Close()
		// The broker still works.
		cl, err := client.Dial(ctx, b.NativeAddr)
		if err != nil {
			t.Fatalf("broker unreachable after the input: %v", err)
		}
		defer cl.Close()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, _, err := cl.Produce(cctx, "fz", 1, []client.Record{{Value: []byte("alive")}}); err != nil {
			t.Fatalf("produce after the input: %v", err)
		}
		if _, err := cl.Fetch(cctx, "fz", 1, 0, 1); err != nil {
			t.Fatalf("fetch after the input: %v", err)
		}
	})
}
