package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// LeaveGroup, key 13, versions 0-5.
//
//   - v0-2: one member by id; v3+: a batch of members by id or static
//     instance id, each with its own answer. The others rebalance at once
//     instead of waiting for the leaver's session to time out.

func handleLeaveGroup(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrLeaveGroupRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	g, err := s.eng.Coordinator().Group(req.Group, false)
	if !r.groupAllowed(kmsg.ACLOperationRead, req.Group) {
		g, err = nil, kerr.GroupAuthorizationFailed
	}
	if err == nil && g == nil {
		err = unknownMember(req.Group)
	}
	if err != nil {
		resp.ErrorCode = errCode(err)
		r.failed = true
		r.respond(resp)
		return frameDone
	}
	var leaves []engine.LeaveMember
	if r.version < 3 {
		leaves = []engine.LeaveMember{{MemberID: req.MemberID}}
	} else {
		for _, m := range req.Members {
			leaves = append(leaves, engine.LeaveMember{MemberID: m.MemberID, InstanceID: m.InstanceID})
		}
	}
	g.LeaveThen(leaves, func(errs []error) { answerLeave(r, req, resp, errs) })
	return frameDone
}

// answerLeave sends LeaveGroup's answer: one error, or one per member.
func answerLeave(r *request, req *kmsg.LeaveGroupRequest, resp *kmsg.LeaveGroupResponse, errs []error) {
	if r.version < 3 {
		resp.ErrorCode = errCode(errs[0])
		r.failed = errs[0] != nil
	} else {
		for i, m := range req.Members {
			rm := kmsg.NewLeaveGroupResponseMember()
			rm.MemberID, rm.InstanceID, rm.ErrorCode = m.MemberID, m.InstanceID, errCode(errs[i])
			r.failed = r.failed || errs[i] != nil
			resp.Members = append(resp.Members, rm)
		}
	}
	r.respond(resp)
}
