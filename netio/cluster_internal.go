package netio

import (
	"bytes"
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
		if ans.MetadataIndex > 0 {
			resp.UnknownTags.Set(peer.MetadataIndexTag, peer.EncodeMetadataIndex(ans.MetadataIndex))
		}
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
	// Entries with a remote log manifest (peer.RemoteLogTag) are
	// answered one by one, in their places among the ISR changes.
	remote := map[[2]int]error{}
	for ti, rt := range r.Topics {
		for pi, rp := range rt.Partitions {
			if rl, ok := remoteLogOf(&rp); ok {
				rl.BrokerID, rl.BrokerEpoch, rl.TopicID = r.BrokerID, r.BrokerEpoch, rt.TopicID
				remote[[2]int{ti, pi}] = s.setRemoteLog(ctx, rl)
				continue
			}
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
	var answers []peer.ISRChangeAnswer
	if len(a.Changes) > 0 {
		var err error
		if answers, err = s.cfg.Cluster.AnswerAlterPartition(ctx, a); err != nil {
			resp.ErrorCode = errCode(err)
			return resp
		}
	}
	i := 0
	for ti, rt := range r.Topics {
		tr := kmsg.NewAlterPartitionResponseTopic()
		tr.Topic, tr.TopidID = rt.Topic, rt.TopicID // kmsg spells it TopidID
		for pi, rp := range rt.Partitions {
			if err, ok := remote[[2]int{ti, pi}]; ok {
				pr := kmsg.NewAlterPartitionResponseTopicPartition()
				pr.Partition, pr.ErrorCode, pr.LeaderID = rp.Partition, errCode(err), -1
				tr.Partitions = append(tr.Partitions, pr)
				continue
			}
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

// remoteLogOf returns the remote log manifest an AlterPartition entry
// carries in its peer.RemoteLogTag field (bytes copied out of the
// request), and false when it has none or it does not decode.
func remoteLogOf(rp *kmsg.AlterPartitionRequestTopicPartition) (peer.RemoteLog, bool) {
	var raw []byte
	rp.UnknownTags.Each(func(k uint32, v []byte) {
		if k == peer.RemoteLogTag {
			raw = v
		}
	})
	if raw == nil {
		return peer.RemoteLog{}, false
	}
	rl := peer.RemoteLog{Partition: rp.Partition, LeaderEpoch: rp.LeaderEpoch}
	version, manifest, err := peer.DecodeRemoteLog(raw)
	if err != nil {
		// Answered as a refusal by setRemoteLog (version 0).
		return rl, true
	}
	rl.Version, rl.Manifest = version, bytes.Clone(manifest)
	return rl, true
}

// setRemoteLog answers one remote log entry: one that did not decode is
// INVALID_REQUEST.
func (s *Server) setRemoteLog(ctx context.Context, rl peer.RemoteLog) error {
	if rl.Version <= 0 {
		return fmt.Errorf("%w: a remote log field that does not decode", kerr.InvalidRequest)
	}
	return s.cfg.Cluster.AnswerSetRemoteLog(ctx, rl)
}
