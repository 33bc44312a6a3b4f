package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// fakeSched is a manual clock: timers fire only when the test advances it.
type fakeSched struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	s       *fakeSched
	at      time.Time
	f       func()
	stopped bool
}

func (t *fakeTimer) Stop() bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

func newFakeSched() *fakeSched { return &fakeSched{now: time.Unix(1_700_000_000, 0)} }

func (s *fakeSched) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *fakeSched) AfterFunc(d time.Duration, f func()) Timer {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &fakeTimer{s: s, at: s.now.Add(d), f: f}
	s.timers = append(s.timers, t)
	return t
}

// advance moves the clock, firing due timers in time order.
func (s *fakeSched) advance(d time.Duration) {
	s.mu.Lock()
	end := s.now.Add(d)
	s.mu.Unlock()
	for {
		s.mu.Lock()
		sort.SliceStable(s.timers, func(i, j int) bool { return s.timers[i].at.Before(s.timers[j].at) })
		var due *fakeTimer
		for i, t := range s.timers {
			if t.stopped {
				continue
			}
			if !t.at.After(end) {
				due = t
				s.timers = append(s.timers[:i], s.timers[i+1:]...)
				break
			}
		}
		if due == nil {
			s.now = end
			s.mu.Unlock()
			return
		}
		due.stopped = true
		if due.at.After(s.now) {
			s.now = due.at
		}
		s.mu.Unlock()
		due.f()
	}
}

type joinBox struct {
	mu  sync.Mutex
	got []JoinResult
}

func (b *joinBox) done(r JoinResult) { b.mu.Lock(); b.got = append(b.got, r); b.mu.Unlock() }
func (b *joinBox) last() (JoinResult, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.got) == 0 {
		return JoinResult{}, false
	}
	return b.got[len(b.got)-1], true
}

type syncBox struct {
	mu  sync.Mutex
	got []SyncResult
}

func (b *syncBox) done(r SyncResult) { b.mu.Lock(); b.got = append(b.got, r); b.mu.Unlock() }
func (b *syncBox) last() (SyncResult, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.got) == 0 {
		return SyncResult{}, false
	}
	return b.got[len(b.got)-1], true
}

func testGroup(delay time.Duration) (*Group, *fakeSched, *[]GroupSnapshot) {
	s := newFakeSched()
	var stored []GroupSnapshot
	var mu sync.Mutex
	cfg := &GroupConfig{MinSessionTimeout: time.Second, MaxSessionTimeout: time.Hour, InitialRebalanceDelay: delay}
	g := newGroup("g", cfg, s, func(_ *Group, snap GroupSnapshot, done func(error)) {
		mu.Lock()
		stored = append(stored, snap)
		mu.Unlock()
		done(nil)
	})
	return g, s, &stored
}

func joinReq(id string) JoinRequest {
	return JoinRequest{MemberID: id, ClientID: "c", SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second,
		ProtocolType: "consumer", Protocols: []Protocol{{Name: "range", Metadata: []byte("m-" + id)}}, RequireKnownMemberID: true}
}

// join runs the MEMBER_ID_REQUIRED round trip and returns the member id
// and the box of the real join.
func join(t *testing.T, g *Group) (string, *joinBox) {
	t.Helper()
	var first joinBox
	g.Join(joinReq(""), first.done)
	r, ok := first.last()
	if !ok || !errors.Is(r.Err, kerr.MemberIDRequired) || r.MemberID == "" {
		t.Fatalf("first join: %+v", r)
	}
	var second joinBox
	g.Join(joinReq(r.MemberID), second.done)
	return r.MemberID, &second
}

