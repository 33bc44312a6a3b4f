package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func strp(s string) *string { return &s }

// commit stores offsets (topic "t") for a group, failing the test on any
// error.
func commit(t *testing.T, co *Coordinator, group, member string, gen int32, offsets map[int32]int64, md *string) {
	t.Helper()
	var cs []OffsetCommit
	for p, o := range offsets {
		cs = append(cs, OffsetCommit{Topic: "t", Partition: p, Offset: o, LeaderEpoch: 0, Metadata: md})
	}
	errs, err := co.CommitOffsets(group, member, nil, gen, cs)
	if err != nil {
		t.Fatalf("commit %s: %v", group, err)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatalf("commit %s: %v", group, err)
		}
	}
}

// offsetsOf returns a group's committed offsets as "topic-partition=offset/metadata".
func offsetsOf(t *testing.T, co *Coordinator, group string) string {
	t.Helper()
	fs, err := co.FetchOffsets(group, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := ""
	for _, f := range fs {
		s += fmt.Sprintf("%s-%d=%d/%s ", f.Topic, f.Partition, f.Offset, f.Metadata)
	}
	return s
}

// formGeneration joins one consumer member to group and syncs it with
// assignment; it returns the member id once the generation is durable.
func formGeneration(t *testing.T, co *Coordinator, group string, assignment []byte) string {
	t.Helper()
	g, err := co.Group(group, true)
	if err != nil {
		t.Fatal(err)
	}
	sub := kmsg.NewConsumerMemberMetadata()
	sub.Topics = []string{"t"}
	joined := make(chan JoinResult, 1)
	g.Join(JoinRequest{ClientID: "c1", ClientHost: "/10.0.0.1", SessionTimeout: 10 * time.Minute, RebalanceTimeout: time.Minute,
		ProtocolType: "consumer", Protocols: []Protocol{{Name: "range", Metadata: sub.AppendTo(nil)}}}, func(r JoinResult) { joined <- r })
	var jr JoinResult
	select {
	case jr = <-joined:
	case <-time.After(10 * time.Second):
		t.Fatal("JoinGroup not answered")
	}
	if jr.Err != nil || jr.Generation != 1 || jr.LeaderID != jr.MemberID {
		t.Fatalf("join: %+v", jr)
	}
	synced := make(chan SyncResult, 1)
	g.Sync(SyncRequest{MemberID: jr.MemberID, Generation: 1, Assignments: map[string][]byte{jr.MemberID: assignment}},
		func(r SyncResult) { synced <- r })
	select {
	case sr := <-synced:
		if sr.Err != nil || string(sr.Assignment) != string(assignment) {
			t.Fatalf("sync: %+v", sr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SyncGroup not answered (the generation was never stored)")
	}
	return jr.MemberID
}

// The coordinator's state lives in __consumer_offsets only: commits (the
// newest per partition), generations with their members, and the
// tombstones of deleted groups and offsets all come back after restarts.
func TestCoordinatorReplay(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, nil)
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "t", Partitions: 3, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	co := e.Coordinator()
	commit(t, co, "simple", "", -1, map[int32]int64{0: 10, 1: 20}, strp("m0"))
	commit(t, co, "simple", "", -1, map[int32]int64{0: 11}, nil) // the newest wins
	member := formGeneration(t, co, "live", []byte("all of t"))
	commit(t, co, "live", member, 1, map[int32]int64{2: 5}, strp("by member"))
	commit(t, co, "doomed", "", -1, map[int32]int64{0: 1, 1: 2}, nil)
	if err := co.DeleteGroup("doomed"); err != nil {
		t.Fatal(err)
	}
	commit(t, co, "partial", "", -1, map[int32]int64{0: 7, 1: 8}, nil)
	errs, err := co.DeleteOffsets("partial", []TopicPartition{{Topic: "t", Partition: 1}})
	if err != nil || errs[0] != nil {
		t.Fatalf("delete offsets: %v %v", errs, err)
	}
	check := func(co *Coordinator) {
		t.Helper()
		if s := offsetsOf(t, co, "simple"); s != "t-0=11/ t-1=20/m0 " {
			t.Fatalf("simple: %s", s)
		}
		if s := offsetsOf(t, co, "live"); s != "t-2=5/by member " {
			t.Fatalf("live: %s", s)
		}
		if s := offsetsOf(t, co, "partial"); s != "t-0=7/ " {
			t.Fatalf("partial: %s", s)
		}
		if g, _ := co.Group("doomed", false); g != nil {
			t.Fatalf("deleted group came back: %+v", g.Describe())
		}
		var ids []string
		for _, g := range co.Groups() {
			ids = append(ids, g.ID)
		}
		if fmt.Sprint(ids) != "[live partial simple]" {
			t.Fatalf("groups %v", ids)
		}
	}
	check(co)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e = openEngine(t, dir, nil)
	co = e.Coordinator()
	check(co)
	g, _ := co.Group("live", false)
	d := g.Describe()
	if d.State != StateStable || d.Generation != 1 || d.ProtocolType != "consumer" || d.Protocol != "range" ||
		len(d.Members) != 1 || d.Members[0].MemberID != member || d.Members[0].ClientID != "c1" ||
		string(d.Members[0].Assignment) != "all of t" {
		t.Fatalf("live group after restart: %+v", d)
	}
	// The restored member is a member: it may commit in its generation,
	// and its subscription protects its topic's offsets.
	commit(t, co, "live", member, 1, map[int32]int64{2: 6}, nil)
	if err := g.Heartbeat(member, nil, 1); err != nil {
		t.Fatalf("heartbeat of the restored member: %v", err)
	}
	errs, err = co.DeleteOffsets("live", []TopicPartition{{Topic: "t", Partition: 2}})
	if err != nil || !errors.Is(errs[0], kerr.GroupSubscribedToTopic) {
		t.Fatalf("deleting a subscribed topic's offsets: %v %v", errs, err)
	}
	// The member leaves: the group's empty generation is stored too
	// (asynchronously: wait until it is in the log).
	offsets := co.topic.Partition(0)
	hw := offsets.HighWatermark()
	if errs := g.Leave([]LeaveMember{{MemberID: member}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	waitUntil(t, "the empty generation is stored", func() bool { return offsets.HighWatermark() > hw })

	// A kill -9 this time: the replay does not depend on a clean stop.
	crash := crashCopy(t, dir)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, crash, nil)
	co = e.Coordinator()
	g, _ = co.Group("live", false)
	if d := g.Describe(); d.State != StateEmpty || d.Generation != 2 || len(d.Members) != 0 {
		t.Fatalf("live group after its member left and a restart: %+v", d)
	}
	if s := offsetsOf(t, co, "live"); s != "t-2=6/ " {
		t.Fatalf("live: %s", s)
	}
	if s := offsetsOf(t, co, "partial"); s != "t-0=7/ " {
		t.Fatalf("partial: %s", s)
	}
}
