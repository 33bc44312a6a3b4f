package netio

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/admin"
)

// CreatePartitions, key 37, versions 0-3.
//
//   - Grows a topic to Count partitions; a count that is not larger is
//     INVALID_PARTITIONS. Existing keys then hash to other partitions, as
//     in Kafka.
//   - The same path in cluster mode (admin.go): the controller creates,
//     another broker forwards.
//   - An assignment names the replicas of every new partition: live,
//     distinct brokers, as many as the topic's partitions have.
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
	answer := func(rt kmsg.CreatePartitionsRequestTopic, err error) kmsg.CreatePartitionsResponseTopic {
		tr := kmsg.NewCreatePartitionsResponseTopic()
		tr.Topic = rt.Topic
		if err != nil {
			tr.ErrorCode, tr.ErrorMessage = errCode(err), errMessage(err)
			r.failed = true
		}
		return tr
	}
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	resp.Topics = adminEntries(r, req.Topics,
		func(rt kmsg.CreatePartitionsRequestTopic) (func(context.Context) kmsg.CreatePartitionsResponseTopic, kmsg.CreatePartitionsResponseTopic) {
			if !r.topicAllowed(kmsg.ACLOperationAlter, rt.Topic) {
				// Before anything else is checked, as in Kafka: the
				// answer to a topic the principal may not alter says
				// nothing more.
				return nil, answer(rt, kerr.TopicAuthorizationFailed)
			}
			np := admin.NewPartitions{Topic: rt.Topic, Count: rt.Count}
			if rt.Assignment != nil {
				np.Assignment = make([][]int32, 0, len(rt.Assignment))
				for _, a := range rt.Assignment {
					np.Assignment = append(np.Assignment, append([]int32{}, a.Replicas...))
				}
			}
			if err := np.Check(); err != nil {
				return nil, answer(rt, err)
			}
			return func(ctx context.Context) kmsg.CreatePartitionsResponseTopic {
				return answer(rt, s.admin.CreatePartitions(ctx, np, req.ValidateOnly))
			}, kmsg.CreatePartitionsResponseTopic{}
		},
		forwardPart(s, r, func(sub []kmsg.CreatePartitionsRequestTopic) kmsg.Request { c := *req; c.Topics = sub; return &c },
			func(resp *kmsg.CreatePartitionsResponse) []kmsg.CreatePartitionsResponseTopic { return resp.Topics }), answer)
	r.respond(resp)
	return frameDone
}
