package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine/sharegroup"
)

// ShareTypeName is a share group's type in ListGroups and DescribeGroups.
const ShareTypeName = "share"

// shareGroup is a share group on its coordinator: membership only (the
// records' state is on the partitions' leaders, SharePartitions). Its
// membership is not persisted: after a restart or a coordinator move the
// members are unknown and join again (UNKNOWN_MEMBER_ID), which a share
// group absorbs with no loss (a partition may have many members).
type shareGroup struct {
	id    string
	mu    sync.Mutex
	g     *sharegroup.Group
	timer *time.Timer
	dead  bool // deleted: a heartbeat that raced the deletion starts over
}

// checkEmpty refuses what needs a share group with no member
// (NON_EMPTY_GROUP); a nil group has none.
func (sg *shareGroup) checkEmpty(what string) error {
	if sg == nil {
		return nil
	}
	sg.mu.Lock()
	defer sg.mu.Unlock()
	if !sg.g.Empty() {
		return fmt.Errorf("%w: share group %q has members; stop them before %s", kerr.NonEmptyGroup, sg.id, what)
	}
	return nil
}

// shareGroupFor returns group id's share group, creating it when create
// is set. A classic or consumer group with members under the same id
// refuses it (GROUP_ID_NOT_FOUND, as Kafka answers a heartbeat of the
// wrong type).
func (c *Coordinator) shareGroupFor(id string, create bool) (*shareGroup, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty group id", kerr.InvalidGroupID)
	}
	if err := c.checkCoordinator(id); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if sg := c.shareGroups[id]; sg != nil || !create {
		return sg, nil
	}
	if g := c.groups[id]; g != nil {
		g.mu.Lock()
		busy := len(g.members) > 0 || len(g.pending) > 0 || (g.consumer != nil && !g.consumer.Empty())
		g.unlock()
		if busy {
			return nil, fmt.Errorf("%w: group %q is a consumer group with members, not a share group", kerr.GroupIDNotFound, id)
		}
	}
	if c.shareGroups == nil {
		c.shareGroups = map[string]*shareGroup{}
	}
	if max := c.cfg.Share.MaxGroups; max > 0 && len(c.shareGroups) >= max {
		return nil, fmt.Errorf("%w: this coordinator holds %d share groups (--group-share-max-groups); delete unused ones", kerr.GroupMaxSizeReached, len(c.shareGroups))
	}
	sg := &shareGroup{id: id, g: sharegroup.New(c.eng.shareSettings(id).Group)}
	c.shareGroups[id] = sg
	return sg, nil
}

// CheckShareMember refuses a share fetch of a member that is not a member
// of share group id here (UNKNOWN_MEMBER_ID: it heartbeats, joining
// again after a restart or its removal, then fetches). It bounds the
// share-partitions a broker keeps to those of its share groups, and
// stops a removed member from acquiring more.
//
// In cluster mode, where another broker coordinates the group, the
// partition leader asks it when a share session opens (opening), and
// trusts the session after that.
func (c *Coordinator) CheckShareMember(id, member string, opening bool) error {
	if err := c.checkCoordinator(id); err != nil {
		if !errors.Is(err, kerr.NotCoordinator) {
			return err // loading here, or no offsets topic yet: retriable
		}
		if !opening {
			return nil
		}
		if h := c.eng.clusterHooks(); h != nil && h.ShareMember != nil {
			return h.ShareMember(id, member)
		}
		return err
	}
	c.mu.RLock()
	sg := c.shareGroups[id]
	c.mu.RUnlock()
	if sg != nil {
		sg.mu.Lock()
		ok := sg.g.IsMember(member)
		sg.mu.Unlock()
		if ok {
			return nil
		}
	}
	return fmt.Errorf("%w: %q is not a member of share group %q here; heartbeat (join) first", kerr.UnknownMemberID, member, id)
}

// isShareGroup reports whether id is a share group with members (a
// classic or consumer-protocol request for it is refused).
func (c *Coordinator) isShareGroup(id string) bool {
	c.mu.RLock()
	sg := c.shareGroups[id]
	c.mu.RUnlock()
	if sg == nil {
		return false
	}
	sg.mu.Lock()
	defer sg.mu.Unlock()
	return !sg.g.Empty()
}