func TestGroupTransitions(t *testing.T) {
	t.Run("single member forms a generation after the initial delay", func(t *testing.T) {
		g, s, stored := testGroup(3 * time.Second)
		id, jb := join(t, g)
		if g.State() != StatePreparingRebalance {
			t.Fatalf("state %s", g.State())
		}
		if _, ok := jb.last(); ok {
			t.Fatal("answered before the initial delay")
		}
		s.advance(3 * time.Second)
		r, ok := jb.last()
		if !ok || r.Err != nil || r.Generation != 1 || r.LeaderID != id || len(r.Members) != 1 || r.Protocol != "range" {
			t.Fatalf("join result %+v", r)
		}
		if g.State() != StateCompletingRebalance {
			t.Fatalf("state %s", g.State())
		}
		var sb syncBox
		g.Sync(SyncRequest{MemberID: id, Generation: 1, Assignments: map[string][]byte{id: []byte("all")}}, sb.done)
		sr, ok := sb.last()
		if !ok || sr.Err != nil || string(sr.Assignment) != "all" || g.State() != StateStable {
			t.Fatalf("sync %+v state %s", sr, g.State())
		}
		if len(*stored) != 1 || (*stored)[0].Generation != 1 || string((*stored)[0].Members[0].Assignment) != "all" {
			t.Fatalf("stored %+v", *stored)
		}
	})
	t.Run("joins during the initial delay form one generation", func(t *testing.T) {
		g, s, _ := testGroup(3 * time.Second)
		_, a := join(t, g)
		s.advance(2 * time.Second)
		_, b := join(t, g) // extends the delay
		s.advance(2 * time.Second)
		if _, ok := a.last(); ok {
			t.Fatal("the second join did not extend the delay")
		}
		s.advance(2 * time.Second)
		ra, _ := a.last()
		rb, _ := b.last()
		if ra.Generation != 1 || rb.Generation != 1 || ra.LeaderID != rb.LeaderID {
			t.Fatalf("a %+v b %+v", ra, rb)
		}
		if (len(ra.Members) == 2) == (len(rb.Members) == 2) {
			t.Fatal("exactly one member (the leader) gets the member list")
		}
	})
	t.Run("unknown member and bad session timeout", func(t *testing.T) {
		g, _, _ := testGroup(0)
		var jb joinBox
		g.Join(joinReq("nobody"), jb.done)
		if r, _ := jb.last(); !errors.Is(r.Err, kerr.UnknownMemberID) {
			t.Fatalf("%+v", r)
		}
		req := joinReq("")
		req.SessionTimeout = time.Millisecond
		g.Join(req, jb.done)
		if r, _ := jb.last(); !errors.Is(r.Err, kerr.InvalidSessionTimeout) {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("inconsistent protocol", func(t *testing.T) {
		g, s, _ := testGroup(0)
		join(t, g)
		s.advance(time.Millisecond)
		req := joinReq("")
		req.Protocols = []Protocol{{Name: "roundrobin"}}
		var jb joinBox
		g.Join(req, jb.done)
		if r, _ := jb.last(); !errors.Is(r.Err, kerr.InconsistentGroupProtocol) {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("heartbeat, sync and commit errors by state", func(t *testing.T) {
		g, s, _ := testGroup(0)
		id, jb := join(t, g)
		s.advance(time.Millisecond)
		r, _ := jb.last()
		if err := g.Heartbeat(id, nil, r.Generation); err != nil {
			t.Fatalf("heartbeat while completing: %v", err)
		}
		if err := g.Heartbeat(id, nil, r.Generation+1); !errors.Is(err, kerr.IllegalGeneration) {
			t.Fatalf("stale generation: %v", err)
		}
		if err := g.Heartbeat("nobody", nil, r.Generation); !errors.Is(err, kerr.UnknownMemberID) {
			t.Fatalf("unknown member: %v", err)
		}
		if _, err := g.CheckCommit(id, nil, r.Generation, nil); !errors.Is(err, kerr.RebalanceInProgress) {
			t.Fatalf("commit while completing: %v", err)
		}
		var sb syncBox
		g.Sync(SyncRequest{MemberID: id, Generation: r.Generation}, sb.done)
		if _, err := g.CheckCommit(id, nil, r.Generation, nil); err != nil {
			t.Fatalf("commit when stable: %v", err)
		}
		if _, err := g.CheckCommit("", nil, -1, nil); !errors.Is(err, kerr.UnknownMemberID) {
			t.Fatalf("simple commit into an active group: %v", err)
		}
		// A second member joining starts a rebalance.
		join(t, g)
		if err := g.Heartbeat(id, nil, r.Generation); !errors.Is(err, kerr.RebalanceInProgress) {
			t.Fatalf("heartbeat while preparing: %v", err)
		}
		g.Sync(SyncRequest{MemberID: id, Generation: r.Generation}, sb.done)
		if sr, _ := sb.last(); !errors.Is(sr.Err, kerr.RebalanceInProgress) {
			t.Fatalf("sync while preparing: %+v", sr)
		}
	})
	t.Run("session expiry removes a member and rebalances", func(t *testing.T) {
		g, s, _ := testGroup(time.Second)
		a, ja := join(t, g)
		b, jb := join(t, g)
		s.advance(time.Second)
		ra, _ := ja.last()
		leader := ra.LeaderID
		var sa, sbx syncBox
		g.Sync(SyncRequest{MemberID: a, Generation: ra.Generation, Assignments: map[string][]byte{a: []byte("A"), b: []byte("B")}}, sa.done)
		rb, _ := jb.last()
		g.Sync(SyncRequest{MemberID: b, Generation: rb.Generation, Assignments: map[string][]byte{a: []byte("A"), b: []byte("B")}}, sbx.done)
		if g.State() != StateStable || leader == "" {
			t.Fatalf("state %s", g.State())
		}
		// Only a heartbeats.
		for i := 0; i < 5; i++ {
			s.advance(3 * time.Second)
			if err := g.Heartbeat(a, nil, ra.Generation); err != nil && !errors.Is(err, kerr.RebalanceInProgress) {
				t.Fatalf("heartbeat: %v", err)
			}
		}
		if d := g.Describe(); len(d.Members) != 1 || d.Members[0].MemberID != a {
			t.Fatalf("after b's session expired: %+v", d)
		}
		if g.State() != StatePreparingRebalance {
			t.Fatalf("state %s", g.State())
		}
		var again joinBox
		g.Join(joinReq(a), again.done)
		r, ok := again.last()
		if !ok || r.Generation != ra.Generation+1 || r.LeaderID != a {
			t.Fatalf("rejoin %+v", r)
		}
	})
	t.Run("leave rebalances, last leave empties", func(t *testing.T) {
		g, s, stored := testGroup(0)
		a, _ := join(t, g)
		b, _ := join(t, g)
		s.advance(time.Millisecond)
		errs := g.Leave([]LeaveMember{{MemberID: b}, {MemberID: "ghost"}})
		if errs[0] != nil || !errors.Is(errs[1], kerr.UnknownMemberID) {
			t.Fatalf("leave errs %v", errs)
		}
		if g.State() != StatePreparingRebalance {
			t.Fatalf("state %s", g.State())
		}
		g.Leave([]LeaveMember{{MemberID: a}})
		if g.State() != StateEmpty {
			t.Fatalf("state %s", g.State())
		}
		if n := len(*stored); n == 0 || len((*stored)[n-1].Members) != 0 {
			t.Fatal("the empty group was not stored")
		}
	})
	t.Run("static member restart keeps its assignment without a rebalance", func(t *testing.T) {
		g, s, _ := testGroup(0)
		inst := "host-1"
		req := joinReq("")
		req.InstanceID = &inst
		var j1 joinBox
		g.Join(req, j1.done)
		s.advance(time.Millisecond)
		r1, _ := j1.last()
		if r1.Err != nil {
			t.Fatal(r1.Err)
		}
		var sb syncBox
		g.Sync(SyncRequest{MemberID: r1.MemberID, InstanceID: &inst, Generation: r1.Generation, Assignments: map[string][]byte{r1.MemberID: []byte("P0")}}, sb.done)
		// The process restarts: same instance id, no member id.
		var j2 joinBox
		g.Join(req, j2.done)
		r2, ok := j2.last()
		if !ok || r2.Err != nil || r2.Generation != r1.Generation || r2.MemberID == r1.MemberID || !r2.SkipAssignment {
			t.Fatalf("static rejoin %+v", r2)
		}
		if g.State() != StateStable {
			t.Fatalf("static rejoin rebalanced: %s", g.State())
		}
		g.Sync(SyncRequest{MemberID: r2.MemberID, InstanceID: &inst, Generation: r2.Generation}, sb.done)
		if sr, _ := sb.last(); string(sr.Assignment) != "P0" {
			t.Fatalf("assignment after restart %q", sr.Assignment)
		}
		// The old incarnation is fenced.
		if err := g.Heartbeat(r1.MemberID, &inst, r1.Generation); !errors.Is(err, kerr.FencedInstanceID) {
			t.Fatalf("old incarnation: %v", err)
		}
	})
	t.Run("leader never syncs: rebalance again", func(t *testing.T) {
		g, s, _ := testGroup(0)
		_, ja := join(t, g)
		s.advance(time.Millisecond)
		r, _ := ja.last()
		s.advance(21 * time.Second)
		if g.State() == StateStable || g.generation == r.Generation && g.State() == StateCompletingRebalance {
			t.Fatalf("still waiting for the leader: %s", g.State())
		}
	})
}

// TestGroupRandomized drives one group with random joins, syncs,
// heartbeats, leaves and clock jumps, and checks the invariants after every
// step: one generation forms at a time, generations never go back, and the
// assignments handed out in a generation never give a partition to two
// members.
func TestGroupRandomized(t *testing.T) {
	for seed := uint64(0); seed < 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomGroupRun(t, seed) })
	}
}

func randomGroupRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	g, s, _ := testGroup(time.Duration(rng.IntN(3)) * time.Second)
	type client struct {
		id        string
		gen       int32
		joining   *joinBox
		syncing   *syncBox
		seenSyncs int
	}
	var clients []*client
	// owners[gen][partition] = member that received it
	owners := map[int32]map[string]string{}
	lastGen := int32(0)
	check := func(step int) {
		if g.generation < lastGen {
			t.Fatalf("step %d: generation went back %d -> %d", step, lastGen, g.generation)
		}
		lastGen = g.generation
		for _, c := range clients {
			if c.syncing == nil {
				continue
			}
			c.syncing.mu.Lock()
			for _, r := range c.syncing.got[c.seenSyncs:] {
				if r.Err != nil {
					continue
				}
				if owners[c.gen] == nil {
					owners[c.gen] = map[string]string{}
				}
				for _, p := range strings.Split(string(r.Assignment), ",") {
					if p == "" {
						continue
					}
					if o, ok := owners[c.gen][p]; ok && o != c.id {
						t.Fatalf("step %d: generation %d gave %s to %s and %s", step, c.gen, p, o, c.id)
					}
					owners[c.gen][p] = c.id
				}
			}
			c.seenSyncs = len(c.syncing.got)
			c.syncing.mu.Unlock()
		}
	}
	for step := 0; step < 300; step++ {
		switch op := rng.IntN(10); {
		case op < 2 && len(clients) < 6: // a new member
			c := &client{}
			var first joinBox
			g.Join(joinReq(""), first.done)
			if r, _ := first.last(); r.MemberID != "" {
				c.id = r.MemberID
				c.joining = &joinBox{}
				g.Join(joinReq(c.id), c.joining.done)
				clients = append(clients, c)
			}
		case op < 4 && len(clients) > 0: // collect join answers, leader assigns
			c := clients[rng.IntN(len(clients))]
			if c.joining == nil {
				break
			}
			r, ok := c.joining.last()
			if !ok || r.Err != nil {
				break
			}
			c.gen = r.Generation
			assign := map[string][]byte{}
			if len(r.Members) > 0 {
				// Leader: partitions p0..p5 round-robin.
				parts := map[string][]string{}
				for i := 0; i < 6; i++ {
					m := r.Members[i%len(r.Members)].MemberID
					parts[m] = append(parts[m], fmt.Sprintf("p%d", i))
				}
				for m, ps := range parts {
					assign[m] = []byte(strings.Join(ps, ","))
				}
			}
			c.syncing = &syncBox{}
			g.Sync(SyncRequest{MemberID: c.id, Generation: c.gen, Assignments: assign}, c.syncing.done)
		case op < 6 && len(clients) > 0: // heartbeat; rejoin when told
			c := clients[rng.IntN(len(clients))]
			err := g.Heartbeat(c.id, nil, c.gen)
			if errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.IllegalGeneration) {
				c.joining = &joinBox{}
				g.Join(joinReq(c.id), c.joining.done)
			} else if errors.Is(err, kerr.UnknownMemberID) {
				clients = removeClient(clients, c)
			}
		case op < 7 && len(clients) > 0: // leave
			c := clients[rng.IntN(len(clients))]
			g.Leave([]LeaveMember{{MemberID: c.id}})
			clients = removeClient(clients, c)
		default: // time passes
			s.advance(time.Duration(rng.IntN(12000)) * time.Millisecond)
		}
		check(step)
		st := g.State()
		if st != StateEmpty && st != StatePreparingRebalance && st != StateCompletingRebalance && st != StateStable {
			t.Fatalf("step %d: state %s", step, st)
		}
		if st == StateStable || st == StateCompletingRebalance {
			g.mu.Lock()
			_, leaderOK := g.members[g.leader]
			g.mu.Unlock()
			if !leaderOK {
				t.Fatalf("step %d: %s group's leader %q is not a member", step, st, g.leader)
			}
		}
	}
}

func removeClient[T comparable](xs []T, x T) []T {
	for i, y := range xs {
		if y == x {
			return append(xs[:i], xs[i+1:]...)
		}
	}
	return xs
}

// TestGroupMetadataIsBounded: the protocol metadata a group's members
// hold is bounded: a join that would pass MaxMetadataBytes is refused
// GROUP_MAX_SIZE_REACHED and the group keeps its members; a member that
// shrinks its metadata, or one that leaves, makes room again.
func TestGroupMetadataIsBounded(t *testing.T) {
	g, _, _ := testGroup(0)
	g.cfg.MaxMetadataBytes = 3<<20 + 100
	big := func(id string, n int) JoinRequest {
		r := joinReq(id)
		r.Protocols = []Protocol{{Name: "range", Metadata: make([]byte, n)}}
		return r
	}
	var ids []string
	for i := 0; i < 3; i++ {
		var first joinBox
		g.Join(big("", 1<<20), first.done)
		r, _ := first.last()
		var second joinBox
		g.Join(big(r.MemberID, 1<<20), second.done)
		if r2, ok := second.last(); ok && r2.Err != nil {
			t.Fatalf("member %d of 1 MiB under a 3 MiB bound: %v", i, r2.Err)
		}
		ids = append(ids, r.MemberID)
	}
	var over joinBox
	g.Join(big("", 1<<20), over.done)
	r, _ := over.last()
	if !errors.Is(r.Err, kerr.GroupMaxSizeReached) {
		t.Fatalf("a fourth 1 MiB member past the bound: %+v", r)
	}
	var grow joinBox
	g.Join(big(ids[0], 2<<20), grow.done)
	if r, ok := grow.last(); !ok || !errors.Is(r.Err, kerr.GroupMaxSizeReached) {
		t.Fatalf("a member growing its metadata past the bound: %+v", r)
	}
	if n := g.metadataBytesWith("", nil); n > g.cfg.MaxMetadataBytes {
		t.Fatalf("the group holds %d bytes of metadata over its bound %d", n, g.cfg.MaxMetadataBytes)
	}
}

// TestPendingMemberSurvivesARebalance: a member told MEMBER_ID_REQUIRED
// rejoins with its id right away, as clients do; if a join phase ends in
// between (its timer fired), the member must still be known: it used to
// be forgotten with the phase and its rejoin answered UNKNOWN_MEMBER_ID
// (seen once in fourteen runs of franz-go's TestGroupETL). It now joins
// and starts the next rebalance, as in Kafka.
func TestPendingMemberSurvivesARebalance(t *testing.T) {
	g, s, _ := testGroup(time.Second)
	a, ja := join(t, g) // a's join waits out the initial delay
	// b's first join: told its id, not a member yet.
	var first joinBox
	g.Join(joinReq(""), first.done)
	r, _ := first.last()
	if !errors.Is(r.Err, kerr.MemberIDRequired) {
		t.Fatalf("b's first join: %+v", r)
	}
	b := r.MemberID
	// The phase ends (its timer: the initial delay) before b's second
	// join arrives, well within b's session timeout.
	s.advance(1500 * time.Millisecond)
	if ra, ok := ja.last(); !ok || ra.Err != nil || len(ra.Members) != 1 {
		t.Fatalf("a's generation: %+v", ra)
	}
	var second joinBox
	g.Join(joinReq(b), second.done)
	if rb, ok := second.last(); ok && rb.Err != nil {
		t.Fatalf("b's join with the id it was given, after a rebalance: %v", rb.Err)
	}
	if g.State() != StatePreparingRebalance {
		t.Fatalf("b's join should start the next rebalance, state %s", g.State())
	}
	var ra2 joinBox
	g.Join(joinReq(a), ra2.done)
	s.advance(time.Millisecond)
	r2, ok := ra2.last()
	if !ok || r2.Err != nil || len(r2.Members) != 2 {
		t.Fatalf("the next generation: %+v", r2)
	}
}

// TestSyncWaiterAnsweredWhenStoreIsOvertaken: a follower waits in
// SyncGroup while the leader's assignment is being stored; a new member
// joins before the store finishes. The waiter must be told to rejoin at
// once, not left hanging until its session expires and then told
// UNKNOWN_MEMBER_ID (franz-go's TestGroupETL saw exactly that).
func TestSyncWaiterAnsweredWhenStoreIsOvertaken(t *testing.T) {
	s := newFakeSched()
	var stores []func(error)
	var mu sync.Mutex
	cfg := &GroupConfig{MinSessionTimeout: time.Second, MaxSessionTimeout: time.Hour}
	g := newGroup("g", cfg, s, func(_ *Group, _ GroupSnapshot, done func(error)) {
		mu.Lock()
		stores = append(stores, done) // the store finishes when the test says
		mu.Unlock()
	})
	a, ja := join(t, g)
	b, jb := join(t, g)
	var again joinBox
	g.Join(joinReq(a), again.done)
	s.advance(time.Millisecond)
	ra, _ := again.last()
	rb, _ := jb.last()
	if ra.Err != nil || rb.Err != nil || ra.Generation != rb.Generation {
		t.Fatalf("generation: a %+v (first %+v), b %+v", ra, ja.got, rb)
	}
	leader, follower := a, b
	if ra.LeaderID == b {
		leader, follower = b, a
	}
	gen := ra.Generation
	var fs, ls syncBox
	g.Sync(SyncRequest{MemberID: follower, Generation: gen}, fs.done)
	g.Sync(SyncRequest{MemberID: leader, Generation: gen, Assignments: map[string][]byte{a: []byte("x"), b: []byte("y")}}, ls.done)
	if _, ok := fs.last(); ok {
		t.Fatalf("follower answered before the store finished: %+v", fs.got)
	}
	// A third member joins while the generation is still being stored.
	var jc joinBox
	g.Join(joinReq(""), jc.done)
	if r, _ := jc.last(); errors.Is(r.Err, kerr.MemberIDRequired) {
		g.Join(joinReq(r.MemberID), jc.done)
	}
	for _, box := range []*syncBox{&fs, &ls} {
		r, ok := box.last()
		if !ok || !errors.Is(r.Err, kerr.RebalanceInProgress) {
			t.Fatalf("sync waiter after a new member joined: %+v (ok %v), want REBALANCE_IN_PROGRESS", r, ok)
		}
	}
	// The late store completion must not answer anyone twice.
	mu.Lock()
	pending := append([]func(error){}, stores...)
	mu.Unlock()
	for _, done := range pending {
		done(nil)
	}
	if len(fs.got) != 1 || len(ls.got) != 1 {
		t.Fatalf("sync answers: follower %d, leader %d", len(fs.got), len(ls.got))
	}
}
