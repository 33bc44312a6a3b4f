package client_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/client"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/internal/testenv"
)

// testBroker is a real broker in the test process (brokertest: the
// client package itself never imports the broker; only its tests do).
type testBroker struct {
	// Addr is the native listener, the one the client speaks to.
	Addr string
}

// oneLoop runs the listeners on one event loop each.
func oneLoop(c *broker.Config) { c.Kafka.EventLoops = 1 }

// startBroker starts a broker for a test, stopped at cleanup.
func startBroker(t testing.TB) *testBroker {
	t.Helper()
	return &testBroker{Addr: brokertest.Start(t, oneLoop).NativeAddr}
}

// exampleBroker starts a broker for an example on a temporary directory;
// stop shuts it down and removes the directory.
func exampleBroker() (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "ringlog-example-")
	if err != nil {
		panic(err)
	}
	cfg := brokertest.Config(dir)
	oneLoop(&cfg)
	b, err := broker.New(cfg)
	if err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	return b.NativeAddr(), func() {
		b.Shutdown()
		os.RemoveAll(dir)
	}
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// withConn runs f with a raw Conn to addr, closed when f returns (so a
// helper leaves no goroutine behind for the leak checks).
func withConn(t testing.TB, addr string, f func(ctx context.Context, c *client.Conn)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f(ctx, c)
}

func createTopic(t testing.TB, addr, topic string, partitions int32) {
	t.Helper()
	withConn(t, addr, func(ctx context.Context, c *client.Conn) {
		if err := c.CreateTopic(ctx, topic, partitions); err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
	})
}

// fetchAll reads a partition from offset 0 to its end.
func fetchAll(t testing.TB, addr, topic string, partition int32) []client.Record {
	t.Helper()
	var out []client.Record
	withConn(t, addr, func(ctx context.Context, c *client.Conn) {
		for {
			recs, err := c.Fetch(ctx, topic, partition, int64(len(out)), 1<<20)
			if err != nil {
				t.Fatalf("fetch %s/%d: %v", topic, partition, err)
			}
			if len(recs) == 0 {
				return
			}
			out = append(out, recs...)
		}
	})
	return out
}

// proxy is a TCP proxy in front of a broker that parses the native
// request frames it forwards (to count them by API key and topic), can
// hold them (a paused, slow broker) and can cut every connection.
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	paused  bool
	conns   []net.Conn
	accepts int
	frames  map[frameKey]int
	wg      sync.WaitGroup
}

type frameKey struct {
	api   byte
	topic string // the first string of the payload (the group for commits)
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target, frames: map[frameKey]int{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.accepts++
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			p.pumpRequests(in, out)
			in.Close()
			out.Close()
		}()
		go func() {
			defer p.wg.Done()
			io.Copy(in, out)
			in.Close()
			out.Close()
		}()
	}
}

// pumpRequests forwards whole frames client -> broker, counting them.
func (p *proxy) pumpRequests(in, out net.Conn) {
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(in, hdr[:]); err != nil {
			return
		}
		frame := make([]byte, 4+binary.BigEndian.Uint32(hdr[:4]))
		copy(frame, hdr[:])
		if _, err := io.ReadFull(in, frame[5:]); err != nil {
			return
		}
		k := frameKey{api: frame[4]}
		if len(frame) >= 7 {
			if n := int(binary.BigEndian.Uint16(frame[5:])); 7+n <= len(frame) {
				k.topic = string(frame[7 : 7+n])
			}
		}
		p.mu.Lock()
		p.frames[k]++
		for p.paused {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if _, err := out.Write(frame); err != nil {
			return
		}
	}
}

// count returns how many frames of api (for topic, or all with "") went
// through.
func (p *proxy) count(api byte, topic string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for k, v := range p.frames {
		if k.api == api && (topic == "" || k.topic == topic) {
			n += v
		}
	}
	return n
}

func (p *proxy) reset() {
	p.mu.Lock()
	clear(p.frames)
	p.mu.Unlock()
}

func (p *proxy) pause(on bool) {
	p.mu.Lock()
	p.paused = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// cut closes every proxied connection (a network failure).
func (p *proxy) cut() {
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.ln.Close()
	p.pause(false)
	p.cut()
	p.wg.Wait()
}

// Native API keys, as the proxy sees them.
const (
	apiProduce     byte = 0
	apiFetch       byte = 1
	apiFetchOffset byte = 4
)

// checkNoLeak waits until the process has no more goroutines than before.
func checkNoLeak(t testing.TB, before int) {
	t.Helper()
	if !testenv.Eventually(3*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf)
	}
}

func isCode(err error, code byte) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Code == code
}
