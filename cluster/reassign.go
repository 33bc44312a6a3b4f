package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/metadata"
)

// AlterPartitionReassignments implements admin.Service on the controller:
// each accepted entry becomes a metadata.ReassignPartition (whose Apply
// checks the target brokers and the ISR left). The move itself is the
// brokers': a new replica's broker hosts it and follows the leader (see
// rehost), the leader asks for it in the ISR once caught up, and the
// ChangePartition that completes the target set finishes the move.
func (c *Cluster) AlterPartitionReassignments(ctx context.Context, rs []admin.Reassignment, allowRFChange bool) ([]error, error) {
	img, err := c.controllerImage(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]error, len(rs))
	var recs []metadata.Record
	var at []int
	named := map[admin.PartitionRef]int{}
	for _, r := range rs {
		named[r.PartitionRef]++
	}
	for i, r := range rs {
		t := img.Topic(r.Topic)
		if t == nil || r.Partition < 0 || int(r.Partition) >= len(t.Partitions) {
			out[i] = fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, r.Topic, r.Partition)
			continue
		}
		if named[r.PartitionRef] > 1 {
			out[i] = fmt.Errorf("%w: %s-%d is named more than once", kerr.InvalidRequest, r.Topic, r.Partition)
			continue
		}
		if r.Replicas != nil && !allowRFChange {
			if have := len(t.Partitions[r.Partition].TargetReplicas()); have != len(r.Replicas) {
				out[i] = fmt.Errorf("%w: %s-%d has %d replicas, the move asks for %d, and the request does not allow a change",
					kerr.InvalidReplicationFactor, r.Topic, r.Partition, have, len(r.Replicas))
				continue
			}
		}
		rec := metadata.ReassignPartition{TopicID: t.ID, Partition: r.Partition, Target: r.Replicas}
		// Checked on the controller's image first: a move that would be
		// refused is answered without a commit.
		if err := check(img, rec); err != nil {
			out[i] = err
			continue
		}
		recs = append(recs, rec)
		at = append(at, i)
	}
	for i, err := range c.proposeAll(ctx, recs) {
		out[at[i]] = err
	}
	if len(recs) > 0 {
		c.log.Info("controller: partition reassignments asked for", "partitions", len(rs), "recorded", len(recs))
	}
	return out, nil
}

// ListPartitionReassignments implements admin.Service from the
// controller's image.
func (c *Cluster) ListPartitionReassignments(ctx context.Context, parts []admin.PartitionRef) ([]admin.OngoingReassignment, error) {
	img, err := c.controllerImage(ctx)
	if err != nil {
		return nil, err
	}
	var out []admin.OngoingReassignment
	add := func(t *metadata.Topic, i int32) {
		if p := &t.Partitions[i]; p.Reassigning() {
			out = append(out, admin.OngoingReassignment{PartitionRef: admin.PartitionRef{Topic: t.Name, Partition: i},
				Replicas: p.Replicas, Adding: p.AddingReplicas, Removing: p.RemovingReplicas})
		}
	}
	if parts == nil {
		for _, t := range img.Topics() {
			for i := range t.Partitions {
				add(t, int32(i))
			}
		}
		return out, nil
	}
	seen := map[admin.PartitionRef]bool{}
	for _, ref := range parts {
		t := img.Topic(ref.Topic)
		if seen[ref] || t == nil || ref.Partition < 0 || int(ref.Partition) >= len(t.Partitions) {
			continue
		}
		seen[ref] = true
		add(t, ref.Partition)
	}
	return out, nil
}

// proposeAll proposes recs in metadata.Batches of proposeBatch (one
// commit each) and returns each record's outcome; a refused batch (one
// record's precondition failed) is proposed again record by record, so
// each is answered for itself.
func (c *Cluster) proposeAll(ctx context.Context, recs []metadata.Record) []error {
	out := make([]error, len(recs))
	for start := 0; start < len(recs); start += proposeBatch {
		end := min(start+proposeBatch, len(recs))
		_, err := c.propose(ctx, metadata.Batch{Records: recs[start:end]})
		var refused *metadata.RefusedError
		if errors.As(err, &refused) {
			for i := start; i < end; i++ {
				_, out[i] = c.propose(ctx, recs[i])
			}
			continue
		}
		for i := start; i < end; i++ {
			out[i] = err
		}
	}
	return out
}

// proposeBatch is how many records proposeAll puts in one commit.
const proposeBatch = 256
