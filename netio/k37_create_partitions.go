package netio

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreatePartitions, key 37, versions 0-3.
//
//   - Grows a topic to Count partitions; a count that is not larger is
//     INVALID_PARTITIONS. Existing keys then hash to other partitions, as
//     in Kafka.
//   - An assignment is accepted when every new partition's replicas are
//     exactly this broker.
//   - ValidateOnly checks and creates nothing.
//   - Without ALTER on the topic: TOPIC_AUTHORIZATION_FAILED, whether it
//     exists or not (ALTER implies DESCRIBE, so the principal who may
//     alter it may also learn that it does not exist).

func handleCreatePartitions(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrCreatePartitionsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	if s.clusterAdmin(r, req) {
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, rt := range req.Topics {
		tr := kmsg.NewCreatePartitionsResponseTopic()
		tr.Topic = rt.Topic
		var err error
		if !r.topicAllowed(kmsg.ACLOperationAlter, rt.Topic) {
			// Before anything else is checked, as in Kafka: the answer to
			// a topic the principal may not alter says nothing more.
			err = kerr.TopicAuthorizationFailed
		}
		for _, a := range rt.Assignment {
			if err == nil && (len(a.Replicas) != 1 || a.Replicas[0] != s.eng.NodeID()) {
				err = fmt.Errorf("%w: replicas %v; the only broker is %d", kerr.InvalidReplicaAssignment, a.Replicas, s.eng.NodeID())
			}
		}
		if err == nil {
			err = s.eng.CreatePartitions(rt.Topic, rt.Count, req.ValidateOnly)
		}
		if err != nil {
			tr.ErrorCode = errCode(err)
			tr.ErrorMessage = errMessage(err)
			r.failed = true
		}
		resp.Topics = append(resp.Topics, tr)
	}
	r.respond(resp)
	return frameDone
}
