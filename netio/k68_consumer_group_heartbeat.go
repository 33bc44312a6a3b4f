package netio

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/consumergroup"
)

// ConsumerGroupHeartbeat, key 68, versions 0-1 (KIP-848).
//
//   - The consumer protocol: one request joins (epoch 0), heartbeats,
//     reports the partitions the member owns, and leaves (epoch -1, or -2
//     for a static member that will come back). The coordinator computes
//     the assignment (server-side assignors "uniform" and "range") and
//     hands it out incrementally: a partition is revoked from its owner
//     before another member gets it, and nobody stops consuming the
//     partitions it keeps (engine/consumergroup has the state machine).
//   - v0: a joining member without an id is given one; v1 clients choose
//     their own (KIP-1082), and an empty id is INVALID_REQUEST.
//   - Authorization: READ on the group; DESCRIBE on every topic subscribed
//     by name (TOPIC_AUTHORIZATION_FAILED otherwise). A regex resolves
//     only to the topics the member's principal may DESCRIBE.
//   - Fields left null mean "unchanged since the last heartbeat".
//   - Async: a heartbeat that changes the group's state is answered only
//     once the change is durable in __consumer_offsets (Kafka's
//     consumer-group records), so a coordinator that takes over (or
//     restarts) resumes the group with its members, epochs and
//     assignments instead of a full rebalance.

func handleConsumerGroupHeartbeat(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	fail := func(err error) frameOutcome {
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		r.failed = true
		r.respond(resp)
		return frameDone
	}
	if !r.groupAllowed(kmsg.ACLOperationRead, req.Group) {
		return fail(kerr.GroupAuthorizationFailed)
	}
	for _, t := range req.SubscribedTopicNames {
		if !r.topicAllowed(kmsg.ACLOperationDescribe, t) {
			return fail(fmt.Errorf("%w: the member may not describe topic %q", kerr.TopicAuthorizationFailed, t))
		}
	}
	memberID := req.MemberID
	if memberID == "" && r.version == 0 && req.MemberEpoch == consumergroup.JoinEpoch {
		memberID = newConsumerMemberID()
	}
	cr := consumergroup.Request{
		MemberID: memberID, Epoch: req.MemberEpoch, InstanceID: req.InstanceID, RackID: req.RackID,
		RebalanceTimeout: time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond,
		SubscribedTopics: req.SubscribedTopicNames, SubscribedRegex: req.SubscribedTopicRegex, ServerAssignor: req.ServerAssignor,
		ClientID: clientName(r), ClientHost: "/" + r.conn.host(),
	}
	if req.RebalanceTimeoutMillis < 0 {
		cr.RebalanceTimeout = -1
	}
	if req.Topics != nil {
		cr.Owned = consumergroup.Assignment{}
		for _, t := range req.Topics {
			cr.Owned[t.TopicID] = append(cr.Owned[t.TopicID], t.Partitions...)
		}
		cr.Owned = consumergroup.Normalize(cr.Owned)
	}
	if a := s.cfg.Security.Authorizer; a != nil {
		principal, host := r.conn.principal(), r.conn.host()
		cr.RegexAllowed = func(topic string) bool {
			return a.Authorize(principal, host, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, topic)
		}
	}
	res, err := s.eng.Coordinator().ConsumerHeartbeat(req.Group, cr)
	if err != nil {
		return fail(err)
	}
	id := res.MemberID
	resp.MemberID, resp.MemberEpoch = &id, res.Epoch
	resp.HeartbeatIntervalMillis = int32(res.HeartbeatInterval.Milliseconds())
	if res.Assignment != nil {
		a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		a.Topics = assignmentTopics(res.Assignment)
		resp.Assignment = &a
	}
	r.respond(resp)
	return frameDone
}

// assignmentTopics is an assignment in the heartbeat's wire form, topics
// sorted by id.
func assignmentTopics(a consumergroup.Assignment) []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic {
	out := make([]kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic, 0, len(a))
	for _, id := range a.TopicIDs() {
		t := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
		t.TopicID, t.Partitions = id, a[id]
		out = append(out, t)
	}
	return out
}

