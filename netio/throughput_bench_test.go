package netio_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkKgoProduce: franz-go producing 1 KiB records to 16 partitions,
// acks=1 against acks=all (fdatasync, group-committed). Client and broker
// share the machine, so compare the two within one run.
func BenchmarkKgoProduce(b *testing.B) {
	for _, acks := range []struct {
		name string
		acks kgo.Acks
	}{{"acks=1", kgo.LeaderAck()}, {"acks=all", kgo.AllISRAcks()}} {
		b.Run(acks.name, func(b *testing.B) {
			br := startBroker(b)
			adm := kadm.NewClient(br.client())
			if _, err := adm.CreateTopic(context.Background(), 16, 1, nil, "bench"); err != nil {
				b.Fatal(err)
			}
			opts := []kgo.Opt{kgo.DefaultProduceTopic("bench"), kgo.RequiredAcks(acks.acks), kgo.ProducerLinger(time.Millisecond),
				kgo.ProducerBatchCompression(kgo.NoCompression()),
				kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.MaxBufferedRecords(1 << 16)}
			if acks.name == "acks=1" {
				opts = append(opts, kgo.DisableIdempotentWrite())
			}
			cl := br.client(opts...)
			val := make([]byte, 1024)
			rand.Read(val) // incompressible, like real payloads
			ctx := context.Background()
			b.SetBytes(int64(len(val)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cl.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkKgoConsume: franz-go reading a filled 16-partition topic of
// 1 KiB records from offset 0 (fetches go out with sendfile).
func BenchmarkKgoConsume(b *testing.B) {
	br := startBroker(b)
	adm := kadm.NewClient(br.client())
	ctx := context.Background()
	if _, err := adm.CreateTopic(ctx, 16, 1, nil, "filled"); err != nil {
		b.Fatal(err)
	}
	prod := br.client(kgo.DefaultProduceTopic("filled"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.DisableIdempotentWrite(),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	const n = 200_000
	val := make([]byte, 1024)
	rand.Read(val)
	for i := 0; i < n; i++ {
		prod.Produce(ctx, &kgo.Record{Value: val}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(n * len(val)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cl, err := kgo.NewClient(kgo.SeedBrokers(br.Addr), kgo.ConsumeTopics("filled"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(8<<20))
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for got < n {
			fs := cl.PollFetches(ctx)
			if errs := fs.Errors(); len(errs) > 0 {
				b.Fatal(fmt.Sprint(errs))
			}
			got += fs.NumRecords()
		}
		cl.Close()
	}
}
