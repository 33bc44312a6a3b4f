package netio_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/admintest"
)

func e2eStr(s string) *string { return &s }

// e2eBatchOfSize builds a one-record batch of exactly size bytes.
func e2eBatchOfSize(t testing.TB, size int) []byte {
	t.Helper()
	for n := 0; n < size; n++ {
		bt := e2eBatch(t, 0, time.Now().UnixMilli(), -1, -1, -1, strings.Repeat("r", n))
		if len(bt) == size {
			return bt
		}
		if len(bt) > size {
			break
		}
	}
	t.Fatalf("no one-record batch is exactly %d bytes", size)
	return nil
}

// e2eDescribe returns a topic's configs by name.
func e2eDescribe(t testing.TB, ctx context.Context, adm *kadm.Client, topic string) map[string]kadm.Config {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		t.Fatalf("describe %s: %v", topic, err)
	}
	out := map[string]kadm.Config{}
	for _, c := range rc.Configs {
		out[c.Key] = c
	}
	return out
}

// e2eExpectConfig checks one described config's value and source.
func e2eExpectConfig(t testing.TB, cfgs map[string]kadm.Config, key, value string, source kmsg.ConfigSource) {
	t.Helper()
	c, ok := cfgs[key]
	if !ok {
		t.Errorf("config %s not described", key)
		return
	}
	if c.MaybeValue() != value || c.Source != source {
		t.Errorf("config %s = %q (source %v), want %q (source %v)", key, c.MaybeValue(), c.Source, value, source)
	}
	if len(c.Synonyms) == 0 || c.Synonyms[0].Source != source || c.Synonyms[0].Value == nil || *c.Synonyms[0].Value != value {
		t.Errorf("config %s: first synonym %+v does not match its value", key, c.Synonyms)
	}
}

// e2eAlter runs an incremental alter on one topic and returns its error.
func e2eAlter(t testing.TB, ctx context.Context, adm *kadm.Client, validate bool, topic string, cs ...kadm.AlterConfig) error {
	t.Helper()
	alter := adm.AlterTopicConfigs
	if validate {
		alter = adm.ValidateAlterTopicConfigs
	}
	rs, err := alter(ctx, cs, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("alter: %d responses", len(rs))
	}
	return rs[0].Err
}

// e2eCreateErr creates a topic and returns the topic-level error.
func e2eCreateErr(t testing.TB, ctx context.Context, adm *kadm.Client, validate bool, name string, partitions int32, rf int16, configs map[string]*string) error {
	t.Helper()
	create := adm.CreateTopics
	if validate {
		create = adm.ValidateCreateTopics
	}
	rs, err := create(ctx, partitions, rf, configs, name)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := rs[name]
	if !ok {
		t.Fatalf("create %q: no answer for the topic", name)
	}
	return r.Err
}

const (
	srcTopic   = kmsg.ConfigSourceDynamicTopicConfig
	srcDefault = kmsg.ConfigSourceDefaultConfig
)

// TestE2ETopicAdmin runs topic creation, description, configuration,
// partition growth and deletion through kadm, with the errors Kafka gives.
// TestAdminCases runs the admin cases a cluster answers alike
// (cmd/ringlog's TestClusterThreeBrokers runs them there) on a single
// broker.
func TestAdminCases(t *testing.T) {
	b := startBroker(t)
	admintest.Run(t, testCtx(t, time.Minute), b.client(), "single")
}

