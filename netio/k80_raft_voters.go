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
	req := kmsg.NewPtrAddRaftVoterRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.AddRaftVoterResponse)
	fail := func(err error) {
		r.failed = true
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		r.respond(resp)
	}
	wait := clusterAdminTimeout
	if t := time.Duration(req.TimeoutMillis) * time.Millisecond; t > 0 {
		wait = min(t, maxAddVoterWait)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait+clusterAdminTimeout)
	defer cancel()
	if s.atController(ctx, r, req, kmsg.ACLOperationAlter, fail) {
		return frameDone
	}
	if err := s.checkClusterID(req.ClusterID); err != nil {
		fail(err)
		return frameDone
	}
	addr := ""
	if len(req.Listeners) > 0 {
		l := req.Listeners[0]
		if l.Host == "" || l.Port == 0 {
			fail(fmt.Errorf("%w: listener %q has no host or port", kerr.InvalidRequest, l.Name))
			return frameDone
		}
		addr = net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port)))
	}
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	if err := s.cfg.Cluster.AddVoter(wctx, req.VoterID, addr); err != nil {
		fail(err)
		return frameDone
	}
	r.respond(resp)
	return frameDone
}

func handleRemoveRaftVoter(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrRemoveRaftVoterRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.RemoveRaftVoterResponse)
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
	if err := s.checkClusterID(req.ClusterID); err != nil {
		fail(err)
		return frameDone
	}
	if err := s.cfg.Cluster.RemoveVoter(ctx, req.VoterID); err != nil {
		fail(err)
		return frameDone
	}
	r.respond(resp)
	return frameDone
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
