package netio_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// deliveries records, per partition, who received records and when.
type deliveries struct {
	mu   sync.Mutex
	last map[int32]delivery
	// gaps: per partition, the longest time between two deliveries to
	// the same member, measured since watch was set.
	gaps  map[int32]time.Duration
	moved map[int32]bool // the partition changed hands since watch
	watch bool
	seen  map[string]int // "partition/offset" -> deliveries
}

type delivery struct {
	member string
	at     time.Time
}

func newDeliveries() *deliveries {
	return &deliveries{last: map[int32]delivery{}, gaps: map[int32]time.Duration{}, moved: map[int32]bool{}, seen: map[string]int{}}
}

func (d *deliveries) add(member string, r *kgo.Record) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++
	prev, ok := d.last[r.Partition]
	if d.watch && ok {
		if prev.member != member {
			d.moved[r.Partition] = true
		} else if gap := now.Sub(prev.at); gap > d.gaps[r.Partition] {
			d.gaps[r.Partition] = gap
		}
	}
	d.last[r.Partition] = delivery{member, now}
}

func (d *deliveries) owners() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for _, l := range d.last {
		if time.Since(l.at) < time.Second {
			out[l.member]++
		}
	}
	return out
}

// TestConsumerProtocolNoStopTheWorld: with the KIP-848 protocol a member
// joining a group takes its share of partitions without pausing anyone
// else: the partitions that keep their owner are delivered throughout.
// It also checks the group's views: ConsumerGroupDescribe, ListGroups'
// type, DescribeGroups' classic view, and the refusals between protocols.
func TestConsumerProtocolNoStopTheWorld(t *testing.T) {
	// Heartbeats every 1.5 s: a rebalance that paused the partitions a
	// member keeps would stop them for at least that long.
	b := startBroker(t, withEngine(func(c *engine.Config) { c.Groups.Consumer.HeartbeatInterval = 1500 * time.Millisecond }))
	const topic, group = "k848", "g848"
	createTopic(t, b, topic, 6)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A steady load: one record per partition every 10 ms.
	prod := b.client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			for p := int32(0); p < 6; p++ {
				prod.Produce(ctx, &kgo.Record{Partition: p, Value: []byte(fmt.Sprint(i))}, nil)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	d := newDeliveries()
	var wg sync.WaitGroup
	var revokedMu sync.Mutex
	revoked := 0 // partitions taken from a member since the watch began
	consume := func(name string) *kgo.Client {
		cl := b.client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ServerSideBalancer(),
			kgo.ClientID(name), kgo.FetchMaxWait(50*time.Millisecond), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
				d.mu.Lock()
				watching := d.watch
				d.mu.Unlock()
				if watching && ctx.Err() == nil {
					revokedMu.Lock()
					revoked += len(lost[topic])
					revokedMu.Unlock()
				}
			}))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				if fs.IsClientClosed() {
					return
				}
				fs.EachRecord(func(r *kgo.Record) { d.add(name, r) })
			}
		}()
		return cl
	}
	a, bb := consume("a"), consume("b")
	e2eWaitFor(t, 20*time.Second, "two members sharing six partitions", func() bool {
		o := d.owners()
		return o["a"] == 3 && o["b"] == 3
	})

	d.mu.Lock()
	d.watch = true
	d.mu.Unlock()
	joined := time.Now()
	c := consume("c")
	e2eWaitFor(t, 20*time.Second, "the third member taking two partitions", func() bool {
		o := d.owners()
		return o["a"] == 2 && o["b"] == 2 && o["c"] == 2
	})
	absorbed := time.Since(joined)
	d.mu.Lock()
	kept := 0
	for p := int32(0); p < 6; p++ {
		if d.moved[p] {
			continue
		}
		kept++
		// A kept partition is delivered every 10 ms, fetched at least
		// every 50 ms: a second is a pause.
		if d.gaps[p] > time.Second {
			t.Errorf("partition %d kept its owner but went %v without a delivery while a member joined", p, d.gaps[p])
		}
	}
	d.mu.Unlock()
	if kept != 4 {
		t.Errorf("%d partitions kept their owner, want 4 (the uniform assignor moves only what balance needs)", kept)
	}
	revokedMu.Lock()
	if revoked != 2 {
		t.Errorf("%d partitions were revoked from the members while the third joined, want the 2 that moved", revoked)
	}
	revokedMu.Unlock()
	t.Logf("the third member was absorbed in %v", absorbed)

	// The group's views.
	admin := b.client()
	desc := kmsg.NewPtrConsumerGroupDescribeRequest()
	desc.Groups = []string{group, "no-such-group"}
	dresp, err := desc.RequestWith(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	g0 := dresp.Groups[0]
	if g0.ErrorCode != 0 || g0.State != "Stable" || len(g0.Members) != 3 || g0.AssignorName != "uniform" || g0.Epoch != g0.AssignmentEpoch {
		t.Fatalf("ConsumerGroupDescribe: %+v", g0)
	}
	for _, m := range g0.Members {
		if m.MemberEpoch != g0.Epoch || len(m.Assignment.TopicPartitions) != 1 || len(m.Assignment.TopicPartitions[0].Partitions) != 2 || m.Assignment.TopicPartitions[0].Topic != topic {
			t.Fatalf("member %+v", m)
		}
	}
	if dresp.Groups[1].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("an unknown group: %+v", dresp.Groups[1])
	}
	adm := kadm.NewClient(admin)
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lg, ok := listed[group]; !ok || lg.ProtocolType != "consumer" || lg.State != "Stable" {
		t.Fatalf("ListGroups: %+v", listed)
	}
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	dg := described[group]
	assigned := 0
	for _, m := range dg.Members {
		if ca, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range ca.Topics {
				assigned += len(tp.Partitions)
			}
		}
	}
	if dg.Err != nil || len(dg.Members) != 3 || assigned != 6 {
		t.Fatalf("DescribeGroups' classic view: %+v (assigned %d)", dg, assigned)
	}

	// A classic member of another protocol type cannot join the live
	// consumer group (one of type "consumer" can: migrate_e2e_test.go).
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = group, 10000, 10000, "connect"
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0}}}
	jresp, err := join.RequestWith(ctx, admin)
	if err != nil || jresp.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("classic join of a consumer group: %v %+v", err, jresp)
	}
	// Nor can the group be deleted while it has members.
	if resp, err := adm.DeleteGroup(ctx, group); err == nil && !errors.Is(resp.Err, kerr.NonEmptyGroup) {
		t.Fatalf("delete a live consumer group: %+v", resp)
	}

	// The members leave (epoch -1); the group is then empty and may be
	// deleted, or taken over by the classic protocol.
	for _, cl := range []*kgo.Client{a, bb, c} {
		cl.Close()
	}
	cancel()
	wg.Wait()
	ctx2 := testCtx(t, 10*time.Second)
	e2eWaitFor(t, 5*time.Second, "the group empty", func() bool {
		l, err := adm.ListGroups(ctx2)
		return err == nil && l[group].State == "Empty"
	})
	if resp, err := adm.DeleteGroup(ctx2, group); err != nil || resp.Err != nil {
		t.Fatalf("delete the empty group: %v %v", err, resp.Err)
	}
}

