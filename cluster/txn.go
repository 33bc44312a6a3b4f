package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/peer"
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
	ctx, cancel := context.WithTimeout(context.Background(), verifyTimeout)
	defer cancel()
	err = c.txns.VerifyTxn(ctx, addr, peer.TxnVerify{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Topic: tp.Topic, Partition: tp.Partition})
	var ke *kerr.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ke):
		return fmt.Errorf("transaction coordinator, broker %d: %w", coord, err)
	}
	return fmt.Errorf("%w: verifying with the transaction coordinator, broker %d: %v", kerr.CoordinatorNotAvailable, coord, err)
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
	m := peer.TxnMarkers{ProducerID: mk.ProducerID, ProducerEpoch: mk.ProducerEpoch, Commit: mk.Commit, CoordinatorEpoch: mk.CoordinatorEpoch}
	for _, i := range idx {
		m.Partitions = append(m.Partitions, peer.TopicPartition{Topic: parts[i].Topic, Partition: parts[i].Partition})
	}
	got, err := c.txns.WriteTxnMarkers(ctx, addr, m)
	for k, i := range idx {
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("%w: markers to broker %d: %v", kerr.NotLeaderForPartition, leader, err)
		case got[k] != nil:
			errs[i] = fmt.Errorf("broker %d: %w", leader, got[k])
		default:
			errs[i] = nil
		}
	}
}
