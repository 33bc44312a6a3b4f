package engine

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Offsets committed inside a transaction (TxnOffsetCommit). They are
// written to the group's __consumer_offsets partition as a transactional
// batch of the producer, and stay pending (invisible to OffsetFetch)
// until the transaction coordinator's marker reaches that partition:
// commit applies them, abort drops them. Replay does the same from the
// log, so a restart between the marker and the coordinator's bookkeeping
// loses nothing.

// txnOffsetsKey names what one marker completes: a producer's pending
// offsets in one __consumer_offsets partition.
type txnOffsetsKey struct {
	part int32
	pid  int64
}

// groupOffset is one group's offset of one partition: a commit's, or
// one waiting for its transaction's end.
type groupOffset struct {
	group string
	tp    TopicPartition
	off   CommittedOffset
}

// stageTxnOffset remembers a replayed transactional commit record of
// __consumer_offsets partition part.
func (c *Coordinator) stageTxnOffset(part int32, pid int64, key, value []byte) error {
	var k kmsg.OffsetCommitKey
	if err := k.ReadFrom(key); err != nil {
		return err
	}
	if k.Version > 1 {
		return fmt.Errorf("transactional record with key version %d", k.Version)
	}
	var v kmsg.OffsetCommitValue
	if err := v.ReadFrom(value); err != nil {
		return err
	}
	c.addTxnOffsets(part, pid, []groupOffset{{group: k.Group, tp: TopicPartition{k.Topic, k.Partition},
		off: CommittedOffset{Offset: v.Offset, LeaderEpoch: v.LeaderEpoch, Metadata: v.Metadata, CommitTime: v.CommitTimestamp}}})
	return nil
}

func (c *Coordinator) addTxnOffsets(part int32, pid int64, offs []groupOffset) {
	c.txnMu.Lock()
	defer c.txnMu.Unlock()
	if c.txnOffsets == nil {
		c.txnOffsets = map[txnOffsetsKey][]groupOffset{}
	}
	k := txnOffsetsKey{part, pid}
	c.txnOffsets[k] = append(c.txnOffsets[k], offs...)
}

// completeTxnOffsets applies (commit) or drops (abort) what producer pid
// committed in its transaction to the groups of __consumer_offsets
// partition part, once its marker is in that partition.
func (c *Coordinator) completeTxnOffsets(part int32, pid int64, commit bool) {
	k := txnOffsetsKey{part, pid}
	c.txnMu.Lock()
	offs := c.txnOffsets[k]
	delete(c.txnOffsets, k)
	c.txnMu.Unlock()
	if !commit {
		return
	}
	for _, o := range offs {
		g := c.group(o.group, true)
		g.mu.Lock()
		g.offsets[o.tp] = o.off
		g.unlock()
	}
}

// markUnstable flags the offsets an open transaction of the group has
// committed but not yet made visible.
func (c *Coordinator) markUnstable(group string, out []FetchedOffset) {
	c.txnMu.Lock()
	defer c.txnMu.Unlock()
	if len(c.txnOffsets) == 0 {
		return
	}
	pending := map[TopicPartition]bool{}
	for _, offs := range c.txnOffsets {
		for _, o := range offs {
			if o.group == group {
				pending[o.tp] = true
			}
		}
	}
	for i := range out {
		out[i].Unstable = pending[TopicPartition{out[i].Topic, out[i].Partition}]
	}
}

// PendingTxnOffsets counts the offsets waiting for their transactions
// (tests, the CLI).
func (c *Coordinator) PendingTxnOffsets() int {
	c.txnMu.Lock()
	defer c.txnMu.Unlock()
	n := 0
	for _, offs := range c.txnOffsets {
		n += len(offs)
	}
	return n
}

// TxnCommitOffsets is TxnOffsetCommit: the commits become part of the
// producer's transaction txnID, written durably now and visible to the
// group when the transaction commits. A member and generation (v3+,
// generation ≥ 0) are checked as OffsetCommit checks them. errs has one
// entry per commit; err fails the whole request.
func (c *Coordinator) TxnCommitOffsets(txnID, groupID, memberID string, instanceID *string, generation int32, producerID int64, epoch int16, commits []OffsetCommit) (errs []error, err error) {
	g, err := c.Group(groupID, true)
	if err != nil {
		return nil, err
	}
	if c.loaded == nil {
		unlock, err := c.eng.txn.lockOffsetsCommit(txnID, producerID, epoch, groupID)
		if err != nil {
			return nil, err
		}
		defer unlock()
	} else {
		// Cluster mode: the transaction's coordinator may be another
		// broker. Verify with it, as a partition leader verifies a
		// produce; the marker of a transaction that ends meanwhile
		// drops the guard, and the write below is then refused.
		p := c.partitionFor(groupID)
		if p == nil {
			return nil, fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, OffsetsTopic)
		}
		if err := c.eng.VerifyTxnProduce(p, txnID, producerID, epoch, true); err != nil {
			if errors.Is(err, kerr.NotLeaderForPartition) {
				return nil, fmt.Errorf("%w: %s moved to another broker: %w", kerr.NotCoordinator, p, err)
			}
			return nil, fmt.Errorf("%w (call AddOffsetsToTxn for group %q first)", err, groupID)
		}
	}
	var recs []kv
	var offs []groupOffset
	if generation >= 0 {
		if errs, recs, offs, err = c.checkedCommitRecords(g, memberID, instanceID, generation, commits); err != nil {
			return nil, err
		}
	} else {
		errs, recs, offs = c.commitRecords(groupID, commits)
	}
	if len(recs) == 0 {
		return errs, nil
	}
	// Pending from the moment they are written: the marker that ends
	// the transaction is staged after them and completes after them.
	part := c.partitionFor(groupID).Index
	if err := c.writeThen(groupID, recs, &TxnMarker{ProducerID: producerID, ProducerEpoch: epoch}, func() { c.addTxnOffsets(part, producerID, offs) }); err != nil {
		return nil, err
	}
	return errs, nil
}
