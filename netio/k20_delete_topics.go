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
		name := ""
		switch {
		case tg.name != nil && *tg.name != "":
			name = *tg.name
			if t := s.eng.Topic(name); t != nil {
				tr.TopicID = t.ID
			}
		case tg.id != [16]byte{}:
			if t := s.eng.TopicByID(engine.TopicID(tg.id)); t != nil {
				name = t.Name
				n := t.Name
				tr.Topic = &n
			} else {
				err = fmt.Errorf("%w: no topic has id %s", kerr.UnknownTopicID, engine.TopicID(tg.id))
			}
		default:
			err = fmt.Errorf("%w: neither a topic name nor an id", kerr.InvalidRequest)
		}
		if err == nil && !r.topicAllowed(kmsg.ACLOperationDelete, name) {
			err = kerr.TopicAuthorizationFailed
		}
		if err == nil {
			err = s.eng.DeleteTopic(name)
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
