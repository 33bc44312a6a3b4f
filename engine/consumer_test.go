package engine

import (
	"log/slog"
	"reflect"
	"testing"
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
