package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteGroups, key 42, versions 0-2.
//
//   - Deletes a group with no members and its committed offsets
//     (tombstones in __consumer_offsets). A group with members gets
//     NON_EMPTY_GROUP; an unknown one GROUP_ID_NOT_FOUND.

func handleDeleteGroups(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDeleteGroupsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, id := range req.Groups {
		var err error = kerr.GroupAuthorizationFailed
		if r.groupAllowed(kmsg.ACLOperationDelete, id) {
			err = s.eng.Coordinator().DeleteGroup(id)
		}
		g := kmsg.NewDeleteGroupsResponseGroup()
		g.Group, g.ErrorCode, g.ErrorMessage = id, errCode(err), errMessage(err)
		r.failed = r.failed || err != nil
		resp.Groups = append(resp.Groups, g)
	}
	r.respond(resp)
	return frameDone
}
