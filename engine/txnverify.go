package engine

import (
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Produce verification in cluster mode (KIP-890 part 1). A partition's
// leader is usually not its producers' transaction coordinator, so before
// it takes the first transactional batch of a producer's transaction it
// asks the coordinator (AddPartitionsToTxn v4, verify only) whether the
// partition is in that producer's open transaction. The answer is kept as
// a guard on the partition, which the transaction's marker removes:
//
//   - a guard is armed before the question is sent and confirmed only if
//     it is still the partition's guard when the answer comes, so a marker
//     that lands in between wins;
//   - the shard checks the guard again when it stages the batch (the
//     marker is staged on the same goroutine), so a late batch of a
//     transaction that ended is INVALID_TXN_STATE and never opens a
//     transaction that nobody will end.
//
// A single broker checks its own coordinator's published view instead
// (TxnCoordinator.CheckProduce) and has no guards.

// ErrVerifyOffLoop is VerifyTxnProduce's answer when the producer's
// transaction must be verified with another broker and the caller may
// not wait (a gnet event loop): call it again off the loop.
var ErrVerifyOffLoop = errors.New("engine: the transaction must be verified off the event loop")

// txnGuard is one producer's verification at a partition, valid for
// the leader epoch it was made in.
type txnGuard struct {
	epoch       int16
	leaderEpoch int32
	verified    bool
}

// txnGuards are a partition's verifications (cluster mode), by producer.
type txnGuards struct {
	mu sync.Mutex
	m  map[int64]*txnGuard
}

// check reports whether pid at epoch is verified here in leaderEpoch:
// nil, NOT_LEADER_OR_FOLLOWER for a verification of an earlier leader
// epoch (the client refreshes its metadata and sends again, and is
// verified anew), else INVALID_TXN_STATE.
func (g *txnGuards) check(pid int64, epoch int16, leaderEpoch int32) error {
	g.mu.Lock()
	x := g.m[pid]
	g.mu.Unlock()
	switch {
	case x != nil && x.verified && x.epoch == epoch && x.leaderEpoch == leaderEpoch:
		return nil
	case x != nil && x.verified && x.epoch == epoch:
		return fmt.Errorf("%w: producer %d was verified under leader epoch %d, the partition is at %d", kerr.NotLeaderForPartition, pid, x.leaderEpoch, leaderEpoch)
	}
	return fmt.Errorf("%w: producer %d epoch %d has no verified open transaction here (verify with its coordinator first)", kerr.InvalidTxnState, pid, epoch)
}

// arm starts a verification of pid at epoch in leaderEpoch, replacing an
// earlier one, or returns nil when a newer producer epoch holds the guard
// (a fenced instance must not displace the live one's verification).
func (g *txnGuards) arm(pid int64, epoch int16, leaderEpoch int32) *txnGuard {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[int64]*txnGuard{}
	}
	if x := g.m[pid]; x != nil && x.epoch > epoch {
		return nil
	}
	x := &txnGuard{epoch: epoch, leaderEpoch: leaderEpoch}
	g.m[pid] = x
	return x
}

// confirm marks x verified if it is still pid's guard.
func (g *txnGuards) confirm(pid int64, x *txnGuard) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m[pid] != x {
		return false
	}
	x.verified = true
	return true
}

// drop forgets pid's guard (its transaction ended here).
func (g *txnGuards) drop(pid int64) {
	g.mu.Lock()
	delete(g.m, pid)
	g.mu.Unlock()
}

// dropIf forgets pid's guard if it is still x (a refused verification).
func (g *txnGuards) dropIf(pid int64, x *txnGuard) {
	g.mu.Lock()
	if g.m[pid] == x {
		delete(g.m, pid)
	}
	g.mu.Unlock()
}

// reset forgets every guard (leadership left).
func (g *txnGuards) reset() {
	g.mu.Lock()
	g.m = nil
	g.mu.Unlock()
}

// VerifyTxnProduce decides whether a transactional batch of producer
// pid/epoch, sent with transactional id txnID, may be appended to p: the
// partition must be in that producer's open transaction. On a single
// broker the coordinator's view answers at once. In cluster mode a
// verified guard answers at once; otherwise, when mayWait is false, the
// answer is ErrVerifyOffLoop, and when it is true the coordinator (here or
// on another broker) is asked and its answer kept.
func (e *Engine) VerifyTxnProduce(p *Partition, txnID string, pid int64, epoch int16, mayWait bool) error {
	if p.rep == nil {
		return e.txn.CheckProduce(pid, epoch, p.topic.Name, p.Index)
	}
	if p.Role() != RoleLeader {
		// Before asking anyone: a client with stale metadata must
		// learn at once that this broker is not the leader.
		return fmt.Errorf("%w: %s", kerr.NotLeaderForPartition, p)
	}
	if p.guards.check(pid, epoch, p.LeaderEpoch()) == nil {
		return nil
	}
	if !mayWait {
		return ErrVerifyOffLoop
	}
	return e.verifyTxnPartition(p, txnID, pid, epoch)
}

// verifyTxnPartition asks txnID's coordinator whether p is in the open
// transaction of pid/epoch and records the answer in p's guards (cluster
// mode; it may wait for another broker).
func (e *Engine) verifyTxnPartition(p *Partition, txnID string, pid int64, epoch int16) error {
	leaderEpoch := p.LeaderEpoch()
	g := p.guards.arm(pid, epoch, leaderEpoch)
	if g == nil {
		return fmt.Errorf("%w: producer %d epoch %d is fenced by a newer epoch at %s", kerr.InvalidProducerEpoch, pid, epoch, p)
	}
	tp := TopicPartition{p.topic.Name, p.Index}
	var err error
	if e.txn.checkCoordinator(txnID) == nil {
		var errs []error
		errs, err = e.txn.VerifyPartitions(txnID, pid, epoch, []TopicPartition{tp})
		if err == nil {
			err = errs[0]
		}
	} else if h := e.clusterHooks(); h != nil && h.VerifyTxn != nil {
		err = h.VerifyTxn(txnID, pid, epoch, tp)
	} else {
		err = fmt.Errorf("%w: no transaction coordinator can be asked", kerr.CoordinatorNotAvailable)
	}
	if err != nil {
		p.guards.dropIf(pid, g)
		return err
	}
	if !p.guards.confirm(pid, g) {
		if p.Role() != RoleLeader || p.LeaderEpoch() != leaderEpoch {
			return fmt.Errorf("%w: %s changed leadership while the transaction was verified", kerr.NotLeaderForPartition, p)
		}
		return fmt.Errorf("%w: the transaction of producer %d ended at %s while it was verified", kerr.InvalidTxnState, pid, p)
	}
	return nil
}

// checkTxnGuard is the shard's last check of a transactional batch in
// cluster mode (stage): its producer's guard must still be verified, in
// this leader epoch.
func (p *Partition) checkTxnGuard(pid int64, epoch int16) error {
	if err := p.guards.check(pid, epoch, p.LeaderEpoch()); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}
