package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/wal"
)

// Replication state of a partition in cluster mode (../shared/CLUSTER.md
// b-c). The cluster's publisher tells each hosted partition its role
// (SetReplicaState) from the metadata image; the engine then keeps:
//
//   - on the leader: each follower's fetch offset (durable on the
//     follower: it fetches again only once what it appended is synced),
//     the high watermark, the acks=all produces waiting for it, and what
//     ISR change it would ask the controller for (ISRChange);
//   - on a follower: the high watermark the leader last reported, and the
//     log, written only through replica appends (AppendReplica), cut by
//     TruncateTo and ResetTo.
//
// The high watermark is the smallest log end over the ISR members (the
// leader's own end is durable: in cluster mode every append is synced),
// computed over the maximal ISR (the image's plus a pending expansion),
// and it moves only while the image's ISR has min.insync.replicas
// members. It never moves backwards on a leader.
//
// In single-node mode a partition (__consumer_offsets included) has no
// replication state and behaves as before: it leads at epoch 0 and its
// high watermark is its log end. In cluster mode every partition
// replicates, the cluster's __consumer_offsets too.

// Role is this broker's part in a partition.
type Role int8

// The roles.
const (
	// RoleNone: not a replica, or its role is not known yet (cluster mode
	// before the first image), or the partition has no leader. Clients
	// get NOT_LEADER_OR_FOLLOWER.
	RoleNone Role = iota
	// RoleLeader serves produces and fetches.
	RoleLeader
	// RoleFollower copies the leader's log.
	RoleFollower
)

func (r Role) String() string {
	switch r {
	case RoleLeader:
		return "leader"
	case RoleFollower:
		return "follower"
	}
	return "none"
}

// ReplicaState is a partition's assignment as the cluster metadata has it,
// seen from this broker.
type ReplicaState struct {
	Role           Role
	Leader         int32
	LeaderEpoch    int32
	PartitionEpoch int32
	Replicas       []int32
	ISR            []int32
}

// DefaultAckTimeout bounds an acks=all produce whose request gave no
// timeout.
const DefaultAckTimeout = 30 * time.Second

// replication is one partition's replication state (cluster mode).
type replication struct {
	mu sync.Mutex
	st ReplicaState
	// epochStart is the log end when this broker became leader at
	// st.LeaderEpoch (a follower may join the ISR only past it).
	epochStart int64
	followers  map[int32]*followerState
	// pendingISR is the maximal ISR (the image's ∪ the requested one)
	// while an ISR change is on its way to the controller; nil when none.
	pendingISR []int32
	// uncertainISR is the maximal ISR of a change whose fate the leader
	// did not learn (the call to the controller failed in transit: it
	// may have committed), kept in the high watermark's reckoning until
	// the image shows the partition changed or uncertainUntil: else a
	// member the controller added could be left behind the high
	// watermark, and lose records if it became leader.
	uncertainISR   []int32
	uncertainUntil time.Time
	// isrRetryAt delays the next ISR change after a refused one.
	isrRetryAt time.Time
	acks       []pendingAck // parked acks=all produces, in append order
	// resigned is set once this broker gave up leading the partition,
	// resignedEpoch the highest epoch it gave up: it never leads again at
	// it or below (DESIGN invariant 7), whatever a stale image says: a
	// broker that stepped down while cut off leads again only at an epoch
	// the controller assigned since. refusedEpoch is the last such
	// refusal logged, plus one (0: none).
	resigned      bool
	resignedEpoch int32
	refusedEpoch  int32
}

// followerState is what a leader knows of one follower.
type followerState struct {
	fetchOffset  int64 // -1 until it fetched from this leader
	caughtUp     time.Time
	lastFetch    time.Time
	lastFetchLEO int64
}

// pendingAck is an acks=all produce waiting for the high watermark.
type pendingAck struct {
	req      *AppendRequest
	res      AppendResult
	last     int64
	deadline time.Time
}

// Replicated reports whether the partition replicates (cluster mode).
func (p *Partition) Replicated() bool { return p.rep != nil }

// Role is this broker's role for the partition (RoleLeader for every
// partition of a single node).
func (p *Partition) Role() Role {
	if p.rep == nil {
		return RoleLeader
	}
	return Role(p.role.Load())
}

