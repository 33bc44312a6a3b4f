package fetchsession

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// req builds a fetch request of topic "t" (and, by name, topic "u" for
// partitions ≥ 100), each partition at offset 10*partition.
func req(id, epoch int32, parts ...int32) *kmsg.FetchRequest {
	r := kmsg.NewPtrFetchRequest()
	r.SessionID, r.SessionEpoch = id, epoch
	for _, p := range parts {
		name := "t"
		if p >= 100 {
			name = "u"
		}
		if len(r.Topics) == 0 || r.Topics[len(r.Topics)-1].Topic != name {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = name
			r.Topics = append(r.Topics, rt)
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, 10*int64(p), 1<<20
		rt := &r.Topics[len(r.Topics)-1]
		rt.Partitions = append(rt.Partitions, rp)
	}
	return r
}

// flat lists topics' partitions as "topic/partition@offset".
func flat(topics []kmsg.FetchRequestTopic) []string {
	var out []string
	for _, rt := range topics {
		for _, rp := range rt.Partitions {
			out = append(out, fmt.Sprintf("%s/%d@%d", rt.Topic, rp.Partition, rp.FetchOffset))
		}
	}
	return out
}

type gauge struct{ n float64 }

func (g *gauge) Add(d float64) { g.n += d }

type counter struct{ n int }

func (c *counter) Inc() { c.n++ }

func TestSessionlessAndVersions(t *testing.T) {
	c := NewCache(10, 0, Observer{})
	r := req(0, FinalEpoch, 1, 2)
	x, want, code := c.Begin(r, 12, nil)
	if code != 0 || x.Kind != Sessionless || x.ID() != 0 || &want[0] != &r.Topics[0] {
		t.Fatalf("final epoch: kind %d id %d code %d", x.Kind, x.ID(), code)
	}
	// Before version 7 the fields do not exist: a decoded request's
	// zero epoch must not open a session.
	r = req(0, InitialEpoch, 1)
	if x, _, code = c.Begin(r, 6, nil); code != 0 || x.Kind != Sessionless || c.Len() != 0 {
		t.Fatalf("v6: kind %d code %d sessions %d", x.Kind, code, c.Len())
	}
	// No slots: every request goes without.
	off := NewCache(0, 0, Observer{})
	if x, _, code = off.Begin(req(0, InitialEpoch, 1), 12, nil); code != 0 || x.Kind != Sessionless || off.Len() != 0 {
		t.Fatalf("no slots: kind %d code %d", x.Kind, code)
	}
}

func TestIncrementalSession(t *testing.T) {
	g := &gauge{}
	c := NewCache(10, 0, Observer{Sessions: g})
	x, want, code := c.Begin(req(0, InitialEpoch, 0, 1, 2, 100), 12, nil)
	if code != 0 || x.Kind != Full || x.ID() <= 0 || len(flat(want)) != 4 || c.Len() != 1 || g.n != 1 {
		t.Fatalf("open: kind %d id %d code %d want %v sessions %d gauge %v", x.Kind, x.ID(), code, flat(want), c.Len(), g.n)
	}
	id := x.ID()
	// The full response tells the client everything.
	x.StartReport()
	for i := range 4 {
		if !x.Report(i, Result{HighWatermark: 5}) {
			t.Fatalf("full response left out partition %d", i)
		}
	}
	x.EndReport()

	// Epoch 1: partition 1 moved on; the fetch reads all four, in order.
	r := req(id, 1, 1)
	r.Topics[0].Partitions[0].FetchOffset = 55
	x, want, code = c.Begin(r, 12, nil)
	if code != 0 || x.Kind != Incremental || x.ID() != id {
		t.Fatalf("epoch 1: kind %d id %d code %d", x.Kind, x.ID(), code)
	}
	if got := flat(want); !slices.Equal(got, []string{"t/0@0", "t/1@55", "t/2@20", "u/100@1000"}) {
		t.Fatalf("epoch 1 reads %v", got)
	}
	// Only what changed goes back: records on 1, a new high watermark on
	// 2, an error on 100; partition 0 has nothing new. Partition 1 moves
	// to the end.
	x.StartReport()
	sent := []bool{
		x.Report(0, Result{HighWatermark: 5}),
		x.Report(1, Result{HighWatermark: 5, Records: true}),
		x.Report(2, Result{HighWatermark: 6}),
		x.Report(3, Result{HighWatermark: 5, ErrCode: 6}),
	}
	x.EndReport()
	if !slices.Equal(sent, []bool{false, true, true, true}) {
		t.Fatalf("incremental response carries %v", sent)
	}

	// A replayed epoch is refused; the right one forgets partition 0 and
	// adds u/101.
	if _, _, code = c.Begin(req(id, 1), 12, nil); code != kerr.InvalidFetchSessionEpoch.Code {
		t.Fatalf("replayed epoch: code %d", code)
	}
	r = req(id, 2, 101)
	r.ForgottenTopics = []kmsg.FetchRequestForgottenTopic{{Topic: "t", Partitions: []int32{0, 7}}}
	sc := &Scratch{}
	x, want, code = c.Begin(r, 12, sc)
	if code != 0 || x.Kind != Incremental {
		t.Fatalf("epoch 2: kind %d code %d", x.Kind, code)
	}
	// Order: 2, 100, then 1 (moved for its records), then the new 101; a
	// topic per run.
	if got := flat(want); !slices.Equal(got, []string{"t/2@20", "u/100@1000", "t/1@55", "u/101@1010"}) {
		t.Fatalf("epoch 2 reads %v", got)
	}
	if len(want) != 4 || &want[0] != &sc.topics[0] {
		t.Fatalf("epoch 2: %d topics, or not in dst's memory", len(want))
	}
	// The error is answered again once gone, even at the same high
	// watermark; an unchanged partition is not.
	x.StartReport()
	if !x.Report(1, Result{HighWatermark: 5}) {
		t.Fatal("a partition whose error went away was left out")
	}
	if x.Report(0, Result{HighWatermark: 6}) {
		t.Fatal("an unchanged partition was answered")
	}
	if !x.Report(3, Result{HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1}) {
		// The same offsets as an error's reset, but a new partition
		// has never been told anything: the first response carries it.
		t.Fatal("a new partition was left out")
	}
	x.EndReport()

	// Unknown id, wrong topic addressing, then closing by epoch -1.
	if _, _, code = c.Begin(req(id+1, 1), 12, nil); code != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("unknown id: code %d", code)
	}
	if _, _, code = c.Begin(req(id, 3), 13, nil); code != kerr.FetchSessionTopicIDError.Code {
		t.Fatalf("by id on a session by name: code %d", code)
	}
	if x, _, code = c.Begin(req(id, FinalEpoch, 1), 12, nil); code != 0 || x.Kind != Sessionless || c.Len() != 0 || g.n != 0 {
		t.Fatalf("close: kind %d code %d sessions %d gauge %v", x.Kind, code, c.Len(), g.n)
	}
	if _, _, code = c.Begin(req(id, 3), 12, nil); code != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("closed session: code %d", code)
	}
}

