package cluster_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/simcluster"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/metadata"
)

// DescribeQuorum (as kafka-metadata-quorum.sh sends it, to any broker):
// the controller leads, the three voters and the broker-only observer are
// listed with their metadata progress; a partition other than
// __cluster_metadata-0 is unknown.
func TestDescribeQuorum(t *testing.T) {
	c := startWithBrokers(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var resp *kmsg.DescribeQuorumResponse
	testenv.WaitFor(t, 20*time.Second, "every member heard from", func() bool {
		req := kmsg.NewPtrDescribeQuorumRequest()
		for _, topic := range []string{"__cluster_metadata", "other"} {
			rt := kmsg.NewDescribeQuorumRequestTopic()
			rt.Topic = topic
			rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
			req.Topics = append(req.Topics, rt)
		}
		var err error
		// (through broker 4, the observer: forwarded to the controller)
		if resp, err = req.RequestWith(ctx, c.Client().Broker(4)); err != nil || resp.ErrorCode != 0 || len(resp.Topics) != 2 {
			return false
		}
		p := resp.Topics[0].Partitions[0]
		heard := len(p.CurrentVoters) == 3 && len(p.Observers) == 1
		for _, r := range append(slices.Clone(p.CurrentVoters), p.Observers...) {
			heard = heard && r.LogEndOffset > 0 && r.LastFetchTimestamp > 0
		}
		return heard
	})
	p := resp.Topics[0].Partitions[0]
	ctrl := c.Node(1).Broker().Cluster().ControllerID()
	if p.LeaderID != ctrl || p.LeaderEpoch < 1 || p.HighWatermark <= 0 || p.Observers[0].ReplicaID != 4 {
		t.Errorf("quorum %+v; want led by the controller %d, observer 4", p, ctrl)
	}
	if o := resp.Topics[1].Partitions[0]; o.ErrorCode == 0 {
		t.Error("a partition other than __cluster_metadata-0 answered")
	}
	if len(resp.Nodes) != 3 || len(resp.Nodes[0].Listeners) != 1 {
		t.Errorf("v2 nodes %+v: want the three voters' listeners", resp.Nodes)
	}
}

// A broker-only node gone (stopped: fenced, silent) for the grace leaves
// the Raft configuration; started again, it joins again and serves.
func TestDepartedBrokerOnlyNodeIsPruned(t *testing.T) {
	c := simcluster.Start(t, 3, func(cfg *broker.Config) { cfg.Cluster.BrokerOnlyGrace = 2 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitController(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := c.AddBroker()
	if err != nil {
		t.Fatal(err)
	}
	member := func() bool {
		_, nonVoters, err := c.Node(1).Broker().Cluster().Node().Members()
		return err == nil && slices.Contains(nonVoters, id)
	}
	live := func() bool {
		b, ok := c.Node(1).Broker().Cluster().Image().Broker(id)
		return ok && !b.Fenced
	}
	testenv.WaitFor(t, 20*time.Second, "the broker-only node a live member", func() bool { return member() && live() })
	if err := c.Stop(id); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the stopped broker-only node out of the configuration", func() bool { return !member() })
	if err := c.Restart(id); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the broker-only node back and live", func() bool { return member() && live() })
}

// A broker-only node that stops receiving the metadata log (the leader's
// pushes to its metadata listener cut) while its heartbeats get through
// is fenced: the partitions it led move, and it stops naming itself
// leader, instead of leading on a stale image. Healed, it is unfenced.
func TestLaggingBrokerIsFenced(t *testing.T) {
	c := startWithBrokers(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := createAssigned(ctx, c.Client(), "led", map[int32][]int32{0: {4, 1, 2}}); err != nil {
		t.Fatal(err)
	}
	img := func() *metadata.Image { return c.Node(1).Broker().Cluster().Image() }
	testenv.WaitFor(t, 20*time.Second, "broker 4 leading led-0, in sync", func() bool {
		tp := img().Topic("led")
		return tp != nil && tp.Partitions[0].Leader == 4 && len(tp.Partitions[0].ISR) == 3
	})
	for id := int32(1); id <= 3; id++ {
		c.Net.Cut(id, simcluster.MetadataLink(4))
	}
	testenv.WaitFor(t, 20*time.Second, "broker 4 fenced and led-0 led elsewhere", func() bool {
		b, _ := img().Broker(4)
		return b.Fenced && img().Topic("led").Partitions[0].Leader != 4
	})
	if c.Node(4).Broker().Cluster().MayLead() {
		testenv.WaitFor(t, 5*time.Second, "broker 4's lease lapsed", func() bool { return !c.Node(4).Broker().Cluster().MayLead() })
	}
	c.Net.Heal()
	testenv.WaitFor(t, 30*time.Second, "broker 4 unfenced again", func() bool {
		b, _ := img().Broker(4)
		return !b.Fenced
	})
}
