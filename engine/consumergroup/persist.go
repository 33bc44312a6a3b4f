package consumergroup

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// What a group keeps durably, in the shape of Kafka's __consumer_offsets
// records for consumer groups: the group epoch (and the subscribed
// topics' metadata hash), each member's metadata, the target assignment
// (its epoch, and each member's part), and each member's current
// assignment (epochs, state, assigned partitions, partitions pending
// revocation). The coordinator takes the changes after every call that
// may make some (TakeChanges), writes them, and replays them into a fresh
// group with the Restore methods, then Loaded.

// MemberRecord is a member as it is persisted.
type MemberRecord struct {
	ID               string
	InstanceID       string
	RackID           string
	ClientID         string
	ClientHost       string
	Topics           []string
	Regex            string
	RebalanceTimeout time.Duration
	Assignor         string

	Epoch         int32
	PreviousEpoch int32
	State         MemberState
	Assigned      Assignment
	Revoking      Assignment

	// Classic: the member speaks the classic protocol (nil: the
	// consumer protocol).
	Classic *ClassicMeta
}

func recordOf(m *Member) MemberRecord {
	return MemberRecord{ID: m.ID, InstanceID: m.InstanceID, RackID: m.RackID, ClientID: m.ClientID, ClientHost: m.ClientHost,
		Topics: m.Topics, Regex: m.Regex, RebalanceTimeout: m.RebalanceTimeout, Assignor: m.Assignor,
		Epoch: m.Epoch, PreviousEpoch: m.PreviousEpoch, State: m.State, Assigned: m.Assigned, Revoking: m.Revoking, Classic: m.Classic}
}

func (r MemberRecord) equal(o MemberRecord) bool {
	return r.ID == o.ID && r.InstanceID == o.InstanceID && r.RackID == o.RackID && r.ClientID == o.ClientID && r.ClientHost == o.ClientHost &&
		slices.Equal(r.Topics, o.Topics) && r.Regex == o.Regex && r.RebalanceTimeout == o.RebalanceTimeout && r.Assignor == o.Assignor &&
		r.Epoch == o.Epoch && r.PreviousEpoch == o.PreviousEpoch && r.State == o.State && r.Assigned.Equal(o.Assigned) && r.Revoking.Equal(o.Revoking) &&
		r.Classic.equal(o.Classic)
}

func (g *Group) markRemoved(id string) {
	delete(g.dirty, id)
	delete(g.targetDirty, id)
	g.removed[id] = true
}