// ReplicaState is the partition's replication state as last set.
func (p *Partition) ReplicaState() ReplicaState {
	if p.rep == nil {
		return ReplicaState{Role: RoleLeader}
	}
	p.rep.mu.Lock()
	defer p.rep.mu.Unlock()
	st := p.rep.st
	st.ISR = slices.Clone(st.ISR)
	st.Replicas = slices.Clone(st.Replicas)
	return st
}

// ReplicaLog is the partition's log for replication (the follower's
// fetcher, diagnostics): whatever its role, unless it is not hosted here,
// removed or offline.
func (p *Partition) ReplicaLog() (*wal.Log, error) {
	if p.notHosted {
		return nil, fmt.Errorf("%w: %s is not hosted on this broker", kerr.NotLeaderForPartition, p)
	}
	if p.removed.Load() {
		return nil, fmt.Errorf("%w: %s was deleted", kerr.UnknownTopicOrPartition, p)
	}
	if err := p.Offline(); err != nil {
		return nil, fmt.Errorf("%w: %s is offline: %w", kerr.KafkaStorageError, p, err)
	}
	if p.log == nil {
		return nil, fmt.Errorf("%w: %s has no log", kerr.KafkaStorageError, p)
	}
	return p.log, nil
}

// CheckLeaderEpoch checks the leader epoch a client believes current
// (KIP-320; -1: none given): a newer one is UNKNOWN_LEADER_EPOCH (this
// broker has not learned it yet), an older one FENCED_LEADER_EPOCH (the
// client's metadata is stale).
func (p *Partition) CheckLeaderEpoch(current int32) error {
	switch ours := p.LeaderEpoch(); {
	case current > ours:
		return fmt.Errorf("%w: %s is at leader epoch %d, not %d", kerr.UnknownLeaderEpoch, p, ours, current)
	case current >= 0 && current < ours:
		return fmt.Errorf("%w: %s is at leader epoch %d, not %d", kerr.FencedLeaderEpoch, p, ours, current)
	}
	return nil
}

// SetReplicaState applies the partition's assignment from the cluster
// metadata, on its shard: becoming leader at a new epoch stamps the epoch
// into the log (StartLeaderEpoch) and starts tracking the followers;
// leaving leadership fails the produces waiting for acks with
// NOT_LEADER_OR_FOLLOWER. A state equal to the current one changes
// nothing.
func (p *Partition) SetReplicaState(st ReplicaState) error {
	if p.rep == nil {
		return errors.New("engine: " + p.String() + " does not replicate")
	}
	return p.shard.Call(func() error { return p.setReplicaState(st) })
}

