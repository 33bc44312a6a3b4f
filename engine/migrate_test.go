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