func TestNewPartitionAlwaysAnswered(t *testing.T) {
	c := NewCache(10, 0, Observer{})
	x, _, _ := c.Begin(req(0, InitialEpoch, 1), 12, nil)
	x, _, _ = c.Begin(req(x.ID(), 1, 2), 12, nil) // t/1, t/2
	x.StartReport()
	defer x.EndReport()
	// An empty partition reports zero offsets, the session's zero
	// values; it must be answered anyway, once.
	r := Result{HighWatermark: 0, LastStableOffset: 0, LogStartOffset: 0}
	if !x.Report(1, r) {
		t.Fatal("a partition new to the session was left out")
	}
	if x.Report(1, r) {
		t.Fatal("a partition with nothing new was answered twice")
	}
}

func TestEmptiedSessionEnds(t *testing.T) {
	c := NewCache(10, 0, Observer{})
	x, _, _ := c.Begin(req(0, InitialEpoch, 1), 12, nil)
	r := req(x.ID(), 1)
	r.ForgottenTopics = []kmsg.FetchRequestForgottenTopic{{Topic: "t", Partitions: []int32{1}}}
	x2, want, code := c.Begin(r, 12, nil)
	if code != 0 || x2.Kind != Sessionless || len(want) != 0 || c.Len() != 0 {
		t.Fatalf("emptied: kind %d code %d want %v sessions %d", x2.Kind, code, flat(want), c.Len())
	}
}

