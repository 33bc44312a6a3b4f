package cluster

import (
	"slices"
	"testing"

	"github.com/ringlog/ringlog/metadata"
)

// electionChanges keeps every partition led by a live in-sync replica:
// a fenced leader is replaced by the first live ISR member in replica
// order (the leader epoch grows), fenced members leave the ISR, and a
// partition with no live ISR member loses its leader but keeps its ISR.
func TestElectionChanges(t *testing.T) {
	img := metadata.NewImage()
	idx := uint64(0)
	apply := func(rec metadata.Record) {
		t.Helper()
		idx++
		var res metadata.Result
		img, res = img.Apply(idx, rec)
		if res.Err != nil {
			t.Fatalf("%s: %v", rec.Kind(), res.Err)
		}
	}
	apply(metadata.InitCluster{ClusterID: "c1"})
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		apply(metadata.RegisterBroker{ID: id, Incarnation: metadata.NewUUID(), KafkaAddr: "127.0.0.1:" + string(rune('0'+id)) + "000"})
		epochs[id] = int64(idx)
		apply(metadata.UnfenceBroker{ID: id, Epoch: epochs[id]})
	}
	tid := metadata.NewUUID()
	apply(metadata.CreateTopic{Name: "t", ID: tid, Replicas: [][]int32{{1, 2, 3}, {2, 3, 1}, {1, 3, 2}}})
	apply(metadata.ChangePartition{TopicID: tid, Partition: 2, ExpectedPartitionEpoch: 0, ISR: []int32{1, 3}})
	if ch := electionChanges(img); len(ch) != 0 {
		t.Fatalf("changes %v with every broker live", ch)
	}
	apply(metadata.FenceBroker{ID: 1, Epoch: epochs[1]})
	apply(metadata.FenceBroker{ID: 3, Epoch: epochs[3]})
	apply(metadata.Batch{Records: electionChanges(img)})
	ps := img.Topic("t").Partitions
	want := []struct {
		leader int32
		isr    []int32
		epoch  int32
	}{
		{2, []int32{2}, 1},                    // leader 1 fenced: 2, the first live ISR member
		{2, []int32{2}, 0},                    // leader 2 live: only the ISR shrinks
		{metadata.NoLeader, []int32{1, 3}, 1}, // no live ISR member: offline, ISR kept
	}
	for i, w := range want {
		if p := ps[i]; p.Leader != w.leader || !slices.Equal(p.ISR, w.isr) || p.LeaderEpoch != w.epoch {
			t.Errorf("t-%d: leader %d epoch %d ISR %v, want %d, %d, %v", i, p.Leader, p.LeaderEpoch, p.ISR, w.leader, w.epoch, w.isr)
		}
	}
	// Broker 3 returns: the offline partition gets it back as leader.
	apply(metadata.UnfenceBroker{ID: 3, Epoch: epochs[3]})
	apply(metadata.Batch{Records: electionChanges(img)})
	if p := img.Topic("t").Partitions[2]; p.Leader != 3 || !slices.Equal(p.ISR, []int32{3}) {
		t.Errorf("t-2 after broker 3 returned: leader %d ISR %v, want 3, [3]", p.Leader, p.ISR)
	}
	if ch := electionChanges(img); len(ch) != 0 {
		t.Errorf("changes %v once every partition has a live leader and no fenced ISR member", ch)
	}
}
