package engine

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine/consumergroup"
	"github.com/ringlog/ringlog/engine/sharegroup"
)

// joinShare makes member a member of share group g subscribed to topic.
func joinShare(t *testing.T, e *Engine, g, member, topic string) {
	t.Helper()
	if _, err := e.Coordinator().ShareHeartbeat(g, sharegroup.Request{MemberID: member, Topics: []string{topic}}); err != nil {
		t.Fatalf("join %s to %s: %v", member, g, err)
	}
}

// TestShareStateSurvivesRestart: what a member acknowledged is never
// delivered again after the broker restarts (kill -9 included: the
// state is written, fdatasync'ed, before the acknowledgement is
// answered), what it held but did not acknowledge is delivered again
// with its delivery count, and an admin reset of the start offset holds.
func TestShareStateSurvivesRestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "clean", true: "crash"}[crash], func(t *testing.T) {
			dir := t.TempDir()
			e := openTestEngine(t, dir, nil)
			tp, err := e.CreateTopic(CreateTopicRequest{Name: "q", Partitions: 1, ReplicationFactor: 1})
			if err != nil {
				t.Fatal(err)
			}
			p := tp.Partition(0)
			for i := 0; i < 4; i++ {
				appendOK(t, p, buildBatch(t, 1, -1, 0, 0, values("v", 5)...))
			}
			if err := e.AlterGroupConfigs("g", map[string]*string{"share.auto.offset.reset": ptr("earliest")}, false); err != nil {
				t.Fatal(err)
			}
			joinShare(t, e, "g", "a", "q")
			recs, acq, err := e.Shares().Fetch(time.Now(), "g", "a", p, 1<<20, 12, false)
			if err != nil {
				t.Fatal(err)
			}
			if want := []ShareAcquisition{{First: 0, Last: 14, DeliveryCount: 1}}; !reflect.DeepEqual(acq, want) || len(recs) == 0 {
				t.Fatalf("fetch: %v (%d bytes), want %v (whole batches past 12 records)", acq, len(recs), want)
			}
			if err := e.Shares().Acknowledge(time.Now(), "g", "a", p, []ShareAck{{First: 0, Last: 9, Types: []int8{1}}}); err != nil {
				t.Fatal(err)
			}
			dir2 := dir
			if crash {
				dir2 = crashCopy(t, dir) // the files as a kill -9 leaves them
			}
			e.Close()
			e = openEngine(t, dir2, nil)
			p = e.Topic("q").Partition(0)
			if err := e.Coordinator().CheckShareMember("g", "a", true); err == nil {
				t.Fatal("share group membership survived a restart (it is not persisted)")
			}
			joinShare(t, e, "g", "b", "q")
			_, acq, err = e.Shares().Fetch(time.Now(), "g", "b", p, 1<<20, 0, false)
			if err != nil {
				t.Fatal(err)
			}
			want := []ShareAcquisition{{First: 10, Last: 14, DeliveryCount: 2}, {First: 15, Last: 19, DeliveryCount: 1}}
			if !reflect.DeepEqual(acq, want) {
				t.Fatalf("after restart b acquired %v, want %v", acq, want)
			}
			// Reset by an admin: the group must have no member.
			if _, err := e.Coordinator().AlterShareOffsets("g", map[string]map[int32]int64{"q": {0: 3}}); !errors.Is(err, kerr.NonEmptyGroup) {
				t.Fatalf("alter with members: %v", err)
			}
			if _, err := e.Coordinator().ShareHeartbeat("g", sharegroup.Request{MemberID: "b", MemberEpoch: sharegroup.LeaveEpoch}); err != nil {
				t.Fatal(err)
			}
			errs, err := e.Coordinator().AlterShareOffsets("g", map[string]map[int32]int64{"q": {0: 3}})
			if err != nil || errs["q"][0] != nil {
				t.Fatalf("alter: %v %v", err, errs)
			}
			offs, err := e.Coordinator().ShareOffsets("g", nil)
			if err != nil || len(offs) != 1 || offs[0].StartOffset != 3 || offs[0].Lag != 17 {
				t.Fatalf("offsets %+v %v, want start 3 lag 17", offs, err)
			}
			if err := e.Coordinator().DeleteGroup("g"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Coordinator().ShareOffsets("g", nil); !errors.Is(err, kerr.GroupIDNotFound) {
				t.Fatalf("offsets of a deleted group: %v", err)
			}
		})
	}
}

func TestShareStateRecords(t *testing.T) {
	k := ShareKey{Group: "g", Topic: TopicID{1, 2}, Partition: 7}
	st := ShareState{State: sharegroup.State{Start: 5, Batches: []sharegroup.StateBatch{{First: 5, Last: 9, State: sharegroup.Acknowledged, DeliveryCount: 2}}}, StateEpoch: 3, LeaderEpoch: 4}
	gk, err := readShareKey(appendShareKey(nil, k))
	if err != nil || gk != k {
		t.Fatalf("key round trip: %+v %v", gk, err)
	}
	gs, err := readShareValue(appendShareValue(nil, st, 1))
	if err != nil || !reflect.DeepEqual(gs, st) {
		t.Fatalf("value round trip: %+v %v", gs, err)
	}
	// A count of batches the bytes cannot hold is refused before any
	// allocation.
	v := appendShareValue(nil, ShareState{}, 1)
	v[len(v)-1] = 0xff
	v[len(v)-2] = 0xff
	if _, err := readShareValue(v); err == nil {
		t.Fatal("a value claiming 65535 batches in 0 bytes was accepted")
	}
}

