package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/metadata"
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
	for _, v := range c.cfg.Voters {
		q.VoterAddrs[v.ID] = v.Addr
	}
	return q, nil
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
