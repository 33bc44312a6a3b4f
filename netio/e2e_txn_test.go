package netio_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// txnProduce runs one transaction of values on topic with cl and ends it.
func txnProduce(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, commit bool, values ...string) {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %q: %v", v, err)
		}
	}
	end := kgo.TryAbort
	if commit {
		end = kgo.TryCommit
	}
	if err := cl.EndTransaction(ctx, end); err != nil {
		t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}

func values(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

// pollUntil consumes with cl until it has n records or the context ends,
// then returns what it has.
func pollUntil(ctx context.Context, cl *kgo.Client, n int) []*kgo.Record {
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// TestE2ETransactionsCommitAndAbort: franz-go's transactional producer
// commits one transaction and aborts another; a read_committed consumer
// sees only the committed records, a read_uncommitted one sees all of
// them, and both skip the markers.
func TestE2ETransactionsCommitAndAbort(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 30*time.Second)
	const topic = "txn-basic"
	b.e2eCreate(ctx, topic, 1, nil)
	prod := b.client(kgo.TransactionalID("txn-basic-producer"), kgo.TransactionTimeout(10*time.Second))
	txnProduce(t, ctx, prod, topic, true, "c1", "c2")
	txnProduce(t, ctx, prod, topic, false, "a1", "a2", "a3")
	txnProduce(t, ctx, prod, topic, true, "c3")

	committed := b.e2eConsume(ctx, topic, 3, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if got := fmt.Sprint(values(committed)); got != "[c1 c2 c3]" {
		t.Fatalf("read_committed got %s", got)
	}
	all := b.e2eConsume(ctx, topic, 6)
	if got := fmt.Sprint(values(all)); got != "[c1 c2 a1 a2 a3 c3]" {
		t.Fatalf("read_uncommitted got %s", got)
	}
	// Three data transactions, three markers: offsets 0..8.
	p := b.e2ePart(topic, 0)
	if hw, lso := p.HighWatermark(), p.LastStableOffset(); hw != 9 || lso != 9 {
		t.Fatalf("high watermark %d, last stable offset %d; want 9 and 9", hw, lso)
	}
	if ab := p.AbortedTxns(nil, 0, 100); len(ab) != 1 || ab[0].FirstOffset != 3 || ab[0].LastOffset != 6 {
		t.Fatalf("aborted index %+v, want one transaction 3..6", ab)
	}

	// An open transaction holds the LSO back: read_committed consumers
	// stop before it until it ends.
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if lso := p.LastStableOffset(); lso != 9 {
		t.Fatalf("LSO %d with a transaction open at 9", lso)
	}
	// ListOffsets honours the isolation level: latest is the LSO for
	// read_committed, the high watermark for read_uncommitted.
	adm := b.e2eAdmin()
	stable, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if so, _ := stable.Lookup(topic, 0); so.Offset != 9 {
		t.Fatalf("read_committed latest offset %d, want the LSO 9", so.Offset)
	}
	if eo, _ := ends.Lookup(topic, 0); eo.Offset != 10 {
		t.Fatalf("read_uncommitted latest offset %d, want the high watermark 10", eo.Offset)
	}
	rc := b.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	short, cancel := context.WithTimeout(ctx, time.Second)
	got := pollUntil(short, rc, 4)
	cancel()
	if len(got) != 3 {
		t.Fatalf("read_committed read %v past an open transaction", values(got))
	}
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	got = append(got, pollUntil(ctx, rc, 1)...)
	if fmt.Sprint(values(got)) != "[c1 c2 c3 open]" {
		t.Fatalf("after the commit read_committed got %v", values(got))
	}
	if stable, err = adm.ListCommittedOffsets(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if so, _ := stable.Lookup(topic, 0); so.Offset != p.HighWatermark() {
		t.Fatalf("read_committed latest offset %d after the commit, want %d", so.Offset, p.HighWatermark())
	}
}

// TestE2ETransactionsSurviveRestart: an open transaction, a committed
// one and an aborted one come back after a restart: the LSO stays at the
// open transaction, the aborted index is rebuilt, and the producer's
// commit after the restart makes its records visible.
func TestE2ETransactionsSurviveRestart(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 30*time.Second)
	const topic = "txn-restart"
	b.e2eCreate(ctx, topic, 1, nil)
	prod := b.client(kgo.TransactionalID("txn-restart-producer"))
	txnProduce(t, ctx, prod, topic, false, "a1")
	txnProduce(t, ctx, prod, topic, true, "c1")
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("c2")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	b.Config.Kafka.Addr = b.Addr // the producer reconnects to the same port
	b.restart()
	p := b.e2ePart(topic, 0)
	if lso := p.LastStableOffset(); lso != 4 {
		t.Fatalf("LSO after restart %d, want 4 (the open transaction)", lso)
	}
	if ab := p.AbortedTxns(nil, 0, 100); len(ab) != 1 || ab[0].FirstOffset != 0 {
		t.Fatalf("aborted index after restart %+v", ab)
	}
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	got := b.e2eConsume(ctx, topic, 2, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if fmt.Sprint(values(got)) != "[c1 c2]" {
		t.Fatalf("read_committed after restart got %v", values(got))
	}
}

// TestE2ETransactionZombieFenced: two producers with one transactional
// id; the second's InitProducerId fences the first, whose open
// transaction is aborted and whose later writes fail and stay invisible.
func TestE2ETransactionZombieFenced(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 30*time.Second)
	const topic = "txn-zombie"
	b.e2eCreate(ctx, topic, 1, nil)
	old := b.client(kgo.TransactionalID("shared-id"), kgo.RecordRetries(2))
	if err := old.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := old.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("zombie-before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fresh := b.client(kgo.TransactionalID("shared-id"))
	txnProduce(t, ctx, fresh, topic, true, "fresh")
	// The zombie goes on: its produce and its commit must fail.
	err := old.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("zombie-after")}).FirstErr()
	if err == nil {
		err = old.EndTransaction(ctx, kgo.TryCommit)
	}
	if err == nil {
		t.Fatal("the fenced producer wrote and committed")
	}
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) && !errors.Is(err, kerr.InvalidTxnState) {
		t.Logf("zombie error: %v", err)
	}
	got := b.e2eConsume(ctx, topic, 1, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	rc := b.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	all := pollUntil(short, rc, 2)
	if fmt.Sprint(values(got)) != "[fresh]" || len(all) != 1 {
		t.Fatalf("read_committed sees %v / %v, want only the fresh producer's record", values(got), values(all))
	}
	if n := b.Eng.Transactions().Fenced.Load(); n == 0 {
		t.Fatal("no fencing counted")
	}
}

// TestE2EDescribeProducers: kadm's DescribeProducers (what
// kafka-transactions.sh find-hanging reads) shows an open transaction's
// producer with its first offset, and no open transaction once it
// committed.
func TestE2EDescribeProducers(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 30*time.Second)
	const topic = "txn-producers"
	b.e2eCreate(ctx, topic, 1, nil)
	if err := b.client().ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("plain")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl := b.client(kgo.TransactionalID("described"))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("in-txn")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(b.client())
	describe := func() []kadm.DescribedProducer {
		t.Helper()
		d, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}}})
		if err != nil {
			t.Fatal(err)
		}
		p, ok := d[topic].Partitions[0]
		if !ok || p.Err != nil {
			t.Fatalf("DescribeProducers: %+v", d)
		}
		return p.ActiveProducers.Sorted()
	}
	pid, _, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var txn *kadm.DescribedProducer
	got := describe()
	for i := range got {
		if got[i].ProducerID == pid {
			txn = &got[i]
		}
	}
	if txn == nil || txn.CurrentTxnStartOffset != 1 || txn.LastSequence != 0 || txn.LastTimestamp <= 0 {
		t.Fatalf("the transactional producer %d: %+v (all: %+v); want its transaction open at offset 1", pid, txn, got)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	for _, p := range describe() {
		if p.CurrentTxnStartOffset != -1 {
			t.Fatalf("after the commit: %+v", p)
		}
	}
}
