package netio

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FindCoordinator, key 10, versions 0-4.
//
//   - On a single broker every group's coordinator is this broker, and so
//     is every transactional id's (key type 1; DESCRIBE on the
//     TRANSACTIONAL_ID). In cluster mode it is the leader of the key's
//     partition of __consumer_offsets (a group) or __transaction_state (a
//     transactional id); COORDINATOR_NOT_AVAILABLE while it has none.
//   - v4 batches keys; each gets its own answer.

func handleFindCoordinator(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrFindCoordinatorRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	host, port := s.Advertised()
	answer := func(key string) (int32, string, int32, error) {
		switch {
		case req.CoordinatorType == 1 && key == "":
			return -1, "", -1, fmt.Errorf("%w: empty transactional id", kerr.InvalidRequest)
		case req.CoordinatorType == 1 && !r.txnIDAllowed(kmsg.ACLOperationDescribe, key):
			return -1, "", -1, kerr.TransactionalIDAuthorizationFailed
		case req.CoordinatorType == 1 && s.cfg.Cluster != nil:
			return s.clusterCoordinator(key, true)
		case req.CoordinatorType == 1:
			return s.eng.NodeID(), host, port, nil
		case req.CoordinatorType != 0:
			return -1, "", -1, fmt.Errorf("%w: coordinator type %d", kerr.InvalidRequest, req.CoordinatorType)
		case key == "":
			return -1, "", -1, fmt.Errorf("%w: empty group id", kerr.InvalidGroupID)
		case !r.groupAllowed(kmsg.ACLOperationDescribe, key):
			return -1, "", -1, kerr.GroupAuthorizationFailed
		case s.cfg.Cluster != nil:
			return s.clusterCoordinator(key, false)
		}
		return s.eng.NodeID(), host, port, nil
	}
	if r.version >= 4 {
		for _, key := range req.CoordinatorKeys {
			id, h, p, err := answer(key)
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.NodeID, c.Host, c.Port = key, id, h, p
			c.ErrorCode, c.ErrorMessage = errCode(err), errMessage(err)
			r.failed = r.failed || err != nil
			resp.Coordinators = append(resp.Coordinators, c)
		}
	} else {
		id, h, p, err := answer(req.CoordinatorKey)
		resp.NodeID, resp.Host, resp.Port = id, h, p
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		r.failed = err != nil
	}
	r.respond(resp)
	return frameDone
}