func (p *Partition) setReplicaState(st ReplicaState) error {
	r := p.rep
	self := p.topic.eng.cfg.NodeID
	now := p.topic.eng.now()
	r.mu.Lock()
	old := r.st
	// Leadership given up: the metadata names another leader, or a
	// newer epoch. (A leader that only stops serving while the image
	// still names it at the same epoch is paused, not resigned: a broker
	// stepped down for lack of heartbeats resumes at that epoch only once
	// its image has caught up with the controller's and still says so,
	// when no other broker can have led since.)
	if old.Role == RoleLeader && (st.Leader != self || st.LeaderEpoch != old.LeaderEpoch) {
		r.resigned, r.resignedEpoch = true, max(r.resignedEpoch, old.LeaderEpoch)
	}
	if st.Role == RoleLeader && r.resigned && st.LeaderEpoch <= r.resignedEpoch {
		// The metadata this broker has still names it leader at an
		// epoch it gave up (it stepped down while cut off, and the
		// controller's new assignment has not reached it): it serves
		// as nothing until a newer epoch comes.
		if r.refusedEpoch != st.LeaderEpoch+1 {
			r.refusedEpoch = st.LeaderEpoch + 1
			p.topic.eng.logger.Warn("not leading partition at an epoch this broker gave up; waiting for a newer one",
				"partition", p.String(), "leader_epoch", st.LeaderEpoch, "resigned_epoch", r.resignedEpoch)
		}
		st.Role = RoleNone
	}
	if st.Role == RoleLeader && (old.Role != RoleLeader || old.LeaderEpoch != st.LeaderEpoch) {
		if p.log == nil {
			r.mu.Unlock()
			return fmt.Errorf("engine: %s cannot lead: no log", p)
		}
		// Always: the same epoch again (a leader restarted before the
		// controller moved its leadership) only sets the stamp, which a
		// reopened log has at 0.
		if err := p.log.StartLeaderEpoch(st.LeaderEpoch); err != nil {
			r.mu.Unlock()
			return fmt.Errorf("engine: %s: become leader at epoch %d: %w", p, st.LeaderEpoch, err)
		}
		r.epochStart = p.log.EndOffset()
		r.followers = map[int32]*followerState{}
		for _, id := range st.Replicas {
			if id != self {
				r.followers[id] = &followerState{fetchOffset: -1, caughtUp: now, lastFetch: now}
			}
		}
		r.pendingISR = nil
		if hw := p.hw.Load(); hw < p.log.StartOffset() {
			p.hw.Store(p.log.StartOffset())
		} else if hw > p.log.EndOffset() {
			p.hw.Store(p.log.EndOffset())
		}
		p.topic.eng.logger.Info("leading partition", "partition", p.String(), "leader_epoch", st.LeaderEpoch,
			"log_end", p.log.EndOffset(), "high_watermark", p.hw.Load(), "isr", st.ISR)
	}
	if st.Role == RoleLeader {
		// A reassignment changes the replicas under a leader: new ones
		// are tracked from their first fetch, removed ones forgotten.
		// When the replica list changed, every follower out of the ISR
		// starts over too: it may have been removed and added back
		// between two images this leader saw, with a new, empty log
		// that its old fetch position would wrongly vouch for.
		renewed := !slices.Equal(st.Replicas, old.Replicas)
		for _, id := range st.Replicas {
			if id != self && (r.followers[id] == nil || (renewed && !slices.Contains(st.ISR, id))) {
				r.followers[id] = &followerState{fetchOffset: -1, caughtUp: now, lastFetch: now}
			}
		}
		for id := range r.followers {
			if !slices.Contains(st.Replicas, id) {
				delete(r.followers, id)
			}
		}
	}
	var failed []pendingAck
	if st.Role != RoleLeader {
		failed = r.acks
		r.acks = nil
		r.followers = nil
		r.pendingISR = nil
		p.guards.reset()
		switch {
		case old.Role != RoleLeader:
		case st.Leader == self && st.LeaderEpoch == old.LeaderEpoch:
			p.topic.eng.logger.Info("pausing leadership of partition: this broker stepped down, the metadata still names it",
				"partition", p.String(), "leader_epoch", st.LeaderEpoch)
		default:
			p.topic.eng.logger.Info("no longer leading partition", "partition", p.String(), "leader", st.Leader, "leader_epoch", st.LeaderEpoch)
		}
	} else if r.pendingISR != nil && (st.PartitionEpoch != old.PartitionEpoch) {
		r.pendingISR = nil // the controller decided: the image has the ISR now
	}
	if st.Role != RoleLeader || st.PartitionEpoch != old.PartitionEpoch {
		r.uncertainISR = nil
	}
	r.st = st
	r.st.Replicas = slices.Clone(st.Replicas)
	r.st.ISR = slices.Clone(st.ISR)
	p.leaderEpoch.Store(st.LeaderEpoch)
	p.isrSize.Store(int32(len(st.ISR)))
	p.role.Store(int32(st.Role))
	done := p.advanceHWLocked()
	r.mu.Unlock()
	for _, a := range failed {
		a.res.Err = fmt.Errorf("%w: %s: this broker is no longer its leader", kerr.NotLeaderForPartition, p)
		a.req.Done(a.res)
	}
	p.completeAcks(done)
	return nil
}

// advanceHWLocked moves a leader's high watermark to the smallest log end
// over the maximal ISR, if the ISR has min.insync.replicas members, and
// returns the acks it satisfied (r.mu held).
func (p *Partition) advanceHWLocked() []pendingAck {
	r := p.rep
	if r.st.Role != RoleLeader || p.log == nil {
		return nil
	}
	if len(r.st.ISR) < p.topic.Config().MinInsyncReplicas() {
		return nil
	}
	self := p.topic.eng.cfg.NodeID
	hw := p.log.EndOffset()
	members := r.st.ISR
	if r.pendingISR != nil {
		members = r.pendingISR
	}
	if r.uncertainISR != nil {
		if p.topic.eng.now().Before(r.uncertainUntil) {
			members = unionISR(members, r.uncertainISR)
		} else {
			r.uncertainISR = nil
		}
	}
	for _, id := range members {
		if id == self {
			continue
		}
		f := r.followers[id]
		if f == nil || f.fetchOffset < 0 {
			return nil
		}
		hw = min(hw, f.fetchOffset)
	}
	if hw <= p.hw.Load() {
		return nil
	}
	p.hw.Store(hw)
	// Mostly in offset order, but a retried duplicate parks behind later
	// batches: take every ack the high watermark passed.
	done := []pendingAck{} // non-nil: the HW moved, wake the waiters
	kept := r.acks[:0]
	for _, a := range r.acks {
		if a.last < hw {
			done = append(done, a)
		} else {
			kept = append(kept, a)
		}
	}
	clear(r.acks[len(kept):])
	r.acks = kept
	return done
}