func TestReopenClosesOld(t *testing.T) {
	c := NewCache(10, 0, Observer{})
	x, _, _ := c.Begin(req(0, InitialEpoch, 1), 12, nil)
	old := x.ID()
	x, _, _ = c.Begin(req(old, InitialEpoch, 1, 2), 12, nil)
	if x.Kind != Full || x.ID() == old || c.Len() != 1 {
		t.Fatalf("reopen: kind %d id %d (old %d) sessions %d", x.Kind, x.ID(), old, c.Len())
	}
	if _, _, code := c.Begin(req(old, 1), 12, nil); code != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("old session still answers: code %d", code)
	}
}

func TestByTopicID(t *testing.T) {
	c := NewCache(10, 0, Observer{})
	id := [16]byte{1, 2, 3}
	r := kmsg.NewPtrFetchRequest()
	r.SessionEpoch = InitialEpoch
	rt := kmsg.NewFetchRequestTopic()
	rt.TopicID = id
	for p := range int32(3) {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = p
		rt.Partitions = append(rt.Partitions, rp)
	}
	r.Topics = append(r.Topics, rt)
	x, _, code := c.Begin(r, 13, nil)
	if code != 0 || x.Kind != Full {
		t.Fatalf("open by id: kind %d code %d", x.Kind, code)
	}
	r = kmsg.NewPtrFetchRequest()
	r.SessionID, r.SessionEpoch = x.ID(), 1
	r.ForgottenTopics = []kmsg.FetchRequestForgottenTopic{{TopicID: id, Partitions: []int32{1}}}
	x, want, code := c.Begin(r, 17, nil)
	if code != 0 || x.Kind != Incremental || len(want) != 1 || want[0].TopicID != id || len(want[0].Partitions) != 2 {
		t.Fatalf("incremental by id: kind %d code %d want %+v", x.Kind, code, want)
	}
	if _, _, code = c.Begin(req(x.ID(), 2), 12, nil); code != kerr.FetchSessionTopicIDError.Code {
		t.Fatalf("by name on a session by id: code %d", code)
	}
}

func TestEvictsOnlyStale(t *testing.T) {
	now := time.Unix(1000, 0)
	ev := &counter{}
	g := &gauge{}
	c := NewCache(2, time.Minute, Observer{Sessions: g, Evictions: ev})
	c.now = func() time.Time { return now }
	a, _, _ := c.Begin(req(0, InitialEpoch, 1), 12, nil)
	now = now.Add(time.Second)
	b, _, _ := c.Begin(req(0, InitialEpoch, 2), 12, nil)
	// Full, and nobody is stale: the newcomer goes without.
	now = now.Add(30 * time.Second)
	if x, _, code := c.Begin(req(0, InitialEpoch, 3), 12, nil); code != 0 || x.Kind != Sessionless || c.Len() != 2 {
		t.Fatalf("full cache: kind %d code %d sessions %d", x.Kind, code, c.Len())
	}
	// a is used again; later b is the stale one and gives way.
	if _, _, code := c.Begin(req(a.ID(), 1), 12, nil); code != 0 {
		t.Fatalf("use a: code %d", code)
	}
	now = now.Add(45 * time.Second) // b unused for 75 s, a for 45 s
	x, _, _ := c.Begin(req(0, InitialEpoch, 3), 12, nil)
	if x.Kind != Full || c.Len() != 2 || ev.n != 1 || g.n != 2 {
		t.Fatalf("stale eviction: kind %d sessions %d evictions %d gauge %v", x.Kind, c.Len(), ev.n, g.n)
	}
	if _, _, code := c.Begin(req(b.ID(), 1), 12, nil); code != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("evicted session still answers: code %d", code)
	}
	if _, _, code := c.Begin(req(a.ID(), 2), 12, nil); code != 0 {
		t.Fatalf("the recently used session was evicted: code %d", code)
	}
}