// FuzzShareState feeds hostile share-state records (as a damaged or
// forged __share_group_state would hold) to the decoder and to Restore:
// no panic, no allocation a length prefix drives beyond the input.
func FuzzShareState(f *testing.F) {
	f.Add(appendShareKey(nil, ShareKey{Group: "g", Partition: 1}), appendShareValue(nil, ShareState{State: sharegroup.State{Start: 5, Batches: []sharegroup.StateBatch{{First: 5, Last: 9, State: 2, DeliveryCount: 1}}}}, 1))
	f.Add([]byte{0, 0, 0, 1, 'g'}, []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		if _, err := readShareKey(key); err != nil {
			return
		}
		st, err := readShareValue(value)
		if err != nil {
			return
		}
		p, err := sharegroup.Restore(st.State, sharegroup.Limits{LockMillis: 1, DeliveryLimit: 5, MaxInFlight: 100}, maxShareSpan)
		if err != nil {
			return
		}
		if p.End()-p.Start() > maxShareSpan {
			t.Fatalf("restored window %d-%d wider than %d", p.Start(), p.End(), maxShareSpan)
		}
		p.Acquire("m", 0, p.Start(), []sharegroup.Span{{First: p.Start(), Last: p.Start() + 10}}, 5, false)
	})
}

func ptr[T any](v T) *T { return &v }

