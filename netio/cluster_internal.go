package netio

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/peer"
	"github.com/ringlog/ringlog/metadata"
)

// answerInternal answers an internal request of cluster mode
// (BrokerRegistration, BrokerHeartbeat, AllocateProducerIds,
// AlterPartition): decoded into package peer's types, answered by the
// cluster on the controller (NOT_CONTROLLER elsewhere), encoded back.
// internal/peerwire is the other end of the wire.
func (s *Server) answerInternal(ctx context.Context, req kmsg.Request) kmsg.Response {
	cl := s.cfg.Cluster
	switch r := req.(type) {
	case *kmsg.BrokerRegistrationRequest:
		reg := peer.Registration{BrokerID: r.BrokerID, ClusterID: r.ClusterID, Incarnation: r.IncarnationID}
		for _, l := range r.Listeners {
			reg.Listeners = append(reg.Listeners, metadata.Listener{Name: l.Name, Addr: net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port)))})
		}
		if r.Rack != nil {
			reg.Rack = *r.Rack
		}
		epoch, err := cl.AnswerRegistration(ctx, reg)
		resp := r.ResponseKind().(*kmsg.BrokerRegistrationResponse)
		resp.ErrorCode, resp.BrokerEpoch = errCode(err), epoch
		if err != nil {
			resp.BrokerEpoch = -1
		}
		return resp
	case *kmsg.BrokerHeartbeatRequest:
		ans, err := cl.AnswerHeartbeat(ctx, peer.Heartbeat{BrokerID: r.BrokerID, BrokerEpoch: r.BrokerEpoch,
			MetadataOffset: r.CurrentMetadataOffset, WantFence: r.WantFence})
		resp := r.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
		resp.ErrorCode, resp.IsFenced, resp.IsCaughtUp = errCode(err), ans.Fenced, ans.CaughtUp
		return resp
	case *kmsg.AllocateProducerIDsRequest:
		ids, err := cl.AnswerAllocateProducerIDs(ctx, r.BrokerID, r.BrokerEpoch)
		resp := r.ResponseKind().(*kmsg.AllocateProducerIDsResponse)
		resp.ErrorCode, resp.ProducerIDStart, resp.ProducerIDLen = errCode(err), ids.First, ids.Count
		return resp
	case *kmsg.AlterPartitionRequest:
		return s.answerAlterPartition(ctx, r)
	}
	return internalError(req, fmt.Errorf("%w: %s is not an internal request", kerr.InvalidRequest, kmsg.NameForKey(req.Key())))
}

// answerAlterPartition is answerInternal for AlterPartition (v0-3: the
// ISR by broker id, or with broker epochs from v3).
func (s *Server) answerAlterPartition(ctx context.Context, r *kmsg.AlterPartitionRequest) kmsg.Response {
	a := peer.AlterPartition{BrokerID: r.BrokerID, BrokerEpoch: r.BrokerEpoch}
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			ch := peer.ISRChange{TopicID: rt.TopicID, Partition: rp.Partition, LeaderEpoch: rp.LeaderEpoch,
				PartitionEpoch: rp.PartitionEpoch, ISR: rp.NewISR}
			if r.Version >= 3 {
				ch.ISR = nil
				for _, m := range rp.NewEpochISR {
					ch.ISR = append(ch.ISR, m.BrokerID)
					ch.ISREpochs = append(ch.ISREpochs, int64(m.BrokerEpoch))
				}
			}
			a.Changes = append(a.Changes, ch)
		}
	}
	resp := r.ResponseKind().(*kmsg.AlterPartitionResponse)
	answers, err := s.cfg.Cluster.AnswerAlterPartition(ctx, a)
	if err != nil {
		resp.ErrorCode = errCode(err)
		return resp
	}
	i := 0
	for _, rt := range r.Topics {
		tr := kmsg.NewAlterPartitionResponseTopic()
		tr.Topic, tr.TopidID = rt.Topic, rt.TopicID // kmsg spells it TopidID
		for _, rp := range rt.Partitions {
			ans := peer.ISRChangeAnswer{Partition: rp.Partition, Leader: -1, Err: kerr.UnknownServerError}
			if i < len(answers) {
				ans = answers[i]
			}
			i++
			pr := kmsg.NewAlterPartitionResponseTopicPartition()
			pr.Partition, pr.ErrorCode = ans.Partition, errCode(ans.Err)
			pr.LeaderID, pr.LeaderEpoch, pr.ISR, pr.PartitionEpoch = ans.Leader, ans.LeaderEpoch, ans.ISR, ans.PartitionEpoch
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return resp
}
