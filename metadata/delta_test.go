package metadata

import (
	"testing"
)

func TestDiff(t *testing.T) {
	img := cluster(t, 3, 0)
	img, a := createTopic(t, img, "a", 2, 3)
	img, b := createTopic(t, img, "b", 1, 1)
	old := img

	p1 := a.Partitions[1]
	newLeader := p1.Replicas[1]
	img, _ = step(t, img, ChangePartition{TopicID: a.ID, Partition: 1, Leader: new(int32(newLeader)), ISR: p1.Replicas[1:]})
	img, _ = step(t, img, CreatePartitions{Name: "a", Replicas: [][]int32{{1, 2, 3}}})
	img, _ = step(t, img, DeleteTopic{Name: "b"})
	img, _ = step(t, img, CreateTopic{Name: "b", ID: NewUUID(), Replicas: [][]int32{{2}}})
	img, _ = step(t, img, AlterConfigs{Type: ConfigTopic, Name: "a", Ops: []ConfigOp{{Key: "k", Value: "v"}}})
	img, _ = step(t, img, AlterConfigs{Type: ConfigBroker, Ops: []ConfigOp{{Key: "k", Value: "v"}}})
	img, _ = step(t, img, FenceBroker{ID: 3, Epoch: mustBroker(t, img, 3).Epoch})
	img, _ = step(t, img, RegisterBroker{ID: 4, Incarnation: UUID{4}, KafkaAddr: "h:4"})

	d := Diff(old, img)
	if len(d.Brokers) != 2 || d.Brokers[0].New.ID != 3 || d.Brokers[0].Old == nil || d.Brokers[0].Old.Fenced || !d.Brokers[0].New.Fenced ||
		d.Brokers[1].New.ID != 4 || d.Brokers[1].Old != nil {
		t.Fatalf("brokers %+v", d.Brokers)
	}
	if len(d.DeletedTopics) != 1 || d.DeletedTopics[0] != b {
		t.Fatalf("deleted %+v", d.DeletedTopics)
	}
	if len(d.CreatedTopics) != 1 || d.CreatedTopics[0].Name != "b" || d.CreatedTopics[0].ID == b.ID {
		t.Fatalf("created %+v", d.CreatedTopics)
	}
	if len(d.TopicConfigs) != 1 || d.TopicConfigs[0].Name != "a" || !d.BrokerConfigs || d.ClusterID {
		t.Fatalf("configs %+v %v", d.TopicConfigs, d.BrokerConfigs)
	}
	// a-1 changed, a-2 is new, new b-0 is new; a-0 is unchanged.
	want := []struct {
		topic string
		part  int32
		isNew bool
	}{{"a", 1, false}, {"a", 2, true}, {"b", 0, true}}
	if len(d.Partitions) != len(want) {
		t.Fatalf("partitions %+v", d.Partitions)
	}
	for i, w := range want {
		pc := d.Partitions[i]
		if pc.Topic.Name != w.topic || pc.Partition != w.part || (pc.Old == nil) != w.isNew {
			t.Fatalf("partition change %d: %+v, want %+v", i, pc, w)
		}
	}
	pc := d.Partitions[0]
	if RoleOf(pc.Old, p1.Replicas[0]) != Leader || RoleOf(pc.New, p1.Replicas[0]) != Follower || RoleOf(pc.New, 99) != NotReplica ||
		RoleOf(pc.New, newLeader) != Leader || RoleOf(pc.New, p1.Replicas[2]) != Follower || RoleOf(nil, 1) != NotReplica {
		t.Fatal("roles wrong")
	}
	if e := Diff(img, img); !e.Empty() {
		t.Fatalf("diff of an image with itself: %+v", e)
	}
	// A restored copy (no shared pointers) diffs as empty too.
	restored, err := DecodeImage(EncodeImage(img))
	if err != nil {
		t.Fatal(err)
	}
	if e := Diff(img, restored); !e.Empty() {
		t.Fatalf("diff with a restored copy: %+v", e)
	}
}
