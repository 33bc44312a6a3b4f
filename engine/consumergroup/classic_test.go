package consumergroup

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// classicClient plays a classic member the way Kafka's clients do: an
// eager one drops everything before it rejoins; a cooperative one reports
// what it owns in its subscription and drops, after SyncGroup, what is
// not in its assignment; both rejoin when a heartbeat says
// REBALANCE_IN_PROGRESS.
type classicClient struct {
	id          string
	gen         int32
	owned       Assignment
	topics      []string
	cooperative bool
	// revoking: what a cooperative client still consumes after a
	// SyncGroup took it away, until its next JoinGroup (it commits and
	// lets go in between).
	revoking Assignment
}

func (c *classicClient) join(t *testing.T, g *Group, now time.Time, topics Topics) {
	t.Helper()
	if !c.cooperative {
		c.owned = Assignment{}
	}
	c.revoking = nil
	for {
		gen, err := g.JoinClassic(now, topics, ClassicJoin{MemberID: c.id, SessionTimeout: time.Hour, RebalanceTimeout: time.Hour,
			Protocols: []ClassicProtocol{{Name: "range", Metadata: []byte{0, 1}}}, Topics: c.topics, Owned: c.owned.Clone()})
		if err != nil {
			t.Fatalf("%s join: %v", c.id, err)
		}
		c.gen = gen
		a, err := g.SyncClassic(now, c.id, nil, gen)
		if errors.Is(err, kerr.RebalanceInProgress) {
			continue
		}
		if err != nil {
			t.Fatalf("%s sync at generation %d: %v", c.id, gen, err)
		}
		if c.cooperative {
			c.revoking = Assignment{}
			for tp, ps := range c.owned {
				for _, p := range ps {
					if !a.Has(tp, p) {
						c.revoking[tp] = append(c.revoking[tp], p)
					}
				}
			}
		}
		c.owned = a
		return
	}
}

// beat heartbeats, and rejoins when told to.
func (c *classicClient) beat(t *testing.T, g *Group, now time.Time, topics Topics) {
	t.Helper()
	err := g.HeartbeatClassic(now, c.id, nil, c.gen)
	switch {
	case errors.Is(err, kerr.RebalanceInProgress):
		c.join(t, g, now, topics)
	case err != nil:
		t.Fatalf("%s heartbeat at generation %d: %v", c.id, c.gen, err)
	}
}

// TestMixedProtocolsRandomized runs classic (eager and cooperative) and
// consumer-protocol members in one group through random joins, leaves and
// heartbeats: no partition is ever consumed by two clients at once, and
// once everybody heartbeats again the group settles with every partition
// consumed.
func TestMixedProtocolsRandomized(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { mixedRun(t, seed, 1500) })
	}
}

func mixedRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	topics := fakeTopics{"a": 6, "b": 4}
	c := cfg()
	c.SessionTimeout = time.Hour
	g := New("g", c)
	now := t0
	var classics []*classicClient
	var consumers []*client
	next := 0
	overlap := func() error {
		seen := map[TopicID]map[int32]string{}
		add := func(id string, a Assignment) error {
			for tp, ps := range a {
				for _, p := range ps {
					if seen[tp] == nil {
						seen[tp] = map[int32]string{}
					}
					if o := seen[tp][p]; o != "" {
						return fmt.Errorf("partition %s/%d consumed by %s and %s", string(tp[:1]), p, o, id)
					}
					seen[tp][p] = id
				}
			}
			return nil
		}
		for _, cc := range classics {
			if err := add(cc.id, cc.owned); err != nil {
				return err
			}
			if err := add(cc.id+" (revoking)", cc.revoking); err != nil {
				return err
			}
		}
		for _, cc := range consumers {
			if err := add(cc.id, cc.owned); err != nil {
				return err
			}
		}
		return nil
	}
	for step := 0; step < steps; step++ {
		now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
		switch k := rng.IntN(12); {
		case k == 0 && len(classics)+len(consumers) < 7:
			next++
			cc := &classicClient{id: fmt.Sprintf("c%d", next), topics: []string{"a", "b"}, cooperative: rng.IntN(2) == 0}
			classics = append(classics, cc)
			cc.join(t, g, now, topics)
		case k == 1 && len(classics)+len(consumers) < 7:
			next++
			cc := &client{id: fmt.Sprintf("k%d", next), topics: []string{"a", "b"}}
			consumers = append(consumers, cc)
			cc.beat(t, g, now, topics)
		case k == 2 && len(classics) > 0:
			i := rng.IntN(len(classics))
			if err := g.LeaveClassic(classics[i].id, nil); err != nil {
				t.Fatalf("step %d: leave %s: %v", step, classics[i].id, err)
			}
			classics = append(classics[:i], classics[i+1:]...)
		case k == 3 && len(consumers) > 0:
			i := rng.IntN(len(consumers))
			if _, err := g.Heartbeat(now, topics, Request{MemberID: consumers[i].id, Epoch: LeaveEpoch}); err != nil {
				t.Fatalf("step %d: leave %s: %v", step, consumers[i].id, err)
			}
			consumers = append(consumers[:i], consumers[i+1:]...)
		case k < 8 && len(classics) > 0:
			classics[rng.IntN(len(classics))].beat(t, g, now, topics)
		case len(consumers) > 0:
			consumers[rng.IntN(len(consumers))].beat(t, g, now, topics)
		}
		if err := overlap(); err != nil {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
		checkOwners(t, g)
		if g.OnlyClassic() != (len(classics) > 0 && len(consumers) == 0) {
			t.Fatalf("step %d: OnlyClassic %v with %d classic and %d consumer members", step, g.OnlyClassic(), len(classics), len(consumers))
		}
	}
	if len(classics)+len(consumers) == 0 {
		return
	}
	for round := 0; round < 20; round++ {
		now = now.Add(time.Second)
		for _, cc := range classics {
			cc.beat(t, g, now, topics)
		}
		for _, cc := range consumers {
			cc.beat(t, g, now, topics)
		}
		if err := overlap(); err != nil {
			t.Fatalf("settling round %d: %v", round, err)
		}
	}
	total := 0
	for _, cc := range classics {
		total += cc.owned.Len()
	}
	for _, cc := range consumers {
		total += cc.owned.Len()
	}
	if total != 10 || g.State() != "Stable" {
		t.Fatalf("settled with %d of 10 partitions consumed, group %s", total, g.State())
	}
}

