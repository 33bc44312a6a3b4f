package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/metadata"
)

// Transactions across brokers: the engine's transaction coordinator calls
// these hooks when a transaction's partition, or the coordinator itself,
// is on another broker.

// txnCallTimeout bounds one inter-broker marker call (a marker waits
// for its partition's high watermark); verifyTimeout bounds a
// verification, which a produce waits for.
const (
	txnCallTimeout = 30 * time.Second
	verifyTimeout  = 10 * time.Second
)

// peerCall sends req to the broker at addr (on a kept connection of
// the peers' client) and hands the response to read.
func (c *Cluster) peerCall(ctx context.Context, addr string, req kmsg.Request, read func(kmsg.Response)) error {
	resp, err := c.peers.Call(ctx, addr, req)
	if err != nil {
		return err
	}
	read(resp)
	return nil
}

// brokerKafkaAddr is broker id's inter-broker address, or a retriable
// error when it cannot be reached now.
func brokerKafkaAddr(img *metadata.Image, id int32) (string, error) {
	if id < 0 {
		return "", fmt.Errorf("%w: no leader", kerr.NotLeaderForPartition)
	}
	b, ok := img.Broker(id)
	if !ok || b.KafkaAddr == "" {
		return "", fmt.Errorf("%w: broker %d has not registered its address", kerr.NotLeaderForPartition, id)
	}
	return b.KafkaAddr, nil
}

// verifyTxn asks the coordinator of transactional id whether tp is in
// the open transaction of pid/epoch (the engine's VerifyTxn hook):
// AddPartitionsToTxn v4 with VerifyOnly, as a Kafka partition leader asks
// (KIP-890).
func (c *Cluster) verifyTxn(id string, pid int64, epoch int16, tp engine.TopicPartition) error {
	coord := c.TxnCoordinatorFor(id)
	if coord < 0 {
		return fmt.Errorf("%w: the transactional id's __transaction_state partition has no leader", kerr.CoordinatorNotAvailable)
	}
	addr, err := brokerKafkaAddr(c.Image(), coord)
	if err != nil {
		return fmt.Errorf("%w: %w", kerr.CoordinatorNotAvailable, err)
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 4
	t := kmsg.NewAddPartitionsToTxnRequestTransaction()
	t.TransactionalID, t.ProducerID, t.ProducerEpoch, t.VerifyOnly = id, pid, epoch, true
	rt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
	rt.Topic, rt.Partitions = tp.Topic, []int32{tp.Partition}
	t.Topics = append(t.Topics, rt)
	req.Transactions = append(req.Transactions, t)
	ctx, cancel := context.WithTimeout(context.Background(), verifyTimeout)
	defer cancel()
	var verdict error
	err = c.peerCall(ctx, addr, req, func(kresp kmsg.Response) {
		resp := kresp.(*kmsg.AddPartitionsToTxnResponse)
		code := resp.ErrorCode
		if code == 0 {
			// One transaction, one topic, one partition were asked.
			if len(resp.Transactions) == 0 || len(resp.Transactions[0].Topics) == 0 || len(resp.Transactions[0].Topics[0].Partitions) == 0 {
				verdict = fmt.Errorf("%w: transaction coordinator, broker %d, answered without the partition", kerr.UnknownServerError, coord)
				return
			}
			code = resp.Transactions[0].Topics[0].Partitions[0].ErrorCode
		}
		if code != 0 {
			verdict = fmt.Errorf("transaction coordinator, broker %d: %w", coord, kerr.ErrorForCode(code))
		}
	})
	if err != nil {
		return fmt.Errorf("%w: verifying with the transaction coordinator, broker %d: %v", kerr.CoordinatorNotAvailable, coord, err)
	}
	return verdict
}

// writeTxnMarkers sends mk to the leaders of parts, one WriteTxnMarkers
// per leader, all at once (the engine's WriteTxnMarkers hook). A topic
// the image no longer has counts as done.
func (c *Cluster) writeTxnMarkers(mk engine.TxnMarker, parts []engine.TopicPartition) []error {
	errs := make([]error, len(parts))
	img := c.Image()
	byLeader := map[int32][]int{} // leader -> indexes into parts
	for i, tp := range parts {
		t := img.Topic(tp.Topic)
		if t == nil || int(tp.Partition) >= len(t.Partitions) {
			continue
		}
		byLeader[t.Partitions[tp.Partition].Leader] = append(byLeader[t.Partitions[tp.Partition].Leader], i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), txnCallTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for leader, idx := range byLeader {
		addr, err := brokerKafkaAddr(img, leader)
		if err != nil {
			for _, i := range idx {
				errs[i] = err
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.sendMarkers(ctx, leader, addr, mk, parts, idx, errs)
		}()
	}
	wg.Wait()
	return errs
}

// sendMarkers sends one WriteTxnMarkers with mk for parts[idx] to leader
// and fills errs[idx] (each goroutine its own indexes).
func (c *Cluster) sendMarkers(ctx context.Context, leader int32, addr string, mk engine.TxnMarker, parts []engine.TopicPartition, idx []int, errs []error) {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = 1
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = mk.ProducerID, mk.ProducerEpoch, mk.Commit, mk.CoordinatorEpoch
	at := map[engine.TopicPartition]int{}
	for _, i := range idx {
		tp := parts[i]
		at[tp] = i
		if n := len(m.Topics); n > 0 && m.Topics[n-1].Topic == tp.Topic {
			m.Topics[n-1].Partitions = append(m.Topics[n-1].Partitions, tp.Partition)
			continue
		}
		t := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		t.Topic, t.Partitions = tp.Topic, []int32{tp.Partition}
		m.Topics = append(m.Topics, t)
	}
	req.Markers = append(req.Markers, m)
	fail := func(err error) {
		for _, i := range idx {
			errs[i] = err
		}
	}
	fail(fmt.Errorf("%w: broker %d did not answer for the partition", kerr.UnknownServerError, leader))
	err := c.peerCall(ctx, addr, req, func(kresp kmsg.Response) {
		for _, rm := range kresp.(*kmsg.WriteTxnMarkersResponse).Markers {
			for _, t := range rm.Topics {
				for _, p := range t.Partitions {
					i, ok := at[engine.TopicPartition{Topic: t.Topic, Partition: p.Partition}]
					if !ok {
						continue
					}
					errs[i] = nil
					if p.ErrorCode != 0 {
						errs[i] = fmt.Errorf("broker %d: %w", leader, kerr.ErrorForCode(p.ErrorCode))
					}
				}
			}
		}
	})
	if err != nil {
		fail(fmt.Errorf("%w: markers to broker %d: %v", kerr.NotLeaderForPartition, leader, err))
	}
}
