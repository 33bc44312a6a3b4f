package engine

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/wal/batch"
)

// Transactions on a replicated partition (cluster mode): the leader takes
// a transactional batch only while its producer's verification stands,
// a marker ends that, and a follower tracks open and aborted
// transactions from what it replicates.

func TestClusterTxnGuard(t *testing.T) {
	p := replicatedTopic(t, nil, "1")
	if err := p.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	e := p.topic.eng
	if r := result(t, submit(t, p, -1, txnData(t, 7, 0, 0, "v0", "v1"))); !errors.Is(r.Err, kerr.InvalidTxnState) {
		t.Fatalf("an unverified transactional batch: %v, want INVALID_TXN_STATE", r.Err)
	}
	if err := e.VerifyTxnProduce(p, "tx", 7, 0, false); !errors.Is(err, ErrVerifyOffLoop) {
		t.Fatalf("verification on the event loop: %v, want ErrVerifyOffLoop", err)
	}
	// The coordinator is another broker: the hook answers.
	asked := 0
	verdict := error(nil)
	e.SetClusterHooks(ClusterHooks{VerifyTxn: func(id string, pid int64, epoch int16, tp TopicPartition) error {
		asked++
		if id != "tx" || pid != 7 || tp != (TopicPartition{"r", 0}) {
			t.Errorf("asked about %q producer %d %v", id, pid, tp)
		}
		return verdict
	}})
	verdict = kerr.InvalidTxnState
	if err := e.VerifyTxnProduce(p, "tx", 7, 0, true); !errors.Is(err, kerr.InvalidTxnState) {
		t.Fatalf("the coordinator refuses: %v", err)
	}
	verdict = nil
	if err := e.VerifyTxnProduce(p, "tx", 7, 0, true); err != nil {
		t.Fatal(err)
	}
	if err := e.VerifyTxnProduce(p, "tx", 7, 0, false); err != nil || asked != 2 {
		t.Fatalf("a verified producer on the loop: %v after %d questions, want nil after 2", err, asked)
	}
	if err := e.VerifyTxnProduce(p, "tx", 7, 1, false); !errors.Is(err, ErrVerifyOffLoop) {
		t.Fatalf("another epoch: %v, want a new verification", err)
	}
	if err := e.VerifyTxnProduce(p, "tx", 7, 0, true); err != nil {
		t.Fatal(err)
	}
	first := appendOK(t, p, txnData(t, 7, 0, 0, "v0", "v1"))
	appendOK(t, p, txnData(t, 7, 0, 2, "v0"))
	if lso := p.LastStableOffset(); lso != first {
		t.Fatalf("LSO %d with the transaction open at %d", lso, first)
	}
	// The marker ends the transaction here, and the verification with it:
	// a late batch of the same epoch cannot open a transaction again.
	if errs := e.AppendTxnMarkers(TxnMarker{ProducerID: 7, ProducerEpoch: 0}, []*Partition{p}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if lso, hw := p.LastStableOffset(), p.HighWatermark(); lso != hw {
		t.Fatalf("after the abort LSO %d, HW %d", lso, hw)
	}
	if r := result(t, submit(t, p, -1, txnData(t, 7, 0, 3, "v0"))); !errors.Is(r.Err, kerr.InvalidTxnState) {
		t.Fatalf("a late batch after the marker: %v, want INVALID_TXN_STATE", r.Err)
	}
	// A marker that lands while the coordinator is being asked wins.
	g := p.guards.arm(7, 0, p.LeaderEpoch())
	if errs := e.AppendTxnMarkers(TxnMarker{ProducerID: 7, ProducerEpoch: 0, Commit: true}, []*Partition{p}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if p.guards.confirm(7, g) {
		t.Fatal("a verification confirmed after the marker that ended the transaction")
	}
	// Leadership moves: verifications do not survive it.
	if err := e.VerifyTxnProduce(p, "tx", 7, 0, true); err != nil {
		t.Fatal(err)
	}
	if err := p.SetReplicaState(leaderState(2, 2, 1)); err != nil {
		t.Fatal(err)
	}
	if err := e.VerifyTxnProduce(p, "tx", 7, 0, false); !errors.Is(err, ErrVerifyOffLoop) {
		t.Fatalf("after a new leader epoch: %v, want a new verification", err)
	}
	if r := result(t, submit(t, p, -1, txnData(t, 7, 0, 0, "v"))); !errors.Is(r.Err, kerr.NotLeaderForPartition) {
		t.Fatalf("a batch verified under the previous leader epoch: %v, want NOT_LEADER_OR_FOLLOWER (retried after a metadata refresh)", r.Err)
	}
	// A fenced instance does not displace the live epoch's verification.
	if err := e.VerifyTxnProduce(p, "tx", 7, 1, true); err != nil {
		t.Fatal(err)
	}
	if err := e.VerifyTxnProduce(p, "tx", 7, 0, true); !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("an older epoch after a newer one: %v, want INVALID_PRODUCER_EPOCH", err)
	}
	if err := e.VerifyTxnProduce(p, "tx", 7, 1, false); err != nil {
		t.Fatalf("the live epoch after the zombie's attempt: %v", err)
	}
	// A follower answers NOT_LEADER_OR_FOLLOWER before asking anyone.
	st := ReplicaState{Role: RoleFollower, Leader: 2, LeaderEpoch: 3, PartitionEpoch: 3, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}}
	if err := p.SetReplicaState(st); err != nil {
		t.Fatal(err)
	}
	before := asked
	if err := e.VerifyTxnProduce(p, "tx", 7, 1, true); !errors.Is(err, kerr.NotLeaderForPartition) || asked != before {
		t.Fatalf("verification on a follower: %v after %d questions, want NOT_LEADER_OR_FOLLOWER and none", err, asked-before)
	}
}

