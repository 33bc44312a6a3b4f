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
	"bytes"
	"fmt"
	"hash/fnv"
	"maps"
	"regexp"
	"regexp/syntax"
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
	// Version changes whenever a topic is created, deleted or gets more
	// partitions: regexes are then matched again, and the subscribed
	// topics' metadata looked at again, at the next heartbeat.
	Version() uint64
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

// TopicIDs returns the assignment's topic ids, sorted.
func (a Assignment) TopicIDs() []TopicID {
	ids := slices.Collect(maps.Keys(a))
	slices.SortFunc(ids, func(x, y TopicID) int { return bytes.Compare(x[:], y[:]) })
	return ids
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
	// against the topics again, at the latest (at once when a regex or
	// the set of topics changes).
	RegexRefresh time.Duration
	// ReconcileInterval is the heartbeat interval told to a member that
	// has not reached its target yet (waiting for partitions another
	// member still owns): it learns they are free within this instead
	// of a whole HeartbeatInterval, so a moved partition pauses about
	// this long. At most HeartbeatInterval.
	ReconcileInterval time.Duration
	// MaxMetadataBytes bounds what all of a group's members' metadata
	// (ids, subscribed topic names, regexes) may take, so that members
	// cannot make the coordinator hold and write without bound; a join
	// or subscription past it gets GROUP_MAX_SIZE_REACHED. 0: 16 MiB.
	MaxMetadataBytes int
}

// SetTimeouts changes the session timeout and heartbeat interval (a
// group's consumer.session.timeout.ms and consumer.heartbeat.interval.ms
// configs); they apply from the next heartbeat of each member.
func (g *Group) SetTimeouts(session, heartbeat time.Duration) {
	g.cfg.SessionTimeout, g.cfg.HeartbeatInterval = session, heartbeat
	if g.cfg.ReconcileInterval > heartbeat {
		g.cfg.ReconcileInterval = heartbeat
	}
}

// DefaultConfig is Kafka's defaults.
func DefaultConfig() Config {
	return Config{SessionTimeout: 45 * time.Second, HeartbeatInterval: 5 * time.Second,
		Assignors: []string{"uniform", "range"}, RegexRefresh: 10 * time.Second, ReconcileInterval: 250 * time.Millisecond}
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
	// assignedSince is, for partitions in Assigned or Revoking, the
	// member epoch since which the member has owned them (KIP-1251's
	// assignment epoch): a commit with an older epoch than the member's
	// may commit those owned since that epoch or before. A partition
	// without an entry counts as owned since the current epoch (after a
	// load, which does not persist them: a commit must then send the
	// current epoch, as before KIP-1251).
	assignedSince map[TopicID]map[int32]int32

	// Classic is set for a member that speaks the classic protocol
	// (JoinGroup, SyncGroup, Heartbeat) in this group (classic.go); nil
	// for a consumer-protocol member.
	Classic *ClassicMeta

	sessionDeadline time.Time
	revokeDeadline  time.Time // zero unless revoking
	// regexAllowed filters what the member's regex may resolve to (the
	// member's principal's DESCRIBE permission); nil allows all.
	// filterKnown is false for a member loaded from the log until it
	// heartbeats (the filter is not persisted).
	regexAllowed func(topic string) bool
	filterKnown  bool
	// metaBytes is what its metadata counts against MaxMetadataBytes.
	metaBytes int
	// subs caches memberTopics: valid while subsValid and subsGen is the
	// group's resolveGen.
	subs         []string
	subsGen      uint64
	subsValid    bool
	subsComputed bool // subs was computed once (a change of it then counts)
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
	// Classic is set by JoinClassic: the request is a classic member's
	// JoinGroup (nil for a ConsumerGroupHeartbeat).
	Classic *ClassicMeta
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
	resolveGen   uint64 // grows with every resolution
	// resolvedVersion is the Topics version of the last resolution.
	resolvedVersion uint64
	union           []string
	unionValid      bool
	subsChanged     bool   // a member's subscription changed under it (memberTopics)
	unionGen        uint64 // grows with every computation of union
	// hashed: metadataHash was computed for the union of unionGen
	// hashedUnionGen and the topics of version hashedVersion.
	hashed         bool
	hashedUnionGen uint64
	hashedVersion  uint64
	metaBytes      int // the members' metaBytes
	compiled       map[string]*regexp.Regexp

	// What changed since TakeChanges (persist.go).
	dirty       map[string]bool // members whose records changed
	removed     map[string]bool
	targetDirty map[string]bool // members whose target changed
	epochDirty  bool
	// assignmentEpochDirty: the target's epoch changed.
	assignmentEpochDirty bool
	// persisted are the members whose records were written (Persisted),
	// so that a full rewrite can tombstone the others.
	persisted map[string]bool
}