// TestConsumerProtocolCommitsAndFencing: offsets committed by a member
// carry its epoch; a stale epoch is refused, and a new member resumes
// from the committed offsets.
func TestConsumerProtocolCommitsAndFencing(t *testing.T) {
	b := startBroker(t)
	const topic, group = "k848c", "g848c"
	createTopic(t, b, topic, 2)
	produceN(t, b, topic, 0, 100)
	ctx := testCtx(t, 30*time.Second)

	cl := b.client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ServerSideBalancer(), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	recs := e2ePoll(t, ctx, cl, 100)
	if err := cl.CommitRecords(ctx, recs[:60]...); err != nil {
		t.Fatalf("commit as a member: %v", err)
	}

	// A raw commit with a stale epoch, as a fenced member would send.
	desc := kmsg.NewPtrConsumerGroupDescribeRequest()
	desc.Groups = []string{group}
	dresp, err := desc.RequestWith(ctx, b.client())
	if err != nil || len(dresp.Groups[0].Members) != 1 {
		t.Fatalf("describe: %v %+v", err, dresp)
	}
	m := dresp.Groups[0].Members[0]
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version = 9
	commit.Group, commit.MemberID, commit.Generation = group, m.MemberID, m.MemberEpoch-1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = topic
	ct.Partitions = []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 99, LeaderEpoch: -1}}
	commit.Topics = append(commit.Topics, ct)
	cresp, err := commit.RequestWith(ctx, b.client())
	if err != nil || cresp.Topics[0].Partitions[0].ErrorCode != kerr.StaleMemberEpoch.Code {
		t.Fatalf("stale-epoch commit: %v %+v", err, cresp)
	}
	commit.MemberID = "not-a-member"
	cresp, err = commit.RequestWith(ctx, b.client())
	if err != nil || cresp.Topics[0].Partitions[0].ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("unknown-member commit: %v %+v", err, cresp)
	}
	// OffsetFetch v9 checks the member and epoch too.
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fg := kmsg.NewOffsetFetchRequestGroup()
	fg.Group, fg.MemberID, fg.MemberEpoch = group, &m.MemberID, m.MemberEpoch+5
	fetch.Groups = append(fetch.Groups, fg)
	fresp, err := fetch.RequestWith(ctx, b.client())
	if err != nil || fresp.Groups[0].ErrorCode != kerr.StaleMemberEpoch.Code {
		t.Fatalf("stale-epoch offset fetch: %v %+v", err, fresp)
	}
	cl.Close()

	// The next member resumes after the 60 committed records.
	cl2 := b.client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ServerSideBalancer(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	rest := e2ePoll(t, ctx, cl2, 40)
	seen := map[string]bool{}
	for _, r := range recs[:60] {
		seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = true
	}
	for _, r := range rest {
		if seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] {
			t.Fatalf("record %d/%d delivered again after its commit", r.Partition, r.Offset)
		}
	}
}

