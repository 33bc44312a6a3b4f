package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeCluster, key 60, versions 0-2.
//
//   - This broker is the whole cluster and its controller.
//   - EndpointType (v1+) 2 (controllers) gets UNSUPPORTED_ENDPOINT_TYPE:
//     there is no separate controller quorum to describe.
//   - No broker is ever fenced (v2 IncludeFencedBrokers changes nothing).

func handleDescribeCluster(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDescribeClusterRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	if r.version >= 1 && req.EndpointType == 2 {
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		r.failed = true
		r.respond(resp)
		return frameDone
	}
	if s.cfg.Cluster != nil {
		s.clusterDescribe(r, req)
		return frameDone
	}
	host, port := s.Advertised()
	resp.ClusterID = s.eng.ClusterID()
	resp.ControllerID = s.eng.NodeID()
	resp.EndpointType = 1
	resp.Brokers = []kmsg.DescribeClusterResponseBroker{{NodeID: s.eng.NodeID(), Host: host, Port: port}}
	resp.ClusterAuthorizedOperations = notAsked
	if !r.clusterAllowed(kmsg.ACLOperationDescribe) {
		resp.ErrorCode, resp.Brokers = kerr.ClusterAuthorizationFailed.Code, nil
		r.failed = true
	}
	if req.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = r.authorizedOps(kmsg.ACLResourceTypeCluster, clusterResource, clusterOps)
	}
	r.respond(resp)
	return frameDone
}
