package peerwire

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/peer"
)

// The share coordinator's calls (peer.ShareStates), one key each, as
// Kafka's share-state APIs. A read of a key with no state answers
// StartOffset -1 with the state epoch a new state starts at.

// ReadShareState sends a ReadShareGroupState (v0).
func (c *Client) ReadShareState(ctx context.Context, addr string, k peer.ShareKey, leaderEpoch int32) (peer.ShareState, bool, error) {
	req := kmsg.NewPtrReadShareGroupStateRequest()
	req.GroupID = k.Group
	t := kmsg.NewReadShareGroupStateRequestTopic()
	t.TopicID = k.TopicID
	t.Partitions = []kmsg.ReadShareGroupStateRequestTopicPartition{{Partition: k.Partition, LeaderEpoch: leaderEpoch}}
	req.Topics = append(req.Topics, t)
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return peer.ShareState{}, false, err
	}
	resp := raw.(*kmsg.ReadShareGroupStateResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return peer.ShareState{}, false, fmt.Errorf("%w: the share coordinator answered %d topics", kerr.UnknownServerError, len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	if err := codeErr(p.ErrorCode, p.ErrorMessage); err != nil {
		return peer.ShareState{}, false, err
	}
	st := peer.ShareState{StateEpoch: p.StateEpoch, Start: p.StartOffset}
	for _, b := range p.StateBatches {
		st.Batches = append(st.Batches, peer.ShareBatch{First: b.FirstOffset, Last: b.LastOffset, State: b.DeliveryState, DeliveryCount: b.DeliveryCount})
	}
	if p.StartOffset < 0 {
		return peer.ShareState{StateEpoch: p.StateEpoch}, false, nil
	}
	return st, true, nil
}

// WriteShareState sends a WriteShareGroupState (v0).
func (c *Client) WriteShareState(ctx context.Context, addr string, k peer.ShareKey, st peer.ShareState) error {
	req := kmsg.NewPtrWriteShareGroupStateRequest()
	req.GroupID = k.Group
	t := kmsg.NewWriteShareGroupStateRequestTopic()
	t.TopicID = k.TopicID
	p := kmsg.NewWriteShareGroupStateRequestTopicPartition()
	p.Partition, p.StateEpoch, p.LeaderEpoch, p.StartOffset = k.Partition, st.StateEpoch, st.LeaderEpoch, st.Start
	for _, b := range st.Batches {
		p.StateBatches = append(p.StateBatches, kmsg.WriteShareGroupStateRequestTopicPartitionStateBatch{FirstOffset: b.First, LastOffset: b.Last, DeliveryState: b.State, DeliveryCount: b.DeliveryCount})
	}
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return err
	}
	resp := raw.(*kmsg.WriteShareGroupStateResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Errorf("%w: the share coordinator answered %d topics", kerr.UnknownServerError, len(resp.Topics))
	}
	rp := resp.Topics[0].Partitions[0]
	return codeErr(rp.ErrorCode, rp.ErrorMessage)
}

// ResetShareState sends an InitializeShareGroupState (v0): a new state at
// start, at the next state epoch (the coordinator picks it).
func (c *Client) ResetShareState(ctx context.Context, addr string, k peer.ShareKey, start int64) error {
	req := kmsg.NewPtrInitializeShareGroupStateRequest()
	req.GroupID = k.Group
	t := kmsg.NewInitializeShareGroupStateRequestTopic()
	t.TopicID = k.TopicID
	t.Partitions = []kmsg.InitializeShareGroupStateRequestTopicPartition{{Partition: k.Partition, StateEpoch: -1, StartOffset: start}}
	req.Topics = append(req.Topics, t)
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return err
	}
	resp := raw.(*kmsg.InitializeShareGroupStateResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Errorf("%w: the share coordinator answered %d topics", kerr.UnknownServerError, len(resp.Topics))
	}
	rp := resp.Topics[0].Partitions[0]
	return codeErr(rp.ErrorCode, rp.ErrorMessage)
}

// DeleteShareState sends a DeleteShareGroupState (v0).
func (c *Client) DeleteShareState(ctx context.Context, addr string, k peer.ShareKey) error {
	req := kmsg.NewPtrDeleteShareGroupStateRequest()
	req.GroupID = k.Group
	t := kmsg.NewDeleteShareGroupStateRequestTopic()
	t.TopicID = k.TopicID
	t.Partitions = []kmsg.DeleteShareGroupStateRequestTopicPartition{{Partition: k.Partition}}
	req.Topics = append(req.Topics, t)
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return err
	}
	resp := raw.(*kmsg.DeleteShareGroupStateResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Errorf("%w: the share coordinator answered %d topics", kerr.UnknownServerError, len(resp.Topics))
	}
	rp := resp.Topics[0].Partitions[0]
	return codeErr(rp.ErrorCode, rp.ErrorMessage)
}
