package netio

import (
	"bytes"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// JoinGroup, key 11, versions 0-9.
//
//   - The classic protocol's join phase (engine/group.go has the state
//     machine): the answer comes when the generation forms, after every
//     member rejoined or the rebalance timeout (and, for a new group,
//     group.initial.rebalance.delay.ms, so a starting fleet forms one
//     generation).
//   - v4+: a member without an id gets MEMBER_ID_REQUIRED and its id, and
//     rejoins with it (KIP-394); kafka-go (v2) joins directly.
//   - v5+: static members (group.instance.id) keep their assignment across
//     restarts without a rebalance; v9 tells a rejoining static leader to
//     skip the assignment.
//   - v0 has no rebalance timeout: the session timeout is used.
//   - Session timeouts outside group.min/max.session.timeout.ms get
//     INVALID_SESSION_TIMEOUT; a protocol type or set of protocols the
//     members do not share gets INCONSISTENT_GROUP_PROTOCOL.

func handleJoinGroup(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrJoinGroupRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	g, err := (*engine.Group)(nil), error(nil)
	if r.groupAllowed(kmsg.ACLOperationRead, req.Group) {
		g, err = s.eng.Coordinator().Group(req.Group, true)
	} else {
		err = kerr.GroupAuthorizationFailed // and no group is created
	}
	if err != nil {
		resp.ErrorCode, resp.Generation = errCode(err), -1
		r.failed = true
		r.respond(resp)
		return frameDone
	}
	jr := engine.JoinRequest{
		MemberID: req.MemberID, InstanceID: req.InstanceID, ClientID: clientName(r), ClientHost: "/" + hostOnly(r.conn.remote),
		SessionTimeout:   time.Duration(req.SessionTimeoutMillis) * time.Millisecond,
		RebalanceTimeout: time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond,
		ProtocolType:     req.ProtocolType, RequireKnownMemberID: r.version >= 4,
	}
	if r.version == 0 {
		jr.RebalanceTimeout = jr.SessionTimeout
	}
	for _, p := range req.Protocols {
		// Copied: the request's bytes go back to the pool after the answer.
		jr.Protocols = append(jr.Protocols, engine.Protocol{Name: p.Name, Metadata: bytes.Clone(p.Metadata)})
	}
	g.Join(jr, func(res engine.JoinResult) {
		resp.ErrorCode = errCode(res.Err)
		resp.Generation, resp.LeaderID, resp.MemberID = res.Generation, res.LeaderID, res.MemberID
		if res.Err == nil {
			pt, p := res.ProtocolType, res.Protocol
			resp.ProtocolType, resp.Protocol = &pt, &p
		}
		resp.SkipAssignment = res.SkipAssignment
		for _, m := range res.Members {
			resp.Members = append(resp.Members, kmsg.JoinGroupResponseMember{MemberID: m.MemberID, InstanceID: m.InstanceID, ProtocolMetadata: m.Metadata})
		}
		if r.version < 9 && res.SkipAssignment {
			// Older static leaders cannot be told to skip: they
			// assign again, which Stable SyncGroup ignores.
			resp.SkipAssignment = false
		}
		r.failed = res.Err != nil
		r.respond(resp)
	})
	return frameDone
}

func hostOnly(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i]
		}
	}
	return addr
}
