package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// clusterResource is the name of Kafka's one CLUSTER resource.
const clusterResource = "kafka-cluster"

// allowed reports whether the connection's principal may do op on the
// resource; without an authorizer everything is allowed.
func (r *request) allowed(op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	a := r.conn.srv.cfg.Security.Authorizer
	if a == nil {
		return true
	}
	return a.Authorize(r.conn.principal(), r.conn.host(), op, rt, name)
}

// clusterAllowed is allowed for the CLUSTER resource.
func (r *request) clusterAllowed(op kmsg.ACLOperation) bool {
	return r.allowed(op, kmsg.ACLResourceTypeCluster, clusterResource)
}

// topicAllowed is allowed for a TOPIC.
func (r *request) topicAllowed(op kmsg.ACLOperation, topic string) bool {
	return r.allowed(op, kmsg.ACLResourceTypeTopic, topic)
}

// groupAllowed is allowed for a GROUP.
func (r *request) groupAllowed(op kmsg.ACLOperation, group string) bool {
	return r.allowed(op, kmsg.ACLResourceTypeGroup, group)
}

// configAllowed checks a config resource: a topic's as that TOPIC, a
// broker's (and its loggers') as the CLUSTER, as Kafka does.
func (r *request) configAllowed(op kmsg.ACLOperation, rt kmsg.ConfigResourceType, name string) bool {
	switch rt {
	case kmsg.ConfigResourceTypeTopic:
		return r.topicAllowed(op, name)
	case kmsg.ConfigResourceTypeGroupConfig:
		return r.groupAllowed(op, name)
	}
	return r.clusterAllowed(op)
}

// configAuthError is the refusal of a config resource: TOPIC_ or
// CLUSTER_AUTHORIZATION_FAILED.
func configAuthError(rt kmsg.ConfigResourceType) error {
	switch rt {
	case kmsg.ConfigResourceTypeTopic:
		return kerr.TopicAuthorizationFailed
	case kmsg.ConfigResourceTypeGroupConfig:
		return kerr.GroupAuthorizationFailed
	}
	return kerr.ClusterAuthorizationFailed
}

// mayWriteIdempotently: an idempotent producer's InitProducerId needs
// IDEMPOTENT_WRITE on the cluster or WRITE on some topic (Kafka 3.0+).
func (r *request) mayWriteIdempotently() bool {
	if r.conn.srv.cfg.Security.Authorizer == nil || r.clusterAllowed(kmsg.ACLOperationIdempotentWrite) {
		return true
	}
	for _, t := range r.conn.srv.eng.Topics() {
		if r.topicAllowed(kmsg.ACLOperationWrite, t.Name) {
			return true
		}
	}
	return false
}

// mayCreateTopic: CREATE on the cluster or on the topic, as Kafka checks
// CreateTopics and auto-creation.
func (r *request) mayCreateTopic(topic string) bool {
	return r.clusterAllowed(kmsg.ACLOperationCreate) || r.topicAllowed(kmsg.ACLOperationCreate, topic)
}

// authorizedOps is Kafka's authorized-operations bit set for a resource:
// of the operations in candidates (bit n for ACL operation n), those
// allowed.
func (r *request) authorizedOps(rt kmsg.ACLResourceType, name string, candidates int32) int32 {
	if r.conn.srv.cfg.Security.Authorizer == nil {
		return candidates
	}
	var out int32
	for op := 0; op < 31; op++ {
		if candidates&(1<<op) != 0 && r.allowed(kmsg.ACLOperation(op), rt, name) {
			out |= 1 << op
		}
	}
	return out
}