// TestClassicMemberRules: generations, fencing and the errors classic
// clients expect from a consumer-protocol group.
func TestClassicMemberRules(t *testing.T) {
	topics := fakeTopics{"a": 4}
	g := New("g", cfg())
	c1 := &classicClient{id: "c1", topics: []string{"a"}}
	c1.join(t, g, t0, topics)
	if c1.owned.Len() != 4 {
		t.Fatalf("alone, c1 got %d partitions", c1.owned.Len())
	}
	if err := g.HeartbeatClassic(t0, "c1", nil, c1.gen+1); !errors.Is(err, kerr.IllegalGeneration) {
		t.Fatalf("heartbeat with a wrong generation: %v", err)
	}
	if err := g.CheckOffsetCommit("c1", c1.gen-1); !errors.Is(err, kerr.IllegalGeneration) {
		t.Fatalf("commit with a stale generation: %v, want ILLEGAL_GENERATION", err)
	}
	if err := g.CheckOffsetCommit("c1", c1.gen); err != nil {
		t.Fatal(err)
	}
	// A consumer-protocol member joins: c1 is told to rejoin and gives
	// up half, which k1 gets only once c1 reported them gone.
	k1 := &client{id: "k1", topics: []string{"a"}}
	k1.beat(t, g, t0, topics)
	if k1.owned.Len() != 0 {
		t.Fatalf("k1 got %v while c1 still consumes everything", k1.owned)
	}
	if err := g.HeartbeatClassic(t0, "c1", nil, c1.gen); !errors.Is(err, kerr.RebalanceInProgress) {
		t.Fatalf("c1's heartbeat after k1 joined: %v, want REBALANCE_IN_PROGRESS", err)
	}
	c1.join(t, g, t0, topics)
	if c1.owned.Len() != 2 {
		t.Fatalf("c1 kept %d partitions", c1.owned.Len())
	}
	k1.beat(t, g, t0, topics)
	if k1.owned.Len() != 2 {
		t.Fatalf("k1 got %d partitions", k1.owned.Len())
	}
	// A classic request for a consumer-protocol member, and the reverse.
	if _, err := g.SyncClassic(t0, "k1", nil, k1.epoch); !errors.Is(err, kerr.UnknownMemberID) {
		t.Fatalf("SyncGroup for a consumer-protocol member: %v", err)
	}
	if _, err := g.Heartbeat(t0, topics, Request{MemberID: "c1", Epoch: c1.gen}); !errors.Is(err, kerr.UnknownMemberID) {
		t.Fatalf("ConsumerGroupHeartbeat for a classic member: %v", err)
	}
	if g.OnlyClassic() || g.Member("c1").Classic == nil || g.Member("k1").Classic != nil {
		t.Fatal("OnlyClassic or the members' protocols wrong with one member of each")
	}
	// The classic member stops heartbeating after being told to rejoin:
	// it is removed after its rebalance timeout, not held forever.
	k2 := &client{id: "k2", topics: []string{"a"}}
	k2.beat(t, g, t0, topics)
	if err := g.HeartbeatClassic(t0, "c1", nil, c1.gen); !errors.Is(err, kerr.RebalanceInProgress) {
		t.Fatalf("c1's heartbeat after k2 joined: %v", err)
	}
	if gone := g.Expire(t0.Add(2 * time.Hour)); len(gone) == 0 {
		t.Fatal("a classic member that never rejoined was not removed")
	}
}

