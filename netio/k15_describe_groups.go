package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// DescribeGroups, key 15, versions 0-5.
//
//   - State, protocol type, chosen protocol (only when Stable) and members
//     with their client id, host, subscription metadata and assignment.
//   - A share group (KIP-932) answers its state and members, protocol
//     type "share", no metadata.
//   - An unknown group is described as Dead with no members, as Kafka does.

func handleDescribeGroups(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDescribeGroupsRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = id
		rg.AuthorizedOperations = notAsked
		if req.IncludeAuthorizedOperations {
			rg.AuthorizedOperations = r.authorizedOps(kmsg.ACLResourceTypeGroup, id, groupOps)
		}
		g, err := s.eng.Coordinator().Group(id, false)
		switch {
		case !r.groupAllowed(kmsg.ACLOperationDescribe, id):
			rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
			r.failed = true
		case err != nil:
			rg.ErrorCode = kerr.InvalidGroupID.Code
			r.failed = true
		case g == nil:
			rg.State = "Dead"
			if d, ok, _ := s.eng.Coordinator().ShareGroup(id); ok {
				// A share group: its members, no protocol metadata
				// (ShareGroupDescribe has their assignments).
				rg.State, rg.ProtocolType = d.State, engine.ShareTypeName
				for _, m := range d.Members {
					rm := kmsg.NewDescribeGroupsResponseGroupMember()
					rm.MemberID, rm.ClientID, rm.ClientHost = m.ID, m.ClientID, m.ClientHost
					rm.ProtocolMetadata, rm.MemberAssignment = []byte{}, []byte{}
					rg.Members = append(rg.Members, rm)
				}
			}
		default:
			d := g.Describe()
			rg.State, rg.ProtocolType, rg.Protocol = string(d.State), d.ProtocolType, d.Protocol
			for _, m := range d.Members {
				rm := kmsg.NewDescribeGroupsResponseGroupMember()
				rm.MemberID, rm.InstanceID, rm.ClientID, rm.ClientHost = m.MemberID, m.InstanceID, m.ClientID, m.ClientHost
				rm.ProtocolMetadata, rm.MemberAssignment = nonNilBytes(m.Metadata), nonNilBytes(m.Assignment)
				rg.Members = append(rg.Members, rm)
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	r.respond(resp)
	return frameDone
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
