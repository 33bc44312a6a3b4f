package main

import (
	"crypto/rand"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkClusterTransactions measures transactional produce against
// plain idempotent produce on a three-broker cluster, side by side: each
// iteration writes 4 MiB of 1 KiB random, uncompressed records with
// acks=all to a topic of 3 partitions (one led by each broker) and
// replication factor 3, first idempotently, then in transactions
// committed every 100 ms (so the coordinator's records, the leaders'
// verification with it and the markers across brokers are in the
// measurement). It reports each mode's MB/s over all iterations and
// txn/idem, the ratio of the per-iteration medians.
//
//	go test -run XXX -bench ClusterTransactions -benchtime 6x ./cmd/ringlog/
func BenchmarkClusterTransactions(b *testing.B) {
	ringlogBinary(b)
	c := newTestCluster(b, 3)
	for id := 1; id <= 3; id++ {
		c.procs[id-1] = startServe(b, c.dirs[id-1], append(c.args(id, c.voters), "--shards", "2")...)
	}
	ctx := deadlineCtx(b, 10*time.Minute)
	c.converge(ctx, 3)
	common := []kgo.Opt{kgo.SeedBrokers(c.kafka...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("bench"),
		kgo.ProducerLinger(time.Millisecond), kgo.MaxBufferedRecords(1 << 16), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}
	idem := procClient(b, c.kafka[0], common...)
	if r, err := kadm.NewClient(idem).CreateTopic(ctx, 3, 3, nil, "bench"); err != nil || r.Err != nil {
		b.Fatalf("create bench: %v %v", err, r.Err)
	}
	c.waitFullISR(ctx, "bench", 3, 3, 30*time.Second)
	c.waitFullISR(ctx, "__transaction_state", 8, 3, 30*time.Second)
	txn := procClient(b, c.kafka[0], append(common, kgo.TransactionalID("bench-txn"))...)

	const perIter = 4 << 10 // records: 4 MiB
	values := make([]byte, perIter*1024)
	rand.Read(values)
	produce := func(cl *kgo.Client, transactional bool) (time.Duration, int) {
		start := time.Now()
		commits := 0
		if transactional {
			if err := cl.BeginTransaction(); err != nil {
				b.Fatal(err)
			}
		}
		last := time.Now()
		for i := 0; i < perIter; i++ {
			cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: values[i*1024 : (i+1)*1024]}, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Errorf("produce: %v", err)
				}
			})
			if transactional && time.Since(last) >= 100*time.Millisecond {
				if err := cl.Flush(ctx); err != nil {
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
		if transactional {
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				b.Fatal(err)
			}
			commits++
		}
		return time.Since(start), commits
	}
	produce(idem, false) // warm: leaders, fetchers, connections, the coordinator
	produce(txn, true)
	var idemTimes, txnTimes []time.Duration
	commits := 0
	b.SetBytes(2 * perIter * 1024)
	for b.Loop() {
		d, _ := produce(idem, false)
		idemTimes = append(idemTimes, d)
		d, n := produce(txn, true)
		txnTimes = append(txnTimes, d)
		commits += n
	}
	mbps := func(ds []time.Duration) float64 {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return float64(len(ds)) * perIter * 1024 / sum.Seconds() / 1e6
	}
	median := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	b.ReportMetric(mbps(idemTimes), "idem-MB/s")
	b.ReportMetric(mbps(txnTimes), "txn-MB/s")
	b.ReportMetric(float64(median(idemTimes))/float64(median(txnTimes)), "txn/idem")
	b.ReportMetric(float64(commits)/float64(len(txnTimes)), "commits/iter")
}
