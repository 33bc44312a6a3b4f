package engine

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine/consumergroup"
)

// The KIP-848 consumer protocol (ConsumerGroupHeartbeat) on the group
// coordinator. The protocol's state machine is package consumergroup; this
// file gives it a group (Group.consumer), the clock, the topics, and a
// timer for its session and rebalance deadlines, under Group.mu.
//
// An empty classic group (only committed offsets) becomes a consumer
// group on its first heartbeat, and an empty consumer group becomes
// classic again on its first JoinGroup. A group with members switches
// live, as Kafka's group.consumer.migration.policy allows (migrate.go):
// classic members then live on in the consumer group until the last
// consumer-protocol member leaves.

// ConsumerTypeName is the protocol type of a consumer-protocol group, and
// its type in ListGroups.
const ConsumerTypeName = "consumer"

// engineTopics is the consumer groups' view of the engine's topics.
type engineTopics struct{ e *Engine }

// view is t as consumergroup.Topics, nil without an engine.
func (t engineTopics) view() consumergroup.Topics {
	if t.e == nil {
		return nil
	}
	return t
}

// name is a topic's name by id ("" when unknown).
func (t engineTopics) name(id consumergroup.TopicID) string {
	if t.e == nil {
		return ""
	}
	if tp := t.e.TopicByID(TopicID(id)); tp != nil {
		return tp.Name
	}
	return ""
}

func (t engineTopics) ByName(name string) (consumergroup.TopicID, int32, bool) {
	tp := t.e.Topic(name)
	if tp == nil || tp.Deleted() {
		return consumergroup.TopicID{}, 0, false
	}
	return consumergroup.TopicID(tp.ID), int32(len(tp.Partitions())), true
}

func (t engineTopics) Version() uint64 { return t.e.TopicsGeneration() }

func (t engineTopics) Names() []string {
	ts := t.e.Topics()
	out := make([]string, 0, len(ts))
	for _, tp := range ts {
		if !tp.Deleted() {
			out = append(out, tp.Name)
		}
	}
	return out
}

// ConsumerHeartbeat handles a ConsumerGroupHeartbeat for groupID.
func (c *Coordinator) ConsumerHeartbeat(groupID string, req consumergroup.Request) (consumergroup.Response, error) {
	if err := consumergroup.Validate(c.cfg.Consumer, &req); err != nil {
		return consumergroup.Response{}, err // before a join creates the group
	}
	g, err := c.Group(groupID, req.Epoch == consumergroup.JoinEpoch)
	if err != nil {
		return consumergroup.Response{}, err
	}
	if g == nil {
		return consumergroup.Response{}, fmt.Errorf("%w: group %q does not exist (it may have expired); join again", kerr.UnknownMemberID, groupID)
	}
	// One change of the group's consumer state at a time, from the
	// heartbeat (or expiry) that makes it until its records are durable;
	// g.mu itself is not held across the write (the offsets partition's
	// shard takes it when it replays a load).
	g.consumerWrite.Lock()
	defer g.consumerWrite.Unlock()
	if err := c.checkCoordinator(groupID); err != nil {
		return consumergroup.Response{}, err // the partition moved since: g may predate the move
	}
	g.mu.Lock()
	cg, resp, ch, err := c.consumerHeartbeatLocked(g, req)
	g.unlock()
	if werr := c.writeConsumer(g, cg, ch); werr != nil && err == nil {
		// The member must not act on an answer that is not durable: a
		// coordinator that loads the group would not know it.
		resp, err = consumergroup.Response{}, werr
	}
	if err == nil && req.Epoch < 0 {
		c.maybeDowngrade(g) // it may have been the last consumer-protocol member
	}
	return resp, err
}

