package engine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine/consumergroup"
)

func classicAssignment(topic string, parts ...int32) []byte {
	a := kmsg.ConsumerMemberAssignment{Topics: []kmsg.ConsumerMemberAssignmentTopic{{Topic: topic, Partitions: parts}}}
	return a.AppendTo(nil)
}

func assignedParts(t *testing.T, b []byte) []int32 {
	t.Helper()
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(b); err != nil {
		t.Fatalf("assignment %x: %v", b, err)
	}
	var out []int32
	for _, tp := range a.Topics {
		out = append(out, tp.Partitions...)
	}
	slices.Sort(out)
	return out
}

// rejoin is a classic member's JoinGroup and SyncGroup; it returns the
// generation and the partitions it was given.
func rejoin(t *testing.T, g *Group, member string) (int32, []int32) {
	t.Helper()
	sub := kmsg.NewConsumerMemberMetadata()
	sub.Topics = []string{"t"}
	joined := make(chan JoinResult, 1)
	g.Join(JoinRequest{MemberID: member, ClientID: "c1", SessionTimeout: 10 * time.Minute, RebalanceTimeout: time.Minute,
		ProtocolType: "consumer", Protocols: []Protocol{{Name: "range", Metadata: sub.AppendTo(nil)}}, RequireKnownMemberID: true}, func(r JoinResult) { joined <- r })
	var jr JoinResult
	select {
	case jr = <-joined:
	case <-time.After(10 * time.Second):
		t.Fatal("JoinGroup not answered")
	}
	if jr.Err != nil || jr.MemberID != member {
		t.Fatalf("join: %+v", jr)
	}
	synced := make(chan SyncResult, 1)
	g.Sync(SyncRequest{MemberID: member, Generation: jr.Generation, Assignments: map[string][]byte{member: classicAssignment("t", 0, 1, 2)}}, func(r SyncResult) { synced <- r })
	select {
	case sr := <-synced:
		if sr.Err != nil {
			t.Fatalf("sync: %v", sr.Err)
		}
		return jr.Generation, assignedParts(t, sr.Assignment)
	case <-time.After(10 * time.Second):
		t.Fatal("SyncGroup not answered")
	}
	return 0, nil
}

