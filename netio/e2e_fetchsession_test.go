package netio_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/netio"
)

// sessionFetch is a hand-built fetch of a session: partitions (of the
// test's topic) at their offsets, partitions to forget, and the wait.
type sessionFetch struct {
	id, epoch int32
	offsets   map[int32]int64
	forget    []int32
	maxWait   int32
}

func (sf sessionFetch) request(topic string, topicID [16]byte) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = sf.maxWait
	req.MinBytes = 1
	req.MaxBytes = 1 << 20
	req.SessionID, req.SessionEpoch = sf.id, sf.epoch
	if len(sf.offsets) > 0 {
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		for _, p := range slices.Sorted(maps.Keys(sf.offsets)) {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, sf.offsets[p], 1<<20
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	if len(sf.forget) > 0 {
		req.ForgottenTopics = []kmsg.FetchRequestForgottenTopic{{Topic: topic, TopicID: topicID, Partitions: sf.forget}}
	}
	return req
}

// answered lists a fetch response's partitions as "p:records".
func answered(resp *kmsg.FetchResponse) []string {
	var out []string
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			n := 0
			if len(rp.RecordBatches) > 0 {
				n = 1
			}
			out = append(out, fmt.Sprintf("%d:%d", rp.Partition, n))
		}
	}
	slices.Sort(out)
	return out
}

// TestE2EFetchSessionWire walks a fetch session over the wire at the
// first version with sessions, the last by topic name, the first by topic
// id and the newest: a full fetch opens it, incremental fetches send only
// what moved and get only what changed, a parked incremental fetch wakes
// on a partition it did not name, forgotten partitions stay quiet, wrong
// epochs and ids get their errors, and epoch -1 closes it.
func TestE2EFetchSessionWire(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 60*time.Second)
	sessions := func() float64 { return testutil.ToFloat64(b.Metrics.FetchSessions) }
	for _, v := range []int16{7, 12, 13, 17} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			topic := fmt.Sprintf("sessions-v%d", v)
			created := b.e2eCreate(ctx, topic, 3, nil)
			var id [16]byte
			name := topic
			if v >= 13 {
				id, name = created.ID, ""
			}
			rc := b.e2eRaw()
			rc.t = t
			do := func(sf sessionFetch) *kmsg.FetchResponse {
				t.Helper()
				return rc.do(sf.request(name, id), v).(*kmsg.FetchResponse)
			}
			produce := func(p int32, value string) {
				t.Helper()
				if pr := rc.rawProduce(topic, p, e2eBatch(t, 0, time.Now().UnixMilli(), -1, -1, -1, value)); pr.ErrorCode != 0 {
					t.Fatalf("produce to %d: %v", p, kerr.ErrorForCode(pr.ErrorCode))
				}
			}
			base := sessions()
			produce(0, "a")

			// Epoch 0 opens the session: every partition is answered.
			resp := do(sessionFetch{epoch: 0, offsets: map[int32]int64{0: 0, 1: 0, 2: 0}})
			if resp.ErrorCode != 0 || resp.SessionID <= 0 {
				t.Fatalf("open: error %d session %d", resp.ErrorCode, resp.SessionID)
			}
			if got := answered(resp); !slices.Equal(got, []string{"0:1", "1:0", "2:0"}) {
				t.Fatalf("open answered %v", got)
			}
			if sessions() != base+1 {
				t.Fatalf("ringlog_fetch_sessions %v, want %v", sessions(), base+1)
			}
			sid := resp.SessionID

			// Epoch 1: partition 0 moved past its record; nothing is new.
			resp = do(sessionFetch{id: sid, epoch: 1, offsets: map[int32]int64{0: 1}})
			if resp.ErrorCode != 0 || resp.SessionID != sid || len(answered(resp)) != 0 {
				t.Fatalf("epoch 1: error %d session %d answered %v", resp.ErrorCode, resp.SessionID, answered(resp))
			}
			// A record on partition 2, which the request does not name.
			produce(2, "b")
			resp = do(sessionFetch{id: sid, epoch: 2})
			if got := answered(resp); resp.ErrorCode != 0 || !slices.Equal(got, []string{"2:1"}) {
				t.Fatalf("epoch 2: error %d answered %v", resp.ErrorCode, got)
			}
			// The same epoch again, and an id never given.
			if resp = do(sessionFetch{id: sid, epoch: 2}); resp.ErrorCode != kerr.InvalidFetchSessionEpoch.Code || len(resp.Topics) != 0 {
				t.Fatalf("replayed epoch: error %d, %d topics", resp.ErrorCode, len(resp.Topics))
			}
			if resp = do(sessionFetch{id: sid + 1, epoch: 3}); resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
				t.Fatalf("unknown id: error %d", resp.ErrorCode)
			}

			// Epoch 3 parks (partition 2 moved past its record); a record
			// on partition 1, still at its first position, wakes it.
			parked := sessionFetch{id: sid, epoch: 3, offsets: map[int32]int64{2: 1}, maxWait: 10000}.request(name, id)
			corr := rc.send(parked, v)
			e2eWaitFor(t, 5*time.Second, "the session's fetch to park", func() bool { return b.Kafka.ParkedFetches() > 0 })
			start := time.Now()
			other := b.e2eRaw()
			other.t = t
			if pr := other.rawProduce(topic, 1, e2eBatch(t, 0, time.Now().UnixMilli(), -1, -1, -1, "c")); pr.ErrorCode != 0 {
				t.Fatal(kerr.ErrorForCode(pr.ErrorCode))
			}
			resp = rc.recv(parked, v, corr).(*kmsg.FetchResponse)
			if got := answered(resp); resp.ErrorCode != 0 || !slices.Equal(got, []string{"1:1"}) {
				t.Fatalf("parked epoch 3: error %d answered %v", resp.ErrorCode, got)
			}
			if waited := time.Since(start); waited > 5*time.Second {
				t.Fatalf("the append woke the parked session fetch after %v", waited)
			}

			// Epoch 4 forgets partitions 1 and 2: a record there is not
			// answered; partition 0 still is.
			resp = do(sessionFetch{id: sid, epoch: 4, forget: []int32{1, 2}})
			if resp.ErrorCode != 0 || len(answered(resp)) != 0 {
				t.Fatalf("epoch 4: error %d answered %v", resp.ErrorCode, answered(resp))
			}
			produce(1, "d")
			produce(0, "e")
			resp = do(sessionFetch{id: sid, epoch: 5})
			if got := answered(resp); resp.ErrorCode != 0 || !slices.Equal(got, []string{"0:1"}) {
				t.Fatalf("epoch 5: error %d answered %v", resp.ErrorCode, got)
			}

			// Epoch -1 closes it and is answered in full, without one.
			resp = do(sessionFetch{id: sid, epoch: -1, offsets: map[int32]int64{0: 2}})
			if resp.ErrorCode != 0 || resp.SessionID != 0 || !slices.Equal(answered(resp), []string{"0:0"}) {
				t.Fatalf("close: error %d session %d answered %v", resp.ErrorCode, resp.SessionID, answered(resp))
			}
			if resp = do(sessionFetch{id: sid, epoch: 6}); resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
				t.Fatalf("closed session: error %d", resp.ErrorCode)
			}
			if sessions() != base {
				t.Fatalf("ringlog_fetch_sessions %v after close, want %v", sessions(), base)
			}
		})
	}
}

