package metadata

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestPlaceReplicas(t *testing.T) {
	img := cluster(t, 5, 1) // brokers 1-5 live, 6 fenced
	for _, rf := range []int{1, 2, 3, 5} {
		assign, err := PlaceReplicas(img, 0, 20, rf)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := PlaceReplicas(img, 0, 20, rf)
		if !reflect.DeepEqual(assign, again) {
			t.Fatal("placement is not deterministic")
		}
		leaders := map[int32]int{}
		pairs := map[[2]int32]bool{}
		for p, reps := range assign {
			if len(reps) != rf {
				t.Fatalf("rf %d: partition %d has %v", rf, p, reps)
			}
			for j, id := range reps {
				if id < 1 || id > 5 {
					t.Fatalf("rf %d: partition %d placed on broker %d (fenced or unknown)", rf, p, id)
				}
				if contains(reps[:j], id) {
					t.Fatalf("rf %d: partition %d has %v: duplicate", rf, p, reps)
				}
			}
			leaders[reps[0]]++
			if rf > 1 {
				pairs[[2]int32{reps[0], reps[1]}] = true
			}
			// Leaders go round-robin.
			if p > 0 && reps[0] != assign[p-1][0]%5+1 {
				t.Fatalf("rf %d: leader of %d is %d after %d", rf, p, reps[0], assign[p-1][0])
			}
		}
		for id := int32(1); id <= 5; id++ {
			if leaders[id] != 4 {
				t.Fatalf("rf %d: broker %d leads %d of 20 partitions, want 4", rf, id, leaders[id])
			}
		}
		// The shift varies the first follower once the leaders wrap.
		if rf > 1 && rf < 5 && len(pairs) <= 5 {
			t.Fatalf("rf %d: only %d (leader, first follower) pairs", rf, len(pairs))
		}
		if _, err := PlaceReplicas(img, 0, 1, rf); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		first, count, rf int
		code             *kerr.Error
	}{
		{0, 1, 6, kerr.InvalidReplicationFactor},
		{0, 1, 0, kerr.InvalidReplicationFactor},
		{0, 0, 1, kerr.InvalidPartitions},
		{MaxPartitions, 1, 1, kerr.InvalidPartitions},
	} {
		if _, err := PlaceReplicas(img, c.first, c.count, c.rf); !errors.Is(err, c.code) {
			t.Errorf("%+v: err %v, want %s", c, err, c.code.Message)
		}
	}
}

func TestPlaceReplicasStartsWithLeastLoaded(t *testing.T) {
	img := cluster(t, 3, 0)
	img, a := createTopic(t, img, "a", 2, 1) // leaders 1, 2
	if a.Partitions[0].Leader != 1 || a.Partitions[1].Leader != 2 {
		t.Fatalf("leaders %d %d", a.Partitions[0].Leader, a.Partitions[1].Leader)
	}
	_, b := createTopic(t, img, "b", 2, 1) // broker 3 leads nothing: starts there
	if b.Partitions[0].Leader != 3 || b.Partitions[1].Leader != 1 {
		t.Fatalf("leaders %d %d, want 3 1", b.Partitions[0].Leader, b.Partitions[1].Leader)
	}
	// The assignment is accepted by CreateTopic as is.
	assign, err := PlaceReplicas(img, 0, 7, 3)
	if err != nil {
		t.Fatal(err)
	}
	step(t, img, CreateTopic{Name: "c", ID: NewUUID(), Replicas: assign})
}

// With racks, every partition's replicas span as many racks as they can,
// leaders still spread evenly, and the placement is deterministic.
func TestPlaceReplicasAcrossRacks(t *testing.T) {
	img, _ := step(t, NewImage(), InitCluster{ClusterID: "racks"})
	racks := map[int32]string{1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
	for id := int32(1); id <= 6; id++ {
		var res Result
		img, res = step(t, img, RegisterBroker{ID: id, Incarnation: UUID{byte(id)}, KafkaAddr: fmt.Sprintf("h:%d", 9000+id), Rack: racks[id]})
		img, _ = step(t, img, UnfenceBroker{ID: id, Epoch: res.BrokerEpoch})
	}
	for _, rf := range []int{2, 3, 4} {
		assign, err := PlaceReplicas(img, 0, 12, rf)
		if err != nil {
			t.Fatal(err)
		}
		leaders := map[int32]int{}
		for p, reps := range assign {
			seen := map[string]bool{}
			for _, id := range reps {
				seen[racks[id]] = true
			}
			if want := min(rf, 3); len(seen) != want {
				t.Errorf("rf %d: partition %d on %v spans %d racks, want %d", rf, p, reps, len(seen), want)
			}
			if len(reps) != rf || len(map[int32]bool{reps[0]: true}) != 1 {
				t.Errorf("rf %d: partition %d: %v", rf, p, reps)
			}
			distinct := map[int32]bool{}
			for _, id := range reps {
				distinct[id] = true
			}
			if len(distinct) != rf {
				t.Errorf("rf %d: partition %d repeats a broker: %v", rf, p, reps)
			}
			leaders[reps[0]]++
		}
		for id, n := range leaders {
			if n != 2 {
				t.Errorf("rf %d: broker %d leads %d of 12 partitions, want 2", rf, id, n)
			}
		}
	}
}