func TestFollowerTracksTransactions(t *testing.T) {
	leader := replicatedTopic(t, nil, "1")
	if err := leader.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	e := leader.topic.eng
	e.SetClusterHooks(ClusterHooks{VerifyTxn: func(string, int64, int16, TopicPartition) error { return nil }})
	for _, pid := range []int64{5, 6} {
		if err := e.VerifyTxnProduce(leader, "tx", pid, 0, true); err != nil {
			t.Fatal(err)
		}
	}
	aborted := appendOK(t, leader, txnData(t, 5, 0, 0, "v0", "v1", "v2"))
	appendOK(t, leader, idem(t, 9, 0, 0, 2))
	if errs := e.AppendTxnMarkers(TxnMarker{ProducerID: 5, ProducerEpoch: 0}, []*Partition{leader}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	open := appendOK(t, leader, txnData(t, 6, 0, 0, "v0", "v1"))
	ll, _ := leader.Log()
	var batches [][]byte
	if err := ll.ScanHeaders(0, func(h *batch.Header) error {
		b, err := ll.ReadBytes(nil, h.BaseOffset, h.Size(), h.NextOffset())
		batches = append(batches, b)
		return err
	}); err != nil {
		t.Fatal(err)
	}

	f, st := followerTopic(t, 1)
	appendReplicaOK(t, f, batches...)
	f.SetFollowerHighWatermark(ll.EndOffset())
	if lso := f.LastStableOffset(); lso != open {
		t.Fatalf("follower LSO %d, want %d (producer 6's open transaction)", lso, open)
	}
	ab := f.AbortedTxns(nil, 0, ll.EndOffset())
	if len(ab) != 1 || ab[0].ProducerID != 5 || ab[0].FirstOffset != aborted {
		t.Fatalf("follower's aborted transactions %+v, want producer 5's from %d", ab, aborted)
	}
	// Once it leads, the follower ends the open transaction with the
	// coordinator's marker.
	st.Role, st.Leader, st.LeaderEpoch, st.PartitionEpoch, st.ISR = RoleLeader, 1, 2, 2, []int32{1}
	if err := f.SetReplicaState(st); err != nil {
		t.Fatal(err)
	}
	if errs := f.topic.eng.AppendTxnMarkers(TxnMarker{ProducerID: 6, ProducerEpoch: 0, Commit: true}, []*Partition{f}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if lso, end := f.LastStableOffset(), f.log.EndOffset(); lso != end {
		t.Fatalf("new leader's LSO %d after the commit, want its log end %d", lso, end)
	}
}

// An open transaction whose start retention deleted holds the LSO at the
// log start, not below it.
func TestLastStableOffsetNotBelowLogStart(t *testing.T) {
	p, _ := followerTopic(t, 1)
	if err := p.ResetTo(50); err != nil {
		t.Fatal(err)
	}
	b := idem(t, 9, 0, 0, 10)
	binary.BigEndian.PutUint64(b, 50) // the leader's offsets (the CRC does not cover them)
	appendReplicaOK(t, p, b)
	p.SetFollowerHighWatermark(60)
	p.unstable.Store(10 + 1) // a transaction opened at 10, below the log start 50
	if lso := p.LastStableOffset(); lso != 50 {
		t.Fatalf("LSO %d, want the log start 50", lso)
	}
	p.unstable.Store(55 + 1)
	if lso := p.LastStableOffset(); lso != 55 {
		t.Fatalf("LSO %d, want the open transaction's start 55", lso)
	}
}

// A marker from an older coordinator epoch (a deposed coordinator's late
// marker) is refused once a newer coordinator's marker landed, and a
// verification names the producer id of the transactional id.
func TestTxnMarkerCoordinatorFencing(t *testing.T) {
	e := openEngine(t, t.TempDir(), nil)
	tp, err := e.CreateTopic(CreateTopicRequest{Name: "fence", Partitions: 1, ReplicationFactor: -1})
	if err != nil {
		t.Fatal(err)
	}
	p := tp.Partition(0)
	if errs := e.AppendTxnMarkers(TxnMarker{ProducerID: 4, ProducerEpoch: 0, Commit: true, CoordinatorEpoch: 3}, []*Partition{p}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if errs := e.AppendTxnMarkers(TxnMarker{ProducerID: 4, ProducerEpoch: 0, Commit: true, CoordinatorEpoch: 2}, []*Partition{p}); !errors.Is(errs[0], kerr.TransactionCoordinatorFenced) {
		t.Fatalf("a marker of coordinator epoch 2 after 3: %v, want TRANSACTION_COORDINATOR_FENCED", errs[0])
	}
	if errs := e.AppendTxnMarkers(TxnMarker{ProducerID: 4, ProducerEpoch: 0, CoordinatorEpoch: 3}, []*Partition{p}); errs[0] != nil {
		t.Fatalf("the same coordinator's next marker: %v", errs[0])
	}
	tx := e.Transactions()
	pid, epoch, err := tx.InitProducerID("mapped", time.Minute, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.AddPartitions("mapped", pid, epoch, []TopicPartition{{"fence", 0}}); err != nil {
		t.Fatal(err)
	}
	errs, err := tx.VerifyPartitions("mapped", pid+1, epoch, []TopicPartition{{"fence", 0}})
	if err != nil || !errors.Is(errs[0], kerr.InvalidProducerIDMapping) {
		t.Fatalf("verify with another producer id: %v %v, want INVALID_PRODUCER_ID_MAPPING", errs, err)
	}
}