func TestE2ETopicAdmin(t *testing.T) {
	b := startBroker(t, withEngine(func(c *engine.Config) { c.AutoCreateTopics = false; c.DefaultPartitions = 2 }))
	ctx := testCtx(t, 30*time.Second)
	adm := b.e2eAdmin()
	configs := map[string]*string{
		"retention.ms":           e2eStr("3600000"),
		"segment.bytes":          e2eStr("1048576"),
		"cleanup.policy":         e2eStr("delete"),
		"max.message.bytes":      e2eStr("500000"),
		"message.timestamp.type": e2eStr("LogAppendTime"),
	}

	t.Run("create", func(t *testing.T) {
		r := b.e2eCreate(ctx, "orders", 3, configs)
		if r.NumPartitions != 3 || r.ReplicationFactor != 1 || r.ID == (kadm.TopicID{}) {
			t.Fatalf("created: %d partitions, rf %d, id %v", r.NumPartitions, r.ReplicationFactor, r.ID)
		}
		if c := r.Configs["retention.ms"]; c.MaybeValue() != "3600000" || c.Source != srcTopic {
			t.Errorf("create response retention.ms %q source %v", c.MaybeValue(), c.Source)
		}
		if c := r.Configs["retention.bytes"]; c.MaybeValue() != "-1" || c.Source != srcDefault {
			t.Errorf("create response retention.bytes %q source %v", c.MaybeValue(), c.Source)
		}
		tds, err := adm.ListTopics(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		td := tds["orders"]
		if td.Err != nil || len(td.Partitions) != 3 || td.ID != r.ID {
			t.Fatalf("metadata: err %v, %d partitions, id %v (created %v)", td.Err, len(td.Partitions), td.ID, r.ID)
		}
		for p := int32(0); p < 3; p++ {
			if _, err := os.Stat(filepath.Join(b.dir, fmt.Sprintf("orders-%d", p))); err != nil {
				t.Errorf("partition dir: %v", err)
			}
		}
		// -1 partitions: the broker default.
		r2, err := adm.CreateTopic(ctx, -1, -1, nil, "defaults")
		if err != nil || r2.Err != nil || r2.NumPartitions != 2 || r2.ReplicationFactor != 1 {
			t.Fatalf("create with defaults: %v %v, %d partitions rf %d", err, r2.Err, r2.NumPartitions, r2.ReplicationFactor)
		}
		if n := len(b.Eng.Topic("defaults").Partitions()); n != 2 {
			t.Fatalf("default partitions: %d", n)
		}
	})

	t.Run("describe", func(t *testing.T) {
		cfgs := e2eDescribe(t, ctx, adm, "orders")
		for k, v := range configs {
			e2eExpectConfig(t, cfgs, k, *v, srcTopic)
		}
		// Not overridden: Kafka's defaults.
		for k, v := range map[string]string{
			"retention.bytes":           "-1",
			"segment.ms":                "604800000",
			"segment.index.bytes":       "10485760",
			"index.interval.bytes":      "4096",
			"flush.messages":            "9223372036854775807",
			"flush.ms":                  "9223372036854775807",
			"min.insync.replicas":       "1",
			"compression.type":          "producer",
			"delete.retention.ms":       "86400000",
			"min.compaction.lag.ms":     "0",
			"min.cleanable.dirty.ratio": "0.5",
			"preallocate":               "false",
		} {
			e2eExpectConfig(t, cfgs, k, v, srcDefault)
		}
		// The override's synonyms fall back to the broker default.
		if syn := cfgs["retention.ms"].Synonyms; len(syn) < 2 || syn[1].Source != srcDefault || syn[1].Value == nil || *syn[1].Value != "604800000" {
			t.Errorf("retention.ms synonyms %+v", syn)
		}
		// Unknown topic.
		rcs, err := adm.DescribeTopicConfigs(ctx, "no-such-topic")
		if err != nil {
			t.Fatal(err)
		}
		if rc, _ := rcs.On("no-such-topic", nil); !errors.Is(rc.Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("describe unknown topic: %v", rc.Err)
		}
	})

	t.Run("alter", func(t *testing.T) {
		err := e2eAlter(t, ctx, adm, false, "orders",
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: e2eStr("7200000")},
			kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "max.message.bytes"},
			kadm.AlterConfig{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: e2eStr("compact")},
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "flush.messages", Value: e2eStr("1000")})
		if err != nil {
			t.Fatal(err)
		}
		cfgs := e2eDescribe(t, ctx, adm, "orders")
		e2eExpectConfig(t, cfgs, "retention.ms", "7200000", srcTopic)
		e2eExpectConfig(t, cfgs, "max.message.bytes", "1048588", srcDefault)
		e2eExpectConfig(t, cfgs, "cleanup.policy", "delete,compact", srcTopic)
		e2eExpectConfig(t, cfgs, "flush.messages", "1000", srcTopic)
		e2eExpectConfig(t, cfgs, "segment.bytes", "1048576", srcTopic) // untouched
		if mmb := b.Eng.Topic("orders").Config().MaxMessageBytes(); mmb != 1048588 {
			t.Errorf("engine max.message.bytes %d after delete", mmb)
		}

		if err := e2eAlter(t, ctx, adm, false, "orders", kadm.AlterConfig{Op: kadm.SubtractConfig, Name: "cleanup.policy", Value: e2eStr("compact")}); err != nil {
			t.Fatal(err)
		}
		e2eExpectConfig(t, e2eDescribe(t, ctx, adm, "orders"), "cleanup.policy", "delete", srcTopic)

		// Validate-only changes nothing.
		if err := e2eAlter(t, ctx, adm, true, "orders", kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: e2eStr("1")}); err != nil {
			t.Fatal(err)
		}
		e2eExpectConfig(t, e2eDescribe(t, ctx, adm, "orders"), "retention.ms", "7200000", srcTopic)

		// Refusals: nothing of the request is applied.
		for _, c := range []struct {
			name string
			want error
			cfg  []kadm.AlterConfig
		}{
			{"unknown key", kerr.InvalidConfig, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: e2eStr("5")}, {Op: kadm.SetConfig, Name: "no.such.config", Value: e2eStr("1")}}},
			{"bad value", kerr.InvalidConfig, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: e2eStr("soon")}}},
			{"bad enum", kerr.InvalidConfig, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "message.timestamp.type", Value: e2eStr("Whenever")}}},
			{"append to a non-list", kerr.InvalidConfig, []kadm.AlterConfig{{Op: kadm.AppendConfig, Name: "retention.ms", Value: e2eStr("5")}}},
		} {
			if err := e2eAlter(t, ctx, adm, false, "orders", c.cfg...); !errors.Is(err, c.want) {
				t.Errorf("alter %s: %v, want %v", c.name, err, c.want)
			}
		}
		if err := e2eAlter(t, ctx, adm, false, "no-such-topic", kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: e2eStr("5")}); !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("alter unknown topic: %v", err)
		}
		e2eExpectConfig(t, e2eDescribe(t, ctx, adm, "orders"), "retention.ms", "7200000", srcTopic)

		// The legacy AlterConfigs replaces the whole set of overrides.
		rs, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "segment.ms", Value: e2eStr("60000")}}, "defaults")
		if err != nil || len(rs) != 1 || rs[0].Err != nil {
			t.Fatalf("legacy alter: %v %+v", err, rs)
		}
		if err := e2eAlter(t, ctx, adm, false, "defaults", kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: e2eStr("1000")}); err != nil {
			t.Fatal(err)
		}
		rs, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: e2eStr("100000")}}, "defaults")
		if err != nil || len(rs) != 1 || rs[0].Err != nil {
			t.Fatalf("legacy alter: %v %+v", err, rs)
		}
		cfgs = e2eDescribe(t, ctx, adm, "defaults")
		e2eExpectConfig(t, cfgs, "retention.bytes", "100000", srcTopic)
		e2eExpectConfig(t, cfgs, "retention.ms", "604800000", srcDefault)
		e2eExpectConfig(t, cfgs, "segment.ms", "604800000", srcDefault)
	})

	t.Run("validateOnly", func(t *testing.T) {
		if err := e2eCreateErr(t, ctx, adm, true, "dry-run", 4, 1, configs); err != nil {
			t.Fatal(err)
		}
		if b.Eng.Topic("dry-run") != nil {
			t.Fatal("validate-only create created the topic")
		}
		if _, err := os.Stat(filepath.Join(b.dir, "dry-run-0")); !os.IsNotExist(err) {
			t.Fatalf("validate-only create made a directory: %v", err)
		}
		tds, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tds["dry-run"]; ok {
			t.Fatal("validate-only topic is listed")
		}
		if err := e2eCreateErr(t, ctx, adm, true, "dry-run", 4, 1, map[string]*string{"retention.ms": e2eStr("x")}); !errors.Is(err, kerr.InvalidConfig) {
			t.Fatalf("validate-only with a bad config: %v", err)
		}
		if err := e2eCreateErr(t, ctx, adm, true, "orders", 1, 1, nil); !errors.Is(err, kerr.TopicAlreadyExists) {
			t.Fatalf("validate-only of an existing topic: %v", err)
		}
	})

	t.Run("createErrors", func(t *testing.T) {
		b.e2eCreate(ctx, "foo.bar", 1, nil)
		b.e2eCreate(ctx, "casey", 1, nil)
		cases := []struct {
			name       string
			partitions int32
			rf         int16
			configs    map[string]*string
			want       error
		}{
			{"orders", 1, 1, nil, kerr.TopicAlreadyExists},
			{"bad name", 1, 1, nil, kerr.InvalidTopicException},
			{"a/b", 1, 1, nil, kerr.InvalidTopicException},
			{".", 1, 1, nil, kerr.InvalidTopicException},
			{"..", 1, 1, nil, kerr.InvalidTopicException},
			{"ümlaut", 1, 1, nil, kerr.InvalidTopicException},
			{strings.Repeat("x", 250), 1, 1, nil, kerr.InvalidTopicException},
			{"foo_bar", 1, 1, nil, kerr.InvalidTopicException},
			{"FOO.BAR", 1, 1, nil, kerr.InvalidTopicException},
			{"Casey", 1, 1, nil, kerr.InvalidTopicException},
			{"cas.ey", 1, 1, nil, nil}, // different after folding: allowed
			{"unknown-config", 1, 1, map[string]*string{"no.such.config": e2eStr("1")}, kerr.InvalidConfig},
			{"bad-config", 1, 1, map[string]*string{"cleanup.policy": e2eStr("shred")}, kerr.InvalidConfig},
			{"small-segment", 1, 1, map[string]*string{"segment.bytes": e2eStr("100")}, kerr.InvalidConfig},
			{"rf3", 1, 3, nil, kerr.InvalidReplicationFactor},
			{"rf0", 1, 0, nil, kerr.InvalidReplicationFactor},
			{"zero-partitions", 0, 1, nil, kerr.InvalidPartitions},
			{"__consumer_offsets", 1, 1, nil, kerr.InvalidTopicException},
		}
		for _, c := range cases {
			err := e2eCreateErr(t, ctx, adm, false, c.name, c.partitions, c.rf, c.configs)
			if !errors.Is(err, c.want) && !(err == nil && c.want == nil) {
				t.Errorf("create %q: %v, want %v", c.name, err, c.want)
			}
			if c.want != nil && c.want != kerr.TopicAlreadyExists && c.name != engine.OffsetsTopic && b.Eng.Topic(c.name) != nil {
				t.Errorf("refused topic %q exists", c.name)
			}
		}
		// A 249-character name is fine.
		b.e2eCreate(ctx, strings.Repeat("y", 249), 1, nil)
	})

	t.Run("partitions", func(t *testing.T) {
		rs, err := adm.UpdatePartitions(ctx, 5, "orders")
		if err != nil || rs["orders"].Err != nil {
			t.Fatalf("grow to 5: %v %v", err, rs["orders"].Err)
		}
		tds, err := adm.ListTopics(ctx, "orders")
		if err != nil || len(tds["orders"].Partitions) != 5 {
			t.Fatalf("after growing: %v, %d partitions", err, len(tds["orders"].Partitions))
		}
		for _, n := range []int{2, 5} {
			rs, err := adm.UpdatePartitions(ctx, n, "orders")
			if err != nil || !errors.Is(rs["orders"].Err, kerr.InvalidPartitions) {
				t.Errorf("set to %d partitions: %v %v, want INVALID_PARTITIONS", n, err, rs["orders"].Err)
			}
		}
		rs, err = adm.ValidateCreatePartitions(ctx, 3, "orders")
		if err != nil || rs["orders"].Err != nil {
			t.Fatalf("validate grow: %v %v", err, rs["orders"].Err)
		}
		rs, err = adm.UpdatePartitions(ctx, 9, "no-such-topic")
		if err != nil || !errors.Is(rs["no-such-topic"].Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("grow unknown topic: %v %v", err, rs["no-such-topic"].Err)
		}
		if n := len(b.Eng.Topic("orders").Partitions()); n != 5 {
			t.Fatalf("%d partitions after refusals and a validate-only request, want 5", n)
		}
		// The new partitions take records, with the topic's configs.
		prod := b.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 4, Value: []byte("p4")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if l, _ := b.e2ePart("orders", 4).Log(); l.EndOffset() != 1 || !l.Options().LogAppendTime {
			t.Fatalf("partition 4: end %d, LogAppendTime %v", l.EndOffset(), l.Options().LogAppendTime)
		}
	})

	t.Run("delete", func(t *testing.T) {
		b.e2eCreate(ctx, "doomed", 2, nil)
		prod := b.client(kgo.DefaultProduceTopic("doomed"))
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		id := b.Eng.Topic("doomed").ID
		rs, err := adm.DeleteTopics(ctx, "doomed")
		if err != nil || rs["doomed"].Err != nil {
			t.Fatalf("delete: %v %v", err, rs["doomed"].Err)
		}
		if b.Eng.Topic("doomed") != nil {
			t.Fatal("topic still exists")
		}
		for p := 0; p < 2; p++ {
			if _, err := os.Stat(filepath.Join(b.dir, fmt.Sprintf("doomed-%d", p))); !os.IsNotExist(err) {
				t.Errorf("partition dir doomed-%d after delete: %v", p, err)
			}
		}
		tds, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tds["doomed"]; ok {
			t.Fatal("deleted topic is listed")
		}
		rc := b.e2eRaw()
		if pr := rc.rawProduce("doomed", 0, e2eBatch(t, 0, time.Now().UnixMilli(), -1, -1, -1, "after")); pr.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Errorf("produce after delete: %v", kerr.ErrorForCode(pr.ErrorCode))
		}
		if fp := rc.rawFetch(12, "doomed", [16]byte{}, 0, 0); fp.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Errorf("fetch v12 after delete: %v", kerr.ErrorForCode(fp.ErrorCode))
		}
		if fp := rc.rawFetch(13, "", id, 0, 0); fp.ErrorCode != kerr.UnknownTopicID.Code {
			t.Errorf("fetch v13 by id after delete: %v", kerr.ErrorForCode(fp.ErrorCode))
		}
		if lo := rc.listOffset("doomed", 0, -1); lo.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Errorf("list offsets after delete: %v", kerr.ErrorForCode(lo.ErrorCode))
		}
		rs, err = adm.DeleteTopics(ctx, "doomed")
		if err != nil || !errors.Is(rs["doomed"].Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("delete again: %v %v", err, rs["doomed"].Err)
		}
		// A kgo consumer gets nothing.
		cons := b.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"doomed": {0: kgo.NewOffset().At(0)}}))
		pollCtx := testCtx(t, 300*time.Millisecond)
		fs := cons.PollFetches(pollCtx)
		if len(fs.Records()) != 0 {
			t.Errorf("consumed %d records of a deleted topic", len(fs.Records()))
		}
		// The name can be used again, for a new, empty topic.
		r := b.e2eCreate(ctx, "doomed", 1, nil)
		if r.ID == kadm.TopicID(id) {
			t.Error("re-created topic has the old id")
		}
		if end := b.e2ePart("doomed", 0).HighWatermark(); end != 0 {
			t.Errorf("re-created topic has end offset %d", end)
		}
	})

	t.Run("restart", func(t *testing.T) {
		before := e2eDescribe(t, ctx, adm, "orders")
		ids := map[string]kadm.TopicID{}
		for _, tp := range b.Eng.Topics() {
			ids[tp.Name] = kadm.TopicID(tp.ID)
		}
		b.restart()
		adm2 := b.e2eAdmin()
		after := e2eDescribe(t, ctx, adm2, "orders")
		keys := make([]string, 0, len(before))
		for k := range before {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			bc, ac := before[k], after[k]
			if bc.MaybeValue() != ac.MaybeValue() || bc.Source != ac.Source {
				t.Errorf("%s: %q (%v) before restart, %q (%v) after", k, bc.MaybeValue(), bc.Source, ac.MaybeValue(), ac.Source)
			}
		}
		e2eExpectConfig(t, after, "retention.ms", "7200000", srcTopic)
		tds, err := adm2.ListTopicsWithInternal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(tds["orders"].Partitions) != 5 {
			t.Errorf("orders has %d partitions after restart", len(tds["orders"].Partitions))
		}
		for name, id := range ids {
			if td, ok := tds[name]; !ok || td.ID != id {
				t.Errorf("topic %s: listed %v, id %v, was %v", name, ok, td.ID, id)
			}
		}
		if len(tds) != len(ids) {
			t.Errorf("%d topics after restart, %d before", len(tds), len(ids))
		}
		if l, _ := b.e2ePart("orders", 4).Log(); l.EndOffset() != 1 || !l.Options().LogAppendTime {
			t.Errorf("partition 4 after restart: end %d, LogAppendTime %v", l.EndOffset(), l.Options().LogAppendTime)
		}
	})
}

