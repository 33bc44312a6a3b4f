package netio_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/testenv"
)

// setGroupConfigs sets share-group configs (IncrementalAlterConfigs on
// the GROUP resource).
func setGroupConfigs(t *testing.T, ctx context.Context, cl *kgo.Client, group string, kvs ...string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i < len(kvs); i += 2 {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = kvs[i], &kvs[i+1]
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Resources[0].ErrorCode); err != nil {
		t.Fatalf("set %v on %s: %v", kvs, group, err)
	}
}

// TestShareGroupSplitsOnePartition: three franz-go share consumers of one
// partition split its records between them, each record accepted once,
// while records keep coming.
func TestShareGroupSplitsOnePartition(t *testing.T) {
	b := startBroker(t)
	const topic, group, total = "queue", "workers", 3000
	createTopic(t, b, topic, 1)
	ctx := testCtx(t, 60*time.Second)
	setGroupConfigs(t, ctx, b.client(), group, "share.auto.offset.reset", "earliest")

	var mu sync.Mutex
	accepted := map[int64]string{} // offset -> member
	perMember := map[string]int{}
	var dup error
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 {
		name := fmt.Sprint("c", i)
		cl := b.client(kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.ShareMaxRecords(20))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			for cctx.Err() == nil {
				fs := cl.PollFetches(cctx)
				fs.EachRecord(func(r *kgo.Record) {
					r.Ack(kgo.AckAccept)
					mu.Lock()
					if prev, ok := accepted[r.Offset]; ok {
						dup = fmt.Errorf("offset %d accepted by %s and %s", r.Offset, prev, name)
					}
					accepted[r.Offset] = name
					perMember[name]++
					mu.Unlock()
				})
				fs.EachError(func(_ string, _ int32, err error) {
					if cctx.Err() == nil {
						t.Errorf("%s: %v", name, err)
					}
				})
				if err := cl.FlushAcks(cctx); err != nil && cctx.Err() == nil {
					t.Errorf("%s: flush acks: %v", name, err)
				}
				time.Sleep(2 * time.Millisecond) // a worker's processing
			}
		}()
	}
	for i := 0; i < total; i += 100 {
		produceN(t, b, topic, i, 100)
	}
	e2eWaitFor(t, 40*time.Second, "every record accepted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted) == total
	})
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if dup != nil {
		t.Fatal(dup)
	}
	for i := range 3 {
		if perMember[fmt.Sprint("c", i)] == 0 {
			t.Errorf("c%d got no records: %v", i, perMember)
		}
	}
	t.Logf("split %v", perMember)
}

// shareRaw is a share consumer speaking the protocol by hand on one
// connection: exact control of acknowledgements and epochs.
type shareRaw struct {
	c       *e2eConn
	group   string
	member  string
	epoch   int32
	topicID [16]byte
}

func (s *shareRaw) join(t *testing.T, topic string) {
	t.Helper()
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = s.group, s.member, []string{topic}
	resp := s.c.do(hb, 1).(*kmsg.ShareGroupHeartbeatResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		t.Fatalf("join %s: %v", s.member, err)
	}
	if resp.Assignment == nil || len(resp.Assignment.TopicPartitions) != 1 {
		t.Fatalf("join %s: assignment %+v", s.member, resp.Assignment)
	}
	s.topicID = resp.Assignment.TopicPartitions[0].TopicID
}

// fetch sends a ShareFetch of partition 0 with acks and returns the
// answer; the session epoch moves on when it succeeds.
func (s *shareRaw) fetch(t *testing.T, wait int32, acks ...kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) *kmsg.ShareFetchResponse {
	t.Helper()
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &s.group, &s.member, s.epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = wait, 1, 1<<20, 100, 100
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = s.topicID
	rp := kmsg.NewShareFetchRequestTopicPartition()
	rp.AcknowledgementBatches = acks
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := s.c.do(req, 2).(*kmsg.ShareFetchResponse)
	if resp.ErrorCode == 0 {
		s.epoch = max(1, s.epoch+1)
	}
	return resp
}

func acquired(resp *kmsg.ShareFetchResponse) []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord {
	var out []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out = append(out, p.AcquiredRecords...)
		}
	}
	return out
}

func ack(first, last int64, typ int8) kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch {
	a := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
	a.FirstOffset, a.LastOffset, a.AcknowledgeTypes = first, last, []int8{typ}
	return a
}

