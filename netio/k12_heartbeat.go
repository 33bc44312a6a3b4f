package netio

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Heartbeat, key 12, versions 0-4.
//
//   - Keeps a member's session alive. REBALANCE_IN_PROGRESS tells it to
//     rejoin; UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION and FENCED_INSTANCE_ID
//     that it was dropped or is stale.

func unknownMember(group string) error {
	return fmt.Errorf("%w: group %q has no such member", kerr.UnknownMemberID, group)
}

func handleHeartbeat(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrHeartbeatRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	g, err := s.eng.Coordinator().Group(req.Group, false)
	if !r.groupAllowed(kmsg.ACLOperationRead, req.Group) {
		g, err = nil, kerr.GroupAuthorizationFailed
	}
	if err == nil && g == nil {
		err = unknownMember(req.Group)
	}
	if err == nil {
		err = g.Heartbeat(req.MemberID, req.InstanceID, req.Generation)
	}
	resp.ErrorCode = errCode(err)
	r.failed = err != nil
	r.respond(resp)
	return frameDone
}
