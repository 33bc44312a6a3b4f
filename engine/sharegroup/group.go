package sharegroup

import (
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TopicID is a topic's 16-byte id.
type TopicID = [16]byte

// Topics is the coordinator's view of the cluster's topics.
type Topics interface {
	// ByName returns a topic's id and partition count.
	ByName(name string) (id TopicID, partitions int32, ok bool)
	// Version changes whenever a topic is created, deleted or grows.
	Version() uint64
}

// Assignment is a set of partitions by topic id, each list sorted.
type Assignment map[TopicID][]int32

// Len is the number of partitions.
func (a Assignment) Len() int {
	n := 0
	for _, ps := range a {
		n += len(ps)
	}
	return n
}

func (a Assignment) equal(b Assignment) bool {
	return maps.EqualFunc(a, b, slices.Equal[[]int32])
}

// SetConfig changes the settings (a group config was altered); they apply
// from the next heartbeat.
func (g *Group) SetConfig(cfg Config) { g.cfg = cfg }

// Config holds a share group's settings.
type Config struct {
	// SessionMillis: a member that does not heartbeat for this long is
	// removed (group.share.session.timeout.ms).
	SessionMillis int64
	// HeartbeatMillis is the interval members are told
	// (group.share.heartbeat.interval.ms).
	HeartbeatMillis int32
	// MaxSize bounds the members (group.share.max.size); 0 means none.
	MaxSize int
	// MaxMetadataBytes bounds the bytes of all members' subscriptions
	// (topic names); 0 means none.
	MaxMetadataBytes int
}

// The member epochs a request carries besides a member's own.
const (
	JoinEpoch  int32 = 0
	LeaveEpoch int32 = -1
)

// Request is one ShareGroupHeartbeat.
type Request struct {
	MemberID    string
	MemberEpoch int32
	Rack        *string
	// Topics is the subscription; nil means unchanged (required on join).
	Topics     []string
	ClientID   string
	ClientHost string
}

// Response is a heartbeat's answer.
type Response struct {
	MemberID        string
	MemberEpoch     int32
	HeartbeatMillis int32
	// Assignment is set when the member's assignment is new to it.
	Assignment Assignment
}

// Member is one member of a share group.
type Member struct {
	ID    string
	Epoch int32
	// prevEpoch is the epoch before the last one sent: a heartbeat whose
	// answer was lost still carries it.
	prevEpoch  int32
	ClientID   string
	ClientHost string
	Rack       *string
	// Topics is the subscription, sorted.
	Topics   []string
	Assigned Assignment
	deadline int64
}

// Group is a share group's membership and assignment.
type Group struct {
	cfg   Config
	epoch int32
	// subBytes is the bytes of all members' subscriptions.
	subBytes int
	members  map[string]*Member
	// dirty: membership or a subscription changed since the assignment
	// was computed; topicsVersion: the topics it was computed for.
	dirty         bool
	topicsVersion uint64
}

// New returns an empty share group.
func New(cfg Config) *Group {
	return &Group{cfg: cfg, members: map[string]*Member{}}
}

// Epoch is the group epoch.
func (g *Group) Epoch() int32 { return g.epoch }

// Empty reports whether the group has no member.
func (g *Group) Empty() bool { return len(g.members) == 0 }

// Members returns the members sorted by id.
func (g *Group) Members() []*Member {
	out := slices.Collect(maps.Values(g.members))
	slices.SortFunc(out, func(a, b *Member) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return out
}

// Member returns a member by id.
func (g *Group) Member(id string) *Member { return g.members[id] }

// IsMember reports whether id is a member (a share fetch checks it).
func (g *Group) IsMember(id string) bool { return g.members[id] != nil }

// State is Kafka's share group state: Empty or Stable.
func (g *Group) State() string {
	if len(g.members) == 0 {
		return "Empty"
	}
	return "Stable"
}

// Heartbeat applies one heartbeat at now (unix ms).
func (g *Group) Heartbeat(now int64, topics Topics, req Request) (Response, error) {
	if req.MemberID == "" {
		return Response{}, fmt.Errorf("%w: a share group member id must be set by the client", kerr.InvalidRequest)
	}
	m := g.members[req.MemberID]
	switch {
	case req.MemberEpoch == LeaveEpoch:
		if m != nil {
			g.remove(m)
			g.assign(topics)
		}
		return Response{MemberID: req.MemberID, MemberEpoch: LeaveEpoch}, nil
	case req.MemberEpoch == JoinEpoch:
		if m == nil {
			if req.Topics == nil {
				return Response{}, fmt.Errorf("%w: a joining member must send its subscribed topics", kerr.InvalidRequest)
			}
			if g.cfg.MaxSize > 0 && len(g.members) >= g.cfg.MaxSize {
				return Response{}, fmt.Errorf("%w: the share group has %d members", kerr.GroupMaxSizeReached, len(g.members))
			}
			m = &Member{ID: req.MemberID}
			g.members[m.ID] = m
			g.dirty = true
		}
		m.Epoch, m.prevEpoch = 0, 0 // a join gets the assignment again
	case m == nil:
		return Response{}, fmt.Errorf("%w: %s is not a member of the share group", kerr.UnknownMemberID, req.MemberID)
	case req.MemberEpoch != m.Epoch && req.MemberEpoch != m.prevEpoch:
		return Response{}, fmt.Errorf("%w: member epoch %d, the member is at %d", kerr.FencedMemberEpoch, req.MemberEpoch, m.Epoch)
	}
	m.ClientID, m.ClientHost, m.Rack = req.ClientID, req.ClientHost, req.Rack
	m.deadline = now + g.cfg.SessionMillis
	if req.Topics != nil {
		subs := slices.Compact(slices.Sorted(slices.Values(req.Topics)))
		if !slices.Equal(subs, m.Topics) {
			grow := namesBytes(subs) - namesBytes(m.Topics)
			if g.cfg.MaxMetadataBytes > 0 && g.subBytes+grow > g.cfg.MaxMetadataBytes {
				if m.Epoch == 0 && m.Topics == nil {
					delete(g.members, m.ID) // the join did not happen
				}
				return Response{}, fmt.Errorf("%w: the share group's subscriptions would hold %d bytes, more than %d", kerr.GroupMaxSizeReached, g.subBytes+grow, g.cfg.MaxMetadataBytes)
			}
			g.subBytes += grow
			m.Topics = subs
			g.dirty = true
		}
	}
	g.assign(topics)
	resp := Response{MemberID: m.ID, MemberEpoch: g.epoch, HeartbeatMillis: g.cfg.HeartbeatMillis}
	if req.MemberEpoch != g.epoch || m.Epoch != g.epoch {
		m.prevEpoch, m.Epoch = m.Epoch, g.epoch
		resp.Assignment = m.Assigned
		if resp.Assignment == nil {
			resp.Assignment = Assignment{}
		}
	}
	return resp, nil
}

// Expire removes the members whose session passed.
func (g *Group) Expire(now int64, topics Topics) (removed []string) {
	for id, m := range g.members {
		if m.deadline <= now {
			g.remove(m)
			removed = append(removed, id)
		}
	}
	if len(removed) > 0 {
		g.dirty = true
		g.assign(topics)
	}
	return removed
}

func (g *Group) remove(m *Member) {
	delete(g.members, m.ID)
	g.subBytes -= namesBytes(m.Topics)
	g.dirty = true
}

func namesBytes(names []string) int {
	n := 0
	for _, s := range names {
		n += len(s) + 2
	}
	return n
}

// NextDeadline is the earliest session deadline, 0 with no member.
func (g *Group) NextDeadline() int64 {
	var d int64
	for _, m := range g.members {
		if d == 0 || m.deadline < d {
			d = m.deadline
		}
	}
	return d
}

// SubscribedTopics returns the union of the subscriptions, sorted.
func (g *Group) SubscribedTopics() []string {
	var out []string
	for _, m := range g.members {
		out = append(out, m.Topics...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// assign computes the assignment again when membership, a subscription or
// the topics changed, and moves the group epoch when it differs. Per
// topic, with its subscribers sorted by id: fewer subscribers than
// partitions get the partitions round-robin (each partition one member);
// more subscribers share them round-robin (each member one partition,
// each partition at least one member).
func (g *Group) assign(topics Topics) {
	if v := topics.Version(); !g.dirty && v == g.topicsVersion {
		return
	}
	g.topicsVersion, g.dirty = topics.Version(), false
	next := map[string]Assignment{}
	bySub := map[string][]string{}
	for _, m := range g.Members() {
		next[m.ID] = Assignment{}
		for _, t := range m.Topics {
			bySub[t] = append(bySub[t], m.ID)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(bySub)) {
		id, n, ok := topics.ByName(name)
		if !ok || n <= 0 {
			continue
		}
		subs := bySub[name]
		if len(subs) <= int(n) {
			for p := int32(0); p < n; p++ {
				a := next[subs[int(p)%len(subs)]]
				a[id] = append(a[id], p)
			}
			continue
		}
		for i, mid := range subs {
			a := next[mid]
			a[id] = append(a[id], int32(i%int(n)))
		}
	}
	changed := false
	for id, m := range g.members {
		if !m.Assigned.equal(next[id]) {
			m.Assigned = next[id]
			changed = true
		}
	}
	if changed || g.epoch == 0 {
		g.epoch++ // the assignment's epoch: it is computed at once
	}
}