// Changes is what changed in a group since the last TakeChanges.
type Changes struct {
	// Epoch and MetadataHash, when EpochChanged.
	EpochChanged bool
	Epoch        int32
	MetadataHash uint64
	// AssignmentEpoch, when AssignmentEpochChanged; Targets are the
	// members' targets that changed.
	AssignmentEpochChanged bool
	AssignmentEpoch        int32
	Targets                map[string]Assignment
	// Members are the members whose metadata or current assignment
	// changed; Removed the ids of those that left.
	Members []MemberRecord
	Removed []string
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool {
	return !c.EpochChanged && !c.AssignmentEpochChanged && len(c.Targets) == 0 && len(c.Members) == 0 && len(c.Removed) == 0
}

// TakeChanges returns what changed since the last call and forgets it;
// with all set, it returns the whole state, with tombstones for every
// member persisted before that is gone (after a write failed, say). A
// write that succeeds is reported with Persisted.
func (g *Group) TakeChanges(all bool) Changes {
	c := Changes{EpochChanged: g.epochDirty || all, Epoch: g.epoch, MetadataHash: g.metadataHash,
		AssignmentEpochChanged: g.assignmentEpochDirty || all, AssignmentEpoch: g.assignmentEpoch}
	for id, a := range g.target {
		if all || g.targetDirty[id] {
			if c.Targets == nil {
				c.Targets = map[string]Assignment{}
			}
			c.Targets[id] = a
		}
	}
	for _, m := range g.Members() {
		if all || g.dirty[m.ID] {
			c.Members = append(c.Members, recordOf(m))
		}
	}
	gone := g.removed
	if all {
		gone = maps.Clone(g.removed)
		for id := range g.persisted {
			gone[id] = true
		}
	}
	for id := range gone {
		if g.members[id] == nil {
			c.Removed = append(c.Removed, id)
		}
	}
	slices.Sort(c.Removed)
	g.dirty, g.removed, g.targetDirty = map[string]bool{}, map[string]bool{}, map[string]bool{}
	g.epochDirty, g.assignmentEpochDirty = false, false
	return c
}

// NotPersisted records that a write of the changes c failed: its member
// records may still have reached the log, so they count as persisted (a
// later full rewrite tombstones them if they are gone by then).
func (g *Group) NotPersisted(c Changes) {
	for _, m := range c.Members {
		g.persisted[m.ID] = true
	}
	for _, id := range c.Removed {
		g.persisted[id] = true // its tombstone may not have been written
	}
}

// Persisted records that the changes c were written.
func (g *Group) Persisted(c Changes) {
	for _, m := range c.Members {
		g.persisted[m.ID] = true
	}
	for _, id := range c.Removed {
		delete(g.persisted, id)
	}
}

// RestoreEpoch replays the group epoch record.
func (g *Group) RestoreEpoch(epoch int32, metadataHash uint64) {
	g.epoch, g.metadataHash = epoch, metadataHash
}

// RestoreAssignmentEpoch replays the target assignment's epoch record.
func (g *Group) RestoreAssignmentEpoch(epoch int32) { g.assignmentEpoch = epoch }

// RestoreTarget replays one member's target (nil: a tombstone).
func (g *Group) RestoreTarget(id string, a Assignment) {
	if a == nil {
		delete(g.target, id)
		return
	}
	g.target[id] = Normalize(a)
}

func (g *Group) restoredMember(id string) *Member {
	m := g.members[id]
	if m == nil {
		m = &Member{ID: id, Assigned: Assignment{}, Revoking: Assignment{}}
		g.members[id] = m
	}
	return m
}

// RestoreMemberMetadata replays a member's metadata record.
func (g *Group) RestoreMemberMetadata(r MemberRecord) {
	m := g.restoredMember(r.ID)
	m.InstanceID, m.RackID, m.ClientID, m.ClientHost = r.InstanceID, r.RackID, r.ClientID, r.ClientHost
	m.Topics, m.Regex, m.RebalanceTimeout, m.Assignor = slices.Clone(r.Topics), r.Regex, r.RebalanceTimeout, r.Assignor
	m.Classic = r.Classic
	slices.Sort(m.Topics)
	m.Topics = slices.Compact(m.Topics)
}

// RestoreMemberAssignment replays a member's current-assignment record.
func (g *Group) RestoreMemberAssignment(r MemberRecord) {
	m := g.restoredMember(r.ID)
	m.Epoch, m.PreviousEpoch, m.State = r.Epoch, r.PreviousEpoch, r.State
	m.Assigned, m.Revoking = Normalize(r.Assigned), Normalize(r.Revoking)
}

// RestoreRemoveMember replays a member's tombstone.
func (g *Group) RestoreRemoveMember(id string) {
	delete(g.members, id)
	delete(g.target, id)
}

// maxLoadedEpoch bounds the epochs a load accepts, far from the wrap of
// int32 into the leave epochs.
const maxLoadedEpoch = 1 << 30

// Loaded ends a replay at time now: ownership and static members are
// rebuilt, every member gets a fresh session (those that do not come back
// expire as usual), and a member still revoking a fresh rebalance
// timeout. It returns an error naming the first inconsistency (a
// partition with two owners, a state out of range): the caller then drops
// the members, which rejoin.
func (g *Group) Loaded(now time.Time) error {
	g.owners, g.static, g.metaBytes = map[TopicID]map[int32]string{}, map[string]string{}, 0
	if g.epoch < 0 || g.epoch > maxLoadedEpoch || g.assignmentEpoch < 0 || g.assignmentEpoch > g.epoch {
		return fmt.Errorf("group epoch %d, assignment epoch %d", g.epoch, g.assignmentEpoch)
	}
	for id := range g.target {
		if g.members[id] == nil {
			delete(g.target, id) // a target record outlived its member's tombstone
		}
	}
	for _, m := range g.Members() {
		if m.State < Stable || m.State > UnreleasedPartitions {
			return fmt.Errorf("member %s has state %d", m.ID, m.State)
		}
		if (m.Epoch < 0 && m.Epoch != StaticLeaveEpoch) || m.Epoch > g.epoch || m.PreviousEpoch > g.epoch || (m.Left() && m.InstanceID == "") {
			return fmt.Errorf("member %s has epoch %d (previous %d) in a group at epoch %d", m.ID, m.Epoch, m.PreviousEpoch, g.epoch)
		}
		if m.State == Stable && m.Epoch == g.assignmentEpoch && !subset(m.Assigned, g.target[m.ID]) {
			return fmt.Errorf("member %s is stable at the assignment epoch but owns partitions outside its target", m.ID)
		}
		if m.InstanceID != "" {
			if other := g.static[m.InstanceID]; other != "" {
				return fmt.Errorf("instance %q is both %s and %s", m.InstanceID, other, m.ID)
			}
		}
		for _, a := range []Assignment{m.Assigned, m.Revoking} {
			for t, ps := range a {
				for _, p := range ps {
					if o := g.owners[t][p]; o != "" && o != m.ID {
						return fmt.Errorf("partition %x/%d is owned by %s and %s", t[:4], p, o, m.ID)
					}
				}
			}
			g.setOwner(a, m.ID)
		}
		if m.InstanceID != "" {
			g.static[m.InstanceID] = m.ID
		}
		m.filterKnown, m.subsValid, m.regexAllowed, m.subsComputed = false, false, nil, false
		m.metaBytes = memberBytes(m)
		g.metaBytes += m.metaBytes
		m.sessionDeadline = now.Add(g.sessionTimeout(m))
		if m.Classic != nil && (m.Classic.SessionTimeout <= 0 || len(m.Classic.Protocols) == 0) {
			return fmt.Errorf("classic member %s has session timeout %v and %d protocols", m.ID, m.Classic.SessionTimeout, len(m.Classic.Protocols))
		}
		if m.State == UnrevokedPartitions {
			m.revokeDeadline = now.Add(m.RebalanceTimeout)
		}
	}
	if len(g.members) > 0 {
		g.assignor = g.pickAssignor()
	}
	g.resolvedAt, g.unionValid, g.hashed = time.Time{}, false, false
	g.dirty, g.removed, g.targetDirty = map[string]bool{}, map[string]bool{}, map[string]bool{}
	g.epochDirty, g.assignmentEpochDirty = false, false
	g.persisted = map[string]bool{}
	for id := range g.members {
		g.persisted[id] = true
	}
	return nil
}

// Reset drops every member (after a replay found the state inconsistent):
// the epoch grows so that members still holding the old one are fenced.
func (g *Group) Reset() {
	if g.epoch < 0 || g.epoch > maxLoadedEpoch {
		g.epoch = 0 // every member is removed below: no epoch of theirs survives
	}
	g.assignmentEpoch = min(max(g.assignmentEpoch, 0), g.epoch)
	for _, m := range g.Members() {
		g.remove(m)
	}
	g.owners = map[TopicID]map[int32]string{}
}