// TestClassicMemberPersisted: a classic member's metadata survives a
// replay of the records, so it is still treated as classic.
func TestClassicMemberPersisted(t *testing.T) {
	topics := fakeTopics{"a": 2}
	g := New("g", cfg())
	c1 := &classicClient{id: "c1", topics: []string{"a"}}
	c1.join(t, g, t0, topics)
	r := New("g", cfg())
	applyChanges(r, g.TakeChanges(false))
	if err := r.Loaded(t0); err != nil {
		t.Fatal(err)
	}
	m := r.Member("c1")
	if m == nil || m.Classic == nil || m.Classic.SessionTimeout != time.Hour || len(m.Classic.Protocols) != 1 {
		t.Fatalf("replayed member: %+v", m)
	}
	if err := r.HeartbeatClassic(t0, "c1", nil, c1.gen); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradedStaticMemberKeepsNoRejoinDeadline: a classic static member
// told to rejoin (its deadline to do so set, state Stable) restarts as a
// consumer-protocol member with the same instance id: the replacement
// does not inherit that deadline, and lives on while it heartbeats.
func TestUpgradedStaticMemberKeepsNoRejoinDeadline(t *testing.T) {
	g := New("g", cfg())
	topics := fakeTopics{"t": 4, "u": 2}
	now := t0
	gen, err := g.JoinClassic(now, topics, ClassicJoin{MemberID: "A", InstanceID: "i", SessionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second,
		Protocols: []ClassicProtocol{{Name: "range", Metadata: []byte{0, 1}}}, Topics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.SyncClassic(now, "A", str("i"), gen); err != nil {
		t.Fatal(err)
	}
	// B subscribes to another topic: the epoch grows, A's target does not change.
	if _, err := g.Heartbeat(now, topics, Request{MemberID: "B", Epoch: 0, RebalanceTimeout: 30 * time.Second, SubscribedTopics: []string{"u"}}); err != nil {
		t.Fatal(err)
	}
	if err := g.HeartbeatClassic(now, "A", str("i"), gen); !errors.Is(err, kerr.RebalanceInProgress) {
		t.Fatalf("A's heartbeat: %v, want REBALANCE_IN_PROGRESS", err)
	}
	// A's process restarts with the consumer protocol, same instance id.
	resp, err := g.Heartbeat(now, topics, Request{MemberID: "A2", Epoch: 0, InstanceID: str("i"), RebalanceTimeout: 30 * time.Second, SubscribedTopics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	epoch, owned := resp.Epoch, resp.Assignment
	respB, _ := g.Heartbeat(now, topics, Request{MemberID: "B", Epoch: g.Member("B").Epoch, RebalanceTimeout: -1})
	_ = respB
	for i := 0; i < 20; i++ {
		now = now.Add(3 * time.Second)
		r, err := g.Heartbeat(now, topics, Request{MemberID: "A2", Epoch: epoch, RebalanceTimeout: -1, Owned: owned})
		if err != nil {
			t.Fatalf("after %v: A2's heartbeat: %v", now.Sub(t0), err)
		}
		epoch = r.Epoch
		if r.Assignment != nil {
			owned = r.Assignment
		}
		if _, err := g.Heartbeat(now, topics, Request{MemberID: "B", Epoch: g.Member("B").Epoch, RebalanceTimeout: -1}); err != nil {
			t.Fatal(err)
		}
		if gone := g.Expire(now); len(gone) > 0 {
			t.Fatalf("after %v, heartbeating every 3s, expired: %v (A2 state %v)", now.Sub(t0), gone, g.Member("A2"))
		}
	}
}

// TestReplacedConsumerMemberIsFenced: a consumer-protocol static member
// replaced by a classic process with the same instance id is fenced
// (FENCED_INSTANCE_ID, fatal to the client), not told UNKNOWN_MEMBER_ID,
// on which it would rejoin and take the instance back. (A join at epoch
// 0 with the instance id of a live classic member does replace it: that
// is the rolling upgrade of a static member, as in Kafka.)
func TestReplacedConsumerMemberIsFenced(t *testing.T) {
	g := New("g", cfg())
	topics := fakeTopics{"t": 4}
	now := t0
	r, err := g.Heartbeat(now, topics, Request{MemberID: "C", Epoch: 0, InstanceID: str("i"), RebalanceTimeout: 30 * time.Second, SubscribedTopics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	g.Heartbeat(now, topics, Request{MemberID: "D", Epoch: 0, RebalanceTimeout: 30 * time.Second, SubscribedTopics: []string{"t"}})
	// A classic process joins with the instance id: it replaces C at once.
	gen, err := g.JoinClassic(now, topics, ClassicJoin{MemberID: "K", InstanceID: "i", SessionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second,
		Protocols: []ClassicProtocol{{Name: "range", Metadata: []byte{0, 1}}}, Topics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	// C's next heartbeat.
	_, err = g.Heartbeat(now, topics, Request{MemberID: "C", Epoch: r.Epoch, InstanceID: str("i"), RebalanceTimeout: -1})
	if !errors.Is(err, kerr.FencedInstanceID) {
		t.Errorf("the replaced consumer-protocol member's heartbeat: %v, want FENCED_INSTANCE_ID", err)
	}
	if err := g.HeartbeatClassic(now, "K", str("i"), gen); err != nil && !errors.Is(err, kerr.RebalanceInProgress) {
		t.Errorf("the classic member that replaced it: %v", err)
	}
}
