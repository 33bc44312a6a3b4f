package netio_test

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

// segmentio/kafka-go is a second independent client. Its kafka.Conn speaks
// old, non-flexible protocol versions (CreateTopics v0-2, Metadata v1/v6,
// ListOffsets v1, Produce v2/v3/v7, Fetch v2/v5/v10), its Writer goes
// through its own Transport with negotiated versions.

func kafkagoDial(t *testing.T, addr string) *kafka.Conn {
	t.Helper()
	d := &kafka.Dialer{Timeout: 2 * time.Second, ClientID: "ringlog-kafkago-test"}
	c, err := d.DialContext(testCtx(t, 5*time.Second), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}

func TestKafkaGoConnAdmin(t *testing.T) {
	b := startBroker(t)
	c := kafkagoDial(t, b.Addr)

	err := c.CreateTopics(
		kafka.TopicConfig{Topic: "kgo-admin-a", NumPartitions: 3, ReplicationFactor: 1,
			ConfigEntries: []kafka.ConfigEntry{{ConfigName: "retention.ms", ConfigValue: "60000"}}},
		kafka.TopicConfig{Topic: "kgo-admin-b", NumPartitions: 1, ReplicationFactor: 1},
	)
	if err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	// kafka-go treats TOPIC_ALREADY_EXISTS as success; an invalid
	// replication factor is an error.
	if err := c.CreateTopics(kafka.TopicConfig{Topic: "kgo-admin-a", NumPartitions: 3, ReplicationFactor: 1}); err != nil {
		t.Fatalf("CreateTopics again: %v", err)
	}
	err = c.CreateTopics(kafka.TopicConfig{Topic: "kgo-admin-rf", NumPartitions: 1, ReplicationFactor: 2})
	if !errors.Is(err, kafka.InvalidReplicationFactor) {
		t.Fatalf("CreateTopics rf=2: %v, want InvalidReplicationFactor", err)
	}
	err = c.CreateTopics(kafka.TopicConfig{Topic: "kgo-admin-cfg", NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "no.such.config", ConfigValue: "1"}}})
	if !errors.Is(err, kafka.InvalidConfiguration) {
		t.Fatalf("CreateTopics unknown config: %v, want InvalidConfiguration", err)
	}

	parts, err := c.ReadPartitions("kgo-admin-a", "kgo-admin-b")
	if err != nil {
		t.Fatalf("ReadPartitions: %v", err)
	}
	sort.Slice(parts, func(i, j int) bool {
		if parts[i].Topic != parts[j].Topic {
			return parts[i].Topic < parts[j].Topic
		}
		return parts[i].ID < parts[j].ID
	})
	want := []struct {
		topic string
		id    int
	}{{"kgo-admin-a", 0}, {"kgo-admin-a", 1}, {"kgo-admin-a", 2}, {"kgo-admin-b", 0}}
	if len(parts) != len(want) {
		t.Fatalf("ReadPartitions: %d partitions, want %d: %+v", len(parts), len(want), parts)
	}
	host, port := b.Kafka.Advertised()
	node := int(b.Eng.NodeID())
	for i, w := range want {
		p := parts[i]
		if p.Topic != w.topic || p.ID != w.id || p.Leader.ID != node || p.Leader.Host != host || p.Leader.Port != int(port) ||
			len(p.Replicas) != 1 || p.Replicas[0].ID != node || len(p.Isr) != 1 || p.Isr[0].ID != node {
			t.Fatalf("partition %d: %+v", i, p)
		}
	}
	// Unknown topic, with auto-creation on, is created by Metadata v1 (the
	// protocol has no AllowAutoTopicCreation flag before v4).
	parts, err = c.ReadPartitions("kgo-auto")
	if err != nil {
		// Kafka may answer LEADER_NOT_AVAILABLE on the first try; we
		// create synchronously, so the first answer must be complete.
		t.Fatalf("ReadPartitions auto-create: %v", err)
	}
	if len(parts) != 1 || parts[0].Topic != "kgo-auto" || parts[0].ID != 0 {
		t.Fatalf("ReadPartitions auto-create: %+v", parts)
	}

	ctrl, err := c.Controller()
	if err != nil || ctrl.ID != node || ctrl.Host != host || ctrl.Port != int(port) {
		t.Fatalf("Controller: %+v, %v", ctrl, err)
	}

	if err := c.DeleteTopics("kgo-admin-b"); err != nil {
		t.Fatalf("DeleteTopics: %v", err)
	}
	err = c.DeleteTopics("kgo-admin-b")
	if !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Fatalf("DeleteTopics again: %v, want UnknownTopicOrPartition", err)
	}
}

