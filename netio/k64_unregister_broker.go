package netio

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// UnregisterBroker, key 64, version 0 (KIP-631), as kafka-cluster.sh
// unregister sends it: removes a broker's registration for good.
//
//   - Served and advertised in cluster mode only.
//   - The broker must be stopped (fenced, not heard from for a session)
//     and hold no replica (ringlog cluster drain first): else
//     INVALID_REQUEST saying which; BROKER_ID_NOT_REGISTERED for an
//     unknown one. A broker-only node also leaves the metadata quorum.
//   - Needs ALTER on the cluster: without it CLUSTER_AUTHORIZATION_FAILED.
//     Another broker forwards the request to the controller whole.

func handleUnregisterBroker(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrUnregisterBrokerRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.UnregisterBrokerResponse)
	fail := func(err error) {
		r.failed = true
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		r.respond(resp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterAdminTimeout)
	defer cancel()
	if s.atController(ctx, r, req, kmsg.ACLOperationAlter, fail) {
		return frameDone
	}
	if err := s.cfg.Cluster.UnregisterBroker(ctx, req.BrokerID); err != nil {
		fail(err)
		return frameDone
	}
	r.respond(resp)
	return frameDone
}
