package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine/consumergroup"
)

// The online migration of a live group between the classic protocol and
// the KIP-848 consumer protocol, as Kafka does it
// (group.consumer.migration.policy):
//
//   - Upgrade: the first ConsumerGroupHeartbeat (epoch 0) for a classic
//     group with members turns it into a consumer-protocol group. Each
//     classic member stays, with its subscription (its metadata for the
//     group's protocol), its last assignment, and its generation as its
//     epoch; the target is what they own, so nothing moves until the
//     joiner bumps the group epoch. Pending JoinGroup and SyncGroup
//     answers get REBALANCE_IN_PROGRESS.
//   - Classic members of a consumer-protocol group keep using JoinGroup,
//     SyncGroup, Heartbeat and LeaveGroup (consumergroup/classic.go has
//     the state machine; here they are routed to it and made durable).
//   - Downgrade: when the last consumer-protocol member leaves or expires
//     and classic members remain, the group turns back into a classic
//     group at generation = the group epoch, and rebalances at once.
//
// Both directions are refused by the policy "disabled" (and one of them by
// "upgrade" or "downgrade"): then a heartbeat for a classic group with
// members gets GROUP_ID_NOT_FOUND and a classic JoinGroup for a consumer
// group with members INCONSISTENT_GROUP_PROTOCOL, as before.

// MigrationPolicy is Kafka's group.consumer.migration.policy: which
// online migrations between the classic and consumer protocols a live
// group may make.
type MigrationPolicy string

// The migration policies ("" is MigrateBidirectional, Kafka's default).
const (
	MigrateBidirectional MigrationPolicy = "bidirectional"
	MigrateUpgrade       MigrationPolicy = "upgrade"
	MigrateDowngrade     MigrationPolicy = "downgrade"
	MigrateDisabled      MigrationPolicy = "disabled"
)

// ParseMigrationPolicy checks a policy name.
func ParseMigrationPolicy(s string) (MigrationPolicy, error) {
	switch p := MigrationPolicy(strings.ToLower(s)); p {
	case MigrateBidirectional, MigrateUpgrade, MigrateDowngrade, MigrateDisabled:
		return p, nil
	}
	return "", fmt.Errorf("migration policy %q: want bidirectional, upgrade, downgrade or disabled", s)
}

func (p MigrationPolicy) upgrades() bool {
	return p == "" || p == MigrateBidirectional || p == MigrateUpgrade
}

func (p MigrationPolicy) downgrades() bool {
	return p == "" || p == MigrateBidirectional || p == MigrateDowngrade
}

// classicInConsumer reports whether classic requests for g go to its
// consumer-protocol state (g.mu held): it has one with members, and live
// migration is on. An empty one turns back into a classic group instead.
func (g *Group) classicInConsumer() bool {
	return g.coord != nil && g.consumer != nil && (!g.consumer.Empty() || g.consumerWriting) && g.cfg.MigrationPolicy != MigrateDisabled
}

