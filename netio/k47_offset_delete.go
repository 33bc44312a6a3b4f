package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// OffsetDelete, key 47, version 0.
//
//   - Deletes a group's committed offsets for partitions of topics none of
//     its members subscribes to (GROUP_SUBSCRIBED_TO_TOPIC otherwise);
//     GROUP_ID_NOT_FOUND for an unknown group.

func handleOffsetDelete(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrOffsetDeleteRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	var parts []engine.TopicPartition
	denied := map[string]bool{}
	for _, t := range req.Topics {
		if !r.topicAllowed(kmsg.ACLOperationRead, t.Topic) {
			denied[t.Topic] = true // answered TOPIC_AUTHORIZATION_FAILED below, nothing deleted
			continue
		}
		for _, p := range t.Partitions {
			parts = append(parts, engine.TopicPartition{Topic: t.Topic, Partition: p.Partition})
		}
	}
	var errs []error
	var err error
	if r.groupAllowed(kmsg.ACLOperationDelete, req.Group) {
		errs, err = s.eng.Coordinator().DeleteOffsets(req.Group, parts)
	} else {
		err = kerr.GroupAuthorizationFailed
	}
	resp.ErrorCode = errCode(err)
	r.failed = err != nil
	out := partitionOutcomes{errs: errs, denied: denied}
	for _, t := range req.Topics {
		rt := kmsg.OffsetDeleteResponseTopic{Topic: t.Topic}
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			if err == nil { // else the group's error is the answer's, at its top
				rp.ErrorCode = out.code(t.Topic)
			}
			r.failed = r.failed || rp.ErrorCode != 0
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.respond(resp)
	return frameDone
}
