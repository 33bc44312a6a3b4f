package netio_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/testenv"
)

// TestFetchLongPollEndsWithConnection: a fetch parked for MaxWaitMs (here
// 60s, MinBytes never reachable) must not outlive its connection: it holds
// a timer, its request and a partition watch (woken, and re-reading the
// log, on every append) that must go with the client, not at MaxWaitMs.
// Parked fetches take no goroutine.
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
	p := b.Eng.Topic("lp").Partition(0)
	if !testenv.Eventually(3*time.Second, func() bool { return b.Kafka.ParkedFetches() >= conns && p.Watchers() >= conns }) {
		t.Fatalf("%d fetches parked, %d watching the partition, want %d", b.Kafka.ParkedFetches(), p.Watchers(), conns)
	}
	// No goroutine per parked fetch (a few may come and go meanwhile).
	if n := settle(); n > g0+conns/5 {
		t.Errorf("%d goroutines with %d parked fetches (%d before): a goroutine per fetch", n, conns, g0)
	}
	for _, rc := range rcs {
		rc.c.Close()
	}
	if !testenv.Eventually(3*time.Second, func() bool { return b.Kafka.ParkedFetches() == 0 && p.Watchers() == 0 }) {
		t.Fatalf("3s after closing %d connections with parked fetches, %d are still parked and %d watch the partition: the fetches outlive their connections", conns, b.Kafka.ParkedFetches(), p.Watchers())
	}
	h.check(t, "orphaned fetches")
}
