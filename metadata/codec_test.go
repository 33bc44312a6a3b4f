package metadata

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// sampleRecords has one record of every kind, with every field set.
func sampleRecords() []Record {
	tid := UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	inc := UUID{0xaa, 1}
	return []Record{
		InitCluster{ClusterID: "c-1"},
		RegisterBroker{ID: 3, Incarnation: inc, KafkaAddr: "127.0.0.1:9092", ControllerAddr: "127.0.0.1:9093", Rack: "r1"},
		FenceBroker{ID: 3, Epoch: 17},
		UnfenceBroker{ID: -1, Epoch: -5},
		CreateTopic{Name: "orders", ID: tid, Internal: true, Replicas: [][]int32{{1, 2, 3}, {2, 3, 1}}, Configs: map[string]string{"retention.ms": "1000", "cleanup.policy": "compact"}},
		DeleteTopic{Name: "orders", ID: tid},
		CreatePartitions{Name: "orders", ID: tid, Replicas: [][]int32{{3, 1, 2}}},
		ChangePartition{TopicID: tid, Partition: 1, ExpectedPartitionEpoch: 4, LeaderEpoch: new(int32(2)), Requester: &BrokerEpoch{ID: 2, Epoch: 99},
			Leader: new(int32(3)), ISR: []int32{3, 1}, ISREpochs: []int64{7, -1}},
		AlterConfigs{Type: ConfigTopic, Name: "orders", Ops: []ConfigOp{{Key: "retention.ms", Value: "5"}, {Key: "segment.ms", Delete: true}}},
		AllocateProducerIDs{Broker: 2, BrokerEpoch: 12, Count: 1000},
		TakeOffice{Controller: 2, Term: 1 << 40},
		InOffice{Controller: 3, Term: 9},
		ReassignPartition{TopicID: tid, Partition: 2, Target: []int32{4, 2, 3}},
		ReassignPartition{TopicID: tid, Partition: 0},
		UnregisterBroker{ID: 7, Epoch: 42},
		SetRemoteLog{TopicID: tid, Partition: 1, Requester: BrokerEpoch{ID: 2, Epoch: 77}, LeaderEpoch: 3, Version: 9, Manifest: []byte(`{"segments":[]}`)},
		Batch{Records: []Record{FenceBroker{ID: 1, Epoch: 2}, ChangePartition{TopicID: tid, Leader: new(int32(NoLeader))}}},
		RegisterBroker{ID: 4, Incarnation: inc, KafkaAddr: "127.0.0.1:9092", Listeners: []Listener{{Name: "PLAINTEXT", Addr: "127.0.0.1:9092"}, {Name: "SASL_SSL", Addr: "h:9095"}}},
		UpsertScramCredential{User: "alice", Mechanism: ScramSHA256, Credential: ScramCredential{Iterations: 4096, Salt: []byte("salt"), StoredKey: bytes.Repeat([]byte{1}, 32), ServerKey: bytes.Repeat([]byte{2}, 32)}},
		DeleteScramCredential{User: "alice", Mechanism: ScramSHA512},
		CreateACLs{ACLs: []ACLBinding{{ResourceType: 2, ResourceName: "orders", PatternType: 3, Principal: "User:alice", Host: "*", Operation: 3, Permission: 3}}},
		DeleteACLs{ACLs: []ACLBinding{{ResourceType: 4, ResourceName: "kafka-cluster", PatternType: 4, Principal: "User:*", Host: "10.0.0.1", Operation: 2, Permission: 2}}},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	seen := map[Kind]bool{}
	for _, rec := range sampleRecords() {
		b, err := EncodeRecord(rec)
		if err != nil {
			t.Fatalf("%s: %v", rec.Kind(), err)
		}
		got, err := DecodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", rec.Kind(), err)
		}
		if !reflect.DeepEqual(got, rec) {
			t.Fatalf("%s: decoded %#v, want %#v", rec.Kind(), got, rec)
		}
		b2, _ := EncodeRecord(got)
		if !bytes.Equal(b, b2) {
			t.Fatalf("%s: encoding not deterministic", rec.Kind())
		}
		seen[rec.Kind()] = true
	}
	for k := range kindNames {
		if !seen[k] {
			t.Errorf("no sample of %s", k)
		}
	}
}

