package netio

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/internal/bytopic"
)

// ElectLeaders, key 43, versions 0-2.
//
//   - Preferred elections (v0; ElectionType 0 from v1) give each named
//     partition to its first replica when that one is live and in sync;
//     unclean ones (1) give a partition without a live leader to a live
//     replica, out of sync if need be (records only the old ISR had are
//     lost). Topics null: every partition, and then only those whose
//     leader moved or could not are answered, as in Kafka.
//   - Per partition: ELECTION_NOT_NEEDED when it already has the leader
//     asked for, PREFERRED_LEADER_NOT_AVAILABLE or
//     ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica may take it,
//     UNKNOWN_TOPIC_OR_PARTITION.
//   - Needs ALTER on the cluster, as in Kafka: without it
//     CLUSTER_AUTHORIZATION_FAILED (top level from v1, and every
//     partition).
//   - Cluster mode: the controller elects; another broker forwards the
//     request whole. On a single broker every partition is led by its
//     only replica: ELECTION_NOT_NEEDED.

func handleElectLeaders(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrElectLeadersRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
	// failAll answers every partition named with err.
	failAll := func(err error) {
		r.failed = true
		if r.version >= 1 {
			resp.ErrorCode = errCode(err)
		}
		for _, rt := range req.Topics {
			t := kmsg.NewElectLeadersResponseTopic()
			t.Topic = rt.Topic
			for _, p := range rt.Partitions {
				pr := kmsg.NewElectLeadersResponseTopicPartition()
				pr.Partition, pr.ErrorCode, pr.ErrorMessage = p, errCode(err), errMessage(err)
				t.Partitions = append(t.Partitions, pr)
			}
			resp.Topics = append(resp.Topics, t)
		}
		r.respond(resp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterAdminTimeout)
	defer cancel()
	if s.atController(ctx, r, req, kmsg.ACLOperationAlter, failAll) {
		return frameDone
	}
	parts := partitionRefs(req.Topics, func(t kmsg.ElectLeadersRequestTopic) (string, []int32) { return t.Topic, t.Partitions })
	typ := admin.PreferredElection
	if r.version >= 1 {
		typ = admin.ElectionType(req.ElectionType)
	}
	results, err := s.admin.ElectLeaders(ctx, typ, parts)
	if err != nil {
		failAll(err)
		return frameDone
	}
	byTopic := map[string]int{}
	for _, e := range results {
		i := bytopic.Index(byTopic, &resp.Topics, e.Topic, func(name string) kmsg.ElectLeadersResponseTopic {
			t := kmsg.NewElectLeadersResponseTopic()
			t.Topic = name
			return t
		})
		pr := kmsg.NewElectLeadersResponseTopicPartition()
		pr.Partition, pr.ErrorCode, pr.ErrorMessage = e.Partition, errCode(e.Err), errMessage(e.Err)
		if e.Err != nil && !errors.Is(e.Err, kerr.ElectionNotNeeded) {
			r.failed = true
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, pr)
	}
	r.respond(resp)
	return frameDone
}