// convertClassic builds the consumer-protocol state of classic group g,
// which has members, for a ConsumerGroupHeartbeat that joins it (g.mu
// and g.consumerWrite held). It changes nothing in g: the caller runs the
// joining heartbeat on the result first, and adopts it (adoptConverted)
// only if that heartbeat is taken, so a refused join leaves the classic
// group as it was.
func (c *Coordinator) convertClassic(g *Group, req consumergroup.Request) (*consumergroup.Group, error) {
	notConsumer := func(why string) error {
		return fmt.Errorf("%w: group %q is a classic group with members and cannot switch to the consumer protocol: %s", kerr.GroupIDNotFound, g.ID, why)
	}
	switch {
	case !c.cfg.MigrationPolicy.upgrades():
		return nil, notConsumer("--group-consumer-migration-policy is " + string(c.cfg.MigrationPolicy) + "; it can once its members all left")
	case g.protocolType != ConsumerTypeName:
		return nil, notConsumer(fmt.Sprintf("its protocol type is %q, not %q", g.protocolType, ConsumerTypeName))
	case c.cfg.Consumer.MaxSize > 0 && len(g.members) >= c.cfg.Consumer.MaxSize:
		return nil, notConsumer(fmt.Sprintf("it has %d members, the most a consumer group may have (--group-consumer-max-size)", len(g.members)))
	case req.Epoch != consumergroup.JoinEpoch || g.members[req.MemberID] != nil:
		// Not under a classic member's id either: it would take over
		// the partitions that member still consumes.
		return nil, fmt.Errorf("%w: group %q has no consumer-protocol member %s", kerr.UnknownMemberID, g.ID, req.MemberID)
	case g.state != StateStable || g.classicWrites > 0:
		// Mid-rebalance the members' assignments are being replaced
		// (CompletingRebalance has none), and a generation being
		// written must land before the consumer records (a replay
		// would take it for a downgrade): the join is retried.
		return nil, fmt.Errorf("%w: group %q is rebalancing (classic protocol); retry", kerr.CoordinatorLoadInProgress, g.ID)
	}
	topics := engineTopics{c.eng}
	cg := consumergroup.New(g.ID, c.cfg.Consumer)
	gen := max(g.generation, 0)
	cg.RestoreEpoch(gen, 0)
	cg.RestoreAssignmentEpoch(gen)
	taken := map[consumergroup.TopicID]map[int32]bool{}
	take := func(name string, parts []int32, into consumergroup.Assignment) {
		id, n, ok := topics.ByName(name)
		if !ok {
			return // deleted since: nobody owns it
		}
		for _, p := range parts {
			// A partition claimed twice (or that does not exist) goes
			// to nobody more: one owner at most.
			if p < 0 || p >= n || taken[id][p] {
				continue
			}
			if taken[id] == nil {
				taken[id] = map[int32]bool{}
			}
			taken[id][p] = true
			into[id] = append(into[id], p)
		}
	}
	members := slices.Collect(maps.Values(g.members))
	sort.Slice(members, func(i, j int) bool { return members[i].joinOrder < members[j].joinOrder })
	subs := make([]kmsg.ConsumerMemberMetadata, len(members))
	assigned := make([]consumergroup.Assignment, len(members))
	for i, m := range members {
		if err := subs[i].ReadFrom(m.metadataFor(g.protocol)); err != nil {
			return nil, notConsumer(fmt.Sprintf("member %s's subscription cannot be read: %v", m.id, err))
		}
		assigned[i] = consumergroup.Assignment{}
		if len(m.assignment) > 0 {
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(m.assignment); err != nil {
				return nil, notConsumer(fmt.Sprintf("member %s's assignment cannot be read: %v", m.id, err))
			}
			for _, t := range a.Topics {
				take(t.Topic, t.Partitions, assigned[i])
			}
		}
	}
	for i, m := range members {
		// What a cooperative member said it owned when it joined this
		// generation, and was not given again, it may still be giving
		// up: it stays its own (revoking) until it rejoins without it.
		revoking := consumergroup.Assignment{}
		for _, t := range subs[i].OwnedPartitions {
			take(t.Topic, t.Partitions, revoking)
		}
		rec := consumergroup.MemberRecord{ID: m.id, InstanceID: deref(m.instanceID), RackID: deref(subs[i].Rack), ClientID: m.clientID, ClientHost: m.clientHost,
			Topics: subs[i].Topics, RebalanceTimeout: m.rebalanceTimeout, Epoch: gen, PreviousEpoch: gen, State: consumergroup.Stable,
			Assigned: consumergroup.Normalize(assigned[i]), Revoking: consumergroup.Normalize(revoking),
			Classic: &consumergroup.ClassicMeta{SessionTimeout: m.sessionTimeout, Protocols: slices.Clone(m.protocols)}}
		if rec.Revoking.Len() > 0 {
			rec.State = consumergroup.UnrevokedPartitions
		}
		cg.RestoreMemberMetadata(rec)
		cg.RestoreMemberAssignment(rec)
		cg.RestoreTarget(m.id, rec.Assigned)
	}
	if err := cg.Loaded(c.sched.Now()); err != nil {
		return nil, notConsumer(err.Error())
	}
	return cg, nil
}

