package client_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ringlog/ringlog/client"
	"github.com/ringlog/ringlog/internal/testenv"
)

func newConsumer(t testing.TB, addr, group string, tps []client.TopicPartition, opts ...client.ConsumerOption) *client.Consumer {
	t.Helper()
	c, err := client.NewConsumer(addr, group, tps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// produceN appends n records "<prefix>-<i>" to one partition.
func produceN(t testing.TB, addr, topic string, partition int32, prefix string, n int) {
	t.Helper()
	recs := make([]client.Record, n)
	for i := range recs {
		recs[i] = client.Record{Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}
	}
	withConn(t, addr, func(ctx context.Context, c *client.Conn) {
		if _, _, err := c.Produce(ctx, topic, partition, recs); err != nil {
			t.Fatal(err)
		}
	})
}

func committed(t testing.TB, addr, group, topic string, partition int32) int64 {
	t.Helper()
	var off int64
	withConn(t, addr, func(ctx context.Context, c *client.Conn) {
		var err error
		if off, err = c.FetchOffset(ctx, group, topic, partition); err != nil {
			t.Fatal(err)
		}
	})
	return off
}

// pollN polls until it has n records.
func pollN(t testing.TB, c *client.Consumer, n int) []client.Record {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	var out []client.Record
	for len(out) < n {
		recs, err := c.Poll(ctx)
		if err != nil {
			t.Fatalf("poll after %d records: %v", len(out), err)
		}
		out = append(out, recs...)
	}
	return out
}

// A new consumer of the group resumes at the committed offset.
func TestConsumerResumesFromCommitted(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b.Addr, "resume", 1)
	produceN(t, b.Addr, "resume", 0, "r", 10)
	tps := []client.TopicPartition{{Topic: "resume", Partition: 0}}

	c1 := newConsumer(t, b.Addr, "g", tps)
	if pos, err := c1.Position(testCtx(t, 5*time.Second), tps[0]); err != nil || pos != 0 {
		t.Fatalf("first position %d %v", pos, err)
	}
	recs := pollN(t, c1, 10)
	for i, r := range recs {
		if r.Offset != int64(i) || string(r.Value) != fmt.Sprintf("r-%d", i) || r.Topic != "resume" || r.Partition != 0 {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	c1.MarkHandled(recs[:5]...)
	if err := c1.Commit(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if off := committed(t, b.Addr, "g", "resume", 0); off != 5 {
		t.Fatalf("committed %d, want 5", off)
	}
	c1.MarkHandled(recs[5]) // handled, committed by Close
	if err := c1.Close(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Poll(testCtx(t, time.Second)); !errors.Is(err, client.ErrConsumerClosed) {
		t.Fatalf("poll after close: %v", err)
	}

	c2 := newConsumer(t, b.Addr, "g", tps)
	if pos, err := c2.Position(testCtx(t, 5*time.Second), tps[0]); err != nil || pos != 6 {
		t.Fatalf("resumed position %d %v", pos, err)
	}
	recs = pollN(t, c2, 4)
	if recs[0].Offset != 6 || len(recs) != 4 {
		t.Fatalf("restarted consumer got %d records from offset %d, want 4 from 6", len(recs), recs[0].Offset)
	}
	// Another group starts at the beginning.
	c3 := newConsumer(t, b.Addr, "other", tps)
	if recs = pollN(t, c3, 1); recs[0].Offset != 0 {
		t.Fatalf("new group starts at %d", recs[0].Offset)
	}
}

// Run commits a record only after its handler succeeded: a failed record
// is received again, by the same consumer and by the group's next one.
func TestConsumerRunCommitAfterHandle(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b.Addr, "work", 1)
	produceN(t, b.Addr, "work", 0, "w", 10)
	tps := []client.TopicPartition{{Topic: "work", Partition: 0}}
	ctx := testCtx(t, 10*time.Second)

	c1 := newConsumer(t, b.Addr, "workers", tps, client.WithCommitInterval(time.Hour))
	var seen []int64
	boom := errors.New("payment timeout")
	err := c1.Run(ctx, func(_ context.Context, r client.Record) error {
		seen = append(seen, r.Offset)
		if r.Offset == 6 {
			return boom
		}
		return nil
	})
	var he *client.HandlerError
	if !errors.As(err, &he) || !errors.Is(err, boom) || he.Record.Offset != 6 {
		t.Fatalf("run: %v", err)
	}
	if len(seen) != 7 {
		t.Fatalf("handled %v", seen)
	}
	// Committed up to the failed record, not past it, even with an hour
	// of commit interval.
	if off := committed(t, b.Addr, "workers", "work", 0); off != 6 {
		t.Fatalf("committed %d, want 6", off)
	}
	// The same consumer receives the failed record again.
	if recs := pollN(t, c1, 1); recs[0].Offset != 6 {
		t.Fatalf("after the failure the consumer polls from %d", recs[0].Offset)
	}
	if err := c1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The next consumer of the group starts at the failed record and
	// handles the rest; Run commits every record (interval 0).
	c2 := newConsumer(t, b.Addr, "workers", tps, client.WithCommitInterval(0))
	runCtx, cancel := context.WithCancel(ctx)
	seen = nil
	err = c2.Run(runCtx, func(_ context.Context, r client.Record) error {
		seen = append(seen, r.Offset)
		if r.Offset == 9 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	if fmt.Sprint(seen) != "[6 7 8 9]" {
		t.Fatalf("second consumer handled %v", seen)
	}
	if off := committed(t, b.Addr, "workers", "work", 0); off != 10 {
		t.Fatalf("committed %d, want 10", off)
	}
}

// With a commit interval, Run commits while idle too, not only when more
// records arrive.
func TestConsumerRunCommitInterval(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b.Addr, "tick", 1)
	produceN(t, b.Addr, "tick", 0, "t", 3)
	c := newConsumer(t, b.Addr, "ticker", []client.TopicPartition{{Topic: "tick", Partition: 0}},
		client.WithCommitInterval(50*time.Millisecond))
	ctx, cancel := context.WithCancel(testCtx(t, 10*time.Second))
	done := make(chan error, 1)
	handled := make(chan struct{}, 3)
	go func() {
		done <- c.Run(ctx, func(context.Context, client.Record) error { handled <- struct{}{}; return nil })
	}()
	for i := 0; i < 3; i++ {
		<-handled
	}
	testenv.WaitFor(t, 5*time.Second, "the idle consumer to commit", func() bool { return committed(t, b.Addr, "ticker", "tick", 0) == 3 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// An idle consumer backs off: few FETCH requests over 300 ms, and data
// that arrives is still picked up promptly.
func TestConsumerIdleDoesNotBusyLoop(t *testing.T) {
	b := startBroker(t)
	px := startProxy(t, b.Addr)
	createTopic(t, b.Addr, "idle", 1)
	c := newConsumer(t, px.Addr(), "idlers", []client.TopicPartition{{Topic: "idle", Partition: 0}})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	recs, err := c.Poll(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || recs != nil {
		t.Fatalf("idle poll: %v %v", recs, err)
	}
	// 1+2+4+...+128 ms = 255 ms: about 9 fetches; a busy loop does
	// thousands.
	fetches := px.count(apiFetch, "idle")
	if fetches > 15 {
		t.Fatalf("%d FETCH requests in 300 ms of idleness", fetches)
	}
	t.Logf("%d fetches in 300 ms idle", fetches)

	// At the longest backoff (200 ms), a record arrives within one sleep.
	got := make(chan []client.Record, 1)
	go func() {
		recs, err := c.Poll(testCtx(t, 5*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- recs
	}()
	waitFetch(t, px, "idle", fetches) // the poll is under way, found nothing
	start := time.Now()
	produceN(t, b.Addr, "idle", 0, "late", 1)
	recs = <-got
	if len(recs) != 1 || string(recs[0].Value) != "late-0" {
		t.Fatalf("got %v", recs)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("picked up after %v", d)
	}
}

// waitFetch waits until the proxy has forwarded more than n FETCH requests
// for topic: a Poll started after n were counted is under way.
func waitFetch(t testing.TB, px *proxy, topic string, n int) {
	t.Helper()
	if !testenv.Eventually(5*time.Second, func() bool { return px.count(apiFetch, topic) > n }) {
		t.Fatalf("no FETCH for %s within 5s: Poll did not start", topic)
	}
}

// Poll takes turns among the assigned partitions.
func TestConsumerRoundRobin(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b.Addr, "rr2", 2)
	produceN(t, b.Addr, "rr2", 0, "a", 3)
	produceN(t, b.Addr, "rr2", 1, "b", 3)
	// maxBytes 1: one record per fetch.
	c := newConsumer(t, b.Addr, "g", []client.TopicPartition{{Topic: "rr2", Partition: 0}, {Topic: "rr2", Partition: 1}},
		client.WithFetchMaxBytes(1))
	var order []string
	for _, r := range pollN(t, c, 6) {
		order = append(order, string(r.Value))
	}
	if fmt.Sprint(order) != "[a-0 b-0 a-1 b-1 a-2 b-2]" {
		t.Fatalf("poll order %v", order)
	}
}

// StartLatest skips what is already in the partition (found by probing),
// for several log sizes, including an empty log and a missing topic.
func TestConsumerStartLatest(t *testing.T) {
	b := startBroker(t)
	sizes := []int{0, 1, 2, 3, 37, 64, 100}
	createTopic(t, b.Addr, "latest", int32(len(sizes)))
	var tps []client.TopicPartition
	for i, n := range sizes {
		if n > 0 {
			produceN(t, b.Addr, "latest", int32(i), "old", n)
		}
		tps = append(tps, client.TopicPartition{Topic: "latest", Partition: int32(i)})
	}
	tps = append(tps, client.TopicPartition{Topic: "not-yet", Partition: 0})
	c := newConsumer(t, b.Addr, "tail", tps, client.WithStartAt(client.StartLatest), client.WithIdleBackoff(time.Millisecond, 5*time.Millisecond))
	for i, tp := range tps {
		want := int64(0)
		if i < len(sizes) {
			want = int64(sizes[i])
		}
		if pos, err := c.Position(testCtx(t, 5*time.Second), tp); err != nil || pos != want {
			t.Fatalf("%s/%d: position %d %v, want the end %d", tp.Topic, tp.Partition, pos, err, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if recs, err := c.Poll(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("latest consumer got %v %v", recs, err)
	}
	for i := range sizes {
		produceN(t, b.Addr, "latest", int32(i), "new", 1)
	}
	produceN(t, b.Addr, "not-yet", 0, "new", 1)
	got := pollN(t, c, len(sizes)+1)
	if len(got) != len(sizes)+1 {
		t.Fatalf("got %d records", len(got))
	}
	for _, r := range got {
		want := int64(0)
		if r.Topic == "latest" {
			want = int64(sizes[r.Partition])
		}
		if string(r.Value) != "new-0" || r.Offset != want {
			t.Fatalf("%s/%d: %q at %d, want new-0 at %d", r.Topic, r.Partition, r.Value, r.Offset, want)
		}
	}
}

// Close interrupts a blocked Poll, commits, and leaves no goroutine.
func TestConsumerCloseInterruptsPollWithoutLeaks(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b.Addr, "quiet", 1)
	produceN(t, b.Addr, "quiet", 0, "q", 2)
	px := startProxy(t, b.Addr)
	before := runtime.NumGoroutine()
	c, err := client.NewConsumer(px.Addr(), "closers", []client.TopicPartition{{Topic: "quiet", Partition: 0}})
	if err != nil {
		t.Fatal(err)
	}
	recs := pollN(t, c, 2)
	c.MarkHandled(recs...)
	fetches := px.count(apiFetch, "quiet")
	polled := make(chan error, 1)
	go func() {
		_, err := c.Poll(context.Background())
		polled <- err
	}()
	waitFetch(t, px, "quiet", fetches) // Close must interrupt a Poll under way
	if err := c.Close(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-polled; !errors.Is(err, client.ErrConsumerClosed) {
		t.Fatalf("interrupted poll: %v", err)
	}
	if off := committed(t, b.Addr, "closers", "quiet", 0); off != 2 {
		t.Fatalf("Close committed %d, want 2", off)
	}
	if err := c.Commit(context.Background()); !errors.Is(err, client.ErrConsumerClosed) {
		t.Fatalf("commit after close: %v", err)
	}
	checkNoLeak(t, before)
}

// The broker going away is retried: Poll reconnects.
func TestConsumerReconnects(t *testing.T) {
	b := startBroker(t)
	px := startProxy(t, b.Addr)
	createTopic(t, b.Addr, "flaky", 1)
	produceN(t, b.Addr, "flaky", 0, "f", 1)
	c := newConsumer(t, px.Addr(), "g", []client.TopicPartition{{Topic: "flaky", Partition: 0}})
	pollN(t, c, 1)
	px.cut()
	produceN(t, b.Addr, "flaky", 0, "g", 1)
	if recs := pollN(t, c, 1); string(recs[0].Value) != "g-0" {
		t.Fatalf("after reconnect: %v", recs)
	}
}
