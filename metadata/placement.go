package metadata

import (
	"github.com/twmb/franz-go/pkg/kerr"
)

// PlaceReplicas assigns rf replicas to each of count new partitions
// numbered from first, over img's live (registered, unfenced) brokers, for
// CreateTopic (first 0) or CreatePartitions (first = the current count).
// It is deterministic: the same image and arguments give the same
// assignment.
//
// With the live brokers sorted by id as b[0..n), partition first+i is led
// by b[(s+i) mod n], where s is the live broker leading the fewest
// partitions in img (lowest id on ties), so leaders go round-robin and new
// topics fill in where leadership is thin. Its followers are the next rf-1
// brokers after the leader, skipped ahead by a shift that grows each time
// the leaders wrap around (i/n), so the same leader does not always pair
// with the same followers:
//
//	leader   = (s+i) mod n
//	follower = (leader + j + shift) mod n,  j = 1..rf-1,  shift = (i/n) mod (n-rf+1)
//
// Every partition gets rf distinct brokers. Racks are not considered.
// rf < 1 or rf > n is INVALID_REPLICATION_FACTOR; count < 1 is
// INVALID_PARTITIONS.
func PlaceReplicas(img *Image, first, count, rf int) ([][]int32, error) {
	live := img.LiveBrokers()
	n := len(live)
	if count < 1 || first < 0 || first+count > MaxPartitions {
		return nil, refuse(kerr.InvalidPartitions, "%d partitions from %d: use 1 to %d in all", count, first, MaxPartitions)
	}
	if rf < 1 {
		return nil, refuse(kerr.InvalidReplicationFactor, "replication factor %d is below 1", rf)
	}
	if rf > n {
		return nil, refuse(kerr.InvalidReplicationFactor, "replication factor %d is larger than the %d available (registered, unfenced) brokers", rf, n)
	}
	leads := make(map[int32]int, n)
	for _, t := range img.topics {
		for _, p := range t.Partitions {
			if p.Leader != NoLeader {
				leads[p.Leader]++
			}
		}
	}
	s := 0
	for i, b := range live {
		if leads[b.ID] < leads[live[s].ID] {
			s = i
		}
	}
	out := make([][]int32, count)
	for i := range out {
		leader := (s + i) % n
		shift := (i / n) % (n - rf + 1)
		reps := make([]int32, rf)
		reps[0] = live[leader].ID
		for j := 1; j < rf; j++ {
			reps[j] = live[(leader+j+shift)%n].ID
		}
		out[i] = reps
	}
	return out, nil
}
