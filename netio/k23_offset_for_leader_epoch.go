package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// OffsetForLeaderEpoch, key 23, versions 0-4 (KIP-320 semantics).
//
//   - Every partition has had one leader epoch, 0, since it was created:
//     one broker, no leader changes, no truncation. So the end offset of
//     epoch 0 is the log end offset, and the answer is exact.
//   - A requested epoch above 0 is not known: epoch -1, offset -1
//     (UNDEFINED), as Kafka answers for an epoch newer than the leader's.
//   - CurrentLeaderEpoch (v2+) above ours gets UNKNOWN_LEADER_EPOCH.
//   - Cluster mode: the leader answers from its log's epoch cache (KIP-279:
//     the largest epoch ≤ the requested one and where it ends), which is
//     how a returning follower finds the divergent tail it must truncate;
//     CurrentLeaderEpoch below the leader's gets FENCED_LEADER_EPOCH.

func handleOffsetForLeaderEpoch(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range req.Topics {
		tr := kmsg.OffsetForLeaderEpochResponseTopic{Topic: rt.Topic}
		t := s.eng.Topic(rt.Topic)
		for _, rp := range rt.Partitions {
			pr := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.LeaderEpoch, pr.EndOffset = -1, -1
			if r.topicAllowed(kmsg.ACLOperationDescribe, rt.Topic) {
				pr.ErrorCode = s.endOffsetForEpoch(t, &rp, &pr)
			} else {
				pr.ErrorCode = kerr.TopicAuthorizationFailed.Code
			}
			if pr.ErrorCode != 0 {
				r.failed = true
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	r.respond(resp)
	return frameDone
}

// endOffsetForEpoch answers one partition: the leader's epoch cache in
// cluster mode, the single epoch 0 otherwise. It returns the error code.
func (s *Server) endOffsetForEpoch(t *engine.Topic, rp *kmsg.OffsetForLeaderEpochRequestTopicPartition, pr *kmsg.OffsetForLeaderEpochResponseTopicPartition) int16 {
	var p *engine.Partition
	if t != nil {
		p = t.Partition(rp.Partition)
	}
	if p == nil {
		return kerr.UnknownTopicOrPartition.Code
	}
	if err := p.CheckLeaderEpoch(rp.CurrentLeaderEpoch); err != nil {
		return errCode(err)
	}
	l, err := p.Log()
	switch {
	case err != nil:
		return errCode(err)
	case p.Replicated():
		pr.LeaderEpoch, pr.EndOffset = l.EndOffsetForEpoch(rp.LeaderEpoch)
	case rp.LeaderEpoch == p.LeaderEpoch():
		pr.LeaderEpoch, pr.EndOffset = p.LeaderEpoch(), l.EndOffset()
	}
	return 0
}
