package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine/sharegroup"
	"github.com/ringlog/ringlog/internal/simcluster"
	"github.com/ringlog/ringlog/internal/testenv"
)

// A share-partition that starts on a broker whose metadata lags (the
// leader's pushes to its metadata listener held up) still starts where
// the group's share.auto.offset.reset, set and seen through another
// broker a moment before, says: earliest, so the records written before
// are delivered. It waits for its metadata to catch up with the
// controller's rather than start from the default (latest) and pass
// over them, as a kgo-compat run of franz-go's TestShareGroup saw.
func TestShareStartWaitsForTheGroupConfigs(t *testing.T) {
	c := startWithBrokers(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := createAssigned(ctx, c.Client(), "shared", map[int32][]int32{0: {4}}); err != nil {
		t.Fatal(err)
	}
	eng := c.Node(4).Broker().Engine()
	testenv.WaitFor(t, 20*time.Second, "broker 4 leading shared-0", func() bool {
		tp := eng.Topic("shared")
		return tp != nil && tp.Partition(0) != nil && tp.Partition(0).Hosted() && c.Node(4).Broker().Cluster().MayLead()
	})
	cl := c.Client(kgo.DefaultProduceTopic("shared"))
	for i := range 10 {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(string(rune('a'+i)))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for id := int32(1); id <= 3; id++ {
		c.Net.Cut(id, simcluster.MetadataLink(4))
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "g"
	rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	rc.Name, rc.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	rr.Configs = append(rr.Configs, rc)
	req.Resources = append(req.Resources, rr)
	resp, err := req.RequestWith(ctx, c.Client(kgo.SeedBrokers(c.Node(1).Broker().KafkaAddr())))
	if err == nil {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
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
		_, acq, err := eng.Shares().Fetch("g", "member", eng.Topic("shared").Partition(0), 1<<20, 0, false)
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