// TestShareLockExpiryAndDeliveryLimit: records a member does not
// acknowledge come back after the lock duration with a higher delivery
// count, and once they reached share.delivery.count.limit they are
// archived (never delivered again, the start offset passes them):
// the dead-letter end of a share group.
func TestShareLockExpiryAndDeliveryLimit(t *testing.T) {
	b := startBroker(t)
	const topic, group = "locks", "lockers"
	createTopic(t, b, topic, 1)
	produceN(t, b, topic, 0, 10)
	ctx := testCtx(t, 30*time.Second)
	setGroupConfigs(t, ctx, b.client(), group, "share.auto.offset.reset", "earliest",
		"share.record.lock.duration.ms", "1000", "share.delivery.count.limit", "2")
	a := &shareRaw{c: b.e2eRaw(), group: group, member: "member-a"}
	a.join(t, topic)
	resp := a.fetch(t, 0)
	if resp.AcquisitionLockTimeoutMillis != 1000 {
		t.Fatalf("lock timeout %d, want the group's 1000", resp.AcquisitionLockTimeoutMillis)
	}
	if got := acquired(resp); len(got) != 1 || got[0].FirstOffset != 0 || got[0].LastOffset != 9 || got[0].DeliveryCount != 1 {
		t.Fatalf("first fetch acquired %+v", got)
	}
	locked := time.Now()
	// Accept 0-4; hold 5-9 past the lock.
	resp = a.fetch(t, 0, ack(0, 4, 1))
	if got := acquired(resp); len(got) != 0 {
		t.Fatalf("records still locked were acquired again: %+v", got)
	}
	testenv.WaitFor(t, 10*time.Second, "records 5-9 acquired again", func() bool {
		resp = a.fetch(t, 0)
		return len(acquired(resp)) > 0
	})
	if held := time.Since(locked); held < 900*time.Millisecond {
		t.Fatalf("records locked for 1000 ms were acquired again after %v", held)
	}
	if got := acquired(resp); len(got) != 1 || got[0].FirstOffset != 5 || got[0].LastOffset != 9 || got[0].DeliveryCount != 2 {
		t.Fatalf("after the lock expired acquired %+v, want 5-9 delivery 2", got)
	}
	time.Sleep(1100 * time.Millisecond)
	// Delivered twice, the limit: archived, never again.
	resp = a.fetch(t, 200)
	if got := acquired(resp); len(got) != 0 {
		t.Fatalf("records past the delivery limit acquired: %+v", got)
	}
	desc := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	g := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	g.GroupID = group
	desc.Groups = append(desc.Groups, g)
	dresp, err := desc.RequestWith(ctx, b.client())
	if err != nil {
		t.Fatal(err)
	}
	if len(dresp.Groups) != 1 || len(dresp.Groups[0].Topics) != 1 || dresp.Groups[0].Topics[0].Partitions[0].StartOffset != 10 {
		t.Fatalf("describe offsets: %+v, want start offset 10", dresp.Groups)
	}
}

