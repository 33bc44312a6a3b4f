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
	for _, t := range req.Topics {
		if !r.topicAllowed(kmsg.ACLOperationRead, t.Topic) {
			continue // answered TOPIC_AUTHORIZATION_FAILED below, nothing deleted
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
	i := 0
	for _, t := range req.Topics {
		rt := kmsg.OffsetDeleteResponseTopic{Topic: t.Topic}
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			switch {
			case err != nil:
			case !r.topicAllowed(kmsg.ACLOperationRead, t.Topic):
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			default:
				rp.ErrorCode = errCode(errs[i])
				i++
			}
			r.failed = r.failed || rp.ErrorCode != 0
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.respond(resp)
	return frameDone
}
