package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine/consumergroup"
)

// FuzzDecodeMeta feeds arbitrary bytes to the metadata file decoder
// (ringlog-meta.json). A file it accepts must hold only names and counts
// the broker may build directories and partitions from, and must survive
// a save and reload unchanged; anything else is a clear error.
func FuzzDecodeMeta(f *testing.F) {
	good := &brokerMeta{Version: 1, ClusterID: "c1", NextProducerID: 1000, Topics: []topicMeta{
		{Name: "orders", ID: TopicID{1}, Partitions: 3, Configs: map[string]string{"retention.ms": "1000"}},
		{Name: OffsetsTopic, ID: TopicID{2}, Partitions: 50, Internal: true},
	}, BrokerConfigs: map[string]string{"log.retention.ms": "5"}}
	b, err := json.MarshalIndent(good, "", "  ")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, bad := range []string{
		`{"version":1,"cluster_id":"c","topics":[{"name":"../../etc","id":"01000000000000000000000000000000","partitions":1}]}`,
		`{"version":1,"cluster_id":"c","topics":[{"name":"t","id":"01000000000000000000000000000000","partitions":-1}]}`,
		`{"version":1,"cluster_id":"c","topics":[{"name":"t","id":"01000000000000000000000000000000","partitions":2000000000}]}`,
		`{"version":1,"cluster_id":"c","topics":[{"name":"t","id":"0100","partitions":1}]}`,
		`{"version":2,"cluster_id":"c"}`,
		`{"version":1`,
		"",
	} {
		f.Add([]byte(bad))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for _, tm := range m.Topics {
			if ValidateTopicName(tm.Name) != nil || tm.Partitions <= 0 || tm.Partitions > MaxPartitions {
				t.Fatalf("accepted topic %+v", tm)
			}
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := decodeMeta(again)
		if err != nil {
			t.Fatalf("re-encoded metadata refused: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the metadata:\n%+v\n%+v", m, m2)
		}
	})
}

