package sharegroup

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

type fakeTopics struct {
	parts   map[string]int32
	version uint64
}

func (f *fakeTopics) ByName(name string) (TopicID, int32, bool) {
	n, ok := f.parts[name]
	return TopicID{name[0]}, n, ok
}
func (f *fakeTopics) Version() uint64 { return f.version }

var testGroupConfig = Config{SessionMillis: 1000, HeartbeatMillis: 100, MaxSize: 4}

func heartbeat(t *testing.T, g *Group, topics Topics, now int64, req Request) Response {
	t.Helper()
	resp, err := g.Heartbeat(now, topics, req)
	if err != nil {
		t.Fatalf("heartbeat %+v: %v", req, err)
	}
	return resp
}

func TestShareGroupAssignment(t *testing.T) {
	topics := &fakeTopics{parts: map[string]int32{"one": 1, "four": 4}}
	g := New(testGroupConfig)
	a := heartbeat(t, g, topics, 0, Request{MemberID: "a", Topics: []string{"one", "four"}})
	if a.MemberEpoch != 1 || a.Assignment.Len() != 5 {
		t.Fatalf("first member: epoch %d assignment %v, want epoch 1 and all 5 partitions", a.MemberEpoch, a.Assignment)
	}
	heartbeat(t, g, topics, 0, Request{MemberID: "b", Topics: []string{"one", "four"}})
	c := heartbeat(t, g, topics, 0, Request{MemberID: "c", Topics: []string{"one"}})
	if c.MemberEpoch != 3 {
		t.Fatalf("epoch %d after three joins, want 3", c.MemberEpoch)
	}
	// "one" has 1 partition and three subscribers: all share it.
	for _, m := range g.Members() {
		if ps := m.Assigned[TopicID{'o'}]; len(ps) != 1 || ps[0] != 0 {
			t.Fatalf("member %s has %v of topic one, want [0]", m.ID, ps)
		}
	}
	// "four": two subscribers split its 4 partitions.
	if x, y := g.Member("a").Assigned[TopicID{'f'}], g.Member("b").Assigned[TopicID{'f'}]; len(x) != 2 || len(y) != 2 {
		t.Fatalf("four split %v / %v, want 2 and 2", x, y)
	}
	// a's next heartbeat, at its old epoch, gets the new assignment.
	a = heartbeat(t, g, topics, 10, Request{MemberID: "a", MemberEpoch: 1})
	if a.MemberEpoch != 3 || a.Assignment == nil {
		t.Fatalf("a at epoch 1: %+v, want epoch 3 and its assignment", a)
	}
	// Steady: no assignment sent.
	if a = heartbeat(t, g, topics, 20, Request{MemberID: "a", MemberEpoch: 3}); a.Assignment != nil {
		t.Fatalf("steady heartbeat sent %v", a.Assignment)
	}
	// b answers at epoch 2 (it never heard 3) and is not fenced.
	if _, err := g.Heartbeat(20, topics, Request{MemberID: "b", MemberEpoch: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Heartbeat(20, topics, Request{MemberID: "b", MemberEpoch: 7}); !errors.Is(err, kerr.FencedMemberEpoch) {
		t.Fatalf("epoch 7: %v, want FENCED_MEMBER_EPOCH", err)
	}
	if _, err := g.Heartbeat(20, topics, Request{MemberID: "zz", MemberEpoch: 3}); !errors.Is(err, kerr.UnknownMemberID) {
		t.Fatalf("unknown member: %v", err)
	}
	// A new partition moves the epoch.
	topics.parts["four"], topics.version = 6, 1
	if a = heartbeat(t, g, topics, 30, Request{MemberID: "a", MemberEpoch: 3}); a.MemberEpoch != 4 || a.Assignment == nil {
		t.Fatalf("after growth: %+v", a)
	}
	// Leave and expiry.
	heartbeat(t, g, topics, 40, Request{MemberID: "c", MemberEpoch: LeaveEpoch})
	if g.Member("c") != nil {
		t.Fatal("c still a member after leaving")
	}
	if removed := g.Expire(19+testGroupConfig.SessionMillis, topics); len(removed) != 0 {
		t.Fatalf("expired %v early", removed)
	}
	if removed := g.Expire(25+testGroupConfig.SessionMillis, topics); len(removed) != 1 {
		t.Fatalf("expired %v, want b (last heard at 20)", removed)
	}
	if g.Member("a") == nil || g.Member("b") != nil {
		t.Fatal("wrong member expired")
	}
}

func TestShareGroupLimits(t *testing.T) {
	topics := &fakeTopics{parts: map[string]int32{"t": 1}}
	g := New(testGroupConfig)
	if _, err := g.Heartbeat(0, topics, Request{MemberID: "a"}); !errors.Is(err, kerr.InvalidRequest) {
		t.Fatalf("join without topics: %v", err)
	}
	if _, err := g.Heartbeat(0, topics, Request{Topics: []string{"t"}}); !errors.Is(err, kerr.InvalidRequest) {
		t.Fatalf("join without a member id: %v", err)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		heartbeat(t, g, topics, 0, Request{MemberID: id, Topics: []string{"t"}})
	}
	if _, err := g.Heartbeat(0, topics, Request{MemberID: "e", Topics: []string{"t"}}); !errors.Is(err, kerr.GroupMaxSizeReached) {
		t.Fatalf("fifth member: %v", err)
	}
	// A rejoin of a member keeps its place.
	heartbeat(t, g, topics, 0, Request{MemberID: "a", Topics: []string{"t"}})
}
