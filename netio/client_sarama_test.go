//lint:file-ignore SA1019 DescribeConfig is what sarama users call; the broker must keep answering it

package netio_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"sort"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// Sarama is an independent Kafka client (its own protocol encoding, its own
// codecs); these tests check that ringlog works with it end to end.

func init() {
	// Sarama logs through a package-level logger; keep it quiet.
	sarama.Logger = log.New(io.Discard, "", 0)
}

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = "ringlog-sarama-test"
	cfg.Net.DialTimeout = 2 * time.Second
	cfg.Net.ReadTimeout = 3 * time.Second
	cfg.Net.WriteTimeout = 3 * time.Second
	cfg.Metadata.Retry.Max = 3
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	cfg.Admin.Timeout = 3 * time.Second
	cfg.Admin.Retry.Backoff = 50 * time.Millisecond
	return cfg
}

func TestSaramaIdempotentProduceAllCodecsConsume(t *testing.T) {
	b := startBroker(t)
	const topic = "sarama-codecs"
	codecs := []sarama.CompressionCodec{
		sarama.CompressionNone, sarama.CompressionGZIP, sarama.CompressionSnappy,
		sarama.CompressionLZ4, sarama.CompressionZSTD,
	}
	const perCodec = 20
	type want struct {
		key, value string
		offset     int64
	}
	var wants []want
	next := int64(0)
	for _, codec := range codecs {
		cfg := saramaConfig()
		cfg.Producer.Return.Successes = true
		cfg.Producer.Return.Errors = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Idempotent = true
		cfg.Producer.Retry.Max = 3
		cfg.Producer.Retry.Backoff = 50 * time.Millisecond
		cfg.Net.MaxOpenRequests = 1
		cfg.Producer.Compression = codec
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
		prod, err := sarama.NewSyncProducer([]string{b.Addr}, cfg)
		if err != nil {
			t.Fatalf("%v: new producer: %v", codec, err)
		}
		// One message alone, then a slice that sarama batches (compressed
		// as one batch for the non-none codecs).
		one := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(codec.String() + "-single"),
			Value: sarama.StringEncoder(fmt.Sprintf("%s single value", codec))}
		part, off, err := prod.SendMessage(one)
		if err != nil {
			t.Fatalf("%v: SendMessage: %v", codec, err)
		}
		if part != 0 || off != next {
			t.Fatalf("%v: SendMessage landed at partition %d offset %d, want 0/%d", codec, part, off, next)
		}
		wants = append(wants, want{codec.String() + "-single", fmt.Sprintf("%s single value", codec), next})
		next++
		var msgs []*sarama.ProducerMessage
		for i := 0; i < perCodec; i++ {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic,
				Key:   sarama.StringEncoder(fmt.Sprintf("%s-key-%d", codec, i)),
				Value: sarama.ByteEncoder([]byte(fmt.Sprintf("%s value %d %s", codec, i, string(make([]byte, i*7))))),
			})
		}
		if err := prod.SendMessages(msgs); err != nil {
			t.Fatalf("%v: SendMessages: %v", codec, err)
		}
		// The slice may have gone out as one or several batches; offsets
		// must be dense and follow the order sarama kept.
		sort.Slice(msgs, func(i, j int) bool { return msgs[i].Offset < msgs[j].Offset })
		for i, m := range msgs {
			if m.Partition != 0 || m.Offset != next+int64(i) {
				t.Fatalf("%v: message %d at partition %d offset %d, want 0/%d", codec, i, m.Partition, m.Offset, next+int64(i))
			}
			k, _ := m.Key.Encode()
			v, _ := m.Value.Encode()
			wants = append(wants, want{string(k), string(v), m.Offset})
		}
		next += perCodec
		if err := prod.Close(); err != nil {
			t.Fatalf("%v: close producer: %v", codec, err)
		}
	}

	cons, err := sarama.NewConsumer([]string{b.Addr}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	pc, err := cons.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	deadline := time.After(10 * time.Second)
	for i, w := range wants {
		select {
		case m := <-pc.Messages():
			if m.Offset != w.offset || string(m.Key) != w.key || string(m.Value) != w.value || m.Topic != topic || m.Partition != 0 {
				t.Fatalf("record %d: got offset %d key %q value %q (%s/%d); want offset %d key %q value %q",
					i, m.Offset, m.Key, m.Value, m.Topic, m.Partition, w.offset, w.key, w.value)
			}
		case err := <-pc.Errors():
			t.Fatalf("consumer error after %d records: %v", i, err)
		case <-deadline:
			t.Fatalf("timed out after %d of %d records", i, len(wants))
		}
	}
	if hw := pc.HighWaterMarkOffset(); hw != next {
		t.Fatalf("high watermark %d, want %d", hw, next)
	}
	// Nothing more.
	select {
	case m := <-pc.Messages():
		t.Fatalf("unexpected extra record at offset %d", m.Offset)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestSaramaClusterAdmin(t *testing.T) {
	b := startBroker(t)
	admin, err := sarama.NewClusterAdmin([]string{b.Addr}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	retention := "3600000"
	maxMsg := "500000"
	err = admin.CreateTopic("sarama-admin", &sarama.TopicDetail{
		NumPartitions: 3, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": &retention, "max.message.bytes": &maxMsg},
	}, false)
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	// Again: TOPIC_ALREADY_EXISTS.
	err = admin.CreateTopic("sarama-admin", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false)
	var te *sarama.TopicError
	if !errors.As(err, &te) || te.Err != sarama.ErrTopicAlreadyExists {
		t.Fatalf("second CreateTopic: %v, want TOPIC_ALREADY_EXISTS", err)
	}
	// Replication factor 3 on one broker.
	err = admin.CreateTopic("sarama-rf3", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 3}, false)
	if !errors.As(err, &te) || te.Err != sarama.ErrInvalidReplicationFactor {
		t.Fatalf("CreateTopic rf=3: %v, want INVALID_REPLICATION_FACTOR", err)
	}
	// Validate only: nothing is created.
	if err := admin.CreateTopic("sarama-validate", &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, true); err != nil {
		t.Fatalf("CreateTopic validateOnly: %v", err)
	}

	topics, err := admin.ListTopics()
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	d, ok := topics["sarama-admin"]
	if !ok {
		t.Fatalf("ListTopics: sarama-admin missing from %v", keys(topics))
	}
	if _, ok := topics["sarama-validate"]; ok {
		t.Fatal("ListTopics: a validate-only topic was created")
	}
	if d.NumPartitions != 3 || d.ReplicationFactor != 1 || len(d.ReplicaAssignment) != 3 {
		t.Fatalf("ListTopics detail: %+v", d)
	}
	for p := int32(0); p < 3; p++ {
		if r := d.ReplicaAssignment[p]; len(r) != 1 || r[0] != b.Eng.NodeID() {
			t.Fatalf("partition %d replicas %v", p, r)
		}
	}
	// ListTopics keeps only non-default configs: exactly our two overrides.
	if len(d.ConfigEntries) != 2 || d.ConfigEntries["retention.ms"] == nil || *d.ConfigEntries["retention.ms"] != retention ||
		d.ConfigEntries["max.message.bytes"] == nil || *d.ConfigEntries["max.message.bytes"] != maxMsg {
		got := map[string]string{}
		for k, v := range d.ConfigEntries {
			got[k] = *v
		}
		t.Fatalf("ListTopics configs: %v", got)
	}

	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "sarama-admin"})
	if err != nil {
		t.Fatalf("DescribeConfig: %v", err)
	}
	byName := map[string]sarama.ConfigEntry{}
	for _, e := range entries {
		byName[e.Name] = e
	}
	if e, ok := byName["retention.ms"]; !ok || e.Value != retention || e.Default || e.Source != sarama.SourceTopic {
		t.Fatalf("retention.ms entry: %+v", e)
	}
	if e, ok := byName["cleanup.policy"]; !ok || e.Value != "delete" || !e.Default || e.Source != sarama.SourceDefault {
		t.Fatalf("cleanup.policy entry: %+v", e)
	}
	// Only some configs.
	entries, err = admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "sarama-admin", ConfigNames: []string{"max.message.bytes"}})
	if err != nil || len(entries) != 1 || entries[0].Name != "max.message.bytes" || entries[0].Value != maxMsg {
		t.Fatalf("DescribeConfig filtered: %+v, %v", entries, err)
	}
	// An unknown topic.
	_, err = admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "no-such-topic"})
	var de *sarama.DescribeConfigError
	if !errors.As(err, &de) || de.Err != sarama.ErrUnknownTopicOrPartition {
		t.Fatalf("DescribeConfig unknown topic: %v", err)
	}

	if err := admin.DeleteTopic("sarama-admin"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	err = admin.DeleteTopic("sarama-admin")
	if !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		t.Fatalf("second DeleteTopic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	topics, err = admin.ListTopics()
	if err != nil {
		t.Fatalf("ListTopics after delete: %v", err)
	}
	if _, ok := topics["sarama-admin"]; ok {
		t.Fatalf("deleted topic still listed: %v", keys(topics))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestSaramaTransactions: sarama's transactional producer commits one
// transaction and aborts another; sarama's read_committed consumer sees
// only the committed records, its read_uncommitted one all of them.
func TestSaramaTransactions(t *testing.T) {
	b := startBroker(t)
	const topic = "sarama-txn"
	cfg := saramaConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Producer.Transaction.ID = "sarama-txn-producer"
	cfg.Producer.Transaction.Timeout = 10 * time.Second
	cfg.Producer.Retry.Backoff = 50 * time.Millisecond
	cfg.Net.MaxOpenRequests = 1
	prod, err := sarama.NewSyncProducer([]string{b.Addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	run := func(commit bool, vals ...string) {
		t.Helper()
		if err := prod.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)}); err != nil {
				t.Fatalf("send %s: %v", v, err)
			}
		}
		if commit {
			err = prod.CommitTxn()
		} else {
			err = prod.AbortTxn()
		}
		if err != nil {
			t.Fatalf("end transaction (commit %v): %v", commit, err)
		}
	}
	run(true, "s1", "s2")
	run(false, "x1")
	run(true, "s3")
	read := func(level sarama.IsolationLevel, n int) []string {
		t.Helper()
		ccfg := saramaConfig()
		ccfg.Consumer.IsolationLevel = level
		cons, err := sarama.NewConsumer([]string{b.Addr}, ccfg)
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		pc, err := cons.ConsumePartition(topic, 0, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		var got []string
		timeout := time.After(10 * time.Second)
		for len(got) < n {
			select {
			case m := <-pc.Messages():
				got = append(got, string(m.Value))
			case <-timeout:
				t.Fatalf("read %v of %d", got, n)
			}
		}
		select { // nothing more
		case m := <-pc.Messages():
			t.Fatalf("extra record %q", m.Value)
		case <-time.After(300 * time.Millisecond):
		}
		return got
	}
	if got := fmt.Sprint(read(sarama.ReadCommitted, 3)); got != "[s1 s2 s3]" {
		t.Fatalf("read_committed: %s", got)
	}
	if got := fmt.Sprint(read(sarama.ReadUncommitted, 4)); got != "[s1 s2 x1 s3]" {
		t.Fatalf("read_uncommitted: %s", got)
	}
}