// TestE2ETopicConfigBehaviour checks that configs change what the broker
// does: max.message.bytes, message.timestamp.type, segment.bytes,
// retention.bytes and retention.ms.
func TestE2ETopicConfigBehaviour(t *testing.T) {
	b := startBroker(t, withEngine(func(c *engine.Config) { c.RetentionCheckInterval = 20 * time.Millisecond }))
	ctx := testCtx(t, 40*time.Second)
	adm := b.e2eAdmin()

	t.Run("maxMessageBytes", func(t *testing.T) {
		b.e2eCreate(ctx, "mmb", 1, map[string]*string{"max.message.bytes": e2eStr("1000")})
		prod := b.client(kgo.DefaultProduceTopic("mmb"), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.DisableIdempotentWrite())
		big := bytes.Repeat([]byte("b"), 2000)
		err := prod.ProduceSync(ctx, &kgo.Record{Value: big}).FirstErr()
		if !errors.Is(err, kerr.MessageTooLarge) {
			t.Fatalf("2000-byte record with max.message.bytes=1000: %v, want MESSAGE_TOO_LARGE", err)
		}
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("small")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		// The limit is on the whole batch, log overhead included (as
		// Kafka's sizeInBytes): 1001 bytes are refused, 1000 accepted.
		rc := b.e2eRaw()
		for _, size := range []int{1001, 1000} {
			bt := e2eBatchOfSize(t, size)
			pr := rc.rawProduce("mmb", 0, bt)
			if want := size > 1000; want != (pr.ErrorCode == kerr.MessageTooLarge.Code) || !want && pr.ErrorCode != 0 {
				t.Errorf("batch of %d bytes with max.message.bytes=1000: %v", len(bt), kerr.ErrorForCode(pr.ErrorCode))
			}
		}
		if end := b.e2ePart("mmb", 0).HighWatermark(); end != 2 {
			t.Fatalf("end offset %d: refused batches were stored", end)
		}
		// Raising the limit takes effect at once.
		if err := e2eAlter(t, ctx, adm, false, "mmb", kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: e2eStr("10000")}); err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: big}).FirstErr(); err != nil {
			t.Fatalf("2000-byte record after raising the limit: %v", err)
		}
		got := b.e2eConsume(ctx, "mmb", 3)
		if string(got[0].Value) != "small" || got[1].Value[0] != 'r' || !bytes.Equal(got[2].Value, big) {
			t.Fatalf("consumed %q, %d bytes, %d bytes", got[0].Value, len(got[1].Value), len(got[2].Value))
		}
	})

	t.Run("logAppendTime", func(t *testing.T) {
		b.e2eCreate(ctx, "lat", 1, map[string]*string{"message.timestamp.type": e2eStr("LogAppendTime")})
		// CreateTime records from 2001 are past the default retention
		// (7 days), which this broker enforces every 20 ms: keep them.
		b.e2eCreate(ctx, "ct", 1, map[string]*string{"retention.ms": e2eStr("-1")})
		old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		prod := b.client()
		before := time.Now().UnixMilli()
		for _, topic := range []string{"lat", "ct"} {
			var recs []*kgo.Record
			for i := 0; i < 5; i++ {
				recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(i)), Timestamp: old.Add(time.Duration(i) * time.Second)})
			}
			if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		after := time.Now().UnixMilli()
		for _, r := range b.e2eConsume(ctx, "lat", 5) {
			ts := r.Timestamp.UnixMilli()
			if ts < before || ts > after || r.Attrs.TimestampType() != 1 {
				t.Errorf("LogAppendTime record %d: timestamp %v type %d, want broker time in [%d, %d]", r.Offset, r.Timestamp, r.Attrs.TimestampType(), before, after)
			}
		}
		for i, r := range b.e2eConsume(ctx, "ct", 5) {
			if !r.Timestamp.Equal(old.Add(time.Duration(i)*time.Second)) || r.Attrs.TimestampType() != 0 {
				t.Errorf("CreateTime record %d: timestamp %v type %d", i, r.Timestamp, r.Attrs.TimestampType())
			}
		}
		// The produce response carries the append time (-1 for
		// CreateTime topics).
		rc := b.e2eRaw()
		t0 := time.Now().UnixMilli()
		pr := rc.rawProduce("lat", 0, e2eBatch(t, 0, old.UnixMilli(), -1, -1, -1, "raw"))
		if pr.ErrorCode != 0 || pr.BaseOffset != 5 || pr.LogAppendTime < t0 || pr.LogAppendTime > time.Now().UnixMilli() || pr.LogStartOffset != 0 {
			t.Errorf("LogAppendTime produce response: error %d base %d append time %d (now %d) log start %d", pr.ErrorCode, pr.BaseOffset, pr.LogAppendTime, t0, pr.LogStartOffset)
		}
		if pr := rc.rawProduce("ct", 0, e2eBatch(t, 0, old.UnixMilli(), -1, -1, -1, "raw")); pr.ErrorCode != 0 || pr.BaseOffset != 5 || pr.LogAppendTime != -1 {
			t.Errorf("CreateTime produce response: error %d base %d append time %d", pr.ErrorCode, pr.BaseOffset, pr.LogAppendTime)
		}
		// By time, LogAppendTime records are found at broker time.
		lo, err := adm.ListOffsetsAfterMilli(ctx, old.UnixMilli(), "lat")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := lo.Lookup("lat", 0); o.Offset != 0 || o.Timestamp < before || o.Timestamp > after {
			t.Errorf("lat by time: offset %d timestamp %d", o.Offset, o.Timestamp)
		}
		// Switching a live topic to LogAppendTime applies to new batches.
		if err := e2eAlter(t, ctx, adm, false, "ct", kadm.AlterConfig{Op: kadm.SetConfig, Name: "message.timestamp.type", Value: e2eStr("LogAppendTime")}); err != nil {
			t.Fatal(err)
		}
		before = time.Now().UnixMilli()
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "ct", Value: []byte("6"), Timestamp: old}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		got := b.e2eConsume(ctx, "ct", 7)
		if r := got[6]; r.Timestamp.UnixMilli() < before || r.Attrs.TimestampType() != 1 {
			t.Errorf("after switching to LogAppendTime: timestamp %v type %d", r.Timestamp, r.Attrs.TimestampType())
		}
		if r := got[0]; !r.Timestamp.Equal(old) {
			t.Errorf("old record's timestamp changed to %v", r.Timestamp)
		}
	})

	t.Run("minInsyncReplicas", func(t *testing.T) {
		// One replica: acks=all cannot be satisfied with
		// min.insync.replicas=2 (NOT_ENOUGH_REPLICAS); acks=1 can.
		b.e2eCreate(ctx, "misr", 1, map[string]*string{"min.insync.replicas": e2eStr("2")})
		pr := b.e2eRaw().rawProduce("misr", 0, e2eBatch(t, 0, time.Now().UnixMilli(), -1, -1, -1, "x"))
		if pr.ErrorCode != kerr.NotEnoughReplicas.Code {
			t.Fatalf("acks=all with min.insync.replicas=2: %v", kerr.ErrorForCode(pr.ErrorCode))
		}
		prod := b.client(kgo.DefaultProduceTopic("misr"), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("y")}).FirstErr(); err != nil {
			t.Fatalf("acks=1 with min.insync.replicas=2: %v", err)
		}
		if end := b.e2ePart("misr", 0).HighWatermark(); end != 1 {
			t.Fatalf("end offset %d, want 1", end)
		}
	})

	// produceEach produces n records of about size bytes, one batch each.
	produceEach := func(t *testing.T, topic string, n, size int, ts time.Time) {
		t.Helper()
		prod := b.client(kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(0))
		for i := 0; i < n; i++ {
			v := fmt.Sprintf("%05d-%s", i, strings.Repeat("s", size))
			if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(v), Timestamp: ts}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("segmentBytes", func(t *testing.T) {
		b.e2eCreate(ctx, "segs", 1, map[string]*string{"segment.bytes": e2eStr("1024")})
		produceEach(t, "segs", 30, 200, time.Now())
		files := b.e2eSegments("segs", 0)
		hs := b.e2eHeaders("segs", 0)
		perSeg := 1024 / hs[0].Size()
		if want := (30 + perSeg - 1) / perSeg; len(files) != want {
			t.Fatalf("%d segment files for 30 batches of %d bytes with segment.bytes=1024, want %d: %v", len(files), hs[0].Size(), want, files)
		}
		for i, r := range b.e2eConsume(ctx, "segs", 30) {
			if r.Offset != int64(i) || !strings.HasPrefix(string(r.Value), fmt.Sprintf("%05d-", i)) {
				t.Fatalf("record %d across segments: offset %d %q", i, r.Offset, r.Value[:8])
			}
		}
	})

	t.Run("retentionBytes", func(t *testing.T) {
		b.e2eCreate(ctx, "rbytes", 1, map[string]*string{"segment.bytes": e2eStr("1024")})
		produceEach(t, "rbytes", 30, 200, time.Now())
		l, _ := b.e2ePart("rbytes", 0).Log()
		if l.StartOffset() != 0 || l.SegmentCount() < 5 {
			t.Fatalf("before retention: start %d, %d segments", l.StartOffset(), l.SegmentCount())
		}
		if err := e2eAlter(t, ctx, adm, false, "rbytes", kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.bytes", Value: e2eStr("2048")}); err != nil {
			t.Fatal(err)
		}
		// Segments are dropped from the log, then their files unlinked.
		firstFile := func() int64 {
			files := b.e2eSegments("rbytes", 0)
			sort.Strings(files)
			first, _ := strconv.ParseInt(strings.TrimSuffix(files[0], ".log"), 10, 64)
			return first
		}
		e2eWaitFor(t, 10*time.Second, "retention.bytes to delete segments", func() bool {
			return l.StartOffset() > 0 && l.Size() < 2048+1024 && firstFile() == l.StartOffset()
		})
		files := b.e2eSegments("rbytes", 0)
		sort.Strings(files)
		first := firstFile()
		starts, err := adm.ListStartOffsets(ctx, "rbytes")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := starts.Lookup("rbytes", 0)
		t.Logf("retention.bytes=2048: %d bytes in %d segments, start offset %d", l.Size(), len(files), o.Offset)
		if o.Offset != first || o.Offset != l.StartOffset() || o.Offset == 0 {
			t.Fatalf("ListStartOffsets %d, first segment file %s, log start %d", o.Offset, files[0], l.StartOffset())
		}
		if l.Size() < 2048 {
			t.Fatalf("retention deleted too much: %d bytes left of retention.bytes 2048", l.Size())
		}
		// Consumers start at the new log start.
		got := b.e2eConsume(ctx, "rbytes", int(30-o.Offset))
		if got[0].Offset != o.Offset || got[len(got)-1].Offset != 29 {
			t.Fatalf("consumed offsets %d-%d, want %d-29", got[0].Offset, got[len(got)-1].Offset, o.Offset)
		}
		if fp := b.e2eRaw().rawFetch(12, "rbytes", [16]byte{}, 0, 0); fp.ErrorCode != kerr.OffsetOutOfRange.Code || fp.LogStartOffset != o.Offset {
			t.Fatalf("fetch at 0 after retention: %v, log start %d", kerr.ErrorForCode(fp.ErrorCode), fp.LogStartOffset)
		}
	})

	t.Run("retentionMs", func(t *testing.T) {
		b.e2eCreate(ctx, "rms", 1, map[string]*string{"segment.bytes": e2eStr("1024")})
		produceEach(t, "rms", 12, 200, time.Now().Add(-2*time.Hour))
		part := b.e2ePart("rms", 0)
		l, _ := part.Log()
		part.Shard().EnforceRetentionNow() // the default retention (7 days) keeps them
		if l.StartOffset() != 0 {
			t.Fatalf("start offset %d before retention.ms was set", l.StartOffset())
		}
		if err := e2eAlter(t, ctx, adm, false, "rms", kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: e2eStr("3600000")}); err != nil {
			t.Fatal(err)
		}
		// Every record is older than the retention: every segment goes,
		// the active one too (rolled first), as in Kafka.
		e2eWaitFor(t, 10*time.Second, "retention.ms to delete every segment", func() bool { return l.StartOffset() == 12 })
		starts, err := adm.ListStartOffsets(ctx, "rms")
		if err != nil {
			t.Fatal(err)
		}
		ends, err := adm.ListEndOffsets(ctx, "rms")
		if err != nil {
			t.Fatal(err)
		}
		s, _ := starts.Lookup("rms", 0)
		e, _ := ends.Lookup("rms", 0)
		if s.Offset != 12 || e.Offset != 12 {
			t.Fatalf("after retention: start %d end %d, want 12 12", s.Offset, e.Offset)
		}
		// New records continue the offsets and are kept.
		produceEach(t, "rms", 1, 10, time.Now())
		got := b.e2eConsume(ctx, "rms", 1)
		if got[0].Offset != 12 {
			t.Fatalf("new record at offset %d, want 12", got[0].Offset)
		}
	})
}

