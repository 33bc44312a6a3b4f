package netio_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The topic a test user may not DESCRIBE, and a name no topic has, of
// the same length: their answers must not differ but for the name.
const (
	hiddenTopic = "payroll-q3"
	absentTopic = "payroll-q4"
)

// TestDeleteTopicsIsNoExistenceOracle: a principal without DESCRIBE on
// a topic gets the same DeleteTopics answer for it as for a topic that
// does not exist (TOPIC_AUTHORIZATION_FAILED, no topic id), through
// kadm; one with DESCRIBE but not DELETE learns what it may see
// (Kafka's answers: TOPIC_AUTHORIZATION_FAILED for the topic,
// UNKNOWN_TOPIC_OR_PARTITION for the missing one); by id, the name of a
// topic is told only to whom may DESCRIBE it. Nothing is deleted.
func TestDeleteTopicsIsNoExistenceOracle(t *testing.T) {
	sb := startSecureBroker(t)
	ctx := testCtx(t, 30*time.Second)
	adm := sb.admin(t)
	created, err := adm.CreateTopic(ctx, 1, 1, nil, hiddenTopic)
	if err != nil || created.Err != nil {
		t.Fatalf("create %s: %v %v", hiddenTopic, err, created.Err)
	}
	bobCl := sb.client(t, sb.saslTxt, kgo.SASL(scram.Auth{User: "bob", Pass: bobPass}.AsSha256Mechanism()))
	bob := kadm.NewClient(bobCl)

	got, err := bob.DeleteTopics(ctx, hiddenTopic, absentTopic)
	if err != nil {
		t.Fatal(err)
	}
	hidden, absent := got[hiddenTopic], got[absentTopic]
	if !errors.Is(hidden.Err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("bob deletes %s (exists, no DESCRIBE): %v, want TOPIC_AUTHORIZATION_FAILED", hiddenTopic, hidden.Err)
	}
	hidden.Topic = absent.Topic
	if hidden != absent {
		t.Fatalf("bob tells an existing topic from a missing one:\n  exists:  %+v\n  missing: %+v", got[hiddenTopic], absent)
	}

	// By id: the topic's id is refused without its name.
	byID := func(id [16]byte) kmsg.DeleteTopicsResponseTopic {
		req := kmsg.NewPtrDeleteTopicsRequest()
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.TopicID = id
		req.Topics = append(req.Topics, rt)
		req.TimeoutMillis = 5000
		resp, err := req.RequestWith(ctx, bobCl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0]
	}
	if tr := byID(created.ID); tr.ErrorCode != kerr.TopicAuthorizationFailed.Code || tr.Topic != nil {
		t.Fatalf("bob deletes %s by id: code %d, name %v; want TOPIC_AUTHORIZATION_FAILED and no name", hiddenTopic, tr.ErrorCode, tr.Topic)
	}
	if tr := byID([16]byte{1, 2, 3}); tr.ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("bob deletes an unknown id: code %d, want UNKNOWN_TOPIC_ID", tr.ErrorCode)
	}

	// With DESCRIBE (and no DELETE) bob may learn what exists.
	if res, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:bob").Topics(hiddenTopic, absentTopic).Operations(kadm.OpDescribe)); err != nil || res[0].Err != nil {
		t.Fatalf("grant DESCRIBE: %v %+v", err, res)
	}
	got, err = bob.DeleteTopics(ctx, hiddenTopic, absentTopic)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got[hiddenTopic].Err, kerr.TopicAuthorizationFailed) || !errors.Is(got[absentTopic].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("bob with DESCRIBE deletes: %+v", got)
	}
	if tr := byID(created.ID); tr.ErrorCode != kerr.TopicAuthorizationFailed.Code || tr.Topic == nil || *tr.Topic != hiddenTopic {
		t.Fatalf("bob with DESCRIBE deletes %s by id: code %d, name %v; want TOPIC_AUTHORIZATION_FAILED naming it", hiddenTopic, tr.ErrorCode, tr.Topic)
	}
	if td, err := adm.ListTopics(ctx, hiddenTopic); err != nil || td[hiddenTopic].Err != nil {
		t.Fatalf("%s after bob's attempts: %v %v", hiddenTopic, err, td[hiddenTopic].Err)
	}
}