func TestRecordMapOrderDeterministic(t *testing.T) {
	cfg := map[string]string{}
	for _, k := range []string{"z", "a", "m", "b", "y", "c"} {
		cfg[k] = k + "v"
	}
	first, err := EncodeRecord(CreateTopic{Name: "t", ID: UUID{1}, Replicas: [][]int32{{1}}, Configs: cfg})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		b, _ := EncodeRecord(CreateTopic{Name: "t", ID: UUID{1}, Replicas: [][]int32{{1}}, Configs: cfg})
		if !bytes.Equal(b, first) {
			t.Fatal("map encoding depends on iteration order")
		}
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	good, err := EncodeRecord(CreateTopic{Name: "t", ID: UUID{1}, Replicas: [][]int32{{1}}, Configs: map[string]string{"a": "1", "b": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	// Every strict prefix is truncated.
	for i := 0; i < len(good); i++ {
		if _, err := DecodeRecord(good[:i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix %d: err %v, want ErrMalformed", i, err)
		}
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	// Layout of good: ver, kind, str "t" (01 74), uuid (16), bool, assignment
	// (01 01 02), map (02 01 61 01 31 01 62 01 32).
	boolAt := 2 + 2 + 16
	mapAt := boolAt + 1 + 3
	cases := map[string][]byte{
		"trailing byte":    append(append([]byte(nil), good...), 0),
		"version 2":        mutate(func(b []byte) []byte { b[0] = 2; return b }),
		"unknown kind":     mutate(func(b []byte) []byte { b[1] = 200; return b }),
		"kind 0":           mutate(func(b []byte) []byte { b[1] = 0; return b }),
		"bool 2":           mutate(func(b []byte) []byte { b[boolAt] = 2; return b }),
		"map out of order": mutate(func(b []byte) []byte { b[mapAt+2] = 'c'; return b }),
		"map repeated key": mutate(func(b []byte) []byte { b[mapAt+6] = 'a'; return b }),
		"not utf-8":        mutate(func(b []byte) []byte { b[3] = 0xff; return b }),
		"huge count":       {RecordVersion, byte(KindBatch), 0xff, 0xff, 0xff, 0xff, 0x0f},
		"nested batch":     {RecordVersion, byte(KindBatch), 1, byte(KindBatch), 0},
		"int32 overflow":   {RecordVersion, byte(KindFenceBroker), 0x80, 0x80, 0x80, 0x80, 0x20, 0},
		"empty":            {},
	}
	for name, b := range cases {
		if rec, err := DecodeRecord(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %#v, %v; want ErrMalformed", name, rec, err)
		}
	}
}

func TestEncodeRecordRefusesUndecodable(t *testing.T) {
	for name, rec := range map[string]Record{
		"nil":          nil,
		"nested batch": Batch{Records: []Record{Batch{}}},
		"nil in batch": Batch{Records: []Record{nil}},
		"not utf-8":    InitCluster{ClusterID: "\xff"},
	} {
		if _, err := EncodeRecord(rec); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

// FuzzDecodeRecord checks that DecodeRecord never panics, and that what it
// accepts re-encodes to a fixed point: decode(encode(r)) == r.
func FuzzDecodeRecord(f *testing.F) {
	for _, rec := range sampleRecords() {
		b, err := EncodeRecord(rec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{RecordVersion, byte(KindBatch), 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := DecodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		enc, err := EncodeRecord(rec)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", rec, err)
		}
		again, err := DecodeRecord(enc)
		if err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
		if !reflect.DeepEqual(again, rec) {
			t.Fatalf("round trip changed %#v into %#v", rec, again)
		}
		// Applying any decoded record to a populated image must not panic.
		img := fuzzImage(t)
		img.Apply(img.Index()+1, rec)
	})
}
