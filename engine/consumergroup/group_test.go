package consumergroup

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

type fakeTopics map[string]int32

func idOf(name string) TopicID {
	var id TopicID
	copy(id[:], name)
	return id
}

func (f fakeTopics) ByName(name string) (TopicID, int32, bool) {
	n, ok := f[name]
	return idOf(name), n, ok
}

// Version is a hash of the topic names and partition counts: it changes
// when a topic is added, removed or grows, as the engine's generation
// does.
func (f fakeTopics) Version() uint64 {
	var v uint64
	for n, parts := range f {
		h := uint64(14695981039346656037)
		for i := 0; i < len(n); i++ {
			h = (h ^ uint64(n[i])) * 1099511628211
		}
		v += h * uint64(parts+1)
	}
	return v
}

func (f fakeTopics) Names() []string {
	out := make([]string, 0, len(f))
	for n := range f {
		out = append(out, n)
	}
	return out
}

var t0 = time.Unix(1_000_000, 0)

func cfg() Config {
	c := DefaultConfig()
	c.SessionTimeout = 10 * time.Second
	c.RegexRefresh = time.Second
	return c
}

func str(s string) *string { return &s }

// client plays one member the way a well-behaved client does: it joins,
// takes what it is told, revokes what it is told to drop, and reports
// what it owns on every heartbeat.
type client struct {
	id     string
	epoch  int32
	owned  Assignment
	topics []string
	regex  *string
	inst   *string
}

func (c *client) beat(t *testing.T, g *Group, now time.Time, topics Topics) Response {
	t.Helper()
	r := Request{MemberID: c.id, Epoch: c.epoch, InstanceID: c.inst, RebalanceTimeout: 5 * time.Second, SubscribedTopics: c.topics, SubscribedRegex: c.regex, Owned: c.owned}
	if c.epoch == JoinEpoch {
		r.Owned = Assignment{}
		if r.SubscribedTopics == nil && r.SubscribedRegex == nil {
			r.SubscribedTopics = []string{}
		}
	}
	resp, err := g.Heartbeat(now, topics, r)
	if err != nil {
		t.Fatalf("%s heartbeat (epoch %d): %v", c.id, c.epoch, err)
	}
	c.epoch = resp.Epoch
	if resp.Assignment != nil {
		c.owned = resp.Assignment.Clone()
	}
	return resp
}

// checkOwners: a partition is in at most one member's Assigned or
// Revoking, and the owners index agrees.
func checkOwners(t *testing.T, g *Group) {
	t.Helper()
	seen := map[TopicID]map[int32]string{}
	for _, m := range g.members {
		for _, a := range []Assignment{m.Assigned, m.Revoking} {
			for tp, ps := range a {
				for _, p := range ps {
					if seen[tp] == nil {
						seen[tp] = map[int32]string{}
					}
					if o := seen[tp][p]; o != "" {
						t.Fatalf("partition %x/%d owned by %s and %s", tp[:4], p, o, m.ID)
					}
					seen[tp][p] = m.ID
					if got := g.owners[tp][p]; got != m.ID {
						t.Fatalf("owners index says %q for %x/%d, member %s has it", got, tp[:4], p, m.ID)
					}
				}
			}
		}
	}
	for tp, o := range g.owners {
		for p, id := range o {
			if seen[tp][p] != id {
				t.Fatalf("owners index has %s for %x/%d, no member holds it", id, tp[:4], p)
			}
		}
	}
}

// clientsOverlap: two clients consuming one partition at once.
func clientsOverlap(cs []*client) error {
	seen := map[TopicID]map[int32]string{}
	for _, c := range cs {
		for tp, ps := range c.owned {
			for _, p := range ps {
				if seen[tp] == nil {
					seen[tp] = map[int32]string{}
				}
				if o := seen[tp][p]; o != "" {
					return fmt.Errorf("partition %x/%d consumed by %s and %s", tp[:4], p, o, c.id)
				}
				seen[tp][p] = c.id
			}
		}
	}
	return nil
}