// adoptConverted makes cg, from convertClassic, g's state: the classic
// group ends (its waiters rejoin, its timers stop), and the whole
// consumer state is written with the heartbeat that made it (g.mu and
// g.consumerWrite held).
func (c *Coordinator) adoptConverted(g *Group, cg *consumergroup.Group, joiner string) {
	rejoin := fmt.Errorf("%w: group %q switched to the consumer protocol; rejoin", kerr.RebalanceInProgress, g.ID)
	for _, m := range g.members {
		if m.joinDone != nil {
			jd, id := m.joinDone, m.id
			g.later(func() { jd(JoinResult{Err: rejoin, MemberID: id, Generation: -1}) })
			m.joinDone = nil
		}
		if m.syncDone != nil {
			sd := m.syncDone
			g.later(func() { sd(SyncResult{Err: rejoin}) })
			m.syncDone = nil
		}
		if m.session != nil {
			m.session.Stop()
			m.session = nil
		}
	}
	g.stopTimers()
	for id, t := range g.pending {
		t.Stop()
		delete(g.pending, id)
	}
	n := len(g.members)
	g.members, g.static = map[string]*member{}, map[string]string{}
	g.consumer, g.consumerUnsaved = cg, true // the whole state is written with this heartbeat
	g.protocolType, g.protocol, g.leader, g.generation = ConsumerTypeName, "", "", 0
	g.setState(StateEmpty)
	c.eng.logger.Info("group switched to the consumer protocol (KIP-848) with its members", "group", g.ID, "members", n, "epoch", cg.Epoch(), "why", "member "+joiner+" joined with ConsumerGroupHeartbeat")
}

// classicJoinConsumer handles a JoinGroup for a consumer-protocol group
// with members (g.mu and g.consumerWrite held; it unlocks g.mu).
func (c *Coordinator) classicJoinConsumer(g *Group, req JoinRequest, done func(JoinResult)) {
	answer := func(res JoinResult) {
		g.unlock()
		done(res)
	}
	fail := func(err error) { answer(JoinResult{Err: err, MemberID: req.MemberID, Generation: -1}) }
	cg := g.consumer
	if err := g.consumerBusy(); err != nil {
		fail(err)
		return
	}
	if req.ProtocolType != ConsumerTypeName || len(req.Protocols) == 0 {
		fail(fmt.Errorf("%w: group %q uses the consumer protocol; a classic member must join with protocol type %q", kerr.InconsistentGroupProtocol, g.ID, ConsumerTypeName))
		return
	}
	if err := g.checkTimeouts(&req); err != nil {
		fail(err)
		return
	}
	id := req.MemberID
	switch m := cg.Member(id); {
	case id == "" && req.RequireKnownMemberID && req.InstanceID == nil:
		id = newMemberID(req.ClientID)
		g.pending[id] = g.sched.AfterFunc(req.SessionTimeout, func() {
			g.mu.Lock()
			defer g.unlock()
			if _, ok := g.pending[id]; ok {
				delete(g.pending, id)
				g.maybeCompleteJoin() // the group may be classic again by now
			}
		})
		answer(JoinResult{Err: fmt.Errorf("%w: rejoin with the member id given", kerr.MemberIDRequired), MemberID: id, Generation: -1})
		return
	case id == "":
		id = newMemberID(req.ClientID)
	case req.InstanceID != nil && cg.StaticMember(*req.InstanceID) != "" && cg.StaticMember(*req.InstanceID) != id:
		fail(fmt.Errorf("%w: instance %q is member %s now", kerr.FencedInstanceID, *req.InstanceID, cg.StaticMember(*req.InstanceID)))
		return
	case m != nil:
		if m.Classic == nil {
			fail(fmt.Errorf("%w: member %s of group %q speaks the consumer protocol", kerr.UnknownMemberID, id, g.ID))
			return
		}
	default:
		t, ok := g.pending[id]
		if !ok {
			fail(fmt.Errorf("%w: %s is not a member of %q", kerr.UnknownMemberID, id, g.ID))
			return
		}
		t.Stop()
		delete(g.pending, id)
	}
	// One protocol must be supported by every classic member, the
	// joiner too, so that the group can turn back into a classic group.
	common := map[string]bool{}
	for _, p := range req.Protocols {
		common[p.Name] = true
	}
	replaced := "" // a static member this join replaces does not count
	if req.InstanceID != nil {
		replaced = cg.StaticMember(*req.InstanceID)
	}
	for _, o := range cg.Members() {
		if o.Classic == nil || o.ID == id || o.ID == replaced {
			continue
		}
		for name := range common {
			if !slices.ContainsFunc(o.Classic.Protocols, func(q consumergroup.ClassicProtocol) bool { return q.Name == name }) {
				delete(common, name)
			}
		}
	}
	if len(common) == 0 {
		fail(fmt.Errorf("%w: no protocol of the member's is supported by every classic member of group %q", kerr.InconsistentGroupProtocol, g.ID))
		return
	}
	var sub kmsg.ConsumerMemberMetadata
	if err := sub.ReadFrom(req.Protocols[0].Metadata); err != nil {
		fail(fmt.Errorf("%w: the member's subscription (protocol %q) cannot be read: %v", kerr.InconsistentGroupProtocol, req.Protocols[0].Name, err))
		return
	}
	topics := engineTopics{c.eng}
	owned := consumergroup.Assignment{}
	for _, t := range sub.OwnedPartitions {
		if tid, _, ok := topics.ByName(t.Topic); ok {
			owned[tid] = append(owned[tid], t.Partitions...)
		}
	}
	j := consumergroup.ClassicJoin{MemberID: id, InstanceID: deref(req.InstanceID), RackID: deref(sub.Rack), ClientID: req.ClientID, ClientHost: req.ClientHost,
		SessionTimeout: req.SessionTimeout, RebalanceTimeout: req.RebalanceTimeout, Protocols: req.Protocols,
		Topics: sub.Topics, Owned: consumergroup.Normalize(owned)}
	g.consumer.SetTimeouts(c.consumerTimeouts(g.ID))
	epoch, err := cg.JoinClassic(c.sched.Now(), topics, j)
	ch := cg.TakeChanges(g.consumerUnsaved)
	g.consumerWriting = !ch.Empty()
	c.armConsumerTimer(g)
	g.unlock()
	if werr := c.writeConsumer(g, cg, ch); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		done(JoinResult{Err: err, MemberID: id, Generation: -1})
		return
	}
	done(JoinResult{Generation: epoch, ProtocolType: ConsumerTypeName, Protocol: req.Protocols[0].Name, MemberID: id})
	c.maybeDowngrade(g) // a static classic member may have replaced the last consumer-protocol one
}