// completeAcks answers the acks the high watermark satisfied and wakes
// the fetches waiting for it. done is nil when it did not move.
func (p *Partition) completeAcks(done []pendingAck) {
	if done == nil {
		return
	}
	for _, a := range done {
		a.req.Done(a.res)
	}
	p.notify()
}

// parkAck holds an acks=all produce of a replicated partition until the
// high watermark passes last, its last offset (shard goroutine). The
// list is in append order: offset order, but for retried duplicates.
func (p *Partition) parkAck(req *AppendRequest, res AppendResult, last int64) {
	r := p.rep
	r.mu.Lock()
	if r.st.Role != RoleLeader {
		r.mu.Unlock()
		res.Err = fmt.Errorf("%w: %s: this broker is no longer its leader", kerr.NotLeaderForPartition, p)
		req.Done(res)
		return
	}
	if p.hw.Load() > last {
		r.mu.Unlock()
		req.Done(res)
		return
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = DefaultAckTimeout
	}
	r.acks = append(r.acks, pendingAck{req: req, res: res, last: last, deadline: p.topic.eng.now().Add(timeout)})
	r.mu.Unlock()
}

// expireAcks answers the acks=all produces that waited past their
// timeout: NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is below
// min.insync.replicas, REQUEST_TIMED_OUT otherwise (shard goroutine).
func (p *Partition) expireAcks(now time.Time) {
	r := p.rep
	r.mu.Lock()
	if len(r.acks) == 0 {
		r.mu.Unlock()
		return
	}
	var expired []pendingAck
	kept := r.acks[:0]
	for _, a := range r.acks {
		if now.After(a.deadline) {
			expired = append(expired, a)
		} else {
			kept = append(kept, a)
		}
	}
	clear(r.acks[len(kept):])
	r.acks = kept
	short := len(r.st.ISR) < p.topic.Config().MinInsyncReplicas()
	isr := slices.Clone(r.st.ISR)
	r.mu.Unlock()
	for _, a := range expired {
		if short {
			a.res.Err = fmt.Errorf("%w: %s: the ISR %v shrank below min.insync.replicas=%d after the append", kerr.NotEnoughReplicasAfterAppend, p, isr, p.topic.Config().MinInsyncReplicas())
		} else {
			a.res.Err = fmt.Errorf("%w: %s: the in-sync replicas %v did not all get the batch in time", kerr.RequestTimedOut, p, isr)
		}
		a.req.Done(a.res)
	}
}

// checkISRForAcks refuses an acks=all produce up front when the ISR is
// below min.insync.replicas (shard goroutine).
func (p *Partition) checkISRForAcks() error {
	min := p.topic.Config().MinInsyncReplicas()
	if p.rep == nil {
		if min > 1 {
			return fmt.Errorf("%w: min.insync.replicas=%d but this single broker is the only replica", kerr.NotEnoughReplicas, min)
		}
		return nil
	}
	if n := int(p.isrSize.Load()); n < min {
		return fmt.Errorf("%w: %s has %d in-sync replicas, min.insync.replicas is %d", kerr.NotEnoughReplicas, p, n, min)
	}
	return nil
}

