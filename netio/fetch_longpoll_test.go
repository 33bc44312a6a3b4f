package netio_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// TestFetchLongPollEndsWithConnection: a fetch parked for MaxWaitMs (here
// 60s, MinBytes never reachable) must not outlive its connection: before
// the fix each one kept a goroutine, a timer and a partition watch (woken,
// and re-reading the log, on every append) for the whole MaxWaitMs after
// the client had gone.
func TestFetchLongPollEndsWithConnection(t *testing.T) {
	b := startBroker(t)
	if _, err := b.Eng.CreateTopic(engine.CreateTopicRequest{Name: "lp", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	h := newHealthCheck(t, b.Addr)
	settle := func() int {
		// Let goroutines of earlier work finish before counting.
		n := runtime.NumGoroutine()
		for i := 0; i < 20; i++ {
			time.Sleep(10 * time.Millisecond)
			n = min(n, runtime.NumGoroutine())
		}
		return n
	}
	g0 := settle()
	const conns = 50
	var rcs []*wireConn
	for i := 0; i < conns; i++ {
		rc := dialWire(t, b.Addr)
		f := kmsg.NewPtrFetchRequest()
		f.MaxWaitMillis, f.MinBytes, f.MaxBytes = 60000, 1<<30, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "lp"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		f.Topics = append(f.Topics, ft)
		rc.write(reqFrame(f, 12, int32(i)))
		rcs = append(rcs, rc)
	}
	// Every fetch is parked: one goroutine each.
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() < g0+conns {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, want at least %d with %d parked fetches", runtime.NumGoroutine(), g0+conns, conns)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, rc := range rcs {
		rc.c.Close()
	}
	deadline = time.Now().Add(3 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= g0+conns/5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 3s after closing %d connections with parked fetches (%d before): the fetches outlive their connections", n, conns, g0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.check(t, "orphaned fetches")
}