// consumerHeartbeatLocked is ConsumerHeartbeat's part under g.mu: it
// returns the consumer state it changed and the changes to write.
func (c *Coordinator) consumerHeartbeatLocked(g *Group, req consumergroup.Request) (*consumergroup.Group, consumergroup.Response, consumergroup.Changes, error) {
	switch {
	case g.detached.Load():
		return nil, consumergroup.Response{}, consumergroup.Changes{}, errDetached(g)
	case g.consumerLoading:
		return nil, consumergroup.Response{}, consumergroup.Changes{}, fmt.Errorf("%w: group %q is being loaded", kerr.CoordinatorLoadInProgress, g.ID)
	case g.state == StateDead:
		return nil, consumergroup.Response{}, consumergroup.Changes{}, fmt.Errorf("%w: group %q is being deleted", kerr.CoordinatorNotAvailable, g.ID)
	}
	if g.consumer == nil && len(g.members) > 0 {
		return c.upgradeHeartbeatLocked(g, req)
	}
	if g.consumer == nil {
		if req.Epoch != consumergroup.JoinEpoch {
			return nil, consumergroup.Response{}, consumergroup.Changes{}, fmt.Errorf("%w: group %q has no member %s", kerr.UnknownMemberID, g.ID, req.MemberID)
		}
		for id, t := range g.pending {
			// Told MEMBER_ID_REQUIRED: they rejoin a consumer group.
			t.Stop()
			delete(g.pending, id)
		}
		g.consumer = consumergroup.New(g.ID, c.cfg.Consumer)
		g.protocolType, g.protocol, g.generation = ConsumerTypeName, "", 0
		defer func() {
			if g.consumer != nil && g.consumer.Empty() && g.consumer.Epoch() == 0 {
				// The join that would have made it one was refused:
				// nothing was written, the group stays as it was.
				g.consumer, g.protocolType = nil, ""
			}
		}()
	}
	g.consumer.SetTimeouts(c.consumerTimeouts(g.ID))
	before := g.consumer.AssignmentEpoch()
	resp, err := g.consumer.Heartbeat(c.sched.Now(), engineTopics{c.eng}, req)
	if cg := g.consumer; cg.AssignmentEpoch() != before && !cg.Empty() {
		c.eng.logger.Info("consumer group assignment", "group", g.ID, "epoch", cg.Epoch(), "assignor", cg.Assignor(),
			"members", len(cg.Members()), "topics", len(cg.SubscribedTopics(nil)), "why", "member "+req.MemberID)
	}
	ch := g.consumer.TakeChanges(g.consumerUnsaved)
	g.consumerWriting = !ch.Empty()
	c.armConsumerTimer(g)
	return g.consumer, resp, ch, err
}

// upgradeHeartbeatLocked is consumerHeartbeatLocked for a join of a
// classic group with members: the join is run on the converted state, and
// the group switches only if it is taken (migrate.go).
func (c *Coordinator) upgradeHeartbeatLocked(g *Group, req consumergroup.Request) (*consumergroup.Group, consumergroup.Response, consumergroup.Changes, error) {
	cg, err := c.convertClassic(g, req)
	if err != nil {
		return nil, consumergroup.Response{}, consumergroup.Changes{}, err
	}
	cg.SetTimeouts(c.consumerTimeouts(g.ID))
	resp, err := cg.Heartbeat(c.sched.Now(), engineTopics{c.eng}, req)
	if err != nil {
		return nil, consumergroup.Response{}, consumergroup.Changes{}, err // the classic group stays as it was
	}
	c.adoptConverted(g, cg, req.MemberID)
	ch := cg.TakeChanges(true)
	g.consumerWriting = !ch.Empty()
	c.armConsumerTimer(g)
	return cg, resp, ch, nil
}

// writeConsumer writes the changes ch of g's consumer state cg to
// __consumer_offsets and waits until they are durable (g.consumerWrite
// held, g.mu not). A failed write makes the next one write the whole
// state.
func (c *Coordinator) writeConsumer(g *Group, cg *consumergroup.Group, ch consumergroup.Changes) error {
	if cg == nil || ch.Empty() {
		return nil
	}
	var err error
	if g.detached.Load() {
		err = errDetached(g)
	} else {
		err = c.write(g.ID, consumerRecords(g.ID, ch))
	}
	g.mu.Lock()
	defer g.unlock()
	g.consumerWriting = false
	if g.consumer != cg {
		return err // the group changed protocol meanwhile
	}
	if err != nil {
		g.consumerUnsaved = true
		cg.NotPersisted(ch)
		return err
	}
	cg.Persisted(ch)
	g.consumerUnsaved = false
	c.armConsumerTimer(g)
	return nil
}

// errDetached answers a request that reached a group this broker stopped
// coordinating while the request waited for it.
func errDetached(g *Group) error {
	return fmt.Errorf("%w: group %q is no longer coordinated here", kerr.NotCoordinator, g.ID)
}

