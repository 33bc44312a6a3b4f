package netio_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/brokertest"
)

// BenchmarkTransactions compares, within one run, franz-go producing 1 KiB
// records idempotently (acks=all) with producing them in transactions
// committed every 100 ms, and reading a log of transactions (one in ten
// aborted) read_uncommitted with reading it read_committed (go test
// -bench Transactions -count 3; compare the pairs' MB/s).
func BenchmarkTransactions(b *testing.B) {
	br := brokertest.Start(b)
	ctx := context.Background()
	adm := kadm.NewClient(br.Client())
	const parts = 4
	val := make([]byte, 1024)
	rand.Read(val)
	common := []kgo.Opt{kgo.SeedBrokers(br.Addr), kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.MaxBufferedRecords(1 << 16)}
	for _, mode := range []string{"idempotent", "transactional"} {
		topic := "txn-bench-" + mode
		if _, err := adm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
			b.Fatal(err)
		}
		b.Run("produce/"+mode, func(b *testing.B) {
			opts := append(common, kgo.DefaultProduceTopic(topic))
			if mode == "transactional" {
				opts = append(opts, kgo.TransactionalID("bench-"+b.Name()))
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			txn := mode == "transactional"
			if txn {
				if err := cl.BeginTransaction(); err != nil {
					b.Fatal(err)
				}
			}
			last := time.Now()
			commits := 0
			b.SetBytes(int64(len(val)))
			for b.Loop() {
				cl.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
				})
				if txn && time.Since(last) >= 100*time.Millisecond {
					if err := cl.Flush(ctx); err != nil { // EndTransaction does not flush
						b.Fatal(err)
					}
					if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
						b.Fatal(err)
					}
					commits++
					if err := cl.BeginTransaction(); err != nil {
						b.Fatal(err)
					}
					last = time.Now()
				}
			}
			if err := cl.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			if txn {
				if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(commits+1), "commits")
			}
		})
	}

	// One log of 100 transactions of 1000 records, every tenth aborted.
	const txns, per = 100, 1000
	const readTopic = "txn-bench-read"
	if _, err := adm.CreateTopic(ctx, parts, 1, nil, readTopic); err != nil {
		b.Fatal(err)
	}
	prod := br.Client(append(common, kgo.DefaultProduceTopic(readTopic), kgo.TransactionalID("bench-fill"))...)
	for i := 0; i < txns; i++ {
		if err := prod.BeginTransaction(); err != nil {
			b.Fatal(err)
		}
		for j := 0; j < per; j++ {
			prod.Produce(ctx, &kgo.Record{Value: val}, nil)
		}
		if err := prod.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		end := kgo.TryCommit
		if i%10 == 9 {
			end = kgo.TryAbort
		}
		if err := prod.EndTransaction(ctx, end); err != nil {
			b.Fatal(err)
		}
	}
	for _, level := range []struct {
		name string
		iso  kgo.IsolationLevel
		want int
	}{
		{"read_uncommitted", kgo.ReadUncommitted(), txns * per},
		{"read_committed", kgo.ReadCommitted(), txns * per * 9 / 10},
	} {
		b.Run("fetch/"+level.name, func(b *testing.B) {
			b.SetBytes(int64(txns * per * len(val))) // the same log bytes go out either way
			for b.Loop() {
				cl, err := kgo.NewClient(kgo.SeedBrokers(br.Addr), kgo.ConsumeTopics(readTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
					kgo.FetchIsolationLevel(level.iso), kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(8<<20))
				if err != nil {
					b.Fatal(err)
				}
				for got := 0; got < level.want; {
					fs := cl.PollFetches(ctx)
					if err := fs.Err(); err != nil {
						b.Fatal(err)
					}
					got += fs.NumRecords()
				}
				cl.Close()
			}
		})
	}
}
