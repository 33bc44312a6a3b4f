package netio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/peer"
	"github.com/ringlog/ringlog/metadata"
)

// Cluster mode, as the Kafka handlers see it.
//
//   - Metadata, DescribeCluster and FindCoordinator answer from the
//     replicated image (every unfenced broker at its advertised address,
//     leaders, replicas and ISR, the Raft leader as controller).
//   - Admin requests (CreateTopics, DeleteTopics, CreatePartitions,
//     AlterConfigs, IncrementalAlterConfigs) take the path of a single
//     broker (admin.go), with the cluster as their admin.Service: the
//     controller proposes the change to the quorum, another broker
//     forwards the request to the controller (KIP-590 style), except a
//     request that was itself forwarded (client id
//     kwire.ForwardClientID), which gets NOT_CONTROLLER.
//   - The internal requests (BrokerRegistration, BrokerHeartbeat,
//     AllocateProducerIds, AlterPartition) are answered by the cluster
//     on the controller (cluster_internal.go), NOT_CONTROLLER elsewhere:
//     the brokers that send them address the controller themselves.
//   - Produce and Fetch need nothing here: the engine knows every topic,
//     has logs only for the partitions this broker replicates, and serves
//     clients only where the publisher made it leader (others answer
//     NOT_LEADER_OR_FOLLOWER); followers' fetches carry their replica id
//     (k01_fetch.go). AlterPartition, from leaders, is one of the
//     internal requests.

// Cluster is cluster mode's side of the Kafka listener (package cluster
// implements it); Config.Cluster nil is a single broker.
type Cluster interface {
	// Image is this broker's view of the cluster metadata.
	Image() *metadata.Image
	// ControllerID is the controller's (Raft leader's) node id, -1 when
	// none is known.
	ControllerID() int32
	// Service is the admin requests' side in cluster mode (admin.go):
	// the controller proposes their changes.
	admin.Service
	// Controller says where requests for the controller go: self on
	// the controller, else its inter-broker address, or an error
	// wrapping NOT_CONTROLLER when none can be named now.
	Controller() (addr string, self bool, err error)
	// AnswerRegistration, AnswerHeartbeat, AnswerAllocateProducerIDs and
	// AnswerAlterPartition answer the internal requests on the
	// controller (NOT_CONTROLLER elsewhere).
	AnswerRegistration(ctx context.Context, r peer.Registration) (int64, error)
	AnswerHeartbeat(ctx context.Context, h peer.Heartbeat) (peer.HeartbeatAnswer, error)
	AnswerAllocateProducerIDs(ctx context.Context, broker int32, epoch int64) (peer.ProducerIDs, error)
	AnswerAlterPartition(ctx context.Context, a peer.AlterPartition) ([]peer.ISRChangeAnswer, error)
	// AnswerSetRemoteLog answers a leader's new remote log manifest
	// (an AlterPartition entry with peer.RemoteLogTag) on the
	// controller.
	AnswerSetRemoteLog(ctx context.Context, r peer.RemoteLog) error
	// CoordinatorFor is the broker that coordinates group, -1 when none
	// does (yet).
	CoordinatorFor(group string) int32
	// TxnCoordinatorFor is the broker that coordinates transactional
	// id, -1 when none does (yet).
	TxnCoordinatorFor(id string) int32
	// CaughtUp reports whether this broker's image holds everything
	// committed before it registered (false right after a start: Raft
	// may still be replaying, and a topic missing from the image may
	// exist).
	CaughtUp() bool
	// MayLead reports whether this broker may act as a partition leader
	// now: it has not stepped down, and its leadership lease holds (the
	// controller heard it within a session). Otherwise it may be cut off
	// or just resumed from a pause, its image stale: Metadata then names
	// no leader on it.
	MayLead() bool
	// DescribeQuorum describes the metadata quorum, on the controller
	// (NOT_CONTROLLER elsewhere).
	DescribeQuorum(ctx context.Context) (admin.Quorum, error)
	// UnregisterBroker removes a stopped, drained broker's registration,
	// on the controller (NOT_CONTROLLER elsewhere).
	UnregisterBroker(ctx context.Context, id int32) error
	// AddVoter makes a node that joined the metadata quorum as an
	// observer a voter (addr: its address, "" for any), once it caught
	// up; RemoveVoter takes a voter out. On the controller
	// (NOT_CONTROLLER elsewhere).
	AddVoter(ctx context.Context, id int32, addr string) error
	RemoveVoter(ctx context.Context, id int32) error
}

