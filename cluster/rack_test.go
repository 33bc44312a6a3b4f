package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

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
