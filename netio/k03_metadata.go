package netio

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// Metadata, key 3, versions 0-13.
//
//   - One broker (this one, at the advertised address), which leads every
//     partition with leader epoch 0; replicas and ISR are [this node].
//   - Null topics (v1+), or an empty list in v0, means every topic,
//     __consumer_offsets included (marked internal), as Kafka does.
//   - Unknown topics are created when the broker allows it and the request
//     does (always before v4, AllowAutoTopicCreation from v4), else
//     UNKNOWN_TOPIC_OR_PARTITION; invalid names INVALID_TOPIC_EXCEPTION.
//   - Topics by id from v10 (null name); an unknown id is UNKNOWN_TOPIC_ID.
//   - A partition whose log is offline has no leader (LEADER_NOT_AVAILABLE)
//     and lists this node as an offline replica.
//   - With the authorizer on, topics without DESCRIBE are left out of an
//     all-topics answer and are TOPIC_AUTHORIZATION_FAILED when named
//     (whether they exist or not); auto-creation needs CREATE on the
//     topic or the cluster. Authorized operations (v8+) are those the
//     ACLs allow; without the authorizer, all of them.

// Operation bit sets, as Kafka encodes authorized operations (bit n set
// for AclOperation n).
const (
	topicOps   int32 = 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<8 | 1<<10 | 1<<11
	clusterOps int32 = 1<<5 | 1<<7 | 1<<8 | 1<<9 | 1<<10 | 1<<11 | 1<<12
	groupOps   int32 = 1<<3 | 1<<6 | 1<<8
	notAsked   int32 = -2147483648
)

func handleMetadata(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrMetadataRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	if s.cfg.Cluster != nil {
		s.clusterMetadata(r, req)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	host, port := s.Advertised()
	resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: s.eng.NodeID(), Host: host, Port: port}}
	cid := s.eng.ClusterID()
	resp.ClusterID = &cid
	resp.ControllerID = s.eng.NodeID()
	resp.AuthorizedOperations = notAsked
	if req.IncludeClusterAuthorizedOperations {
		resp.AuthorizedOperations = r.authorizedOps(kmsg.ACLResourceTypeCluster, clusterResource, clusterOps)
	}
	all := req.Topics == nil || (r.version == 0 && len(req.Topics) == 0)
	if all {
		for _, t := range s.eng.Topics() {
			if r.topicAllowed(kmsg.ACLOperationDescribe, t.Name) {
				resp.Topics = append(resp.Topics, s.metadataTopic(r, t, req))
			}
		}
	} else {
		autoOK := s.eng.AutoCreateTopics() && (r.version < 4 || req.AllowAutoTopicCreation)
		for _, rt := range req.Topics {
			var t *engine.Topic
			var err error
			switch {
			case rt.Topic == nil && r.version >= 10:
				t = s.eng.TopicByID(engine.TopicID(rt.TopicID))
				if t == nil {
					resp.Topics = append(resp.Topics, kmsg.MetadataResponseTopic{ErrorCode: kerr.UnknownTopicID.Code, TopicID: rt.TopicID, AuthorizedOperations: notAsked})
					continue
				}
			case rt.Topic == nil:
				resp.Topics = append(resp.Topics, kmsg.MetadataResponseTopic{ErrorCode: kerr.InvalidTopicException.Code, AuthorizedOperations: notAsked})
				continue
			case !r.topicAllowed(kmsg.ACLOperationDescribe, *rt.Topic):
				// Whether it exists or not: no DESCRIBE, no answer.
				err = kerr.TopicAuthorizationFailed
			default:
				t = s.eng.Topic(*rt.Topic)
				if t == nil {
					if verr := engine.ValidateTopicName(*rt.Topic); verr != nil {
						err = verr
					} else if autoOK && r.mayCreateTopic(*rt.Topic) {
						t, err = s.eng.GetOrCreateTopic(*rt.Topic)
					} else {
						err = kerr.UnknownTopicOrPartition
					}
				}
			}
			if err != nil || t == nil {
				code := errCode(err)
				if errors.Is(err, kerr.TopicAlreadyExists) {
					code = kerr.LeaderNotAvailable.Code
				}
				resp.Topics = append(resp.Topics, kmsg.MetadataResponseTopic{ErrorCode: code, Topic: rt.Topic, AuthorizedOperations: notAsked})
				r.failed = true
				continue
			}
			if rt.Topic == nil && !r.topicAllowed(kmsg.ACLOperationDescribe, t.Name) {
				resp.Topics = append(resp.Topics, kmsg.MetadataResponseTopic{ErrorCode: kerr.TopicAuthorizationFailed.Code, TopicID: rt.TopicID, AuthorizedOperations: notAsked})
				r.failed = true
				continue
			}
			resp.Topics = append(resp.Topics, s.metadataTopic(r, t, req))
		}
	}
	r.respond(resp)
	return frameDone
}

func (s *Server) metadataTopic(r *request, t *engine.Topic, req *kmsg.MetadataRequest) kmsg.MetadataResponseTopic {
	name := t.Name
	mt := kmsg.MetadataResponseTopic{Topic: &name, TopicID: t.ID, IsInternal: t.Internal, AuthorizedOperations: notAsked}
	if req.IncludeTopicAuthorizedOperations {
		mt.AuthorizedOperations = r.authorizedOps(kmsg.ACLResourceTypeTopic, t.Name, topicOps)
	}
	node := s.eng.NodeID()
	for _, p := range t.Partitions() {
		mp := kmsg.MetadataResponseTopicPartition{Partition: p.Index, Leader: node, LeaderEpoch: p.LeaderEpoch(),
			Replicas: []int32{node}, ISR: []int32{node}, OfflineReplicas: []int32{}}
		if _, err := p.Log(); err != nil {
			mp.ErrorCode = kerr.LeaderNotAvailable.Code
			mp.Leader = -1
			mp.ISR = []int32{}
			mp.OfflineReplicas = []int32{node}
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}