func TestEpochWraps(t *testing.T) {
	if nextEpoch(math.MaxInt32) != 1 || nextEpoch(1) != 2 {
		t.Fatal("epochs must go from MaxInt32 back to 1, skipping 0 and -1")
	}
}

// FuzzSessionOps runs a session through requests built from the input:
// each 4-byte step adds or updates a partition, forgets one, or reports a
// result on the last fetch's partitions or on the one before (whose
// partitions may have been forgotten since). Whatever the sequence, the
// session's order and index agree, every expansion names each live
// partition once, and Report's rotation keeps all of them.
func FuzzSessionOps(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 2, 0, 0, 1, 1, 0, 0, 2, 2, 1, 0})
	f.Add([]byte{0, 1, 5, 0, 0, 1, 6, 0, 2, 1, 1, 0, 1, 1, 0, 0, 2, 1, 0, 0})
	f.Add([]byte{0, 1, 0, 0, 0, 2, 0, 0, 1, 1, 0, 0, 2, 0, 0, 3, 2, 0, 0, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		c := NewCache(4, 0, Observer{})
		x, _, _ := c.Begin(req(0, InitialEpoch), 12, nil)
		if x.Kind != Full {
			t.Fatalf("open: kind %d", x.Kind)
		}
		s := x.Session
		id, epoch := x.ID(), int32(1)
		live := map[int32]bool{}
		type fetched struct {
			x Context
			n int // partitions in its list
		}
		var recent []fetched
		for len(in) >= 4 {
			op, p, arg := in[0]%3, int32(in[1]%8)+int32(in[2]%2)*100, in[3]
			in = in[4:]
			switch op {
			case 0, 1:
				r := req(id, epoch)
				if op == 0 {
					r = req(id, epoch, p)
					live[p] = true
				} else {
					r.ForgottenTopics = []kmsg.FetchRequestForgottenTopic{{Topic: map[bool]string{false: "t", true: "u"}[p >= 100], Partitions: []int32{p}}}
					delete(live, p)
				}
				x, want, code := c.Begin(r, 12, nil)
				if code != 0 {
					t.Fatalf("epoch %d: code %d", epoch, code)
				}
				if len(live) == 0 {
					if x.Kind != Sessionless {
						t.Fatalf("emptied session kind %d", x.Kind)
					}
					return
				}
				epoch++
				seen := map[string]bool{}
				for _, s := range flat(want) {
					if seen[s] {
						t.Fatalf("expansion repeats %s: %v", s, flat(want))
					}
					seen[s] = true
				}
				if len(seen) != len(live) {
					t.Fatalf("expansion %v, live %v", flat(want), live)
				}
				recent = append(recent, fetched{x, len(seen)})
				if len(recent) > 2 {
					recent = recent[1:]
				}
			case 2:
				if len(recent) == 0 {
					continue
				}
				fx := recent[int(arg/2)%len(recent)]
				fx.x.StartReport()
				fx.x.Report(int(p)%fx.n, Result{HighWatermark: int64(arg), Records: arg%2 == 1})
				fx.x.EndReport()
			}
			check(t, s)
		}
	})
}

// check verifies that s's list and index hold the same entries.
func check(t *testing.T, s *Session) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	var prev *entry
	for e := s.head; e != nil; e = e.next {
		if e.prev != prev || s.index[e.key] != e {
			t.Fatalf("list and index disagree at %+v", e.key)
		}
		prev, n = e, n+1
	}
	if prev != s.tail || n != len(s.index) {
		t.Fatalf("list has %d entries (tail ok: %v), index %d", n, prev == s.tail, len(s.index))
	}
}
