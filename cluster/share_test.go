package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine/sharegroup"
	"github.com/ringlog/ringlog/internal/simcluster"
	"github.com/ringlog/ringlog/internal/testenv"
)

// startOnBroker4 starts three voters and the broker-only node 4, creates
// topic with parts partitions all led by broker 4, and waits until broker
// 4 leads them all.
func startOnBroker4(t *testing.T, topic string, parts int) *simcluster.Cluster {
	t.Helper()
	c := startWithBrokers(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	assign := map[int32][]int32{}
	for p := range int32(parts) {
		assign[p] = []int32{4}
	}
	if err := createAssigned(ctx, c.Client(), topic, assign); err != nil {
		t.Fatal(err)
	}
	eng := c.Node(4).Broker().Engine()
	testenv.WaitFor(t, 20*time.Second, "broker 4 leading every partition of "+topic, func() bool {
		tp := eng.Topic(topic)
		if tp == nil || len(tp.Partitions()) != parts || !c.Node(4).Broker().Cluster().MayLead() {
			return false
		}
		for _, p := range tp.Partitions() {
			if !p.Hosted() {
				return false
			}
		}
		return true
	})
	return c
}

// setGroupConfig commits one group config through the client's brokers.
func setGroupConfig(ctx context.Context, cl *kgo.Client, group, key, value string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	rc.Name, rc.Value = key, kmsg.StringPtr(value)
	rr.Configs = append(rr.Configs, rc)
	req.Resources = append(req.Resources, rr)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	return err
}

// A share-partition that starts on a broker whose metadata lags (the
// leader's pushes to its metadata listener held up) still starts where
// the group's share.auto.offset.reset, set and seen through another
// broker a moment before, says: earliest, so the records written before
// are delivered. It waits for its metadata to catch up with the
// controller's rather than start from the default (latest) and pass
// over them, as a kgo-compat run of franz-go's TestShareGroup saw.
func TestShareStartWaitsForTheGroupConfigs(t *testing.T) {
	c := startOnBroker4(t, "shared", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eng := c.Node(4).Broker().Engine()
	cl := c.Client(kgo.DefaultProduceTopic("shared"))
	for i := range 10 {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(string(rune('a'+i)))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for id := int32(1); id <= 3; id++ {
		c.Net.Cut(id, simcluster.MetadataLink(4))
	}
	if err := setGroupConfig(ctx, c.Client(kgo.SeedBrokers(c.Node(1).Broker().KafkaAddr())), "g", "share.auto.offset.reset", "earliest"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "broker 1 holding the group config", func() bool {
		return c.Node(1).Broker().Cluster().Image().GroupConfigs()["g"]["share.auto.offset.reset"] == "earliest"
	})
	if eng.GroupConfigs("g")["share.auto.offset.reset"] == "earliest" {
		t.Fatal("broker 4 has the group config although its metadata is cut off")
	}
	type fetched struct {
		acq []sharegroup.Acquisition
		err error
	}
	got := make(chan fetched, 1)
	go func() {
		_, acq, err := eng.Shares().Fetch(time.Now(), "g", "member", eng.Topic("shared").Partition(0), 1<<20, 0, false)
		got <- fetched{acq, err}
	}()
	select {
	case f := <-got:
		t.Fatalf("the share-partition started while broker 4's metadata lags the controller's: acquired %v (%v)", f.acq, f.err)
	case <-time.After(500 * time.Millisecond):
	}
	c.Net.Heal()
	f := <-got
	if f.err != nil {
		t.Fatal(f.err)
	}
	if len(f.acq) != 1 || f.acq[0].First != 0 || f.acq[0].Last != 9 {
		t.Fatalf("acquired %v, want offsets 0-9 (share.auto.offset.reset=earliest)", f.acq)
	}
}

// One ShareFetch starting many share-partitions waits for one metadata
// sync, not one each: the partitions share the request's arrival time,
// and one heartbeat answered after it covers them all. (A hostile review
// found 24 partitions taking 24 heartbeat intervals, 6 s.)
func TestShareFetchOfManyNewPartitionsSyncsOnce(t *testing.T) {
	const topic, parts = "wide", 24
	c := startOnBroker4(t, topic, parts)
	eng := c.Node(4).Broker().Engine()
	arrived := time.Now()
	for _, p := range eng.Topic(topic).Partitions() {
		if _, _, err := eng.Shares().Fetch(arrived, "g", "member", p, 1<<20, 0, false); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	if took := time.Since(arrived); took > 2*time.Second {
		t.Fatalf("one fetch of %d new share-partitions took %v: a metadata sync per partition", parts, took)
	}
}

// churn keeps metadata commits coming (four admins, each setting a config
// of a group of its own every 20 ms) and puts 20 ms on every metadata
// link to broker 4, until stop; commits counts what committed.
func churn(c *simcluster.Cluster, commits *atomic.Int64) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 4 {
		cl := c.Client(kgo.SeedBrokers(c.Node(int32(1 + i%3)).Broker().KafkaAddr()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			pace := time.NewTicker(20 * time.Millisecond)
			defer pace.Stop()
			for n := 0; ; n++ {
				if setGroupConfig(ctx, cl, fmt.Sprint("churn-", i), "share.record.lock.duration.ms", fmt.Sprint(15000+n%1000)) == nil {
					commits.Add(1)
				}
				select {
				case <-ctx.Done():
					return
				case <-pace.C:
				}
			}
		}()
	}
	for id := int32(1); id <= 3; id++ {
		c.Net.Delay(id, simcluster.MetadataLink(4), 20*time.Millisecond)
	}
	return func() { cancel(); wg.Wait(); c.Net.Heal() }
}

// While the metadata keeps changing and reaches the broker a little late
// (never late enough to fence it), a new share-partition still starts:
// the sync waits for the index the controller had, not for a moment when
// the broker has everything the controller has now. (A hostile review
// found every start refused LEADER_NOT_AVAILABLE after 5 s under churn.)
func TestShareStartUnderMetadataChurn(t *testing.T) {
	c := startOnBroker4(t, "churned", 1)
	eng := c.Node(4).Broker().Engine()
	var commits atomic.Int64
	stop := churn(c, &commits)
	defer stop()
	testenv.WaitFor(t, 20*time.Second, "the churn under way", func() bool { return commits.Load() >= 50 })
	start := time.Now()
	if _, _, err := eng.Shares().Fetch(start, "g", "member", eng.Topic("churned").Partition(0), 1<<20, 0, false); err != nil {
		t.Fatalf("a new share-partition could not start while the metadata keeps changing (%d commits so far): %v", commits.Load(), err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("a new share-partition took %v to start under churn", took)
	}
}