// FuzzProducerSnapshot feeds arbitrary bytes to the producer-state
// snapshot decoder (producer-state.json). An accepted snapshot holds at
// most producerWindow ordered batches per producer below its offset (so
// the sequence checks built on it cannot grow or misorder a window) and
// survives a save and reload unchanged.
func FuzzProducerSnapshot(f *testing.F) {
	good := producerSnapshot{Offset: 40, Producers: map[int64]*producerState{
		7: {Epoch: 1, Batches: []seqEntry{{0, 4, 10, 14, -1, 1700000000000}, {5, 9, 20, 24, 123, 0}}},
		8: {Epoch: 0},
	}}
	b, err := json.Marshal(&good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"offset":5,"producers":{"1":null}}`))
	f.Add([]byte(`{"offset":-1}`))
	f.Add([]byte(`{"offset":9,"producers":{"1":{"epoch":0,"batches":[{"first_offset":5,"last_offset":3}]}}}`))
	f.Add([]byte(`{"offset":`))
	f.Fuzz(func(t *testing.T, b []byte) {
		snap, err := decodeProducerSnapshot(b)
		if err != nil {
			return
		}
		for pid, st := range snap.Producers {
			if st == nil || len(st.Batches) > producerWindow {
				t.Fatalf("accepted producer %d state %+v", pid, st)
			}
		}
		again, err := json.Marshal(&snap)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeProducerSnapshot(again); err != nil {
			t.Fatalf("re-encoded snapshot refused: %v\n%s", err, again)
		}
		for pid, st := range snap.Producers {
			// The shard pushes onto an accepted window; it must stay bounded.
			st.push(seqEntry{FirstOffset: snap.Offset, LastOffset: snap.Offset})
			if len(st.Batches) > producerWindow {
				t.Fatalf("window of producer %d grew to %d", pid, len(st.Batches))
			}
		}
	})
}

// FuzzCoordinatorApply replays arbitrary __consumer_offsets records (key,
// value, and whether the value is a tombstone) into a coordinator, the
// decoder run at every start. It must never panic; a well-formed offset
// commit must read back exactly as written; anything else is either a
// group record or a clear error.
func FuzzCoordinatorApply(f *testing.F) {
	ck := kmsg.NewOffsetCommitKey()
	ck.Version, ck.Group, ck.Topic, ck.Partition = 1, "g", "t", 3
	cv := kmsg.NewOffsetCommitValue()
	cv.Version, cv.Offset, cv.LeaderEpoch, cv.Metadata, cv.CommitTimestamp = 3, 42, 5, "md", 1000
	gk := kmsg.NewGroupMetadataKey()
	gk.Version, gk.Group = 2, "g"
	gv := kmsg.NewGroupMetadataValue()
	gv.Version, gv.ProtocolType, gv.Generation = 3, "consumer", 4
	proto, leader := "range", "m1"
	gv.Protocol, gv.Leader = &proto, &leader
	m := kmsg.NewGroupMetadataValueMember()
	m.MemberID, m.ClientID, m.ClientHost, m.SessionTimeoutMillis, m.RebalanceTimeoutMillis = "m1", "c", "h", 30000, 60000
	m.Subscription, m.Assignment = []byte{0, 1}, []byte{2, 3}
	gv.Members = append(gv.Members, m)
	f.Add(ck.AppendTo(nil), cv.AppendTo(nil), false)
	f.Add(ck.AppendTo(nil), []byte(nil), true)
	f.Add(gk.AppendTo(nil), gv.AppendTo(nil), false)
	f.Add(gk.AppendTo(nil), []byte(nil), true)
	f.Add([]byte{0}, []byte{}, false)
	f.Add([]byte{0, 9, 0, 1, 'g'}, []byte{0, 3}, false)
	for _, r := range sampleConsumerRecords() {
		f.Add(r.key, r.value, r.value == nil)
	}
	f.Fuzz(func(t *testing.T, key, value []byte, tombstone bool) {
		if tombstone {
			value = nil
		} else if value == nil {
			value = []byte{}
		}
		// A scheduler whose timers never fire: restored members must not
		// expire into writes of a coordinator that has no engine.
		c := &Coordinator{cfg: DefaultConfig().Groups, sched: frozenScheduler{}, groups: map[string]*Group{}}
		kind, err := c.apply(key, value)
		if err != nil {
			if err.Error() == "" || kind != 0 {
				t.Fatalf("apply: kind %d, error %q", kind, err)
			}
			return
		}
		if kind != 1 && kind != 2 {
			t.Fatalf("apply accepted a record of kind %d", kind)
		}
		var k kmsg.OffsetCommitKey
		var v kmsg.OffsetCommitValue
		if kind != 1 || value == nil || k.ReadFrom(key) != nil || v.ReadFrom(value) != nil {
			return
		}
		g := c.group(k.Group, false)
		if g == nil {
			t.Fatalf("commit of group %q not kept", k.Group)
		}
		g.mu.Lock()
		got := g.offsets[TopicPartition{k.Topic, k.Partition}]
		g.mu.Unlock()
		want := CommittedOffset{Offset: v.Offset, LeaderEpoch: v.LeaderEpoch, Metadata: v.Metadata, CommitTime: v.CommitTimestamp}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("replayed commit %+v, want %+v", got, want)
		}
		// The encoder writes back what was decoded (fields the key's
		// version does not carry aside).
		if re := k.AppendTo(nil); len(re) > len(key) || !bytes.Equal(re, key[:len(re)]) {
			t.Fatalf("key re-encodes as %x, was %x", re, key)
		}
	})
}

// frozenScheduler runs no timer.
type frozenScheduler struct{}

func (frozenScheduler) Now() time.Time                        { return time.UnixMilli(1_700_000_000_000) }
func (frozenScheduler) AfterFunc(time.Duration, func()) Timer { return frozenTimer{} }

type frozenTimer struct{}

func (frozenTimer) Stop() bool { return true }

// TestParseTopicIDLength: a hex id longer than 16 bytes is an error, not
// a write past the id (found by FuzzDecodeMeta in the metadata file).
func TestParseTopicIDLength(t *testing.T) {
	for _, s := range []string{"0000000000000000000000000000000000", "00", "0102030405060708090a0b0c0d0e0f1"} {
		if _, err := ParseTopicID(s); err == nil {
			t.Fatalf("ParseTopicID(%q) accepted", s)
		}
	}
	if id, err := ParseTopicID("0102030405060708090a0b0c0d0e0f10"); err != nil || id[15] != 0x10 {
		t.Fatalf("a good id: %v %v", id, err)
	}
}

// FuzzTxnStateApply replays arbitrary __transaction_state records (and
// OffsetCommit records staged as transactional commits) into a
// coordinator: no panic, and an accepted record leaves a consistent
// state (its producer id maps back to it, its state is a known one).
func FuzzTxnStateApply(f *testing.F) {
	k := kmsg.NewTxnMetadataKey()
	k.TransactionalID = "tx"
	v := kmsg.NewTxnMetadataValue()
	v.ProducerID, v.ProducerEpoch, v.TimeoutMillis, v.State = 1000, 3, 60000, 1
	v.Topics = []kmsg.TxnMetadataValueTopic{{Topic: "t", Partitions: []int32{0, 2}}}
	v.LastUpdateTimestamp, v.StartTimestamp = 1000, 900
	f.Add(k.AppendTo(nil), v.AppendTo(nil), false)
	f.Add(k.AppendTo(nil), []byte(nil), true)
	v.Version = 1
	f.Add(k.AppendTo(nil), v.AppendTo(nil), false)
	f.Add([]byte{0, 0, 0, 1, 'x'}, []byte{0, 0}, false)
	f.Fuzz(func(t *testing.T, key, value []byte, tombstone bool) {
		if tombstone {
			value = nil
		} else if value == nil {
			value = []byte{}
		}
		c := &txnTable{txns: map[string]*txnMeta{}, byPID: map[int64]*txnMeta{}}
		if err := c.apply(key, value); err != nil {
			return
		}
		for id, m := range c.txns {
			if m.id != id || c.byPID[m.pid] != m || m.state < TxnEmpty || m.state > TxnDead || m.view.Load() == nil {
				t.Fatalf("inconsistent state for %q: %+v", id, m)
			}
		}
		g := &Coordinator{cfg: DefaultConfig().Groups, sched: frozenScheduler{}, groups: map[string]*Group{}}
		if err := g.stageTxnOffset(0, 7, key, value); err == nil {
			g.completeTxnOffsets(0, 7, true)
			if g.PendingTxnOffsets() != 0 {
				t.Fatal("pending offsets after their commit")
			}
		}
	})
}

// sampleConsumerRecords are the records of a consumer-protocol group with
// two members, one of them revoking, and a removed third.
func sampleConsumerRecords() []kv {
	t1, t2 := consumergroup.TopicID{1}, consumergroup.TopicID{2}
	return consumerRecords("g", consumergroup.Changes{
		EpochChanged: true, Epoch: 7, MetadataHash: 0xfeed,
		AssignmentEpochChanged: true, AssignmentEpoch: 7, Targets: map[string]consumergroup.Assignment{"a": {t1: {0, 1}}, "b": {t2: {0}, t1: {2}}},
		Members: []consumergroup.MemberRecord{
			{ID: "a", InstanceID: "i", ClientID: "c", ClientHost: "/h", Topics: []string{"t1", "t2"}, RebalanceTimeout: time.Minute, Assignor: "uniform",
				Epoch: 7, PreviousEpoch: 6, State: consumergroup.Stable, Assigned: consumergroup.Assignment{t1: {0, 1}}},
			{ID: "b", ClientID: "c2", Regex: "t.*", RebalanceTimeout: time.Second,
				Epoch: 6, PreviousEpoch: 5, State: consumergroup.UnrevokedPartitions, Assigned: consumergroup.Assignment{t2: {0}}, Revoking: consumergroup.Assignment{t2: {1}}},
		},
		Removed: []string{"c"},
	})
}

// FuzzConsumerRecords replays a sequence of arbitrary consumer-group
// records (each a length-prefixed key and value) and loads the group: no
// panic, no allocation a length can drive past the input, and a group
// that loads has no partition with two owners.
func FuzzConsumerRecords(f *testing.F) {
	var seed []byte
	for _, r := range sampleConsumerRecords() {
		seed = appendFuzzRecord(seed, r)
	}
	f.Add(seed)
	f.Add(appendFuzzRecord(nil, kv{key: []byte{0, 8, 0, 1, 'g', 0, 1, 'a'}, value: []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0}}))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &Coordinator{cfg: DefaultConfig().Groups, sched: frozenScheduler{}, groups: map[string]*Group{}, eng: &Engine{logger: slog.New(slog.DiscardHandler)}}
		for len(in) >= 4 {
			kl, vl := int(in[0])<<8|int(in[1]), int(in[2])<<8|int(in[3])
			in = in[4:]
			if kl > len(in) {
				return
			}
			key := in[:kl]
			in = in[kl:]
			var value []byte
			if vl != 0xffff {
				if vl > len(in) {
					return
				}
				value, in = in[:vl], in[vl:]
			}
			_, _ = c.apply(key, value)
		}
		c.finishConsumerLoads(0)
		for _, g := range c.Groups() {
			g.mu.Lock()
			if g.consumer != nil {
				seen := map[string]string{}
				for _, m := range g.consumer.Members() {
					for _, a := range []consumergroup.Assignment{m.Assigned, m.Revoking} {
						for tp, ps := range a {
							for _, p := range ps {
								k := fmt.Sprintf("%x/%d", tp, p)
								if o, ok := seen[k]; ok && o != m.ID {
									t.Fatalf("partition %s owned by %s and %s after a load", k, o, m.ID)
								}
								seen[k] = m.ID
							}
						}
					}
				}
			}
			g.mu.Unlock()
		}
	})
}

func appendFuzzRecord(dst []byte, r kv) []byte {
	vl := len(r.value)
	if r.value == nil {
		vl = 0xffff
	}
	dst = append(dst, byte(len(r.key)>>8), byte(len(r.key)), byte(vl>>8), byte(vl))
	dst = append(dst, r.key...)
	return append(dst, r.value...)
}
