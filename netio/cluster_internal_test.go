package netio

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/peer"
)

// shortCluster answers AlterPartition with one answer, whatever was
// asked, and records the changes.
type shortCluster struct {
	catchUpCluster
	got peer.AlterPartition
}

func (f *shortCluster) AnswerAlterPartition(_ context.Context, a peer.AlterPartition) ([]peer.ISRChangeAnswer, error) {
	f.got = a
	return []peer.ISRChangeAnswer{{TopicID: a.Changes[0].TopicID, Partition: a.Changes[0].Partition, Leader: 2, LeaderEpoch: 3, ISR: []int32{2}}}, nil
}

// The internal requests reach the cluster in peer's types (v3's ISR
// with broker epochs included), every partition asked is answered even
// when the cluster answers fewer, and the errors of the four requests
// are theirs: no epoch, fenced.
func TestAnswerInternal(t *testing.T) {
	cl := &shortCluster{}
	s := &Server{cfg: Config{Cluster: cl}}
	req := kmsg.NewPtrAlterPartitionRequest()
	req.Version = 3
	req.BrokerID, req.BrokerEpoch = 2, 40
	rt := kmsg.NewAlterPartitionRequestTopic()
	rt.TopicID = [16]byte{7}
	for p := range int32(2) {
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.PartitionEpoch = p, 3, 9
		m := kmsg.NewAlterPartitionRequestTopicPartitionNewEpochISR()
		m.BrokerID, m.BrokerEpoch = 2, 40
		rp.NewEpochISR = append(rp.NewEpochISR, m)
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp := s.answerInternal(context.Background(), req).(*kmsg.AlterPartitionResponse)
	if len(cl.got.Changes) != 2 || cl.got.Changes[1].ISREpochs[0] != 40 || cl.got.Changes[1].ISR[0] != 2 {
		t.Fatalf("the cluster was asked %+v", cl.got)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
		t.Fatalf("answered %+v", resp.Topics)
	}
	if p := resp.Topics[0].Partitions; p[0].ErrorCode != 0 || p[0].LeaderID != 2 || p[1].ErrorCode != kerr.UnknownServerError.Code || p[1].Partition != 1 {
		t.Errorf("partitions answered %+v", p)
	}

	for _, r := range []kmsg.Request{kmsg.NewPtrBrokerRegistrationRequest(), kmsg.NewPtrBrokerHeartbeatRequest(), kmsg.NewPtrAllocateProducerIDsRequest()} {
		resp := s.answerInternal(context.Background(), r)
		switch rr := resp.(type) {
		case *kmsg.BrokerRegistrationResponse:
			if rr.ErrorCode != kerr.NotController.Code || rr.BrokerEpoch != -1 {
				t.Errorf("registration: %+v", rr)
			}
		case *kmsg.BrokerHeartbeatResponse:
			if rr.ErrorCode != kerr.NotController.Code || !rr.IsFenced {
				t.Errorf("heartbeat: %+v", rr)
			}
		case *kmsg.AllocateProducerIDsResponse:
			if rr.ErrorCode != kerr.NotController.Code {
				t.Errorf("producer ids: %+v", rr)
			}
		}
	}
	if r := internalError(kmsg.NewPtrBrokerHeartbeatRequest(), kerr.ClusterAuthorizationFailed).(*kmsg.BrokerHeartbeatResponse); r.ErrorCode != kerr.ClusterAuthorizationFailed.Code || !r.IsFenced {
		t.Errorf("denied heartbeat: %+v", r)
	}
}
