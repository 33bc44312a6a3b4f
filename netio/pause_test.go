package netio_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/nativeproto"
	"github.com/ringlog/ringlog/netio"
)

// TestPausedConnectionsBounded holds the writer shard so that produce
// connections pause, and has their clients keep sending. gnet reads them
// anyway; what it holds must stay within the bounds: MaxRequestBytes per
// connection (a client that sends on and on is closed) and MaxPausedBytes
// over the listener (the connection that would pass it is closed). The
// connections that stayed within them resume once the shard has room,
// and every request they sent is answered in order and stored intact.
func TestPausedConnectionsBounded(t *testing.T) {
	const (
		maxReq    = 128 << 10
		budget    = 512 << 10
		valueSize = 8 << 10
		ahead     = 12 // frames a well-behaved client sends behind the paused one
	)
	b := startBroker(t,
		withEngine(func(c *engine.Config) { c.Shards = 1; c.ShardQueueBytes = 4 << 10 }),
		withServer(func(c *netio.Config) { c.MaxRequestBytes = maxReq; c.MaxPausedBytes = budget }))
	ctx := testCtx(t, 60*time.Second)
	if err := nativeConn(t, b).CreateTopic(ctx, "paused", 1); err != nil {
		t.Fatal(err)
	}
	srv := b.Native
	frame := func(conn, seq int) []byte {
		v := bytes.Repeat([]byte{'.'}, valueSize)
		copy(v, recordID(conn, seq))
		p := binary.BigEndian.AppendUint16(nil, uint16(len("paused")))
		p = append(p, "paused"...)
		p = binary.BigEndian.AppendUint32(p, 0) // partition
		p = binary.BigEndian.AppendUint32(p, 1) // one record
		p = binary.BigEndian.AppendUint32(p, 0xffffffff)
		p = binary.BigEndian.AppendUint32(p, uint32(len(v)))
		p = append(p, v...)
		f := binary.BigEndian.AppendUint32(nil, uint32(len(p)+1))
		return append(append(f, nativeproto.KeyProduce), p...)
	}
	frameLen := len(frame(0, 0))
	// What a well-behaved client's unread bytes are charged: whole
	// overflow chunks.
	held := int64((ahead*frameLen + netio.OverflowChunk - 1) / netio.OverflowChunk * netio.OverflowChunk)

	// The largest unread count seen, sampled until the test ends.
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := srv.UnreadBytes(); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Microsecond):
			}
		}
	}()
	defer func() { close(stopSampling); <-sampled }()

	// Hold the shard goroutine: what is queued stays queued.
	shard := b.Eng.Shards()[0]
	release, holding := make(chan struct{}), make(chan struct{})
	shard.Do(func() { close(holding); <-release })
	<-holding
	var releaseOnce sync.Once
	releaseShard := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseShard()

	type client struct {
		id     int
		nc     net.Conn
		sent   int
		resps  chan []byte
		closed chan struct{} // the broker closed it
	}
	dial := func(id int) *client {
		nc, err := net.Dial("tcp", b.NativeAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		c := &client{id: id, nc: nc, resps: make(chan []byte, 64), closed: make(chan struct{})}
		go func() {
			defer close(c.closed)
			for {
				var hdr [4]byte
				if _, err := io.ReadFull(nc, hdr[:]); err != nil {
					return
				}
				resp := make([]byte, binary.BigEndian.Uint32(hdr[:]))
				if _, err := io.ReadFull(nc, resp); err != nil {
					return
				}
				c.resps <- resp
			}
		}()
		return c
	}
	send := func(c *client, n int) {
		var out []byte
		for i := 0; i < n; i++ {
			out = append(out, frame(c.id, c.sent)...)
			c.sent++
		}
		if _, err := c.nc.Write(out); err != nil {
			t.Fatalf("client %d: %v", c.id, err)
		}
	}
	isClosed := func(c *client) bool {
		select {
		case <-c.closed:
			return true
		default:
			return false
		}
	}

	// Client 0's first request fills the shard's queue; its second is
	// paused (kept whole in c.frame), the rest wait unread in gnet.
	c0 := dial(0)
	send(c0, 1)
	e2eWaitFor(t, 30*time.Second, "the shard's queue to fill", func() bool { return !shard.HasRoom() })
	send(c0, 1+ahead)
	e2eWaitFor(t, 30*time.Second, "client 0's requests to be held", func() bool { return srv.UnreadBytes() == held })
	kept := []*client{c0}

	// A client that sends on and on while paused is closed once the
	// broker would hold more than MaxRequestBytes for it.
	flood := dial(1)
	go func() {
		burst := bytes.Repeat(frame(1, 0), 4)
		for {
			if _, err := flood.nc.Write(burst); err != nil {
				return
			}
		}
	}()
	select {
	case <-flood.closed:
	case <-ctx.Done():
		t.Fatalf("a client sending without end while paused was not closed (unread %d bytes)", srv.UnreadBytes())
	}
	e2eWaitFor(t, 30*time.Second, "the closed client's bytes to be dropped", func() bool { return srv.UnreadBytes() == held })
	if p := peak.Load(); p > held+maxReq {
		t.Fatalf("gnet held %d unread bytes, more than client 0's %d plus MaxRequestBytes %d", p, held, maxReq)
	}

	// Well-behaved clients, each within MaxRequestBytes, are kept until
	// their total would pass MaxPausedBytes: that one is closed.
	for id := 2; ; id++ {
		if id > 2+budget/int(held) {
			t.Fatalf("%d clients hold %d unread bytes, past MaxPausedBytes %d, and none was closed", len(kept), srv.UnreadBytes(), budget)
		}
		before := srv.UnreadBytes()
		c := dial(id)
		send(c, 1+ahead)
		e2eWaitFor(t, 30*time.Second, fmt.Sprintf("client %d to be held or closed", id), func() bool {
			return srv.UnreadBytes() == before+held || isClosed(c)
		})
		if isClosed(c) {
			e2eWaitFor(t, 30*time.Second, "the closed client's bytes to be dropped", func() bool { return srv.UnreadBytes() == before })
			if before+held <= budget {
				t.Fatalf("client %d was closed though %d+%d unread bytes are within MaxPausedBytes %d", id, before, held, budget)
			}
			break
		}
		kept = append(kept, c)
	}
	if want := int(budget / held); len(kept) != want {
		t.Fatalf("%d clients kept, want %d (MaxPausedBytes %d / %d bytes each)", len(kept), want, budget, held)
	}
	if p := peak.Load(); p > budget {
		t.Fatalf("gnet held %d unread bytes, past MaxPausedBytes %d", p, budget)
	}

	// Room again: the kept clients resume and get every answer, in order.
	releaseShard()
	for _, c := range kept {
		last := int64(-1)
		for seq := 0; seq < c.sent; seq++ {
			var resp []byte
			select {
			case resp = <-c.resps:
			case <-c.closed:
				t.Fatalf("client %d closed after %d of %d answers", c.id, seq, c.sent)
			case <-ctx.Done():
				t.Fatalf("client %d: %d of %d answers (unread %d bytes)", c.id, seq, c.sent, srv.UnreadBytes())
			}
			if len(resp) != 1+nativeproto.ProduceResponseLen || resp[0] != nativeproto.KeyProduce || resp[1] != nativeproto.CodeOK {
				t.Fatalf("client %d request %d: answer %v", c.id, seq, resp)
			}
			off := int64(binary.BigEndian.Uint64(resp[6:]))
			if off <= last {
				t.Fatalf("client %d request %d: offset %d after %d", c.id, seq, off, last)
			}
			last = off
		}
	}
	e2eWaitFor(t, 30*time.Second, "the unread count to return to zero", func() bool { return srv.UnreadBytes() == 0 })

	// The log holds exactly the kept clients' requests, each intact.
	total := 0
	for _, c := range kept {
		total += c.sent
	}
	got := map[string]bool{}
	nc := nativeConn(t, b)
	for off := int64(0); off < int64(total); {
		recs, err := nc.Fetch(ctx, "paused", 0, off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			t.Fatalf("no record at offset %d of %d", off, total)
		}
		for _, r := range recs {
			if len(r.Value) != valueSize {
				t.Fatalf("offset %d: value of %d bytes", r.Offset, len(r.Value))
			}
			got[string(r.Value[:len(recordID(0, 0))])] = true
			off = r.Offset + 1
		}
	}
	for _, c := range kept {
		for seq := 0; seq < c.sent; seq++ {
			if k := recordID(c.id, seq); !got[k] {
				t.Fatalf("record %s is missing", k)
			}
		}
	}
	if len(got) != total {
		t.Fatalf("%d distinct records stored, want %d", len(got), total)
	}
	end, err := nc.Fetch(ctx, "paused", 0, int64(total), 1<<20)
	if err != nil || len(end) > 0 {
		t.Fatalf("fetch past the kept clients' %d records: %d records, %v", total, len(end), err)
	}
}

// recordID opens the value of a record of TestPausedConnectionsBounded.
func recordID(conn, seq int) string { return fmt.Sprintf("c%02d-s%04d", conn, seq) }
