package netio_test

import (
	"io"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/faultring"
)

// orderCommit is an OffsetCommit v8 of offset for topic/0.
func orderCommit(group, member string, gen int32, topic string, offset int64) *kmsg.OffsetCommitRequest {
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation, commit.MemberID = group, gen, member
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = topic
	ct.Partitions = []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: offset, LeaderEpoch: -1}}
	commit.Topics = append(commit.Topics, ct)
	commit.SetVersion(8)
	return commit
}

// A request whose body does not decode closes the connection before
// anything pipelined behind it is parsed (doc.go), also an inline group
// request (SyncGroup) that waits behind a running OffsetCommit: the
// Produce pipelined behind it is never appended. (From a hostile review
// of the ordering, which found it appended.)
func TestMalformedWaitingGroupRequestStopsThePipeline(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b, "mal", 1)
	for round := range 3 {
		raw := b.e2eRaw()
		var frames []byte
		frames = append(frames, reqFrame(orderCommit("mal-g", "", -1, "mal", int64(round)), 8, 1)...)
		// SyncGroup v0 whose body is one byte: the group string's
		// length does not even fit.
		frames = rawHeader(frames, 14, 0, 2, &testClientID, false, []byte{0})
		prod := produceRequest("mal", 0, -1, e2eBatch(t, 0, time.Now().UnixMilli(), -1, -1, -1, "after-malformed"))
		frames = append(frames, reqFrame(prod, 9, 3)...)
		raw.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := raw.c.Write(frames); err != nil {
			t.Fatal(err)
		}
		// Whatever comes back, the connection ends.
		raw.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, raw.c)
		time.Sleep(200 * time.Millisecond)
		check := b.e2eRaw()
		if got := check.listOffset("mal", 0, -1); got.Offset != 0 {
			t.Fatalf("round %d: the produce pipelined behind a malformed SyncGroup was appended (log end %d); the connection should have closed before it was parsed", round, got.Offset)
		}
	}
}

// A classic member's Heartbeats keep its session alive while an
// OffsetCommit it sent before them waits for a slow disk: they do not
// queue behind it (groupOrdered leaves Heartbeat out). (From a hostile
// review of the ordering, which found the member dropped: its session of
// 1 s expired while every heartbeat, sent each 200 ms, waited.)
func TestHeartbeatsBehindASlowCommitKeepTheSession(t *testing.T) {
	inj := faultring.New()
	b := startBroker(t, withEngine(func(c *engine.Config) {
		c.Shards = 1
		c.WrapBackend = inj.Wrap
	}))
	createTopic(t, b, "hb", 1)
	raw := b.e2eRaw()
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType = "hb-g", "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 1000, 1000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0, 0, 0}}}
	jr := raw.do(join, 5).(*kmsg.JoinGroupResponse)
	if jr.ErrorCode == kerr.MemberIDRequired.Code {
		join.MemberID = jr.MemberID
		jr = raw.do(join, 5).(*kmsg.JoinGroupResponse)
	}
	if jr.ErrorCode != 0 {
		t.Fatalf("join: %v", kerr.ErrorForCode(jr.ErrorCode))
	}
	member, gen := jr.MemberID, jr.Generation
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = "hb-g", member, gen
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: member, MemberAssignment: []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}}
	if sr := raw.do(sync, 3).(*kmsg.SyncGroupResponse); sr.ErrorCode != 0 {
		t.Fatalf("sync: %v", kerr.ErrorForCode(sr.ErrorCode))
	}
	hb := func() *kmsg.HeartbeatRequest {
		h := kmsg.NewPtrHeartbeatRequest()
		h.Group, h.MemberID, h.Generation = "hb-g", member, gen
		return h
	}
	if r := raw.do(hb(), 3).(*kmsg.HeartbeatResponse); r.ErrorCode != 0 {
		t.Fatalf("heartbeat: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	// The disk slows down: the commit's write takes seconds.
	inj.SetWriteRate(64)
	start := time.Now()
	commit := orderCommit("hb-g", member, gen, "hb", 42)
	ccorr := raw.send(commit, 8)
	var corrs []int32
	pace := time.NewTicker(200 * time.Millisecond)
	defer pace.Stop()
	for range 15 {
		<-pace.C
		corrs = append(corrs, raw.send(hb(), 3))
	}
	raw.c.SetReadDeadline(time.Now().Add(60 * time.Second))
	cr := raw.recv(commit, 8, ccorr).(*kmsg.OffsetCommitResponse)
	took := time.Since(start)
	inj.SetWriteRate(0)
	t.Logf("commit answered after %v: %v", took, kerr.ErrorForCode(cr.Topics[0].Partitions[0].ErrorCode))
	if took < 2*time.Second {
		t.Skipf("the slowed commit took only %v; the scenario needs it to outlast the 1 s session", took)
	}
	for i, corr := range corrs {
		r := raw.recv(hb(), 3, corr).(*kmsg.HeartbeatResponse)
		if r.ErrorCode != 0 {
			t.Fatalf("heartbeat %d (sent %v after the commit, every 200 ms, session 1 s): %v: the member was dropped while its heartbeats waited behind its own commit",
				i, time.Duration(i+1)*200*time.Millisecond, kerr.ErrorForCode(r.ErrorCode))
		}
	}
}