// TestE2EAutoCreate checks topic auto-creation by Metadata and Produce,
// with the broker's default partition count, and its refusal when
// auto-creation is off.
func TestE2EAutoCreate(t *testing.T) {
	metadata := func(rc *e2eConn, v int16, allow bool, topic string) kmsg.MetadataResponseTopic {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = allow
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = &topic
		req.Topics = append(req.Topics, mt)
		resp := rc.do(req, v).(*kmsg.MetadataResponse)
		if len(resp.Topics) != 1 {
			t.Fatalf("metadata for %s: %d topics", topic, len(resp.Topics))
		}
		return resp.Topics[0]
	}

	t.Run("on", func(t *testing.T) {
		b := startBroker(t, withEngine(func(c *engine.Config) { c.DefaultPartitions = 3 }))
		ctx := testCtx(t, 20*time.Second)
		rc := b.e2eRaw()
		mt := metadata(rc, 12, true, "auto-meta")
		if mt.ErrorCode != 0 || len(mt.Partitions) != 3 || mt.TopicID == [16]byte{} {
			t.Fatalf("auto-created by metadata: error %v, %d partitions, id %v", kerr.ErrorForCode(mt.ErrorCode), len(mt.Partitions), mt.TopicID)
		}
		if tp := b.Eng.Topic("auto-meta"); tp == nil || len(tp.Partitions()) != 3 || tp.ID != engine.TopicID(mt.TopicID) {
			t.Fatal("auto-meta not in the engine with 3 partitions and the same id")
		}
		if mt := metadata(rc, 12, false, "auto-not-allowed"); mt.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("metadata without allow: %v", kerr.ErrorForCode(mt.ErrorCode))
		}
		if b.Eng.Topic("auto-not-allowed") != nil {
			t.Fatal("created although the request did not allow it")
		}
		// Before v4 every metadata request may create topics.
		if mt := metadata(rc, 3, false, "auto-v3"); mt.ErrorCode != 0 || len(mt.Partitions) != 3 {
			t.Fatalf("metadata v3: %v, %d partitions", kerr.ErrorForCode(mt.ErrorCode), len(mt.Partitions))
		}
		if mt := metadata(rc, 12, true, "bad name"); mt.ErrorCode != kerr.InvalidTopicException.Code {
			t.Fatalf("metadata for an invalid name: %v", kerr.ErrorForCode(mt.ErrorCode))
		}
		// kgo producing to a new topic creates it (kgo asks with allow).
		prod := b.client(kgo.DefaultProduceTopic("auto-produce"))
		var recs []*kgo.Record
		for i := 0; i < 30; i++ {
			recs = append(recs, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("v")})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if n := len(b.Eng.Topic("auto-produce").Partitions()); n != 3 {
			t.Fatalf("auto-produce has %d partitions", n)
		}
		cfgs := e2eDescribe(t, ctx, b.e2eAdmin(), "auto-produce")
		e2eExpectConfig(t, cfgs, "retention.ms", "604800000", srcDefault)
		if len(b.e2eConsume(ctx, "auto-produce", 30)) != 30 {
			t.Fatal("records lost")
		}
	})

	t.Run("off", func(t *testing.T) {
		b := startBroker(t, withEngine(func(c *engine.Config) { c.AutoCreateTopics = false }))
		ctx := testCtx(t, 20*time.Second)
		rc := b.e2eRaw()
		if mt := metadata(rc, 12, true, "nope"); mt.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("metadata with auto-create off: %v", kerr.ErrorForCode(mt.ErrorCode))
		}
		if pr := rc.rawProduce("nope", 0, e2eBatch(t, 0, time.Now().UnixMilli(), -1, -1, -1, "x")); pr.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("raw produce with auto-create off: %v", kerr.ErrorForCode(pr.ErrorCode))
		}
		prod := b.client(kgo.DefaultProduceTopic("nope"), kgo.UnknownTopicRetries(0), kgo.MetadataMinAge(10*time.Millisecond))
		err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr()
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("kgo produce with auto-create off: %v", err)
		}
		if b.Eng.Topic("nope") != nil {
			t.Fatal("topic created with auto-create off")
		}
		if _, err := os.Stat(filepath.Join(b.dir, "nope-0")); !os.IsNotExist(err) {
			t.Fatalf("partition dir exists: %v", err)
		}
	})
}
