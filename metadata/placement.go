package metadata

import (
	"slices"

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
// Every partition gets rf distinct brokers. rf < 1 or rf > n is
// INVALID_REPLICATION_FACTOR; count < 1 is INVALID_PARTITIONS.
//
// Racks (broker.rack): when live brokers name racks, the list b is
// ordered rack by rack in turn (the first broker of each rack, then the
// second of each, ...; brokers without a rack count as one rack), and
// each follower is the first broker from its position on whose rack the
// partition has no replica yet, as long as some rack has none: replicas
// span min(rf, racks) racks, and leaders still go round-robin.
func PlaceReplicas(img *Image, first, count, rf int) ([][]int32, error) {
	live := rackAlternated(img.LiveBrokers())
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
	racks := map[string]bool{}
	for _, b := range live {
		racks[b.Rack] = true
	}
	out := make([][]int32, count)
	for i := range out {
		leader := (s + i) % n
		shift := (i / n) % (n - rf + 1)
		reps := make([]int32, rf)
		reps[0] = live[leader].ID
		if len(racks) == 1 {
			for j := 1; j < rf; j++ {
				reps[j] = live[(leader+j+shift)%n].ID
			}
		} else {
			used := map[string]bool{live[leader].Rack: true}
			taken := map[int]bool{leader: true}
			for j := 1; j < rf; j++ {
				pick := -1
				for k := 0; k < n; k++ { // first a broker on a new rack
					at := (leader + j + shift + k) % n
					if !taken[at] && (!used[live[at].Rack] || len(used) == len(racks)) {
						pick = at
						break
					}
				}
				if pick < 0 { // (every rack used: any broker left)
					for k := 0; k < n && pick < 0; k++ {
						if at := (leader + j + shift + k) % n; !taken[at] {
							pick = at
						}
					}
				}
				taken[pick], used[live[pick].Rack] = true, true
				reps[j] = live[pick].ID
			}
		}
		out[i] = reps
	}
	return out, nil
}

// rackAlternated orders brokers (sorted by id) rack by rack in turn: the
// first of each rack (racks sorted by name), then the second of each, and
// so on. Without racks it is the list as it was.
func rackAlternated(brokers []Broker) []Broker {
	byRack := map[string][]Broker{}
	var names []string
	for _, b := range brokers {
		if _, ok := byRack[b.Rack]; !ok {
			names = append(names, b.Rack)
		}
		byRack[b.Rack] = append(byRack[b.Rack], b)
	}
	if len(names) <= 1 {
		return brokers
	}
	slices.Sort(names)
	out := make([]Broker, 0, len(brokers))
	for i := 0; len(out) < len(brokers); i++ {
		for _, r := range names {
			if i < len(byRack[r]) {
				out = append(out, byRack[r][i])
			}
		}
	}
	return out
}