// TestConsumerProtocolCommitWithAnOlderEpoch (KIP-1251): a member whose
// epoch moved on (it gave a partition to a new member) may still commit,
// with the epoch it had, the partition it kept; the one it gave up is
// refused STALE_MEMBER_EPOCH, partition by partition. franz-go otherwise
// retries such a commit with its new epoch, leaves the given-up
// partition out and reports REBALANCE_IN_PROGRESS for it (seen as a
// failure of its TestGroupETL/range/848 on ringlog).
func TestConsumerProtocolCommitWithAnOlderEpoch(t *testing.T) {
	b := startBroker(t)
	const topic, group = "k1251", "g1251"
	createTopic(t, b, topic, 2)
	ctx := testCtx(t, 30*time.Second)
	admin := b.client()
	describe := func() []kmsg.ConsumerGroupDescribeResponseGroupMember {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{group}
		resp, err := req.RequestWith(ctx, admin)
		if err != nil || len(resp.Groups) != 1 {
			t.Fatalf("describe: %v %+v", err, resp)
		}
		return resp.Groups[0].Members
	}
	owned := func(m kmsg.ConsumerGroupDescribeResponseGroupMember) []int32 {
		var ps []int32
		for _, tp := range m.Assignment.TopicPartitions {
			ps = append(ps, tp.Partitions...)
		}
		return ps
	}
	opts := []kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ServerSideBalancer(), kgo.DisableAutoCommit()}
	first := b.client(opts...)
	first.PollFetches(testCtx(t, 500*time.Millisecond)) // joins
	var before kmsg.ConsumerGroupDescribeResponseGroupMember
	e2eWaitFor(t, 10*time.Second, "the first member owning both partitions", func() bool {
		ms := describe()
		if len(ms) == 1 && len(owned(ms[0])) == 2 {
			before = ms[0]
			return true
		}
		return false
	})
	second := b.client(opts...)
	go second.PollFetches(ctx)
	go first.PollFetches(ctx) // its heartbeats go on
	var after kmsg.ConsumerGroupDescribeResponseGroupMember
	e2eWaitFor(t, 20*time.Second, "the first member down to one partition at a newer epoch", func() bool {
		for _, m := range describe() {
			if m.MemberID == before.MemberID && len(owned(m)) == 1 && m.MemberEpoch > before.MemberEpoch {
				after = m
				return true
			}
		}
		return false
	})
	kept := owned(after)[0]
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version = 9
	commit.Group, commit.MemberID, commit.Generation = group, before.MemberID, before.MemberEpoch
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = topic
	ct.Partitions = []kmsg.OffsetCommitRequestTopicPartition{{Partition: kept, Offset: 0, LeaderEpoch: -1}, {Partition: 1 - kept, Offset: 0, LeaderEpoch: -1}}
	commit.Topics = append(commit.Topics, ct)
	resp, err := commit.RequestWith(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]int16{}
	for _, p := range resp.Topics[0].Partitions {
		got[p.Partition] = p.ErrorCode
	}
	if got[kept] != 0 || got[1-kept] != kerr.StaleMemberEpoch.Code {
		t.Fatalf("commit with epoch %d (the member is at %d): codes %v, want 0 for the kept partition %d, STALE_MEMBER_EPOCH for %d",
			before.MemberEpoch, after.MemberEpoch, got, kept, 1-kept)
	}
	first.Close()
	second.Close()
}

