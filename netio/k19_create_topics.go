package netio

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// CreateTopics, key 19, versions 0-7.
//
//   - NumPartitions and ReplicationFactor -1 (v4+) take the broker
//     defaults; a replication factor other than 1 gets
//     INVALID_REPLICATION_FACTOR (one broker).
//   - A manual assignment is accepted when every partition's replicas are
//     exactly this broker.
//   - Names follow Kafka's rules; a name that differs from an existing one
//     only in '.' versus '_' or in letter case is refused with
//     INVALID_TOPIC_EXCEPTION (they would collide).
//   - Every config key is checked against the table of configs ringlog
//     implements; an unknown key or bad value is INVALID_CONFIG.
//   - ValidateOnly (v1+) checks everything and creates nothing.
//   - v5+ answers with the partition count, replication factor and the
//     topic's configs; v7 with the topic id.

func handleCreateTopics(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrCreateTopicsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	if s.clusterAdmin(r, req) {
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	seen := map[string]int{}
	for _, rt := range req.Topics {
		seen[rt.Topic]++
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewCreateTopicsResponseTopic()
		tr.Topic = rt.Topic
		tr.NumPartitions, tr.ReplicationFactor = -1, -1
		var err error = kerr.TopicAuthorizationFailed
		if r.mayCreateTopic(rt.Topic) {
			err = s.createTopic(&rt, req.ValidateOnly, seen[rt.Topic] > 1, &tr)
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

func (s *Server) createTopic(rt *kmsg.CreateTopicsRequestTopic, validateOnly, duplicate bool, tr *kmsg.CreateTopicsResponseTopic) error {
	if duplicate {
		return fmt.Errorf("%w: topic %q appears more than once in the request", kerr.InvalidRequest, rt.Topic)
	}
	partitions, rf := rt.NumPartitions, rt.ReplicationFactor
	if len(rt.ReplicaAssignment) > 0 {
		if partitions != -1 || rf != -1 {
			return fmt.Errorf("%w: give either a replica assignment or partition count and replication factor", kerr.InvalidRequest)
		}
		for _, a := range rt.ReplicaAssignment {
			if len(a.Replicas) != 1 || a.Replicas[0] != s.eng.NodeID() {
				return fmt.Errorf("%w: partition %d assigned to %v; the only broker is %d", kerr.InvalidReplicaAssignment, a.Partition, a.Replicas, s.eng.NodeID())
			}
		}
		partitions, rf = int32(len(rt.ReplicaAssignment)), 1
	}
	configs := map[string]string{}
	for _, c := range rt.Configs {
		if c.Value == nil {
			continue
		}
		configs[c.Name] = *c.Value
	}
	t, err := s.eng.CreateTopic(engine.CreateTopicRequest{
		Name: rt.Topic, Partitions: partitions, ReplicationFactor: rf, Configs: configs, ValidateOnly: validateOnly,
	})
	if err != nil {
		return err
	}
	if partitions == -1 {
		partitions = s.eng.DefaultPartitions()
	}
	tr.NumPartitions, tr.ReplicationFactor = partitions, 1
	if t != nil {
		tr.TopicID = t.ID
		for _, ent := range s.eng.DescribeTopicConfig(t) {
			v := ent.Value
			c := kmsg.NewCreateTopicsResponseTopicConfig()
			c.Name, c.Value, c.ReadOnly, c.Source, c.IsSensitive = ent.Name, &v, ent.ReadOnly, int8(ent.Source), ent.Sensitive
			tr.Configs = append(tr.Configs, c)
		}
	}
	return nil
}
