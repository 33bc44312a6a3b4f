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

	"github.com/ringlog/ringlog/internal/testenv"
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

	newSession := transactSessions(t, []string{addr}, "eos", 3*time.Second)
	loop := startTransactLoop(t, ctx, newSession, 25, false)

	// countOut reads the committed output once through and counts values.
	countOut := func() map[string]int { return readAllValues(ctx, t, []string{addr}, "eos-out", kgo.ReadCommitted()) }
	// Kill after the loop committed some transactions, while it is
	// inside one (between Begin and End).
	for _, at := range []int{15, 35} {
		loop.waitInside(ctx, at)
		t.Logf("SIGKILL after %d committed transactions, one open: %v", loop.committed(), loop.inTxn.Load())
		b.kill()
		b = startServe(t, dir, flags...)
	}
	eventually(ctx, func() bool { return len(countOut()) >= n })
	loop.halt()
	// A read cut short by a slow poll counts fewer; a full one decides.
	seen := countOut()
	for i := 0; i < 5 && len(seen) < n; i++ {
		seen = countOut()
	}
	t.Logf("%v, across two SIGKILLs", loop)
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

// transactSessions makes the GroupTransactSessions of a loop named
// prefix: transactional id prefix-loop, group prefix-group, reading
// prefix-in with read_committed from the start, writing prefix-out.
func transactSessions(t *testing.T, seeds []string, prefix string, sessionTimeout time.Duration) func() *kgo.GroupTransactSession {
	return func() *kgo.GroupTransactSession {
		sess, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(seeds...),
			kgo.TransactionalID(prefix+"-loop"),
			kgo.TransactionTimeout(10*time.Second),
			kgo.ConsumerGroup(prefix+"-group"),
			kgo.ConsumeTopics(prefix+"-in"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.SessionTimeout(sessionTimeout),
			kgo.HeartbeatInterval(300*time.Millisecond),
			kgo.RetryTimeout(60*time.Second),
			kgo.DefaultProduceTopic(prefix+"-out"),
		)
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
}

// transactLoop is a franz-go GroupTransactSession consume-transform-
// produce loop: each transaction reads up to perTxn input records and
// writes "out-"+value for each, kept open 20 ms so that kills land inside
// transactions as well as between them.
type transactLoop struct {
	mu                        sync.Mutex
	commits, aborts, restarts int
	inTxn                     atomic.Bool // between Begin and the end of End
	stop                      context.CancelFunc
	done                      chan struct{}
}

// startTransactLoop runs the loop on sessions from newSession until halt.
// With restart, a session whose Begin fails for good is replaced by a new
// one (an application restarting its loop); without, that fails the test.
func startTransactLoop(t *testing.T, ctx context.Context, newSession func() *kgo.GroupTransactSession, perTxn int, restart bool) *transactLoop {
	loopCtx, stop := context.WithCancel(ctx)
	l := &transactLoop{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sess := newSession()
		defer func() { sess.Close() }()
		for loopCtx.Err() == nil {
			fs := sess.PollRecords(loopCtx, perTxn)
			if loopCtx.Err() != nil {
				return
			}
			if err := sess.Begin(); err != nil {
				if !restart {
					t.Errorf("begin: %v", err)
					return
				}
				t.Logf("begin failed, restarting the session: %v", err)
				sess.Close()
				sess = newSession()
				l.mu.Lock()
				l.restarts++
				l.mu.Unlock()
				continue
			}
			l.inTxn.Store(true)
			fs.EachRecord(func(r *kgo.Record) {
				sess.Produce(loopCtx, &kgo.Record{Key: r.Key, Value: append([]byte("out-"), r.Value...)}, nil)
			})
			time.Sleep(20 * time.Millisecond)
			committed, err := sess.End(loopCtx, kgo.TryCommit)
			l.inTxn.Store(false)
			l.mu.Lock()
			if committed {
				l.commits++
			} else {
				l.aborts++
			}
			l.mu.Unlock()
			if err != nil && loopCtx.Err() == nil {
				t.Logf("transaction not committed (it is retried): %v", err)
			}
		}
	}()
	return l
}

// committed counts the transactions committed so far.
func (l *transactLoop) committed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.commits
}

// waitInside waits until at least n transactions committed and one is
// open.
func (l *transactLoop) waitInside(ctx context.Context, n int) {
	testenv.Until(ctx, func() bool { return l.committed() >= n && l.inTxn.Load() })
}

// halt stops the loop and waits for it.
func (l *transactLoop) halt() {
	l.stop()
	<-l.done
}

// String sums the loop up for a log line.
func (l *transactLoop) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d transactions committed, %d not committed, %d session restarts", l.commits, l.aborts, l.restarts)
}