// TestShareStateFencing: a share-partition leader's write of a state an
// admin reset or deleted since is refused (FENCED_STATE_EPOCH), so a
// reset is never undone by a late write, and a new state after a
// deletion starts past it.
func TestShareStateFencing(t *testing.T) {
	e := openEngine(t, t.TempDir(), nil)
	s := e.ShareStates()
	k := ShareKey{Group: "g", Topic: TopicID{9}, Partition: 0}
	old := ShareState{State: sharegroup.State{Start: 5}}
	if err := s.Write(k, old); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(k, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(k, old); !errors.Is(err, kerr.FencedStateEpoch) {
		t.Fatalf("a write of the epoch before the reset: %v", err)
	}
	st, ok, _ := s.Read(k, -1)
	if !ok || st.Start != 2 || st.StateEpoch != 1 {
		t.Fatalf("after the reset: %+v %v", st, ok)
	}
	if err := s.Delete(k); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(k, st); !errors.Is(err, kerr.FencedStateEpoch) {
		t.Fatalf("a write of the deleted state's epoch: %v", err)
	}
	st, ok, _ = s.Read(k, -1)
	if ok || st.StateEpoch != 2 {
		t.Fatalf("after the deletion Read says %+v %v, want none, epoch 2 to start at", st, ok)
	}
	if err := s.Write(k, ShareState{State: sharegroup.State{Start: 7}, StateEpoch: st.StateEpoch}); err != nil {
		t.Fatalf("a new state after the deletion: %v", err)
	}
}

// TestShareAcknowledgeAllOrNothing: a partition's acknowledgement batches
// apply together or not at all.
func TestShareAcknowledgeAllOrNothing(t *testing.T) {
	e := openEngine(t, t.TempDir(), nil)
	tp, err := e.CreateTopic(CreateTopicRequest{Name: "q", Partitions: 1, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := tp.Partition(0)
	appendOK(t, p, buildBatch(t, 1, -1, 0, 0, values("v", 10)...))
	if err := e.AlterGroupConfigs("g", map[string]*string{"share.auto.offset.reset": ptr("earliest")}, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Shares().Fetch(time.Now(), "g", "a", p, 1<<20, 0, false); err != nil {
		t.Fatal(err)
	}
	err = e.Shares().Acknowledge(time.Now(), "g", "a", p, []ShareAck{{First: 0, Last: 4, Types: []int8{1}}, {First: 3, Last: 20, Types: []int8{1}}})
	if !errors.Is(err, kerr.InvalidRecordState) {
		t.Fatalf("a good batch and a bad one: %v", err)
	}
	if offs, _ := e.Coordinator().ShareOffsets("g", nil); len(offs) != 1 || offs[0].StartOffset != 0 {
		t.Fatalf("the good batch was applied: %+v", offs)
	}
	if err := e.Shares().Acknowledge(time.Now(), "g", "a", p, []ShareAck{{First: 0, Last: 4, Types: []int8{1}}}); err != nil {
		t.Fatal(err)
	}
	if offs, _ := e.Coordinator().ShareOffsets("g", nil); len(offs) != 1 || offs[0].StartOffset != 5 || offs[0].Acquired != 5 {
		t.Fatalf("offsets %+v, want start 5 and 5 acquired", offs)
	}
}

// TestGroupConfigsApply: a group's consumer.* configs set the session
// timeout and heartbeat interval of its KIP-848 members, are checked,
// described with their source, and kept across a restart.
func TestGroupConfigsApply(t *testing.T) {
	dir := t.TempDir()
	e := openTestEngine(t, dir, nil)
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.AlterGroupConfigs("cg", map[string]*string{"consumer.heartbeat.interval.ms": ptr("1500")}, false); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"consumer.heartbeat.interval.ms": "10", "consumer.session.timeout.ms": "x", "group.bogus": "1"} {
		if err := e.AlterGroupConfigs("cg", map[string]*string{k: ptr(v)}, false); !errors.Is(err, kerr.InvalidConfig) {
			t.Errorf("%s=%s: %v, want INVALID_CONFIG", k, v, err)
		}
	}
	resp, err := e.Coordinator().ConsumerHeartbeat("cg", consumergroup.Request{MemberID: "m", Epoch: 0, RebalanceTimeout: time.Minute, SubscribedTopics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.HeartbeatInterval != 1500*time.Millisecond {
		t.Fatalf("heartbeat interval %v, want the group's 1.5s", resp.HeartbeatInterval)
	}
	e.Close()
	e = openEngine(t, dir, nil)
	found := false
	for _, c := range e.DescribeGroupConfig("cg") {
		if c.Name == "consumer.heartbeat.interval.ms" {
			found = c.Value == "1500" && c.Source == SourceGroup
		}
	}
	if !found {
		t.Fatalf("after a restart the group config is gone: %+v", e.DescribeGroupConfig("cg"))
	}
}

// TestShareStateLeaderFence: on a replicated share coordinator, a read by
// a newer topic-partition leader makes the leader-epoch raise durable
// before it answers (a placeholder when there is no state yet), so the
// old leader's writes are refused, there and after the coordinator
// replays its partition (a move, a restart); a deletion's state epoch is
// durable the same way.
func TestShareStateLeaderFence(t *testing.T) {
	e := openEngine(t, t.TempDir(), func(c *Config) { c.NodeID, c.Replicated = 1, true })
	tp, err := e.CreateTopic(CreateTopicRequest{Name: ShareStateTopic, Partitions: ShareStatePartitions, ReplicationFactor: -1, Internal: true,
		Configs: map[string]string{"cleanup.policy": "compact"}})
	if err != nil {
		t.Fatal(err)
	}
	s := e.ShareStates()
	k := ShareKey{Group: "g", Topic: TopicID{7}, Partition: 0}
	i := SharePartitionFor(k, ShareStatePartitions)
	lead := ReplicaState{Role: RoleLeader, Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, ISR: []int32{1}}
	if err := tp.Partition(i).SetReplicaState(lead); err != nil {
		t.Fatal(err)
	}
	if err := s.LoadPartition(i); err != nil {
		t.Fatal(err)
	}
	// Leader epoch 3 reads a key with no state: the placeholder fences 2.
	if _, ok, err := s.ServeRead(k, 3); err != nil || ok {
		t.Fatalf("read: %v %v", ok, err)
	}
	old := ShareState{State: sharegroup.State{Start: 10}, LeaderEpoch: 2}
	if err := s.ServeWrite(k, old); !errors.Is(err, kerr.FencedLeaderEpoch) {
		t.Fatalf("a write of leader epoch 2 after a read at 3: %v", err)
	}
	if err := s.ServeWrite(k, ShareState{State: sharegroup.State{Start: 10}, LeaderEpoch: 3}); err != nil {
		t.Fatal(err)
	}
	// Epoch 4 reads the state: the raise is written before the answer.
	if st, ok, err := s.ServeRead(k, 4); err != nil || !ok || st.Start != 10 {
		t.Fatalf("read: %+v %v %v", st, ok, err)
	}
	s.UnloadPartition(i)
	if err := s.LoadPartition(i); err != nil { // what a new coordinator replays
		t.Fatal(err)
	}
	if err := s.ServeWrite(k, ShareState{State: sharegroup.State{Start: 11}, LeaderEpoch: 3}); !errors.Is(err, kerr.FencedLeaderEpoch) {
		t.Fatalf("a write of leader epoch 3 after a read at 4 and a replay: %v", err)
	}
	if err := s.ServeDelete(k); err != nil {
		t.Fatal(err)
	}
	s.UnloadPartition(i)
	if err := s.LoadPartition(i); err != nil {
		t.Fatal(err)
	}
	if err := s.ServeWrite(k, ShareState{State: sharegroup.State{Start: 12}, LeaderEpoch: 4}); !errors.Is(err, kerr.FencedStateEpoch) {
		t.Fatalf("a write of the deleted state's epoch after a replay: %v", err)
	}
	if st, ok, _ := s.ServeRead(k, 4); ok || st.StateEpoch != 1 {
		t.Fatalf("after the deletion: %+v %v, want none at state epoch 1", st, ok)
	}
}
