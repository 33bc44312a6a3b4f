package netio

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// DeleteTopics, key 20, versions 0-6.
//
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
	if s.clusterAdmin(r, req) {
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	if r.version >= 6 {
		for _, t := range req.Topics {
			targets = append(targets, target{t.Topic, t.TopicID})
		}
	} else {
		for _, n := range req.TopicNames {
			n := n
			targets = append(targets, target{name: &n})
		}
	}
	for _, tg := range targets {
		tr := kmsg.NewDeleteTopicsResponseTopic()
		tr.Topic, tr.TopicID = tg.name, tg.id
		var err error
		switch {
		case tg.name != nil && *tg.name != "":
			name := *tg.name
			t := s.eng.Topic(name)
			switch {
			case !r.topicAllowed(kmsg.ACLOperationDescribe, name):
				// Whether it exists or not: nothing about it.
				err = kerr.TopicAuthorizationFailed
			case t == nil:
				err = fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name)
			case !r.topicAllowed(kmsg.ACLOperationDelete, name):
				err = kerr.TopicAuthorizationFailed
			default:
				tr.TopicID = t.ID
				err = s.eng.DeleteTopic(name)
			}
		case tg.id != [16]byte{}:
			t := s.eng.TopicByID(engine.TopicID(tg.id))
			switch {
			case t == nil:
				err = fmt.Errorf("%w: no topic has id %s", kerr.UnknownTopicID, engine.TopicID(tg.id))
			case !r.topicAllowed(kmsg.ACLOperationDelete, t.Name):
				err = kerr.TopicAuthorizationFailed
				if r.topicAllowed(kmsg.ACLOperationDescribe, t.Name) {
					tr.Topic = kmsg.StringPtr(t.Name)
				}
			default:
				tr.Topic = kmsg.StringPtr(t.Name)
				err = s.eng.DeleteTopic(t.Name)
			}
		default:
			err = fmt.Errorf("%w: neither a topic name nor an id", kerr.InvalidRequest)
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