// atController is the start of a request only the controller answers
// (ElectLeaders, the reassignments, DescribeQuorum): it authorizes op on
// the cluster, then forwards req to the controller from another broker.
// It reports whether the request is answered already: fail called (not
// authorized, or the controller unreachable) or the controller's answer
// sent; false: this broker handles it.
func (s *Server) atController(ctx context.Context, r *request, req kmsg.Request, op kmsg.ACLOperation, fail func(error)) bool {
	if !r.clusterAllowed(op) {
		fail(kerr.ClusterAuthorizationFailed)
		return true
	}
	fresp, forwarded, err := s.forward(ctx, r, req)
	switch {
	case err != nil:
		fail(err)
		return true
	case forwarded:
		r.respond(fresp)
		return true
	}
	return false
}

// answerAtController is the whole of a request that the controller
// answers with one error code and message (UnregisterBroker,
// AddRaftVoter, RemoveRaftVoter): it decodes req, authorizes op and
// forwards from another broker (atController), runs do on the
// controller within timeout, and answers with do's error set by setErr
// on the response (nil: success).
func answerAtController[Req kmsg.Request](s *Server, r *request, req Req, op kmsg.ACLOperation, timeout time.Duration,
	setErr func(resp kmsg.Response, code int16, msg *string), do func(ctx context.Context, req Req) error) frameOutcome {
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind()
	fail := func(err error) {
		r.failed = true
		setErr(resp, errCode(err), errMessage(err))
		r.respond(resp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if s.atController(ctx, r, req, op, fail) {
		return frameDone
	}
	if err := do(ctx, req); err != nil {
		fail(err)
		return frameDone
	}
	r.respond(resp)
	return frameDone
}

// forwardToController answers req with the controller's answer when in
// cluster mode on a broker that is not the controller; it reports
// whether it did (false: handle req here). The caller has checked its
// client's authorization: the controller checks the forwarding broker's.
func (s *Server) forwardToController(r *request, req kmsg.Request) bool {
	cl := s.cfg.Cluster
	if cl == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterAdminTimeout)
	defer cancel()
	resp, ok, err := s.forward(ctx, r, req)
	if err != nil {
		r.failed = true
		r.respond(adminError(req, err))
		return true
	}
	if ok {
		r.respond(resp)
	}
	return ok
}

// staleSecurity reports whether c must be turned away because this
// broker's image may hold out-of-date credentials or ACLs: right after a
// start the image is the last snapshot until Raft replays the rest
// (CaughtUp), and a revoked ACL or a new user must not be judged from
// it. With the authorizer on, or on a SASL listener, connections are
// closed at their first request until then, as if the broker were not
// listening yet (clients go to another broker); only super users known
// before any SASL exchange (the other brokers, by certificate or as
// User:ANONYMOUS on a PLAINTEXT inter-broker listener) are served.
func (s *Server) staleSecurity(c *conn) bool {
	a := s.cfg.Security.Authorizer
	if (a == nil && !s.cfg.Protocol.usesSASL()) || s.cfg.Cluster.CaughtUp() {
		return false
	}
	return a == nil || !a.IsSuper(c.principal())
}

// listenerAddr is the address of broker b's listener of this server's
// name (its security protocol), where clients of this listener connect;
// false when b has no such listener (it is then left out, as Kafka
// leaves out brokers without the client's listener).
func (s *Server) listenerAddr(b metadata.Broker) (string, int32, bool) {
	addr, ok := b.Listener(s.cfg.Protocol.String())
	if !ok {
		return "", 0, false
	}
	host, port := brokerHostPort(addr)
	return host, port, true
}

// handleClusterInternal serves the internal APIs of cluster mode
// (BrokerRegistration, BrokerHeartbeat, AllocateProducerIds,
// AlterPartition); they exist only there, and are not advertised in
// ApiVersions. With the authorizer on they need CLUSTER_ACTION on the
// cluster (the brokers' principal is a super user).
func handleClusterInternal(s *Server, r *request) frameOutcome {
	req := kmsg.RequestForKey(r.key)
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	if s.cfg.Cluster != nil && !r.clusterAllowed(kmsg.ACLOperationClusterAction) {
		r.failed = true
		r.respond(internalError(req, kerr.ClusterAuthorizationFailed))
		return frameDone
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterAdminTimeout)
	defer cancel()
	r.respond(s.answerInternal(ctx, req))
	return frameDone
}

// brokerHostPort splits a registered Kafka address.
func brokerHostPort(addr string) (string, int32) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	port, _ := strconv.Atoi(p)
	return host, int32(port)
}

