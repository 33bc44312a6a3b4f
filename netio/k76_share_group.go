package netio

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/sharegroup"
)

// The share-group APIs (KIP-932), served on a single broker only for now
// (in cluster mode the share state would have to move between brokers,
// which is not built): so neither advertised nor served there.
var shareAPITable = []apiHandler{
	{key: 76, name: "ShareGroupHeartbeat", min: 0, max: 1, advMin: 0, async: true, handler: handleShareGroupHeartbeat},
	{key: 77, name: "ShareGroupDescribe", min: 0, max: 1, advMin: 0, handler: handleShareGroupDescribe},
	{key: 78, name: "ShareFetch", min: 1, max: 2, advMin: 1, async: true, handler: handleShareFetch},
	{key: 79, name: "ShareAcknowledge", min: 1, max: 2, advMin: 1, async: true, handler: handleShareAcknowledge},
	{key: 90, name: "DescribeShareGroupOffsets", min: 0, max: 1, advMin: 0, async: true, handler: handleDescribeShareGroupOffsets},
	{key: 91, name: "AlterShareGroupOffsets", min: 0, max: 0, advMin: 0, async: true, handler: handleAlterShareGroupOffsets},
	{key: 92, name: "DeleteShareGroupOffsets", min: 0, max: 0, advMin: 0, async: true, handler: handleDeleteShareGroupOffsets},
}

// ShareGroupHeartbeat, key 76, versions 0-1 (KIP-932).
//
//   - Joins (epoch 0, the client's own member id), heartbeats and leaves
//     (epoch -1) a share group. The coordinator assigns every subscribed
//     partition to at least one member; unlike a consumer group a
//     partition may have several, so a join needs no revocation and a
//     member keeps consuming while others come and go.
//   - A member answers with its epoch; the previous epoch is accepted too
//     (an answer may have been lost). Fields left null are unchanged.
//   - Membership is not persisted: after a restart the members get
//     GROUP_ID_NOT_FOUND / UNKNOWN_MEMBER_ID and join again, losing
//     nothing (the records' state is in __share_group_state).
//   - Authorization: READ on the group, DESCRIBE on each subscribed topic.

func handleShareGroupHeartbeat(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
	fail := func(err error) frameOutcome {
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		r.failed = true
		r.respond(resp)
		return frameDone
	}
	if !r.groupAllowed(kmsg.ACLOperationRead, req.GroupID) {
		return fail(kerr.GroupAuthorizationFailed)
	}
	for _, t := range req.SubscribedTopicNames {
		if !r.topicAllowed(kmsg.ACLOperationDescribe, t) {
			return fail(fmt.Errorf("%w: the member may not describe topic %q", kerr.TopicAuthorizationFailed, t))
		}
	}
	if len(req.MemberID) > 64 {
		return fail(fmt.Errorf("%w: a member id of %d characters (at most 64)", kerr.InvalidRequest, len(req.MemberID)))
	}
	for _, t := range req.SubscribedTopicNames {
		if err := engine.ValidateTopicName(t); err != nil {
			return fail(fmt.Errorf("%w: subscribed topic: %w", kerr.InvalidRequest, err))
		}
	}
	memberID := req.MemberID
	if memberID == "" && r.version == 0 && req.MemberEpoch == sharegroup.JoinEpoch {
		memberID = newConsumerMemberID()
	}
	res, err := s.eng.Coordinator().ShareHeartbeat(req.GroupID, sharegroup.Request{
		MemberID: memberID, MemberEpoch: req.MemberEpoch, Rack: req.RackID, Topics: req.SubscribedTopicNames,
		ClientID: clientName(r), ClientHost: "/" + r.conn.host(),
	})
	if err != nil {
		return fail(err)
	}
	id := res.MemberID
	resp.MemberID, resp.MemberEpoch, resp.HeartbeatIntervalMillis = &id, res.MemberEpoch, res.HeartbeatMillis
	if res.Assignment != nil {
		a := kmsg.NewShareGroupHeartbeatResponseAssignment()
		for _, tid := range sortedTopicIDs(res.Assignment) {
			tp := kmsg.NewShareGroupHeartbeatResponseAssignmentTopicPartition()
			tp.TopicID, tp.Partitions = tid, res.Assignment[tid]
			a.TopicPartitions = append(a.TopicPartitions, tp)
		}
		resp.Assignment = &a
	}
	r.respond(resp)
	return frameDone
}

func sortedTopicIDs(a sharegroup.Assignment) [][16]byte {
	ids := make([][16]byte, 0, len(a))
	for id := range a {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y [16]byte) int { return slices.Compare(x[:], y[:]) })
	return ids
}

