package engine

import (
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

// CheckShareGroup refuses a share fetch or acknowledgement for a group
// that is not a share group here (GROUP_ID_NOT_FOUND: its members
// heartbeat first, and join again after a restart); it bounds the
// share-partitions a broker keeps to those of its share groups.
func (c *Coordinator) CheckShareGroup(id string) error {
	c.mu.RLock()
	sg := c.shareGroups[id]
	c.mu.RUnlock()
	if sg == nil {
		return fmt.Errorf("%w: %q is not a share group with members here; heartbeat (join) first", kerr.GroupIDNotFound, id)
	}
	return nil
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
	if sg.dead {
		sg.mu.Unlock()
		return sharegroup.Response{}, fmt.Errorf("%w: share group %q was deleted; join again", kerr.GroupIDNotFound, groupID)
	}
	sg.g.SetConfig(c.eng.shareSettings(groupID).Group)
	before := sg.g.AssignmentEpoch()
	resp, err := sg.g.Heartbeat(time.Now().UnixMilli(), engineTopics{c.eng}, req)
	if sg.g.AssignmentEpoch() != before {
		c.eng.logger.Info("share group assignment", "group", groupID, "epoch", sg.g.Epoch(), "members", len(sg.g.Members()), "why", "member "+req.MemberID)
	}
	c.armShareTimer(sg)
	sg.mu.Unlock()
	if err == nil && req.MemberEpoch == sharegroup.LeaveEpoch {
		c.eng.shares.ReleaseMember(groupID, req.MemberID)
	}
	return resp, err
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
		sg.mu.Unlock()
		for _, m := range removed {
			c.eng.shares.ReleaseMember(sg.id, m)
		}
	})
}

// ShareGroupDescription is a share group as ShareGroupDescribe,
// DescribeGroups and `ringlog group describe` show it.
type ShareGroupDescription struct {
	ID              string
	State           string
	Epoch           int32
	AssignmentEpoch int32
	Members         []sharegroup.Member
	// Available, Acquired and Done count the in-flight records of the
	// share-partitions this broker leads.
	Available, Acquired, Done int
}

// ShareGroup describes a share group; false when there is none.
func (c *Coordinator) ShareGroup(id string) (ShareGroupDescription, bool, error) {
	sg, err := c.shareGroupFor(id, false)
	if err != nil || sg == nil {
		return ShareGroupDescription{}, false, err
	}
	sg.mu.Lock()
	d := ShareGroupDescription{ID: id, State: sg.g.State(), Epoch: sg.g.Epoch(), AssignmentEpoch: sg.g.AssignmentEpoch()}
	for _, m := range sg.g.Members() {
		d.Members = append(d.Members, *m)
	}
	sg.mu.Unlock()
	d.Available, d.Acquired, d.Done = c.eng.shares.InFlight(id)
	return d, true, nil
}

// ShareGroupIDs lists the share groups this coordinator knows, sorted.
func (c *Coordinator) ShareGroupIDs() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.shareGroups))
	for id := range c.shareGroups {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// deleteShareGroup deletes share group id and its share-partition states
// (DeleteGroups); NON_EMPTY_GROUP while it has members. found is false
// when id is not a share group.
func (c *Coordinator) deleteShareGroup(id string) (found bool, err error) {
	c.mu.Lock()
	sg := c.shareGroups[id]
	c.mu.Unlock()
	keys := c.eng.shares.groupKeys(id)
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
	sg, err := c.shareGroupFor(group, false)
	if err != nil {
		return nil, err
	}
	keys := c.eng.shares.groupKeys(group)
	if sg == nil && len(keys) == 0 {
		return nil, fmt.Errorf("%w: share group %q", kerr.GroupIDNotFound, group)
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
		st, ok, err := c.eng.shareStates.Read(ShareKey{Group: group, Topic: t.ID, Partition: part})
		switch {
		case err != nil:
			so.Err = err
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
// the group must have no member; a group never seen is created empty.
func (c *Coordinator) AlterShareOffsets(group string, topics map[string]map[int32]int64) (map[string]map[int32]error, error) {
	sg, err := c.shareGroupFor(group, true)
	if err != nil {
		return nil, err
	}
	sg.mu.Lock()
	empty := sg.g.Empty()
	sg.mu.Unlock()
	if !empty {
		return nil, fmt.Errorf("%w: share group %q has members; stop them before altering its offsets", kerr.NonEmptyGroup, group)
	}
	out := map[string]map[int32]error{}
	for name, parts := range topics {
		out[name] = map[int32]error{}
		t := c.eng.Topic(name)
		for part, off := range parts {
			switch {
			case t == nil || t.Deleted() || t.Partition(part) == nil:
				out[name][part] = fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, name, part)
			case off < t.Partition(part).LogStartOffset() || off > t.Partition(part).HighWatermark():
				out[name][part] = fmt.Errorf("%w: offset %d of %s-%d is outside %d-%d", kerr.InvalidRequest, off, name, part, t.Partition(part).LogStartOffset(), t.Partition(part).HighWatermark())
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
	sg, err := c.shareGroupFor(group, false)
	if err != nil {
		return nil, err
	}
	keys := c.eng.shares.groupKeys(group)
	if sg == nil && len(keys) == 0 {
		return nil, fmt.Errorf("%w: share group %q", kerr.GroupIDNotFound, group)
	}
	if sg != nil {
		sg.mu.Lock()
		empty := sg.g.Empty()
		sg.mu.Unlock()
		if !empty {
			return nil, fmt.Errorf("%w: share group %q has members; stop them before deleting its offsets", kerr.NonEmptyGroup, group)
		}
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