// consumerBusy refuses a request while g's consumer state is being
// loaded, or g is no longer coordinated here (g.mu held).
func (g *Group) consumerBusy() error {
	switch {
	case g.detached.Load():
		return errDetached(g)
	case g.consumerLoading:
		return fmt.Errorf("%w: group %q is being loaded", kerr.CoordinatorLoadInProgress, g.ID)
	}
	return nil
}

// classicHeartbeatConsumer handles a Heartbeat for a consumer-protocol
// group with members (g.mu held).
func (c *Coordinator) classicHeartbeatConsumer(g *Group, memberID string, instanceID *string, generation int32) error {
	if err := g.consumerBusy(); err != nil {
		return err
	}
	err := g.consumer.HeartbeatClassic(c.sched.Now(), memberID, instanceID, generation)
	c.armConsumerTimer(g)
	return err
}

// classicSyncConsumer handles a SyncGroup for a consumer-protocol group
// with members (g.mu held).
func (c *Coordinator) classicSyncConsumer(g *Group, req SyncRequest) SyncResult {
	if err := g.consumerBusy(); err != nil {
		return SyncResult{Err: err}
	}
	cg := g.consumer
	m := cg.Member(req.MemberID)
	asg, err := cg.SyncClassic(c.sched.Now(), req.MemberID, req.InstanceID, req.Generation)
	c.armConsumerTimer(g)
	if err != nil {
		return SyncResult{Err: err}
	}
	first := m.Classic.Protocols[0]
	if req.ProtocolType != nil && *req.ProtocolType != ConsumerTypeName || req.Protocol != nil && *req.Protocol != first.Name {
		return SyncResult{Err: fmt.Errorf("%w: the member joined with %s/%s", kerr.InconsistentGroupProtocol, ConsumerTypeName, first.Name)}
	}
	return SyncResult{ProtocolType: ConsumerTypeName, Protocol: first.Name, Assignment: g.encodeAssignment(asg, first.Metadata)}
}

// encodeAssignment is a consumer-protocol assignment in the classic
// protocol's embedded form, in the version of the member's subscription.
func (g *Group) encodeAssignment(a consumergroup.Assignment, subscription []byte) []byte {
	version := int16(0)
	if len(subscription) >= 2 {
		version = min(max(int16(subscription[0])<<8|int16(subscription[1]), 0), 3)
	}
	out := kmsg.ConsumerMemberAssignment{Version: version}
	for _, id := range a.TopicIDs() {
		name := g.topics.name(id)
		if name == "" {
			continue
		}
		out.Topics = append(out.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: name, Partitions: slices.Clone(a[id])})
	}
	slices.SortFunc(out.Topics, func(x, y kmsg.ConsumerMemberAssignmentTopic) int { return strings.Compare(x.Topic, y.Topic) })
	return out.AppendTo(nil)
}

