package reliability

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/testenv"
)

// raiseNoFile lifts RLIMIT_NOFILE (inherited by the broker process) to at
// least need, skipping the test when the hard limit forbids it.
func raiseNoFile(t *testing.T, need uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= need {
		return
	}
	want := lim
	want.Cur = need
	if want.Max < need {
		want.Max = need
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		testenv.Missing(t, testenv.Root, "cannot raise the open-file limit to %d (soft %d, hard %d): %v; run with fewer connections (RINGLOG_STORM_IDLE) or with CAP_SYS_RESOURCE", need, lim.Cur, lim.Max, err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
}

// apiVersionsFrame is an ApiVersions v0 request (correlation id 1, no
// client id).
var apiVersionsFrame = []byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff}

// dialAccepted connects and does one ApiVersions round trip, so the
// connection is known to be accepted and registered by the broker.
func dialAccepted(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write(apiVersionsFrame); err != nil {
		c.Close()
		return nil, err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("ApiVersions response: %w", err)
	}
	if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(hdr[:]))); err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// produceLatencies produces n small records one at a time (acks=1) and
// returns their latencies, sorted.
func produceLatencies(ctx context.Context, t *testing.T, cl *kgo.Client, n int) []time.Duration {
	t.Helper()
	lat := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "storm", Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat
}

func p99(s []time.Duration) time.Duration { return s[len(s)*99/100] }

// TestConnectionStorm: RINGLOG_STORM_IDLE idle connections (1,000 by
// default, 10,000 in `make reliability`) and RINGLOG_STORM_SLOW slowloris
// connections (100; 500) sending one header byte a second, reconnecting
// when the broker's --request-read-timeout closes them. A normal client's
// produce p99 under that load stays within 3x (plus 2 ms of scheduling
// noise on a small machine) of its p99 without it, measured in the same
// run, and the slow connections are reaped.
func TestConnectionStorm(t *testing.T) {
	idleN := envInt(t, "RINGLOG_STORM_IDLE", 1000)
	slowN := envInt(t, "RINGLOG_STORM_SLOW", 100)
	figure := "not run"
	defer func() { result(t, fmt.Sprintf("connections: %d idle + %d slowloris", idleN, slowN), figure) }()
	// The broker and this process hold one descriptor per idle or slow
	// connection each (the broker's writer dup exists only for
	// connections that filled their socket).
	raiseNoFile(t, uint64(idleN+slowN+1024))
	const readTimeout = 3 * time.Second
	b := startBroker(t, "--max-connections", fmt.Sprint(idleN+slowN+100),
		"--request-read-timeout", readTimeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.AllowAutoTopicCreation(),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produceLatencies(ctx, t, cl, 50) // warm up: topic, connections
	const samples = 400
	unloaded := produceLatencies(ctx, t, cl, samples)
	rssBefore, _ := b.rss()
	fdsBefore := b.fds()

	// The idle crowd.
	idle := make([]net.Conn, idleN)
	var wg sync.WaitGroup
	var dialErr atomic.Value
	next := atomic.Int64{}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= idleN {
					return
				}
				c, err := dialAccepted(b.addr)
				if err != nil {
					dialErr.Store(err)
					return
				}
				idle[i] = c
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range idle {
			if c != nil {
				c.Close()
			}
		}
	}()
	if err, _ := dialErr.Load().(error); err != nil {
		t.Fatalf("opening %d idle connections: %v", idleN, err)
	}

	rssIdle, _ := b.rss()
	perConn := (rssIdle - rssBefore) / int64(idleN)
	fdsIdle := b.fds()
	if extra := fdsIdle - fdsBefore - idleN; extra > idleN/100+16 {
		t.Errorf("the broker holds %d descriptors more than one per idle connection (%d before, %d with %d idle)", extra, fdsBefore, fdsIdle, idleN)
	}

	// The slow ones: a 100-byte frame, one byte a second, again and again.
	stop := make(chan struct{})
	var reaped atomic.Int64
	var slowWG sync.WaitGroup
	for range slowN {
		slowWG.Add(1)
		go func() {
			defer slowWG.Done()
			frame := append([]byte{0, 0, 0, 100}, make([]byte, 100)...)
			for {
				c, err := net.DialTimeout("tcp", b.addr, 30*time.Second)
				if err != nil {
					return
				}
				tick := time.NewTicker(time.Second)
				for i := 0; ; i++ {
					if _, err := c.Write(frame[i%len(frame) : i%len(frame)+1]); err != nil {
						reaped.Add(1)
						break
					}
					select {
					case <-stop:
						tick.Stop()
						c.Close()
						return
					case <-tick.C:
					}
				}
				tick.Stop()
				c.Close()
			}
		}()
	}
	time.Sleep(time.Second) // every slow connection has started its frame
	loadedStart := time.Now()
	loaded := produceLatencies(ctx, t, cl, samples)
	// Long enough under load for the slow connections to be reaped.
	if d := 2*readTimeout - time.Since(loadedStart); d > 0 {
		time.Sleep(d)
	}
	close(stop)
	slowWG.Wait()

	// The idle connections are all still open (nothing reaped them early).
	for i, c := range idle {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
			t.Fatalf("idle connection %d was closed: %v", i, err)
		}
	}
	ratio := float64(p99(loaded)) / float64(p99(unloaded))
	figure = fmt.Sprintf("produce p99 %v unloaded, %v loaded (%.2fx); %d slowloris closes; broker RSS %d MiB, %d descriptors with the idle ones (%.1f KiB each)",
		p99(unloaded).Round(10*time.Microsecond), p99(loaded).Round(10*time.Microsecond), ratio, reaped.Load(),
		rssIdle>>20, fdsIdle, float64(perConn)/1024)
	t.Log(figure)
	if p99(loaded) > 3*p99(unloaded)+2*time.Millisecond {
		t.Errorf("produce p99 %v under the storm, %v without: more than 3x", p99(loaded), p99(unloaded))
	}
	if perConn > connMemoryBound {
		t.Errorf("each idle connection costs the broker %d bytes, over the documented %d", perConn, connMemoryBound)
	}
	if reaped.Load() < int64(slowN) {
		t.Errorf("%d slowloris connections closed by the broker, want at least %d (--request-read-timeout %v)", reaped.Load(), slowN, readTimeout)
	}
}

// connMemoryBound is the README's per-connection term: the connection's
// state, its writer goroutine's stack, its dup'ed socket and gnet's
// buffers for it.
const connMemoryBound = 32 << 10

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
