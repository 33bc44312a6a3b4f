package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeProducers, key 61, version 0.
//
//   - Per partition, the producers its log remembers: producer id and
//     epoch, last sequence and timestamp, and the first offset of an open
//     transaction (-1 when none): what kafka-transactions.sh and admin
//     clients read to find a hanging transaction. The coordinator epoch is
//     not kept per producer (-1).
//   - Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER
//     elsewhere); READ on the topic (TOPIC_AUTHORIZATION_FAILED).

func handleDescribeProducers(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDescribeProducersRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	for _, rt := range req.Topics {
		t := kmsg.NewDescribeProducersResponseTopic()
		t.Topic = rt.Topic
		allowed := r.topicAllowed(kmsg.ACLOperationRead, rt.Topic)
		topic := s.eng.Topic(rt.Topic)
		for _, pi := range rt.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition = pi
			var err error
			switch {
			case !allowed:
				err = kerr.TopicAuthorizationFailed
			case topic == nil || topic.Partition(pi) == nil:
				err = kerr.UnknownTopicOrPartition
			default:
				producers, perr := topic.Partition(pi).Producers()
				err = perr
				for _, in := range producers {
					ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					ap.ProducerID, ap.ProducerEpoch = in.ProducerID, int32(in.Epoch)
					ap.LastSequence, ap.LastTimestamp = in.LastSequence, in.LastTimestamp
					ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = -1, in.TxnStartOffset
					rp.ActiveProducers = append(rp.ActiveProducers, ap)
				}
			}
			if err != nil {
				rp.ActiveProducers = nil
				rp.ErrorCode, rp.ErrorMessage = errCode(err), errMessage(err)
				r.failed = true
			}
			t.Partitions = append(t.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, t)
	}
	r.respond(resp)
	return frameDone
}