// FollowerFetched records that follower id fetched from fetchOffset (its
// durable log end) and moves the high watermark (leader only). It fails
// for a broker that is not a replica, or when this broker does not lead.
func (p *Partition) FollowerFetched(id int32, fetchOffset int64) error {
	r := p.rep
	if r == nil {
		return fmt.Errorf("%w: %s does not replicate", kerr.NotLeaderForPartition, p)
	}
	now := p.topic.eng.now()
	r.mu.Lock()
	if r.st.Role != RoleLeader {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s: this broker is not its leader", kerr.NotLeaderForPartition, p)
	}
	f := r.followers[id]
	if f == nil {
		r.mu.Unlock()
		return fmt.Errorf("%w: broker %d is not a replica of %s", kerr.NotLeaderForPartition, id, p)
	}
	leo := p.log.EndOffset()
	if fetchOffset > leo || fetchOffset < p.log.StartOffset() {
		r.mu.Unlock()
		return fmt.Errorf("%w: broker %d fetched %s from %d, outside [%d, %d]", kerr.OffsetOutOfRange, id, p, fetchOffset, p.log.StartOffset(), leo)
	}
	switch {
	case fetchOffset >= leo:
		f.caughtUp = now
	case fetchOffset >= f.lastFetchLEO && f.fetchOffset >= 0:
		f.caughtUp = f.lastFetch
	}
	f.fetchOffset = fetchOffset
	f.lastFetch, f.lastFetchLEO = now, leo
	done := p.advanceHWLocked()
	r.mu.Unlock()
	p.completeAcks(done)
	return nil
}

// ISRChangeRequest is an ISR change a leader asks the controller for.
type ISRChangeRequest struct {
	LeaderEpoch    int32
	PartitionEpoch int32
	ISR            []int32
	// Shrink lists the members dropped for lagging, Expand those added.
	Shrink, Expand []int32
}

// ISRChange returns the ISR change this leader should ask for now, or
// nil: members not caught up for lagMax leave, followers caught up to the
// high watermark and past the start of this leader's epoch join (only
// fully caught up ones while the ISR is below min.insync.replicas). While
// a change is pending (until ISRChangeDone or the image answers) it
// returns nil, and the high watermark counts the maximal ISR.
func (p *Partition) ISRChange(lagMax time.Duration) *ISRChangeRequest {
	r := p.rep
	if r == nil {
		return nil
	}
	now := p.topic.eng.now()
	self := p.topic.eng.cfg.NodeID
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.Role != RoleLeader || r.pendingISR != nil || p.log == nil || now.Before(r.isrRetryAt) {
		return nil
	}
	leo, hw := p.log.EndOffset(), p.hw.Load()
	short := len(r.st.ISR) < p.topic.Config().MinInsyncReplicas()
	var req ISRChangeRequest
	for _, id := range r.st.ISR {
		f := r.followers[id]
		if id != self && f != nil && now.Sub(f.caughtUp) > lagMax && f.fetchOffset < leo {
			req.Shrink = append(req.Shrink, id)
			continue
		}
		req.ISR = append(req.ISR, id)
	}
	for _, id := range r.st.Replicas {
		f := r.followers[id]
		// Only a follower fetching now joins (one that caught up and then
		// died must not be proposed until it is fenced).
		if id == self || f == nil || slices.Contains(r.st.ISR, id) || f.fetchOffset < 0 || now.Sub(f.lastFetch) > lagMax/2 {
			continue
		}
		if f.fetchOffset >= hw && f.fetchOffset >= r.epochStart && (!short || f.fetchOffset >= leo) {
			req.Expand = append(req.Expand, id)
			req.ISR = append(req.ISR, id)
		}
	}
	if len(req.Shrink) == 0 && len(req.Expand) == 0 {
		return nil
	}
	if !slices.Contains(req.ISR, self) {
		req.ISR = append([]int32{self}, req.ISR...)
	}
	req.LeaderEpoch, req.PartitionEpoch = r.st.LeaderEpoch, r.st.PartitionEpoch
	maximal := append(slices.Clone(r.st.ISR), req.Expand...)
	r.pendingISR = maximal
	return &req
}

// isrRetryDelay is how long a leader waits after a refused ISR change.
const isrRetryDelay = time.Second

// ISRChangeDone ends a pending ISR change that the controller refused
// (accepted ones end when the image arrives); the next one waits
// isrRetryDelay.
func (p *Partition) ISRChangeDone() { p.isrChangeEnded(0) }

// ISRChangeUncertain ends the pending ISR change whose answer was lost
// (it may or may not have committed): its members still count for the
// high watermark until this broker's image shows the partition changed,
// or for hold; another change may be asked meanwhile.
func (p *Partition) ISRChangeUncertain(hold time.Duration) { p.isrChangeEnded(hold) }

func (p *Partition) isrChangeEnded(hold time.Duration) {
	if p.rep == nil {
		return
	}
	p.rep.mu.Lock()
	if hold > 0 && p.rep.pendingISR != nil {
		p.rep.uncertainISR = unionISR(p.rep.uncertainISR, p.rep.pendingISR)
		p.rep.uncertainUntil = p.topic.eng.now().Add(hold)
	}
	p.rep.pendingISR = nil
	p.rep.isrRetryAt = p.topic.eng.now().Add(isrRetryDelay)
	done := p.advanceHWLocked()
	p.rep.mu.Unlock()
	p.completeAcks(done)
}

