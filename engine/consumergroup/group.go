// Package consumergroup is the state machine of the KIP-848 consumer
// group protocol (ConsumerGroupHeartbeat): group and member epochs, the
// target assignment the coordinator computes with a server-side assignor,
// and each member's incremental reconciliation towards it (partitions are
// revoked before they are handed to another member, and no member stops
// consuming the partitions it keeps).
//
// It owns no goroutine, lock or clock: the caller (the engine's group
// coordinator) serializes the calls, passes the time, persists what it
// wants, and arms a timer for NextDeadline. That keeps the protocol
// deterministic and testable step by step.
//
// The model, as in Kafka:
//
//   - The group epoch grows whenever membership, a subscription, or the
//     metadata of a subscribed topic (its partition count, its existence)
//     changes.
//   - The target assignment is computed for the group epoch, by the
//     assignor the members ask for ("uniform" or "range"); its epoch is the
//     assignment epoch.
//   - Each member moves to the target one heartbeat at a time: first it is
//     told to give up the partitions it owns that are not in its target
//     (state UnrevokedPartitions, its epoch unchanged); once a heartbeat
//     reports them gone, its epoch becomes the assignment epoch and it gets
//     the partitions of its target that no other member still owns
//     (UnreleasedPartitions while some are still owned, then Stable).
//   - A partition has at most one owner at any time (Owner): it is owned
//     from the heartbeat that hands it out until the heartbeat that
//     reports it revoked, or the member's removal.
//   - A member that misses its session timeout, or does not revoke within
//     its rebalance timeout, is removed; a static member (instance id)
//     that leaves with epoch -2 keeps its assignment for a session timeout,
//     for a new member with the same instance id to take over.
package consumergroup

