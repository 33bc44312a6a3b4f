package metadata

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// SetRemoteLog is written by the leader alone, at its epoch, one version
// after the other, and never changes the partition's epochs.
func TestSetRemoteLog(t *testing.T) {
	img := cluster(t, 3, 0)
	id := UUID{9}
	img, _ = step(t, img, CreateTopic{Name: "t", ID: id, Replicas: [][]int32{{1, 2, 3}}})
	b1, b2 := mustBroker(t, img, 1), mustBroker(t, img, 2)
	leader := BrokerEpoch{ID: 1, Epoch: b1.Epoch}
	rec := func(v int64, m string) SetRemoteLog {
		return SetRemoteLog{TopicID: id, Requester: leader, LeaderEpoch: 0, Version: v, Manifest: []byte(m)}
	}
	img, _ = step(t, img, rec(1, "one"))
	img, _ = step(t, img, rec(2, "two"))
	p := img.Topic("t").Partitions[0]
	if p.RemoteLogVersion != 2 || string(p.RemoteLog) != "two" || p.PartitionEpoch != 0 || p.LeaderEpoch != 0 {
		t.Fatalf("after two writes: %+v", p)
	}
	refused(t, img, rec(2, "again"), kerr.InvalidUpdateVersion) // another write at the current version
	if same, _ := step(t, img, rec(2, "two")); same.Hash() != img.Hash() {
		t.Fatal("the same write again changed the image") // sent again after a lost answer
	}
	refused(t, img, rec(4, "gap"), kerr.InvalidUpdateVersion)
	refused(t, img, SetRemoteLog{TopicID: id, Requester: BrokerEpoch{ID: 2, Epoch: b2.Epoch}, Version: 3}, kerr.NotLeaderForPartition)
	refused(t, img, SetRemoteLog{TopicID: id, Requester: BrokerEpoch{ID: 1, Epoch: b1.Epoch + 1}, Version: 3}, kerr.StaleBrokerEpoch)
	refused(t, img, SetRemoteLog{TopicID: id, Requester: BrokerEpoch{ID: 8}, Version: 3}, kerr.BrokerIDNotRegistered)
	refused(t, img, SetRemoteLog{TopicID: id, Requester: leader, LeaderEpoch: 1, Version: 3}, kerr.UnknownLeaderEpoch)
	refused(t, img, SetRemoteLog{TopicID: UUID{8}, Requester: leader, Version: 3}, kerr.UnknownTopicID)
	refused(t, img, SetRemoteLog{TopicID: id, Partition: 1, Requester: leader, Version: 3}, kerr.UnknownTopicOrPartition)
	refused(t, img, rec(3, string(bytes.Repeat([]byte{'x'}, MaxRemoteLog+1))), kerr.InvalidRequest)

	// A new leader: the old one is fenced by epoch, the new one goes on
	// from the version it finds.
	img, _ = step(t, img, ChangePartition{TopicID: id, ExpectedPartitionEpoch: 0, Leader: new(int32(2))})
	refused(t, img, rec(3, "stale"), kerr.NotLeaderForPartition)
	img, _ = step(t, img, SetRemoteLog{TopicID: id, Requester: BrokerEpoch{ID: 2, Epoch: b2.Epoch}, LeaderEpoch: 1, Version: 3, Manifest: []byte("three")})
	refused(t, img, SetRemoteLog{TopicID: id, Requester: BrokerEpoch{ID: 2, Epoch: b2.Epoch}, LeaderEpoch: 0, Version: 4}, kerr.FencedLeaderEpoch)
	// A leadership change keeps the manifest.
	img, _ = step(t, img, ChangePartition{TopicID: id, ExpectedPartitionEpoch: 1, Leader: new(int32(3))})
	if p := img.Topic("t").Partitions[0]; p.RemoteLogVersion != 3 || string(p.RemoteLog) != "three" {
		t.Fatalf("after a leader change: %+v", p)
	}
	if err := checkSnapshot(img); err != nil {
		t.Fatal(err)
	}
}
