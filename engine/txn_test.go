package engine

import (
	"testing"
	"time"

	"github.com/ringlog/ringlog/wal/batch"
)

func txnData(t *testing.T, pid int64, epoch int16, seq int32, values ...string) []byte {
	t.Helper()
	b := batch.NewBuilder()
	b.ProducerID, b.ProducerEpoch, b.BaseSequence, b.Transactional = pid, epoch, seq, true
	for _, v := range values {
		b.Add(time.Now().UnixMilli(), nil, []byte(v), nil)
	}
	data, err := b.Build(nil, batch.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// controlTypes returns the control batches of p's log, by offset.
func controlTypes(t *testing.T, p *Partition) map[int64]batch.ControlType {
	t.Helper()
	l, err := p.Log()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]batch.ControlType{}
	err = replayBatches(p, l, func(h *batch.Header, b []byte) error {
		if h.Control() {
			typ, err := batch.ControlRecordType(b, h)
			if err != nil {
				return err
			}
			out[h.BaseOffset] = typ
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTxnPreparedFinishedAfterCrash: a coordinator killed after its
// PrepareCommit record (the decision) but before the markers finishes the
// commit when it starts again: the marker is written, the LSO moves past
// the data, the id is CompleteCommit. An open transaction across the same
// crash keeps the LSO at its first offset until it is aborted.
func TestTxnPreparedFinishedAfterCrash(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, nil)
	tp, err := e.CreateTopic(CreateTopicRequest{Name: "t", Partitions: 2, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	tx := e.Transactions()
	pid, epoch, err := tx.InitProducerID("decided", time.Minute, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if errs, err := tx.AddPartitions("decided", pid, epoch, []TopicPartition{{"t", 0}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	p0, p1 := tp.Partition(0), tp.Partition(1)
	appendOK(t, p0, txnData(t, pid, epoch, 0, "d1", "d2"))
	// The open one, on partition 1.
	pid2, epoch2, err := tx.InitProducerID("open", time.Minute, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.AddPartitions("open", pid2, epoch2, []TopicPartition{{"t", 1}}); err != nil {
		t.Fatal(err)
	}
	appendOK(t, p1, txnData(t, pid2, epoch2, 0, "o1"))
	// Write the decision only, as a coordinator dying right after it.
	m := tx.lookup("decided")
	m.mu.Lock()
	m.state = TxnPrepareCommit
	if err := tx.persist(m); err != nil {
		t.Fatal(err)
	}
	m.mu.Unlock()
	if lso := p0.LastStableOffset(); lso != 0 {
		t.Fatalf("LSO %d before the markers", lso)
	}

	e2 := openEngine(t, crashCopy(t, dir), nil)
	q0, q1 := e2.Topic("t").Partition(0), e2.Topic("t").Partition(1)
	if got := controlTypes(t, q0); len(got) != 1 || got[2] != batch.ControlCommit {
		t.Fatalf("markers after the restart: %v, want a commit at 2", got)
	}
	if lso, hw := q0.LastStableOffset(), q0.HighWatermark(); lso != 3 || hw != 3 {
		t.Fatalf("partition 0: LSO %d HW %d, want 3 and 3", lso, hw)
	}
	if in := e2.Transactions().Describe([]string{"decided", "open"}); in[0].State != TxnCompleteCommit || in[1].State != TxnOngoing {
		t.Fatalf("states after the restart: %+v", in)
	}
	// The open transaction still holds partition 1 back, also after an
	// unclean start (no producer-state snapshot: rebuilt from the log).
	if lso, hw := q1.LastStableOffset(), q1.HighWatermark(); lso != 0 || hw != 1 {
		t.Fatalf("partition 1: LSO %d HW %d, want 0 and 1", lso, hw)
	}
	// A new instance of "open" fences it and aborts its transaction.
	if _, ep, err := e2.Transactions().InitProducerID("open", time.Minute, -1, -1); err != nil || ep != epoch2+2 {
		t.Fatalf("InitProducerId of the open id: epoch %d, %v", ep, err)
	}
	if lso := q1.LastStableOffset(); lso != 2 {
		t.Fatalf("partition 1 LSO %d after the fencing abort, want 2", lso)
	}
	if ab := q1.AbortedTxns(nil, 0, 10); len(ab) != 1 || ab[0].ProducerID != pid2 || ab[0].FirstOffset != 0 || ab[0].LastOffset != 1 {
		t.Fatalf("aborted index %+v", ab)
	}
	// Markers fence the old epoch at the partition too.
	res := <-submit(t, q1, -1, txnData(t, pid2, epoch2, 1, "late"))
	if res.Err == nil {
		t.Fatal("a batch of the fenced epoch was appended")
	}
}