// ShareHeartbeat handles a ShareGroupHeartbeat.
func (c *Coordinator) ShareHeartbeat(groupID string, req sharegroup.Request) (sharegroup.Response, error) {
	sg, err := c.shareGroupFor(groupID, req.MemberEpoch == sharegroup.JoinEpoch)
	if err != nil {
		return sharegroup.Response{}, err
	}
	if sg == nil {
		if req.MemberEpoch == sharegroup.LeaveEpoch {
			return sharegroup.Response{MemberID: req.MemberID, MemberEpoch: sharegroup.LeaveEpoch}, nil
		}
		return sharegroup.Response{}, fmt.Errorf("%w: share group %q does not exist (it may have expired); join again", kerr.GroupIDNotFound, groupID)
	}
	sg.mu.Lock()
	for sg.dead { // emptied or deleted meanwhile: a join makes it again
		sg.mu.Unlock()
		if req.MemberEpoch != sharegroup.JoinEpoch {
			return sharegroup.Response{}, fmt.Errorf("%w: share group %q has no member %s; join again", kerr.UnknownMemberID, groupID, req.MemberID)
		}
		if sg, err = c.shareGroupFor(groupID, true); err != nil {
			return sharegroup.Response{}, err
		}
		sg.mu.Lock()
	}
	sg.g.SetConfig(c.eng.shareSettings(groupID).Group)
	before := sg.g.Epoch()
	resp, err := sg.g.Heartbeat(time.Now().UnixMilli(), engineTopics{c.eng}, req)
	if sg.g.Epoch() != before {
		c.eng.logger.Info("share group assignment", "group", groupID, "epoch", sg.g.Epoch(), "members", len(sg.g.Members()), "why", "member "+req.MemberID)
	}
	c.armShareTimer(sg)
	c.dropIfEmpty(sg)
	sg.mu.Unlock()
	if err == nil && req.MemberEpoch == sharegroup.LeaveEpoch {
		c.eng.shares.ReleaseMember(groupID, req.MemberID)
	}
	return resp, err
}

// dropIfEmpty forgets a share group with no member left (sg.mu held):
// membership is all a coordinator keeps of one (the records' state is
// in __share_group_state), so ids clients made up cost nothing once
// their members are gone.
func (c *Coordinator) dropIfEmpty(sg *shareGroup) {
	if !sg.g.Empty() || sg.dead {
		return
	}
	sg.dead = true
	if sg.timer != nil {
		sg.timer.Stop()
		sg.timer = nil
	}
	c.mu.Lock()
	if c.shareGroups[sg.id] == sg {
		delete(c.shareGroups, sg.id)
	}
	c.mu.Unlock()
}

// armShareTimer arms sg's session-expiry timer (sg.mu held).
func (c *Coordinator) armShareTimer(sg *shareGroup) {
	if sg.timer != nil {
		sg.timer.Stop()
		sg.timer = nil
	}
	d := sg.g.NextDeadline()
	if d == 0 {
		return
	}
	sg.timer = time.AfterFunc(time.Until(time.UnixMilli(d))+time.Millisecond, func() {
		sg.mu.Lock()
		removed := sg.g.Expire(time.Now().UnixMilli(), engineTopics{c.eng})
		if len(removed) > 0 {
			c.eng.logger.Info("share group members expired", "group", sg.id, "members", removed)
		}
		c.armShareTimer(sg)
		c.dropIfEmpty(sg)
		sg.mu.Unlock()
		for _, m := range removed {
			c.eng.shares.ReleaseMember(sg.id, m)
		}
	})
}

// ShareGroupDescription is a share group as ShareGroupDescribe,
// DescribeGroups and `ringlog group describe` show it.
type ShareGroupDescription struct {
	ID    string
	State string
	// Epoch is the group epoch, which is also its assignment's (a share
	// group's assignment is computed at once, never reconciled).
	Epoch   int32
	Members []sharegroup.Member
}

// ShareGroupIDs lists the share groups this coordinator knows, sorted:
// those with members, and those with share-partition state.
func (c *Coordinator) ShareGroupIDs() []string {
	c.mu.RLock()
	out := make([]string, 0, len(c.shareGroups))
	for id := range c.shareGroups {
		out = append(out, id)
	}
	c.mu.RUnlock()
	out = append(out, c.eng.shareStates.Groups()...)
	slices.Sort(out)
	return slices.Compact(out)
}