// New returns an empty group.
func New(id string, cfg Config) *Group {
	cfg = cfg.withDefaults()
	return &Group{ID: id, cfg: cfg, members: map[string]*Member{}, static: map[string]string{},
		target: map[string]Assignment{}, owners: map[TopicID]map[int32]string{}, resolved: map[string][]string{},
		dirty: map[string]bool{}, removed: map[string]bool{}, targetDirty: map[string]bool{}, persisted: map[string]bool{}}
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
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = def.ReconcileInterval
	}
	cfg.ReconcileInterval = min(cfg.ReconcileInterval, cfg.HeartbeatInterval)
	if cfg.MaxMetadataBytes <= 0 {
		cfg.MaxMetadataBytes = 16 << 20
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
// by name or through a regex as last resolved (a copy); topics may be nil
// (then regex topics of a member loaded from the log that has not
// heartbeaten yet are left out).
func (g *Group) SubscribedTopics(topics Topics) map[string]bool {
	if topics != nil && g.resolvedAt.IsZero() {
		for _, m := range g.members {
			if m.Regex != "" {
				// Not resolved since a load: resolve now, so that a
				// regex member's topics count as subscribed.
				g.resolveRegexes(topics)
				g.resolvedAt, g.resolvedVersion = time.Time{}, 0
				break
			}
		}
	}
	out := map[string]bool{}
	for _, t := range g.subscribed(topics) {
		out[t] = true
	}
	return out
}

// subscribed is the sorted union of the members' subscriptions, cached
// until a subscription or a resolution changes (topics, when set, is
// what a member that has not heartbeaten since a load needs; see
// memberTopics).
func (g *Group) subscribed(topics Topics) []string {
	if g.unionValid {
		return g.union
	}
	set := map[string]bool{}
	for _, m := range g.members {
		for _, t := range g.memberTopics(m, topics) {
			set[t] = true
		}
	}
	union := slices.Sorted(maps.Keys(set))
	if topics == nil {
		return union // a view for a caller without the topics: not cached
	}
	g.union, g.unionValid = union, true
	g.unionGen++
	return union
}

// memberTopics is what member m subscribes to: its topic names and what
// its regex resolved to among the topics its principal may DESCRIBE,
// cached until its subscription, its filter or the resolution changes.
// A member loaded from the log whose filter is not known yet (it has not
// heartbeaten since) keeps, of its regex's topics, only those in its
// target or its assignment, which were filtered when they were computed.
func (g *Group) memberTopics(m *Member, topics Topics) []string {
	if m.subsValid && m.subsGen == g.resolveGen {
		return m.subs
	}
	// Without the topics, a member loaded from the log whose filter is
	// not known yet cannot be resolved: a view, not cached, no change.
	view := topics == nil && !m.filterKnown && m.Regex != ""
	out := slices.Clone(m.Topics)
	if m.Regex != "" {
		for _, n := range g.resolved[m.Regex] {
			switch {
			case m.filterKnown:
				if m.regexAllowed != nil && !m.regexAllowed(n) {
					continue
				}
			case topics == nil:
				continue
			default:
				id, _, ok := topics.ByName(n)
				if !ok || !(g.target[m.ID].owns(id) || m.Assigned.owns(id) || m.Revoking.owns(id)) {
					continue
				}
			}
			out = append(out, n)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if view {
		return out
	}
	if !slices.Equal(out, m.subs) {
		g.unionValid = false
		if m.subsComputed {
			// What the member subscribes to changed under it (its
			// filter, or a new resolution): the target must follow,
			// even where the group's union of topics did not change.
			g.subsChanged = true
		}
	}
	m.subs, m.subsGen, m.subsValid, m.subsComputed = out, g.resolveGen, true, true
	return out
}

// owns reports whether the assignment has a partition of topic t.
func (a Assignment) owns(t TopicID) bool { return len(a[t]) > 0 }

// invalidate drops m's cached subscription (it changed).
func (g *Group) invalidate(m *Member) {
	m.subsValid = false
	g.unionValid = false
}

func errorf(code *kerr.Error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", code, fmt.Sprintf(format, args...))
}

// Validate checks what a heartbeat can be refused for without looking at
// a group: its shape (INVALID_REQUEST) and, for a join, the assignor it
// names (UNSUPPORTED_ASSIGNOR) and its regex (INVALID_REGULAR_EXPRESSION).
// The coordinator calls it before it creates a group for a join; the
// group checks the subscription of every heartbeat itself, with its
// cache of compiled regexes.
func Validate(cfg Config, r *Request) error {
	if err := validateShape(r); err != nil {
		return err
	}
	if r.Epoch != JoinEpoch {
		return nil
	}
	return checkSubscription(cfg.withDefaults(), r, compile)
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
	case len(r.MemberID) > maxIDBytes:
		return errorf(kerr.InvalidRequest, "member id is %d bytes, at most %d", len(r.MemberID), maxIDBytes)
	case r.Epoch < StaticLeaveEpoch:
		return errorf(kerr.InvalidRequest, "member epoch %d", r.Epoch)
	case r.InstanceID != nil && (*r.InstanceID == "" || len(*r.InstanceID) > maxIDBytes):
		return errorf(kerr.InvalidRequest, "instance id of %d bytes, want 1 to %d", len(*r.InstanceID), maxIDBytes)
	case r.RackID != nil && len(*r.RackID) > maxIDBytes:
		return errorf(kerr.InvalidRequest, "rack id of %d bytes, at most %d", len(*r.RackID), maxIDBytes)
	}
	for _, t := range r.SubscribedTopics {
		if t == "" || len(t) > maxTopicNameBytes {
			return errorf(kerr.InvalidRequest, "subscribed topic name of %d bytes, want 1 to %d", len(t), maxTopicNameBytes)
		}
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

func checkSubscription(cfg Config, r *Request, compile func(string) (*regexp.Regexp, error)) error {
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

// compiledRegex is compile through the group's cache of compiled regexes.
func (g *Group) compiledRegex(expr string) (*regexp.Regexp, error) {
	if re := g.compiled[expr]; re != nil {
		return re, nil
	}
	re, err := compile(expr)
	if err != nil {
		return nil, err
	}
	if g.compiled == nil {
		g.compiled = map[string]*regexp.Regexp{}
	}
	g.compiled[expr] = re // dropped at the next resolution if no member keeps it
	return re, nil
}

// Bounds of what a member names: ids (member, instance, rack) and topic
// names (Kafka's 249).
const (
	maxIDBytes        = 255
	maxTopicNameBytes = 249
)

// maxRegexBytes bounds a subscription regex.
const maxRegexBytes = 4096

// maxRegexSize bounds the size of a subscription regex once its
// repetitions are expanded (about its compiled program's instructions):
// matching costs that much per byte of every topic name, under the
// group's lock.
const maxRegexSize = 1000

// compile compiles a subscription regex, anchored at both ends as Java's
// Pattern.matches is, refusing one too big to match cheaply.
func compile(expr string) (*regexp.Regexp, error) {
	if len(expr) > maxRegexBytes {
		return nil, fmt.Errorf("%d bytes, at most %d", len(expr), maxRegexBytes)
	}
	tree, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, err
	}
	if n := regexSize(tree, maxRegexSize+1); n > maxRegexSize {
		return nil, fmt.Errorf("it expands to more than %d instructions; simplify its repetitions", maxRegexSize)
	}
	return regexp.Compile(`^(?:` + expr + `)$`)
}

// regexSize estimates a parsed regex's expanded size, stopping once it
// passes limit.
func regexSize(re *syntax.Regexp, limit int) int {
	n := 1
	switch re.Op {
	case syntax.OpLiteral:
		n = len(re.Rune)
	case syntax.OpRepeat:
		times := re.Max
		if times < 0 {
			times = re.Min + 1
		}
		sub := regexSize(re.Sub[0], limit)
		if times > 0 && sub > limit/times {
			return limit
		}
		n = sub * max(times, 1)
	default:
		for _, sub := range re.Sub {
			n += regexSize(sub, limit)
			if n >= limit {
				return limit
			}
		}
	}
	return min(n, limit)
}

// Heartbeat handles one ConsumerGroupHeartbeat at time now.
func (g *Group) Heartbeat(now time.Time, topics Topics, r Request) (Response, error) {
	if err := g.validate(&r); err != nil {
		return Response{}, err
	}
	if r.Epoch == LeaveEpoch || r.Epoch == StaticLeaveEpoch {
		return g.leave(now, r)
	}
	if err := checkSubscription(g.cfg, &r, g.compiledRegex); err != nil {
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
	bump, before, saved := fresh, m.Assigned, *m
	switch {
	case r.Classic != nil:
		m.Classic = r.Classic
	case m.Classic != nil:
		// Not even with epoch 0: its id would take over the classic
		// member's partitions while that member still consumes them.
		return Response{}, errorf(kerr.UnknownMemberID, "member %s of group %q speaks the classic protocol (JoinGroup)", m.ID, g.ID)
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
			g.invalidate(m)
		}
	}
	// Every heartbeat carries its principal's filter (nil: all allowed).
	m.regexAllowed, m.filterKnown = r.RegexAllowed, true
	if m.Regex != "" {
		m.subsValid = false // recomputed below; the union only if it changed
	}
	if r.SubscribedRegex != nil && *r.SubscribedRegex != m.Regex {
		m.Regex, bump = *r.SubscribedRegex, true
		g.invalidate(m)
		if _, ok := g.resolved[m.Regex]; m.Regex != "" && !ok {
			g.resolveOne(m.Regex, topics)
		}
	}
	if n := memberBytes(m); n != m.metaBytes {
		if g.metaBytes-m.metaBytes+n > g.cfg.MaxMetadataBytes {
			err := errorf(kerr.GroupMaxSizeReached, "group %q's members would hold %d bytes of metadata (ids, topic names, regexes), more than %d (--group-max-metadata-bytes)",
				g.ID, g.metaBytes-m.metaBytes+n, g.cfg.MaxMetadataBytes)
			if fresh {
				g.drop(m)
			} else {
				*m = saved // the refused subscription is not taken
				g.invalidate(m)
			}
			return Response{}, err
		}
		g.metaBytes += n - m.metaBytes
		m.metaBytes = n
	}
	g.memberTopics(m, topics) // with its new filter: the union changes only if its topics did
	if r.ServerAssignor != nil && *r.ServerAssignor != m.Assignor {
		m.Assignor, bump = *r.ServerAssignor, true
	}
	m.sessionDeadline = now.Add(g.sessionTimeout(m))

	if g.refreshSubscription(now, topics) {
		bump = true
	}
	if g.subsChanged {
		bump, g.subsChanged = true, false
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
	if m.State == UnreleasedPartitions {
		// It waits for partitions others are giving up: it asks again
		// soon (Kafka keeps the usual interval, and such a partition
		// pauses until then).
		resp.HeartbeatInterval = g.cfg.ReconcileInterval
	}
	// The member is told its assignment when it joins, when it reports
	// what it owns (so a lost answer is corrected), when it is behind,
	// and when this heartbeat changed it.
	if r.Epoch == JoinEpoch || r.Owned != nil || r.Epoch != m.Epoch || !m.Assigned.Equal(before) {
		resp.Assignment = m.Assigned.Clone()
	}
	return resp, nil
}

// memberBytes is what a member's metadata counts against
// MaxMetadataBytes.
func memberBytes(m *Member) int {
	n := len(m.ID) + len(m.InstanceID) + len(m.RackID) + len(m.ClientID) + len(m.ClientHost) + len(m.Regex) + len(m.Assignor)
	for _, t := range m.Topics {
		n += len(t)
	}
	if m.Classic != nil {
		for _, p := range m.Classic.Protocols {
			n += len(p.Name) + len(p.Metadata)
		}
	}
	return n
}

// drop forgets a member that was just created by a refused join.
func (g *Group) drop(m *Member) {
	delete(g.members, m.ID)
	delete(g.dirty, m.ID)
	if m.InstanceID != "" && g.static[m.InstanceID] == m.ID {
		delete(g.static, m.InstanceID)
	}
	g.unionValid = false
}

// memberFor finds or creates the heartbeat's member and checks its epoch.
func (g *Group) memberFor(now time.Time, r Request) (m *Member, fresh bool, err error) {
	m = g.members[r.MemberID]
	if r.Epoch != JoinEpoch {
		if r.InstanceID != nil {
			if cur := g.static[*r.InstanceID]; cur != "" && cur != r.MemberID {
				// Replaced by a newer process of the instance: fenced
				// (fatal to the client), not unknown (it would rejoin
				// and take the instance back).
				return nil, false, errorf(kerr.FencedInstanceID, "instance %q is member %s now", *r.InstanceID, cur)
			}
		}
		if m == nil {
			return nil, false, errorf(kerr.UnknownMemberID, "member %s is not in group %q", r.MemberID, g.ID)
		}
		if r.InstanceID != nil && *r.InstanceID != m.InstanceID {
			return nil, false, errorf(kerr.FencedInstanceID, "member %s has instance id %q, not %q", m.ID, m.InstanceID, *r.InstanceID)
		}
		return m, false, g.checkEpoch(m, r.Epoch, r.Owned)
	}
	inst := ""
	if r.InstanceID != nil {
		inst = *r.InstanceID
	}
	if m != nil {
		// A rejoin under an existing id (a lost answer, or a member
		// fenced by its epoch): the instance id cannot change, and the
		// member keeps its epoch and assignment and is told them again.
		if inst != m.InstanceID {
			return nil, false, errorf(kerr.FencedInstanceID, "member %s has instance id %q, not %q", m.ID, m.InstanceID, inst)
		}
		if m.Left() {
			m.Epoch = m.PreviousEpoch // a static member that left comes back under its id
			g.dirty[m.ID] = true
		}
		return m, false, nil
	}
	if inst != "" {
		if old := g.static[inst]; old != "" {
			prev := g.members[old]
			switch {
			case prev == nil:
				delete(g.static, inst) // stale: cannot happen, but never trust it
			case !prev.Left() && prev.Classic == nil && r.Classic == nil:
				return nil, false, errorf(kerr.UnreleasedInstanceID, "instance %q is still member %s; it must leave (or its session of %v expire) first", inst, old, g.cfg.SessionTimeout)
			default:
				// The instance comes back as a new member: it takes over
				// the old one's epoch and assignment, with no rebalance.
				// A classic one is replaced at once, as the classic
				// protocol does (it is fenced from then on).
				return g.replaceStatic(prev, r.MemberID, r.Classic), false, nil
			}
		}
	}
	if g.cfg.MaxSize > 0 && len(g.members) >= g.cfg.MaxSize {
		return nil, false, errorf(kerr.GroupMaxSizeReached, "group %q has %d members (group.consumer.max.size)", g.ID, len(g.members))
	}
	g.unionValid = false
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

func (g *Group) replaceStatic(prev *Member, id string, classic *ClassicMeta) *Member {
	epoch := prev.PreviousEpoch
	if !prev.Left() {
		epoch = prev.Epoch // a live classic member replaced at once
	}
	m := &Member{ID: id, InstanceID: prev.InstanceID, RackID: prev.RackID, Epoch: epoch, PreviousEpoch: prev.PreviousEpoch, Classic: classic,
		State: prev.State, RebalanceTimeout: prev.RebalanceTimeout, Topics: prev.Topics, Regex: prev.Regex, Assignor: prev.Assignor,
		Assigned: prev.Assigned, Revoking: prev.Revoking, metaBytes: prev.metaBytes,
		sessionDeadline: prev.sessionDeadline} // until this heartbeat is taken: a refused one must still expire
	g.unionValid = false
	delete(g.members, prev.ID)
	g.markRemoved(prev.ID)
	g.members[id] = m
	g.dirty[id] = true
	g.static[m.InstanceID] = id
	if t, ok := g.target[prev.ID]; ok {
		delete(g.target, prev.ID)
		g.target[id] = t
		g.targetDirty[id] = true
	}
	g.setOwner(m.Assigned, id)
	g.setOwner(m.Revoking, id)
	if prev.State == UnrevokedPartitions {
		// Its revocation is still due; a classic member's deadline to
		// rejoin (mustRejoin) is not the newcomer's.
		m.revokeDeadline = prev.revokeDeadline
	}
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
	g.unionValid = false
	g.metaBytes -= m.metaBytes
	if m.InstanceID != "" && g.static[m.InstanceID] == m.ID {
		delete(g.static, m.InstanceID)
	}
	g.epoch++
	g.epochDirty = true
	if len(g.members) == 0 {
		// Nothing to assign: the (empty) target is current.
		g.assignmentEpoch = g.epoch
		g.metadataHash = 0
		g.assignmentEpochDirty = true
	}
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
	if v := topics.Version(); now.Sub(g.resolvedAt) >= g.cfg.RegexRefresh || v != g.resolvedVersion {
		g.resolveRegexes(topics)
		g.resolvedAt, g.resolvedVersion = now, v
	}
	for _, o := range g.members {
		g.memberTopics(o, topics) // recomputes only what a resolution or a filter changed
	}
	union, v := g.subscribed(topics), topics.Version()
	if g.hashed && g.unionGen == g.hashedUnionGen && v == g.hashedVersion {
		return false // neither the topics nor the subscriptions changed
	}
	g.hashed, g.hashedUnionGen, g.hashedVersion = true, g.unionGen, v
	h := fnv.New64a()
	for _, name := range union {
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

// resolveRegexes matches every member's regex against the topics again.
func (g *Group) resolveRegexes(topics Topics) {
	want := map[string]bool{}
	for _, m := range g.members {
		if m.Regex != "" {
			want[m.Regex] = true
		}
	}
	g.resolved = make(map[string][]string, len(want))
	for expr := range g.compiled {
		if !want[expr] {
			delete(g.compiled, expr)
		}
	}
	if len(want) > 0 {
		names := topics.Names()
		slices.Sort(names)
		for expr := range want {
			g.resolved[expr] = g.match(expr, names)
		}
	}
	g.resolveGen++
	g.unionValid = false
}

// resolveOne resolves a regex a member just subscribed with.
func (g *Group) resolveOne(expr string, topics Topics) {
	names := topics.Names()
	slices.Sort(names)
	g.resolved[expr] = g.match(expr, names)
	g.resolveGen++
	g.unionValid = false
}

func (g *Group) match(expr string, names []string) []string {
	re, err := g.compiledRegex(expr)
	if err != nil {
		return nil // checked when it was subscribed
	}
	var out []string
	for _, n := range names {
		if re.MatchString(n) {
			out = append(out, n)
		}
	}
	return out
}

// computeTarget runs the assignor for the group epoch.
func (g *Group) computeTarget(topics Topics) {
	name := g.pickAssignor()
	subs := make([]Subscriber, 0, len(g.members))
	for _, m := range g.Members() {
		subs = append(subs, Subscriber{ID: m.ID, Rack: m.RackID, Current: g.target[m.ID], Topics: g.memberTopics(m, topics)})
	}
	next := assignors[name](subs, topics)
	for id, a := range next {
		if old, ok := g.target[id]; !ok || !old.Equal(a) {
			g.targetDirty[id] = true
		}
	}
	g.target = next
	g.assignor = name
	g.assignmentEpoch = g.epoch
	g.assignmentEpochDirty = true
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
		m.pruneAssignedSince()
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
	if m.Epoch != g.assignmentEpoch {
		// What it keeps it has owned since its current epoch at
		// the latest; what it takes, since the one it moves to.
		m.recordAssigned(keep, m.Epoch, false)
		m.recordAssigned(take, g.assignmentEpoch, true)
	}
	for t, ps := range take {
		keep[t] = append(keep[t], ps...)
	}
	m.Assigned = Normalize(keep)
	m.pruneAssignedSince()
	g.setOwner(m.Assigned, m.ID)
	if m.Epoch != g.assignmentEpoch {
		m.PreviousEpoch, m.Epoch = m.Epoch, g.assignmentEpoch
	}
	m.State = Stable
	if unreleased {
		m.State = UnreleasedPartitions
	}
}

// CheckOffsetCommit validates an OffsetFetch's member and epoch: the
// member must exist and send its current epoch.
func (g *Group) CheckOffsetCommit(memberID string, epoch int32) error {
	_, err := g.CheckCommitPartitions(memberID, epoch, nil)
	return err
}

// CheckCommitPartitions validates a commit's member and epoch, and each
// of its partitions (KIP-1251): a member that sends its current epoch may
// commit any partition (stale is nil). A consumer-protocol member that
// sends an older one (its heartbeat moved it on before it saw the
// answer) may commit the partitions it has owned since that epoch or
// before; stale[i] reports that parts[i] is not one of them
// (STALE_MEMBER_EPOCH for that partition). With no parts, an older epoch
// is stale as a whole. A classic member must send its current
// generation.
func (g *Group) CheckCommitPartitions(memberID string, epoch int32, parts []TopicPartition) (stale []bool, err error) {
	m := g.members[memberID]
	if m == nil || m.Left() {
		return nil, errorf(kerr.UnknownMemberID, "member %s is not in group %q", memberID, g.ID)
	}
	switch {
	case epoch == m.Epoch:
		return nil, nil
	case m.Classic != nil:
		return nil, errorf(kerr.IllegalGeneration, "member %s sent generation %d, its generation is %d", memberID, epoch, m.Epoch)
	case epoch > m.Epoch || epoch <= 0 || len(parts) == 0:
		return nil, errorf(kerr.StaleMemberEpoch, "member %s sent epoch %d, its epoch is %d", memberID, epoch, m.Epoch)
	}
	stale = make([]bool, len(parts))
	for i, tp := range parts {
		since, owned := m.ownedSince(tp.Topic, tp.Partition)
		stale[i] = !owned || since > epoch
	}
	return stale, nil
}

// TopicPartition names a partition by its topic's id.
type TopicPartition struct {
	Topic     TopicID
	Partition int32
}

// ownedSince is the epoch since which the member has owned partition p
// of topic t, false when it does not own it.
func (m *Member) ownedSince(t TopicID, p int32) (int32, bool) {
	if !m.Assigned.Has(t, p) && !m.Revoking.Has(t, p) {
		return 0, false
	}
	if since, ok := m.assignedSince[t][p]; ok {
		return since, true
	}
	return m.Epoch, true
}

// recordAssigned notes that the member owns the partitions of a since
// epoch: over what is known already when replace, else only where
// nothing is.
func (m *Member) recordAssigned(a Assignment, epoch int32, replace bool) {
	for t, ps := range a {
		for _, p := range ps {
			if m.assignedSince == nil {
				m.assignedSince = map[TopicID]map[int32]int32{}
			}
			byPart := m.assignedSince[t]
			if byPart == nil {
				byPart = map[int32]int32{}
				m.assignedSince[t] = byPart
			}
			if _, known := byPart[p]; replace || !known {
				byPart[p] = epoch
			}
		}
	}
}

// pruneAssignedSince forgets the partitions the member no longer owns.
func (m *Member) pruneAssignedSince() {
	for t, byPart := range m.assignedSince {
		for p := range byPart {
			if !m.Assigned.Has(t, p) && !m.Revoking.Has(t, p) {
				delete(byPart, p)
			}
		}
		if len(byPart) == 0 {
			delete(m.assignedSince, t)
		}
	}
}
