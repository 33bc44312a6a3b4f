package consumergroup

import (
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Classic members in a consumer-protocol group: Kafka's online migration
// (group.consumer.migration.policy). While a group moves between the
// classic protocol and the consumer protocol, some members still speak
// the classic one (JoinGroup, SyncGroup, Heartbeat, LeaveGroup). They are
// members like the others: the coordinator computes their target and
// reconciles them towards it, but they learn their assignment only from
// a SyncGroup, so they are moved one rejoin at a time:
//
//   - JoinClassic is their JoinGroup. What their subscription says they
//     still own is what a consumer-protocol member reports in a
//     heartbeat: an eager member owns nothing at a rejoin (it revoked
//     everything first), a cooperative one what it kept. The answer is
//     immediate (no join barrier: nobody waits for anybody).
//   - SyncClassic answers with the member's current assignment; a
//     cooperative member drops what is not in it and rejoins.
//   - HeartbeatClassic says REBALANCE_IN_PROGRESS when the member should
//     rejoin: its epoch is behind the group's, it must revoke, or the
//     partitions it waits for are all free. A member told so that does
//     not rejoin within its rebalance timeout is removed (the same
//     deadline as a consumer-protocol member's revocation).
//   - Their session timeout is their own (the JoinGroup's), and a commit
//     with a stale generation gets ILLEGAL_GENERATION, as classic
//     clients expect.

// ClassicMeta is what a classic member told in its JoinGroup, beyond its
// subscription: it is kept (and persisted) so that the group can turn
// back into a classic group with it.
type ClassicMeta struct {
	SessionTimeout time.Duration
	Protocols      []ClassicProtocol
}

// ClassicProtocol is one protocol a classic member supports: an assignor
// name and the member's metadata for it (its embedded subscription).
type ClassicProtocol struct {
	Name     string
	Metadata []byte
}

func (c *ClassicMeta) equal(o *ClassicMeta) bool {
	if c == nil || o == nil {
		return c == o
	}
	return c.SessionTimeout == o.SessionTimeout && slices.EqualFunc(c.Protocols, o.Protocols, func(a, b ClassicProtocol) bool {
		return a.Name == b.Name && string(a.Metadata) == string(b.Metadata)
	})
}

// sessionTimeout is member m's session timeout: its own for a classic
// member, the group's otherwise.
func (g *Group) sessionTimeout(m *Member) time.Duration {
	if m.Classic != nil && m.Classic.SessionTimeout > 0 {
		return m.Classic.SessionTimeout
	}
	return g.cfg.SessionTimeout
}

// ClassicJoin is a classic member's JoinGroup, its embedded subscription
// parsed by the coordinator.
type ClassicJoin struct {
	MemberID         string // given by the coordinator to a new member
	InstanceID       string // "" for a dynamic member
	RackID           string
	ClientID         string
	ClientHost       string
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	Protocols        []ClassicProtocol
	Topics           []string
	// Owned is what its subscription says it still owns (cooperative
	// members; nil or empty for an eager one).
	Owned Assignment
}

// JoinClassic handles a classic member's JoinGroup at time now and
// returns the member's epoch (its generation, for SyncGroup, Heartbeat
// and OffsetCommit). A JoinGroup under an unknown id joins; one with the
// instance id of a member that is still in the group replaces it at once
// (classic static membership).
func (g *Group) JoinClassic(now time.Time, topics Topics, j ClassicJoin) (int32, error) {
	meta := &ClassicMeta{SessionTimeout: j.SessionTimeout, Protocols: j.Protocols}
	subs := j.Topics
	if subs == nil {
		subs = []string{}
	}
	noRegex, rack := "", j.RackID
	r := Request{MemberID: j.MemberID, RebalanceTimeout: j.RebalanceTimeout, SubscribedTopics: subs, SubscribedRegex: &noRegex,
		RackID: &rack, ClientID: j.ClientID, ClientHost: j.ClientHost, Classic: meta}
	if j.InstanceID != "" {
		inst := j.InstanceID
		r.InstanceID = &inst
	}
	m := g.members[j.MemberID]
	switch {
	case m == nil:
		// A new member; with the instance id of one still in the group,
		// it replaces that one at once (memberFor), which is fenced.
		r.Epoch = JoinEpoch
	case j.InstanceID != "" && g.static[j.InstanceID] != m.ID:
		return 0, errorf(kerr.FencedInstanceID, "instance %q is member %s now", j.InstanceID, g.static[j.InstanceID])
	case m.Classic == nil:
		return 0, errorf(kerr.UnknownMemberID, "member %s of group %q speaks the consumer protocol (ConsumerGroupHeartbeat)", m.ID, g.ID)
	default:
		r.Epoch = m.Epoch
		if m.Left() {
			r.Epoch = JoinEpoch
		}
		// What it still owns, of what it was given.
		owned := Assignment{}
		for t, ps := range j.Owned {
			for _, p := range ps {
				if m.Assigned.Has(t, p) || m.Revoking.Has(t, p) {
					owned[t] = append(owned[t], p)
				}
			}
		}
		if r.Epoch != JoinEpoch {
			r.Owned = Normalize(owned)
		}
	}
	resp, err := g.Heartbeat(now, topics, r)
	if err != nil {
		return 0, err
	}
	m = g.members[resp.MemberID]
	if m.State == UnrevokedPartitions && !intersects(r.Owned, m.Revoking) {
		// It revoked them before it joined (an eager member revokes
		// everything): it moves on at once.
		g.reconcile(now, m, Assignment{})
		g.dirty[m.ID] = true
	}
	if m.State != UnrevokedPartitions {
		m.revokeDeadline = time.Time{} // it rejoined: no deadline to rejoin
	}
	return m.Epoch, nil
}

// classicMember finds a classic member and checks its instance id and
// generation, as the classic protocol does.
func (g *Group) classicMember(memberID string, instanceID *string, generation int32) (*Member, error) {
	if instanceID != nil {
		if cur := g.static[*instanceID]; cur != "" && cur != memberID {
			return nil, errorf(kerr.FencedInstanceID, "instance %q is member %s now", *instanceID, cur)
		}
	}
	m := g.members[memberID]
	if m == nil || m.Classic == nil || m.Left() {
		return nil, errorf(kerr.UnknownMemberID, "member %s is not in group %q", memberID, g.ID)
	}
	if instanceID != nil && *instanceID != m.InstanceID {
		return nil, errorf(kerr.FencedInstanceID, "member %s has instance id %q, not %q", m.ID, m.InstanceID, *instanceID)
	}
	if generation != m.Epoch {
		return m, errorf(kerr.IllegalGeneration, "member %s sent generation %d, its generation is %d", m.ID, generation, m.Epoch)
	}
	return m, nil
}

// SyncClassic handles a classic member's SyncGroup: its current
// assignment, or REBALANCE_IN_PROGRESS when it is already behind again.
func (g *Group) SyncClassic(now time.Time, memberID string, instanceID *string, generation int32) (Assignment, error) {
	m, err := g.classicMember(memberID, instanceID, generation)
	if err != nil {
		return nil, err
	}
	m.sessionDeadline = now.Add(g.sessionTimeout(m))
	if m.Epoch < g.epoch && m.State != UnrevokedPartitions {
		g.mustRejoin(now, m)
		return nil, errorf(kerr.RebalanceInProgress, "group %q moved to epoch %d; rejoin", g.ID, g.epoch)
	}
	return m.Assigned.Clone(), nil
}

// HeartbeatClassic handles a classic member's Heartbeat.
func (g *Group) HeartbeatClassic(now time.Time, memberID string, instanceID *string, generation int32) error {
	m, err := g.classicMember(memberID, instanceID, generation)
	if m != nil {
		m.sessionDeadline = now.Add(g.sessionTimeout(m))
	}
	if err != nil {
		return err
	}
	if m.Epoch < g.epoch || m.State == UnrevokedPartitions || (m.State == UnreleasedPartitions && !g.waiting(m)) {
		g.mustRejoin(now, m)
		return errorf(kerr.RebalanceInProgress, "group %q has a new assignment for member %s; rejoin", g.ID, m.ID)
	}
	return nil
}

// mustRejoin gives a member told to rejoin its rebalance timeout to do it.
func (g *Group) mustRejoin(now time.Time, m *Member) {
	if m.revokeDeadline.IsZero() {
		m.revokeDeadline = now.Add(max(m.RebalanceTimeout, time.Second))
	}
}

// waiting reports whether a partition of m's target is still owned by
// another member.
func (g *Group) waiting(m *Member) bool {
	for t, ps := range g.target[m.ID] {
		for _, p := range ps {
			if o := g.owners[t][p]; o != "" && o != m.ID {
				return true
			}
		}
	}
	return false
}

// LeaveClassic handles a classic LeaveGroup of one member, named by its
// id, its instance id, or both.
func (g *Group) LeaveClassic(memberID string, instanceID *string) error {
	id := memberID
	if instanceID != nil {
		cur := g.static[*instanceID]
		switch {
		case cur == "":
			return errorf(kerr.UnknownMemberID, "instance %s is not in group %q", *instanceID, g.ID)
		case id != "" && id != cur:
			return errorf(kerr.FencedInstanceID, "instance %s is member %s, not %s", *instanceID, cur, id)
		}
		id = cur
	}
	m := g.members[id]
	if m == nil || m.Classic == nil {
		return errorf(kerr.UnknownMemberID, "member %s is not a classic member of group %q", id, g.ID)
	}
	g.remove(m)
	return nil
}

// StaticMember is the member id of a static instance ("" when none).
func (g *Group) StaticMember(instanceID string) string { return g.static[instanceID] }

// OnlyClassic reports whether the group has members and all of them speak
// the classic protocol: the group can turn back into a classic group.
func (g *Group) OnlyClassic() bool {
	if len(g.members) == 0 {
		return false
	}
	for _, m := range g.members {
		if m.Classic == nil {
			return false
		}
	}
	return true
}