// ShareGroup describes a share group; false when it has neither members
// nor share-partition state here.
func (c *Coordinator) ShareGroup(id string) (ShareGroupDescription, bool, error) {
	if err := c.checkCoordinator(id); err != nil {
		return ShareGroupDescription{}, false, err
	}
	c.mu.RLock()
	sg := c.shareGroups[id]
	c.mu.RUnlock()
	if sg == nil {
		if len(c.eng.shareStates.Keys(id)) == 0 {
			return ShareGroupDescription{}, false, nil
		}
		return ShareGroupDescription{ID: id, State: "Empty"}, true, nil
	}
	sg.mu.Lock()
	defer sg.mu.Unlock()
	d := ShareGroupDescription{ID: id, State: sg.g.State(), Epoch: sg.g.Epoch()}
	for _, m := range sg.g.Members() {
		d.Members = append(d.Members, *m)
	}
	return d, true, nil
}

// deleteShareGroup deletes share group id and its share-partition states
// (DeleteGroups); NON_EMPTY_GROUP while it has members. found is false
// when id is not a share group.
func (c *Coordinator) deleteShareGroup(id string) (found bool, err error) {
	c.mu.Lock()
	sg := c.shareGroups[id]
	c.mu.Unlock()
	keys, err := c.eng.shares.groupKeys(id)
	if err != nil {
		return sg != nil, err
	}
	if sg == nil && len(keys) == 0 {
		return false, nil
	}
	if sg != nil {
		sg.mu.Lock()
		if !sg.g.Empty() {
			sg.mu.Unlock()
			return true, fmt.Errorf("%w: share group %q has members; stop them first", kerr.NonEmptyGroup, id)
		}
		sg.dead = true
		if sg.timer != nil {
			sg.timer.Stop()
		}
		sg.mu.Unlock()
		c.mu.Lock()
		if c.shareGroups[id] == sg {
			delete(c.shareGroups, id)
		}
		c.mu.Unlock()
	}
	c.eng.shares.dropGroup(id)
	return true, c.eng.shares.Delete(keys)
}

// knownShareGroup returns share group id (nil when it has no member) and
// the share-partitions it has a state of: GROUP_ID_NOT_FOUND when it has
// neither.
func (c *Coordinator) knownShareGroup(id string) (*shareGroup, []ShareKey, error) {
	sg, err := c.shareGroupFor(id, false)
	if err != nil {
		return nil, nil, err
	}
	keys, err := c.eng.shares.groupKeys(id)
	if err != nil {
		return nil, nil, err
	}
	if sg == nil && len(keys) == 0 {
		return nil, nil, fmt.Errorf("%w: share group %q", kerr.GroupIDNotFound, id)
	}
	return sg, keys, nil
}

// leadsHere reports whether p's high watermark and log start are known
// here: a single broker's partition, or one this broker leads.
func leadsHere(p *Partition) bool {
	return p.Hosted() && (!p.Replicated() || p.Role() == RoleLeader)
}

// ShareOffset is one share-partition's start offset, as
// DescribeShareGroupOffsets answers it.
type ShareOffset struct {
	Topic       string
	TopicID     TopicID
	Partition   int32
	StartOffset int64 // -1: the group has no state for it
	LeaderEpoch int32
	// Lag is the records from the start offset to the high watermark
	// not yet acknowledged or archived; -1 when unknown.
	Lag int64
	// Acquired and Redeliver count the records locked to members now and
	// waiting for another delivery, when the partition's share state is
	// in memory here (Live).
	Acquired, Redeliver int
	Live                bool
	Err                 error
}

