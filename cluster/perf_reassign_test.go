package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/simcluster"
	"github.com/ringlog/ringlog/internal/testenv"
)

// TestReassignmentPerf measures, side by side in one run, what
// perf/results/reassignment-* reports: the rate a partition moves at
// without and with --replication-throttle-bytes, the p99 of an acks=all
// producer on other partitions during each move against without one, and
// the leader imbalance after a full restart before and after the
// automatic rebalance. It runs only with RINGLOG_REASSIGN_PERF=MiB (the
// size of each moved partition); RINGLOG_REASSIGN_THROTTLE is the
// throttle in MiB/s (default 8).
func TestReassignmentPerf(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("RINGLOG_REASSIGN_PERF"))
	if mib <= 0 {
		t.Skip("set RINGLOG_REASSIGN_PERF=MiB to measure reassignment")
	}
	throttle := int64(8)
	if v, err := strconv.Atoi(os.Getenv("RINGLOG_REASSIGN_THROTTLE")); err == nil && v > 0 {
		throttle = int64(v)
	}
	size := mib << 20
	// Brokers 4 (free) and 5 (throttled) are broker-only targets.
	c := simcluster.Start(t, 3, func(cfg *broker.Config) {
		if cfg.Cluster.NodeID == 5 {
			cfg.Cluster.ReplicationThrottle = throttle << 20
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := c.WaitController(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.AddBroker(); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "5 brokers live", func() bool {
		return len(c.Node(1).Broker().Cluster().Image().LiveBrokers()) == 5
	})
	if err := createAssigned(ctx, c.Client(), "bulk", map[int32][]int32{0: {1}, 1: {1}}); err != nil {
		t.Fatal(err)
	}
	if err := createAssigned(ctx, c.Client(), "live", map[int32][]int32{0: {1, 2, 3}, 1: {2, 3, 1}, 2: {3, 1, 2}}); err != nil {
		t.Fatal(err)
	}
	fill, err := c.NewClient(kgo.DefaultProduceTopic("bulk"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedBytes(256<<20))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for part := int32(0); part < 2; part++ {
		var recs []*kgo.Record
		for range size / (64 << 10) {
			v := make([]byte, 64<<10)
			for i := range v {
				v[i] = byte(rng.Uint32())
			}
			recs = append(recs, &kgo.Record{Value: v, Partition: part})
		}
		if err := fill.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	fill.Close()

	// The live producer: acks=all, 1 KiB records, 400 a second.
	prod, err := c.NewClient(kgo.DefaultProduceTopic("live"), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var mu sync.Mutex
	newHist := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 3) } // µs
	hist := newHist()
	phase := func(d time.Duration, during func()) *hdrhistogram.Histogram {
		mu.Lock()
		hist = newHist()
		mu.Unlock()
		end := time.Now().Add(d)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if during != nil {
				during()
			}
		}()
		tick := time.NewTicker(2500 * time.Microsecond)
		defer tick.Stop()
		value := make([]byte, 1024)
		for time.Now().Before(end) || func() bool {
			select {
			case <-done:
				return false
			default:
				return true
			}
		}() {
			<-tick.C
			sent := time.Now()
			prod.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
				if err == nil {
					mu.Lock()
					hist.RecordValue(time.Since(sent).Microseconds())
					mu.Unlock()
				}
			})
		}
		<-done
		if err := prod.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return hist
	}
	adm := kadm.NewClient(c.Client())
	move := func(part int32, to int32) time.Duration {
		req := kadm.AlterPartitionAssignmentsReq{}
		req.Assign("bulk", part, []int32{to})
		start := time.Now()
		res, err := adm.AlterPartitionAssignments(ctx, req)
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 10*time.Minute, "the move completed", func() bool {
			l, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"bulk": {part: {}}})
			return err == nil && len(l) == 0
		})
		return time.Since(start)
	}
	base := phase(10*time.Second, nil)
	var free, slow time.Duration
	during := phase(2*time.Second, func() { free = move(0, 4) })
	throttled := phase(2*time.Second, func() { slow = move(1, 5) })
	rate := func(d time.Duration) float64 { return float64(mib) / d.Seconds() }
	row := func(what string, h *hdrhistogram.Histogram) string {
		us := func(v int64) time.Duration { return (time.Duration(v) * time.Microsecond).Round(10 * time.Microsecond) }
		return fmt.Sprintf("| %s | %d | %v | %v | %v |", what, h.TotalCount(), us(h.ValueAtQuantile(50)), us(h.ValueAtQuantile(99)), us(h.Max()))
	}
	t.Logf("moved %d MiB: free %v (%.1f MiB/s); throttled at %d MiB/s %v (%.1f MiB/s)", mib, free.Round(time.Millisecond), rate(free),
		throttle, slow.Round(time.Millisecond), rate(slow))
	t.Logf("acks=all producer, 400 records/s of 1 KiB on other partitions:\n| phase | records | p50 | p99 | max |\n|---|---|---|---|---|\n%s\n%s\n%s",
		row("no move (10 s)", base), row("during the free move", during), row("during the throttled move", throttled))
}

// TestLeaderImbalanceAfterRestart measures how many partitions each broker
// leads after a full restart, before and after the automatic rebalance
// (RINGLOG_REASSIGN_PERF set; see TestReassignmentPerf).
func TestLeaderImbalanceAfterRestart(t *testing.T) {
	if os.Getenv("RINGLOG_REASSIGN_PERF") == "" {
		t.Skip("set RINGLOG_REASSIGN_PERF to measure")
	}
	c := simcluster.Start(t, 3, func(cfg *broker.Config) {
		cfg.Cluster.AutoLeaderRebalance = true
		cfg.Cluster.LeaderImbalanceCheckInterval = 15 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := c.WaitController(ctx); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(c.Client())
	if res, err := adm.CreateTopic(ctx, 12, 3, nil, "spread"); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	leads := func() (map[int32]int, bool) {
		img := c.Node(1).Broker().Cluster().Image()
		t := img.Topic("spread")
		if t == nil {
			return nil, false
		}
		out := map[int32]int{}
		full := true
		for _, p := range t.Partitions {
			out[p.Leader]++
			full = full && len(p.ISR) == 3
		}
		return out, full
	}
	testenv.WaitFor(t, 30*time.Second, "every replica in sync", func() bool { _, ok := leads(); return ok })
	before, _ := leads()
	for id := int32(1); id <= 3; id++ {
		if err := c.Stop(id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []int32{3, 1, 2} { // one at a time, as a rolling start does
		if err := c.Restart(id); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
	}
	var after map[int32]int
	testenv.WaitFor(t, 60*time.Second, "every replica in sync again", func() bool {
		var ok bool
		after, ok = leads()
		return ok
	})
	start := time.Now()
	var balanced map[int32]int
	testenv.WaitFor(t, 60*time.Second, "4 leaders each", func() bool {
		balanced, _ = leads()
		return balanced[1] == 4 && balanced[2] == 4 && balanced[3] == 4
	})
	t.Logf("leaders per broker of 12 partitions: created %v; after a full restart %v; %v later, after the automatic rebalance, %v",
		before, after, time.Since(start).Round(100*time.Millisecond), balanced)
}
