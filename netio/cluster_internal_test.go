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

// remoteLogCluster records the remote log manifests it is asked to write.
type remoteLogCluster struct {
	shortCluster
	remote []peer.RemoteLog
}

func (f *remoteLogCluster) AnswerSetRemoteLog(_ context.Context, r peer.RemoteLog) error {
	f.remote = append(f.remote, r)
	if r.Version == 7 {
		return kerr.InvalidUpdateVersion
	}
	return nil
}

// An AlterPartition entry with the remote log tag is a leader's manifest
// (tiered storage), answered in its place among the ISR changes; one
// whose tag does not decode is INVALID_REQUEST, and never reaches the
// cluster.
func TestAnswerInternalRemoteLog(t *testing.T) {
	cl := &remoteLogCluster{}
	s := &Server{cfg: Config{Cluster: cl}}
	req := kmsg.NewPtrAlterPartitionRequest()
	req.Version = 2
	req.BrokerID, req.BrokerEpoch = 2, 40
	rt := kmsg.NewAlterPartitionRequestTopic()
	rt.TopicID = [16]byte{7}
	add := func(p int32, tag []byte) {
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.PartitionEpoch = p, 3, 9
		if tag != nil {
			rp.UnknownTags.Set(peer.RemoteLogTag, tag)
		} else {
			rp.NewISR = []int32{2}
		}
		rt.Partitions = append(rt.Partitions, rp)
	}
	add(0, peer.EncodeRemoteLog(5, []byte(`{"segments":[]}`)))
	add(1, nil)
	add(2, []byte{1, 2})
	add(3, peer.EncodeRemoteLog(7, nil))
	req.Topics = append(req.Topics, rt)
	// Through the wire, as a broker sends it.
	b := req.AppendTo(nil)
	back := kmsg.NewPtrAlterPartitionRequest()
	back.Version = 2
	if err := back.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	resp := s.answerInternal(context.Background(), back).(*kmsg.AlterPartitionResponse)
	if len(cl.remote) != 2 || cl.remote[0].Version != 5 || string(cl.remote[0].Manifest) != `{"segments":[]}` ||
		cl.remote[0].BrokerEpoch != 40 || cl.remote[0].TopicID != [16]byte{7} || cl.remote[0].LeaderEpoch != 3 {
		t.Fatalf("the cluster was asked %+v", cl.remote)
	}
	if len(cl.got.Changes) != 1 || cl.got.Changes[0].Partition != 1 {
		t.Fatalf("ISR changes asked: %+v", cl.got.Changes)
	}
	ps := resp.Topics[0].Partitions
	if len(ps) != 4 || ps[0].ErrorCode != 0 || ps[1].LeaderID != 2 || ps[2].ErrorCode != kerr.InvalidRequest.Code || ps[3].ErrorCode != kerr.InvalidUpdateVersion.Code {
		t.Fatalf("answered %+v", ps)
	}
}
