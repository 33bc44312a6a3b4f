package consumergroup

import (
	"slices"
	"sort"
)

// Subscriber is one member as an assignor sees it.
type Subscriber struct {
	ID      string
	Rack    string
	Topics  []string   // sorted, resolved subscription
	Current Assignment // its previous target (for stickiness)
}

// assignFunc computes every member's target assignment.
type assignFunc func(subs []Subscriber, topics Topics) map[string]Assignment

// assignors are the server-side assignors by name.
var assignors = map[string]assignFunc{
	"uniform": assignUniform,
	"range":   assignRange,
}

type part struct {
	topic TopicID
	name  string
	p     int32
}

// byMemberID is the indexes of subs in member id order.
func byMemberID(subs []Subscriber) []int {
	order := make([]int, len(subs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return subs[order[a]].ID < subs[order[b]].ID })
	return order
}

// subscribedTopics returns, for every subscribed topic that exists, its id
// and partition count, and who subscribes to it (sorted by member id).
func subscribedTopics(subs []Subscriber, topics Topics) (names []string, ids map[string]TopicID, counts map[string]int32, who map[string][]int) {
	ids, counts, who = map[string]TopicID{}, map[string]int32{}, map[string][]int{}
	for _, i := range byMemberID(subs) {
		for _, t := range subs[i].Topics {
			if _, seen := ids[t]; !seen {
				id, n, ok := topics.ByName(t)
				if !ok || n <= 0 {
					continue
				}
				ids[t], counts[t] = id, n
				names = append(names, t)
			}
			who[t] = append(who[t], i)
		}
	}
	slices.Sort(names)
	return names, ids, counts, who
}

// assignRange gives each member, topic by topic, a contiguous range of
// the topic's partitions (members in id order, the first ones one more
// when the count does not divide): co-partitioned topics are assigned
// alike.
func assignRange(subs []Subscriber, topics Topics) map[string]Assignment {
	out := make(map[string]Assignment, len(subs))
	for _, s := range subs {
		out[s.ID] = Assignment{}
	}
	names, ids, counts, who := subscribedTopics(subs, topics)
	for _, t := range names {
		members, n := who[t], counts[t]
		k := int32(len(members))
		per, extra := n/k, n%k
		next := int32(0)
		for j, i := range members {
			size := per
			if int32(j) < extra {
				size++
			}
			for p := next; p < next+size; p++ {
				a := out[subs[i].ID]
				a[ids[t]] = append(a[ids[t]], p)
			}
			next += size
		}
	}
	return out
}

// assignUniform spreads the partitions as evenly as the subscriptions
// allow and keeps each partition where it was when it can: first every
// member keeps the partitions of its previous target that it still
// subscribes to, then the rest go to the eligible member with the fewest,
// then partitions move from a member with two more than an eligible other
// until none can.
func assignUniform(subs []Subscriber, topics Topics) map[string]Assignment {
	names, ids, counts, who := subscribedTopics(subs, topics)
	owner := map[part]int{}
	count := make([]int, len(subs))
	eligible := func(i int, name string) bool {
		_, ok := slices.BinarySearch(subs[i].Topics, name)
		return ok
	}
	byID := map[TopicID]string{}
	for _, t := range names {
		byID[ids[t]] = t
	}
	// 1. Stickiness.
	for _, i := range byMemberID(subs) {
		for id, ps := range subs[i].Current {
			name, ok := byID[id]
			if !ok || !eligible(i, name) {
				continue
			}
			for _, p := range ps {
				k := part{id, name, p}
				if _, taken := owner[k]; taken || p >= counts[name] {
					continue
				}
				owner[k] = i
				count[i]++
			}
		}
	}
	// 2. The rest, to the eligible member with the fewest.
	for _, t := range names {
		for p := int32(0); p < counts[t]; p++ {
			k := part{ids[t], t, p}
			if _, ok := owner[k]; ok {
				continue
			}
			best := -1
			for _, i := range who[t] {
				if best < 0 || count[i] < count[best] {
					best = i
				}
			}
			owner[k] = best
			count[best]++
		}
	}
	// 3. Balance: move a partition from a member to an eligible one with
	// at least two fewer, until no move is possible. Each move lowers the
	// sum of squared counts, so this ends.
	parts := make([]part, 0, len(owner))
	for k := range owner {
		parts = append(parts, k)
	}
	sort.Slice(parts, func(a, b int) bool {
		if parts[a].name != parts[b].name {
			return parts[a].name > parts[b].name
		}
		return parts[a].p > parts[b].p // move the highest partitions first
	})
	for moved := true; moved; {
		moved = false
		for _, k := range parts {
			from := owner[k]
			to := -1
			for _, i := range who[k.name] {
				if count[i]+1 < count[from] && (to < 0 || count[i] < count[to]) {
					to = i
				}
			}
			if to >= 0 {
				owner[k] = to
				count[from]--
				count[to]++
				moved = true
			}
		}
	}
	out := make(map[string]Assignment, len(subs))
	for _, s := range subs {
		out[s.ID] = Assignment{}
	}
	for k, i := range owner {
		a := out[subs[i].ID]
		a[k.topic] = append(a[k.topic], k.p)
	}
	for id, a := range out {
		out[id] = Normalize(a)
	}
	return out
}
