package netio_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestProduceConsumeRoundTrip(t *testing.T) {
	b := startBroker(t)
	prod := b.client(kgo.DefaultProduceTopic("roundtrip"))
	ctx := testCtx(t, 20*time.Second)
	const n = 500
	for i := 0; i < n; i++ {
		prod.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i % 10)), Value: []byte(fmt.Sprintf("value-%d", i))}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cons := b.client(kgo.ConsumeTopics("roundtrip"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := 0
	for seen < n {
		fs := cons.PollFetches(ctx)
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatal(errs)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != int64(seen) || string(r.Value) != fmt.Sprintf("value-%d", seen) {
				t.Fatalf("record %d: offset %d value %q", seen, r.Offset, r.Value)
			}
			seen++
		})
	}
}