// armConsumerTimer sets g's one timer to its consumer state's next
// session or rebalance deadline (g.mu held).
func (c *Coordinator) armConsumerTimer(g *Group) {
	if g.consumerTimer != nil {
		g.consumerTimer.Stop()
		g.consumerTimer = nil
	}
	if g.consumer == nil || g.detached.Load() {
		return
	}
	next := g.consumer.NextDeadline()
	if next.IsZero() {
		return
	}
	cg := g.consumer
	var t Timer
	t = g.sched.AfterFunc(next.Sub(g.sched.Now()), func() {
		g.consumerWrite.Lock()
		defer g.consumerWrite.Unlock()
		g.mu.Lock()
		if g.consumer != cg || g.consumerTimer != t || g.detached.Load() {
			g.unlock()
			return // replaced, re-armed or dropped since
		}
		g.consumerTimer = nil
		gone := cg.Expire(g.sched.Now())
		if len(gone) > 0 {
			c.eng.logger.Info("consumer group members expired", "group", g.ID, "members", gone)
		}
		ch := cg.TakeChanges(g.consumerUnsaved)
		g.consumerWriting = !ch.Empty()
		c.armConsumerTimer(g)
		g.unlock()
		if err := c.writeConsumer(g, cg, ch); err != nil {
			c.eng.logger.Warn("could not store a consumer group's expired members; retried with its next change", "group", g.ID, "err", err)
		}
		if len(gone) > 0 {
			c.maybeDowngrade(g) // its records end the consumer state whatever the write above did
		}
	})
	g.consumerTimer = t
}

// ConsumerGroup returns a copy of what ConsumerGroupDescribe shows of a
// consumer-protocol group; ok is false for a classic or unknown group.
func (c *Coordinator) ConsumerGroup(groupID string) (d ConsumerGroupDescription, ok bool, err error) {
	g, err := c.Group(groupID, false)
	if err != nil || g == nil {
		return d, false, err
	}
	g.mu.Lock()
	defer g.unlock()
	if g.consumer == nil {
		return d, false, nil
	}
	cg := g.consumer
	d = ConsumerGroupDescription{ID: g.ID, State: cg.State(), Epoch: cg.Epoch(), AssignmentEpoch: cg.AssignmentEpoch(), Assignor: cg.Assignor()}
	for _, m := range cg.Members() {
		d.Members = append(d.Members, ConsumerMemberDescription{
			MemberID: m.ID, InstanceID: m.InstanceID, RackID: m.RackID, ClientID: m.ClientID, ClientHost: m.ClientHost,
			Epoch: m.Epoch, State: m.State, Topics: slices.Clone(m.Topics), Regex: m.Regex,
			Assigned: m.Assigned.Clone(), Target: cg.Target(m.ID).Clone(), Classic: m.Classic != nil,
		})
	}
	return d, true, nil
}

// ConsumerGroupDescription is a consumer-protocol group as
// ConsumerGroupDescribe reports it.
type ConsumerGroupDescription struct {
	ID              string
	State           string
	Epoch           int32
	AssignmentEpoch int32
	Assignor        string
	Members         []ConsumerMemberDescription
}

// ConsumerMemberDescription is one member of a consumer-protocol group.
type ConsumerMemberDescription struct {
	MemberID   string
	InstanceID string
	RackID     string
	ClientID   string
	ClientHost string
	Epoch      int32
	State      consumergroup.MemberState
	Topics     []string
	Regex      string
	Assigned   consumergroup.Assignment
	Target     consumergroup.Assignment
	// Classic: the member speaks the classic protocol (the group is
	// migrating between the protocols).
	Classic bool
}

// errConsumerGroup refuses a classic request on a consumer-protocol group
// that has members (or whose last change is still being written: retry).
func (g *Group) errConsumerGroup() error {
	if g.consumerWriting {
		return fmt.Errorf("%w: group %q's last consumer-protocol change is being written; retry", kerr.CoordinatorLoadInProgress, g.ID)
	}
	return fmt.Errorf("%w: group %q uses the consumer protocol (KIP-848) and has members; a classic member can join once they all left", kerr.InconsistentGroupProtocol, g.ID)
}