func TestKafkaGoWriterReader(t *testing.T) {
	b := startBroker(t)
	c := kafkagoDial(t, b.Addr)
	const topic = "kgo-rw"
	if err := c.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: 2, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	// Keys "even-*" to partition 0, "odd-*" to partition 1.
	route := kafka.BalancerFunc(func(m kafka.Message, partitions ...int) int {
		if m.Key[0] == 'e' {
			return 0
		}
		return 1
	})
	codecs := []kafka.Compression{0, kafka.Gzip, kafka.Snappy, kafka.Lz4, kafka.Zstd}
	var want [2][]kafka.Message
	ctx := testCtx(t, 20*time.Second)
	for _, codec := range codecs {
		name := "none"
		if codec != 0 {
			name = codec.String()
		}
		w := &kafka.Writer{
			Addr: kafka.TCP(b.Addr), Topic: topic, Balancer: route,
			RequiredAcks: kafka.RequireAll, Compression: codec,
			BatchTimeout: 5 * time.Millisecond, BatchSize: 1000,
			ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, MaxAttempts: 1,
			Transport: &kafka.Transport{ClientID: "ringlog-kafkago-writer", DialTimeout: 2 * time.Second},
		}
		var msgs []kafka.Message
		for i := 0; i < 10; i++ {
			parity := "even"
			if i%2 == 1 {
				parity = "odd"
			}
			msgs = append(msgs, kafka.Message{
				Key:     []byte(fmt.Sprintf("%s-%s-%d", parity, name, i)),
				Value:   []byte(fmt.Sprintf("value %s %d", name, i)),
				Headers: []kafka.Header{{Key: "codec", Value: []byte(name)}},
			})
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatalf("%s: WriteMessages: %v", name, err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("%s: close writer: %v", name, err)
		}
		for _, m := range msgs {
			p := 0
			if m.Key[0] == 'o' {
				p = 1
			}
			want[p] = append(want[p], m)
		}
		if got := w.Stats().Errors; got != 0 {
			t.Fatalf("%s: writer stats report %d errors", name, got)
		}
	}

	for p := 0; p < 2; p++ {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: []string{b.Addr}, Topic: topic, Partition: p,
			MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 50 * time.Millisecond,
			ReadBatchTimeout: 2 * time.Second, ReadLagInterval: -1,
			Dialer: &kafka.Dialer{Timeout: 2 * time.Second, ClientID: "ringlog-kafkago-reader"},
		})
		for i, w := range want[p] {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("partition %d record %d: %v", p, i, err)
			}
			if m.Partition != p || m.Offset != int64(i) || string(m.Key) != string(w.Key) || string(m.Value) != string(w.Value) ||
				len(m.Headers) != 1 || m.Headers[0].Key != "codec" || string(m.Headers[0].Value) != string(w.Headers[0].Value) {
				r.Close()
				t.Fatalf("partition %d record %d: got offset %d key %q value %q headers %v; want key %q value %q",
					p, i, m.Offset, m.Key, m.Value, m.Headers, w.Key, w.Value)
			}
		}
		if lag := r.Lag(); lag != 0 {
			t.Errorf("partition %d: lag %d after reading everything", p, lag)
		}
		r.Close()
	}

	// The same data through kafka.Conn: ListOffsets v1 and a Fetch batch.
	lc, err := (&kafka.Dialer{Timeout: 2 * time.Second}).DialLeader(ctx, "tcp", b.Addr, topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	lc.SetDeadline(time.Now().Add(5 * time.Second))
	first, last, err := lc.ReadOffsets()
	if err != nil || first != 0 || last != int64(len(want[1])) {
		t.Fatalf("ReadOffsets: %d, %d, %v; want 0, %d", first, last, err, len(want[1]))
	}
	// Conn.WriteMessages negotiates Produce v7 (no codec: the Conn is
	// uncompressed unless told otherwise).
	n, err := lc.WriteMessages(kafka.Message{Key: []byte("odd-conn"), Value: []byte("via conn")})
	if err != nil || n != len("odd-conn")+len("via conn") {
		t.Fatalf("Conn.WriteMessages: %d, %v", n, err)
	}
	if _, err := lc.Seek(int64(len(want[1])), kafka.SeekAbsolute); err != nil {
		t.Fatal(err)
	}
	batch := lc.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 50 * time.Millisecond})
	m, err := batch.ReadMessage()
	if err != nil || m.Offset != int64(len(want[1])) || string(m.Key) != "odd-conn" || string(m.Value) != "via conn" {
		t.Fatalf("ReadBatch: %+v, %v", m, err)
	}
	if hw := batch.HighWaterMark(); hw != int64(len(want[1]))+1 {
		t.Fatalf("ReadBatch high watermark %d, want %d", hw, len(want[1])+1)
	}
	batch.Close()
}
