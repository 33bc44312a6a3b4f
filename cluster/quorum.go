package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/metadata"
	"github.com/ringlog/ringlog/quorum"
)

// DescribeQuorum describes the metadata quorum on the controller (the
// Raft leader): its own log end and commit index, and for every other
// voter and broker-only node the metadata index its last heartbeat
// reported (hashicorp/raft does not expose its per-follower progress;
// the applied index a broker reports trails its log end by at most what
// it has yet to apply). Elsewhere it answers NOT_CONTROLLER.
func (c *Cluster) DescribeQuorum(ctx context.Context) (admin.Quorum, error) {
	if err := c.notController(); err != nil {
		return admin.Quorum{}, err
	}
	voters, observers, err := c.node.Members()
	if err != nil {
		return admin.Quorum{}, fmt.Errorf("describe the metadata quorum: %w", err)
	}
	now := time.Now()
	q := admin.Quorum{LeaderID: c.cfg.NodeID, Term: c.node.Term(), HighWatermark: int64(c.node.CommitIndex()),
		VoterAddrs: map[int32]string{}}
	replica := func(id int32) admin.QuorumReplica {
		if id == c.cfg.NodeID {
			return admin.QuorumReplica{ID: id, LogEndOffset: int64(c.node.LastIndex()), LastFetch: now, LastCaughtUp: now}
		}
		r, ok := c.ctrl.report(id)
		if !ok {
			return admin.QuorumReplica{ID: id, LogEndOffset: -1}
		}
		return admin.QuorumReplica{ID: id, LogEndOffset: r.offset, LastFetch: r.at, LastCaughtUp: r.caughtUpAt}
	}
	for _, id := range voters {
		q.Voters = append(q.Voters, replica(id))
	}
	for _, id := range observers {
		q.Observers = append(q.Observers, replica(id))
	}
	if ms, err := c.node.Configuration(); err == nil {
		for _, m := range ms {
			if m.Voter {
				q.VoterAddrs[m.ID] = m.Addr
			}
		}
	}
	return q, nil
}

// AddVoter makes node id a voter of the metadata quorum, on the
// controller (AddRaftVoter, key 80). The node must be running and a
// member as a non-voter, within ctx: a broker-only node, or a voter that
// was removed and rejoined (VOTER_NOT_FOUND otherwise); addr, if given,
// must be the address it joined at. It waits, within ctx, until the node's
// heartbeats report the metadata the controller has now
// (REQUEST_TIMED_OUT if they do not), then promotes it and waits for the
// change to commit. A voter already: DUPLICATE_VOTER.
func (c *Cluster) AddVoter(ctx context.Context, id int32, addr string) error {
	if err := c.notController(); err != nil {
		return err
	}
	c.voterMu.Lock() // one voter change at a time: RemoveVoter's check holds
	defer c.voterMu.Unlock()
	// A node just started may not have joined yet: wait within ctx.
	var member *quorum.Member
	for member == nil && ctx.Err() == nil {
		ms, err := c.node.Configuration()
		if err != nil {
			return fmt.Errorf("add voter %d: %w", id, err)
		}
		if i := slices.IndexFunc(ms, func(m quorum.Member) bool { return m.ID == id }); i >= 0 {
			member = &ms[i]
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(c.cfg.HeartbeatInterval):
		}
	}
	switch {
	case member == nil:
		return fmt.Errorf("%w: node %d is not in the metadata quorum: start it with the cluster's --voters (and a --metadata-addr the voters reach); it joins as an observer, then add it", kerr.VoterNotFound, id)
	case member.Voter:
		return fmt.Errorf("%w: node %d is a voter already", kerr.DuplicateVoter, id)
	case addr != "" && addr != member.Addr:
		return fmt.Errorf("%w: node %d joined at %s, not %s", kerr.InvalidRequest, id, member.Addr, addr)
	}
	target := int64(c.Image().Index())
	for {
		if r, ok := c.ctrl.report(id); ok && r.offset >= target && time.Since(r.at) < c.cfg.SessionTimeout {
			break
		}
		select {
		case <-ctx.Done():
			r, _ := c.ctrl.report(id)
			return fmt.Errorf("%w: node %d has not caught up with the metadata (it reported index %d, the controller has %d): is it running and registered?",
				kerr.RequestTimedOut, id, r.offset, target)
		case <-time.After(c.cfg.HeartbeatInterval):
		}
	}
	if err := c.node.AddVoter(ctx, id); err != nil {
		return fmt.Errorf("add voter %d: %w", id, controllerError(err))
	}
	c.log.Info("controller: node added to the metadata quorum's voters", "node", id, "addr", member.Addr)
	return nil
}

