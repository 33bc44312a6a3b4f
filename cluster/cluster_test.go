package cluster

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/quorum"
)

// Group coordinators are spread over the voters and never depend on
// anything but the group id and the (fixed) voter set.
func TestCoordinatorForIsFixedAndSpread(t *testing.T) {
	vs, err := quorum.ParseVoters("3@127.0.0.1:3,1@127.0.0.1:1,2@127.0.0.1:2")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{}
	for _, v := range vs {
		c.voters = append(c.voters, v.ID)
	}
	seen := map[int32]int{}
	for i := 0; i < 300; i++ {
		g := "group-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		id := c.CoordinatorFor(g)
		if again := c.CoordinatorFor(g); again != id {
			t.Fatalf("%s: coordinator %d then %d", g, id, again)
		}
		seen[id]++
	}
	if len(seen) != 3 {
		t.Fatalf("coordinators %v: want all three voters used", seen)
	}
}

// errorResponse answers every item of every admin and internal request.
func TestErrorResponseCoversEveryItem(t *testing.T) {
	code := kerr.NotController
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Topics = make([]kmsg.CreateTopicsRequestTopic, 2)
	if r := errorResponse(ct, code, "x").(*kmsg.CreateTopicsResponse); len(r.Topics) != 2 || r.Topics[1].ErrorCode != code.Code {
		t.Errorf("CreateTopics: %+v", r.Topics)
	}
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TopicNames = []string{"a", "b"}
	if r := errorResponse(dt, code, "x").(*kmsg.DeleteTopicsResponse); len(r.Topics) != 2 || *r.Topics[1].Topic != "b" || r.Topics[1].ErrorCode != code.Code {
		t.Errorf("DeleteTopics v0: %+v", r.Topics)
	}
	dt6 := kmsg.NewPtrDeleteTopicsRequest()
	dt6.Version = 6
	dt6.Topics = make([]kmsg.DeleteTopicsRequestTopic, 3)
	if r := errorResponse(dt6, code, "x").(*kmsg.DeleteTopicsResponse); len(r.Topics) != 3 {
		t.Errorf("DeleteTopics v6: %+v", r.Topics)
	}
	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.Topics = make([]kmsg.CreatePartitionsRequestTopic, 1)
	if r := errorResponse(cp, code, "x").(*kmsg.CreatePartitionsResponse); len(r.Topics) != 1 || r.Topics[0].ErrorCode != code.Code {
		t.Errorf("CreatePartitions: %+v", r.Topics)
	}
	ac := kmsg.NewPtrAlterConfigsRequest()
	ac.Resources = make([]kmsg.AlterConfigsRequestResource, 2)
	if r := errorResponse(ac, code, "x").(*kmsg.AlterConfigsResponse); len(r.Resources) != 2 || r.Resources[0].ErrorCode != code.Code {
		t.Errorf("AlterConfigs: %+v", r.Resources)
	}
	ic := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ic.Resources = make([]kmsg.IncrementalAlterConfigsRequestResource, 2)
	if r := errorResponse(ic, code, "x").(*kmsg.IncrementalAlterConfigsResponse); len(r.Resources) != 2 || r.Resources[1].ErrorCode != code.Code {
		t.Errorf("IncrementalAlterConfigs: %+v", r.Resources)
	}
	if r := errorResponse(kmsg.NewPtrBrokerRegistrationRequest(), code, "x").(*kmsg.BrokerRegistrationResponse); r.ErrorCode != code.Code || r.BrokerEpoch != -1 {
		t.Errorf("BrokerRegistration: %+v", r)
	}
	if r := errorResponse(kmsg.NewPtrBrokerHeartbeatRequest(), code, "x").(*kmsg.BrokerHeartbeatResponse); r.ErrorCode != code.Code || !r.IsFenced {
		t.Errorf("BrokerHeartbeat: %+v", r)
	}
	if r := errorResponse(kmsg.NewPtrAllocateProducerIDsRequest(), code, "x").(*kmsg.AllocateProducerIDsResponse); r.ErrorCode != code.Code {
		t.Errorf("AllocateProducerIds: %+v", r)
	}
}

// Names that are, or collide with, the brokers' local __consumer_offsets
// are refused.
func TestOffsetsNameCollision(t *testing.T) {
	for name, want := range map[string]bool{"__consumer_offsets": true, "__consumer.offsets": true, "__Consumer_Offsets": true, "consumer_offsets": false, "orders": false} {
		if got := isOffsetsName(name); got != want {
			t.Errorf("isOffsetsName(%q) = %v, want %v", name, got, want)
		}
	}
}
