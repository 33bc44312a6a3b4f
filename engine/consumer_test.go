package engine

import (
	"log/slog"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestConsumerRecordsRoundTrip: a consumer-protocol group written as
// Kafka's records and replayed is the same group (members, epochs,
// states, current, pending and target assignments).
func TestConsumerRecordsRoundTrip(t *testing.T) {
	recs := sampleConsumerRecords()
	c := &Coordinator{cfg: DefaultConfig().Groups, sched: frozenScheduler{}, groups: map[string]*Group{}, eng: &Engine{logger: slog.New(slog.DiscardHandler)}}
	// A member written then removed must not come back.
	for _, r := range recs {
		if kind, err := c.apply(r.key, r.value); err != nil || kind != 2 {
			t.Fatalf("apply %x: kind %d, %v", r.key, kind, err)
		}
	}
	c.finishConsumerLoads(0)
	g := c.group("g", false)
	if g == nil || g.consumer == nil {
		t.Fatal("no consumer group after the replay")
	}
	cg := g.consumer
	if cg.Epoch() != 7 || cg.AssignmentEpoch() != 7 || len(cg.Members()) != 2 || cg.Member("c") != nil {
		t.Fatalf("epochs %d/%d, members %d", cg.Epoch(), cg.AssignmentEpoch(), len(cg.Members()))
	}
	ch := cg.TakeChanges(true)
	again := consumerRecords("g", ch)
	// Everything but the removed member's tombstones comes back byte for
	// byte.
	var want []kv
	for _, r := range recs {
		if r.value != nil {
			want = append(want, r)
		}
	}
	var got []kv
	for _, r := range again {
		if r.value != nil {
			got = append(got, r)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("re-encoded records differ:\n got %x\nwant %x", got, want)
	}
	b := cg.Member("b")
	if b.State != 1 || b.Revoking.Len() != 1 || b.Regex != "t.*" {
		t.Fatalf("member b: %+v", b)
	}
}

func replayCoordinator() *Coordinator {
	return &Coordinator{cfg: DefaultConfig().Groups, sched: frozenScheduler{}, groups: map[string]*Group{}, eng: &Engine{logger: slog.New(slog.DiscardHandler)}}
}

// TestDeletedConsumerGroupStaysDeleted: a deleted group's tombstones, in
// either order, leave no group on replay (tombstones of a group that is
// gone used to create it again, empty).
func TestDeletedConsumerGroupStaysDeleted(t *testing.T) {
	c := replayCoordinator()
	recs := sampleConsumerRecords()
	// The members leave: their tombstones.
	for _, id := range []string{"a", "b"} {
		for _, typ := range []int16{recConsumerCurrent, recConsumerTarget, recConsumerMember} {
			recs = append(recs, kv{key: consumerKey{typ: typ, group: "g", member: id}.append(nil)})
		}
	}
	// DeleteGroup's records, the classic tombstone first (as an older
	// DeleteGroup wrote them): the consumer tombstones then meet no group.
	recs = append(recs, kv{key: (&kmsg.GroupMetadataKey{Version: 2, Group: "g"}).AppendTo(nil)})
	for _, typ := range []int16{recConsumerTargetMD, recConsumerGroup} {
		recs = append(recs, kv{key: consumerKey{typ: typ, group: "g"}.append(nil)})
	}
	for _, r := range recs {
		if _, err := c.apply(r.key, r.value); err != nil {
			t.Fatalf("apply %x: %v", r.key, err)
		}
	}
	c.finishConsumerLoads(0)
	if g := c.group("g", false); g != nil {
		t.Fatalf("a deleted group came back on replay: consumer %v", g.consumer != nil)
	}
}

// TestEmptyClassicGenerationKeepsConsumerState: the classic group's last
// write (an empty generation) may land after the consumer protocol's
// first records; replayed in that order, the consumer state stays. A
// classic generation with members does end it.
func TestEmptyClassicGenerationKeepsConsumerState(t *testing.T) {
	c := replayCoordinator()
	for _, r := range sampleConsumerRecords() {
		if _, err := c.apply(r.key, r.value); err != nil {
			t.Fatal(err)
		}
	}
	gk := (&kmsg.GroupMetadataKey{Version: 2, Group: "g"}).AppendTo(nil)
	empty := kmsg.GroupMetadataValue{Version: 3, ProtocolType: "consumer", Generation: 4}
	if _, err := c.apply(gk, empty.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	c.finishConsumerLoads(0)
	g := c.group("g", false)
	if g == nil || g.consumer == nil || len(g.consumer.Members()) != 2 {
		t.Fatal("an empty classic generation replayed after consumer records wiped the consumer state")
	}
	withMember := empty
	withMember.Generation = 5
	withMember.Members = []kmsg.GroupMetadataValueMember{{MemberID: "m1", ClientID: "c", ClientHost: "h", SessionTimeoutMillis: 30000, RebalanceTimeoutMillis: 30000, Subscription: []byte{}, Assignment: []byte{}}}
	if _, err := c.apply(gk, withMember.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	if g := c.group("g", false); g.consumer != nil {
		t.Fatal("a classic generation with members did not end the consumer state")
	}
}
