package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestExactlyOnceAcrossKillNine runs franz-go's GroupTransactSession
// consume-transform-produce loop (read input, write one output record per
// input record, commit the input offsets in the same transaction) while
// the broker is killed with SIGKILL twice and restarted on the same port.
// The output topic read with read_committed must hold each input record
// exactly once.
func TestExactlyOnceAcrossKillNine(t *testing.T) {
	dir := t.TempDir()
	ctx := deadlineCtx(t, 150*time.Second)
	flags := []string{"--group-initial-rebalance-delay", "0s", "--group-min-session-timeout", "500ms"}
	b := startServe(t, dir, flags...)
	addr := b.Kafka
	flags = append(flags, "--kafka-addr", addr) // restarts keep the port
	adm := kadm.NewClient(procClient(t, addr))
	for _, topic := range []string{"eos-in", "eos-out"} {
		if r, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil || r.Err != nil {
			t.Fatal(err, r.Err)
		}
	}
	const n = 1500
	prod := procClient(t, addr, kgo.DefaultProduceTopic("eos-in"))
	for i := 0; i < n; i++ {
		prod.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("v%04d", i))}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(addr),
		kgo.TransactionalID("eos-loop"),
		kgo.TransactionTimeout(10*time.Second),
		kgo.ConsumerGroup("eos-group"),
		kgo.ConsumeTopics("eos-in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(3*time.Second),
		kgo.HeartbeatInterval(300*time.Millisecond),
		kgo.RetryTimeout(60*time.Second),
		kgo.DefaultProduceTopic("eos-out"),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	var mu sync.Mutex
	commits, aborts := 0, 0
	var inTxn atomic.Bool // between Begin and the end of End
	loopCtx, stop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for loopCtx.Err() == nil {
			fs := sess.PollRecords(loopCtx, 25)
			if loopCtx.Err() != nil {
				return
			}
			if err := sess.Begin(); err != nil {
				t.Errorf("begin: %v", err)
				return
			}
			inTxn.Store(true)
			fs.EachRecord(func(r *kgo.Record) {
				sess.Produce(loopCtx, &kgo.Record{Key: r.Key, Value: append([]byte("out-"), r.Value...)}, nil)
			})
			// Keep each transaction open a little, so the kills land
			// inside transactions as well as between them.
			time.Sleep(20 * time.Millisecond)
			committed, err := sess.End(loopCtx, kgo.TryCommit)
			inTxn.Store(false)
			mu.Lock()
			if committed {
				commits++
			} else {
				aborts++
			}
			mu.Unlock()
			if err != nil && loopCtx.Err() == nil {
				t.Logf("transaction not committed (it is retried): %v", err)
			}
		}
	}()

	reader := func() *kgo.Client {
		return procClient(t, addr, kgo.ConsumeTopics("eos-out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	// countOut reads the committed output once through and counts
	// values: a read_committed consumer gets everything below the LSO at
	// once, so the first poll that brings nothing new ends the read.
	countOut := func() map[string]int {
		cl := reader()
		defer cl.Close()
		seen := map[string]int{}
		for ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			fs := cl.PollFetches(pctx)
			cancel()
			if fs.NumRecords() == 0 {
				break
			}
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		}
		return seen
	}
	// Kill after the loop committed some transactions, while it is
	// inside one (between Begin and End).
	committedSoFar := func() int {
		mu.Lock()
		defer mu.Unlock()
		return commits
	}
	for _, at := range []int{15, 35} {
		for ctx.Err() == nil && (committedSoFar() < at || !inTxn.Load()) {
			time.Sleep(time.Millisecond)
		}
		t.Logf("SIGKILL after %d committed transactions, one open: %v", committedSoFar(), inTxn.Load())
		b.kill()
		b = startServe(t, dir, flags...)
	}
	for ctx.Err() == nil {
		if seen := countOut(); len(seen) >= n {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	<-loopDone
	// A read cut short by a slow poll counts fewer; a full one decides.
	seen := countOut()
	for i := 0; i < 5 && len(seen) < n; i++ {
		seen = countOut()
	}
	mu.Lock()
	t.Logf("%d transactions committed, %d not committed, across two SIGKILLs", commits, aborts)
	mu.Unlock()
	if len(seen) != n {
		t.Fatalf("read_committed output holds %d distinct records, want %d", len(seen), n)
	}
	var dups []string
	for v, c := range seen {
		if c != 1 {
			dups = append(dups, fmt.Sprintf("%s×%d", v, c))
		}
	}
	if len(dups) > 0 {
		t.Fatalf("records in the committed output more than once: %v", dups)
	}
	for i := 0; i < n; i++ {
		if v := fmt.Sprintf("out-v%04d", i); seen[v] != 1 {
			t.Fatalf("%s missing", v)
		}
	}
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("ran out of time")
	}
}