// FollowerLag is, for a leader, each follower's fetch offset (-1 before
// its first fetch); nil on other roles.
func (p *Partition) FollowerLag() map[int32]int64 {
	if p.rep == nil {
		return nil
	}
	p.rep.mu.Lock()
	defer p.rep.mu.Unlock()
	if p.rep.st.Role != RoleLeader {
		return nil
	}
	out := make(map[int32]int64, len(p.rep.followers))
	for id, f := range p.rep.followers {
		out[id] = f.fetchOffset
	}
	return out
}

// SetFollowerHighWatermark takes the high watermark a leader reported,
// capped at this follower's log end (follower only).
func (p *Partition) SetFollowerHighWatermark(leaderHW int64) {
	if p.rep == nil || p.log == nil || Role(p.role.Load()) != RoleFollower {
		return
	}
	// This runs on the fetcher's goroutine, a truncation on the shard's:
	// one that lands between reading the log end and raising the high
	// watermark would leave it above the new end (and compaction, and
	// consumers reading from this follower, trust it). So compare-and-
	// swap from the value read before the end, and clamp again after.
	raised := false
	for {
		cur := p.hw.Load()
		hw := min(leaderHW, p.log.EndOffset())
		if hw <= cur {
			break
		}
		if p.hw.CompareAndSwap(cur, hw) {
			raised = true
			break
		}
	}
	for {
		cur, end := p.hw.Load(), p.log.EndOffset()
		if cur <= end {
			break
		}
		p.hw.CompareAndSwap(cur, end) // and look again
	}
	if raised {
		p.notify() // consumers reading from this follower (KIP-392)
	}
}

// FollowerLog is the log of a partition this broker follows, for a
// consumer's fetch from a follower (KIP-392): it reads up to the high
// watermark the leader last sent (HighWatermark). Anywhere else (the
// leader, no role, a single broker) it answers NOT_LEADER_OR_FOLLOWER.
func (p *Partition) FollowerLog() (*wal.Log, error) {
	l, err := p.ReplicaLog()
	if err != nil {
		return nil, err
	}
	if p.rep == nil || Role(p.role.Load()) != RoleFollower {
		return nil, fmt.Errorf("%w: this broker does not follow %s", kerr.NotLeaderForPartition, p)
	}
	return l, nil
}

// AppendReplica appends batches fetched from the leader (offsets and
// epochs kept), synced, through the shard's group commit, and calls done
// with the outcome once they are durable (on the shard goroutine; done
// must not block).
func (p *Partition) AppendReplica(batches [][]byte, done func(error)) {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	p.shard.Append(&AppendRequest{Partition: p, Batches: batches, Replica: true, Acks: -1, Bytes: n,
		Done: func(res AppendResult) { done(res.Err) }})
}

// TruncateTo drops the follower's log from off (a divergent tail, KIP-101),
// reloads its producer state, and returns the new log end. Truncating
// below the high watermark is logged as an error: acknowledged data is
// being dropped.
func (p *Partition) TruncateTo(off int64) (int64, error) {
	var end int64
	err := p.shard.Call(func() error {
		l, err := p.ReplicaLog()
		if err != nil {
			return err
		}
		if Role(p.role.Load()) == RoleLeader {
			return fmt.Errorf("%w: %s: a leader does not truncate", kerr.NotLeaderForPartition, p)
		}
		before := l.EndOffset()
		end, err = l.TruncateTo(off)
		if err != nil {
			return fmt.Errorf("engine: %s: truncate to %d: %w", p, off, err)
		}
		if hw := p.hw.Load(); end < hw {
			p.topic.eng.logger.Error("truncated below the high watermark", "partition", p.String(), "high_watermark", hw, "new_end", end)
			p.topic.eng.stats.TruncatedBelowHW.Add(1)
			p.hw.Store(end)
		}
		if end < before {
			p.topic.eng.logger.Warn("truncated a divergent log tail", "partition", p.String(), "from", before, "to", end)
		}
		p.reloadProducerState()
		return nil
	})
	return end, err
}

