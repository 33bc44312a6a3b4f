package engine

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/wal"
)

// Replication state of a partition on one engine: the leader's high
// watermark over its followers' fetch offsets, acks=all held until it
// passes, ISR changes, and the follower side (replica appends, truncation).

// replicatedTopic opens a replicated engine (node 1) with topic "r" of one
// partition, min.insync.replicas minISR.
func replicatedTopic(t *testing.T, clock *testClock, minISR string) *Partition {
	t.Helper()
	e := openEngine(t, t.TempDir(), func(c *Config) {
		c.NodeID, c.Replicated = 1, true
		if clock != nil {
			c.Now = clock.Now
		}
	})
	tp, err := e.CreateTopic(CreateTopicRequest{Name: "r", Partitions: 1, ReplicationFactor: -1,
		Configs: map[string]string{"min.insync.replicas": minISR}})
	if err != nil {
		t.Fatal(err)
	}
	return tp.Partition(0)
}

// followerTopic is replicatedTopic (min.insync.replicas 1) made a
// follower of broker 2 at leaderEpoch, with its state.
func followerTopic(t *testing.T, leaderEpoch int32) (*Partition, ReplicaState) {
	t.Helper()
	f := replicatedTopic(t, nil, "1")
	st := ReplicaState{Role: RoleFollower, Leader: 2, LeaderEpoch: leaderEpoch, PartitionEpoch: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}}
	if err := f.SetReplicaState(st); err != nil {
		t.Fatal(err)
	}
	return f, st
}

