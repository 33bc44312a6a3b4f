package netio_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/client"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/wal/batch"
)

// The malformed-input matrix for topic names and produce sizes, both
// protocols. Each bad input gets Kafka's error code (or the native
// protocol's), the broker keeps serving a fresh connection and one opened
// before the attack, and nothing is created on disk: the data directory's
// parent and the data directory itself hold exactly what they held before.

// dirEntries lists the names in dir, sorted.
func dirEntries(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestMalformedTopicNames sends names with "..", "/", NUL and 300
// characters through every path that can create a topic: CreateTopics,
// Metadata with auto-creation, Produce with auto-creation, and the native
// protocol's create and produce.
func TestMalformedTopicNames(t *testing.T) {
	b := startBroker(t)
	h := newHealthCheck(t, b.Addr)
	parent := filepath.Dir(b.Dir)
	parentBefore, dataBefore := dirEntries(t, parent), dirEntries(t, b.Dir)
	native, err := client.Dial(context.Background(), b.NativeAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer native.Close()
	rc := dialWire(t, b.Addr)
	corr := int32(0)
	names := []string{"..", ".", "../escaped", "../../escaped", "a/b", "/abs", "a\x00b", "\x00", strings.Repeat("a", 300), "a\\b", ""}
	for _, name := range names {
		what := strings.ToValidUTF8(strings.ReplaceAll(name, "\x00", `\0`), "?")
		if len(what) > 20 {
			what = what[:20] + "..."
		}
		t.Run(what, func(t *testing.T) {
			rc.t = t
			// CreateTopics v5 (and v2, not flexible).
			for _, v := range []int16{5, 2} {
				corr++
				req := kmsg.NewPtrCreateTopicsRequest()
				req.TimeoutMillis = 5000
				rt := kmsg.NewCreateTopicsRequestTopic()
				rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
				req.Topics = append(req.Topics, rt)
				resp := rc.roundTrip(req, v, corr).(*kmsg.CreateTopicsResponse)
				if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != kerr.InvalidTopicException.Code {
					t.Fatalf("CreateTopics v%d: %+v", v, resp.Topics)
				}
			}
			// Metadata v12 allowing auto-creation, and v3 (which always may).
			for _, v := range []int16{12, 3} {
				corr++
				req := kmsg.NewPtrMetadataRequest()
				req.AllowAutoTopicCreation = true
				mt := kmsg.NewMetadataRequestTopic()
				n := name
				mt.Topic = &n
				req.Topics = append(req.Topics, mt)
				resp := rc.roundTrip(req, v, corr).(*kmsg.MetadataResponse)
				if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != kerr.InvalidTopicException.Code {
					t.Fatalf("Metadata v%d: %+v", v, resp.Topics)
				}
			}
			// Produce v9 and v7 to the name (auto-creation is on).
			for _, v := range []int16{9, 7} {
				corr++
				resp := rc.roundTrip(produceReq(name, -1, testBatch(t, 1, batch.CodecNone, "n")), v, corr).(*kmsg.ProduceResponse)
				if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
					t.Fatalf("Produce v%d response shape: %+v", v, resp)
				}
				if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidTopicException.Code && code != kerr.UnknownTopicOrPartition.Code {
					t.Fatalf("Produce v%d: error %v", v, kerr.ErrorForCode(code))
				}
			}
			// The native protocol.
			ctx := testCtx(t, 10*time.Second)
			if err := native.CreateTopic(ctx, name, 1); !errors.Is(err, client.ErrInvalidTopic) {
				t.Fatalf("native create: %v", err)
			}
			var ce *client.Error
			if _, _, err := native.Produce(ctx, name, 0, []client.Record{{Value: []byte("v")}}); !errors.As(err, &ce) {
				t.Fatalf("native produce: %v, want the broker's error code", err)
			}
			if b.Eng.Topic(name) != nil {
				t.Fatal("the topic exists")
			}
			if _, err := os.Lstat(filepath.Join(b.Dir, name+"-0")); err == nil {
				t.Fatalf("%s exists", filepath.Join(b.Dir, name+"-0"))
			}
			h.check(t, "topic name "+what)
		})
	}
	if got := dirEntries(t, parent); !slices.Equal(got, parentBefore) {
		t.Fatalf("the data dir's parent changed: %v, was %v", got, parentBefore)
	}
	if got := dirEntries(t, b.Dir); !slices.Equal(got, dataBefore) {
		t.Fatalf("the data dir changed: %v, was %v", got, dataBefore)
	}
}

// TestMalformedProduceSizes: batches whose length field lies, and a 20 MiB
// batch (over max.message.bytes, under --max-request-bytes), each refused
// with Kafka's code for its partition, nothing written, the connection
// still usable.
func TestMalformedProduceSizes(t *testing.T) {
	b := startBroker(t)
	h := newHealthCheck(t, b.Addr)
	if _, err := b.Eng.CreateTopic(engine.CreateTopicRequest{Name: "sizes", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	rc := dialWire(t, b.Addr)
	corr := int32(0)
	produce := func(t *testing.T, what string, records []byte, codes ...int16) {
		t.Helper()
		rc.t = t
		for _, v := range []int16{9, 7} {
			corr++
			resp := rc.roundTrip(produceReq("sizes", -1, records), v, corr).(*kmsg.ProduceResponse)
			if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
				t.Fatalf("%s v%d: response shape %+v", what, v, resp)
			}
			p := resp.Topics[0].Partitions[0]
			if !slices.Contains(codes, p.ErrorCode) || p.BaseOffset != -1 {
				t.Fatalf("%s v%d: error %v base %d, want one of %v", what, v, kerr.ErrorForCode(p.ErrorCode), p.BaseOffset, codes)
			}
		}
		l, err := b.Eng.Topic("sizes").Partition(0).Log()
		if err != nil {
			t.Fatal(err)
		}
		if end := l.EndOffset(); end != 0 {
			t.Fatalf("%s: %d records written", what, end)
		}
		h.check(t, what)
	}
	lie := func(delta int) []byte {
		bt := testBatch(t, 3, batch.CodecNone, "lie")
		binary.BigEndian.PutUint32(bt[8:], uint32(int(binary.BigEndian.Uint32(bt[8:]))+delta))
		return bt
	}
	t.Run("batch length longer than the bytes", func(t *testing.T) {
		produce(t, "length +100", lie(100), kerr.CorruptMessage.Code, kerr.InvalidRecord.Code)
	})
	t.Run("batch length shorter than the records", func(t *testing.T) {
		produce(t, "length -10", lie(-10), kerr.CorruptMessage.Code, kerr.InvalidRecord.Code)
	})
	t.Run("batch length negative", func(t *testing.T) {
		bt := testBatch(t, 3, batch.CodecNone, "neg")
		binary.BigEndian.PutUint32(bt[8:], 0xfffffff0)
		produce(t, "length -16", bt, kerr.CorruptMessage.Code, kerr.InvalidRecord.Code)
	})
	t.Run("20 MiB batch", func(t *testing.T) {
		bl := batch.NewBuilder()
		bl.Add(time.Now().UnixMilli(), nil, make([]byte, 20<<20), nil)
		big, err := bl.Build(nil, batch.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		produce(t, "20 MiB", big, kerr.MessageTooLarge.Code)
	})
}