// ShareOffsets returns group's start offsets of topics' partitions (nil:
// every partition the group has a state of). GROUP_ID_NOT_FOUND when
// the group is neither known nor has any state.
func (c *Coordinator) ShareOffsets(group string, topics map[string][]int32) ([]ShareOffset, error) {
	_, keys, err := c.knownShareGroup(group)
	if err != nil {
		return nil, err
	}
	var out []ShareOffset
	add := func(t *Topic, name string, part int32) {
		so := ShareOffset{Topic: name, Partition: part, StartOffset: -1, LeaderEpoch: -1, Lag: -1}
		if t == nil || t.Partition(part) == nil {
			so.Err = fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, name, part)
			out = append(out, so)
			return
		}
		so.TopicID = t.ID
		st, ok, err := c.eng.shareStates.Read(ShareKey{Group: group, Topic: t.ID, Partition: part}, -1)
		switch {
		case err != nil:
			so.Err = err
		case ok && !leadsHere(t.Partition(part)):
			so.StartOffset, so.LeaderEpoch = st.Start, st.LeaderEpoch // lag unknown here
		case ok:
			p := t.Partition(part)
			so.StartOffset, so.LeaderEpoch = st.Start, st.LeaderEpoch
			so.Lag = max(0, p.HighWatermark()-st.Start)
			for _, b := range st.Batches {
				if b.State == sharegroup.Acknowledged || b.State == sharegroup.Archived {
					so.Lag -= min(b.Last, p.HighWatermark()-1) - b.First + 1
				}
			}
			so.Lag = max(0, so.Lag)
			so.Acquired, so.Redeliver, so.Live = c.eng.shares.InFlightOf(ShareKey{Group: group, Topic: t.ID, Partition: part})
		}
		out = append(out, so)
	}
	if topics == nil {
		for _, k := range keys {
			if t := c.eng.TopicByID(k.Topic); t != nil && !t.Deleted() {
				add(t, t.Name, k.Partition)
			}
		}
		return out, nil
	}
	for _, name := range slices.Sorted(maps.Keys(topics)) {
		t := c.eng.Topic(name)
		for _, part := range topics[name] {
			add(t, name, part)
		}
	}
	return out, nil
}

// AlterShareOffsets sets group's start offsets (AlterShareGroupOffsets):
// the group must have no member; for a group never seen, the states
// written make it one (listed, described).
func (c *Coordinator) AlterShareOffsets(group string, topics map[string]map[int32]int64) (map[string]map[int32]error, error) {
	sg, err := c.shareGroupFor(group, false)
	if err != nil {
		return nil, err
	}
	if err := sg.checkEmpty("altering its offsets"); err != nil {
		return nil, err
	}
	out := map[string]map[int32]error{}
	for name, parts := range topics {
		out[name] = map[int32]error{}
		t := c.eng.Topic(name)
		for part, off := range parts {
			switch {
			case t == nil || t.Deleted() || t.Partition(part) == nil:
				out[name][part] = fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, name, part)
			case off < 0:
				out[name][part] = fmt.Errorf("%w: offset %d of %s-%d", kerr.InvalidRequest, off, name, part)
			case leadsHere(t.Partition(part)) && (off < t.Partition(part).LocalStartOffset() || off > t.Partition(part).HighWatermark()):
				// (A partition led elsewhere in a cluster: its leader
				// moves a start below its log start up when it loads.)
				out[name][part] = fmt.Errorf("%w: offset %d of %s-%d is outside %d-%d", kerr.InvalidRequest, off, name, part, t.Partition(part).LocalStartOffset(), t.Partition(part).HighWatermark())
			default:
				out[name][part] = c.eng.shares.Reset(group, t.ID, part, off)
			}
		}
	}
	return out, nil
}

// DeleteShareOffsets removes group's state of topics
// (DeleteShareGroupOffsets): the group must have no member.
func (c *Coordinator) DeleteShareOffsets(group string, topics []string) (map[string]error, error) {
	sg, keys, err := c.knownShareGroup(group)
	if err != nil {
		return nil, err
	}
	if err := sg.checkEmpty("deleting its offsets"); err != nil {
		return nil, err
	}
	out := map[string]error{}
	for _, name := range topics {
		t := c.eng.Topic(name)
		if t == nil || t.Deleted() {
			out[name] = fmt.Errorf("%w: %s", kerr.UnknownTopicOrPartition, name)
			continue
		}
		var del []ShareKey
		for _, k := range keys {
			if k.Topic == t.ID {
				del = append(del, k)
			}
		}
		out[name] = c.eng.shares.Delete(del)
	}
	return out, nil
}
