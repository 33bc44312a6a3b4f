package engine

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine/consumergroup"
)

// The classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup), as a state machine per group:
//
//	            join (first member)                 all members joined,
//	  Empty ─────────────────────────▶ Preparing ─── or rebalance timeout ──▶ Completing
//	    ▲                              Rebalance                              Rebalance
//	    │ last member leaves/expires     ▲   ▲                                    │
//	    └────────────────────────────────┘   │ join with new metadata,            │ leader's
//	                                         │ leave, session expiry,             │ SyncGroup
//	                                         │ leader rejoin                      ▼
//	                                         └─────────────────────────────── Stable
//
// A generation is one round of that cycle: PreparingRebalance collects
// JoinGroups (every known member must rejoin within the rebalance timeout,
// the first round of a new group also waits group.initial.rebalance.delay.ms
// so a starting fleet joins as one generation instead of a storm of them),
// then the generation number grows, a protocol every member supports is
// chosen, the leader gets every member's metadata and computes the
// assignment, and SyncGroup hands each member its part. Heartbeats keep a
// member alive for its session timeout; a member that stops is removed and
// the others rebalance. Static members (group.instance.id) keep their
// assignment across restarts without a rebalance.
//
// Invariants (checked by the randomized test): at most one generation is
// being formed at a time, generations only grow, and within a generation
// every partition is assigned to at most one member (the leader's
// assignment is handed out as given, each member gets only its own part).
//
// Concurrency: a Group is guarded by its mutex; timers lock it too.
// Completion callbacks run after the mutex is released. A consumer-protocol
// group's changes are serialized by consumerWrite (taken before the
// mutex) until their records are written; the mutex is not held across a
// write.

// GroupState is a group's state, named as DescribeGroups reports it.
type GroupState string

// The classic group states.
const (
	StateEmpty               GroupState = "Empty"
	StatePreparingRebalance  GroupState = "PreparingRebalance"
	StateCompletingRebalance GroupState = "CompletingRebalance"
	StateStable              GroupState = "Stable"
	StateDead                GroupState = "Dead"
)

// Scheduler is the state machine's clock and timers (tests replace it).
type Scheduler interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending timer.
type Timer interface{ Stop() bool }

type realScheduler struct{}

func (realScheduler) Now() time.Time                            { return time.Now() }
func (realScheduler) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// GroupConfig holds the broker-wide group settings.
type GroupConfig struct {
	MinSessionTimeout     time.Duration // group.min.session.timeout.ms
	MaxSessionTimeout     time.Duration // group.max.session.timeout.ms
	InitialRebalanceDelay time.Duration // group.initial.rebalance.delay.ms
	MaxSize               int           // group.max.size
	// Consumer holds the settings of KIP-848 consumer-protocol groups.
	Consumer consumergroup.Config
	// Share holds the settings of KIP-932 share groups.
	Share ShareConfig
	// MigrationPolicy is which live groups may switch between the
	// classic and consumer protocols (group.consumer.migration.policy;
	// migrate.go).
	MigrationPolicy MigrationPolicy
	// MaxMetadataBytes bounds the protocol metadata (subscriptions) all
	// of a group's members hold: a JoinGroup past it is refused
	// GROUP_MAX_SIZE_REACHED, so members cannot make the coordinator
	// keep request-sized metadata each without bound. 0: 16 MiB.
	MaxMetadataBytes int
}

// defaultGroupMetadataBytes is GroupConfig.MaxMetadataBytes's default.
const defaultGroupMetadataBytes = 16 << 20

func (c GroupConfig) maxMetadataBytes() int {
	if c.MaxMetadataBytes > 0 {
		return c.MaxMetadataBytes
	}
	return defaultGroupMetadataBytes
}

// protocolsBytes is what a member's protocols take.
func protocolsBytes(ps []Protocol) int {
	n := 0
	for _, p := range ps {
		n += len(p.Name) + len(p.Metadata)
	}
	return n
}

// metadataBytesWith is the protocol metadata the group's members would
// hold with member id's (new, if "" or unknown) replaced by ps (g.mu held).
func (g *Group) metadataBytesWith(id string, ps []Protocol) int {
	n := protocolsBytes(ps)
	for mid, m := range g.members {
		if mid != id {
			n += protocolsBytes(m.protocols)
		}
	}
	return n
}

// Protocol is one assignor a member supports, with its metadata (the
// consumer-protocol state keeps a classic member's as they are).
type Protocol = consumergroup.ClassicProtocol

// JoinRequest is a member's JoinGroup.
type JoinRequest struct {
	MemberID         string
	InstanceID       *string
	ClientID         string
	ClientHost       string
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	ProtocolType     string
	Protocols        []Protocol
	// RequireKnownMemberID: JoinGroup v4+ answers a member without an id
	// with MEMBER_ID_REQUIRED and the id to rejoin with.
	RequireKnownMemberID bool
}

// JoinMember is a member as the leader sees it in the JoinGroup answer.
type JoinMember struct {
	MemberID   string
	InstanceID *string
	Metadata   []byte
}