// leaveConsumerProtocol turns an empty consumer-protocol group back into a
// classic one (g.mu held); false if it has members, or a change of its
// consumer state is still being written (the caller refuses then).
func (g *Group) leaveConsumerProtocol() bool {
	if g.consumer == nil {
		return true
	}
	if !g.consumer.Empty() || g.consumerWriting {
		return false
	}
	if g.consumerTimer != nil {
		g.consumerTimer.Stop()
		g.consumerTimer = nil
	}
	g.consumer = nil
	g.protocolType, g.protocol = "", ""
	return true
}

// consumerDescribe is the classic DescribeGroups view of a consumer
// group (g.mu held): members with their subscription and assignment in
// the consumer protocol's embedded formats, so tools that only speak the
// classic API still see who consumes what.
func (g *Group) consumerDescribe() GroupDescription {
	cg := g.consumer
	d := GroupDescription{ID: g.ID, State: GroupState(cg.State()), ProtocolType: ConsumerTypeName, Protocol: cg.Assignor(), Generation: cg.Epoch(), Type: ConsumerTypeName}
	for _, m := range cg.Members() {
		md := MemberDescription{MemberID: m.ID, ClientID: m.ClientID, ClientHost: m.ClientHost}
		if m.InstanceID != "" {
			inst := m.InstanceID
			md.InstanceID = &inst
		}
		if m.Classic != nil {
			md.Metadata = m.Classic.Protocols[0].Metadata // its own subscription
		} else {
			sub := kmsg.ConsumerMemberMetadata{Version: 0, Topics: slices.Clone(m.Topics)}
			md.Metadata = sub.AppendTo(nil)
		}
		md.Assignment = g.encodeAssignment(m.Assigned, md.Metadata)
		d.Members = append(d.Members, md)
	}
	return d
}

// checkConsumerCommit validates an offset commit's member and epoch for a
// consumer-protocol group, and its partitions (g.mu held; see
// consumergroup.CheckCommitPartitions). A commit with no member id and a
// negative epoch is an admin commit, allowed while the group is empty.
func (g *Group) checkConsumerCommit(memberID string, epoch int32, parts []consumergroup.TopicPartition) ([]bool, error) {
	if memberID == "" && epoch < 0 {
		if !g.consumer.Empty() {
			return nil, fmt.Errorf("%w: group %q has active members; commit as one of them", kerr.UnknownMemberID, g.ID)
		}
		return nil, nil
	}
	return g.consumer.CheckCommitPartitions(memberID, epoch, parts)
}

// commitParts names each commit's partition by its topic's id (a zero id
// for a topic that does not exist: no member owns it).
func (c *Coordinator) commitParts(commits []OffsetCommit) []consumergroup.TopicPartition {
	parts := make([]consumergroup.TopicPartition, len(commits))
	for i, cm := range commits {
		parts[i].Partition = cm.Partition
		if t := c.eng.Topic(cm.Topic); t != nil {
			parts[i].Topic = consumergroup.TopicID(t.ID)
		}
	}
	return parts
}

// dropStale answers the commits stale marks STALE_MEMBER_EPOCH and
// returns the others, with where each stands in commits.
func dropStale(commits []OffsetCommit, stale []bool, errs []error) (kept []OffsetCommit, at []int) {
	for i, cm := range commits {
		if stale != nil && stale[i] {
			errs[i] = fmt.Errorf("%w: %s-%d is not owned by the member since the epoch it sent", kerr.StaleMemberEpoch, cm.Topic, cm.Partition)
			continue
		}
		kept = append(kept, cm)
		at = append(at, i)
	}
	return kept, at
}

// CheckFetchMember validates the member id and epoch an OffsetFetch (v9+)
// names: for a consumer-protocol group the member must exist with that
// epoch; classic groups and requests without a member are not checked.
func (c *Coordinator) CheckFetchMember(groupID string, memberID *string, epoch int32) error {
	if memberID == nil || *memberID == "" {
		return nil
	}
	g, err := c.Group(groupID, false)
	if err != nil || g == nil {
		return err
	}
	g.mu.Lock()
	defer g.unlock()
	if g.consumer == nil {
		return nil
	}
	return g.consumer.CheckOffsetCommit(*memberID, epoch)
}
