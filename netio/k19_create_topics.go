package netio

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/admin"
)

// CreateTopics, key 19, versions 0-7.
//
//   - The same path in cluster mode (admin.go): the controller creates,
//     another broker forwards.
//   - NumPartitions and ReplicationFactor -1 (v4+) take the broker
//     defaults; a replication factor larger than the live brokers gets
//     INVALID_REPLICATION_FACTOR.
//   - A manual assignment names partitions 0 to n-1 once each, every one
//     with the same number of live, distinct brokers.
//   - Names follow Kafka's rules; a name that differs from an existing one
//     only in '.' versus '_' or in letter case is refused with
//     INVALID_TOPIC_EXCEPTION (they would collide).
//   - Every config key is checked against the table of configs ringlog
//     implements; an unknown key or bad value is INVALID_CONFIG.
//   - ValidateOnly (v1+) checks everything and creates nothing.
//   - v5+ answers with the partition count, replication factor and the
//     topic's configs (those only with DESCRIBE_CONFIGS on the topic,
//     else ConfigErrorCode TOPIC_AUTHORIZATION_FAILED); v7 with the
//     topic id.

func handleCreateTopics(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrCreateTopicsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	seen := map[string]int{}
	for _, rt := range req.Topics {
		seen[rt.Topic]++
	}
	answer := func(rt kmsg.CreateTopicsRequestTopic, t admin.Topic, err error) kmsg.CreateTopicsResponseTopic {
		tr := kmsg.NewCreateTopicsResponseTopic()
		tr.Topic = rt.Topic
		tr.NumPartitions, tr.ReplicationFactor = -1, -1
		if err != nil {
			tr.ErrorCode, tr.ErrorMessage = errCode(err), errMessage(err)
			r.failed = true
			return tr
		}
		tr.TopicID, tr.NumPartitions, tr.ReplicationFactor = t.ID, t.Partitions, t.ReplicationFactor
		if r.version >= 5 && !r.topicAllowed(kmsg.ACLOperationDescribeConfigs, rt.Topic) {
			// As Kafka: the configs (broker defaults among them) only
			// to whom may describe them.
			tr.ConfigErrorCode = kerr.TopicAuthorizationFailed.Code
		} else if r.version >= 5 {
			for _, ent := range s.eng.DescribeConfigs(t.Configs) {
				v := ent.Value
				c := kmsg.NewCreateTopicsResponseTopicConfig()
				c.Name, c.Value, c.ReadOnly, c.Source, c.IsSensitive = ent.Name, &v, ent.ReadOnly, int8(ent.Source), ent.Sensitive
				tr.Configs = append(tr.Configs, c)
			}
		}
		return tr
	}
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	resp.Topics = adminEntries(r, req.Topics,
		func(rt kmsg.CreateTopicsRequestTopic) (func(context.Context) kmsg.CreateTopicsResponseTopic, kmsg.CreateTopicsResponseTopic) {
			var nt admin.NewTopic
			err := error(kerr.TopicAuthorizationFailed)
			if r.mayCreateTopic(rt.Topic) {
				nt, err = newTopicOf(&rt, seen[rt.Topic] > 1)
			}
			if err != nil {
				return nil, answer(rt, admin.Topic{}, err)
			}
			return func(ctx context.Context) kmsg.CreateTopicsResponseTopic {
				t, err := s.admin.CreateTopic(ctx, nt, req.ValidateOnly)
				return answer(rt, t, err)
			}, kmsg.CreateTopicsResponseTopic{}
		},
		forwardPart(s, r, func(sub []kmsg.CreateTopicsRequestTopic) kmsg.Request { c := *req; c.Topics = sub; return &c },
			func(resp *kmsg.CreateTopicsResponse) []kmsg.CreateTopicsResponseTopic { return resp.Topics }),
		func(rt kmsg.CreateTopicsRequestTopic, err error) kmsg.CreateTopicsResponseTopic {
			return answer(rt, admin.Topic{}, err)
		})
	r.respond(resp)
	return frameDone
}

// newTopicOf is one topic of a CreateTopics request, checked.
func newTopicOf(rt *kmsg.CreateTopicsRequestTopic, duplicate bool) (admin.NewTopic, error) {
	if duplicate {
		return admin.NewTopic{}, fmt.Errorf("%w: topic %q appears more than once in the request", kerr.InvalidRequest, rt.Topic)
	}
	nt := admin.NewTopic{Name: rt.Topic, Partitions: rt.NumPartitions, ReplicationFactor: rt.ReplicationFactor, Configs: map[string]string{}}
	if len(rt.ReplicaAssignment) > 0 {
		nt.Assignment = make([][]int32, len(rt.ReplicaAssignment))
		for _, a := range rt.ReplicaAssignment {
			if a.Partition < 0 || int(a.Partition) >= len(nt.Assignment) || nt.Assignment[a.Partition] != nil {
				return admin.NewTopic{}, fmt.Errorf("%w: the assignment must name partitions 0 to %d once each", kerr.InvalidReplicaAssignment, len(nt.Assignment)-1)
			}
			nt.Assignment[a.Partition] = append([]int32{}, a.Replicas...)
		}
	}
	for _, c := range rt.Configs {
		if c.Value != nil {
			nt.Configs[c.Name] = *c.Value
		}
	}
	return nt, nt.Check()
}
