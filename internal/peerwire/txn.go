package peerwire

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/peer"
)

var _ peer.Txns = (*Client)(nil)

// VerifyTxn sends an AddPartitionsToTxn v4 with VerifyOnly.
func (c *Client) VerifyTxn(ctx context.Context, addr string, v peer.TxnVerify) error {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 4
	t := kmsg.NewAddPartitionsToTxnRequestTransaction()
	t.TransactionalID, t.ProducerID, t.ProducerEpoch, t.VerifyOnly = v.TransactionalID, v.ProducerID, v.ProducerEpoch, true
	rt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
	rt.Topic, rt.Partitions = v.Topic, []int32{v.Partition}
	t.Topics = append(t.Topics, rt)
	req.Transactions = append(req.Transactions, t)
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return err
	}
	resp := raw.(*kmsg.AddPartitionsToTxnResponse)
	if err := codeErr(resp.ErrorCode, nil); err != nil {
		return err
	}
	// One transaction, one topic, one partition were asked.
	if len(resp.Transactions) == 0 || len(resp.Transactions[0].Topics) == 0 || len(resp.Transactions[0].Topics[0].Partitions) == 0 {
		return fmt.Errorf("%w: the coordinator answered without the partition", kerr.UnknownServerError)
	}
	return codeErr(resp.Transactions[0].Topics[0].Partitions[0].ErrorCode, nil)
}

// WriteTxnMarkers sends a WriteTxnMarkers (v1) of one marker.
func (c *Client) WriteTxnMarkers(ctx context.Context, addr string, m peer.TxnMarkers) ([]error, error) {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = 1
	mk := kmsg.NewWriteTxnMarkersRequestMarker()
	mk.ProducerID, mk.ProducerEpoch, mk.Committed, mk.CoordinatorEpoch = m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch
	at := map[peer.TopicPartition]int{}
	for i, tp := range m.Partitions {
		at[tp] = i
		if n := len(mk.Topics); n > 0 && mk.Topics[n-1].Topic == tp.Topic {
			mk.Topics[n-1].Partitions = append(mk.Topics[n-1].Partitions, tp.Partition)
			continue
		}
		t := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		t.Topic, t.Partitions = tp.Topic, []int32{tp.Partition}
		mk.Topics = append(mk.Topics, t)
	}
	req.Markers = append(req.Markers, mk)
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(m.Partitions))
	for i := range errs {
		errs[i] = fmt.Errorf("%w: the leader did not answer for the partition", kerr.UnknownServerError)
	}
	for _, rm := range raw.(*kmsg.WriteTxnMarkersResponse).Markers {
		for _, t := range rm.Topics {
			for _, p := range t.Partitions {
				if i, ok := at[peer.TopicPartition{Topic: t.Topic, Partition: p.Partition}]; ok {
					errs[i] = codeErr(p.ErrorCode, nil)
				}
			}
		}
	}
	return errs, nil
}