// ShareGroupDescribe, key 77, versions 0-1 (KIP-932).
//
//   - A share group's state (Empty/Stable), epochs and members with their
//     subscriptions and assignments. Anything else answers
//     GROUP_ID_NOT_FOUND.
//   - Authorization: DESCRIBE on the group.

func handleShareGroupDescribe(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrShareGroupDescribeRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.ShareGroupDescribeResponse)
	for _, id := range req.GroupIDs {
		rg := kmsg.NewShareGroupDescribeResponseGroup()
		rg.GroupID = id
		rg.AuthorizedOperations = notAsked
		if req.IncludeAuthorizedOperations {
			rg.AuthorizedOperations = r.authorizedOps(kmsg.ACLResourceTypeGroup, id, groupOps)
		}
		var d engine.ShareGroupDescription
		ok, err := false, error(nil)
		if !r.groupAllowed(kmsg.ACLOperationDescribe, id) {
			err = kerr.GroupAuthorizationFailed
		} else if d, ok, err = s.eng.Coordinator().ShareGroup(id); err == nil && !ok {
			err = fmt.Errorf("%w: group %q is not a share group", kerr.GroupIDNotFound, id)
		}
		if err != nil {
			rg.ErrorCode, rg.ErrorMessage = errCode(err), errMessage(err)
			r.failed = true
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.GroupState, rg.GroupEpoch, rg.AssignmentEpoch, rg.Assignor = d.State, d.Epoch, d.Epoch, "simple"
		for _, m := range d.Members {
			rm := kmsg.NewShareGroupDescribeResponseGroupMember()
			rm.MemberID, rm.MemberEpoch, rm.ClientID, rm.ClientHost, rm.RackID = m.ID, m.Epoch, m.ClientID, m.ClientHost, m.Rack
			rm.SubscribedTopicNames = m.Topics
			if rm.SubscribedTopicNames == nil {
				rm.SubscribedTopicNames = []string{}
			}
			for _, tid := range sortedTopicIDs(m.Assigned) {
				t := s.eng.TopicByID(engine.TopicID(tid))
				if t == nil {
					continue
				}
				tp := kmsg.NewShareGroupDescribeResponseGroupMemberAssignmentTopicPartition()
				tp.TopicID, tp.Topic, tp.Partitions = tid, t.Name, m.Assigned[tid]
				rm.Assignment.TopicPartitions = append(rm.Assignment.TopicPartitions, tp)
			}
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	r.respond(resp)
	return frameDone
}

// DescribeShareGroupOffsets, key 90, versions 0-1; AlterShareGroupOffsets,
// key 91, and DeleteShareGroupOffsets, key 92, version 0 (KIP-932).
//
//   - A share group's start offset (SPSO) per partition, with the lag to
//     the high watermark (v1). Topics null: every partition the group has
//     a state of.
//   - Alter sets start offsets (between the log start and the high
//     watermark) and drops the in-flight state; it creates a group never
//     seen, and refuses one with members (NON_EMPTY_GROUP). Delete drops
//     the state of whole topics, likewise only with no member.
//   - Authorization: DESCRIBE (describe), READ (alter) or DELETE (delete)
//     on the group, and READ on each topic (TOPIC_AUTHORIZATION_FAILED for
//     it; a describe of all topics leaves out those the principal may not
//     DESCRIBE).

func handleDescribeShareGroupOffsets(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
	for _, g := range req.Groups {
		rg := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		rg.GroupID = g.GroupID
		var topics map[string][]int32
		if g.Topics != nil {
			topics = map[string][]int32{}
			for _, t := range g.Topics {
				topics[t.Topic] = append(topics[t.Topic], t.Partitions...)
			}
		}
		var offs []engine.ShareOffset
		err := error(kerr.GroupAuthorizationFailed)
		if r.groupAllowed(kmsg.ACLOperationDescribe, g.GroupID) {
			offs, err = s.eng.Coordinator().ShareOffsets(g.GroupID, topics)
		}
		if err != nil {
			rg.ErrorCode, rg.ErrorMessage = errCode(err), errMessage(err)
			r.failed = true
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		byTopic := map[string]int{}
		for _, o := range offs {
			if topics == nil && !r.topicAllowed(kmsg.ACLOperationDescribe, o.Topic) {
				continue // all topics: only those the principal may see, named
			}
			i, ok := byTopic[o.Topic]
			if !ok {
				rt := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
				rt.Topic, rt.TopicID = o.Topic, o.TopicID
				rg.Topics = append(rg.Topics, rt)
				i = len(rg.Topics) - 1
				byTopic[o.Topic] = i
			}
			rp := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
			rp.Partition, rp.StartOffset, rp.LeaderEpoch, rp.Lag = o.Partition, o.StartOffset, o.LeaderEpoch, o.Lag
			err := o.Err
			if err == nil && !r.topicAllowed(kmsg.ACLOperationRead, o.Topic) {
				err = kerr.TopicAuthorizationFailed
				rp.StartOffset, rp.Lag = -1, -1
			}
			if err != nil {
				rp.ErrorCode, rp.ErrorMessage = errCode(err), errMessage(err)
			} else if o.Live {
				rp.UnknownTags.Set(InFlightTag, appendInFlight(nil, o.Acquired, o.Redeliver))
			}
			rg.Topics[i].Partitions = append(rg.Topics[i].Partitions, rp)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	r.respond(resp)
	return frameDone
}

// InFlightTag is ringlog's tagged field on a DescribeShareGroupOffsets
// partition (a tag number far from Kafka's, which clients skip): two
// int32s, the records acquired by members now and those waiting for
// another delivery, when the share-partition is live on the broker.
// `ringlog group describe` shows them.
const InFlightTag = 10000

func appendInFlight(dst []byte, acquired, redeliver int) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(acquired))
	return binary.BigEndian.AppendUint32(dst, uint32(redeliver))
}

// ReadInFlight decodes InFlightTag's value.
func ReadInFlight(b []byte) (acquired, redeliver int, ok bool) {
	if len(b) != 8 {
		return 0, 0, false
	}
	return int(int32(binary.BigEndian.Uint32(b))), int(int32(binary.BigEndian.Uint32(b[4:]))), true
}

func handleAlterShareGroupOffsets(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrAlterShareGroupOffsetsRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.AlterShareGroupOffsetsResponse)
	topics := map[string]map[int32]int64{}
	denied := map[string]bool{}
	for _, t := range req.Topics {
		if !r.topicAllowed(kmsg.ACLOperationRead, t.Topic) {
			denied[t.Topic] = true
			continue
		}
		if topics[t.Topic] == nil {
			topics[t.Topic] = map[int32]int64{}
		}
		for _, p := range t.Partitions {
			topics[t.Topic][p.Partition] = p.StartOffset
		}
	}
	var errs map[string]map[int32]error
	err := error(kerr.GroupAuthorizationFailed)
	if r.groupAllowed(kmsg.ACLOperationRead, req.GroupID) {
		errs, err = s.eng.Coordinator().AlterShareOffsets(req.GroupID, topics)
	}
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		r.failed = true
	}
	for _, t := range req.Topics {
		rt := kmsg.NewAlterShareGroupOffsetsResponseTopic()
		rt.Topic = t.Topic
		if tp := s.eng.Topic(t.Topic); tp != nil && !denied[t.Topic] {
			rt.TopicID = tp.ID
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			perr := err
			if denied[t.Topic] {
				perr = kerr.TopicAuthorizationFailed
			} else if perr == nil {
				perr = errs[t.Topic][p.Partition]
			}
			if perr != nil {
				rp.ErrorCode, rp.ErrorMessage = errCode(perr), errMessage(perr)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.respond(resp)
	return frameDone
}

func handleDeleteShareGroupOffsets(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.DeleteShareGroupOffsetsResponse)
	var names []string
	denied := map[string]bool{}
	for _, t := range req.Topics {
		if !r.topicAllowed(kmsg.ACLOperationRead, t.Topic) {
			denied[t.Topic] = true
			continue
		}
		names = append(names, t.Topic)
	}
	var errs map[string]error
	err := error(kerr.GroupAuthorizationFailed)
	if r.groupAllowed(kmsg.ACLOperationDelete, req.GroupID) {
		errs, err = s.eng.Coordinator().DeleteShareOffsets(req.GroupID, names)
	}
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		r.failed = true
	}
	for _, t := range req.Topics {
		rt := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
		rt.Topic = t.Topic
		terr := err
		if denied[t.Topic] {
			terr = kerr.TopicAuthorizationFailed
		} else if terr == nil {
			terr = errs[t.Topic]
		}
		if tp := s.eng.Topic(t.Topic); tp != nil && !denied[t.Topic] {
			rt.TopicID = tp.ID
		}
		if terr != nil {
			rt.ErrorCode, rt.ErrorMessage = errCode(terr), errMessage(terr)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.respond(resp)
	return frameDone
}