import (
	"fmt"
	"hash/fnv"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TopicID is a topic's 16-byte id.
type TopicID = [16]byte

// Topics is the coordinator's view of the cluster's topics.
type Topics interface {
	// ByName returns a topic's id and partition count.
	ByName(name string) (id TopicID, partitions int32, ok bool)
	// Names lists the topics a subscription regex is matched against.
	Names() []string
}

// Assignment is a set of partitions by topic id; each partition list is
// sorted and has no duplicates. Assignments are treated as immutable.
type Assignment map[TopicID][]int32

// Len is the number of partitions.
func (a Assignment) Len() int {
	n := 0
	for _, ps := range a {
		n += len(ps)
	}
	return n
}

// Has reports whether the assignment holds partition p of topic t.
func (a Assignment) Has(t TopicID, p int32) bool {
	_, ok := slices.BinarySearch(a[t], p)
	return ok
}

// Equal reports whether a and b hold the same partitions.
func (a Assignment) Equal(b Assignment) bool {
	if a.Len() != b.Len() {
		return false
	}
	for t, ps := range a {
		if !slices.Equal(ps, b[t]) {
			return false
		}
	}
	return true
}

// Clone returns a deep copy.
func (a Assignment) Clone() Assignment {
	out := make(Assignment, len(a))
	for t, ps := range a {
		out[t] = slices.Clone(ps)
	}
	return out
}

// Normalize returns a with every list sorted, deduplicated, and empty
// lists dropped (a copy; a is not changed).
func Normalize(a Assignment) Assignment {
	out := make(Assignment, len(a))
	for t, ps := range a {
		ps = slices.Clone(ps)
		slices.Sort(ps)
		ps = slices.Compact(ps)
		if len(ps) > 0 {
			out[t] = ps
		}
	}
	return out
}

// MemberState is a member's reconciliation state.
type MemberState int8

// The member states (the values are Kafka's, as ConsumerGroupDescribe
// and the __consumer_offsets records carry them).
const (
	Stable               MemberState = 0
	UnrevokedPartitions  MemberState = 1
	UnreleasedPartitions MemberState = 2
)

func (s MemberState) String() string {
	switch s {
	case Stable:
		return "Stable"
	case UnrevokedPartitions:
		return "UnrevokedPartitions"
	case UnreleasedPartitions:
		return "UnreleasedPartitions"
	}
	return fmt.Sprintf("MemberState(%d)", int8(s))
}

// Epochs with a meaning in requests and answers.
const (
	JoinEpoch        int32 = 0
	LeaveEpoch       int32 = -1
	StaticLeaveEpoch int32 = -2
)

// Config holds the group settings (Kafka's group.consumer.*).
type Config struct {
	SessionTimeout    time.Duration // group.consumer.session.timeout.ms
	HeartbeatInterval time.Duration // group.consumer.heartbeat.interval.ms
	MaxSize           int           // group.consumer.max.size; 0: no limit
	// Assignors are the server-side assignors members may name
	// (group.consumer.assignors); the first is the default.
	Assignors []string
	// RegexRefresh is how often subscription regexes are matched
	// against the topics again (and at once when one changes).
	RegexRefresh time.Duration
}

// DefaultConfig is Kafka's defaults.
func DefaultConfig() Config {
	return Config{SessionTimeout: 45 * time.Second, HeartbeatInterval: 5 * time.Second,
		Assignors: []string{"uniform", "range"}, RegexRefresh: 10 * time.Second}
}

// Member is one member of a group.
type Member struct {
	ID         string
	InstanceID string // "" for a dynamic member
	RackID     string
	ClientID   string
	ClientHost string

	Epoch         int32
	PreviousEpoch int32
	State         MemberState

	RebalanceTimeout time.Duration
	Topics           []string // subscribed topic names, sorted
	Regex            string   // subscribed topic regex ("" for none)
	Assignor         string   // the server assignor it asked for ("" for the default)

	// Assigned is what the member owns and may consume; Revoking is what
	// it still owns but must give up (UnrevokedPartitions).
	Assigned Assignment
	Revoking Assignment

	sessionDeadline time.Time
	revokeDeadline  time.Time // zero unless revoking
	// regexAllowed filters what the member's regex may resolve to (the
	// member's principal's DESCRIBE permission); nil allows all.
	regexAllowed func(topic string) bool
}

// Left reports whether this is a static member that left with epoch -2
// and waits for its instance to come back.
func (m *Member) Left() bool { return m.Epoch == StaticLeaveEpoch }

// Request is one ConsumerGroupHeartbeat. Pointer and nil-slice fields are
// "unchanged since the last heartbeat".
type Request struct {
	MemberID         string
	Epoch            int32
	InstanceID       *string
	RackID           *string
	RebalanceTimeout time.Duration // < 0: unchanged
	SubscribedTopics []string      // nil: unchanged
	SubscribedRegex  *string       // nil: unchanged
	ServerAssignor   *string       // nil: unchanged
	Owned            Assignment    // nil: unchanged
	ClientID         string
	ClientHost       string
	// RegexAllowed filters the topics a regex subscription may resolve
	// to (nil: all). It replaces the member's filter when set.
	RegexAllowed func(topic string) bool
}

// Response answers a heartbeat.
type Response struct {
	MemberID          string
	Epoch             int32
	HeartbeatInterval time.Duration
	// Assignment is the member's assignment when the member must be
	// told (it changed, or the request was a full one); nil otherwise.
	Assignment Assignment
}

// Group is one consumer-protocol group. Not safe for concurrent use.
type Group struct {
	ID  string
	cfg Config

	epoch           int32
	assignmentEpoch int32
	members         map[string]*Member
	static          map[string]string     // instance id -> member id
	target          map[string]Assignment // member id -> target, at assignmentEpoch
	owners          map[TopicID]map[int32]string
	assignor        string // the assignor of the current target

	// metadataHash is a hash of the subscribed topics' names, ids and
	// partition counts when the target was last computed (persisted, so
	// a coordinator that loads the group does not rebalance for nothing).
	metadataHash uint64
	resolved     map[string][]string
	resolvedAt   time.Time

	// What changed since TakeChanges (persist.go).
	dirty         map[string]bool
	removed       map[string]bool
	epochDirty    bool
	targetChanged bool
}

// New returns an empty group.
func New(id string, cfg Config) *Group {
	cfg = cfg.withDefaults()
	return &Group{ID: id, cfg: cfg, members: map[string]*Member{}, static: map[string]string{},
		target: map[string]Assignment{}, owners: map[TopicID]map[int32]string{}, resolved: map[string][]string{},
		dirty: map[string]bool{}, removed: map[string]bool{}}
}

func (cfg Config) withDefaults() Config {
	def := DefaultConfig()
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = def.SessionTimeout
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = def.HeartbeatInterval
	}
	if len(cfg.Assignors) == 0 {
		cfg.Assignors = def.Assignors
	}
	if cfg.RegexRefresh <= 0 {
		cfg.RegexRefresh = def.RegexRefresh
	}
	return cfg
}

