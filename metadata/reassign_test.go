package metadata

import (
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestReassignPartition walks one partition through a move: the target
// is written first, the adding replicas join the ISR through the
// leader's ChangePartitions, and the one that completes the set finishes
// the move in the same record, moving the leadership off a removed
// leader.
func TestReassignPartition(t *testing.T) {
	img := cluster(t, 5, 0)
	id := UUID{7}
	img, _ = step(t, img, CreateTopic{Name: "t", ID: id, Replicas: [][]int32{{1, 2, 3}}})
	part := func(img *Image) Partition { return img.Topic("t").Partitions[0] }

	img, _ = step(t, img, ReassignPartition{TopicID: id, Target: []int32{4, 2, 5}})
	p := part(img)
	if !reflect.DeepEqual(p.Replicas, []int32{4, 2, 5, 1, 3}) || !reflect.DeepEqual(p.AddingReplicas, []int32{4, 5}) ||
		!reflect.DeepEqual(p.RemovingReplicas, []int32{1, 3}) || p.Leader != 1 || p.PartitionEpoch != 1 || p.LeaderEpoch != 0 {
		t.Fatalf("after the start: %+v", p)
	}
	if !reflect.DeepEqual(p.TargetReplicas(), []int32{4, 2, 5}) || !reflect.DeepEqual(p.OriginalReplicas(), []int32{2, 1, 3}) {
		t.Fatalf("target %v original %v", p.TargetReplicas(), p.OriginalReplicas())
	}
	if RoleOf(&p, 4) != Follower || RoleOf(&p, 1) != Leader {
		t.Fatal("an adding replica must follow and the old leader lead until the move completes")
	}
	b1 := mustBroker(t, img, 1)
	ask := func(img *Image, isr ...int32) *Image {
		p := part(img)
		img, _ = step(t, img, ChangePartition{TopicID: id, ExpectedPartitionEpoch: p.PartitionEpoch, LeaderEpoch: new(p.LeaderEpoch),
			Requester: &BrokerEpoch{ID: 1, Epoch: b1.Epoch}, ISR: isr})
		return img
	}
	img = ask(img, 1, 2, 3, 4)
	if p := part(img); !p.Reassigning() || len(p.ISR) != 4 {
		t.Fatalf("one adding replica in sync must not complete the move: %+v", p)
	}
	img = ask(img, 1, 2, 3, 4, 5)
	p = part(img)
	if p.Reassigning() || !reflect.DeepEqual(p.Replicas, []int32{4, 2, 5}) || !reflect.DeepEqual(p.ISR, []int32{2, 4, 5}) ||
		p.Leader != 4 || p.LeaderEpoch != 1 {
		t.Fatalf("after the last adding replica joined: %+v", p)
	}
	if RoleOf(&p, 1) != NotReplica {
		t.Fatal("the removed replica is still one")
	}
	if err := checkSnapshot(img); err != nil {
		t.Fatal(err)
	}
}

func TestReassignPartitionCancelAndReplace(t *testing.T) {
	img := cluster(t, 5, 0)
	id := UUID{8}
	img, _ = step(t, img, CreateTopic{Name: "t", ID: id, Replicas: [][]int32{{1, 2, 3}}})
	part := func(img *Image) Partition { return img.Topic("t").Partitions[0] }
	refused(t, img, ReassignPartition{TopicID: id}, kerr.NoReassignmentInProgress)

	img, _ = step(t, img, ReassignPartition{TopicID: id, Target: []int32{1, 2, 4}})
	// A replacement starts from the original replicas, not from the
	// move in progress: 4 is no longer added.
	img, _ = step(t, img, ReassignPartition{TopicID: id, Target: []int32{1, 2, 5}})
	if p := part(img); !reflect.DeepEqual(p.Replicas, []int32{1, 2, 5, 3}) || !reflect.DeepEqual(p.AddingReplicas, []int32{5}) ||
		!reflect.DeepEqual(p.RemovingReplicas, []int32{3}) {
		t.Fatalf("after the replacement: %+v", p)
	}
	img, _ = step(t, img, ReassignPartition{TopicID: id})
	if p := part(img); p.Reassigning() || !reflect.DeepEqual(p.Replicas, []int32{1, 2, 3}) || !reflect.DeepEqual(p.ISR, []int32{1, 2, 3}) || p.Leader != 1 {
		t.Fatalf("after the cancel: %+v", p)
	}

	// A reorder of the replicas (no broker added) completes at once.
	img, _ = step(t, img, ReassignPartition{TopicID: id, Target: []int32{3, 1, 2}})
	if p := part(img); p.Reassigning() || !reflect.DeepEqual(p.Replicas, []int32{3, 1, 2}) || p.Leader != 1 {
		t.Fatalf("after a reorder: %+v", p)
	}
	// Shrinking to replicas in the ISR completes at once too, moving the
	// leader off a removed one.
	img, _ = step(t, img, ReassignPartition{TopicID: id, Target: []int32{2}})
	if p := part(img); p.Reassigning() || !reflect.DeepEqual(p.Replicas, []int32{2}) || !reflect.DeepEqual(p.ISR, []int32{2}) || p.Leader != 2 {
		t.Fatalf("after a shrink: %+v", p)
	}

	refused(t, img, ReassignPartition{TopicID: id, Target: []int32{}}, kerr.InvalidReplicaAssignment)
	refused(t, img, ReassignPartition{TopicID: id, Target: []int32{2, 2}}, kerr.InvalidReplicaAssignment)
	refused(t, img, ReassignPartition{TopicID: id, Target: []int32{2, 9}}, kerr.InvalidReplicaAssignment)
	refused(t, img, ReassignPartition{TopicID: id, Partition: 1, Target: []int32{2}}, kerr.UnknownTopicOrPartition)
	refused(t, img, ReassignPartition{TopicID: UUID{9}, Target: []int32{2}}, kerr.UnknownTopicID)
	if err := checkSnapshot(img); err != nil {
		t.Fatal(err)
	}
}

// TestReassignKeepsAnISR: a cancel that drops an in-sync leader (an
// adding replica) elects a live original one; a move or cancel that
// would leave no in-sync replica is refused.
func TestReassignKeepsAnISR(t *testing.T) {
	img := cluster(t, 4, 0)
	id := UUID{9}
	img, _ = step(t, img, CreateTopic{Name: "t", ID: id, Replicas: [][]int32{{1, 2}}})
	img, _ = step(t, img, ReassignPartition{TopicID: id, Target: []int32{3, 4}})
	p := img.Topic("t").Partitions[0]
	// 3 catches up and joins; then the move is replaced by one that
	// keeps only 3 and 4: 3 is the only in-sync replica left, and leads.
	b1 := mustBroker(t, img, 1)
	img, _ = step(t, img, ChangePartition{TopicID: id, ExpectedPartitionEpoch: p.PartitionEpoch, LeaderEpoch: new(p.LeaderEpoch),
		Requester: &BrokerEpoch{ID: 1, Epoch: b1.Epoch}, ISR: []int32{1, 2, 3}})
	img, _ = step(t, img, ChangePartition{TopicID: id, ExpectedPartitionEpoch: img.Topic("t").Partitions[0].PartitionEpoch,
		Leader: new(int32(3))})
	cancelled, _ := step(t, img, ReassignPartition{TopicID: id})
	if p := cancelled.Topic("t").Partitions[0]; p.Leader != 1 || !reflect.DeepEqual(p.ISR, []int32{1, 2}) || p.Reassigning() || p.LeaderEpoch != 2 {
		t.Fatalf("cancelling a move led by an adding replica: %+v", p)
	}
	// With 3 alone in sync, neither a move to 4 nor a cancel leaves an
	// in-sync replica.
	img, _ = step(t, img, ChangePartition{TopicID: id, ExpectedPartitionEpoch: img.Topic("t").Partitions[0].PartitionEpoch, ISR: []int32{3}})
	refused(t, img, ReassignPartition{TopicID: id, Target: []int32{4}}, kerr.InvalidReplicaAssignment)
	refused(t, img, ReassignPartition{TopicID: id}, kerr.InvalidReplicaAssignment)
}

// checkSnapshot round-trips img through a snapshot (which checks the
// partition invariants) and compares hashes.
func checkSnapshot(img *Image) error {
	back, err := DecodeImage(EncodeImage(img))
	if err != nil {
		return err
	}
	if back.Hash() != img.Hash() {
		return errors.New("the snapshot's image hashes differently")
	}
	return nil
}

// UnregisterBroker takes only a fenced broker holding no replica; the id
// may register again.
func TestUnregisterBroker(t *testing.T) {
	img := cluster(t, 3, 1) // broker 4 fenced
	img, _ = step(t, img, CreateTopic{Name: "t", ID: UUID{5}, Replicas: [][]int32{{1, 2}}})
	b1, b4 := mustBroker(t, img, 1), mustBroker(t, img, 4)
	refused(t, img, UnregisterBroker{ID: 1, Epoch: b1.Epoch}, kerr.InvalidRequest) // live
	refused(t, img, UnregisterBroker{ID: 9}, kerr.BrokerIDNotRegistered)
	refused(t, img, UnregisterBroker{ID: 4, Epoch: b4.Epoch - 1}, kerr.StaleBrokerEpoch) // registered again since
	fenced, _ := step(t, img, FenceBroker{ID: 1, Epoch: b1.Epoch})
	refused(t, fenced, UnregisterBroker{ID: 1, Epoch: b1.Epoch}, kerr.InvalidRequest) // holds t-0
	img, _ = step(t, img, UnregisterBroker{ID: 4, Epoch: b4.Epoch})
	if _, ok := img.Broker(4); ok {
		t.Fatal("broker 4 still registered")
	}
	if err := checkSnapshot(img); err != nil {
		t.Fatal(err)
	}
	img, _ = step(t, img, RegisterBroker{ID: 4, Incarnation: UUID{44}, KafkaAddr: "h:4"})
	if _, ok := img.Broker(4); !ok {
		t.Fatal("broker 4 cannot register again")
	}
}