func (s *Server) clusterMetadata(r *request, req *kmsg.MetadataRequest) {
	cl := s.cfg.Cluster
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	resp.AuthorizedOperations = notAsked
	if req.IncludeClusterAuthorizedOperations {
		resp.AuthorizedOperations = r.authorizedOps(kmsg.ACLResourceTypeCluster, clusterResource, clusterOps)
	}
	var out []kmsg.MetadataResponseTopic
	all := req.Topics == nil || (r.version == 0 && len(req.Topics) == 0)
	if all {
		img := cl.Image()
		for _, t := range img.Topics() {
			if r.topicAllowed(kmsg.ACLOperationDescribe, t.Name) {
				out = append(out, r.imageTopic(img, t, req))
			}
		}
	} else {
		autoOK := s.eng.AutoCreateTopics() && (r.version < 4 || req.AllowAutoTopicCreation)
		for _, rt := range req.Topics {
			img := cl.Image()
			switch {
			case rt.Topic == nil && r.version >= 10:
				if t := img.TopicByID(metadata.UUID(rt.TopicID)); t != nil && r.topicAllowed(kmsg.ACLOperationDescribe, t.Name) {
					out = append(out, r.imageTopic(img, t, req))
				} else if t != nil {
					out = append(out, kmsg.MetadataResponseTopic{ErrorCode: kerr.TopicAuthorizationFailed.Code, TopicID: rt.TopicID, AuthorizedOperations: notAsked})
					r.failed = true
				} else {
					out = append(out, kmsg.MetadataResponseTopic{ErrorCode: kerr.UnknownTopicID.Code, TopicID: rt.TopicID, AuthorizedOperations: notAsked})
					r.failed = true
				}
				continue
			case rt.Topic == nil:
				out = append(out, kmsg.MetadataResponseTopic{ErrorCode: kerr.InvalidTopicException.Code, AuthorizedOperations: notAsked})
				r.failed = true
				continue
			case !r.topicAllowed(kmsg.ACLOperationDescribe, *rt.Topic):
				// Whether it exists or not: no DESCRIBE, no answer.
				out = append(out, kmsg.MetadataResponseTopic{ErrorCode: kerr.TopicAuthorizationFailed.Code, Topic: rt.Topic, AuthorizedOperations: notAsked})
				r.failed = true
				continue
			}
			t := img.Topic(*rt.Topic)
			var err error
			if t == nil {
				if verr := engine.ValidateTopicName(*rt.Topic); verr != nil {
					err = verr
				} else if !cl.CaughtUp() {
					// Not caught up: the topic may exist. A retriable
					// answer that clients do not count as "unknown topic"
					// (franz-go fails records after a few of those).
					err = fmt.Errorf("%w: this broker is still catching up with the cluster metadata", kerr.LeaderNotAvailable)
				} else if autoOK && r.mayCreateTopic(*rt.Topic) {
					// Through the controller; returns once this broker
					// has the topic.
					if _, err = s.eng.GetOrCreateTopic(*rt.Topic); err == nil {
						if t = cl.Image().Topic(*rt.Topic); t == nil {
							err = kerr.LeaderNotAvailable
						}
					}
				} else {
					err = kerr.UnknownTopicOrPartition
				}
			}
			if err != nil {
				code := errCode(err)
				if errors.Is(err, kerr.TopicAlreadyExists) {
					code = kerr.LeaderNotAvailable.Code
				}
				out = append(out, kmsg.MetadataResponseTopic{ErrorCode: code, Topic: rt.Topic, AuthorizedOperations: notAsked})
				r.failed = true
				continue
			}
			out = append(out, r.imageTopic(cl.Image(), t, req))
		}
	}
	// Brokers and controller after the topics: an auto-created topic's
	// leader is then among the brokers listed. Fenced brokers (registered,
	// not yet caught up) are left out, as Kafka does.
	img := cl.Image()
	for _, b := range img.LiveBrokers() {
		host, port, ok := s.listenerAddr(b)
		if !ok {
			continue
		}
		mb := kmsg.MetadataResponseBroker{NodeID: b.ID, Host: host, Port: port}
		if b.Rack != "" {
			rack := b.Rack
			mb.Rack = &rack
		}
		resp.Brokers = append(resp.Brokers, mb)
	}
	cid := img.ClusterID()
	resp.ClusterID = &cid
	resp.ControllerID = cl.ControllerID()
	resp.Topics = out
	r.respond(resp)
}