// newConsumerMemberID is a member id for a v0 joiner (22 characters of
// URL-safe base64, like Kafka's Uuid strings).
func newConsumerMemberID() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ConsumerGroupDescribe, key 69, versions 0-1 (KIP-848).
//
//   - A consumer-protocol group's state, group epoch, assignment epoch and
//     assignor, and each member's epoch, subscription, current and target
//     assignment. A classic or unknown group answers GROUP_ID_NOT_FOUND.
//   - Authorization: DESCRIBE on the group, and on every topic its members
//     subscribe to or are assigned (TOPIC_AUTHORIZATION_FAILED for the
//     group otherwise, as in Kafka: the answer would name them).

func handleConsumerGroupDescribe(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	co := s.eng.Coordinator()
	for _, id := range req.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group = id
		rg.AuthorizedOperations = notAsked
		if req.IncludeAuthorizedOperations {
			rg.AuthorizedOperations = r.authorizedOps(kmsg.ACLResourceTypeGroup, id, groupOps)
		}
		var d engine.ConsumerGroupDescription
		ok, err := false, error(nil)
		if !r.groupAllowed(kmsg.ACLOperationDescribe, id) {
			err = kerr.GroupAuthorizationFailed
		} else if d, ok, err = co.ConsumerGroup(id); err == nil && !ok {
			err = fmt.Errorf("%w: group %q is not a consumer-protocol group", kerr.GroupIDNotFound, id)
		}
		if err == nil {
			err = r.describableTopics(s, d)
		}
		if err != nil {
			rg.ErrorCode, rg.ErrorMessage = errCode(err), errMessage(err)
			r.failed = true
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State, rg.Epoch, rg.AssignmentEpoch, rg.AssignorName = d.State, d.Epoch, d.AssignmentEpoch, d.Assignor
		for _, m := range d.Members {
			rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
			rm.MemberID, rm.MemberEpoch, rm.ClientID, rm.ClientHost = m.MemberID, m.Epoch, m.ClientID, m.ClientHost
			if m.InstanceID != "" {
				inst := m.InstanceID
				rm.InstanceID = &inst
			}
			if m.RackID != "" {
				rack := m.RackID
				rm.RackID = &rack
			}
			rm.SubscribedTopics = m.Topics
			if rm.SubscribedTopics == nil {
				rm.SubscribedTopics = []string{}
			}
			if m.Regex != "" {
				re := m.Regex
				rm.SubscribedTopicRegex = &re
			}
			rm.Assignment.TopicPartitions = describedAssignment(s, m.Assigned)
			rm.TargetAssignment.TopicPartitions = describedAssignment(s, m.Target)
			rm.MemberType = 1 // the consumer protocol
			if m.Classic {
				rm.MemberType = 0 // a classic member of a group migrating between the protocols
			}
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	r.respond(resp)
	return frameDone
}

func describedAssignment(s *Server, a consumergroup.Assignment) []kmsg.AssignmentTopicPartition {
	out := []kmsg.AssignmentTopicPartition{}
	for _, id := range a.TopicIDs() {
		t := s.eng.TopicByID(engine.TopicID(id)) // describable: describableTopics checked
		if t == nil {
			continue
		}
		at := kmsg.NewAssignmentTopicPartition()
		at.TopicID, at.Topic, at.Partitions = id, t.Name, a[id]
		out = append(out, at)
	}
	return out
}

// describableTopics refuses to describe a group that names a topic the
// principal may not DESCRIBE, in a subscription, a regex's resolution or
// an assignment.
func (r *request) describableTopics(s *Server, d engine.ConsumerGroupDescription) error {
	if s.cfg.Security.Authorizer == nil {
		return nil
	}
	check := func(name string) error {
		if !r.topicAllowed(kmsg.ACLOperationDescribe, name) {
			return fmt.Errorf("%w: the group's members use topics the principal may not describe", kerr.TopicAuthorizationFailed)
		}
		return nil
	}
	for _, m := range d.Members {
		for _, t := range m.Topics {
			if err := check(t); err != nil {
				return err
			}
		}
		for _, a := range []consumergroup.Assignment{m.Assigned, m.Target} {
			for id := range a {
				if t := s.eng.TopicByID(engine.TopicID(id)); t != nil {
					if err := check(t.Name); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}
