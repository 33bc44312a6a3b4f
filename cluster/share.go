package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/sharegroup"
	"github.com/ringlog/ringlog/internal/peer"
)

// shareCallTimeout bounds one call to a share coordinator: longer than a
// write's acks=all wait there (30 s), so that a write answered with a
// timeout here did not land later.
const shareCallTimeout = 40 * time.Second

// shareRemote is the engine's ShareStates hook: a share-partition state
// led by another broker is read and written there, through Kafka's
// share-state APIs (the leader of the key's __share_group_state
// partition, as the image says).
type shareRemote struct{ c *Cluster }

// coordinator returns the address of the share coordinator of k.
func (r shareRemote) coordinator(k engine.ShareKey) (string, error) {
	img := r.c.Image()
	t := img.Topic(engine.ShareStateTopic)
	if t == nil || len(t.Partitions) == 0 {
		return "", fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, engine.ShareStateTopic)
	}
	leader := t.Partitions[engine.SharePartitionFor(k, len(t.Partitions))].Leader
	addr, err := brokerKafkaAddr(img, leader)
	if err != nil {
		return "", fmt.Errorf("%w: the share coordinator: %w", kerr.CoordinatorNotAvailable, err)
	}
	return addr, nil
}

// call runs fn against k's share coordinator; a failure that is not the
// coordinator's answer (no connection, a timeout) is
// COORDINATOR_NOT_AVAILABLE, which the clients retry.
func (r shareRemote) call(k engine.ShareKey, fn func(ctx context.Context, addr string) error) error {
	addr, err := r.coordinator(k)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), shareCallTimeout)
	defer cancel()
	err = fn(ctx, addr)
	var ke *kerr.Error
	if err == nil || errors.As(err, &ke) {
		return err
	}
	return fmt.Errorf("%w: the share coordinator at %s: %v", kerr.CoordinatorNotAvailable, addr, err)
}

func peerShareKey(k engine.ShareKey) peer.ShareKey {
	return peer.ShareKey{Group: k.Group, TopicID: k.Topic, Partition: k.Partition}
}

func (r shareRemote) Read(k engine.ShareKey, leaderEpoch int32) (st engine.ShareState, ok bool, err error) {
	err = r.call(k, func(ctx context.Context, addr string) error {
		ps, found, err := r.c.peers.ReadShareState(ctx, addr, peerShareKey(k), leaderEpoch)
		if err != nil {
			return err
		}
		st, ok = engine.ShareState{StateEpoch: ps.StateEpoch, LeaderEpoch: ps.LeaderEpoch}, found
		st.Start = ps.Start
		for _, b := range ps.Batches {
			st.Batches = append(st.Batches, sharegroup.StateBatch{First: b.First, Last: b.Last, State: sharegroup.RecordState(b.State), DeliveryCount: b.DeliveryCount})
		}
		return nil
	})
	return st, ok, err
}

func (r shareRemote) Write(k engine.ShareKey, st engine.ShareState) error {
	ps := peer.ShareState{StateEpoch: st.StateEpoch, LeaderEpoch: st.LeaderEpoch, Start: st.Start}
	for _, b := range st.Batches {
		ps.Batches = append(ps.Batches, peer.ShareBatch{First: b.First, Last: b.Last, State: int8(b.State), DeliveryCount: b.DeliveryCount})
	}
	return r.call(k, func(ctx context.Context, addr string) error {
		return r.c.peers.WriteShareState(ctx, addr, peerShareKey(k), ps)
	})
}

func (r shareRemote) Reset(k engine.ShareKey, start int64) error {
	return r.call(k, func(ctx context.Context, addr string) error {
		return r.c.peers.ResetShareState(ctx, addr, peerShareKey(k), start)
	})
}

func (r shareRemote) Delete(k engine.ShareKey) error {
	return r.call(k, func(ctx context.Context, addr string) error {
		return r.c.peers.DeleteShareState(ctx, addr, peerShareKey(k))
	})
}

// shareMember asks the coordinator of group whether member is one of its
// members (ShareGroupDescribe), as a partition leader does when a share
// session opens (the engine's ShareMember hook).
func (c *Cluster) shareMember(group, member string) error {
	coord := c.CoordinatorFor(group)
	if coord < 0 {
		return fmt.Errorf("%w: group %q's __consumer_offsets partition has no leader", kerr.CoordinatorNotAvailable, group)
	}
	addr, err := brokerKafkaAddr(c.Image(), coord)
	if err != nil {
		return fmt.Errorf("%w: %w", kerr.CoordinatorNotAvailable, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), shareCallTimeout)
	defer cancel()
	req := kmsg.NewPtrShareGroupDescribeRequest()
	req.GroupIDs = []string{group}
	raw, err := c.peers.Call(ctx, addr, req)
	if err != nil {
		return fmt.Errorf("%w: asking group %q's coordinator, broker %d: %v", kerr.CoordinatorNotAvailable, group, coord, err)
	}
	resp := raw.(*kmsg.ShareGroupDescribeResponse)
	if len(resp.Groups) != 1 {
		return fmt.Errorf("%w: the coordinator answered %d groups", kerr.CoordinatorNotAvailable, len(resp.Groups))
	}
	g := resp.Groups[0]
	if err := kerr.ErrorForCode(g.ErrorCode); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("group %q's coordinator, broker %d: %w", group, coord, err)
	}
	for _, m := range g.Members {
		if m.MemberID == member {
			return nil
		}
	}
	return fmt.Errorf("%w: %q is not a member of share group %q; heartbeat (join) first", kerr.UnknownMemberID, member, group)
}