// Epoch is the group epoch.
func (g *Group) Epoch() int32 { return g.epoch }

// AssignmentEpoch is the epoch of the target assignment.
func (g *Group) AssignmentEpoch() int32 { return g.assignmentEpoch }

// Empty reports whether the group has no members.
func (g *Group) Empty() bool { return len(g.members) == 0 }

// Member returns a member, or nil.
func (g *Group) Member(id string) *Member { return g.members[id] }

// Members returns the members sorted by id.
func (g *Group) Members() []*Member {
	out := slices.Collect(maps.Values(g.members))
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Target returns a member's target assignment.
func (g *Group) Target(id string) Assignment { return g.target[id] }

// Assignor is the name of the assignor that computed the target.
func (g *Group) Assignor() string { return g.assignor }

// Owner returns the member that owns a partition, or "".
func (g *Group) Owner(t TopicID, p int32) string { return g.owners[t][p] }

// State is the group's state as ConsumerGroupDescribe and ListGroups
// name it: Empty, Assigning (the target is behind the group epoch),
// Reconciling (a member has not reached the target), or Stable.
func (g *Group) State() string {
	if len(g.members) == 0 {
		return "Empty"
	}
	if g.assignmentEpoch != g.epoch {
		return "Assigning"
	}
	for _, m := range g.members {
		if m.Left() {
			continue
		}
		if m.Epoch != g.assignmentEpoch || m.State != Stable {
			return "Reconciling"
		}
	}
	return "Stable"
}

// SubscribedTopics is the set of topic names the members subscribe to,
// by name or through a regex as last resolved.
func (g *Group) SubscribedTopics() map[string]bool {
	out := map[string]bool{}
	for _, m := range g.members {
		for _, t := range m.Topics {
			out[t] = true
		}
		for _, t := range g.resolvedFor(m) {
			out[t] = true
		}
	}
	return out
}

func (g *Group) resolvedFor(m *Member) []string {
	if m.Regex == "" {
		return nil
	}
	names := g.resolved[m.Regex]
	if m.regexAllowed == nil {
		return names
	}
	var out []string
	for _, n := range names {
		if m.regexAllowed(n) {
			out = append(out, n)
		}
	}
	return out
}

func errorf(code *kerr.Error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", code, fmt.Sprintf(format, args...))
}

// Validate checks what a heartbeat can be refused for without looking at
// a group: its shape (INVALID_REQUEST), the assignor it names
// (UNSUPPORTED_ASSIGNOR) and its regex (INVALID_REGULAR_EXPRESSION). The
// coordinator calls it before it creates a group for a join.
func Validate(cfg Config, r *Request) error {
	if err := validateShape(r); err != nil {
		return err
	}
	if r.Epoch == LeaveEpoch || r.Epoch == StaticLeaveEpoch {
		return nil
	}
	return checkSubscription(cfg.withDefaults(), r)
}

// validate is Validate plus the checks that need the group.
func (g *Group) validate(r *Request) error {
	if err := validateShape(r); err != nil {
		return err
	}
	if r.Epoch == StaticLeaveEpoch && r.InstanceID == nil && (g.members[r.MemberID] == nil || g.members[r.MemberID].InstanceID == "") {
		return errorf(kerr.InvalidRequest, "epoch -2 is for static members, and this one has no instance id")
	}
	return nil
}

func validateShape(r *Request) error {
	switch {
	case r.MemberID == "":
		return errorf(kerr.InvalidRequest, "member id is empty (ConsumerGroupHeartbeat v1 clients choose their own)")
	case len(r.MemberID) > 255:
		return errorf(kerr.InvalidRequest, "member id is %d bytes, at most 255", len(r.MemberID))
	case r.Epoch < StaticLeaveEpoch:
		return errorf(kerr.InvalidRequest, "member epoch %d", r.Epoch)
	case r.InstanceID != nil && *r.InstanceID == "":
		return errorf(kerr.InvalidRequest, "instance id is empty")
	}
	if r.Epoch != JoinEpoch {
		return nil
	}
	switch {
	case r.RebalanceTimeout < 0:
		return errorf(kerr.InvalidRequest, "a join must give the rebalance timeout")
	case r.SubscribedTopics == nil && r.SubscribedRegex == nil:
		return errorf(kerr.InvalidRequest, "a join must give the subscribed topic names or a regex")
	case r.Owned.Len() != 0:
		return errorf(kerr.InvalidRequest, "a join (epoch 0) must not claim owned partitions")
	}
	return nil
}

func checkSubscription(cfg Config, r *Request) error {
	if r.ServerAssignor != nil && *r.ServerAssignor != "" && !slices.Contains(cfg.Assignors, *r.ServerAssignor) {
		return errorf(kerr.UnsupportedAssignor, "assignor %q; this broker has %s", *r.ServerAssignor, strings.Join(cfg.Assignors, ", "))
	}
	if r.SubscribedRegex != nil && *r.SubscribedRegex != "" {
		if _, err := compile(*r.SubscribedRegex); err != nil {
			return errorf(kerr.InvalidRegularExpression, "%q: %v", *r.SubscribedRegex, err)
		}
	}
	return nil
}

// maxRegexBytes bounds a subscription regex.
const maxRegexBytes = 4096

// compile compiles a subscription regex, anchored at both ends as Java's
// Pattern.matches is.
func compile(expr string) (*regexp.Regexp, error) {
	if len(expr) > maxRegexBytes {
		return nil, fmt.Errorf("%d bytes, at most %d", len(expr), maxRegexBytes)
	}
	return regexp.Compile(`^(?:` + expr + `)$`)
}

// Heartbeat handles one ConsumerGroupHeartbeat at time now.
func (g *Group) Heartbeat(now time.Time, topics Topics, r Request) (Response, error) {
	if err := g.validate(&r); err != nil {
		return Response{}, err
	}
	if r.Epoch == LeaveEpoch || r.Epoch == StaticLeaveEpoch {
		return g.leave(now, r)
	}
	if err := checkSubscription(g.cfg, &r); err != nil {
		return Response{}, err
	}
	m, fresh, err := g.memberFor(now, r)
	if err != nil {
		return Response{}, err
	}
	was := recordOf(m)
	defer func() {
		if fresh || !was.equal(recordOf(m)) {
			g.dirty[m.ID] = true
		}
	}()
	bump, before := fresh, m.Assigned
	if r.InstanceID != nil {
		m.InstanceID = *r.InstanceID
	}
	if r.RackID != nil && *r.RackID != m.RackID {
		m.RackID, bump = *r.RackID, true
	}
	if r.RebalanceTimeout >= 0 {
		m.RebalanceTimeout = r.RebalanceTimeout
	}
	if r.ClientID != "" || fresh {
		m.ClientID, m.ClientHost = r.ClientID, r.ClientHost
	}
	if r.SubscribedTopics != nil {
		ts := slices.Clone(r.SubscribedTopics)
		slices.Sort(ts)
		ts = slices.Compact(ts)
		if !slices.Equal(ts, m.Topics) {
			m.Topics, bump = ts, true
		}
	}
	if r.RegexAllowed != nil {
		m.regexAllowed = r.RegexAllowed
	}
	if r.SubscribedRegex != nil && *r.SubscribedRegex != m.Regex {
		m.Regex, bump = *r.SubscribedRegex, true
		if _, ok := g.resolved[m.Regex]; m.Regex != "" && !ok {
			g.resolvedAt = time.Time{} // resolve the new one now
		}
	}
	if r.ServerAssignor != nil && *r.ServerAssignor != m.Assignor {
		m.Assignor, bump = *r.ServerAssignor, true
	}
	m.sessionDeadline = now.Add(g.cfg.SessionTimeout)

	if g.refreshSubscription(now, topics) {
		bump = true
	}
	if bump {
		g.epoch++
		g.epochDirty = true
	}
	if g.epoch != g.assignmentEpoch {
		g.computeTarget(topics)
	}
	g.reconcile(now, m, r.Owned)

	resp := Response{MemberID: m.ID, Epoch: m.Epoch, HeartbeatInterval: g.cfg.HeartbeatInterval}
	// The member is told its assignment when it joins, when it reports
	// what it owns (so a lost answer is corrected), when it is behind,
	// and when this heartbeat changed it.
	if r.Epoch == JoinEpoch || r.Owned != nil || r.Epoch != m.Epoch || !m.Assigned.Equal(before) {
		resp.Assignment = m.Assigned.Clone()
	}
	return resp, nil
}

// memberFor finds or creates the heartbeat's member and checks its epoch.
func (g *Group) memberFor(now time.Time, r Request) (m *Member, fresh bool, err error) {
	m = g.members[r.MemberID]
	if r.Epoch != JoinEpoch {
		if m == nil {
			return nil, false, errorf(kerr.UnknownMemberID, "member %s is not in group %q", r.MemberID, g.ID)
		}
		if r.InstanceID != nil && *r.InstanceID != m.InstanceID {
			return nil, false, errorf(kerr.FencedInstanceID, "member %s has instance id %q, not %q", m.ID, m.InstanceID, *r.InstanceID)
		}
		return m, false, g.checkEpoch(m, r.Epoch, r.Owned)
	}
	if r.InstanceID != nil {
		if old := g.static[*r.InstanceID]; old != "" && old != r.MemberID {
			prev := g.members[old]
			if !prev.Left() {
				return nil, false, errorf(kerr.UnreleasedInstanceID, "instance %q is still member %s; it must leave (or its session of %v expire) first", *r.InstanceID, old, g.cfg.SessionTimeout)
			}
			// The instance comes back as a new member: it takes over
			// the old one's epoch and assignment, with no rebalance.
			m = g.replaceStatic(prev, r.MemberID)
			return m, false, nil
		}
	}
	if m != nil {
		if m.Left() {
			// A static member that left rejoins under the same id.
			m.Epoch = m.PreviousEpoch
		}
		if r.InstanceID != nil && m.InstanceID != "" && *r.InstanceID != m.InstanceID {
			return nil, false, errorf(kerr.FencedInstanceID, "member %s has instance id %q, not %q", m.ID, m.InstanceID, *r.InstanceID)
		}
		// A rejoin with the same id (a lost answer): the member keeps
		// its epoch and assignment and is told them again.
		return m, false, nil
	}
	if g.cfg.MaxSize > 0 && len(g.members) >= g.cfg.MaxSize {
		return nil, false, errorf(kerr.GroupMaxSizeReached, "group %q has %d members (group.consumer.max.size)", g.ID, len(g.members))
	}
	m = &Member{ID: r.MemberID, Assigned: Assignment{}, Revoking: Assignment{}}
	if r.InstanceID != nil {
		m.InstanceID = *r.InstanceID
		g.static[m.InstanceID] = m.ID
	}
	g.members[m.ID] = m
	return m, true, nil
}

// checkEpoch is Kafka's epoch check: a newer epoch than the member's is
// fenced; an older one is accepted only as the previous epoch of a member
// whose answer was lost and that owns nothing it no longer has.
func (g *Group) checkEpoch(m *Member, epoch int32, owned Assignment) error {
	if m.Left() {
		return errorf(kerr.FencedMemberEpoch, "member %s left the group (epoch -2)", m.ID)
	}
	if epoch == m.Epoch {
		return nil
	}
	if epoch < m.Epoch && epoch == m.PreviousEpoch && owned != nil && subset(owned, m.Assigned) {
		return nil
	}
	return errorf(kerr.FencedMemberEpoch, "member %s sent epoch %d, its epoch is %d", m.ID, epoch, m.Epoch)
}

func subset(a, b Assignment) bool {
	for t, ps := range a {
		for _, p := range ps {
			if !b.Has(t, p) {
				return false
			}
		}
	}
	return true
}

func (g *Group) replaceStatic(prev *Member, id string) *Member {
	m := &Member{ID: id, InstanceID: prev.InstanceID, RackID: prev.RackID, Epoch: prev.PreviousEpoch, PreviousEpoch: prev.PreviousEpoch,
		State: prev.State, RebalanceTimeout: prev.RebalanceTimeout, Topics: prev.Topics, Regex: prev.Regex, Assignor: prev.Assignor,
		Assigned: prev.Assigned, Revoking: prev.Revoking, revokeDeadline: prev.revokeDeadline, regexAllowed: prev.regexAllowed}
	delete(g.members, prev.ID)
	g.markRemoved(prev.ID)
	g.members[id] = m
	g.dirty[id] = true
	g.static[m.InstanceID] = id
	if t, ok := g.target[prev.ID]; ok {
		delete(g.target, prev.ID)
		g.target[id] = t
	}
	g.setOwner(m.Assigned, id)
	g.setOwner(m.Revoking, id)
	return m
}

func (g *Group) leave(now time.Time, r Request) (Response, error) {
	m := g.members[r.MemberID]
	if m == nil {
		return Response{}, errorf(kerr.UnknownMemberID, "member %s is not in group %q", r.MemberID, g.ID)
	}
	if r.InstanceID != nil && *r.InstanceID != m.InstanceID {
		return Response{}, errorf(kerr.FencedInstanceID, "member %s has instance id %q, not %q", m.ID, m.InstanceID, *r.InstanceID)
	}
	if r.Epoch == StaticLeaveEpoch && m.InstanceID != "" {
		if !m.Left() {
			m.PreviousEpoch, m.Epoch = m.Epoch, StaticLeaveEpoch
			g.dirty[m.ID] = true
		}
		m.sessionDeadline = now.Add(g.cfg.SessionTimeout)
		return Response{MemberID: m.ID, Epoch: StaticLeaveEpoch, HeartbeatInterval: g.cfg.HeartbeatInterval}, nil
	}
	g.remove(m)
	return Response{MemberID: m.ID, Epoch: LeaveEpoch, HeartbeatInterval: g.cfg.HeartbeatInterval}, nil
}

// remove takes a member out of the group; its partitions are free at once
// and the group epoch grows.
func (g *Group) remove(m *Member) {
	g.setOwner(m.Assigned, "")
	g.setOwner(m.Revoking, "")
	delete(g.members, m.ID)
	delete(g.target, m.ID)
	g.markRemoved(m.ID)
	if m.InstanceID != "" && g.static[m.InstanceID] == m.ID {
		delete(g.static, m.InstanceID)
	}
	g.epoch++
	g.epochDirty = true
	if len(g.members) == 0 {
		// Nothing to assign: the (empty) target is current.
		g.assignmentEpoch = g.epoch
		g.metadataHash = 0
		g.targetChanged = true
	}
}

// Remove takes a member out (an administrative removal); false if unknown.
func (g *Group) Remove(id string) bool {
	m := g.members[id]
	if m == nil {
		return false
	}
	g.remove(m)
	return true
}

// setOwner records who owns the partitions of a ("" frees them).
func (g *Group) setOwner(a Assignment, id string) {
	for t, ps := range a {
		o := g.owners[t]
		if o == nil {
			if id == "" {
				continue
			}
			o = map[int32]string{}
			g.owners[t] = o
		}
		for _, p := range ps {
			if id == "" {
				delete(o, p)
			} else {
				o[p] = id
			}
		}
		if len(o) == 0 {
			delete(g.owners, t)
		}
	}
}

// Expire removes the members whose session ended, and those that did not
// revoke within their rebalance timeout; it returns their ids.
func (g *Group) Expire(now time.Time) []string {
	var gone []string
	for _, m := range g.Members() {
		if !now.Before(m.sessionDeadline) || (!m.revokeDeadline.IsZero() && !now.Before(m.revokeDeadline)) {
			gone = append(gone, m.ID)
			g.remove(m)
		}
	}
	return gone
}

// NextDeadline is when Expire next has something to do (zero: never).
func (g *Group) NextDeadline() time.Time {
	var next time.Time
	for _, m := range g.members {
		for _, d := range []time.Time{m.sessionDeadline, m.revokeDeadline} {
			if !d.IsZero() && (next.IsZero() || d.Before(next)) {
				next = d
			}
		}
	}
	return next
}

// refreshSubscription resolves regexes when due and reports whether the
// metadata of the subscribed topics changed since the target was
// computed.
func (g *Group) refreshSubscription(now time.Time, topics Topics) bool {
	if now.Sub(g.resolvedAt) >= g.cfg.RegexRefresh {
		g.resolveRegexes(topics)
		g.resolvedAt = now
	}
	h := fnv.New64a()
	for _, name := range slices.Sorted(maps.Keys(g.SubscribedTopics())) {
		id, n, ok := topics.ByName(name)
		if !ok {
			continue
		}
		fmt.Fprintf(h, "%s/%x/%d;", name, id, n)
	}
	sum := h.Sum64()
	if sum == g.metadataHash {
		return false
	}
	g.metadataHash = sum
	return true
}

func (g *Group) resolveRegexes(topics Topics) {
	want := map[string]bool{}
	for _, m := range g.members {
		if m.Regex != "" {
			want[m.Regex] = true
		}
	}
	resolved := make(map[string][]string, len(want))
	if len(want) > 0 {
		names := topics.Names()
		slices.Sort(names)
		for expr := range want {
			re, err := compile(expr)
			if err != nil {
				continue // checked when it was subscribed
			}
			var match []string
			for _, n := range names {
				if re.MatchString(n) {
					match = append(match, n)
				}
			}
			resolved[expr] = match
		}
	}
	g.resolved = resolved
}

// ResolvedRegex returns the topics a regex resolved to last.
func (g *Group) ResolvedRegex(expr string) []string { return g.resolved[expr] }

// computeTarget runs the assignor for the group epoch.
func (g *Group) computeTarget(topics Topics) {
	name := g.pickAssignor()
	subs := make([]Subscriber, 0, len(g.members))
	for _, m := range g.Members() {
		s := Subscriber{ID: m.ID, Rack: m.RackID, Current: g.target[m.ID]}
		for _, t := range m.Topics {
			s.Topics = append(s.Topics, t)
		}
		s.Topics = append(s.Topics, g.resolvedFor(m)...)
		slices.Sort(s.Topics)
		s.Topics = slices.Compact(s.Topics)
		subs = append(subs, s)
	}
	g.target = assignors[name](subs, topics)
	g.assignor = name
	g.assignmentEpoch = g.epoch
	g.targetChanged = true
}

// pickAssignor is the assignor most members ask for (ties: the order of
// Config.Assignors), or the default.
func (g *Group) pickAssignor() string {
	votes := map[string]int{}
	for _, m := range g.members {
		if m.Assignor != "" {
			votes[m.Assignor]++
		}
	}
	best, n := g.cfg.Assignors[0], 0
	for _, a := range g.cfg.Assignors {
		if votes[a] > n {
			best, n = a, votes[a]
		}
	}
	return best
}

// reconcile moves member m one step towards its target (Kafka's
// CurrentAssignmentBuilder). owned is what the member reports it owns
// (nil: unchanged).
func (g *Group) reconcile(now time.Time, m *Member, owned Assignment) {
	switch m.State {
	case UnrevokedPartitions:
		if owned == nil || intersects(owned, m.Revoking) {
			return // still revoking
		}
		g.setOwner(m.Revoking, "")
		m.Revoking = Assignment{}
		m.revokeDeadline = time.Time{}
		g.advance(now, m)
	case UnreleasedPartitions, Stable:
		if m.State == Stable && m.Epoch == g.assignmentEpoch {
			return
		}
		g.advance(now, m)
	}
}

func intersects(a, b Assignment) bool {
	for t, ps := range a {
		for _, p := range ps {
			if b.Has(t, p) {
				return true
			}
		}
	}
	return false
}

// advance computes the member's next assignment from its target: what it
// must give up first, else what it can take now.
func (g *Group) advance(now time.Time, m *Member) {
	target := g.target[m.ID]
	keep, revoke, take := Assignment{}, Assignment{}, Assignment{}
	unreleased := false
	for t, ps := range m.Assigned {
		for _, p := range ps {
			if target.Has(t, p) {
				keep[t] = append(keep[t], p)
			} else {
				revoke[t] = append(revoke[t], p)
			}
		}
	}
	for t, ps := range target {
		for _, p := range ps {
			if m.Assigned.Has(t, p) {
				continue
			}
			if o := g.owners[t][p]; o != "" && o != m.ID {
				unreleased = true
				continue
			}
			take[t] = append(take[t], p)
		}
	}
	if len(revoke) > 0 {
		m.Assigned, m.Revoking = Normalize(keep), Normalize(revoke)
		m.State = UnrevokedPartitions
		m.revokeDeadline = now.Add(m.RebalanceTimeout)
		return
	}
	for t, ps := range take {
		keep[t] = append(keep[t], ps...)
	}
	m.Assigned = Normalize(keep)
	g.setOwner(m.Assigned, m.ID)
	if m.Epoch != g.assignmentEpoch {
		m.PreviousEpoch, m.Epoch = m.Epoch, g.assignmentEpoch
	}
	m.State = Stable
	if unreleased {
		m.State = UnreleasedPartitions
	}
}

// CheckOffsetCommit validates a commit's (or an OffsetFetch's) member and
// epoch: the member must exist and send its current epoch.
func (g *Group) CheckOffsetCommit(memberID string, epoch int32) error {
	m := g.members[memberID]
	if m == nil || m.Left() {
		return errorf(kerr.UnknownMemberID, "member %s is not in group %q", memberID, g.ID)
	}
	if epoch != m.Epoch {
		return errorf(kerr.StaleMemberEpoch, "member %s sent epoch %d, its epoch is %d", memberID, epoch, m.Epoch)
	}
	return nil
}