// JoinResult answers a JoinGroup.
type JoinResult struct {
	Err            error
	Generation     int32
	ProtocolType   string
	Protocol       string
	LeaderID       string
	MemberID       string
	Members        []JoinMember // only for the leader
	SkipAssignment bool         // a static leader rejoined a stable group
}

// SyncRequest is a member's SyncGroup.
type SyncRequest struct {
	MemberID     string
	InstanceID   *string
	Generation   int32
	ProtocolType *string
	Protocol     *string
	Assignments  map[string][]byte // from the leader
}

// SyncResult answers a SyncGroup.
type SyncResult struct {
	Err          error
	ProtocolType string
	Protocol     string
	Assignment   []byte
}

// LeaveMember identifies a member leaving.
type LeaveMember struct {
	MemberID   string
	InstanceID *string
}

type member struct {
	id               string
	instanceID       *string
	clientID         string
	clientHost       string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocolType     string
	protocols        []Protocol
	assignment       []byte
	joinDone         func(JoinResult)
	syncDone         func(SyncResult)
	session          Timer
	joinOrder        uint64
}

func (m *member) metadataFor(proto string) []byte {
	for _, p := range m.protocols {
		if p.Name == proto {
			return p.Metadata
		}
	}
	return nil
}

// Group is one consumer group's membership state and committed offsets.
type Group struct {
	ID string

	mu           sync.Mutex
	cfg          *GroupConfig
	sched        Scheduler
	onStable     func(g *Group, snap GroupSnapshot, done func(error)) // persist a generation
	state        GroupState
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	pending      map[string]Timer  // member ids handed out, awaiting rejoin
	static       map[string]string // instance id -> member id
	joinSeq      uint64
	rebalance    Timer // join completion (or initial delay) timer
	syncTimer    Timer // leader's SyncGroup deadline
	initialEnd   time.Time
	stateSince   time.Time
	offsets      map[TopicPartition]CommittedOffset
	completions  []func()

	// consumer is the KIP-848 state of a consumer-protocol group (nil
	// for a classic group), consumerTimer its deadline timer, topics the
	// engine's topics it sees (consumer.go; no engine in unit tests).
	consumer      *consumergroup.Group
	consumerTimer Timer
	topics        engineTopics
	// consumerLoading: consumer records were replayed and Loaded is due;
	// consumerUnsaved: a write of its changes failed, so the next one
	// writes the whole state.
	consumerLoading bool
	consumerUnsaved bool
	// consumerWriting: the records of a consumer-state change are being
	// written (set and cleared under mu); the group does not switch
	// protocol meanwhile.
	consumerWriting bool
	// coord is the coordinator that owns the group (nil in unit tests of
	// the classic protocol alone): classic requests for a
	// consumer-protocol group go to it (migrate.go).
	coord *Coordinator
	// classicWrites counts the classic generations being written.
	classicWrites int
	// downgraded is the generation the group had when it left the
	// consumer protocol (0: never), downgradeFloor the oldest epoch a
	// member had then (justDowngraded); leftConsumer: a replay met the
	// tombstone that ended the consumer state, and the classic record
	// with members that follows is such a downgrade.
	downgraded     int32
	downgradeFloor int32
	leftConsumer   bool
	// detached is set once the coordinator dropped the group (unloaded
	// or deleted): its timers then neither act nor write.
	detached atomic.Bool
	// consumerWrite serializes the changes of the consumer state, each
	// until its records are durable; taken before mu, and never by the
	// shards.
	consumerWrite sync.Mutex
}

// CommittedOffset is a group's committed position in one partition.
type CommittedOffset struct {
	Offset      int64
	LeaderEpoch int32
	Metadata    string
	CommitTime  int64
}

func newGroup(id string, cfg *GroupConfig, sched Scheduler, onStable func(*Group, GroupSnapshot, func(error))) *Group {
	return &Group{ID: id, cfg: cfg, sched: sched, onStable: onStable, state: StateEmpty,
		members: map[string]*member{}, pending: map[string]Timer{}, static: map[string]string{},
		offsets: map[TopicPartition]CommittedOffset{}, stateSince: sched.Now()}
}

// unlock releases the mutex and runs the completions queued under it.
func (g *Group) unlock() {
	c := g.completions
	g.completions = nil
	g.mu.Unlock()
	for _, f := range c {
		f()
	}
}

func (g *Group) later(f func()) { g.completions = append(g.completions, f) }

func (g *Group) setState(s GroupState) {
	if g.state != s {
		g.state = s
		g.stateSince = g.sched.Now()
	}
}

func newMemberID(clientID string) string {
	var b [8]byte
	rand.Read(b[:])
	if clientID == "" {
		clientID = "member"
	}
	return clientID + "-" + hex.EncodeToString(b[:])
}

func protocolsEqual(a, b []Protocol) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || string(a[i].Metadata) != string(b[i].Metadata) {
			return false
		}
	}
	return true
}

