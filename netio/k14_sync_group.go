package netio

import (
	"bytes"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// SyncGroup, key 14, versions 0-5.
//
//   - The leader sends every member's assignment; once the generation is
//     stored in __consumer_offsets each member gets its own part (and only
//     its own). Members' SyncGroups wait for the leader's.
//   - A stable group answers a member's SyncGroup with its assignment at
//     once.
//   - Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS,
//     FENCED_INSTANCE_ID, and (v5) INCONSISTENT_GROUP_PROTOCOL when the
//     protocol type or name does not match the group's.

func handleSyncGroup(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrSyncGroupRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	g, err := s.eng.Coordinator().Group(req.Group, false)
	if !r.groupAllowed(kmsg.ACLOperationRead, req.Group) {
		g, err = nil, kerr.GroupAuthorizationFailed
	}
	if err != nil || g == nil {
		if err == nil {
			resp.ErrorCode = errCode(unknownMember(req.Group))
		} else {
			resp.ErrorCode = errCode(err)
		}
		r.failed = true
		r.respond(resp)
		return frameDone
	}
	sr := engine.SyncRequest{MemberID: req.MemberID, InstanceID: req.InstanceID, Generation: req.Generation,
		ProtocolType: req.ProtocolType, Protocol: req.Protocol, Assignments: map[string][]byte{}}
	for _, a := range req.GroupAssignment {
		// Copied: the request's bytes go back to the pool after the answer.
		sr.Assignments[a.MemberID] = bytes.Clone(a.MemberAssignment)
	}
	g.Sync(sr, func(res engine.SyncResult) {
		resp.ErrorCode = errCode(res.Err)
		if res.Err == nil {
			pt, p := res.ProtocolType, res.Protocol
			resp.ProtocolType, resp.Protocol = &pt, &p
			resp.MemberAssignment = res.Assignment
			if resp.MemberAssignment == nil {
				resp.MemberAssignment = []byte{}
			}
		}
		r.failed = res.Err != nil
		r.respond(resp)
	})
	return frameDone
}