// appendReplicaOK appends the leader's batches to follower f and waits.
func appendReplicaOK(t *testing.T, f *Partition, batches ...[]byte) {
	t.Helper()
	done := make(chan error, 1)
	f.AppendReplica(batches, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func leaderState(epoch, partEpoch int32, isr ...int32) ReplicaState {
	return ReplicaState{Role: RoleLeader, Leader: 1, LeaderEpoch: epoch, PartitionEpoch: partEpoch, Replicas: []int32{1, 2, 3}, ISR: isr}
}

func TestReplicatedPartitionServesOnlyAsLeader(t *testing.T) {
	p := replicatedTopic(t, nil, "1")
	if _, err := p.Log(); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("before its role is known: Log() = %v, want NOT_LEADER_OR_FOLLOWER", err)
	}
	if r := result(t, submit(t, p, 1, idem(t, -1, 0, 0, 1))); !errors.Is(r.Err, kerr.NotLeaderForPartition) {
		t.Fatalf("produce before the role is known: %v, want NOT_LEADER_OR_FOLLOWER", r.Err)
	}
	if err := p.SetReplicaState(leaderState(3, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if p.LeaderEpoch() != 3 {
		t.Fatalf("leader epoch %d, want 3", p.LeaderEpoch())
	}
	off := appendOK(t, p, idem(t, -1, 0, 0, 2))
	if off != 0 || p.HighWatermark() != 2 {
		t.Fatalf("ISR of the leader alone: base %d, HW %d; want 0 and 2", off, p.HighWatermark())
	}
	l, _ := p.Log()
	if e := l.EpochEntries(); len(e) == 0 || e[len(e)-1].Epoch != 3 {
		t.Fatalf("epoch cache %v: want the batch stamped with epoch 3", e)
	}
	st := ReplicaState{Role: RoleFollower, Leader: 2, LeaderEpoch: 4, PartitionEpoch: 2, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}}
	if err := p.SetReplicaState(st); err != nil {
		t.Fatal(err)
	}
	if r := result(t, submit(t, p, 1, idem(t, -1, 0, 0, 1))); !errors.Is(r.Err, kerr.NotLeaderForPartition) {
		t.Fatalf("produce to a follower: %v, want NOT_LEADER_OR_FOLLOWER", r.Err)
	}
}

func TestRestartedLeaderStampsItsEpoch(t *testing.T) {
	dir := t.TempDir()
	open := func() *Partition {
		e := openTestEngine(t, dir, func(c *Config) { c.NodeID, c.Replicated = 1, true })
		t.Cleanup(func() { e.Close() })
		if e.Topic("r") == nil {
			if _, err := e.CreateTopic(CreateTopicRequest{Name: "r", Partitions: 1, ReplicationFactor: -1}); err != nil {
				t.Fatal(err)
			}
		}
		return e.Topic("r").Partition(0)
	}
	p := open()
	if err := p.SetReplicaState(leaderState(3, 1, 1)); err != nil {
		t.Fatal(err)
	}
	appendOK(t, p, idem(t, -1, 0, 0, 2))
	p.Topic().eng.Close()
	// Back at the same leader epoch (the controller had not moved it): the
	// reopened log must stamp epoch 3, not 0, or every append fails; the
	// high watermark comes back from its checkpoint.
	p = open()
	if hw := p.HighWatermark(); hw != 2 {
		t.Fatalf("high watermark %d after a clean restart, want the checkpointed 2", hw)
	}
	if err := p.SetReplicaState(leaderState(3, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if r := result(t, submit(t, p, 1, idem(t, -1, 0, 0, 1))); r.Err != nil || r.BaseOffset != 2 {
		t.Fatalf("append after a restart at the same leader epoch: %+v, want offset 2", r)
	}
}

func TestHighWatermarkFollowsTheISR(t *testing.T) {
	clock := newTestClock(time.Unix(1000, 0))
	p := replicatedTopic(t, clock, "2")
	if err := p.SetReplicaState(leaderState(1, 1, 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	done := submit(t, p, -1, idem(t, 7, 0, 0, 3))
	waitUntil(t, "the append in the log", func() bool { l, _ := p.Log(); return l.EndOffset() == 3 })
	select {
	case r := <-done:
		t.Fatalf("acks=all answered (%+v) before any follower had the batch", r)
	case <-time.After(50 * time.Millisecond):
	}
	acks1 := submit(t, p, 1, idem(t, 7, 0, 3, 1))
	if r := result(t, acks1); r.Err != nil || r.BaseOffset != 3 {
		t.Fatalf("acks=1 on the leader: %+v, want offset 3 at once", r)
	}
	if err := p.FollowerFetched(2, 3); err != nil {
		t.Fatal(err)
	}
	if hw := p.HighWatermark(); hw != 0 {
		t.Fatalf("HW %d after one of two followers fetched: want 0 (broker 3 has not fetched)", hw)
	}
	if err := p.FollowerFetched(3, 2); err != nil {
		t.Fatal(err)
	}
	if hw := p.HighWatermark(); hw != 2 {
		t.Fatalf("HW %d, want min(3, 2) = 2", hw)
	}
	if err := p.FollowerFetched(3, 4); err != nil {
		t.Fatal(err)
	}
	if r := result(t, done); r.Err != nil || r.BaseOffset != 0 || p.HighWatermark() != 3 {
		t.Fatalf("acks=all once both followers passed it: %+v, HW %d; want offset 0, HW 3", r, p.HighWatermark())
	}
	if err := p.FollowerFetched(4, 0); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("fetch by a broker that is no replica: %v", err)
	}
	if err := p.FollowerFetched(2, 99); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("fetch past the log end: %v, want OFFSET_OUT_OF_RANGE", err)
	}

	// The ISR below min.insync.replicas: acks=all refused up front, HW
	// frozen.
	if err := p.SetReplicaState(leaderState(1, 2, 1)); err != nil {
		t.Fatal(err)
	}
	if r := result(t, submit(t, p, -1, idem(t, 7, 0, 4, 1))); !errors.Is(r.Err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all with ISR [1] and min.insync.replicas=2: %v, want NOT_ENOUGH_REPLICAS", r.Err)
	}
	appendOK1 := result(t, submit(t, p, 1, idem(t, 7, 0, 4, 1)))
	if appendOK1.Err != nil || p.HighWatermark() != 3 {
		t.Fatalf("acks=1 with a short ISR: %+v; HW %d, want it frozen at 3 (KIP-966: no commit below min.insync.replicas)", appendOK1, p.HighWatermark())
	}

	// A parked ack times out: NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR
	// shrank, and leadership lost fails the rest.
	if err := p.SetReplicaState(leaderState(1, 3, 1, 2)); err != nil {
		t.Fatal(err)
	}
	slow := submit(t, p, -1, idem(t, 7, 0, 5, 1))
	waitUntil(t, "the parked append", func() bool { l, _ := p.Log(); return l.EndOffset() == 6 })
	if err := p.SetReplicaState(leaderState(1, 4, 1)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(DefaultAckTimeout + time.Second)
	if r := result(t, slow); !errors.Is(r.Err, kerr.NotEnoughReplicasAfterAppend) {
		t.Fatalf("ack past its timeout with a short ISR: %v, want NOT_ENOUGH_REPLICAS_AFTER_APPEND", r.Err)
	}
	if err := p.SetReplicaState(leaderState(1, 5, 1, 2)); err != nil {
		t.Fatal(err)
	}
	lost := submit(t, p, -1, idem(t, 7, 0, 6, 1))
	waitUntil(t, "the next parked append", func() bool { l, _ := p.Log(); return l.EndOffset() == 7 })
	if err := p.SetReplicaState(ReplicaState{Role: RoleFollower, Leader: 2, LeaderEpoch: 2, PartitionEpoch: 6, Replicas: []int32{1, 2, 3}, ISR: []int32{2}}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, lost); !errors.Is(r.Err, kerr.NotLeaderForPartition) {
		t.Fatalf("parked ack when leadership moved: %v, want NOT_LEADER_OR_FOLLOWER", r.Err)
	}
}

func TestLeaderReadyAtItsEpochStart(t *testing.T) {
	p := replicatedTopic(t, nil, "1")
	if err := p.SetReplicaState(leaderState(1, 1, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if r := result(t, submit(t, p, 1, idem(t, -1, 0, 0, 3))); r.Err != nil {
		t.Fatal(r.Err)
	}
	if !p.LeaderReady() {
		t.Fatal("not ready at the start of its first epoch (nothing committed before it)")
	}
	// A new epoch starts at 3, above the high watermark 0: not ready
	// (KIP-207) until the follower has fetched to 3.
	if err := p.SetReplicaState(leaderState(2, 2, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if p.LeaderReady() {
		t.Fatalf("ready with high watermark %d below its epoch start 3", p.HighWatermark())
	}
	if err := p.FollowerFetched(2, 3); err != nil {
		t.Fatal(err)
	}
	if !p.LeaderReady() || p.HighWatermark() != 3 {
		t.Fatalf("after the follower fetched to 3: ready %v, HW %d", p.LeaderReady(), p.HighWatermark())
	}
}

func TestISRChange(t *testing.T) {
	clock := newTestClock(time.Unix(1000, 0))
	p := replicatedTopic(t, clock, "1")
	if err := p.SetReplicaState(leaderState(1, 1, 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	const lag = 10 * time.Second
	if r := result(t, submit(t, p, 1, idem(t, -1, 0, 0, 5))); r.Err != nil {
		t.Fatal(r.Err)
	}
	p.FollowerFetched(2, 5)
	p.FollowerFetched(3, 2)
	if c := p.ISRChange(lag); c != nil {
		t.Fatalf("ISR change %+v before anyone lagged", c)
	}
	clock.Advance(lag + time.Second)
	p.FollowerFetched(2, 5)
	c := p.ISRChange(lag)
	if c == nil || len(c.Shrink) != 1 || c.Shrink[0] != 3 || len(c.ISR) != 2 {
		t.Fatalf("broker 3 behind for longer than %v: change %+v, want it dropped", lag, c)
	}
	if again := p.ISRChange(lag); again != nil {
		t.Fatalf("a second change %+v while one is pending", again)
	}
	// The controller's answer arrives as the new image.
	if err := p.SetReplicaState(leaderState(1, 2, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if hw := p.HighWatermark(); hw != 5 {
		t.Fatalf("HW %d after broker 3 left the ISR, want 5", hw)
	}
	p.FollowerFetched(3, 5)
	c = p.ISRChange(lag)
	if c == nil || len(c.Expand) != 1 || c.Expand[0] != 3 {
		t.Fatalf("broker 3 caught up: change %+v, want it added", c)
	}
	// While the expansion is pending the HW counts broker 3 (maximal ISR).
	appendOK1 := result(t, submit(t, p, 1, idem(t, -1, 0, 0, 1)))
	if appendOK1.Err != nil {
		t.Fatal(appendOK1.Err)
	}
	p.FollowerFetched(2, 6)
	if hw := p.HighWatermark(); hw != 5 {
		t.Fatalf("HW %d with broker 3 joining at 5: want 5 until it has 6", hw)
	}
	p.ISRChangeDone() // refused
	if hw := p.HighWatermark(); hw != 6 {
		t.Fatalf("HW %d after the refused expansion: want 6 (ISR 1, 2)", hw)
	}
	if c := p.ISRChange(lag); c != nil {
		t.Fatalf("change %+v right after a refusal: want a pause of %v", c, isrRetryDelay)
	}

	// An expansion whose answer was lost may have committed: broker 3
	// keeps counting for the HW (it may be in the ISR, and leader next)
	// until the image tells, or the hold passes.
	clock.Advance(isrRetryDelay + time.Second)
	p.FollowerFetched(3, 6)
	if c = p.ISRChange(lag); c == nil || len(c.Expand) != 1 {
		t.Fatalf("broker 3 caught up again: change %+v, want it added", c)
	}
	if r := result(t, submit(t, p, 1, idem(t, -1, 0, 0, 1))); r.Err != nil {
		t.Fatal(r.Err)
	}
	p.FollowerFetched(2, 7)
	p.ISRChangeUncertain(5 * time.Second)
	if hw := p.HighWatermark(); hw != 6 {
		t.Fatalf("HW %d after an unanswered expansion: want 6 until broker 3 has 7", hw)
	}
	p.FollowerFetched(3, 7)
	if hw := p.HighWatermark(); hw != 7 {
		t.Fatalf("HW %d once broker 3 has 7: want 7", hw)
	}
	if err := p.SetReplicaState(leaderState(1, 3, 1, 2, 3)); err != nil { // it had committed
		t.Fatal(err)
	}
	// Lost again, and never committed: the hold ends it.
	if r := result(t, submit(t, p, 1, idem(t, -1, 0, 0, 1))); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := p.SetReplicaState(leaderState(1, 4, 1, 2)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(lag + time.Second)
	p.FollowerFetched(3, 7)
	if c = p.ISRChange(lag); c == nil || len(c.Expand) != 1 {
		t.Fatalf("broker 3 back: change %+v, want it added", c)
	}
	p.ISRChangeUncertain(5 * time.Second)
	p.FollowerFetched(2, 8)
	if hw := p.HighWatermark(); hw != 7 {
		t.Fatalf("HW %d within the hold: want 7 (broker 3 at 7)", hw)
	}
	clock.Advance(6 * time.Second)
	p.FollowerFetched(2, 8)
	if hw := p.HighWatermark(); hw != 8 {
		t.Fatalf("HW %d after the hold: want 8 (ISR 1, 2)", hw)
	}
}

func TestFollowerAppendAndTruncate(t *testing.T) {
	// A leader builds a log; a follower copies its batches, then truncates.
	leader := replicatedTopic(t, nil, "1")
	if err := leader.SetReplicaState(leaderState(2, 1, 1)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		appendOK(t, leader, idem(t, 9, 0, int32(2*i), 2))
	}
	ll, _ := leader.Log()
	var batches [][]byte
	var c wal.Chunk
	if err := ll.Read(&c, 0, 1<<20, ll.EndOffset()); err != nil {
		t.Fatal(err)
	}
	c.Release()
	for off := int64(0); off < ll.EndOffset(); off += 2 {
		b, err := ll.ReadBytes(nil, off, 1, ll.EndOffset())
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
	}

	f, st := followerTopic(t, 2)
	appendReplicaOK(t, f, batches...)
	fl, err := f.ReplicaLog()
	if err != nil || fl.EndOffset() != 6 || fl.LatestEpoch() != 2 {
		t.Fatalf("follower log end %d epoch %d (%v), want 6 at epoch 2", fl.EndOffset(), fl.LatestEpoch(), err)
	}
	f.SetFollowerHighWatermark(100)
	if hw := f.HighWatermark(); hw != 6 {
		t.Fatalf("follower HW %d, want its log end 6", hw)
	}
	// The follower deduplicates as the leader would, once it leads.
	end, err := f.TruncateTo(3)
	if err != nil || end != 2 || f.HighWatermark() != 2 {
		t.Fatalf("truncate to 3: end %d HW %d (%v); want 2 (whole batches), HW 2", end, f.HighWatermark(), err)
	}
	st.Role, st.Leader, st.LeaderEpoch = RoleLeader, 1, 3
	if err := f.SetReplicaState(st); err != nil {
		t.Fatal(err)
	}
	if r := result(t, submit(t, f, 1, idem(t, 9, 0, 0, 2))); r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("a retry of the replicated first batch on the new leader: %+v, want its offset 0", r)
	}
	if r := result(t, submit(t, f, 1, idem(t, 9, 0, 2, 2))); r.Err != nil || r.BaseOffset != 2 {
		t.Fatalf("the batch after the truncation point: %+v, want offset 2", r)
	}
	if _, err := f.TruncateTo(0); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("a leader truncating: %v, want refused", err)
	}
}

// TestLeaderAppendsOnlyWithinItsLease: a leader whose cluster says its
// leadership lease has lapsed (paused, or cut off from the controller)
// refuses appends at once, whatever its replica state says, and takes
// them again once the lease holds.
func TestLeaderAppendsOnlyWithinItsLease(t *testing.T) {
	p := replicatedTopic(t, nil, "1")
	var lease atomic.Bool
	p.topic.eng.SetClusterHooks(ClusterHooks{MayLead: lease.Load})
	if err := p.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if r := result(t, submit(t, p, 1, idem(t, -1, 0, 0, 1))); !errors.Is(r.Err, kerr.NotLeaderForPartition) {
		t.Fatalf("produce to a leader without a lease: %v, want NOT_LEADER_OR_FOLLOWER", r.Err)
	}
	if p.HighWatermark() != 0 {
		t.Fatalf("a refused append moved the high watermark to %d", p.HighWatermark())
	}
	lease.Store(true)
	if off := appendOK(t, p, idem(t, -1, 0, 0, 1)); off != 0 {
		t.Fatalf("produce within the lease: base %d, want 0", off)
	}
}

// A replica removed and added back between two images the leader sees
// (reassigned away, its log deleted, reassigned here again) has a new,
// empty log: its old fetch position must not put it back in the ISR, nor
// count for anything, until it fetches again. And a leader dropped from
// this broker answers the acks=all produces it held.
func TestReassignedFollowerStartsOver(t *testing.T) {
	clock := newTestClock(time.Unix(1000, 0))
	p := replicatedTopic(t, clock, "1")
	if err := p.SetReplicaState(leaderState(1, 1, 1, 2)); err != nil {
		t.Fatal(err)
	}
	const lag = 10 * time.Second
	if r := result(t, submit(t, p, 1, idem(t, -1, 0, 0, 5))); r.Err != nil {
		t.Fatal(r.Err)
	}
	p.FollowerFetched(2, 5)
	p.FollowerFetched(3, 5) // caught up, out of the ISR: would join
	// The image now has 3 being added again (its replica list changed).
	moved := leaderState(1, 3, 1, 2)
	moved.Replicas = []int32{1, 2, 4, 3}
	if err := p.SetReplicaState(moved); err != nil {
		t.Fatal(err)
	}
	if c := p.ISRChange(lag); c != nil {
		t.Fatalf("ISR change %+v from a re-added replica's old fetch position", c)
	}
	p.FollowerFetched(3, 5)
	if c := p.ISRChange(lag); c == nil || len(c.Expand) != 1 || c.Expand[0] != 3 {
		t.Fatalf("after its own fetch: change %+v, want 3 added", c)
	}
	p.ISRChangeDone()

	// Parked acks=all produces are answered when the replica leaves.
	held := submit(t, p, -1, idem(t, -1, 0, 5, 1))
	if err := p.topic.eng.DropPartition("r", 0, false); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-held:
		if !errors.Is(r.Err, kerr.NotLeaderForPartition) {
			t.Fatalf("parked produce answered %v, want NOT_LEADER_OR_FOLLOWER", r.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a produce parked on a dropped leader was never answered")
	}
}
