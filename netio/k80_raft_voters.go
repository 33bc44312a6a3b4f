package netio

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// AddRaftVoter, key 80, versions 0-1, and RemoveRaftVoter, key 81,
// version 0 (KIP-853): change the metadata quorum's voters, as
// kafka-metadata-quorum.sh add-controller and remove-controller do.
//
//   - Served and advertised in cluster mode only. The controller answers;
//     another broker forwards the request whole.
//   - AddRaftVoter promotes a node that runs and has joined the quorum as
//     an observer (a broker-only node, or a voter removed and rejoined):
//     VOTER_NOT_FOUND if it has not, DUPLICATE_VOTER if it is a voter.
//     A listener, if given, must be the address it joined at
//     (INVALID_REQUEST). The controller waits up to TimeoutMillis (at
//     most a minute) for the node to catch up with the metadata
//     (REQUEST_TIMED_OUT if it does not). The answer comes once the
//     change is committed, whatever AckWhenCommitted says.
//   - RemoveRaftVoter: VOTER_NOT_FOUND for a node that is not a voter;
//     INVALID_REQUEST when the voters left that the controller heard from
//     lately would not be a majority.
//   - A ClusterID other than this cluster's: INCONSISTENT_CLUSTER_ID.
//     Directory ids are not checked (ringlog has none: a voter that lost
//     its directory is told apart by its empty Raft log).
//   - Needs ALTER on the cluster: without it CLUSTER_AUTHORIZATION_FAILED.

// maxAddVoterWait bounds AddRaftVoter's wait for the node to catch up.
const maxAddVoterWait = time.Minute

func handleAddRaftVoter(s *Server, r *request) frameOutcome {
	// The wait for the node to catch up is the request's own timeout
	// (at most maxAddVoterWait), on top of the usual one.
	return answerAtController(s, r, kmsg.NewPtrAddRaftVoterRequest(), kmsg.ACLOperationAlter, maxAddVoterWait+clusterAdminTimeout,
		func(kr kmsg.Response, code int16, msg *string) {
			resp := kr.(*kmsg.AddRaftVoterResponse)
			resp.ErrorCode, resp.ErrorMessage = code, msg
		},
		func(ctx context.Context, req *kmsg.AddRaftVoterRequest) error {
			if err := s.checkClusterID(req.ClusterID); err != nil {
				return err
			}
			addr := ""
			if len(req.Listeners) > 0 {
				l := req.Listeners[0]
				if l.Host == "" || l.Port == 0 {
					return fmt.Errorf("%w: listener %q has no host or port", kerr.InvalidRequest, l.Name)
				}
				addr = net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port)))
			}
			wait := clusterAdminTimeout
			if t := time.Duration(req.TimeoutMillis) * time.Millisecond; t > 0 {
				wait = min(t, maxAddVoterWait)
			}
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			return s.cfg.Cluster.AddVoter(wctx, req.VoterID, addr)
		})
}

func handleRemoveRaftVoter(s *Server, r *request) frameOutcome {
	return answerAtController(s, r, kmsg.NewPtrRemoveRaftVoterRequest(), kmsg.ACLOperationAlter, clusterAdminTimeout,
		func(kr kmsg.Response, code int16, msg *string) {
			resp := kr.(*kmsg.RemoveRaftVoterResponse)
			resp.ErrorCode, resp.ErrorMessage = code, msg
		},
		func(ctx context.Context, req *kmsg.RemoveRaftVoterRequest) error {
			if err := s.checkClusterID(req.ClusterID); err != nil {
				return err
			}
			return s.cfg.Cluster.RemoveVoter(ctx, req.VoterID)
		})
}

// checkClusterID refuses a request naming another cluster.
func (s *Server) checkClusterID(cid *string) error {
	if cid == nil || *cid == "" {
		return nil
	}
	if mine := s.cfg.Cluster.Image().ClusterID(); mine != "" && *cid != mine {
		return fmt.Errorf("%w: this is cluster %s, not %s", kerr.InconsistentClusterID, mine, *cid)
	}
	return nil
}
