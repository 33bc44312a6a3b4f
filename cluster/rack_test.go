package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/simcluster"
	"github.com/ringlog/ringlog/internal/testenv"
)

// Brokers registered with racks (--rack) show them in Metadata, and a
// new topic's partitions each span both racks.
func TestRackAwarePlacement(t *testing.T) {
	racks := map[int32]string{1: "east", 2: "east", 3: "west", 4: "west"}
	c := simcluster.Start(t, 4, func(cfg *broker.Config) { cfg.Cluster.Rack = racks[cfg.Cluster.NodeID] })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.WaitController(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "4 brokers live", func() bool {
		return len(c.Node(1).Broker().Cluster().Image().LiveBrokers()) == 4
	})
	adm := kadm.NewClient(c.Client())
	if res, err := adm.CreateTopic(ctx, 8, 2, nil, "spread"); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	testenv.WaitFor(t, 10*time.Second, "the topic on broker 1", func() bool { return c.Node(1).Broker().Cluster().Image().Topic("spread") != nil })
	for i, p := range c.Node(1).Broker().Cluster().Image().Topic("spread").Partitions {
		if racks[p.Replicas[0]] == racks[p.Replicas[1]] {
			t.Errorf("partition %d on %v: both in rack %s", i, p.Replicas, racks[p.Replicas[0]])
		}
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range md.Brokers {
		if b.Rack == nil || *b.Rack != racks[b.NodeID] {
			t.Errorf("broker %d: Metadata rack %v, want %s", b.NodeID, b.Rack, racks[b.NodeID])
		}
	}
}

// KIP-392: with --follower-fetching, a consumer in rack west (franz-go's
// kgo.Rack) reads a partition led in rack east from an in-sync follower
// in its rack: the leader sends no records, only the preferred replica.
// With the west replica gone, it reads from the leader again.
func TestFollowerFetching(t *testing.T) {
	racks := map[int32]string{1: "east", 2: "east", 3: "west"}
	c := simcluster.Start(t, 3, func(cfg *broker.Config) {
		cfg.Cluster.Rack = racks[cfg.Cluster.NodeID]
		cfg.Kafka.FollowerFetching = true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitController(ctx); err != nil {
		t.Fatal(err)
	}
	if err := createAssigned(ctx, c.Client(), "reads", map[int32][]int32{0: {1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(c.Client())
	testenv.WaitFor(t, 30*time.Second, "every replica in sync", func() bool { return allInSync(ctx, adm, "reads", 1) })
	prod, err := c.NewClient(kgo.DefaultProduceTopic("reads"), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(from, n int) {
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 100)
	// (franz-go asks the leader again every RecheckPreferredReplicaInterval:
	// its way back once the preferred replica is gone)
	cons, err := c.NewClient(kgo.Rack("west"), kgo.ConsumeTopics("reads"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.RecheckPreferredReplicaInterval(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := map[string]bool{}
	consume := func(want int) {
		t.Helper()
		for len(got) < want {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d", len(got), want)
			}
			fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
		}
	}
	// (BytesOut counts the followers' replication too: compare what the
	// consumer's reads add, once replication is done)
	out := func(id int32) int64 {
		return c.Node(id).Broker().Engine().Topic("reads").Partition(0).BytesOut.Load()
	}
	leaderBefore, eastBefore, westBefore := out(1), out(2), out(3)
	consume(100)
	if l, e, w := out(1)-leaderBefore, out(2)-eastBefore, out(3)-westBefore; l != 0 || e != 0 || w == 0 {
		t.Errorf("bytes the consumer read: from the leader %d, the east follower %d, the west follower %d; want everything from the west", l, e, w)
	}
	// A read_committed consumer in the same rack stays on the leader
	// (a follower serves read_uncommitted ones only): it reads everything.
	rc, err := c.NewClient(kgo.Rack("west"), kgo.ConsumeTopics("reads"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	committed := 0
	for committed < 100 {
		fs := rc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("a read_committed consumer with a rack read %d of 100", committed)
		}
		committed += fs.NumRecords()
	}
	rc.Close()
	leaderBefore = out(1)
	// The west replica goes: the consumer falls back to the leader.
	if err := c.Stop(3); err != nil {
		t.Fatal(err)
	}
	prod2, err := c.NewClient(kgo.DefaultProduceTopic("reads"), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer prod2.Close()
	var recs []*kgo.Record
	for i := 100; i < 150; i++ {
		recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := prod2.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	consume(150)
	if out(1) == leaderBefore {
		t.Error("the leader served nothing after the west replica went")
	}
}
