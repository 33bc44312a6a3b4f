package netio

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// WriteTxnMarkers, key 27, versions 0-1: a transaction coordinator on
// another broker asks this one, the leader of some of the transaction's
// partitions, to end the transaction there (cluster mode only, internal:
// not advertised, CLUSTER_ACTION with the authorizer).
//
//   - Each marker's partitions get their COMMIT or ABORT control batch
//     at once, acks=all; the answer waits for all of them.
//   - A partition not led here is NOT_LEADER_OR_FOLLOWER and an unknown
//     one UNKNOWN_TOPIC_OR_PARTITION: the coordinator retries later.
//   - A marker in a __consumer_offsets partition applies (or drops) the
//     offsets the transaction committed for the groups coordinated here.

func handleWriteTxnMarkers(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	allowed := r.clusterAllowed(kmsg.ACLOperationClusterAction)
	for _, m := range req.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		var parts []*engine.Partition
		var at []*kmsg.WriteTxnMarkersResponseMarkerTopicPartition
		for _, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			rt.Partitions = make([]kmsg.WriteTxnMarkersResponseMarkerTopicPartition, len(t.Partitions))
			rm.Topics = append(rm.Topics, rt)
		}
		for i, t := range m.Topics {
			topic := s.eng.Topic(t.Topic)
			for j, pi := range t.Partitions {
				rp := &rm.Topics[i].Partitions[j]
				rp.Partition = pi
				var p *engine.Partition
				if topic != nil {
					p = topic.Partition(pi)
				}
				switch {
				case !allowed:
					rp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
				case p == nil:
					rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				default:
					parts = append(parts, p)
					at = append(at, rp)
				}
			}
		}
		mk := engine.TxnMarker{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Commit: m.Committed, CoordinatorEpoch: m.CoordinatorEpoch}
		for k, err := range s.eng.AppendTxnMarkers(mk, parts) {
			at[k].ErrorCode = errCode(err)
			if err != nil {
				s.logger.Debug("transaction marker refused", "partition", parts[k].String(), "producer_id", m.ProducerID, "err", fmt.Sprint(err), "client", clientName(r))
			}
		}
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				r.failed = r.failed || rp.ErrorCode != 0
			}
		}
		resp.Markers = append(resp.Markers, rm)
	}
	r.respond(resp)
	return frameDone
}