// TestConsumerProtocolBadRequests: a malformed heartbeat gets the Kafka
// error the client can act on, and leaves nothing behind.
func TestConsumerProtocolBadRequests(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b, "kbad", 1)
	ctx := testCtx(t, 10*time.Second)
	cl := b.client()
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name string
		mod  func(*kmsg.ConsumerGroupHeartbeatRequest)
		want *kerr.Error
	}{
		{"v1 without a member id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "" }, kerr.InvalidRequest},
		{"join without a subscription", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = nil }, kerr.InvalidRequest},
		{"join without a rebalance timeout", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMillis = -1 }, kerr.InvalidRequest},
		{"unknown assignor", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = str("cooperative-sticky") }, kerr.UnsupportedAssignor},
		{"bad regex", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.SubscribedTopicNames, r.SubscribedTopicRegex = nil, str("(")
		}, kerr.InvalidRegularExpression},
		{"epoch below -2", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -7 }, kerr.InvalidRequest},
		{"heartbeat of an unknown member", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = 4 }, kerr.UnknownMemberID},
	} {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group, req.MemberID, req.RebalanceTimeoutMillis = "kbad-g", "m-1", 10000
		req.SubscribedTopicNames = []string{"kbad"}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		tc.mod(req)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if resp.ErrorCode != tc.want.Code || resp.ErrorMessage == nil {
			t.Errorf("%s: error %v (%v), want %v", tc.name, kerr.ErrorForCode(resp.ErrorCode), resp.ErrorMessage, tc.want)
		}
	}
	adm := kadm.NewClient(cl)
	if l, err := adm.ListGroups(ctx); err != nil || len(l) != 0 {
		t.Fatalf("refused heartbeats left groups behind: %v %+v", err, l)
	}
}

// A connection's group coordinator requests are processed in the order
// they arrived, as Kafka does: an OffsetFetch pipelined right behind an
// OffsetCommit (one write, both frames) sees the commit, every time. On
// the old dispatch the commit ran on a goroutine of its own while the
// fetch was answered at once on the event loop, before the commit was
// written. A client relies on the same for an OffsetCommit followed by
// the ConsumerGroupHeartbeat that gives the committed partition up.
func TestGroupRequestsOfAConnectionInOrder(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b, "ordered", 1)
	raw := b.e2eRaw()
	for i := range 20 {
		offset := int64(100 + i)
		commit := kmsg.NewPtrOffsetCommitRequest()
		commit.Group, commit.Generation = "ordered-g", -1
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.Topic = "ordered"
		ct.Partitions = []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: offset, LeaderEpoch: -1}}
		commit.Topics = append(commit.Topics, ct)
		commit.SetVersion(8)
		fetch := kmsg.NewPtrOffsetFetchRequest()
		ft := kmsg.NewOffsetFetchRequestGroup()
		ft.Group = "ordered-g"
		fetch.Groups = append(fetch.Groups, ft)
		fetch.SetVersion(8)
		raw.corr++
		frames := raw.f.AppendRequest(nil, commit, raw.corr)
		raw.corr++
		frames = append(frames, raw.f.AppendRequest(nil, fetch, raw.corr)...) // (AppendRequest sizes its frame from the start of dst)
		raw.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := raw.c.Write(frames); err != nil {
			t.Fatal(err)
		}
		cresp := raw.recv(commit, 8, raw.corr-1).(*kmsg.OffsetCommitResponse)
		if code := cresp.Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("commit %d: %v", offset, kerr.ErrorForCode(code))
		}
		fresp := raw.recv(fetch, 8, raw.corr).(*kmsg.OffsetFetchResponse)
		var got int64 = -1
		for _, g := range fresp.Groups {
			for _, tp := range g.Topics {
				for _, p := range tp.Partitions {
					got = p.Offset
				}
			}
		}
		if got != offset {
			t.Fatalf("round %d: the OffsetFetch pipelined behind the commit of %d saw %d", i, offset, got)
		}
	}
}