// TestShareSessionsAndBadRequests: the share session rules, and bad
// acknowledgements answered with Kafka's codes, nothing changed; a
// connection that closes releases its member's records to others.
func TestShareSessionsAndBadRequests(t *testing.T) {
	b := startBroker(t)
	const topic, group = "sessions", "sessioned"
	createTopic(t, b, topic, 1)
	produceN(t, b, topic, 0, 10)
	ctx := testCtx(t, 30*time.Second)
	setGroupConfigs(t, ctx, b.client(), group, "share.auto.offset.reset", "earliest")

	// Before any heartbeat: not a member (of no group, or of this one).
	for _, g := range []string{"nobody", group} {
		stranger := &shareRaw{c: b.e2eRaw(), group: g, member: "m"}
		if resp := stranger.fetch(t, 0); resp.ErrorCode != kerr.UnknownMemberID.Code {
			t.Fatalf("fetch of a stranger to %s: %s", g, kerr.ErrorForCode(resp.ErrorCode))
		}
	}
	a := &shareRaw{c: b.e2eRaw(), group: group, member: "member-a"}
	a.join(t, topic)
	a.epoch = 3 // no session yet
	if resp := a.fetch(t, 0); resp.ErrorCode != kerr.ShareSessionNotFound.Code {
		t.Fatalf("epoch 3 with no session: %s", kerr.ErrorForCode(resp.ErrorCode))
	}
	a.epoch = 0
	if got := acquired(a.fetch(t, 0)); len(got) != 1 {
		t.Fatalf("acquired %+v", got)
	}
	a.epoch = 7
	if resp := a.fetch(t, 0); resp.ErrorCode != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("wrong epoch: %s", kerr.ErrorForCode(resp.ErrorCode))
	}
	a.epoch = 1
	for _, c := range []struct {
		acks []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch
		want *kerr.Error
	}{
		{[]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{ack(4, 5, 1), ack(0, 1, 1)}, kerr.InvalidRequest}, // out of order
		{[]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{ack(0, 1, 9)}, kerr.InvalidRequest},               // no such type
		{[]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{ack(0, 1, 4)}, kerr.InvalidRequest},               // renew without IsRenewAck
		{[]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{ack(8, 30, 1)}, kerr.InvalidRecordState},          // past what was acquired
	} {
		resp := a.fetch(t, 0, c.acks...)
		if len(resp.Topics) != 1 || resp.Topics[0].Partitions[0].AcknowledgeErrorCode != c.want.Code {
			t.Fatalf("acks %+v: %+v, want %s", c.acks, resp.Topics, c.want)
		}
	}
	ackReq := kmsg.NewPtrShareAcknowledgeRequest()
	ackReq.GroupID, ackReq.MemberID, ackReq.ShareSessionEpoch = &a.group, &a.member, 0
	if resp := a.c.do(ackReq, 2).(*kmsg.ShareAcknowledgeResponse); resp.ErrorCode != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("ShareAcknowledge at epoch 0: %s", kerr.ErrorForCode(resp.ErrorCode))
	}
	// ... and the session it was refused for goes on.
	if resp := a.fetch(t, 0); resp.ErrorCode != 0 {
		t.Fatalf("the session after a refused epoch-0 ShareAcknowledge: %s", kerr.ErrorForCode(resp.ErrorCode))
	}
	// Another member cannot acknowledge a's records.
	c2 := &shareRaw{c: b.e2eRaw(), group: group, member: "member-c"}
	c2.join(t, topic)
	c2.fetch(t, 0)
	if resp := c2.fetch(t, 0, ack(0, 3, 1)); resp.Topics[0].Partitions[0].AcknowledgeErrorCode != kerr.InvalidRecordState.Code {
		t.Fatalf("c acknowledging a's records: %+v", resp.Topics)
	}
	// a's connection closes: its records go to the next fetch, delivery 2.
	a.c.c.Close()
	var got []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	e2eWaitFor(t, 5*time.Second, "a's records released", func() bool {
		got = acquired(c2.fetch(t, 0))
		return len(got) > 0
	})
	if got[0].FirstOffset != 0 || got[0].LastOffset != 9 || got[0].DeliveryCount != 2 {
		t.Fatalf("after a's connection closed c acquired %+v, want 0-9 delivery 2", got)
	}
	// One connection holds at most 16 share sessions.
	shared := b.e2eRaw()
	for i := 0; i <= 16; i++ {
		m := &shareRaw{c: shared, group: group, member: fmt.Sprint("many-", i)}
		m.join(t, topic)
		resp := m.fetch(t, 0)
		if want := int16(0); i == 16 {
			want = kerr.ShareSessionLimitReached.Code
			if resp.ErrorCode != want {
				t.Fatalf("a 17th share session on one connection: %s", kerr.ErrorForCode(resp.ErrorCode))
			}
		} else if resp.ErrorCode != want {
			t.Fatalf("share session %d: %s", i, kerr.ErrorForCode(resp.ErrorCode))
		}
	}
	// Group configs are checked.
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for _, kv := range [][2]string{{"share.auto.offset.reset", "sometimes"}, {"share.record.lock.duration.ms", "5"}, {"no.such.config", "1"}} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = kv[0], &kv[1]
		res.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{c}
		req.Resources = []kmsg.IncrementalAlterConfigsRequestResource{res}
		resp, err := req.RequestWith(ctx, b.client())
		if err != nil || !errors.Is(kerr.ErrorForCode(resp.Resources[0].ErrorCode), kerr.InvalidConfig) {
			t.Fatalf("%s=%s: %v %+v, want INVALID_CONFIG", kv[0], kv[1], err, resp)
		}
	}
}
