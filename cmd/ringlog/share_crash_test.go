package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/kwire"
	"github.com/ringlog/ringlog/internal/testenv"
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
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, false, fmt.Errorf("partition %d: %w", p.Partition, err) // a moved leader: find it again
			}
			for _, a := range p.AcquiredRecords {
				acquired = append(acquired, [2]int64{a.FirstOffset, a.LastOffset})
			}
		}
	}
	return acquired, acked, nil
}

// shareTally is what a share consumer test knows: the offsets whose
// acceptance the broker confirmed, how often each offset was delivered,
// and the acquired ranges to accept with the next fetch.
type shareTally struct {
	confirmed  map[int64]bool
	deliveries map[int64]int
	pending    [][2]int64
}

func newShareTally() *shareTally {
	return &shareTally{confirmed: map[int64]bool{}, deliveries: map[int64]int{}}
}

// fetched records a fetch's answer: the pending acceptances confirmed (acked)
// or lost, and what it acquired; an error names an offset delivered again
// after its acceptance was confirmed.
func (st *shareTally) fetched(got [][2]int64, acked bool) error {
	if acked {
		for _, a := range st.pending {
			for off := a[0]; off <= a[1]; off++ {
				st.confirmed[off] = true
			}
		}
	}
	st.pending = nil
	for _, a := range got {
		for off := a[0]; off <= a[1]; off++ {
			if st.confirmed[off] {
				return fmt.Errorf("offset %d delivered again after its acceptance was confirmed", off)
			}
			st.deliveries[off]++
		}
		st.pending = append(st.pending, a)
	}
	return nil
}

// again counts the offsets delivered more than once.
func (st *shareTally) again() int {
	n := 0
	for _, d := range st.deliveries {
		if d > 1 {
			n++
		}
	}
	return n
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

	tally := newShareTally()
	kills := 0
	var s *shareWire
	for len(tally.confirmed) < total {
		if ctx.Err() != nil {
			t.Fatalf("only %d of %d records confirmed", len(tally.confirmed), total)
		}
		if s == nil {
			if !testenv.Until(ctx, func() bool {
				var err error
				s, err = dialShare(ctx, b.Kafka, group, "m1", topic)
				return err == nil
			}) {
				continue // the context's end, reported above
			}
			tally.pending = nil // acks of a dead session are lost: delivered again
		}
		if kills < 2 && len(tally.confirmed) >= (kills+1)*total/3 {
			kills++
			b.kill()
			s.c.Close()
			s = nil
			b = restartOn(t, dir, b.Kafka)
			continue
		}
		got, acked, err := s.fetch(ctx, tally.pending)
		if err != nil {
			s.c.Close()
			s = nil
			continue
		}
		if err := tally.fetched(got, acked); err != nil {
			t.Fatalf("%v (kill %d)", err, kills)
		}
	}
	if kills != 2 {
		t.Fatalf("%d kills, want 2", kills)
	}
	t.Logf("%d records confirmed across %d kills; %d delivered again (acquired, not confirmed, when the broker died)", len(tally.confirmed), kills, tally.again())
}

// leaderOf returns the node id leading partition p of topic, -1 when
// none is known.
func leaderOf(ctx context.Context, addrs []string, topic string, p int32) int32 {
	for _, a := range addrs {
		m, err := metadataFrom(ctx, a)
		if err != nil {
			continue
		}
		for _, t := range m.Topics {
			if t.Topic != nil && *t.Topic == topic {
				for _, pp := range t.Partitions {
					if pp.Partition == p && pp.ErrorCode == 0 {
						return pp.Leader
					}
				}
			}
		}
	}
	return -1
}