// RemoveVoter takes node id out of the metadata quorum's voters, on the
// controller (RemoveRaftVoter, key 81): a dead voter, or one to replace.
// A node that is not a voter: VOTER_NOT_FOUND. Refused (INVALID_REQUEST)
// when the voters left, counting those the controller heard from within
// a session, would not be a majority of the new set: the quorum would
// stop. A running node removed stays a non-voter (it can be added back);
// the controller removing itself hands over to another voter.
func (c *Cluster) RemoveVoter(ctx context.Context, id int32) error {
	if err := c.notController(); err != nil {
		return err
	}
	c.voterMu.Lock() // two removals checked at once could each leave a majority
	defer c.voterMu.Unlock()
	voters, _, err := c.node.Members()
	if err != nil {
		return fmt.Errorf("remove voter %d: %w", id, err)
	}
	if !slices.Contains(voters, id) {
		return fmt.Errorf("%w: node %d is not a voter (the voters are %v)", kerr.VoterNotFound, id, voters)
	}
	var left, live []int32
	for _, v := range voters {
		if v == id {
			continue
		}
		left = append(left, v)
		if v == c.cfg.NodeID || time.Since(c.ctrl.silentSince(v, time.Time{})) < c.cfg.SessionTimeout {
			live = append(live, v)
		}
	}
	if len(left) == 0 {
		return fmt.Errorf("%w: node %d is the last voter", kerr.InvalidRequest, id)
	}
	if 2*len(live) <= len(left) {
		return fmt.Errorf("%w: without node %d the voters would be %v, of which only %v are up: not a majority, the metadata quorum would stop; bring voters back first",
			kerr.InvalidRequest, id, left, live)
	}
	if err := c.node.RemoveVoter(ctx, id); err != nil {
		return fmt.Errorf("remove voter %d: %w", id, controllerError(err))
	}
	c.log.Info("controller: node removed from the metadata quorum's voters", "node", id, "voters", left)
	return nil
}

// UnregisterBroker removes broker id's registration, on the controller
// (UnregisterBroker, key 64): the broker must be stopped (fenced, and
// not heard from for a session) and hold no replica. A broker-only node
// leaves the metadata quorum's configuration with it (pruneBrokerOnly).
func (c *Cluster) UnregisterBroker(ctx context.Context, id int32) error {
	img, err := c.controllerImage(ctx)
	if err != nil {
		return err
	}
	b, ok := img.Broker(id)
	if ok {
		if last := c.ctrl.silentSince(id, time.Time{}); !last.IsZero() && time.Since(last) < c.cfg.SessionTimeout {
			return fmt.Errorf("%w: broker %d is running (heard %v ago): stop it first", kerr.InvalidRequest, id, time.Since(last).Round(time.Millisecond))
		}
	}
	// At the epoch checked: a broker that registered again meanwhile
	// (restarted) is not removed.
	if _, err := c.propose(ctx, metadata.UnregisterBroker{ID: id, Epoch: b.Epoch}); err != nil {
		return err
	}
	c.log.Info("controller: broker unregistered", "broker", id)
	return nil
}
