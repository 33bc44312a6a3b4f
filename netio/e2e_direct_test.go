package netio_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/wal"
)

// TestE2EDirectWrites: a broker writing with O_DIRECT (--direct-writes)
// serves franz-go's produces and fetches as the buffered one does: a
// consumer at the tail gets every record as produced (acks=1 and acks=all,
// compressed and not, values of a few bytes to several blocks), and all of
// it again after a restart.
func TestE2EDirectWrites(t *testing.T) {
	probe := t.TempDir()
	if err := wal.CheckDirectWrites(probe); err != nil {
		t.Skipf("no O_DIRECT in the test's temporary directory: %v", err)
	}
	b := startBroker(t, withEngine(func(c *engine.Config) { c.DirectWrites = true }))
	const topic, n = "direct", 3000
	createTopic(t, b, topic, 3)
	ctx := testCtx(t, 60*time.Second)
	tail := b.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	values := map[string]bool{}
	var recs []*kgo.Record
	for i := range n {
		v := fmt.Sprintf("direct-%05d-%s", i, make([]byte, (i*37)%9000))
		values[v] = true
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(i % 11)), Value: []byte(v)})
	}
	produce := func(recs []*kgo.Record, opts ...kgo.Opt) {
		t.Helper()
		cl := b.client(append([]kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(time.Millisecond)}, opts...)...)
		defer cl.Close()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(recs[:n/3], kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.ProducerBatchCompression(kgo.NoCompression()))
	produce(recs[n/3:2*n/3], kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	produce(recs[2*n/3:], kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	check := func(what string, got []*kgo.Record) {
		t.Helper()
		seen := map[string]bool{}
		for _, r := range got {
			if !values[string(r.Value)] || seen[string(r.Value)] {
				t.Fatalf("%s: unexpected or repeated record %.20q at %s-%d@%d", what, r.Value, r.Topic, r.Partition, r.Offset)
			}
			seen[string(r.Value)] = true
		}
	}
	check("the tail consumer", e2ePoll(t, ctx, tail, n))
	tail.Close()
	b.restart()
	check("after a restart", b.e2eConsume(ctx, topic, n))
}
