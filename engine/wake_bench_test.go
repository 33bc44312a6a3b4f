package engine

import (
	"testing"
	"time"

	"github.com/ringlog/ringlog/wal/batch"
)

// BenchmarkProduceToFetchWake measures the produce-to-fetch-wake latency
// alone (no network): from the call to Append of one 1 KiB acks=1 record
// to the moment a fetch parked on the partition is woken, reported as
// wake-ns. The variants:
//
//   - inline/callback: today's path for a Kafka produce to an idle shard
//     and a parked fetch: the appender writes (direct-write fast path)
//     and calls the fetch's Wake itself.
//   - queued/callback: the shard goroutine writes (a busy shard, or a
//     request that cannot go inline) and calls Wake.
//   - queued/goroutine: the path before both: the shard goroutine writes
//     and wakes a goroutine parked on the Waiter's channel.
func BenchmarkProduceToFetchWake(b *testing.B) {
	for _, bc := range []struct {
		name             string
		inline, callback bool
	}{
		{"inline/callback", true, true},
		{"queued/callback", false, true},
		{"queued/goroutine", false, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := openEngine(b, b.TempDir(), func(c *Config) { c.Shards = 1 })
			top, err := e.CreateTopic(CreateTopicRequest{Name: "wake", Partitions: 1, ReplicationFactor: 1})
			if err != nil {
				b.Fatal(err)
			}
			p := top.Partition(0)
			data := buildBatch(b, 1000, -1, 0, 0, rec{value: make([]byte, 1024)})
			h, err := batch.Validate(data, batch.Limits{})
			if err != nil {
				b.Fatal(err)
			}
			woke := make(chan time.Time, 1)
			w := &Waiter{C: make(chan struct{}, 1)}
			if bc.callback {
				w.Wake = func() {
					select {
					case woke <- time.Now():
					default:
					}
				}
			} else {
				go func() {
					for range w.C {
						woke <- time.Now()
					}
				}()
				defer close(w.C)
			}
			p.Watch(w)
			defer p.Unwatch(w)
			done := make(chan struct{}, 1)
			req := AppendRequest{Partition: p, Acks: 1, Inline: bc.inline, Bytes: len(data),
				Done: func(AppendResult) { done <- struct{}{} }}
			var total time.Duration
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := req
				r.Batches, r.Headers = [][]byte{data}, []batch.Header{h}
				start := time.Now()
				p.Shard().Append(&r)
				at := <-woke
				<-done
				total += at.Sub(start)
			}
			b.StopTimer()
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "wake-ns")
		})
	}
}
