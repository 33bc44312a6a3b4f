package netio

import (
	"context"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/admin"
)

// DescribeQuorum, key 55, versions 0-2 (KIP-595, KIP-836, KIP-853's
// nodes): the metadata quorum, as kafka-metadata-quorum.sh describe
// shows it.
//
//   - Served and advertised in cluster mode only (a single broker has no
//     quorum).
//   - The one partition is __cluster_metadata-0: the leader (the
//     controller), its epoch (the Raft term), the high watermark (the
//     committed index), the voters and the observers (broker-only
//     nodes). The leader's log end is its Raft log's; every other
//     member's is the metadata index its last heartbeat reported, with
//     that heartbeat's time as LastFetchTimestamp and the last time it
//     reported the committed index as LastCaughtUpTimestamp (-1: not
//     heard from by this controller). Other topics or partitions:
//     UNKNOWN_TOPIC_OR_PARTITION.
//   - v2 Nodes list the voters' Raft listeners (CONTROLLER).
//   - Needs DESCRIBE on the cluster, as in Kafka: without it
//     CLUSTER_AUTHORIZATION_FAILED. Another broker forwards the request
//     to the controller whole.

// metadataTopic is the name Kafka gives the metadata log.
const metadataTopic = "__cluster_metadata"

// clusterAdminAPITable are the APIs served, and advertised, in cluster
// mode only: a single broker has no quorum and no other brokers.
var clusterAdminAPITable = []apiHandler{
	{key: 55, name: "DescribeQuorum", min: 0, max: 2, advMin: 0, async: true, handler: handleDescribeQuorum},
	{key: 64, name: "UnregisterBroker", min: 0, max: 0, advMin: 0, async: true, handler: handleUnregisterBroker},
	{key: 80, name: "AddRaftVoter", min: 0, max: 1, advMin: 0, async: true, handler: handleAddRaftVoter},
	{key: 81, name: "RemoveRaftVoter", min: 0, max: 0, advMin: 0, async: true, handler: handleRemoveRaftVoter},
}

func handleDescribeQuorum(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDescribeQuorumRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DescribeQuorumResponse)
	fail := func(err error) {
		r.failed = true
		resp.ErrorCode = errCode(err)
		if r.version >= 2 {
			resp.ErrorMessage = errMessage(err)
		}
		r.respond(resp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterAdminTimeout)
	defer cancel()
	if s.atController(ctx, r, req, kmsg.ACLOperationDescribe, fail) {
		return frameDone
	}
	q, err := s.cfg.Cluster.DescribeQuorum(ctx)
	if err != nil {
		fail(err)
		return frameDone
	}
	for _, rt := range req.Topics {
		t := kmsg.NewDescribeQuorumResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewDescribeQuorumResponseTopicPartition()
			p.Partition = rp.Partition
			if rt.Topic != metadataTopic || rp.Partition != 0 {
				p.ErrorCode = kerr.UnknownTopicOrPartition.Code
				p.LeaderID, p.LeaderEpoch, p.HighWatermark = -1, -1, -1
				r.failed = true
			} else {
				p.LeaderID, p.LeaderEpoch, p.HighWatermark = q.LeaderID, int32(min(q.Term, 1<<31-1)), q.HighWatermark
				p.CurrentVoters, p.Observers = quorumReplicas(q.Voters), quorumReplicas(q.Observers)
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	if r.version >= 2 {
		for _, v := range q.Voters {
			n := kmsg.NewDescribeQuorumResponseNode()
			n.NodeID = v.ID
			if host, port, err := net.SplitHostPort(q.VoterAddrs[v.ID]); err == nil {
				if pn, err := strconv.ParseUint(port, 10, 16); err == nil {
					l := kmsg.NewDescribeQuorumResponseNodeListener()
					l.Name, l.Host, l.Port = "CONTROLLER", host, uint16(pn)
					n.Listeners = append(n.Listeners, l)
				}
			}
			resp.Nodes = append(resp.Nodes, n)
		}
	}
	r.respond(resp)
	return frameDone
}

func quorumReplicas(rs []admin.QuorumReplica) []kmsg.DescribeQuorumResponseTopicPartitionReplicaState {
	out := make([]kmsg.DescribeQuorumResponseTopicPartitionReplicaState, 0, len(rs))
	for _, q := range rs {
		st := kmsg.NewDescribeQuorumResponseTopicPartitionReplicaState()
		st.ReplicaID, st.LogEndOffset = q.ID, q.LogEndOffset
		st.LastFetchTimestamp, st.LastCaughtUpTimestamp = -1, -1
		if !q.LastFetch.IsZero() {
			st.LastFetchTimestamp = q.LastFetch.UnixMilli()
		}
		if !q.LastCaughtUp.IsZero() {
			st.LastCaughtUpTimestamp = q.LastCaughtUp.UnixMilli()
		}
		out = append(out, st)
	}
	return out
}