// imageTopic is one topic of the image as Metadata describes it.
// Replicas on brokers that are fenced or not registered are listed as
// offline (OfflineReplicas), as Kafka lists replicas on dead brokers.
func (r *request) imageTopic(img *metadata.Image, t *metadata.Topic, req *kmsg.MetadataRequest) kmsg.MetadataResponseTopic {
	name := t.Name
	mt := kmsg.MetadataResponseTopic{Topic: &name, TopicID: t.ID, IsInternal: t.Internal, AuthorizedOperations: notAsked}
	if req.IncludeTopicAuthorizedOperations {
		mt.AuthorizedOperations = r.authorizedOps(kmsg.ACLResourceTypeTopic, t.Name, topicOps)
	}
	// A broker that stepped down, whose lease lapsed, or that its image
	// has fenced, leads nothing whatever the image says: it names no
	// leader there, so clients look elsewhere (the other brokers are
	// listed) instead of retrying here.
	self := r.conn.srv.eng.NodeID()
	selfOut := !r.conn.srv.cfg.Cluster.MayLead()
	if b, ok := img.Broker(self); !ok || b.Fenced {
		selfOut = true
	}
	for i, p := range t.Partitions {
		if p.Leader == self && selfOut {
			p.Leader = metadata.NoLeader
		}
		mp := kmsg.MetadataResponseTopicPartition{Partition: int32(i), Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
			Replicas: append([]int32(nil), p.Replicas...), ISR: append([]int32(nil), p.ISR...), OfflineReplicas: []int32{}}
		for _, id := range p.Replicas {
			if b, ok := img.Broker(id); !ok || b.Fenced {
				mp.OfflineReplicas = append(mp.OfflineReplicas, id)
			}
		}
		if p.Leader == metadata.NoLeader {
			mp.ErrorCode = kerr.LeaderNotAvailable.Code
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

func (s *Server) clusterDescribe(r *request, req *kmsg.DescribeClusterRequest) {
	cl := s.cfg.Cluster
	img := cl.Image()
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.ClusterID = img.ClusterID()
	resp.ControllerID = cl.ControllerID()
	resp.EndpointType = 1
	for _, b := range img.Brokers() {
		if b.Fenced && !req.IncludeFencedBrokers {
			continue
		}
		host, port, ok := s.listenerAddr(b)
		if !ok {
			continue
		}
		db := kmsg.DescribeClusterResponseBroker{NodeID: b.ID, Host: host, Port: port, IsFenced: b.Fenced}
		if b.Rack != "" {
			rack := b.Rack
			db.Rack = &rack
		}
		resp.Brokers = append(resp.Brokers, db)
	}
	resp.ClusterAuthorizedOperations = notAsked
	if req.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = r.authorizedOps(kmsg.ACLResourceTypeCluster, clusterResource, clusterOps)
	}
	r.respond(resp)
}

// clusterCoordinator is FindCoordinator's answer in cluster mode: the
// broker Cluster.CoordinatorFor (a group) or Cluster.TxnCoordinatorFor (a
// transactional id, txn set) names, at its registered address.
func (s *Server) clusterCoordinator(key string, txn bool) (int32, string, int32, error) {
	cl := s.cfg.Cluster
	var id int32
	if txn {
		id = cl.TxnCoordinatorFor(key)
	} else {
		id = cl.CoordinatorFor(key)
	}
	if id < 0 {
		what := "the group's __consumer_offsets"
		if txn {
			what = "the transactional id's __transaction_state"
		}
		return -1, "", -1, errors.Join(kerr.CoordinatorNotAvailable, errors.New(what+" partition has no leader yet"))
	}
	b, ok := cl.Image().Broker(id)
	if !ok {
		return -1, "", -1, errors.Join(kerr.CoordinatorNotAvailable, errors.New("the coordinating broker "+strconv.Itoa(int(id))+" has not registered yet"))
	}
	// A fenced broker (registered, not yet serving: e.g. just restarted)
	// is not in Metadata's broker list, and clients refuse a coordinator
	// they cannot find there: retriable until it is unfenced.
	if b.Fenced {
		return -1, "", -1, errors.Join(kerr.CoordinatorNotAvailable, errors.New("the coordinating broker "+strconv.Itoa(int(id))+" is fenced (starting up)"))
	}
	host, port, ok := s.listenerAddr(b)
	if !ok {
		return -1, "", -1, errors.Join(kerr.CoordinatorNotAvailable, errors.New("the coordinating broker "+strconv.Itoa(int(id))+" has no "+string(s.cfg.Protocol)+" listener"))
	}
	return id, host, port, nil
}

// internalError answers an internal request with err's code (a sender
// without CLUSTER_ACTION, a request that is not one): no epoch, fenced.
func internalError(req kmsg.Request, err error) kmsg.Response {
	code := errCode(err)
	resp := req.ResponseKind()
	switch rr := resp.(type) {
	case *kmsg.BrokerRegistrationResponse:
		rr.ErrorCode, rr.BrokerEpoch = code, -1
	case *kmsg.BrokerHeartbeatResponse:
		rr.ErrorCode, rr.IsFenced = code, true
	case *kmsg.AllocateProducerIDsResponse:
		rr.ErrorCode = code
	case *kmsg.AlterPartitionResponse:
		rr.ErrorCode = code
	}
	resp.SetVersion(req.GetVersion())
	return resp
}