// ResetTo empties the follower's log and restarts it at off (the leader's
// log start moved past this follower's end).
func (p *Partition) ResetTo(off int64) error {
	return p.shard.Call(func() error {
		l, err := p.ReplicaLog()
		if err != nil {
			return err
		}
		if Role(p.role.Load()) == RoleLeader {
			return fmt.Errorf("%w: %s: a leader does not reset", kerr.NotLeaderForPartition, p)
		}
		if err := l.ResetTo(off); err != nil {
			return fmt.Errorf("engine: %s: reset to %d: %w", p, off, err)
		}
		p.topic.eng.logger.Warn("reset the log to the leader's log start", "partition", p.String(), "offset", off)
		p.hw.Store(off)
		p.producers = map[int64]*producerState{}
		p.openTxns = map[int64]int64{}
		p.updateUnstable()
		return nil
	})
}

// highWatermarkFile is a replicated partition's high watermark as of its
// last clean shutdown (Kafka's replication-offset-checkpoint, per
// partition): a restarted broker starts from it instead of the log start,
// so consumers do not see the end of the log move back. Offsets below a
// high watermark stay committed, so an old file is merely low; after
// kill -9 the data directory's periodic checkpoint (hwcheckpoint.go)
// stands in.
const highWatermarkFile = "high-watermark"

// loadHighWatermark restores the high watermark at open, clamped into
// the log: the partition's clean-shutdown file when there is one (it is
// removed once read, so one left is from a clean shutdown since the last
// open: the newest), else the data directory's periodic checkpoint
// (hwcheckpoint.go). The newest, not the higher: a high watermark can go
// down (an unclean election truncates), and an old higher one would
// serve records the new leader never committed.
func (p *Partition) loadHighWatermark() {
	hw := p.topic.eng.hwCheckpoint[hwKey{p.topic.ID, p.Index}]
	path := filepath.Join(p.dir, highWatermarkFile)
	if b, err := os.ReadFile(path); err == nil {
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v < 0 {
			p.topic.eng.logger.Warn("ignoring an unreadable high-watermark checkpoint", "partition", p.String(), "err", err)
		} else {
			hw = v
		}
		if err := fsutil.RemoveDurable(path); err != nil {
			p.topic.eng.logger.Warn("could not remove the read high-watermark file; an older value may be read after a crash", "partition", p.String(), "err", err)
		}
	}
	p.hw.Store(min(max(hw, p.log.StartOffset()), p.log.EndOffset()))
}

// saveHighWatermark checkpoints the high watermark (shard, at shutdown).
func (p *Partition) saveHighWatermark() error {
	return fsutil.WriteFileAtomic(filepath.Join(p.dir, highWatermarkFile), []byte(strconv.FormatInt(p.hw.Load(), 10)+"\n"), p.topic.eng.cfg.Perm.File())
}

// LeaderReady reports whether a leader's high watermark reached the start
// of its leader epoch (KIP-207): before, ListOffsets(latest) would name an
// end below records an earlier leader committed, so it answers
// OFFSET_NOT_AVAILABLE. Always true off cluster mode.
func (p *Partition) LeaderReady() bool {
	if p.rep == nil {
		return true
	}
	p.rep.mu.Lock()
	defer p.rep.mu.Unlock()
	return p.rep.st.Role != RoleLeader || p.hw.Load() >= p.rep.epochStart
}

// reloadProducerState rebuilds the idempotent producer state from the log
// after a truncation (shard goroutine).
func (p *Partition) reloadProducerState() {
	p.producers = map[int64]*producerState{}
	if err := p.loadProducerState(); err != nil {
		p.topic.eng.logger.Warn("rebuilding producer state after truncation failed", "partition", p.String(), "err", err)
	}
}

// unionISR is a ∪ b (a's order first).
func unionISR(a, b []int32) []int32 {
	out := slices.Clone(a)
	for _, id := range b {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// ReadReplica is the first of candidates (broker ids) that is in this
// leader's ISR and has fetched at least up to offset: a replica a
// consumer reading from offset may be sent to (KIP-392). -1: none, or
// this broker does not lead.
func (p *Partition) ReadReplica(offset int64, candidates func(id int32) bool) int32 {
	r := p.rep
	if r == nil {
		return -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.Role != RoleLeader {
		return -1
	}
	for _, id := range r.st.ISR {
		if f := r.followers[id]; f != nil && f.fetchOffset >= offset && candidates(id) {
			return id
		}
	}
	return -1
}
