package netio

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/internal/bytopic"
)

// AlterPartitionReassignments, key 45, versions 0-1, and
// ListPartitionReassignments, key 46, version 0 (KIP-455).
//
//   - Alter: per partition, a replica list moves it (preferred leader
//     first), null cancels the move in progress. The answer comes once
//     the move is recorded in the cluster metadata; the new replicas
//     then catch up, join the ISR, and the move completes (List shows it
//     until then). Errors per partition: UNKNOWN_TOPIC_OR_PARTITION,
//     INVALID_REPLICA_ASSIGNMENT (a broker not registered, named twice,
//     or no in-sync replica left), NO_REASSIGNMENT_IN_PROGRESS (cancel),
//     INVALID_REPLICATION_FACTOR (v1 AllowReplicationFactorChange false
//     and the count changes, KIP-860), INVALID_REQUEST for every entry of
//     a partition named more than once.
//   - List: topics null lists every move in progress; named partitions
//     not moving (or unknown) are left out.
//   - Alter needs ALTER on the cluster, List DESCRIBE on the cluster, as
//     in Kafka: without it CLUSTER_AUTHORIZATION_FAILED (top level, and
//     every partition of an Alter).
//   - Cluster mode: the controller answers; another broker forwards the
//     request whole. A single broker is its partitions' only replica: a
//     move to itself changes nothing, any other is refused.

func handleAlterPartitionReassignments(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	resp.AllowReplicationFactorChange = req.AllowReplicationFactorChange
	answer := func(errs func(i int) error) {
		i := 0
		for _, rt := range req.Topics {
			t := kmsg.NewAlterPartitionAssignmentsResponseTopic()
			t.Topic = rt.Topic
			for _, p := range rt.Partitions {
				err := errs(i)
				i++
				if err != nil {
					r.failed = true
				}
				pr := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
				pr.Partition, pr.ErrorCode, pr.ErrorMessage = p.Partition, errCode(err), errMessage(err)
				t.Partitions = append(t.Partitions, pr)
			}
			resp.Topics = append(resp.Topics, t)
		}
		r.respond(resp)
	}
	failAll := func(err error) {
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		answer(func(int) error { return err })
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterAdminTimeout)
	defer cancel()
	if s.atController(ctx, r, req, kmsg.ACLOperationAlter, failAll) {
		return frameDone
	}
	// A partition named twice is refused (both entries): which move
	// was meant is not the broker's to guess.
	var all []admin.Reassignment
	named := map[admin.PartitionRef]int{}
	for _, rt := range req.Topics {
		for _, p := range rt.Partitions {
			ref := admin.PartitionRef{Topic: rt.Topic, Partition: p.Partition}
			all = append(all, admin.Reassignment{PartitionRef: ref, Replicas: p.Replicas})
			named[ref]++
		}
	}
	errs := make([]error, len(all))
	var rs []admin.Reassignment
	var at []int
	for i, ra := range all {
		if named[ra.PartitionRef] > 1 {
			errs[i] = fmt.Errorf("%w: %s-%d is named more than once", kerr.InvalidRequest, ra.Topic, ra.Partition)
			continue
		}
		rs, at = append(rs, ra), append(at, i)
	}
	if len(rs) > 0 {
		got, err := s.admin.AlterPartitionReassignments(ctx, rs, r.version < 1 || req.AllowReplicationFactorChange)
		if err != nil {
			failAll(err)
			return frameDone
		}
		for j, err := range got {
			errs[at[j]] = err
		}
	}
	answer(func(i int) error { return errs[i] })
	return frameDone
}

func handleListPartitionReassignments(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrListPartitionReassignmentsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	fail := func(err error) {
		r.failed = true
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		r.respond(resp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterAdminTimeout)
	defer cancel()
	if s.atController(ctx, r, req, kmsg.ACLOperationDescribe, fail) {
		return frameDone
	}
	parts := partitionRefs(req.Topics, func(t kmsg.ListPartitionReassignmentsRequestTopic) (string, []int32) { return t.Topic, t.Partitions })
	moving, err := s.admin.ListPartitionReassignments(ctx, parts)
	if err != nil {
		fail(err)
		return frameDone
	}
	byTopic := map[string]int{}
	for _, m := range moving {
		i := bytopic.Index(byTopic, &resp.Topics, m.Topic, func(name string) kmsg.ListPartitionReassignmentsResponseTopic {
			t := kmsg.NewListPartitionReassignmentsResponseTopic()
			t.Topic = name
			return t
		})
		pr := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
		pr.Partition, pr.Replicas = m.Partition, m.Replicas
		pr.AddingReplicas, pr.RemovingReplicas = nonNilInt32s(m.Adding), nonNilInt32s(m.Removing)
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, pr)
	}
	r.respond(resp)
	return frameDone
}

// nonNilInt32s is s, or an empty list for nil (the field is not nullable).
func nonNilInt32s(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

// partitionRefs lists the partitions a request names topic by topic
// (topic gives a topic's name and partitions); topics nil is nil: every
// partition.
func partitionRefs[T any](topics []T, topic func(T) (string, []int32)) []admin.PartitionRef {
	if topics == nil {
		return nil
	}
	parts := []admin.PartitionRef{}
	for _, t := range topics {
		name, ps := topic(t)
		for _, p := range ps {
			parts = append(parts, admin.PartitionRef{Topic: name, Partition: p})
		}
	}
	return parts
}