// TestE2EFetchSessionKgo consumes with franz-go, which opens a session and
// then fetches incrementally, while records arrive in waves on all
// partitions, then on two of them only, then on all again: every record
// arrives once, in order per partition. The same run without sessions
// (the broker's --fetch-sessions 0, and kgo's DisableFetchSessions on a
// broker that has them) delivers the same.
func TestE2EFetchSessionKgo(t *testing.T) {
	cases := []struct {
		name      string
		slots     int
		disable   bool
		wantSlots float64
	}{
		{"sessions", 0, false, 1},
		{"broker-without", -1, false, 0},
		{"client-without", 0, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t, withServer(func(c *netio.Config) { c.FetchSessions = tc.slots }))
			ctx := testCtx(t, 60*time.Second)
			const topic, parts = "waves", 8
			b.e2eCreate(ctx, topic, parts, nil)
			offsets := map[int32]kgo.Offset{}
			for p := range int32(parts) {
				offsets[p] = kgo.NewOffset().At(0)
			}
			opts := []kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}), kgo.FetchMaxWait(500 * time.Millisecond)}
			if tc.disable {
				opts = append(opts, kgo.DisableFetchSessions())
			}
			cons := b.client(opts...)
			prod := b.client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
			next := map[int32]int{} // per partition, the next wave index expected
			wave := func(w int, to ...int32) {
				t.Helper()
				var recs []*kgo.Record
				for _, p := range to {
					for i := range 5 {
						recs = append(recs, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "%d/%d/%d", w, p, i)})
					}
				}
				e2eProduceFlushed(t, ctx, prod, recs...)
				got := e2ePoll(t, ctx, cons, len(recs))
				for _, r := range got {
					var rw, rp, ri int
					if _, err := fmt.Sscanf(string(r.Value), "%d/%d/%d", &rw, &rp, &ri); err != nil || int32(rp) != r.Partition {
						t.Fatalf("record %q on partition %d", r.Value, r.Partition)
					}
					if want := next[r.Partition]; rw*5+ri != want {
						t.Fatalf("partition %d: got record %q, want number %d", r.Partition, r.Value, want)
					}
					next[r.Partition]++
				}
			}
			all := []int32{0, 1, 2, 3, 4, 5, 6, 7}
			wave(0, all...)
			if got := testutil.ToFloat64(b.Metrics.FetchSessions); got != tc.wantSlots {
				t.Fatalf("ringlog_fetch_sessions %v, want %v", got, tc.wantSlots)
			}
			// Skipped wave indexes keep the numbering per partition.
			wave(1, 2, 5)
			for _, p := range all {
				if p != 2 && p != 5 {
					next[p] += 5
				}
			}
			wave(2, all...)
			for p, n := range next {
				if n != 15 {
					t.Fatalf("partition %d: %d records numbered, want 15", p, n)
				}
			}
		})
	}
}