// compatible reports whether a joiner's protocols fit the group: the same
// protocol type, and at least one protocol every other member supports.
func (g *Group) compatible(joiner string, protocolType string, protos []Protocol) bool {
	if protocolType == "" || len(protos) == 0 {
		return false
	}
	others := 0
	for _, m := range g.members {
		if m.id != joiner {
			others++
		}
	}
	if others == 0 {
		return true
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range protos {
		all := true
		for _, m := range g.members {
			if m.id != joiner && !hasProtocol(m.protocols, p.Name) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func hasProtocol(ps []Protocol, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

// Join handles a JoinGroup; done is called (possibly later) with the answer.
func (g *Group) Join(req JoinRequest, done func(JoinResult)) {
	g.mu.Lock()
	if g.coord != nil && g.consumer != nil {
		// A classic member of a consumer-protocol group changes its
		// consumer state, which waits for a durable write: not on the
		// caller's goroutine (an event loop).
		g.unlock()
		go g.joinConsumer(req, done)
		return
	}
	defer g.unlock()
	g.joinLocked(req, done)
}

// joinConsumer is Join for a group with a consumer-protocol state: one
// change of it at a time (as ConsumerHeartbeat), then the classic join
// if the group turned out to have no consumer-protocol members.
func (g *Group) joinConsumer(req JoinRequest, done func(JoinResult)) {
	g.consumerWrite.Lock()
	defer g.consumerWrite.Unlock()
	g.mu.Lock()
	if g.state != StateDead && g.classicInConsumer() {
		g.coord.classicJoinConsumer(g, req, done)
		return
	}
	defer g.unlock()
	g.joinLocked(req, done)
}

// joinLocked is the classic protocol's Join (g.mu held).
func (g *Group) joinLocked(req JoinRequest, done func(JoinResult)) {
	fail := func(err error) {
		g.later(func() { done(JoinResult{Err: err, MemberID: req.MemberID, Generation: -1}) })
	}
	if g.state == StateDead {
		fail(fmt.Errorf("%w: group %q is being deleted", kerr.CoordinatorNotAvailable, g.ID))
		return
	}
	if !g.leaveConsumerProtocol() {
		fail(g.errConsumerGroup())
		return
	}
	if err := g.checkTimeouts(&req); err != nil {
		fail(err)
		return
	}
	if req.MemberID != "" {
		if _, ok := g.members[req.MemberID]; !ok {
			if _, ok := g.pending[req.MemberID]; !ok {
				fail(fmt.Errorf("%w: %s is not a member of %q", kerr.UnknownMemberID, req.MemberID, g.ID))
				return
			}
		}
	}
	if !g.compatible(req.MemberID, req.ProtocolType, req.Protocols) {
		fail(fmt.Errorf("%w: protocol type %q or protocols do not match the group's", kerr.InconsistentGroupProtocol, req.ProtocolType))
		return
	}
	if n, limit := g.metadataBytesWith(req.MemberID, req.Protocols), g.cfg.maxMetadataBytes(); n > limit {
		fail(fmt.Errorf("%w: group %q's members would hold %d bytes of protocol metadata, more than %d (--group-max-metadata-bytes)", kerr.GroupMaxSizeReached, g.ID, n, limit))
		return
	}
	if req.MemberID == "" {
		g.joinNew(req, done)
		return
	}
	if t, ok := g.pending[req.MemberID]; ok {
		t.Stop()
		delete(g.pending, req.MemberID)
		if g.cfg.MaxSize > 0 && len(g.members) >= g.cfg.MaxSize {
			fail(fmt.Errorf("%w: group %q has %d members", kerr.GroupMaxSizeReached, g.ID, len(g.members)))
			return
		}
		m := g.addMember(req.MemberID, req)
		m.joinDone = done
		g.prepareRebalance("new member " + m.id)
		return
	}
	m := g.members[req.MemberID]
	if !sameInstance(m.instanceID, req.InstanceID) {
		fail(fmt.Errorf("%w: member %s has instance id %s", kerr.FencedInstanceID, m.id, strPtr(m.instanceID)))
		return
	}
	changed := !protocolsEqual(m.protocols, req.Protocols)
	g.updateMember(m, req)
	switch g.state {
	case StatePreparingRebalance:
		g.setJoinWaiter(m, done)
		g.maybeCompleteJoin()
	case StateCompletingRebalance, StateStable:
		if !changed && !(g.state == StateStable && m.id == g.leader) {
			// A retried JoinGroup: answer with the current generation.
			res := g.joinResult(m)
			g.later(func() { done(res) })
			if m.session == nil {
				g.touch(m)
			}
			return
		}
		g.setJoinWaiter(m, done)
		g.prepareRebalance("member " + m.id + " rejoined")
	case StateEmpty:
		g.setJoinWaiter(m, done)
		g.prepareRebalance("member " + m.id + " joined")
	}
}

// checkTimeouts refuses a JoinGroup's session timeout outside the
// broker's bounds, and gives one without a rebalance timeout (v0) its
// session timeout.
func (g *Group) checkTimeouts(req *JoinRequest) error {
	if req.SessionTimeout < g.cfg.MinSessionTimeout || req.SessionTimeout > g.cfg.MaxSessionTimeout {
		return fmt.Errorf("%w: %v is outside [%v, %v] (group.min/max.session.timeout.ms)", kerr.InvalidSessionTimeout, req.SessionTimeout, g.cfg.MinSessionTimeout, g.cfg.MaxSessionTimeout)
	}
	if req.RebalanceTimeout <= 0 {
		req.RebalanceTimeout = req.SessionTimeout
	}
	return nil
}

func sameInstance(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func strPtr(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

func (g *Group) setJoinWaiter(m *member, done func(JoinResult)) {
	if m.joinDone != nil {
		old := m.joinDone
		g.later(func() {
			old(JoinResult{Err: fmt.Errorf("%w: superseded by a newer JoinGroup", kerr.RebalanceInProgress), MemberID: m.id, Generation: -1})
		})
	}
	m.joinDone = done
	if m.session != nil {
		m.session.Stop()
		m.session = nil
	}
}

// joinNew handles a JoinGroup without a member id.
func (g *Group) joinNew(req JoinRequest, done func(JoinResult)) {
	id := newMemberID(req.ClientID)
	if req.InstanceID != nil {
		if old, ok := g.static[*req.InstanceID]; ok {
			g.replaceStatic(old, id, req, done)
			return
		}
	}
	if req.RequireKnownMemberID && req.InstanceID == nil {
		g.pending[id] = g.sched.AfterFunc(req.SessionTimeout, func() {
			g.mu.Lock()
			defer g.unlock()
			if _, ok := g.pending[id]; ok {
				delete(g.pending, id)
				g.maybeCompleteJoin()
			}
		})
		g.later(func() {
			done(JoinResult{Err: fmt.Errorf("%w: rejoin with the member id given", kerr.MemberIDRequired), MemberID: id, Generation: -1})
		})
		return
	}
	if g.cfg.MaxSize > 0 && len(g.members) >= g.cfg.MaxSize {
		g.later(func() {
			done(JoinResult{Err: fmt.Errorf("%w: group %q has %d members", kerr.GroupMaxSizeReached, g.ID, len(g.members)), Generation: -1})
		})
		return
	}
	m := g.addMember(id, req)
	m.joinDone = done
	g.prepareRebalance("new member " + id)
}

// replaceStatic gives a restarted static member a new member id. If the
// group is stable and its subscription is unchanged, there is no
// rebalance: it keeps its assignment.
func (g *Group) replaceStatic(oldID, newID string, req JoinRequest, done func(JoinResult)) {
	m := g.members[oldID]
	fenced := fmt.Errorf("%w: instance %s rejoined as a new member", kerr.FencedInstanceID, *req.InstanceID)
	if m.joinDone != nil {
		old := m.joinDone
		g.later(func() { old(JoinResult{Err: fenced, MemberID: oldID, Generation: -1}) })
		m.joinDone = nil
	}
	if m.syncDone != nil {
		old := m.syncDone
		g.later(func() { old(SyncResult{Err: fenced}) })
		m.syncDone = nil
	}
	delete(g.members, oldID)
	m.id = newID
	g.members[newID] = m
	g.static[*req.InstanceID] = newID
	if g.leader == oldID {
		g.leader = newID
	}
	changed := !protocolsEqual(m.protocols, req.Protocols)
	g.updateMember(m, req)
	if g.state == StateStable && !changed {
		res := g.joinResult(m)
		if m.id == g.leader {
			res.SkipAssignment = true
		}
		g.touch(m)
		g.later(func() { done(res) })
		return
	}
	g.setJoinWaiter(m, done)
	g.prepareRebalance("static member " + *req.InstanceID + " rejoined with new metadata")
}

func (g *Group) addMember(id string, req JoinRequest) *member {
	g.joinSeq++
	m := &member{id: id, joinOrder: g.joinSeq}
	g.updateMember(m, req)
	g.members[id] = m
	if req.InstanceID != nil {
		g.static[*req.InstanceID] = id
	}
	return m
}

func (g *Group) updateMember(m *member, req JoinRequest) {
	if len(g.members) == 0 || len(g.members) == 1 && g.members[m.id] == m {
		g.protocolType = req.ProtocolType
	}
	m.instanceID = req.InstanceID
	m.clientID, m.clientHost = req.ClientID, req.ClientHost
	m.sessionTimeout, m.rebalanceTimeout = req.SessionTimeout, req.RebalanceTimeout
	m.protocolType = req.ProtocolType
	m.protocols = append([]Protocol(nil), req.Protocols...)
}

// touch (re)starts a member's session timer.
func (g *Group) touch(m *member) {
	if m.session != nil {
		m.session.Stop()
	}
	id := m.id
	m.session = g.sched.AfterFunc(m.sessionTimeout, func() { g.expire(id, m) })
}

// expire removes a member whose session ran out.
func (g *Group) expire(id string, m *member) {
	g.mu.Lock()
	defer g.unlock()
	if cur, ok := g.members[id]; !ok || cur != m || m.joinDone != nil {
		return // gone, replaced, or waiting in a join (the rebalance timer governs)
	}
	g.removeMember(m)
	g.afterRemoval("member " + id + " session expired")
}

func (g *Group) removeMember(m *member) {
	if m.session != nil {
		m.session.Stop()
		m.session = nil
	}
	if m.syncDone != nil {
		sd := m.syncDone
		g.later(func() { sd(SyncResult{Err: fmt.Errorf("%w: member left", kerr.UnknownMemberID)}) })
		m.syncDone = nil
	}
	delete(g.members, m.id)
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
}

func (g *Group) afterRemoval(reason string) {
	switch g.state {
	case StatePreparingRebalance:
		g.maybeCompleteJoin()
	case StateCompletingRebalance, StateStable:
		if len(g.members) == 0 {
			g.toEmpty()
		} else {
			g.prepareRebalance(reason)
		}
	}
}

func (g *Group) toEmpty() {
	g.stopTimers()
	g.generation++
	g.setState(StateEmpty)
	g.leader, g.protocol = "", ""
	g.persist(nil)
}

func (g *Group) stopTimers() {
	if g.rebalance != nil {
		g.rebalance.Stop()
		g.rebalance = nil
	}
	if g.syncTimer != nil {
		g.syncTimer.Stop()
		g.syncTimer = nil
	}
}

// prepareRebalance starts (or continues) collecting JoinGroups.
func (g *Group) prepareRebalance(reason string) {
	// Answer every member still waiting in SyncGroup: in
	// CompletingRebalance, and also in Stable while the generation is
	// being stored (the store's callback skips a group that moved on, so
	// a waiter left here hung until its session expired and was then
	// told UNKNOWN_MEMBER_ID).
	for _, m := range g.members {
		if m.syncDone != nil {
			sd := m.syncDone
			g.later(func() { sd(SyncResult{Err: fmt.Errorf("%w: %s", kerr.RebalanceInProgress, reason)}) })
			m.syncDone = nil
		}
	}
	if g.syncTimer != nil {
		g.syncTimer.Stop()
		g.syncTimer = nil
	}
	now := g.sched.Now()
	if g.state == StatePreparingRebalance {
		// Another join during the initial delay extends it.
		if now.Before(g.initialEnd) && g.cfg.InitialRebalanceDelay > 0 {
			g.armJoinTimer(g.cfg.InitialRebalanceDelay, true)
			return
		}
		g.maybeCompleteJoin()
		return
	}
	wasEmpty := g.state == StateEmpty
	g.setState(StatePreparingRebalance)
	if wasEmpty && g.cfg.InitialRebalanceDelay > 0 {
		g.initialEnd = now.Add(g.maxRebalanceTimeout())
		g.armJoinTimer(g.cfg.InitialRebalanceDelay, true)
		return
	}
	g.initialEnd = time.Time{}
	g.armJoinTimer(g.maxRebalanceTimeout(), false)
	g.maybeCompleteJoin()
}

func (g *Group) maxRebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// armJoinTimer sets when the join phase ends at the latest. During the
// initial delay the deadline never passes initialEnd.
func (g *Group) armJoinTimer(d time.Duration, initial bool) {
	if g.rebalance != nil {
		g.rebalance.Stop()
	}
	if initial {
		if left := g.initialEnd.Sub(g.sched.Now()); d > left {
			d = max(left, 0)
		}
	}
	gen := g.generation
	g.rebalance = g.sched.AfterFunc(d, func() {
		g.mu.Lock()
		defer g.unlock()
		if g.state != StatePreparingRebalance || g.generation != gen {
			return
		}
		g.initialEnd = time.Time{}
		g.completeJoin()
	})
}

// maybeCompleteJoin ends the join phase early when every member rejoined
// (and the initial delay is over).
func (g *Group) maybeCompleteJoin() {
	if g.state != StatePreparingRebalance || g.sched.Now().Before(g.initialEnd) {
		return
	}
	if len(g.pending) > 0 {
		return // members told to rejoin with their new id: wait for them
	}
	for _, m := range g.members {
		if m.joinDone == nil {
			return
		}
	}
	g.completeJoin()
}

// completeJoin forms the next generation from the members that rejoined.
func (g *Group) completeJoin() {
	if g.rebalance != nil {
		g.rebalance.Stop()
		g.rebalance = nil
	}
	for _, m := range g.members {
		if m.joinDone == nil {
			g.removeMember(m)
		}
	}
	// Members told MEMBER_ID_REQUIRED stay pending until their session
	// timeout, as in Kafka: one whose rejoin comes after this phase ended
	// joins and starts the next rebalance (forgetting it here answered
	// that rejoin UNKNOWN_MEMBER_ID).
	if len(g.members) == 0 {
		g.toEmpty()
		return
	}
	g.generation++
	g.protocol = g.selectProtocol()
	if _, ok := g.members[g.leader]; !ok {
		g.leader = g.firstMember().id
	}
	g.setState(StateCompletingRebalance)
	for _, m := range g.members {
		m.assignment = nil
		res := g.joinResult(m)
		done := m.joinDone
		m.joinDone = nil
		g.touch(m)
		g.later(func() { done(res) })
	}
	gen := g.generation
	g.syncTimer = g.sched.AfterFunc(g.maxRebalanceTimeout(), func() {
		g.mu.Lock()
		defer g.unlock()
		if g.state == StateCompletingRebalance && g.generation == gen {
			g.prepareRebalance("the leader did not send SyncGroup in time")
		}
	})
}

func (g *Group) firstMember() *member {
	var first *member
	for _, m := range g.members {
		if first == nil || m.joinOrder < first.joinOrder {
			first = m
		}
	}
	return first
}

// selectProtocol picks the protocol every member supports that most
// members list first among those candidates.
func (g *Group) selectProtocol() string {
	var candidates []string
	first := g.firstMember()
	for _, p := range first.protocols {
		all := true
		for _, m := range g.members {
			if !hasProtocol(m.protocols, p.Name) {
				all = false
				break
			}
		}
		if all {
			candidates = append(candidates, p.Name)
		}
	}
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if contains(candidates, p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for _, c := range candidates {
		if best == "" || votes[c] > votes[best] {
			best = c
		}
	}
	return best
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func (g *Group) joinResult(m *member) JoinResult {
	res := JoinResult{Generation: g.generation, ProtocolType: g.protocolType, Protocol: g.protocol, LeaderID: g.leader, MemberID: m.id}
	if m.id == g.leader {
		ms := make([]*member, 0, len(g.members))
		for _, x := range g.members {
			ms = append(ms, x)
		}
		sort.Slice(ms, func(i, j int) bool { return ms[i].joinOrder < ms[j].joinOrder })
		for _, x := range ms {
			res.Members = append(res.Members, JoinMember{MemberID: x.id, InstanceID: x.instanceID, Metadata: x.metadataFor(g.protocol)})
		}
	}
	return res
}

// checkMember validates a member's id, instance id and generation.
func (g *Group) checkMember(memberID string, instanceID *string, generation int32) (*member, error) {
	if instanceID != nil {
		if cur, ok := g.static[*instanceID]; ok && cur != memberID {
			return nil, fmt.Errorf("%w: instance %s is now member %s", kerr.FencedInstanceID, *instanceID, cur)
		}
	}
	m, ok := g.members[memberID]
	if !ok {
		return nil, fmt.Errorf("%w: %s is not a member of %q", kerr.UnknownMemberID, memberID, g.ID)
	}
	if generation != g.generation && !g.justDowngraded(generation) {
		return m, fmt.Errorf("%w: generation %d, the group is at %d", kerr.IllegalGeneration, generation, g.generation)
	}
	return m, nil
}

// justDowngraded reports whether generation is one a member had in the
// consumer protocol, the group having left it since (at generation
// g.downgraded, its epoch then, which every member is behind): until the
// next generation forms, such a member's heartbeats, commits and syncs
// are taken, so that it rejoins under its id instead of being told it is
// stale (a Java client then drops its partitions and id).
func (g *Group) justDowngraded(generation int32) bool {
	return g.downgraded > 0 && g.downgraded == g.generation && generation >= g.downgradeFloor && generation < g.generation
}

// Sync handles a SyncGroup.
func (g *Group) Sync(req SyncRequest, done func(SyncResult)) {
	g.mu.Lock()
	defer g.unlock()
	if g.classicInConsumer() {
		res := g.coord.classicSyncConsumer(g, req)
		g.later(func() { done(res) })
		return
	}
	fail := func(err error) { g.later(func() { done(SyncResult{Err: err}) }) }
	m, err := g.checkMember(req.MemberID, req.InstanceID, req.Generation)
	if err != nil {
		fail(err)
		return
	}
	if req.ProtocolType != nil && *req.ProtocolType != g.protocolType || req.Protocol != nil && *req.Protocol != g.protocol {
		fail(fmt.Errorf("%w: protocol does not match the group's %s/%s", kerr.InconsistentGroupProtocol, g.protocolType, g.protocol))
		return
	}
	switch g.state {
	case StateEmpty, StateDead:
		fail(fmt.Errorf("%w: %s", kerr.UnknownMemberID, req.MemberID))
	case StatePreparingRebalance:
		fail(fmt.Errorf("%w: group %q is rebalancing", kerr.RebalanceInProgress, g.ID))
	case StateStable:
		res := SyncResult{ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: m.assignment}
		g.touch(m)
		g.later(func() { done(res) })
	case StateCompletingRebalance:
		if m.syncDone != nil {
			old := m.syncDone
			g.later(func() {
				old(SyncResult{Err: fmt.Errorf("%w: superseded by a newer SyncGroup", kerr.RebalanceInProgress)})
			})
		}
		m.syncDone = done
		g.touch(m)
		if m.id != g.leader {
			return
		}
		for _, x := range g.members {
			x.assignment = req.Assignments[x.id]
		}
		if g.syncTimer != nil {
			g.syncTimer.Stop()
			g.syncTimer = nil
		}
		g.setState(StateStable)
		gen := g.generation
		g.persist(func(err error) {
			g.mu.Lock()
			defer g.unlock()
			if g.generation != gen || g.state != StateStable {
				return
			}
			for _, x := range g.members {
				if x.syncDone == nil {
					continue
				}
				sd := x.syncDone
				x.syncDone = nil
				if err != nil {
					g.later(func() { sd(SyncResult{Err: fmt.Errorf("%w: store group: %w", kerr.CoordinatorNotAvailable, err)}) })
					continue
				}
				res := SyncResult{ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: x.assignment}
				g.later(func() { sd(res) })
			}
			if err != nil {
				g.prepareRebalance("storing the generation failed")
			}
		})
	}
}

// Heartbeat handles a Heartbeat.
func (g *Group) Heartbeat(memberID string, instanceID *string, generation int32) error {
	g.mu.Lock()
	defer g.unlock()
	if g.classicInConsumer() {
		return g.coord.classicHeartbeatConsumer(g, memberID, instanceID, generation)
	}
	if g.state == StateEmpty || g.state == StateDead {
		return fmt.Errorf("%w: group %q has no members", kerr.UnknownMemberID, g.ID)
	}
	m, err := g.checkMember(memberID, instanceID, generation)
	if m != nil && m.joinDone == nil {
		g.touch(m)
	}
	if err != nil {
		return err
	}
	if g.state == StatePreparingRebalance {
		return fmt.Errorf("%w: group %q is rebalancing; rejoin", kerr.RebalanceInProgress, g.ID)
	}
	return nil
}

// Leave removes members; the answer has one error per member (nil: left).
func (g *Group) Leave(members []LeaveMember) []error {
	g.mu.Lock()
	if g.coord != nil && g.consumer != nil {
		g.unlock()
		return g.leaveConsumer(members)
	}
	defer g.unlock()
	return g.leaveLocked(members)
}

// leaveConsumer is Leave for a group with a consumer-protocol state: as in
// joinConsumer, one change of it at a time, consumerWrite before mu.
func (g *Group) leaveConsumer(members []LeaveMember) []error {
	g.consumerWrite.Lock()
	defer g.consumerWrite.Unlock()
	g.mu.Lock()
	if g.classicInConsumer() {
		return g.coord.classicLeaveConsumer(g, members)
	}
	defer g.unlock()
	return g.leaveLocked(members)
}

// leaveLocked is the classic protocol's Leave (g.mu held).
func (g *Group) leaveLocked(members []LeaveMember) []error {
	errs := make([]error, len(members))
	removed := 0
	for i, lm := range members {
		id := lm.MemberID
		if lm.InstanceID != nil {
			cur, ok := g.static[*lm.InstanceID]
			switch {
			case !ok:
				errs[i] = fmt.Errorf("%w: instance %s is not in %q", kerr.UnknownMemberID, *lm.InstanceID, g.ID)
				continue
			case id != "" && id != cur:
				errs[i] = fmt.Errorf("%w: instance %s is member %s, not %s", kerr.FencedInstanceID, *lm.InstanceID, cur, id)
				continue
			}
			id = cur
		}
		if t, ok := g.pending[id]; ok {
			t.Stop()
			delete(g.pending, id)
			continue
		}
		m, ok := g.members[id]
		if !ok {
			errs[i] = fmt.Errorf("%w: %s is not a member of %q", kerr.UnknownMemberID, id, g.ID)
			continue
		}
		if m.joinDone != nil {
			jd := m.joinDone
			m.joinDone = nil
			g.later(func() { jd(JoinResult{Err: fmt.Errorf("%w: member left", kerr.UnknownMemberID), Generation: -1}) })
		}
		g.removeMember(m)
		removed++
	}
	if removed > 0 {
		g.afterRemoval("members left")
	}
	return errs
}

// LeaveThen is Leave for a caller that must not block (an event loop):
// done gets the answer at once for a classic group, and from another
// goroutine, once it is durable, for a group with a consumer-protocol
// state.
func (g *Group) LeaveThen(members []LeaveMember, done func([]error)) {
	g.mu.Lock()
	if g.coord != nil && g.consumer != nil {
		g.unlock()
		go func() { done(g.leaveConsumer(members)) }()
		return
	}
	errs := g.leaveLocked(members) // decided under the same lock: never waits for a write
	g.unlock()
	done(errs)
}

// CheckCommit validates an OffsetCommit's member and generation. A commit
// with generation -1 and no member id is a simple (group-less) commit,
// allowed while the group has no members. parts are the commit's
// partitions, by topic id: a consumer-protocol member that sends an
// epoch older than its own may still commit those it has owned since
// (KIP-1251), and stale (nil when all may be committed) marks the others.
func (g *Group) CheckCommit(memberID string, instanceID *string, generation int32, parts []consumergroup.TopicPartition) (stale []bool, err error) {
	g.mu.Lock()
	defer g.unlock()
	if g.consumer != nil {
		if instanceID != nil {
			if cur := g.consumer.StaticMember(*instanceID); cur != "" && cur != memberID {
				return nil, fmt.Errorf("%w: instance %s is member %s now", kerr.FencedInstanceID, *instanceID, cur)
			}
		}
		return g.checkConsumerCommit(memberID, generation, parts)
	}
	if generation < 0 && memberID == "" {
		if len(g.members) > 0 {
			return nil, fmt.Errorf("%w: group %q has active members; commit as one of them", kerr.UnknownMemberID, g.ID)
		}
		return nil, nil
	}
	if g.state == StateEmpty || g.state == StateDead {
		return nil, fmt.Errorf("%w: group %q has no members", kerr.UnknownMemberID, g.ID)
	}
	if _, err := g.checkMember(memberID, instanceID, generation); err != nil {
		return nil, err
	}
	if g.state == StateCompletingRebalance {
		return nil, fmt.Errorf("%w: group %q is completing a rebalance", kerr.RebalanceInProgress, g.ID)
	}
	if m := g.members[memberID]; m != nil && m.joinDone == nil {
		g.touch(m)
	}
	return nil, nil
}

// GroupSnapshot is what is persisted for a group at each generation.
type GroupSnapshot struct {
	ProtocolType string
	Generation   int32
	Protocol     string
	Leader       string
	StateSince   int64
	Members      []MemberSnapshot
}

// MemberSnapshot is a persisted member.
type MemberSnapshot struct {
	MemberID         string
	InstanceID       *string
	ClientID         string
	ClientHost       string
	RebalanceTimeout time.Duration
	SessionTimeout   time.Duration
	Subscription     []byte
	Assignment       []byte
}

func (g *Group) snapshot() GroupSnapshot {
	s := GroupSnapshot{ProtocolType: g.protocolType, Generation: g.generation, Protocol: g.protocol, Leader: g.leader, StateSince: g.stateSince.UnixMilli()}
	ms := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].joinOrder < ms[j].joinOrder })
	for _, m := range ms {
		s.Members = append(s.Members, MemberSnapshot{MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost,
			RebalanceTimeout: m.rebalanceTimeout, SessionTimeout: m.sessionTimeout, Subscription: m.metadataFor(g.protocol), Assignment: m.assignment})
	}
	return s
}

// persist stores the group's current generation; done (may be nil) is
// called, without the lock held, once it is durable.
func (g *Group) persist(done func(error)) {
	if g.onStable == nil {
		if done != nil {
			g.later(func() { done(nil) })
		}
		return
	}
	snap := g.snapshot()
	g.classicWrites++
	g.later(func() {
		g.onStable(g, snap, func(err error) {
			g.mu.Lock()
			g.classicWrites--
			g.unlock()
			if done != nil {
				done(err)
			}
		})
	})
}

// restore loads a persisted generation (at startup). Members get fresh
// session timers: those that do not come back are removed as usual.
func (g *Group) restore(s GroupSnapshot) {
	g.mu.Lock()
	defer g.unlock()
	g.stopTimers()
	for _, m := range g.members {
		if m.session != nil {
			m.session.Stop()
		}
	}
	g.members, g.static = map[string]*member{}, map[string]string{}
	// A classic generation with members after consumer-protocol records:
	// the group went back to the classic protocol. An empty one does not
	// say so: it may be the classic group's last write, landing after the
	// first records of the consumer protocol that took the group over.
	if len(s.Members) > 0 {
		g.consumer, g.consumerLoading = nil, false
		if g.leftConsumer {
			// The downgrade's own record: its members may still hold
			// their consumer-protocol epochs (justDowngraded).
			g.downgraded, g.downgradeFloor = s.Generation, 0
		}
		g.leftConsumer = false
	} else if g.consumer != nil {
		return
	}
	g.protocolType, g.generation, g.protocol, g.leader = s.ProtocolType, s.Generation, s.Protocol, s.Leader
	for _, ms := range s.Members {
		g.joinSeq++
		m := &member{id: ms.MemberID, instanceID: ms.InstanceID, clientID: ms.ClientID, clientHost: ms.ClientHost,
			rebalanceTimeout: ms.RebalanceTimeout, sessionTimeout: ms.SessionTimeout, protocolType: s.ProtocolType,
			protocols: []Protocol{{Name: s.Protocol, Metadata: ms.Subscription}}, assignment: ms.Assignment, joinOrder: g.joinSeq}
		g.members[m.id] = m
		if m.instanceID != nil {
			g.static[*m.instanceID] = m.id
		}
	}
	if len(g.members) == 0 {
		g.setState(StateEmpty)
		return
	}
	g.setState(StateStable)
	for _, m := range g.members {
		g.touch(m)
	}
}

// GroupDescription is DescribeGroups' view of a group.
type GroupDescription struct {
	ID           string
	State        GroupState
	ProtocolType string
	Protocol     string
	Generation   int32
	// Type is "classic" or "consumer" (KIP-848), as ListGroups v5 says.
	Type    string
	Members []MemberDescription
}

// MemberDescription is one member in a description.
type MemberDescription struct {
	MemberID   string
	InstanceID *string
	ClientID   string
	ClientHost string
	Metadata   []byte
	Assignment []byte
}

// Describe returns the group's state and members.
func (g *Group) Describe() GroupDescription {
	g.mu.Lock()
	defer g.unlock()
	if g.consumer != nil {
		return g.consumerDescribe()
	}
	d := GroupDescription{ID: g.ID, State: g.state, ProtocolType: g.protocolType, Protocol: g.protocol, Generation: g.generation, Type: "classic"}
	if g.state == StatePreparingRebalance || g.state == StateCompletingRebalance {
		d.Protocol = ""
	}
	ms := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].joinOrder < ms[j].joinOrder })
	for _, m := range ms {
		md := MemberDescription{MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost}
		if g.state == StateStable {
			md.Metadata = m.metadataFor(g.protocol)
			md.Assignment = m.assignment
		}
		d.Members = append(d.Members, md)
	}
	return d
}

// State returns the group's state.
func (g *Group) State() GroupState {
	g.mu.Lock()
	defer g.unlock()
	if g.consumer != nil {
		return GroupState(g.consumer.State())
	}
	return g.state
}
