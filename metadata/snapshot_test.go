package metadata

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// richImage has brokers (one fenced), topics with configs and changed
// partitions, broker configs and allocated producer ids.
func richImage(t testing.TB) *Image {
	img := cluster(t, 3, 1)
	img, a := createTopic(t, img, "alpha", 3, 3)
	img, _ = createTopic(t, img, "beta.x", 1, 1)
	img, _ = step(t, img, AlterConfigs{Type: ConfigTopic, Name: "alpha", Ops: []ConfigOp{{Key: "retention.ms", Value: "100"}}})
	img, _ = step(t, img, AlterConfigs{Type: ConfigBroker, Ops: []ConfigOp{{Key: "log.retention.ms", Value: "200"}}})
	p := a.Partitions[1]
	img, _ = step(t, img, ChangePartition{TopicID: a.ID, Partition: 1, Leader: new(int32(p.Replicas[2])), ISR: p.Replicas[2:]})
	img, _ = step(t, img, AllocateProducerIDs{Broker: 1, BrokerEpoch: mustBroker(t, img, 1).Epoch, Count: 50})
	img, _ = step(t, img, TakeOffice{Controller: 2, Term: 7})
	img, _ = step(t, img, ReassignPartition{TopicID: a.ID, Partition: 2, Target: []int32{4, a.Partitions[2].Replicas[0]}})
	img, _ = step(t, img, CreateTopic{Name: "__consumer_offsets", ID: NewUUID(), Internal: true, Replicas: [][]int32{{2, 3}}})
	img, _ = step(t, img, RegisterBroker{ID: 4, Incarnation: UUID{4}, KafkaAddr: "h4:9092", Listeners: []Listener{{Name: "SSL", Addr: "h4:9092"}, {Name: "SASL_SSL", Addr: "h4:9095"}}})
	img, _ = step(t, img, UpsertScramCredential{User: "bob", Mechanism: ScramSHA512, Credential: sampleScram(ScramSHA512)})
	img, _ = step(t, img, UpsertScramCredential{User: "alice", Mechanism: ScramSHA256, Credential: sampleScram(ScramSHA256)})
	img, _ = step(t, img, CreateACLs{ACLs: []ACLBinding{
		{ResourceType: 2, ResourceName: "orders", PatternType: 3, Principal: "User:bob", Host: "*", Operation: 4, Permission: 3},
		{ResourceType: 2, ResourceName: "ord", PatternType: 4, Principal: "User:alice", Host: "*", Operation: 3, Permission: 3},
	}})
	return img
}

func TestImageSnapshotRoundTrip(t *testing.T) {
	img := richImage(t)
	b := EncodeImage(img)
	got, err := DecodeImage(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash() != img.Hash() || got.Index() != img.Index() {
		t.Fatalf("restored image differs:\n%s\n%s", b, EncodeImage(got))
	}
	if !bytes.Equal(EncodeImage(got), b) {
		t.Fatal("re-encoding differs")
	}
	// The restored image accepts further records like the original, with
	// the same outcome.
	a := img.Topic("alpha")
	rec := ChangePartition{TopicID: a.ID, Partition: 1, ExpectedPartitionEpoch: 1, ISR: a.Partitions[1].Replicas}
	n1, r1 := img.Apply(img.Index()+1, rec)
	n2, r2 := got.Apply(got.Index()+1, rec)
	if r1.Err != nil || r2.Err != nil || n1.Hash() != n2.Hash() {
		t.Fatalf("apply after restore: %v %v", r1.Err, r2.Err)
	}
	// The hash ignores the index only.
	moved, _ := img.Apply(img.Index()+5, DeleteTopic{Name: "nope"})
	if moved.Hash() != img.Hash() {
		t.Fatal("hash depends on the index")
	}
	if NewImage().Hash() == img.Hash() {
		t.Fatal("hash ignores content")
	}
}

func TestDecodeImageRejects(t *testing.T) {
	good := string(EncodeImage(richImage(t)))
	cases := map[string]string{
		"not json":        "{",
		"trailing":        good + "{}",
		"version":         strings.Replace(good, `"version":1`, `"version":2`, 1),
		"unknown field":   strings.Replace(good, `"version":1`, `"version":1,"extra":1`, 1),
		"null":            "null",
		"unknown replica": strings.Replace(good, `"replicas":[`, `"replicas":[77,`, 1),
		"leader not ISR":  strings.Replace(good, `"leader":`, `"leader":9`, 1),
		"empty ISR":       regexp.MustCompile(`"isr":\[[0-9,]*\]`).ReplaceAllString(good, `"isr":[]`),
		"bad topic name":  strings.Replace(good, `"name":"alpha"`, `"name":"al pha"`, 1),
		"dup topic":       strings.Replace(good, `"name":"beta.x"`, `"name":"alpha"`, 1),
		"colliding topic": strings.Replace(good, `"name":"beta.x"`, `"name":"ALPHA"`, 1),
		"bad uuid":        strings.Replace(good, `"incarnation":"`, `"incarnation":"x`, 1),
		"negative pid":    strings.Replace(good, `"next_producer_id":`, `"next_producer_id":-`, 1),
		"bad cluster id":  strings.Replace(good, `"cluster_id":"`, `"cluster_id":"#`, 1),
	}
	for name, s := range cases {
		_, err := DecodeImage([]byte(s))
		t.Log(name, err)
		if !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: err %v, want ErrBadSnapshot", name, err)
		}
	}
}

// FuzzDecodeImage checks that DecodeImage never panics and that an image it
// accepts re-encodes to itself.
func FuzzDecodeImage(f *testing.F) {
	f.Add(EncodeImage(richImage(f)))
	f.Add(EncodeImage(NewImage()))
	f.Add([]byte(`{"version":1,"next_producer_id":0,"brokers":[{"id":1,"incarnation":"AAAAAAAAAAAAAAAAAAAAAA","epoch":1,"kafka_addr":"h:1"}],"topics":[{"name":"t","id":"AQAAAAAAAAAAAAAAAAAAAA","partitions":[{"replicas":[1],"isr":[1],"leader":1,"leader_epoch":0,"partition_epoch":0}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		img, err := DecodeImage(b)
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("error %v does not wrap ErrBadSnapshot", err)
			}
			return
		}
		enc := EncodeImage(img)
		again, err := DecodeImage(enc)
		if err != nil {
			t.Fatalf("re-encoded image does not decode: %v\n%s", err, enc)
		}
		if !bytes.Equal(EncodeImage(again), enc) {
			t.Fatalf("encoding is not a fixed point:\n%s\n%s", enc, EncodeImage(again))
		}
		// A restored image must take records without panicking.
		for _, rec := range sampleRecords() {
			img.Apply(img.Index()+1, rec)
		}
	})
}

// sampleScram is a well-formed credential of mechanism m.
func sampleScram(m ScramMechanism) ScramCredential {
	return ScramCredential{Iterations: 4096, Salt: []byte("pepper"),
		StoredKey: bytes.Repeat([]byte{7}, m.keySize()), ServerKey: bytes.Repeat([]byte{9}, m.keySize())}
}
