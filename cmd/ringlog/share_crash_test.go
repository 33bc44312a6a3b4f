package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/kwire"
)

// shareWire is a share consumer speaking the protocol by hand over one
// connection, so the test knows exactly which acknowledgements the
// broker confirmed.
type shareWire struct {
	c       *kwire.Conn
	group   string
	member  string
	epoch   int32
	topicID [16]byte
}

func dialShare(ctx context.Context, addr, group, member, topic string) (*shareWire, error) {
	c, err := kwire.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	s := &shareWire{c: c, group: group, member: member}
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.Version = 1
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = group, member, []string{topic}
	resp, err := c.Call(ctx, hb)
	if err != nil {
		c.Close()
		return nil, err
	}
	r := resp.(*kmsg.ShareGroupHeartbeatResponse)
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil || r.Assignment == nil || len(r.Assignment.TopicPartitions) != 1 {
		c.Close()
		return nil, fmt.Errorf("join: %v %+v", err, r.Assignment)
	}
	s.topicID = r.Assignment.TopicPartitions[0].TopicID
	return s, nil
}

// fetch sends a ShareFetch of partition 0 acknowledging acks (accept)
// and returns the acquired ranges and whether the acknowledgements were
// confirmed.
func (s *shareWire) fetch(ctx context.Context, acks [][2]int64) (acquired [][2]int64, acked bool, err error) {
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 2
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &s.group, &s.member, s.epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = 100, 1, 1<<20, 50, 50
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = s.topicID
	rp := kmsg.NewShareFetchRequestTopicPartition()
	for _, a := range acks {
		rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{FirstOffset: a[0], LastOffset: a[1], AcknowledgeTypes: []int8{1}})
	}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := s.c.Call(ctx, req)
	if err != nil {
		return nil, false, err
	}
	r := resp.(*kmsg.ShareFetchResponse)
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return nil, false, err
	}
	s.epoch = max(1, s.epoch+1)
	acked = len(acks) > 0
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if p.AcknowledgeErrorCode != 0 {
				acked = false
			}
			for _, a := range p.AcquiredRecords {
				acquired = append(acquired, [2]int64{a.FirstOffset, a.LastOffset})
			}
		}
	}
	return acquired, acked, nil
}

// TestShareGroupSurvivesKill: a share consumer accepts records while the
// broker is killed with -9 twice and restarted; every record is accepted
// in the end, and no record whose acceptance the broker confirmed is
// ever delivered again (the share state is fdatasync'ed in
// __share_group_state before an acknowledgement is answered). Records
// acquired but not confirmed come back, delivered again.
func TestShareGroupSurvivesKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := startServe(t, dir)
	const topic, group, total = "sq", "sworkers", 3000
	if r := tool(t, "", nil, "topic", "create", topic, "--partitions", "1", "--brokers", b.Kafka); r.code != 0 {
		t.Fatalf("topic create: %d %s", r.code, r.stderr)
	}
	if r := tool(t, "", nil, "group", "alter", group, "--set", "share.auto.offset.reset=earliest", "--brokers", b.Kafka); r.code != 0 {
		t.Fatalf("group alter: %d %s", r.code, r.stderr)
	}
	produceSpread(t, b.Kafka, topic, map[int32]int{0: total}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	confirmed := map[int64]bool{}
	deliveries := map[int64]int{}
	kills := 0
	var s *shareWire
	var pending [][2]int64
	for len(confirmed) < total {
		if ctx.Err() != nil {
			t.Fatalf("only %d of %d records confirmed", len(confirmed), total)
		}
		if s == nil {
			var err error
			if s, err = dialShare(ctx, b.Kafka, group, "m1", topic); err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			pending = nil // acks of a dead session are lost: delivered again
		}
		if kills < 2 && len(confirmed) >= (kills+1)*total/3 {
			kills++
			b.kill()
			s.c.Close()
			s = nil
			b = restartOn(t, dir, b.Kafka)
			continue
		}
		got, acked, err := s.fetch(ctx, pending)
		if err != nil {
			s.c.Close()
			s = nil
			continue
		}
		if acked {
			for _, a := range pending {
				for off := a[0]; off <= a[1]; off++ {
					confirmed[off] = true
				}
			}
		}
		pending = nil
		for _, a := range got {
			for off := a[0]; off <= a[1]; off++ {
				if confirmed[off] {
					t.Fatalf("offset %d delivered again after its acceptance was confirmed (kill %d)", off, kills)
				}
			}
			for off := a[0]; off <= a[1]; off++ {
				deliveries[off]++
			}
			pending = append(pending, a)
		}
	}
	if kills != 2 {
		t.Fatalf("%d kills, want 2", kills)
	}
	again := 0
	for _, n := range deliveries {
		if n > 1 {
			again++
		}
	}
	t.Logf("%d records confirmed across %d kills; %d delivered again (acquired, not confirmed, when the broker died)", len(confirmed), kills, again)
}