// TestTopicAPIsAreNoExistenceOracle: every API that names a topic, asked
// by a principal without DESCRIBE on it, answers alike for an existing
// topic and a missing one: the responses are the same bytes once the
// names (of equal length) are swapped.
func TestTopicAPIsAreNoExistenceOracle(t *testing.T) {
	sb := startSecureBroker(t)
	ctx := testCtx(t, 30*time.Second)
	if r, err := sb.admin(t).CreateTopic(ctx, 2, 1, nil, hiddenTopic); err != nil || r.Err != nil {
		t.Fatalf("create %s: %v %v", hiddenTopic, err, r.Err)
	}
	rc := dialWire(t, sb.saslTxt)
	hs := rc.roundTrip(&kmsg.SASLHandshakeRequest{Mechanism: "PLAIN"}, 1, 1).(*kmsg.SASLHandshakeResponse)
	auth := rc.roundTrip(&kmsg.SASLAuthenticateRequest{SASLAuthBytes: []byte("\x00bob\x00" + bobPass)}, 2, 2).(*kmsg.SASLAuthenticateResponse)
	if hs.ErrorCode != 0 || auth.ErrorCode != 0 {
		t.Fatalf("PLAIN as bob: %d %d", hs.ErrorCode, auth.ErrorCode)
	}
	for _, tc := range []struct {
		api     string
		version int16
		req     func(topic string) kmsg.Request
	}{
		{"DeleteTopics by name", 5, func(topic string) kmsg.Request {
			r := kmsg.NewPtrDeleteTopicsRequest()
			r.TopicNames = []string{topic}
			return r
		}},
		{"DeleteTopics by name and id", 6, func(topic string) kmsg.Request {
			r := kmsg.NewPtrDeleteTopicsRequest()
			rt := kmsg.NewDeleteTopicsRequestTopic()
			rt.Topic = kmsg.StringPtr(topic)
			r.Topics = append(r.Topics, rt)
			return r
		}},
		{"CreatePartitions", 3, func(topic string) kmsg.Request {
			r := kmsg.NewPtrCreatePartitionsRequest()
			rt := kmsg.NewCreatePartitionsRequestTopic()
			rt.Topic, rt.Count = topic, 4
			r.Topics = append(r.Topics, rt)
			return r
		}},
		{"CreatePartitions with an assignment", 3, func(topic string) kmsg.Request {
			r := kmsg.NewPtrCreatePartitionsRequest()
			rt := kmsg.NewCreatePartitionsRequestTopic()
			rt.Topic, rt.Count = topic, 3
			a := kmsg.NewCreatePartitionsRequestTopicAssignment()
			a.Replicas = []int32{7}
			rt.Assignment = append(rt.Assignment, a)
			r.Topics = append(r.Topics, rt)
			return r
		}},
		{"DescribeConfigs", 4, func(topic string) kmsg.Request {
			r := kmsg.NewPtrDescribeConfigsRequest()
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
			r.Resources = append(r.Resources, rr)
			return r
		}},
		{"AlterConfigs", 2, func(topic string) kmsg.Request {
			r := kmsg.NewPtrAlterConfigsRequest()
			rr := kmsg.NewAlterConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
			c := kmsg.NewAlterConfigsRequestResourceConfig()
			c.Name, c.Value = "retention.ms", kmsg.StringPtr("1000")
			rr.Configs = append(rr.Configs, c)
			r.Resources = append(r.Resources, rr)
			return r
		}},
		{"IncrementalAlterConfigs", 1, func(topic string) kmsg.Request {
			r := kmsg.NewPtrIncrementalAlterConfigsRequest()
			rr := kmsg.NewIncrementalAlterConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
			c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			c.Name, c.Value = "retention.ms", kmsg.StringPtr("1000")
			rr.Configs = append(rr.Configs, c)
			r.Resources = append(r.Resources, rr)
			return r
		}},
		{"ListOffsets", 7, func(topic string) kmsg.Request {
			r := kmsg.NewPtrListOffsetsRequest()
			r.ReplicaID = -1
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = topic
			for p := int32(0); p < 3; p++ {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition, rp.Timestamp = p, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
			return r
		}},
		{"OffsetForLeaderEpoch", 4, func(topic string) kmsg.Request {
			r := kmsg.NewPtrOffsetForLeaderEpochRequest()
			r.ReplicaID = -1
			rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
			rt.Topic = topic
			for p := int32(0); p < 3; p++ {
				rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
				rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = p, -1, 0
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
			return r
		}},
		{"Metadata", 12, func(topic string) kmsg.Request {
			r := kmsg.NewPtrMetadataRequest()
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr(topic)
			r.Topics = append(r.Topics, mt)
			r.AllowAutoTopicCreation = true
			return r
		}},
		{"Fetch", 11, func(topic string) kmsg.Request {
			r := kmsg.NewPtrFetchRequest()
			r.ReplicaID, r.MaxWaitMillis, r.MaxBytes = -1, 0, 1<<20
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.PartitionMaxBytes = 1 << 20
			rt.Partitions = append(rt.Partitions, rp)
			r.Topics = append(r.Topics, rt)
			return r
		}},
		{"DescribeProducers", 0, func(topic string) kmsg.Request {
			r := kmsg.NewPtrDescribeProducersRequest()
			rt := kmsg.NewDescribeProducersRequestTopic()
			rt.Topic, rt.Partitions = topic, []int32{0, 1, 2}
			r.Topics = append(r.Topics, rt)
			return r
		}},
	} {
		answer := func(topic string) []byte {
			rc.write(reqFrame(tc.req(topic), tc.version, 9))
			corr, body, err := rc.readFrame(3 * time.Second)
			if err != nil || corr != 9 {
				t.Fatalf("%s v%d of %s: corr %d, %v", tc.api, tc.version, topic, corr, err)
			}
			return body
		}
		hidden, absent := answer(hiddenTopic), answer(absentTopic)
		if !bytes.Equal(bytes.ReplaceAll(hidden, []byte(hiddenTopic), []byte(absentTopic)), absent) {
			t.Errorf("%s v%d tells an existing topic bob may not DESCRIBE from a missing one:\n  exists:  %q\n  missing: %q", tc.api, tc.version, hidden, absent)
		}
	}
	if td, err := sb.admin(t).ListTopics(context.Background(), hiddenTopic); err != nil || len(td[hiddenTopic].Partitions) != 2 {
		t.Fatalf("%s after bob's requests: %v %+v", hiddenTopic, err, td[hiddenTopic])
	}
}
