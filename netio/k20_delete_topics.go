package netio

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// DeleteTopics, key 20, versions 0-6.
//
//   - The same path in cluster mode (admin.go): the controller deletes,
//     another broker forwards.
//   - By name (v0-5) or by name or id (v6). The topic disappears from
//     metadata at once; its partitions' logs are closed by their shards and
//     their directories removed in the background.
//   - Unknown topics: UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID by id);
//     __consumer_offsets cannot be deleted (INVALID_TOPIC_EXCEPTION).
//   - Authorization, as Kafka's controller (ControllerApis.deleteTopics):
//     a name the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED
//     whether the topic exists or not, with no topic id, so the answer
//     tells nothing about it; one it may DESCRIBE but not DELETE is
//     TOPIC_AUTHORIZATION_FAILED too, and only then does a missing one
//     get UNKNOWN_TOPIC_OR_PARTITION. A known id the principal may not
//     DELETE is TOPIC_AUTHORIZATION_FAILED, with the topic's name only if
//     it may DESCRIBE it (an id is a random 128-bit value: whoever sends
//     one was given it, so an unknown id may still say UNKNOWN_TOPIC_ID).

func handleDeleteTopics(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDeleteTopicsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	answer := func(name *string, id [16]byte, err error) kmsg.DeleteTopicsResponseTopic {
		tr := kmsg.NewDeleteTopicsResponseTopic()
		tr.Topic, tr.TopicID = name, id
		if err != nil {
			tr.ErrorCode, tr.ErrorMessage = errCode(err), errMessage(err)
			r.failed = true
		}
		return tr
	}
	prepare := func(t kmsg.DeleteTopicsRequestTopic) (func(context.Context) kmsg.DeleteTopicsResponseTopic, kmsg.DeleteTopicsResponseTopic) {
		var name string
		switch {
		case t.Topic != nil && *t.Topic != "":
			name = *t.Topic
			if !r.topicAllowed(kmsg.ACLOperationDescribe, name) {
				// Whether it exists or not: nothing about it.
				return nil, answer(t.Topic, t.TopicID, kerr.TopicAuthorizationFailed)
			}
			if !r.topicAllowed(kmsg.ACLOperationDelete, name) {
				// It may learn whether it exists.
				if _, ok := s.admin.Topic(name); !ok {
					return nil, answer(t.Topic, t.TopicID, fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name))
				}
				return nil, answer(t.Topic, t.TopicID, kerr.TopicAuthorizationFailed)
			}
		case t.TopicID != [16]byte{}:
			mt, ok := s.admin.TopicByID(t.TopicID)
			switch {
			case !ok && s.cfg.Cluster != nil && s.cfg.Security.Authorizer == nil:
				// This broker's image may lag the controller's (a
				// topic created a moment ago): the controller, which
				// has everything committed, decides. With the
				// authorizer the name is needed here to check ACLs.
				return func(ctx context.Context) kmsg.DeleteTopicsResponseTopic {
					mt, ok := s.admin.TopicByID(t.TopicID)
					if !ok {
						return answer(nil, t.TopicID, fmt.Errorf("%w: no topic has id %s", kerr.UnknownTopicID, engine.TopicID(t.TopicID)))
					}
					id, err := s.admin.DeleteTopic(ctx, mt.Name, t.TopicID)
					if err != nil {
						id = t.TopicID
					}
					return answer(kmsg.StringPtr(mt.Name), id, err)
				}, kmsg.DeleteTopicsResponseTopic{}
			case !ok:
				return nil, answer(nil, t.TopicID, fmt.Errorf("%w: no topic has id %s", kerr.UnknownTopicID, engine.TopicID(t.TopicID)))
			case !r.topicAllowed(kmsg.ACLOperationDelete, mt.Name):
				// Its name only to whom may see it.
				var shown *string
				if r.topicAllowed(kmsg.ACLOperationDescribe, mt.Name) {
					shown = kmsg.StringPtr(mt.Name)
				}
				return nil, answer(shown, t.TopicID, kerr.TopicAuthorizationFailed)
			}
			name = mt.Name
		default:
			return nil, answer(t.Topic, t.TopicID, fmt.Errorf("%w: neither a topic name nor an id", kerr.InvalidRequest))
		}
		return func(ctx context.Context) kmsg.DeleteTopicsResponseTopic {
			id, err := s.admin.DeleteTopic(ctx, name, t.TopicID)
			if err != nil {
				id = t.TopicID
			}
			return answer(kmsg.StringPtr(name), id, err)
		}, kmsg.DeleteTopicsResponseTopic{}
	}
	topicsOf := func(resp *kmsg.DeleteTopicsResponse) []kmsg.DeleteTopicsResponseTopic { return resp.Topics }
	failed := func(t kmsg.DeleteTopicsRequestTopic, err error) kmsg.DeleteTopicsResponseTopic {
		return answer(t.Topic, t.TopicID, err)
	}
	if r.version >= 6 {
		resp.Topics = adminEntries(r, req.Topics, prepare,
			forwardPart(s, r, func(sub []kmsg.DeleteTopicsRequestTopic) kmsg.Request { c := *req; c.Topics = sub; return &c }, topicsOf),
			failed)
	} else {
		// v0-5 name topics only; as v6 topics, for prepare.
		byName := func(n string) kmsg.DeleteTopicsRequestTopic {
			t := kmsg.NewDeleteTopicsRequestTopic()
			t.Topic = kmsg.StringPtr(n)
			return t
		}
		resp.Topics = adminEntries(r, req.TopicNames,
			func(n string) (func(context.Context) kmsg.DeleteTopicsResponseTopic, kmsg.DeleteTopicsResponseTopic) {
				return prepare(byName(n))
			},
			forwardPart(s, r, func(sub []string) kmsg.Request { c := *req; c.TopicNames = sub; return &c }, topicsOf),
			func(n string, err error) kmsg.DeleteTopicsResponseTopic { return failed(byName(n), err) })
	}
	r.respond(resp)
	return frameDone
}
