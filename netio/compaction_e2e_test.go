package netio_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/engine"
)

// TestCompactedTopicEndToEnd: many updates to few keys shrink the log to the
// newest values, a consumer from offset 0 sees a consistent map, tombstones
// disappear after delete.retention.ms, and records without a key are
// refused.
func TestCompactedTopicEndToEnd(t *testing.T) {
	// The broker's clock runs skew ahead of the wall clock, so the test
	// lets delete.retention.ms pass without waiting for it.
	var skew atomic.Int64
	b := startBroker(t, withEngine(func(c *engine.Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	}))
	ctx := testCtx(t, 30*time.Second)
	adm := kadm.NewClient(b.client())
	cfg := map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr("4096"),
		"delete.retention.ms": kadm.StringPtr("1000"), "min.cleanable.dirty.ratio": kadm.StringPtr("0.01")}
	if r, err := adm.CreateTopic(ctx, 1, 1, cfg, "kv"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	prod := b.client(kgo.DefaultProduceTopic("kv"), kgo.ProducerLinger(0))
	want := map[string]string{}
	for i := 0; i < 3000; i++ {
		k, v := fmt.Sprintf("key-%d", i%20), fmt.Sprintf("value-%d", i)
		want[k] = v
		prod.Produce(ctx, &kgo.Record{Key: []byte(k), Value: []byte(v)}, nil)
	}
	// key-3 is deleted.
	prod.Produce(ctx, &kgo.Record{Key: []byte("key-3")}, nil)
	delete(want, "key-3")
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Records without a key do not belong in a compacted topic.
	err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("no key")}).FirstErr()
	if !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("keyless record: %v", err)
	}
	// Fill past the tombstone so it leaves the active segment.
	for i := 0; i < 200; i++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte("filler"), Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	want["filler"] = "199"

	consumeMap := func() (map[string]string, int, bool) {
		cl := b.client(kgo.ConsumeTopics("kv"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		end, err := adm.ListEndOffsets(ctx, "kv")
		if err != nil {
			t.Fatal(err)
		}
		hw := end["kv"][0].Offset
		m := map[string]string{}
		n := 0
		tomb := false
		last := int64(-1)
		for last < hw-1 && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				n++
				last = r.Offset
				if r.Value == nil {
					tomb = true
					delete(m, string(r.Key))
				} else {
					m[string(r.Key)] = string(r.Value)
				}
			})
			if len(fs.Records()) == 0 {
				break
			}
		}
		cl.Close()
		return m, n, tomb
	}
	m0, n0, _ := consumeMap()
	if fmt.Sprint(m0) != fmt.Sprint(want) {
		t.Fatalf("before compaction: %v", m0)
	}
	b.Eng.CompactNow()
	m1, n1, tomb1 := consumeMap()
	if fmt.Sprint(m1) != fmt.Sprint(want) {
		t.Fatalf("after compaction the map changed: %v", m1)
	}
	if n1 >= n0/5 {
		t.Fatalf("compaction kept %d of %d records", n1, n0)
	}
	if !tomb1 {
		t.Fatal("the tombstone vanished before delete.retention.ms")
	}
	skew.Store(int64(2 * time.Second)) // past delete.retention.ms (1 s) for the tombstone
	prod.ProduceSync(ctx, &kgo.Record{Key: []byte("filler"), Value: []byte("last")})
	// New data (enough to roll segments) makes the log dirty again, which
	// is what triggers a pass (min.cleanable.dirty.ratio).
	pad := strings.Repeat("p", 200)
	for i := 0; i < 100; i++ { // one batch each: segments roll
		if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte("filler2"), Value: []byte(fmt.Sprint(i) + pad)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	want["filler"], want["filler2"] = "last", "99"+pad
	st := b.Eng.CompactNow()
	t.Logf("second pass: %+v", st)
	m2, n2, tomb2 := consumeMap()
	if tomb2 {
		t.Fatal("the tombstone survived delete.retention.ms")
	}
	if fmt.Sprint(m2) != fmt.Sprint(want) {
		t.Fatalf("after tombstone removal: %v", m2)
	}
	t.Logf("records: %d produced, %d after compaction, %d after tombstone expiry", n0, n1, n2)
}
