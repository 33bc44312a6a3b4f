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
// iteration produces 1 KiB random, uncompressed records with acks=all to
// a topic of 3 partitions (one led by each broker) and replication
// factor 3 for one second idempotently, then for one second in
// transactions committed every 100 ms (so the coordinator's records, the
// leaders' verification with it and the markers across brokers are in
// the measurement). It reports each mode's median MB/s and txn/idem,
// their ratio; the ns/op is the two seconds and means nothing.
//
//	go test -run XXX -bench ClusterTransactions -benchtime 8x ./cmd/ringlog/
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

	const window = time.Second // of producing per mode and iteration
	const pool = 4 << 10       // distinct 1 KiB values, reused
	values := make([]byte, pool*1024)
	rand.Read(values)
	// produce writes for window, commits every 100 ms when
	// transactional, and returns MB/s of acknowledged records and the
	// commits.
	produce := func(cl *kgo.Client, transactional bool) (float64, int) {
		start := time.Now()
		commits := 0
		if transactional {
			if err := cl.BeginTransaction(); err != nil {
				b.Fatal(err)
			}
		}
		last := start
		n := 0
		for ; time.Since(start) < window; n++ {
			i := n % pool
			cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(n)), Value: values[i*1024 : (i+1)*1024]}, func(_ *kgo.Record, err error) {
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
		return float64(n) * 1024 / time.Since(start).Seconds() / 1e6, commits
	}
	produce(idem, false) // warm: leaders, fetchers, connections, the coordinator
	produce(txn, true)
	var idemRates, txnRates []float64
	commits := 0
	for b.Loop() {
		r, _ := produce(idem, false)
		idemRates = append(idemRates, r)
		r, n := produce(txn, true)
		txnRates = append(txnRates, r)
		commits += n
	}
	median := func(rs []float64) float64 {
		s := slices.Clone(rs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	b.ReportMetric(median(idemRates), "idem-MB/s")
	b.ReportMetric(median(txnRates), "txn-MB/s")
	b.ReportMetric(median(txnRates)/median(idemRates), "txn/idem")
	b.ReportMetric(float64(commits)/float64(len(txnRates)), "commits/iter")
	b.Logf("idempotent MB/s %.1f, transactional MB/s %.1f", idemRates, txnRates)
}
