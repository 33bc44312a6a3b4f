package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/simcluster"
	"github.com/ringlog/ringlog/internal/testenv"
)

// moveTime fills a one-replica partition on broker 1 with size bytes,
// moves it to a broker-only node (with throttle bytes a second as its
// --replication-throttle-bytes, 0: none) and returns how long the move
// took.
func moveTime(t *testing.T, size int, throttle int64) time.Duration {
	t.Helper()
	c := simcluster.Start(t, 3, func(cfg *broker.Config) { cfg.Cluster.ReplicationThrottle = throttle })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitController(ctx); err != nil {
		t.Fatal(err)
	}
	target, err := c.AddBroker()
	if err != nil {
		t.Fatal(err)
	}
	if err := createAssigned(ctx, c.Client(), "bulk", map[int32][]int32{0: {1}}); err != nil {
		t.Fatal(err)
	}
	cl, err := c.NewClient(kgo.DefaultProduceTopic("bulk"), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// (random bytes: the client compresses)
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []*kgo.Record
	for range size / (64 << 10) {
		value := make([]byte, 64<<10)
		for i := range value {
			value[i] = byte(rng.Uint32())
		}
		recs = append(recs, &kgo.Record{Value: value})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("broker %d live", target), func() bool {
		return len(c.Node(1).Broker().Cluster().Image().LiveBrokers()) == 4
	})
	move := kadm.AlterPartitionAssignmentsReq{}
	move.Assign("bulk", 0, []int32{target})
	start := time.Now()
	res, err := adm.AlterPartitionAssignments(ctx, move)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 90*time.Second, "the move completed", func() bool {
		l, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"bulk": {0: {}}})
		return err == nil && len(l) == 0
	})
	return time.Since(start)
}

// With --replication-throttle-bytes on the receiving broker, a move copies
// at about that rate (a second's worth of burst); without, as fast as the
// brokers go.
func TestReplicationThrottle(t *testing.T) {
	const size = 12 << 20
	const rate = 4 << 20
	free := moveTime(t, size, 0)
	throttled := moveTime(t, size, rate)
	mbps := func(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }
	t.Logf("moved %d MiB: %v unthrottled (%.1f MiB/s), %v throttled at %d MiB/s (%.1f MiB/s)",
		size>>20, free.Round(time.Millisecond), mbps(free), throttled.Round(time.Millisecond), rate>>20, mbps(throttled))
	// A second's worth goes at once, the rest at the rate.
	if lower := time.Duration(float64(size-rate) / rate * 0.8 * float64(time.Second)); throttled < lower {
		t.Errorf("a throttled move of %d MiB at %d MiB/s took %v, less than %v", size>>20, rate>>20, throttled, lower)
	}
}
