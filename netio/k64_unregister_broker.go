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
	return answerAtController(s, r, kmsg.NewPtrUnregisterBrokerRequest(), kmsg.ACLOperationAlter, clusterAdminTimeout,
		func(kr kmsg.Response, code int16, msg *string) {
			resp := kr.(*kmsg.UnregisterBrokerResponse)
			resp.ErrorCode, resp.ErrorMessage = code, msg
		},
		func(ctx context.Context, req *kmsg.UnregisterBrokerRequest) error {
			return s.cfg.Cluster.UnregisterBroker(ctx, req.BrokerID)
		})
}