func TestJoinAndSpread(t *testing.T) {
	topics := fakeTopics{"a": 6}
	g := New("g", cfg())
	now := t0
	cs := []*client{{id: "m1", topics: []string{"a"}}, {id: "m2", topics: []string{"a"}}, {id: "m3", topics: []string{"a"}}}
	cs[0].beat(t, g, now, topics)
	if cs[0].owned.Len() != 6 || cs[0].epoch != 1 {
		t.Fatalf("first member: %v epoch %d", cs[0].owned, cs[0].epoch)
	}
	for round := 0; round < 6; round++ {
		for _, c := range cs {
			c.beat(t, g, now, topics)
			checkOwners(t, g)
			if err := clientsOverlap(cs); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range cs {
		if c.owned.Len() != 2 || c.epoch != g.Epoch() {
			t.Fatalf("%s owns %v at epoch %d (group %d)", c.id, c.owned, c.epoch, g.Epoch())
		}
	}
	if g.State() != "Stable" {
		t.Fatalf("state %s", g.State())
	}
}

// TestRevokeBeforeReassign: a partition moves only after its owner reports
// it revoked, and the owner keeps consuming what it keeps meanwhile.
func TestRevokeBeforeReassign(t *testing.T) {
	topics := fakeTopics{"a": 2}
	g := New("g", cfg())
	a := &client{id: "a", topics: []string{"a"}}
	b := &client{id: "b", topics: []string{"a"}}
	a.beat(t, g, t0, topics)
	b.beat(t, g, t0, topics) // b joins: target gives it one of a's
	if b.owned.Len() != 0 {
		t.Fatalf("b got %v before a revoked", b.owned)
	}
	if g.members["b"].State != UnreleasedPartitions {
		t.Fatalf("b state %v", g.members["b"].State)
	}
	// a is told to keep one; it must not lose the other's fetches until
	// it reports it gone (keepalive: owned nil).
	epochBefore := a.epoch
	resp, err := g.Heartbeat(t0, topics, Request{MemberID: "a", Epoch: a.epoch, RebalanceTimeout: -1})
	if err != nil || resp.Assignment.Len() != 1 || resp.Epoch != epochBefore {
		t.Fatalf("a's revocation answer: %+v %v", resp, err)
	}
	if g.members["a"].State != UnrevokedPartitions {
		t.Fatalf("a state %v", g.members["a"].State)
	}
	b.beat(t, g, t0, topics)
	if b.owned.Len() != 0 {
		t.Fatalf("b got %v while a still owns it", b.owned)
	}
	a.owned = resp.Assignment
	a.beat(t, g, t0, topics) // reports the revocation
	if a.epoch != g.Epoch() {
		t.Fatalf("a epoch %d, group %d", a.epoch, g.Epoch())
	}
	b.beat(t, g, t0, topics)
	if b.owned.Len() != 1 || g.State() != "Stable" {
		t.Fatalf("b owns %v, state %s", b.owned, g.State())
	}
	checkOwners(t, g)
}

func TestEpochFencing(t *testing.T) {
	topics := fakeTopics{"a": 1}
	g := New("g", cfg())
	a := &client{id: "a", topics: []string{"a"}}
	a.beat(t, g, t0, topics)
	if _, err := g.Heartbeat(t0, topics, Request{MemberID: "a", Epoch: a.epoch + 1, RebalanceTimeout: -1}); !errors.Is(err, kerr.FencedMemberEpoch) {
		t.Fatalf("newer epoch: %v", err)
	}
	if _, err := g.Heartbeat(t0, topics, Request{MemberID: "x", Epoch: 3, RebalanceTimeout: -1}); !errors.Is(err, kerr.UnknownMemberID) {
		t.Fatalf("unknown member: %v", err)
	}
	// A lost answer: the member is one epoch behind and owns a subset.
	prev := a.epoch
	topics["a"] = 2 // a new partition bumps the group epoch
	a.beat(t, g, t0, topics)
	if a.epoch == prev || a.owned.Len() != 2 {
		t.Fatalf("after growth: epoch %d owned %v", a.epoch, a.owned)
	}
	resp, err := g.Heartbeat(t0, topics, Request{MemberID: "a", Epoch: prev, RebalanceTimeout: -1, Owned: Assignment{idOf("a"): {0}}})
	if err != nil || resp.Epoch != a.epoch || resp.Assignment.Len() != 2 {
		t.Fatalf("previous epoch with a subset: %+v %v", resp, err)
	}
	if _, err := g.Heartbeat(t0, topics, Request{MemberID: "a", Epoch: prev, RebalanceTimeout: -1}); !errors.Is(err, kerr.FencedMemberEpoch) {
		t.Fatalf("previous epoch without owned partitions: %v", err)
	}
	if err := g.CheckOffsetCommit("a", prev); !errors.Is(err, kerr.StaleMemberEpoch) {
		t.Fatalf("stale commit: %v", err)
	}
	if err := g.CheckOffsetCommit("a", a.epoch); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func TestBadRequests(t *testing.T) {
	topics := fakeTopics{"a": 1}
	g := New("g", cfg())
	for _, tc := range []struct {
		r    Request
		want *kerr.Error
	}{
		{Request{MemberID: "", Epoch: 0, SubscribedTopics: []string{"a"}}, kerr.InvalidRequest},
		{Request{MemberID: "m", Epoch: 0, RebalanceTimeout: -1, SubscribedTopics: []string{"a"}}, kerr.InvalidRequest},
		{Request{MemberID: "m", Epoch: 0}, kerr.InvalidRequest},
		{Request{MemberID: "m", Epoch: 0, SubscribedTopics: []string{"a"}, Owned: Assignment{idOf("a"): {0}}}, kerr.InvalidRequest},
		{Request{MemberID: "m", Epoch: -3, SubscribedTopics: []string{"a"}}, kerr.InvalidRequest},
		{Request{MemberID: "m", Epoch: 0, SubscribedTopics: []string{"a"}, ServerAssignor: str("sticky")}, kerr.UnsupportedAssignor},
		{Request{MemberID: "m", Epoch: 0, SubscribedRegex: str("a(")}, kerr.InvalidRegularExpression},
		{Request{MemberID: "m", Epoch: 0, SubscribedRegex: str(strings.Repeat("[a-z0-9-]{0,100}", 20))}, kerr.InvalidRegularExpression},
		{Request{MemberID: "m", Epoch: 0, SubscribedRegex: str("((a{100}){100}){100}")}, kerr.InvalidRegularExpression},
		{Request{MemberID: "m", Epoch: -1}, kerr.UnknownMemberID},
		{Request{MemberID: strings.Repeat("m", 256), Epoch: 0, SubscribedTopics: []string{"a"}}, kerr.InvalidRequest},
		{Request{MemberID: "m", Epoch: 0, InstanceID: str(strings.Repeat("i", 256)), SubscribedTopics: []string{"a"}}, kerr.InvalidRequest},
		{Request{MemberID: "m", Epoch: 0, RackID: str(strings.Repeat("r", 256)), SubscribedTopics: []string{"a"}}, kerr.InvalidRequest},
		{Request{MemberID: "m", Epoch: 0, SubscribedTopics: []string{strings.Repeat("t", 250)}}, kerr.InvalidRequest},
		{Request{MemberID: "m", Epoch: 0, SubscribedTopics: []string{""}}, kerr.InvalidRequest},
	} {
		if _, err := g.Heartbeat(t0, topics, tc.r); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.r, err, tc.want)
		}
	}
	if !g.Empty() {
		t.Fatalf("a refused request left a member")
	}
}

func TestRegexSubscription(t *testing.T) {
	topics := fakeTopics{"orders": 1, "orders-v2": 1, "payments": 1}
	g := New("g", cfg())
	a := &client{id: "a", regex: str("orders.*")}
	a.beat(t, g, t0, topics)
	if a.owned.Len() != 2 {
		t.Fatalf("regex resolved to %v", g.resolved["orders.*"])
	}
	// A new matching topic is picked up at the next heartbeat.
	topics["orders-v3"] = 2
	a.beat(t, g, t0.Add(100*time.Millisecond), topics)
	if a.owned.Len() != 4 {
		t.Fatalf("after a matching topic was created: %v (resolved %v)", a.owned, g.resolved["orders.*"])
	}
	// "payments" matches only anchored at both ends, as Java's matches().
	b := &client{id: "b", regex: str("pay")}
	b.beat(t, g, t0.Add(3*time.Second), topics)
	if len(g.resolved["pay"]) != 0 {
		t.Fatalf("unanchored match: %v", g.resolved["pay"])
	}
	// A regex filter (the member's DESCRIBE permission) hides topics.
	c := &client{id: "c"}
	_, err := g.Heartbeat(t0.Add(4*time.Second), topics, Request{MemberID: "c", RebalanceTimeout: time.Second, SubscribedRegex: str("payments"), Owned: Assignment{},
		RegexAllowed: func(string) bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	if ts := g.SubscribedTopics(topics); ts["payments"] {
		t.Fatalf("a topic the member may not describe is subscribed: %v", ts)
	}
	_ = c
}

func TestStaticMember(t *testing.T) {
	topics := fakeTopics{"a": 4}
	g := New("g", cfg())
	a := &client{id: "a1", topics: []string{"a"}, inst: str("i")}
	b := &client{id: "b", topics: []string{"a"}}
	for i := 0; i < 4; i++ {
		a.beat(t, g, t0, topics)
		b.beat(t, g, t0, topics)
	}
	epoch := g.Epoch()
	owned := a.owned
	// The static member leaves temporarily: no rebalance.
	resp, err := g.Heartbeat(t0, topics, Request{MemberID: "a1", Epoch: StaticLeaveEpoch, InstanceID: str("i"), RebalanceTimeout: -1})
	if err != nil || resp.Epoch != StaticLeaveEpoch || g.Epoch() != epoch {
		t.Fatalf("static leave: %+v %v, epoch %d→%d", resp, err, epoch, g.Epoch())
	}
	// Another member with the same instance while the first is active is
	// refused; after it left, a new member takes over its assignment.
	a2 := &client{id: "a2", topics: []string{"a"}, inst: str("i")}
	a2.beat(t, g, t0.Add(time.Second), topics)
	if !a2.owned.Equal(owned) || g.Epoch() != epoch || g.members["a1"] != nil {
		t.Fatalf("takeover: owned %v want %v, epoch %d→%d", a2.owned, owned, epoch, g.Epoch())
	}
	a3 := Request{MemberID: "a3", InstanceID: str("i"), RebalanceTimeout: time.Second, SubscribedTopics: []string{"a"}}
	if _, err := g.Heartbeat(t0, topics, a3); !errors.Is(err, kerr.UnreleasedInstanceID) {
		t.Fatalf("second active instance: %v", err)
	}
	checkOwners(t, g)
}

func TestExpiry(t *testing.T) {
	topics := fakeTopics{"a": 2}
	g := New("g", cfg())
	a := &client{id: "a", topics: []string{"a"}}
	b := &client{id: "b", topics: []string{"a"}}
	for i := 0; i < 3; i++ {
		a.beat(t, g, t0, topics)
		b.beat(t, g, t0, topics)
	}
	if d := g.NextDeadline(); !d.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("next deadline %v", d)
	}
	a.beat(t, g, t0.Add(5*time.Second), topics)
	if gone := g.Expire(t0.Add(10 * time.Second)); !slices.Equal(gone, []string{"b"}) {
		t.Fatalf("expired %v", gone)
	}
	a.beat(t, g, t0.Add(11*time.Second), topics)
	if a.owned.Len() != 2 {
		t.Fatalf("a owns %v after b expired", a.owned)
	}
	// A member that does not revoke within its rebalance timeout is
	// removed, and its partitions are free.
	c := &client{id: "c", topics: []string{"a"}}
	c.beat(t, g, t0.Add(12*time.Second), topics)
	resp, err := g.Heartbeat(t0.Add(12*time.Second), topics, Request{MemberID: "a", Epoch: a.epoch, RebalanceTimeout: -1})
	if err != nil || g.members["a"].State != UnrevokedPartitions {
		t.Fatalf("a not revoking: %+v %v", resp, err)
	}
	if gone := g.Expire(t0.Add(17 * time.Second)); !slices.Equal(gone, []string{"a"}) {
		t.Fatalf("expired %v; a kept its partitions past its rebalance timeout", gone)
	}
	c.beat(t, g, t0.Add(18*time.Second), topics)
	if c.owned.Len() != 2 {
		t.Fatalf("c owns %v", c.owned)
	}
}

func TestAssignors(t *testing.T) {
	topics := fakeTopics{"a": 7, "b": 3}
	subs := []Subscriber{{ID: "m1", Topics: []string{"a", "b"}}, {ID: "m2", Topics: []string{"a", "b"}}, {ID: "m3", Topics: []string{"a"}}}
	r := assignRange(subs, topics)
	if !slices.Equal(r["m1"][idOf("a")], []int32{0, 1, 2}) || !slices.Equal(r["m3"][idOf("a")], []int32{5, 6}) || !slices.Equal(r["m2"][idOf("b")], []int32{2}) {
		t.Fatalf("range: %v", r)
	}
	u := assignUniform(subs, topics)
	total := 0
	for _, s := range subs {
		n := u[s.ID].Len()
		total += n
		if n < 3 || n > 4 {
			t.Fatalf("uniform unbalanced: %s has %d (%v)", s.ID, n, u)
		}
	}
	if total != 10 {
		t.Fatalf("uniform assigned %d of 10", total)
	}
	// Sticky: with the old target as Current, a new member takes only
	// what balance requires.
	for i := range subs {
		subs[i].Current = u[subs[i].ID]
	}
	subs = append(subs, Subscriber{ID: "m4", Topics: []string{"a", "b"}})
	u2 := assignUniform(subs, topics)
	moved := 0
	for _, s := range subs[:3] {
		for tp, ps := range u[s.ID] {
			for _, p := range ps {
				if !u2[s.ID].Has(tp, p) {
					moved++
				}
			}
		}
	}
	if moved != u2["m4"].Len() || moved > 3 {
		t.Fatalf("uniform moved %d partitions, m4 got %d", moved, u2["m4"].Len())
	}
}

// TestRandomized drives a group with clients that join, leave, crash,
// lose answers and change subscriptions, and checks after every step that
// no partition has two owners, neither on the coordinator nor among the
// clients, and that a quiet group converges to a full assignment.
func TestRandomized(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomRun(t, seed, 400) })
	}
}

func randomRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed))
	topics := fakeTopics{"a": 5, "b": 3, "c": 8}
	g := New("g", cfg())
	replica := New("g", cfg()) // fed only what TakeChanges reports
	now := t0
	var cs []*client
	subsets := [][]string{{"a"}, {"a", "b"}, {"b", "c"}, {"a", "b", "c"}}
	next := 0
	alive := func() []*client {
		var out []*client
		for _, c := range cs {
			if c != nil {
				out = append(out, c)
			}
		}
		return out
	}
	for step := 0; step < steps; step++ {
		now = now.Add(time.Duration(rng.IntN(500)) * time.Millisecond)
		switch k := rng.IntN(20); {
		case k < 2 && len(alive()) < 6: // join
			next++
			c := &client{id: fmt.Sprintf("m%d", next), topics: subsets[rng.IntN(len(subsets))]}
			if rng.IntN(3) == 0 {
				c.topics, c.regex = nil, str("[ab]")
			}
			cs = append(cs, c)
			c.beat(t, g, now, topics)
		case k < 3 && len(alive()) > 0: // leave
			i := rng.IntN(len(cs))
			if cs[i] == nil {
				break
			}
			if _, err := g.Heartbeat(now, topics, Request{MemberID: cs[i].id, Epoch: LeaveEpoch}); err != nil {
				t.Fatal(err)
			}
			cs[i] = nil
		case k < 4 && len(alive()) > 0: // change subscription
			c := alive()[rng.IntN(len(alive()))]
			c.regex, c.topics = nil, subsets[rng.IntN(len(subsets))]
			c.beat(t, g, now, topics)
		case k < 5: // a topic grows
			topics["c"]++
		case k < 6 && len(alive()) > 0: // an answer is lost
			c := alive()[rng.IntN(len(alive()))]
			saved := *c
			c.beat(t, g, now, topics)
			*c = saved
		case k < 7 && len(alive()) < 6: // a static member joins
			next++
			c := &client{id: fmt.Sprintf("m%d", next), topics: subsets[rng.IntN(len(subsets))], inst: str(fmt.Sprintf("i%d", rng.IntN(3)))}
			r := Request{MemberID: c.id, InstanceID: c.inst, RebalanceTimeout: 5 * time.Second, SubscribedTopics: c.topics, Owned: Assignment{}}
			resp, err := g.Heartbeat(now, topics, r)
			if errors.Is(err, kerr.UnreleasedInstanceID) {
				break // its instance is still in the group
			}
			if err != nil {
				t.Fatalf("step %d: static join: %v", step, err)
			}
			c.epoch, c.owned = resp.Epoch, resp.Assignment.Clone()
			cs = append(cs, c)
		case k < 8 && len(alive()) > 0: // a static member leaves for a while (-2)
			i := rng.IntN(len(cs))
			if cs[i] == nil || cs[i].inst == nil {
				break
			}
			if _, err := g.Heartbeat(now, topics, Request{MemberID: cs[i].id, InstanceID: cs[i].inst, Epoch: StaticLeaveEpoch}); err != nil {
				t.Fatalf("step %d: static leave: %v", step, err)
			}
			cs[i] = nil
		case k < 9 && len(alive()) > 1: // a hostile join: an existing id with another instance
			a, b := alive()[0], alive()[len(alive())-1]
			r := Request{MemberID: a.id, InstanceID: str("hijack-" + b.id), RebalanceTimeout: time.Second, SubscribedTopics: []string{"a"}, Owned: Assignment{}}
			if _, err := g.Heartbeat(now, topics, r); !errors.Is(err, kerr.FencedInstanceID) && !errors.Is(err, kerr.UnreleasedInstanceID) {
				t.Fatalf("step %d: a join under member %s's id with another instance id: %v", step, a.id, err)
			}
		default: // heartbeats
			for _, c := range alive() {
				r := Request{MemberID: c.id, Epoch: c.epoch, InstanceID: c.inst, RebalanceTimeout: time.Minute, SubscribedTopics: c.topics, SubscribedRegex: c.regex, Owned: c.owned}
				resp, err := g.Heartbeat(now, topics, r)
				if errors.Is(err, kerr.FencedMemberEpoch) || errors.Is(err, kerr.UnknownMemberID) {
					c.owned, c.epoch = Assignment{}, JoinEpoch // abandon and rejoin
					if errors.Is(err, kerr.UnknownMemberID) {
						next++
						c.id = fmt.Sprintf("m%d", next)
					}
					c.beat(t, g, now, topics)
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				c.epoch = resp.Epoch
				if resp.Assignment != nil {
					c.owned = resp.Assignment.Clone()
				}
			}
		}
		g.Expire(now)
		checkOwners(t, g)
		ch := g.TakeChanges(false)
		if rng.IntN(10) == 0 {
			// The write fails: the next one writes everything.
			ch = g.TakeChanges(true)
		}
		applyChanges(replica, ch)
		g.Persisted(ch)
		checkReplica(t, g, replica)
		if err := clientsOverlap(alive()); err != nil {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
	}
	// Quiet: everyone heartbeats until stable; every subscribed partition
	// is then owned by exactly one member.
	for round := 0; round < 10; round++ {
		for _, c := range alive() {
			c.beat(t, g, now, topics)
		}
	}
	if len(alive()) > 0 && g.State() != "Stable" {
		t.Fatalf("seed %d: not stable after quiet rounds: %s", seed, g.State())
	}
	for name := range g.SubscribedTopics(topics) {
		for p := int32(0); p < topics[name]; p++ {
			heldForLeft := false // a static member away (-2) keeps its target until its session ends
			for _, m := range g.Members() {
				heldForLeft = heldForLeft || (m.Left() && g.Target(m.ID).Has(idOf(name), p))
			}
			if g.owners[idOf(name)][p] == "" && !heldForLeft {
				t.Fatalf("seed %d: %s/%d unassigned in a stable group", seed, name, p)
			}
		}
	}
}

// applyChanges replays changes into a group, as the coordinator replays
// its records.
func applyChanges(g *Group, c Changes) {
	if c.EpochChanged {
		g.RestoreEpoch(c.Epoch, c.MetadataHash)
	}
	for _, id := range c.Removed {
		g.RestoreRemoveMember(id)
	}
	for _, m := range c.Members {
		g.RestoreMemberMetadata(m)
		g.RestoreMemberAssignment(m)
	}
	if c.AssignmentEpochChanged {
		g.RestoreAssignmentEpoch(c.AssignmentEpoch)
	}
	for id, a := range c.Targets {
		g.RestoreTarget(id, a)
	}
}

// checkReplica: what the changes rebuilt is the group.
func checkReplica(t *testing.T, g, r *Group) {
	t.Helper()
	if g.epoch != r.epoch || g.assignmentEpoch != r.assignmentEpoch || g.metadataHash != r.metadataHash {
		t.Fatalf("replica epochs %d/%d/%x, group %d/%d/%x", r.epoch, r.assignmentEpoch, r.metadataHash, g.epoch, g.assignmentEpoch, g.metadataHash)
	}
	if len(g.members) != len(r.members) {
		t.Fatalf("replica has %d members, group %d", len(r.members), len(g.members))
	}
	for id, m := range g.members {
		rm := r.members[id]
		if rm == nil || !recordOf(m).equal(recordOf(rm)) {
			t.Fatalf("member %s: replica %+v, group %+v", id, rm, m)
		}
		if !g.target[id].Equal(r.target[id]) {
			t.Fatalf("member %s's target: replica %v, group %v", id, r.target[id], g.target[id])
		}
	}
	c := New("g", cfg())
	applyChanges(c, r.TakeChanges(true))
	if err := c.Loaded(t0); err != nil {
		t.Fatalf("loading the replica's records: %v", err)
	}
}

// TestMetadataBudget: a group's members cannot hold more metadata than
// MaxMetadataBytes; a refused subscription change leaves the member as it
// was, and a refused join leaves nothing.
func TestMetadataBudget(t *testing.T) {
	c := cfg()
	c.MaxMetadataBytes = 200
	g := New("g", c)
	topics := fakeTopics{"a": 1}
	many := make([]string, 30)
	for i := range many {
		many[i] = fmt.Sprintf("topic-%02d", i)
	}
	a := &client{id: "a", topics: []string{"a"}}
	a.beat(t, g, t0, topics)
	if _, err := g.Heartbeat(t0, topics, Request{MemberID: "b", RebalanceTimeout: time.Second, SubscribedTopics: many, Owned: Assignment{}}); !errors.Is(err, kerr.GroupMaxSizeReached) {
		t.Fatalf("a join past the budget: %v", err)
	}
	if g.members["b"] != nil {
		t.Fatal("the refused join left a member")
	}
	if _, err := g.Heartbeat(t0, topics, Request{MemberID: "a", Epoch: a.epoch, RebalanceTimeout: -1, SubscribedTopics: many}); !errors.Is(err, kerr.GroupMaxSizeReached) {
		t.Fatalf("a subscription past the budget: %v", err)
	}
	if m := g.members["a"]; !slices.Equal(m.Topics, []string{"a"}) {
		t.Fatalf("the refused subscription was taken: %v", m.Topics)
	}
	a.beat(t, g, t0, topics)
	if a.owned.Len() != 1 {
		t.Fatalf("a after the refusal: %v", a.owned)
	}
}

// TestLoadedKeepsFilteredRegexTopics: a regex member's DESCRIBE filter is
// not persisted; after a load, until it heartbeats, it is subscribed only
// to the regex topics its target held (which were filtered), never to
// ones its principal may not see.
func TestLoadedKeepsFilteredRegexTopics(t *testing.T) {
	topics := fakeTopics{"pub": 2, "secret": 2}
	g := New("g", cfg())
	deny := func(t string) bool { return t != "secret" }
	r := Request{MemberID: "r", RebalanceTimeout: time.Second, SubscribedRegex: str(".*"), Owned: Assignment{}, RegexAllowed: deny}
	if _, err := g.Heartbeat(t0, topics, r); err != nil {
		t.Fatal(err)
	}
	if g.Target("r").owns(idOf("secret")) || !g.Target("r").owns(idOf("pub")) {
		t.Fatalf("target before the load: %v", g.Target("r"))
	}
	loaded := New("g", cfg())
	applyChanges(loaded, g.TakeChanges(true))
	if err := loaded.Loaded(t0); err != nil {
		t.Fatal(err)
	}
	// Another member joins before r heartbeats: the target is computed
	// again, and r must not get "secret".
	b := &client{id: "b", topics: []string{"pub"}}
	b.beat(t, loaded, t0.Add(time.Second), topics)
	if loaded.Target("r").owns(idOf("secret")) {
		t.Fatalf("a loaded regex member was given a topic its principal may not describe: %v", loaded.Target("r"))
	}
}

// TestStaticRejoinIsPersisted: a static member that left (-2) and comes
// back under its id is written back as active; a load must not see it as
// gone.
func TestStaticRejoinIsPersisted(t *testing.T) {
	topics := fakeTopics{"a": 2}
	g := New("g", cfg())
	s := &client{id: "s", topics: []string{"a"}, inst: str("i")}
	s.beat(t, g, t0, topics)
	if _, err := g.Heartbeat(t0, topics, Request{MemberID: "s", InstanceID: str("i"), Epoch: StaticLeaveEpoch}); err != nil {
		t.Fatal(err)
	}
	replica := New("g", cfg())
	applyChanges(replica, g.TakeChanges(false))
	s.epoch = JoinEpoch
	s.beat(t, g, t0.Add(time.Second), topics)
	applyChanges(replica, g.TakeChanges(false))
	if m := replica.members["s"]; m == nil || m.Left() || m.Epoch != g.members["s"].Epoch {
		t.Fatalf("the rejoin was not written: replica %+v, group %+v", m, g.members["s"])
	}
}

// TestFilterChangeMovesTarget: a regex member whose DESCRIBE permission
// grows gets the new topic's partitions, although the group's set of
// topics (another member subscribes to it by name) did not change.
func TestFilterChangeMovesTarget(t *testing.T) {
	topics := fakeTopics{"t1": 1, "t2": 4} // b can only balance with t2
	g := New("g", cfg())
	a := &client{id: "a", topics: []string{"t1", "t2"}}
	a.beat(t, g, t0, topics)
	only := func(allowed string) func(string) bool { return func(t string) bool { return t == allowed } }
	r := Request{MemberID: "b", RebalanceTimeout: time.Second, SubscribedRegex: str("t."), Owned: Assignment{}, RegexAllowed: only("t1")}
	if _, err := g.Heartbeat(t0, topics, r); err != nil {
		t.Fatal(err)
	}
	if g.Target("b").owns(idOf("t2")) {
		t.Fatalf("b may not describe t2 but is assigned it: %v", g.Target("b"))
	}
	epoch := g.Epoch()
	r.Epoch, r.Owned, r.RegexAllowed = g.members["b"].Epoch, Assignment{}, nil // now it may describe both
	if _, err := g.Heartbeat(t0, topics, r); err != nil {
		t.Fatal(err)
	}
	if g.Epoch() == epoch || !g.Target("b").owns(idOf("t2")) {
		t.Fatalf("after b's permission grew: epoch %d→%d, b's target %v", epoch, g.Epoch(), g.Target("b"))
	}
}

// TestRefusedStaticReplacementExpires: a static member's new incarnation
// refused (the metadata budget) leaves nothing that never expires.
func TestRefusedStaticReplacementExpires(t *testing.T) {
	c := cfg()
	c.MaxMetadataBytes = 64
	g := New("g", c)
	topics := fakeTopics{"a": 2}
	s := &client{id: "s1", topics: []string{"a"}, inst: str("i")}
	s.beat(t, g, t0, topics)
	if _, err := g.Heartbeat(t0, topics, Request{MemberID: "s1", InstanceID: str("i"), Epoch: StaticLeaveEpoch}); err != nil {
		t.Fatal(err)
	}
	big := Request{MemberID: "s2", InstanceID: str("i"), RebalanceTimeout: time.Second, SubscribedTopics: []string{"a", strings.Repeat("x", 100)}, Owned: Assignment{}}
	if _, err := g.Heartbeat(t0.Add(time.Second), topics, big); !errors.Is(err, kerr.GroupMaxSizeReached) {
		t.Fatalf("a replacement over the budget: %v", err)
	}
	if d := g.NextDeadline(); d.IsZero() {
		t.Fatal("nothing will ever expire the refused replacement")
	}
	g.Expire(t0.Add(time.Hour))
	s2 := &client{id: "s3", topics: []string{"a"}, inst: str("i")}
	s2.beat(t, g, t0.Add(time.Hour), topics)
}

// TestLoadedGroupDoesNotRebalanceByItself: after a load, looking at the
// group's topics (OffsetDelete, lags) and a keepalive of another member
// change nothing: no epoch bump, no new target.
func TestLoadedGroupDoesNotRebalanceByItself(t *testing.T) {
	topics := fakeTopics{"x": 1, "t1": 1, "t2": 1}
	g := New("g", cfg())
	a := &client{id: "a", topics: []string{"x"}}
	a.beat(t, g, t0, topics)
	if _, err := g.Heartbeat(t0, topics, Request{MemberID: "r", RebalanceTimeout: time.Second, SubscribedRegex: str("t.*"), Owned: Assignment{}}); err != nil {
		t.Fatal(err)
	}
	a.beat(t, g, t0, topics)
	loaded := New("g", cfg())
	applyChanges(loaded, g.TakeChanges(true))
	if err := loaded.Loaded(t0); err != nil {
		t.Fatal(err)
	}
	epoch := loaded.Epoch()
	if ts := loaded.SubscribedTopics(nil); !ts["x"] {
		t.Fatalf("subscribed after the load: %v", ts)
	}
	a.beat(t, loaded, t0.Add(time.Second), topics)
	a.beat(t, loaded, t0.Add(2*time.Second), topics)
	if loaded.Epoch() != epoch {
		t.Fatalf("a loaded group rebalanced by itself: epoch %d→%d", epoch, loaded.Epoch())
	}
}

// TestTwoFailedWritesKeepTombstones: a member first written by a write
// that failed (it may still have reached the log), then removed with a
// second write that failed too, is tombstoned by the full rewrite that
// follows; it used to be forgotten and come back on the next load.
func TestTwoFailedWritesKeepTombstones(t *testing.T) {
	topics := fakeTopics{"a": 2}
	g := New("g", cfg())
	y := &client{id: "y", topics: []string{"a"}}
	y.beat(t, g, t0, topics)
	first := g.TakeChanges(false) // fails: y's records may be in the log
	g.NotPersisted(first)
	if _, err := g.Heartbeat(t0, topics, Request{MemberID: "y", Epoch: LeaveEpoch}); err != nil {
		t.Fatal(err)
	}
	second := g.TakeChanges(true) // the full rewrite after a failure; fails too
	g.NotPersisted(second)
	third := g.TakeChanges(true)
	if !slices.Contains(third.Removed, "y") {
		t.Fatalf("the rewrite after two failed writes does not tombstone y: removed %v", third.Removed)
	}
	// A log holding the first (failed but durable) write and the third
	// loads without y.
	replica := New("g", cfg())
	applyChanges(replica, first)
	applyChanges(replica, third)
	if err := replica.Loaded(t0); err != nil || replica.members["y"] != nil {
		t.Fatalf("y after the load: %v, %v", replica.members["y"], err)
	}
}

// KIP-1251: a member whose epoch moved on before it saw the answer may
// still commit, with its old epoch, the partitions it owned then and
// owns still; not one it gave up, not one it took at the newer epoch,
// and never with an epoch newer than its own. After a load the epochs
// since which partitions were owned are not known: the current epoch is
// needed again.
func TestCommitWithAnOlderEpoch(t *testing.T) {
	topics := fakeTopics{"a": 2, "b": 1}
	g := New("g", cfg())
	a := &client{id: "a", topics: []string{"a"}}
	a.beat(t, g, t0, topics)
	if a.owned.Len() != 2 {
		t.Fatalf("a owns %v", a.owned)
	}
	first := a.epoch
	a0, a1, b0 := TopicPartition{idOf("a"), 0}, TopicPartition{idOf("a"), 1}, TopicPartition{idOf("b"), 0}
	// b joins: a gives up one partition of a, then moves on.
	b := &client{id: "b", topics: []string{"a"}}
	b.beat(t, g, t0, topics)
	a.beat(t, g, t0, topics)
	a.beat(t, g, t0, topics)
	b.beat(t, g, t0, topics)
	if a.epoch == first || a.owned.Len() != 1 || b.owned.Len() != 1 {
		t.Fatalf("a at %d owns %v, b at %d owns %v", a.epoch, a.owned, b.epoch, b.owned)
	}
	kept, gone := a0, a1
	if !a.owned.Has(idOf("a"), 0) {
		kept, gone = a1, a0
	}
	stale, err := g.CheckCommitPartitions("a", first, []TopicPartition{kept, gone, b0})
	if err != nil || !slices.Equal(stale, []bool{false, true, true}) {
		t.Fatalf("a commits with its first epoch: stale %v, %v; want only what it kept allowed", stale, err)
	}
	if stale, err := g.CheckCommitPartitions("a", a.epoch, []TopicPartition{kept, gone}); err != nil || stale != nil {
		t.Fatalf("a commits with its current epoch: stale %v, %v", stale, err)
	}
	if _, err := g.CheckCommitPartitions("a", a.epoch+1, []TopicPartition{kept}); !errors.Is(err, kerr.StaleMemberEpoch) {
		t.Fatalf("an epoch newer than the member's: %v", err)
	}
	if err := g.CheckOffsetCommit("a", first); !errors.Is(err, kerr.StaleMemberEpoch) {
		t.Fatalf("an OffsetFetch with an older epoch: %v", err)
	}
	// b took its partition at its current epoch: not committable with
	// the epoch before.
	if stale, err := g.CheckCommitPartitions("b", b.epoch-1, []TopicPartition{gone}); err != nil || !slices.Equal(stale, []bool{true}) {
		t.Fatalf("b commits what it took at %d with epoch %d: stale %v, %v", b.epoch, b.epoch-1, stale, err)
	}

	// Loaded again: nothing is known of when a took its partition.
	h := New("g", cfg())
	for _, m := range []*Member{g.members["a"], g.members["b"]} {
		h.RestoreMemberMetadata(recordOf(m))
		h.RestoreMemberAssignment(recordOf(m))
	}
	h.RestoreEpoch(g.Epoch(), 0)
	h.RestoreAssignmentEpoch(g.assignmentEpoch)
	for id, tg := range g.target {
		h.RestoreTarget(id, tg)
	}
	if err := h.Loaded(t0); err != nil {
		t.Fatal(err)
	}
	if stale, err := h.CheckCommitPartitions("a", first, []TopicPartition{kept}); err != nil || !slices.Equal(stale, []bool{true}) {
		t.Fatalf("after a load, a commits with its first epoch: stale %v, %v", stale, err)
	}
}

// KIP-1251's older epochs let no zombie commit: a partition given up and
// taken back counts from when it came back, a member that left and
// joined again under its id is a new member, and a static member's
// replaced id is unknown. (From a hostile review of the change.)
func TestCommitWithAnOlderEpochZombies(t *testing.T) {
	topics := fakeTopics{"a": 2}
	a0, a1 := TopicPartition{idOf("a"), 0}, TopicPartition{idOf("a"), 1}

	// A partition revoked and given back later: owned since the later
	// epoch only.
	g := New("g", cfg())
	a := &client{id: "a", topics: []string{"a"}}
	a.beat(t, g, t0, topics)
	first := a.epoch
	b := &client{id: "b", topics: []string{"a"}}
	b.beat(t, g, t0, topics)
	for range 3 {
		a.beat(t, g, t0, topics)
		b.beat(t, g, t0, topics)
	}
	if a.owned.Len() != 1 || b.owned.Len() != 1 {
		t.Fatalf("a owns %v, b owns %v", a.owned, b.owned)
	}
	kept, gone := a0, a1
	if !a.owned.Has(idOf("a"), 0) {
		kept, gone = a1, a0
	}
	b.epoch = LeaveEpoch
	b.beat(t, g, t0, topics)
	for range 3 {
		a.beat(t, g, t0, topics)
	}
	if a.owned.Len() != 2 {
		t.Fatalf("a owns %v after b left", a.owned)
	}
	if stale, err := g.CheckCommitPartitions("a", first, []TopicPartition{kept, gone}); err != nil || !slices.Equal(stale, []bool{false, true}) {
		t.Fatalf("a, with the epoch it had before giving %v up and taking it back: stale %v, %v", gone, stale, err)
	}

	// A member that left and joined again under its id: a new member.
	old := a.epoch
	a.epoch = LeaveEpoch
	a.beat(t, g, t0, topics)
	a.epoch, a.owned = JoinEpoch, nil
	for range 3 {
		a.beat(t, g, t0, topics)
	}
	if a.owned.Len() != 2 || a.epoch <= old {
		t.Fatalf("a rejoined at %d owning %v", a.epoch, a.owned)
	}
	if stale, err := g.CheckCommitPartitions("a", old, []TopicPartition{a0, a1}); err != nil || !slices.Equal(stale, []bool{true, true}) {
		t.Fatalf("a, with its epoch from before it left: stale %v, %v", stale, err)
	}

	// A static member replaced by a new process of its instance: the old
	// id is gone.
	h := New("h", cfg())
	s1 := &client{id: "s1", topics: []string{"a"}, inst: str("i")}
	s1.beat(t, h, t0, topics)
	s1.beat(t, h, t0, topics)
	e := s1.epoch
	s1.epoch = StaticLeaveEpoch
	s1.beat(t, h, t0, topics)
	s2 := &client{id: "s2", topics: []string{"a"}, inst: str("i")}
	s2.beat(t, h, t0, topics)
	if _, err := h.CheckCommitPartitions("s1", e, []TopicPartition{a0}); !errors.Is(err, kerr.UnknownMemberID) {
		t.Fatalf("the replaced static member commits: %v", err)
	}
}