// TestLiveUpgradeAndDowngrade: a classic group with a member switches to
// the consumer protocol when a consumer-protocol member joins; the
// classic member stays, rejoins, gives up partitions for the newcomer,
// and is still a classic member after a restart; when the
// consumer-protocol member leaves, the group is classic again and
// rebalances, and stays classic after another restart.
func TestLiveUpgradeAndDowngrade(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, nil)
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "t", Partitions: 4, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	co := e.Coordinator()
	c1 := formGeneration(t, co, "mig", classicAssignment("t", 0, 1, 2, 3))
	commit(t, co, "mig", c1, 1, map[int32]int64{0: 5}, nil)
	g, _ := co.Group("mig", false)

	join := consumergroup.Request{MemberID: "k1", Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}}
	resp, err := co.ConsumerHeartbeat("mig", join)
	if err != nil {
		t.Fatalf("a consumer-protocol member joining a live classic group: %v", err)
	}
	if resp.Assignment.Len() != 0 {
		t.Fatalf("k1 got %v while the classic member still consumes everything", resp.Assignment)
	}
	d, ok, _ := co.ConsumerGroup("mig")
	if !ok || len(d.Members) != 2 {
		t.Fatalf("after the upgrade: %+v", d)
	}
	// The classic member's generation is its epoch; it is told to rejoin.
	if err := g.Heartbeat(c1, nil, 1); !errors.Is(err, kerr.RebalanceInProgress) {
		t.Fatalf("classic heartbeat after the upgrade: %v, want REBALANCE_IN_PROGRESS", err)
	}
	gen, parts := rejoin(t, g, c1)
	if len(parts) != 2 || gen <= 1 {
		t.Fatalf("the classic member kept %v at generation %d", parts, gen)
	}
	commit(t, co, "mig", c1, gen, map[int32]int64{parts[0]: 9}, nil)
	resp, err = co.ConsumerHeartbeat("mig", consumergroup.Request{MemberID: "k1", Epoch: resp.Epoch, RebalanceTimeout: -1, Owned: consumergroup.Assignment{}})
	if err != nil || resp.Assignment.Len() != 2 {
		t.Fatalf("k1 after the classic member let go: %+v %v", resp, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e = openEngine(t, dir, nil)
	co = e.Coordinator()
	g, _ = co.Group("mig", false)
	d, ok, _ = co.ConsumerGroup("mig")
	if !ok || len(d.Members) != 2 {
		t.Fatalf("after a restart: %+v", d)
	}
	for _, m := range d.Members {
		if m.Classic != (m.MemberID == c1) {
			t.Fatalf("member %s classic=%v after a restart", m.MemberID, m.Classic)
		}
	}
	if err := g.Heartbeat(c1, nil, gen); err != nil {
		t.Fatalf("the classic member's heartbeat after a restart: %v", err)
	}

	if _, err := co.ConsumerHeartbeat("mig", consumergroup.Request{MemberID: "k1", Epoch: consumergroup.LeaveEpoch}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := co.ConsumerGroup("mig"); ok {
		t.Fatal("still a consumer-protocol group after its last consumer-protocol member left")
	}
	gd := g.Describe()
	if gd.State != StatePreparingRebalance || len(gd.Members) != 1 || gd.Members[0].MemberID != c1 {
		t.Fatalf("after the downgrade: %+v", gd)
	}
	if err := g.Heartbeat(c1, nil, gen); !errors.Is(err, kerr.RebalanceInProgress) {
		t.Fatalf("classic heartbeat after the downgrade: %v", err)
	}
	// Its rejoin forms a classic generation, with itself as the leader.
	sub := kmsg.NewConsumerMemberMetadata()
	sub.Topics = []string{"t"}
	joined := make(chan JoinResult, 1)
	g.Join(JoinRequest{MemberID: c1, ClientID: "c1", SessionTimeout: 10 * time.Minute, RebalanceTimeout: time.Minute,
		ProtocolType: "consumer", Protocols: []Protocol{{Name: "range", Metadata: sub.AppendTo(nil)}}}, func(r JoinResult) { joined <- r })
	jr := <-joined
	if jr.Err != nil || jr.LeaderID != c1 || jr.Generation <= gen {
		t.Fatalf("classic rejoin after the downgrade: %+v", jr)
	}
	synced := make(chan SyncResult, 1)
	g.Sync(SyncRequest{MemberID: c1, Generation: jr.Generation, Assignments: map[string][]byte{c1: classicAssignment("t", 0, 1, 2, 3)}}, func(r SyncResult) { synced <- r })
	if sr := <-synced; sr.Err != nil {
		t.Fatal(sr.Err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e = openEngine(t, dir, nil)
	co = e.Coordinator()
	if _, ok, _ := co.ConsumerGroup("mig"); ok {
		t.Fatal("a consumer-protocol group again after a restart")
	}
	g, _ = co.Group("mig", false)
	if gd := g.Describe(); gd.State != StateStable || len(gd.Members) != 1 {
		t.Fatalf("after the last restart: %+v", gd)
	}
	if s := offsetsOf(t, co, "mig"); s == "" {
		t.Fatal("the group's offsets are gone")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMigrationPolicyDisabled: with the policy disabled a live classic
// group refuses a consumer-protocol member, as before live migration.
func TestMigrationPolicyDisabled(t *testing.T) {
	e := openEngine(t, t.TempDir(), func(c *Config) { c.Groups.MigrationPolicy = MigrateDisabled })
	defer e.Close()
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "t", Partitions: 2, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	co := e.Coordinator()
	formGeneration(t, co, "g", classicAssignment("t", 0, 1))
	_, err := co.ConsumerHeartbeat("g", consumergroup.Request{MemberID: "k1", Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}})
	if !errors.Is(err, kerr.GroupIDNotFound) {
		t.Fatalf("join of a live classic group with migration disabled: %v, want GROUP_ID_NOT_FOUND", err)
	}
	if _, err := ParseMigrationPolicy("sideways"); err == nil {
		t.Fatal("a bad policy name was taken")
	}
}

// cooperativeSubscription is a v1 subscription to t that says which
// partitions the member still owns (as a cooperative client sends it).
func cooperativeSubscription(owned ...int32) []byte {
	sub := kmsg.NewConsumerMemberMetadata()
	sub.Version = 1
	sub.Topics = []string{"t"}
	if len(owned) > 0 {
		sub.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "t", Partitions: owned}}
	}
	return sub.AppendTo(nil)
}

func joinNow(t *testing.T, g *Group, req JoinRequest) JoinResult {
	t.Helper()
	ch := make(chan JoinResult, 1)
	g.Join(req, func(r JoinResult) { ch <- r })
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("JoinGroup not answered")
	}
	return JoinResult{}
}

func migrationEngine(t *testing.T, dir string) (*Engine, *Coordinator) {
	t.Helper()
	e := openEngine(t, dir, nil)
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "t", Partitions: 4, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	return e, e.Coordinator()
}

func coopJoin(member string, inst *string, owned ...int32) JoinRequest {
	return JoinRequest{MemberID: member, InstanceID: inst, ClientID: "c", SessionTimeout: 10 * time.Minute, RebalanceTimeout: time.Minute,
		ProtocolType: "consumer", Protocols: []Protocol{{Name: "range", Metadata: cooperativeSubscription(owned...)}}}
}

// TestUpgradeWaitsForAStableGeneration: mid-rebalance (CompletingRebalance
// has no assignments) the consumer-protocol join is told to retry; once
// the generation is synced, partitions a cooperative member was asked to
// give up stay its own until it rejoins without them, so the joiner does
// not get them at once.
func TestUpgradeWaitsForAStableGeneration(t *testing.T) {
	_, co := migrationEngine(t, t.TempDir())
	a := formGeneration(t, co, "g", classicAssignment("t", 0, 1, 2, 3))
	g, _ := co.Group("g", false)
	bch := make(chan JoinResult, 1)
	g.Join(coopJoin("", nil), func(r JoinResult) { bch <- r })
	ar := joinNow(t, g, coopJoin(a, nil, 0, 1, 2, 3)) // still owns all four
	br := <-bch
	if ar.Err != nil || br.Err != nil || g.Describe().State != StateCompletingRebalance {
		t.Fatalf("generation 2: %+v %+v %v", ar, br, g.Describe().State)
	}
	join := consumergroup.Request{MemberID: "k1", Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}}
	if _, err := co.ConsumerHeartbeat("g", join); !errors.Is(err, kerr.CoordinatorLoadInProgress) {
		t.Fatalf("a join while the classic group completes a rebalance: %v, want COORDINATOR_LOAD_IN_PROGRESS (retry)", err)
	}
	// The leader (a) keeps 0 and 1 and withholds 2 and 3 from b this
	// generation (cooperative: a must give them up first).
	synced := make(chan SyncResult, 2)
	g.Sync(SyncRequest{MemberID: br.MemberID, Generation: br.Generation}, func(r SyncResult) { synced <- r })
	g.Sync(SyncRequest{MemberID: a, Generation: ar.Generation, Assignments: map[string][]byte{a: classicAssignment("t", 0, 1), br.MemberID: classicAssignment("t")}},
		func(r SyncResult) { synced <- r })
	for range 2 {
		if r := <-synced; r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	resp, err := co.ConsumerHeartbeat("g", join)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Assignment.Len() != 0 {
		t.Fatalf("k1 got %v while a may still consume 2 and 3", resp.Assignment)
	}
	d, _, _ := co.ConsumerGroup("g")
	for _, m := range d.Members {
		if m.MemberID == a && (m.State != consumergroup.UnrevokedPartitions || m.Assigned.Len() != 2) {
			t.Fatalf("a after the upgrade: %+v", m)
		}
	}
}

// TestStaticClassicMemberReplaced: a static classic member whose instance
// restarted under a new id is fenced (FENCED_INSTANCE_ID on Heartbeat,
// JoinGroup and commits), so the two processes cannot take turns.
func TestStaticClassicMemberReplaced(t *testing.T) {
	_, co := migrationEngine(t, t.TempDir())
	if _, err := co.ConsumerHeartbeat("g", consumergroup.Request{MemberID: "k1", Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	g, _ := co.Group("g", false)
	inst := "i1"
	first := joinNow(t, g, coopJoin("", &inst))
	second := joinNow(t, g, coopJoin("", &inst)) // the instance restarted elsewhere
	if first.Err != nil || second.Err != nil || second.MemberID == first.MemberID {
		t.Fatalf("joins: %+v %+v", first, second)
	}
	if err := g.Heartbeat(first.MemberID, &inst, first.Generation); !errors.Is(err, kerr.FencedInstanceID) {
		t.Fatalf("the replaced member's heartbeat: %v, want FENCED_INSTANCE_ID", err)
	}
	if r := joinNow(t, g, coopJoin(first.MemberID, &inst)); !errors.Is(r.Err, kerr.FencedInstanceID) {
		t.Fatalf("the replaced member's JoinGroup: %v, want FENCED_INSTANCE_ID", r.Err)
	}
	if _, err := g.CheckCommit(first.MemberID, &inst, first.Generation, nil); !errors.Is(err, kerr.FencedInstanceID) {
		t.Fatalf("the replaced member's commit: %v, want FENCED_INSTANCE_ID", err)
	}
}

// TestStaticUpgradeReplacesClassicInstance: a rolling upgrade of a static
// member: its new consumer-protocol process joins with the instance id
// the classic one still holds, takes its place and partitions at once
// (Kafka does the same), and the classic one is fenced.
func TestStaticUpgradeReplacesClassicInstance(t *testing.T) {
	_, co := migrationEngine(t, t.TempDir())
	g, _ := co.Group("g", true)
	inst := "i1"
	jr := joinNow(t, g, coopJoin("", &inst))
	synced := make(chan SyncResult, 1)
	g.Sync(SyncRequest{MemberID: jr.MemberID, Generation: jr.Generation, Assignments: map[string][]byte{jr.MemberID: classicAssignment("t", 0, 1, 2, 3)}}, func(r SyncResult) { synced <- r })
	if r := <-synced; r.Err != nil {
		t.Fatal(r.Err)
	}
	resp, err := co.ConsumerHeartbeat("g", consumergroup.Request{MemberID: "k1", InstanceID: &inst, Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}})
	if err != nil || resp.Assignment.Len() != 4 {
		t.Fatalf("the upgraded instance's join: %+v %v", resp, err)
	}
	if err := g.Heartbeat(jr.MemberID, &inst, jr.Generation); !errors.Is(err, kerr.FencedInstanceID) {
		t.Fatalf("the old classic process's heartbeat: %v", err)
	}
}

// TestRefusedJoinLeavesTheClassicGroup: a join the converted group would
// refuse (an assignor the broker does not have) changes nothing: the
// group stays classic with its member, in memory and after a restart.
func TestRefusedJoinLeavesTheClassicGroup(t *testing.T) {
	dir := t.TempDir()
	e, co := migrationEngine(t, dir)
	c1 := formGeneration(t, co, "g", classicAssignment("t", 0, 1, 2, 3))
	bogus := "bogus"
	if _, err := co.ConsumerHeartbeat("g", consumergroup.Request{MemberID: "k1", Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}, ServerAssignor: &bogus}); err == nil {
		t.Fatal("a join naming an unknown assignor was taken")
	}
	check := func(co *Coordinator) {
		t.Helper()
		if _, ok, _ := co.ConsumerGroup("g"); ok {
			t.Fatal("the group switched for a refused join")
		}
		g, _ := co.Group("g", false)
		if d := g.Describe(); len(d.Members) != 1 || d.Members[0].MemberID != c1 || d.State != StateStable {
			t.Fatalf("the classic group: %+v", d)
		}
	}
	check(co)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	check(openEngine(t, dir, nil).Coordinator())
}

// TestDowngradeIsPersisted: a restart between the downgrade and the next
// classic generation keeps the classic members.
func TestDowngradeIsPersisted(t *testing.T) {
	dir := t.TempDir()
	e, co := migrationEngine(t, dir)
	c1 := formGeneration(t, co, "mig", classicAssignment("t", 0, 1, 2, 3))
	for _, r := range []consumergroup.Request{{MemberID: "k1", Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}}, {MemberID: "k1", Epoch: consumergroup.LeaveEpoch}} {
		if _, err := co.ConsumerHeartbeat("mig", r); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	g, _ := openEngine(t, dir, nil).Coordinator().Group("mig", false)
	if g == nil {
		t.Fatal("the group is gone after a restart")
	}
	if d := g.Describe(); len(d.Members) != 1 || d.Members[0].MemberID != c1 || d.ProtocolType != ConsumerTypeName {
		t.Fatalf("after a restart: %+v", d)
	}
}

// TestClassicMembersShareAProtocol: a classic member joins a consumer
// group only with a protocol every classic member there supports.
func TestClassicMembersShareAProtocol(t *testing.T) {
	_, co := migrationEngine(t, t.TempDir())
	if _, err := co.ConsumerHeartbeat("g", consumergroup.Request{MemberID: "k1", Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	g, _ := co.Group("g", false)
	for i, ps := range [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}} {
		req := JoinRequest{ClientID: "x", SessionTimeout: 10 * time.Minute, RebalanceTimeout: time.Minute, ProtocolType: "consumer"}
		for _, p := range ps {
			req.Protocols = append(req.Protocols, Protocol{Name: p, Metadata: cooperativeSubscription()})
		}
		r := joinNow(t, g, req)
		if i < 2 && r.Err != nil {
			t.Fatalf("join %v: %v", ps, r.Err)
		}
		if i == 2 && !errors.Is(r.Err, kerr.InconsistentGroupProtocol) {
			t.Fatalf("join %v, with no protocol all three support: %v, want INCONSISTENT_GROUP_PROTOCOL", ps, r.Err)
		}
	}
}

// TestClassicReplacementDowngrades: a static classic member replacing the
// last consumer-protocol member turns the group back into a classic one.
func TestClassicReplacementDowngrades(t *testing.T) {
	_, co := migrationEngine(t, t.TempDir())
	inst := "i1"
	if _, err := co.ConsumerHeartbeat("g", consumergroup.Request{MemberID: "k1", InstanceID: &inst, Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	g, _ := co.Group("g", false)
	if r := joinNow(t, g, coopJoin("", nil)); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := joinNow(t, g, coopJoin("", &inst)); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, ok, _ := co.ConsumerGroup("g"); ok {
		t.Fatal("still a consumer group with classic members only")
	}
	if d := g.Describe(); len(d.Members) != 2 {
		t.Fatalf("the classic group: %+v", d)
	}
}

// TestClassicMemberIDNotTakenOver: a ConsumerGroupHeartbeat naming a
// classic member's id, even at epoch 0, gets nothing of its partitions.
func TestClassicMemberIDNotTakenOver(t *testing.T) {
	_, co := migrationEngine(t, t.TempDir())
	a := formGeneration(t, co, "g", classicAssignment("t", 0, 1, 2, 3))
	if _, err := co.ConsumerHeartbeat("g", consumergroup.Request{MemberID: a, Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}}); !errors.Is(err, kerr.UnknownMemberID) {
		t.Fatalf("a join under a classic member's id: %v, want UNKNOWN_MEMBER_ID", err)
	}
	if _, err := co.ConsumerHeartbeat("g", consumergroup.Request{MemberID: "k1", Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := co.ConsumerHeartbeat("g", consumergroup.Request{MemberID: a, Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}}); !errors.Is(err, kerr.UnknownMemberID) {
		t.Fatalf("a join under a classic member's id in the consumer group: %v, want UNKNOWN_MEMBER_ID", err)
	}
}

// TestDowngradeKeepsMembersGenerations: after the downgrade every classic
// member is behind the new generation (the leave bumped the epoch); its
// commit with its generation (what a Java client does before it rejoins)
// and its heartbeat are taken, also once the coordinator restarted, so
// that it rejoins under its id instead of dropping its partitions.
func TestDowngradeKeepsMembersGenerations(t *testing.T) {
	dir := t.TempDir()
	e, co := migrationEngine(t, dir)
	c1 := formGeneration(t, co, "mig", classicAssignment("t", 0, 1, 2, 3))
	for _, r := range []consumergroup.Request{{MemberID: "k1", Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}}, {MemberID: "k1", Epoch: consumergroup.LeaveEpoch}} {
		if _, err := co.ConsumerHeartbeat("mig", r); err != nil {
			t.Fatal(err)
		}
	}
	g, _ := co.Group("mig", false)
	gen := int32(1) // c1's generation (= its epoch) before the downgrade
	if err := g.Heartbeat(c1, nil, gen); !errors.Is(err, kerr.RebalanceInProgress) {
		t.Fatalf("heartbeat: %v", err)
	}
	if _, err := co.CommitOffsets("mig", c1, nil, gen, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 7}}); errors.Is(err, kerr.IllegalGeneration) {
		t.Errorf("commit right after the downgrade: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	g, _ = openEngine(t, dir, nil).Coordinator().Group("mig", false)
	if err := g.Heartbeat(c1, nil, gen); errors.Is(err, kerr.IllegalGeneration) {
		t.Errorf("heartbeat after a restart: %v (state %v)", err, g.Describe().State)
	}
}