// TestShareGroupClusterFailover: a share consumer in a 3-broker cluster
// accepts records while the topic partition's leader is killed with -9,
// then the leader of the share state's partition (the share
// coordinator): the new leaders take over from the replicated
// __share_group_state, every record is accepted in the end, and no
// record whose acceptance was confirmed is delivered again.
func TestShareGroupClusterFailover(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3)
	for id := 1; id <= 3; id++ {
		c.start(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c.converge(ctx, 3)
	const topic, group, total = "csq", "cworkers", 3000
	admCl := procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...))
	adm := kadm.NewClient(admCl)
	if res, err := adm.CreateTopic(ctx, 1, 3, nil, topic); err != nil || res.Err != nil {
		t.Fatalf("create %s: %v %v", topic, err, res.Err)
	}
	c.waitFullISR(ctx, topic, 1, 3, 30*time.Second)
	c.waitFullISR(ctx, engine.ShareStateTopic, int(engine.ShareStatePartitions), 3, 60*time.Second)
	if r := tool(t, "", nil, "group", "alter", group, "--set", "share.auto.offset.reset=earliest", "--brokers", c.kafka[0]); r.code != 0 {
		t.Fatalf("group alter: %d %s", r.code, r.stderr)
	}
	produceSpread(t, c.kafka[0], topic, map[int32]int{0: total}, nil)

	tally := newShareTally()
	var killed []int32
	var lastErr error
	var s *shareWire
	for len(tally.confirmed) < total {
		if ctx.Err() != nil {
			t.Fatalf("only %d of %d records confirmed (killed %v); last error: %v", len(tally.confirmed), total, killed, lastErr)
		}
		if len(killed) < 2 && len(tally.confirmed) >= (len(killed)+1)*total/3 {
			victim := leaderOf(ctx, c.kafka, topic, 0) // first the partition's leader
			if len(killed) == 1 {
				// then the share coordinator of the group's state
				tid := topicID(ctx, t, admCl, topic)
				victim = leaderOf(ctx, c.kafka, engine.ShareStateTopic, engine.SharePartitionFor(engine.ShareKey{Group: group, Topic: tid, Partition: 0}, int(engine.ShareStatePartitions)))
			}
			if victim < 1 {
				continue
			}
			c.procs[victim-1].kill()
			killed = append(killed, victim)
			if s != nil {
				s.c.Close()
				s = nil
			}
			c.start(int(victim))
			continue
		}
		if s == nil {
			if !testenv.Until(ctx, func() bool {
				leader := leaderOf(ctx, c.kafka, topic, 0)
				if leader < 1 {
					lastErr = fmt.Errorf("no leader of %s", topic)
					return false
				}
				if lastErr = shareJoin(ctx, c.kafka, group, "m1", topic); lastErr != nil {
					return false
				}
				s, lastErr = dialShareConn(ctx, c.kafka[leader-1], group, "m1", topicID(ctx, t, admCl, topic))
				return lastErr == nil
			}) {
				continue // the context's end, reported above
			}
			tally.pending = nil
		}
		got, acked, err := s.fetch(ctx, tally.pending)
		if err != nil {
			lastErr = fmt.Errorf("fetch: %w", err)
			s.c.Close()
			s = nil
			continue
		}
		if !acked && len(tally.pending) > 0 {
			lastErr = fmt.Errorf("acknowledgement of %v refused", tally.pending)
		}
		if err := tally.fetched(got, acked); err != nil {
			t.Fatalf("%v (killed %v)", err, killed)
		}
	}
	t.Logf("%d records confirmed; killed %v (partition leader, share coordinator); %d delivered again", len(tally.confirmed), killed, tally.again())
}

// shareJoin joins member to group through whichever broker coordinates
// it (franz-go routes ShareGroupHeartbeat to the group's coordinator).
func shareJoin(ctx context.Context, addrs []string, group, member, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RetryTimeout(3*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = group, member, []string{topic}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := hb.RequestWith(hctx, cl)
	if err != nil {
		return fmt.Errorf("join: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	return nil
}

// dialShareConn opens a share connection to a partition leader, for a
// member that joined already.
func dialShareConn(ctx context.Context, addr, group, member string, topicID [16]byte) (*shareWire, error) {
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := kwire.Dial(dctx, addr)
	if err != nil {
		return nil, err
	}
	return &shareWire{c: c, group: group, member: member, topicID: topicID}, nil
}

func topicID(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) [16]byte {
	t.Helper()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil || td[topic].Err != nil {
		t.Fatalf("topic id of %s: %v %v", topic, err, td[topic].Err)
	}
	return td[topic].ID
}