// classicLeaveConsumer handles a LeaveGroup for a consumer-protocol group
// with members (g.mu and g.consumerWrite held; it unlocks g.mu).
func (c *Coordinator) classicLeaveConsumer(g *Group, members []LeaveMember) []error {
	cg := g.consumer
	errs := make([]error, len(members))
	if err := g.consumerBusy(); err != nil {
		g.unlock()
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, lm := range members {
		if t, ok := g.pending[lm.MemberID]; ok && lm.InstanceID == nil {
			t.Stop()
			delete(g.pending, lm.MemberID)
			continue
		}
		errs[i] = cg.LeaveClassic(lm.MemberID, lm.InstanceID)
	}
	ch := cg.TakeChanges(g.consumerUnsaved)
	g.consumerWriting = !ch.Empty()
	c.armConsumerTimer(g)
	g.unlock()
	if err := c.writeConsumer(g, cg, ch); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	return errs
}

// maybeDowngrade turns g back into a classic group when its last
// consumer-protocol member is gone and classic members remain (g.mu not
// held, g.consumerWrite held): the classic members keep their ids and
// assignments, and rejoin at once for a classic generation.
func (c *Coordinator) maybeDowngrade(g *Group) {
	g.mu.Lock()
	cg := g.consumer
	if cg == nil || g.detached.Load() || !cg.OnlyClassic() || !c.cfg.MigrationPolicy.downgrades() ||
		(c.cfg.MaxSize > 0 && len(cg.Members()) > c.cfg.MaxSize) {
		g.unlock()
		return
	}
	members := cg.Members()
	removed := cg.TakeChanges(true).Removed // every persisted member: all of their records go
	for _, m := range members {
		removed = append(removed, m.ID)
	}
	slices.Sort(removed)
	removed = slices.Compact(removed)
	if g.consumerTimer != nil {
		g.consumerTimer.Stop()
		g.consumerTimer = nil
	}
	g.consumer, g.consumerUnsaved = nil, false
	g.protocolType, g.generation = ConsumerTypeName, cg.Epoch()
	g.members, g.static = map[string]*member{}, map[string]string{}
	for _, m := range members {
		g.joinSeq++
		cm := &member{id: m.ID, clientID: m.ClientID, clientHost: m.ClientHost, sessionTimeout: m.Classic.SessionTimeout,
			rebalanceTimeout: m.RebalanceTimeout, protocolType: ConsumerTypeName, joinOrder: g.joinSeq}
		cm.protocols = slices.Clone(m.Classic.Protocols)
		if m.InstanceID != "" {
			inst := m.InstanceID
			cm.instanceID = &inst
			g.static[inst] = m.ID
		}
		cm.assignment = g.encodeAssignment(m.Assigned, cm.protocols[0].Metadata)
		g.members[m.ID] = cm
	}
	g.protocol = g.selectProtocol()
	g.leader = g.firstMember().id
	g.setState(StateStable)
	snap := g.snapshot() // the classic group, written with the tombstones
	for _, m := range g.members {
		g.touch(m)
	}
	g.downgraded, g.downgradeFloor = g.generation, g.generation
	for _, m := range members {
		g.downgradeFloor = min(g.downgradeFloor, m.Epoch)
	}
	g.prepareRebalance("the last consumer-protocol member left: back to the classic protocol")
	c.eng.logger.Info("group switched back to the classic protocol", "group", g.ID, "members", len(members), "generation", g.generation)
	g.unlock()
	recs := make([]kv, 0, 3*len(removed)+3)
	for _, id := range removed {
		for _, typ := range []int16{recConsumerCurrent, recConsumerTarget, recConsumerMember} {
			recs = append(recs, kv{key: consumerKey{typ: typ, group: g.ID, member: id}.append(nil)})
		}
	}
	for _, typ := range []int16{recConsumerTargetMD, recConsumerGroup} {
		recs = append(recs, kv{key: consumerKey{typ: typ, group: g.ID}.append(nil)})
	}
	// Then the classic group with its members: a coordinator that loads
	// the group before its next generation is stored still has them.
	recs = append(recs, groupMetadataRecord(g.ID, snap))
	if err := c.write(g.ID, recs); err != nil {
		// The next classic generation's record, with members, ends the
		// consumer state in the log too (restore).
		c.eng.logger.Warn("could not store a group's switch back to the classic protocol; until its next generation is stored, a coordinator that loads it sees its consumer-protocol state", "group", g.ID, "err", err)
	}
}
