package netio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlog/ringlog/client"
)

// BenchmarkNativeSingleVsBatch is the seed's measurement (MyKafka saw 61x):
// 1000 records produced as 1000 single-record PRODUCE round trips, against
// the same 1000 records as one batch. Each iteration sends 1000 records;
// compare ns/op of the two sub-benchmarks (the ratio is what matters on a
// shared machine).
func BenchmarkNativeSingleVsBatch(b *testing.B) {
	br := startBroker(b)
	ctx := context.Background()
	c, err := client.Dial(ctx, br.NativeAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "bench", 1); err != nil {
		b.Fatal(err)
	}
	recs := make([]client.Record, 1000)
	for i := range recs {
		recs[i] = client.Record{Key: []byte("seat-42"), Value: make([]byte, 100)}
	}
	var single, batch time.Duration
	b.Run("single-x1000", func(b *testing.B) {
		b.SetBytes(100 * 1000)
		b.ReportAllocs()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			for j := range recs {
				if _, _, err := c.Produce(ctx, "bench", 0, recs[j:j+1]); err != nil {
					b.Fatal(err)
				}
			}
		}
		single = time.Since(start) / time.Duration(b.N)
	})
	b.Run("batch-1x1000", func(b *testing.B) {
		b.SetBytes(100 * 1000)
		b.ReportAllocs()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if _, _, err := c.Produce(ctx, "bench", 0, recs); err != nil {
				b.Fatal(err)
			}
		}
		batch = time.Since(start) / time.Duration(b.N)
	})
	if single > 0 && batch > 0 {
		b.Logf("1000 single produces: %v, one 1000-record batch: %v, speedup %.1fx", single, batch, float64(single)/float64(batch))
	}
}
