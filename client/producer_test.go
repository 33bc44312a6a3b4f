package client_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/client"
	"github.com/ringlog/ringlog/internal/keyhash"
)

func newProducer(t testing.TB, addr string, opts ...client.ProducerOption) *client.Producer {
	t.Helper()
	p, err := client.NewProducer(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Close(ctx)
	})
	return p
}

// results collects Send callbacks in order of the records' indexes.
type results struct {
	mu  sync.Mutex
	res []client.Result
	got []bool
}

func newResults(n int) *results {
	return &results{res: make([]client.Result, n), got: make([]bool, n)}
}

func (r *results) cb(i int) func(client.Result) {
	return func(res client.Result) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.got[i] {
			panic(fmt.Sprintf("record %d completed twice", i))
		}
		r.res[i], r.got[i] = res, true
	}
}

func (r *results) check(t testing.TB) []client.Result {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, ok := range r.got {
		if !ok {
			t.Fatalf("record %d has no result after Flush", i)
		}
		if r.res[i].Err != nil {
			t.Fatalf("record %d: %v", i, r.res[i].Err)
		}
	}
	return r.res
}

// Many sends to one partition: few PRODUCE requests, offsets contiguous in
// send order, values where the results say.
func TestProducerBatching(t *testing.T) {
	b := startBroker(t)
	px := startProxy(t, b.Addr)
	createTopic(t, b.Addr, "batch", 1)
	ctx := testCtx(t, 20*time.Second)

	p := newProducer(t, px.Addr(), client.WithLinger(100*time.Millisecond))
	const n = 1000
	rs := newResults(n)
	for i := 0; i < n; i++ {
		if err := p.Send(ctx, client.Record{Topic: "batch", Value: []byte(fmt.Sprintf("v%04d", i))}, rs.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	res := rs.check(t)
	for i, r := range res {
		if r.Topic != "batch" || r.Partition != 0 || r.Offset != int64(i) {
			t.Fatalf("record %d: %+v, want offset %d", i, r, i)
		}
	}
	reqs := px.count(apiProduce, "batch")
	if reqs < 1 || reqs > 5 {
		t.Fatalf("%d records took %d PRODUCE requests", n, reqs)
	}
	got := fetchAll(t, b.Addr, "batch", 0)
	if len(got) != n {
		t.Fatalf("fetched %d records", len(got))
	}
	for i, r := range got {
		if string(r.Value) != fmt.Sprintf("v%04d", i) {
			t.Fatalf("offset %d holds %q", i, r.Value)
		}
	}
	t.Logf("%d records in %d requests", n, reqs)

	// Batch limits: at most 100 records (or 2 KiB) per request.
	px.reset()
	p2 := newProducer(t, px.Addr(), client.WithLinger(time.Second), client.WithBatchRecords(100), client.WithBatchBytes(2048))
	rs = newResults(n)
	for i := 0; i < n; i++ {
		if err := p2.Send(ctx, client.Record{Topic: "batch", Value: []byte("0123456789")}, rs.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	res = rs.check(t)
	for i, r := range res {
		if r.Offset != int64(n+i) {
			t.Fatalf("second run record %d at offset %d", i, r.Offset)
		}
	}
	// 1000 records of 18 bytes: 2048/18 = 113 > 100, so exactly 10 full
	// batches (the linger never expires before a batch fills).
	if reqs := px.count(apiProduce, "batch"); reqs != 10 {
		t.Fatalf("batches of 100: %d requests", reqs)
	}
}

// Keys go where Kafka's default partitioner (murmur2) sends them, whether
// the producer knows the partition count or lets the broker pick.
func TestProducerKeyedPartitioning(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b.Addr, "keyed", 5)
	ctx := testCtx(t, 20*time.Second)
	kafka := kgo.StickyKeyPartitioner(nil).ForTopic("keyed")

	known := newProducer(t, b.Addr, client.WithTopicPartitions("keyed", 5))
	unknown := newProducer(t, b.Addr, client.WithLinger(20*time.Millisecond))
	const n = 200
	rk, ru := newResults(n), newResults(n)
	for i := 0; i < n; i++ {
		key := []byte(fmt.Sprintf("order-%d", i%50)) // each key 4 times
		rec := client.Record{Topic: "keyed", Key: key, Value: []byte(fmt.Sprint(i))}
		if err := known.Send(ctx, rec, rk.cb(i)); err != nil {
			t.Fatal(err)
		}
		if err := unknown.Send(ctx, rec, ru.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := known.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := unknown.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	resK, resU := rk.check(t), ru.check(t)
	used := map[int32]bool{}
	last := map[string]int64{} // per key and producer: offsets increase
	for i := 0; i < n; i++ {
		key := []byte(fmt.Sprintf("order-%d", i%50))
		want := keyhash.Partition(key, 5)
		if k := int32(kafka.Partition(&kgo.Record{Key: key}, 5)); k != want {
			t.Fatalf("key %s: keyhash %d, Kafka's partitioner %d", key, want, k)
		}
		if resK[i].Partition != want || resU[i].Partition != want {
			t.Fatalf("key %s: producer with count -> %d, broker-picked -> %d, want %d", key, resK[i].Partition, resU[i].Partition, want)
		}
		used[want] = true
		for j, r := range []client.Result{resK[i], resU[i]} {
			id := fmt.Sprintf("%d/%s", j, key)
			if prev, ok := last[id]; ok && r.Offset <= prev {
				t.Fatalf("key %s went out of order: offset %d after %d", key, r.Offset, prev)
			}
			last[id] = r.Offset
		}
	}
	if len(used) != 5 {
		t.Fatalf("50 keys used only partitions %v", used)
	}
	// The records are where the results say.
	total := 0
	for part := int32(0); part < 5; part++ {
		for _, r := range fetchAll(t, b.Addr, "keyed", part) {
			if keyhash.Partition(r.Key, 5) != part {
				t.Fatalf("key %s in partition %d", r.Key, part)
			}
			total++
		}
	}
	if total != 2*n {
		t.Fatalf("%d records in the topic, want %d", total, 2*n)
	}
}

// Null keys with a known count: strict round-robin, record by record.
func TestProducerNullKeyRoundRobin(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b.Addr, "rr", 4)
	ctx := testCtx(t, 20*time.Second)
	p := newProducer(t, b.Addr, client.WithTopicPartitions("rr", 4))
	const n = 40
	rs := newResults(n)
	for i := 0; i < n; i++ {
		if err := p.Send(ctx, client.Record{Topic: "rr", Value: []byte(fmt.Sprint(i))}, rs.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs.check(t) {
		if r.Partition != int32(i%4) || r.Offset != int64(i/4) {
			t.Fatalf("record %d at %d/%d, want %d/%d", i, r.Partition, r.Offset, i%4, i/4)
		}
	}
	for part := int32(0); part < 4; part++ {
		got := fetchAll(t, b.Addr, "rr", part)
		if len(got) != n/4 {
			t.Fatalf("partition %d has %d records", part, len(got))
		}
		for j, r := range got {
			if string(r.Value) != fmt.Sprint(j*4+int(part)) {
				t.Fatalf("partition %d offset %d holds %q", part, j, r.Value)
			}
		}
	}
}

// SendSync and ToPartition: the result's offset is the record's.
func TestProducerSendSyncExplicitPartition(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b.Addr, "explicit", 3)
	ctx := testCtx(t, 10*time.Second)
	// A long linger: SendSync must not wait for it.
	p := newProducer(t, b.Addr, client.WithLinger(time.Hour))
	for i := 0; i < 3; i++ {
		start := time.Now()
		// Record.Partition is ignored; ToPartition decides.
		res, err := p.SendSync(ctx, client.Record{Topic: "explicit", Partition: 0, Key: []byte("k"), Value: []byte(fmt.Sprint(i))}, client.ToPartition(2))
		if err != nil || res.Partition != 2 || res.Offset != int64(i) || res.Topic != "explicit" {
			t.Fatalf("send %d: %+v %v", i, res, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("SendSync took %v", d)
		}
	}
	got := fetchAll(t, b.Addr, "explicit", 2)
	if len(got) != 3 || string(got[2].Value) != "2" {
		t.Fatalf("partition 2: %v", got)
	}
	if _, err := p.SendSync(ctx, client.Record{Value: []byte("x")}); !errors.Is(err, client.ErrNoTopic) {
		t.Fatalf("no topic: %v", err)
	}
}

// Non-blocking mode: a record larger than the buffer, and a full buffer
// behind a paused broker, fail at once with ErrBufferFull.
func TestProducerBufferFullError(t *testing.T) {
	b := startBroker(t)
	px := startProxy(t, b.Addr)
	ctx := testCtx(t, 10*time.Second)
	p := newProducer(t, px.Addr(), client.WithBufferBytes(100), client.WithBlockWhenFull(false), client.WithLinger(0))

	err := p.Send(ctx, client.Record{Topic: "bp", Value: make([]byte, 200)}, nil)
	if !errors.Is(err, client.ErrBufferFull) || !errors.Is(err, client.ErrRecordTooLarge) {
		t.Fatalf("oversized record: %v", err)
	}
	px.pause(true)
	first := make(chan client.Result, 1)
	if err := p.Send(ctx, client.Record{Topic: "bp", Value: make([]byte, 60)}, func(r client.Result) { first <- r }); err != nil {
		t.Fatal(err)
	}
	// 68 of 100 bytes are held by the first record until the broker answers.
	if err := p.Send(ctx, client.Record{Topic: "bp", Value: make([]byte, 60)}, nil); !errors.Is(err, client.ErrBufferFull) {
		t.Fatalf("second record: %v", err)
	}
	if err := p.Send(ctx, client.Record{Topic: "bp", Value: make([]byte, 20)}, nil); err != nil {
		t.Fatalf("a record that fits: %v", err)
	}
	px.pause(false)
	if r := <-first; r.Err != nil || r.Offset != 0 {
		t.Fatalf("first: %+v", r)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendSync(ctx, client.Record{Topic: "bp", Value: make([]byte, 60)}); err != nil {
		t.Fatalf("after the broker answered: %v", err)
	}
}

// Blocking mode: Send waits for room (honoring its context), and goes on
// once the broker answers.
func TestProducerBufferFullBlocks(t *testing.T) {
	b := startBroker(t)
	px := startProxy(t, b.Addr)
	ctx := testCtx(t, 10*time.Second)
	p := newProducer(t, px.Addr(), client.WithBufferBytes(100), client.WithLinger(0))

	if err := p.Send(ctx, client.Record{Topic: "bp", Value: make([]byte, 200)}, nil); !errors.Is(err, client.ErrRecordTooLarge) {
		t.Fatalf("oversized record: %v", err)
	}
	px.pause(true)
	if err := p.Send(ctx, client.Record{Topic: "bp", Value: make([]byte, 60)}, nil); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.Send(short, client.Record{Topic: "bp", Value: make([]byte, 60)}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked send: %v", err)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Fatalf("Send returned after %v, did not block", d)
	}
	sent := make(chan error, 1)
	second := make(chan client.Result, 1)
	go func() {
		sent <- p.Send(ctx, client.Record{Topic: "bp", Value: make([]byte, 60)}, func(r client.Result) { second <- r })
	}()
	select {
	case err := <-sent:
		t.Fatalf("Send returned %v while the buffer is full", err)
	case <-time.After(100 * time.Millisecond):
	}
	px.pause(false)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if r := <-second; r.Err != nil || r.Offset != 1 {
		t.Fatalf("second: %+v", r)
	}
}

// A record to a partition that does not exist: retried, then written to
// the dead-letter topic as an envelope with the original topic and error.
func TestProducerRetriesThenDeadLetter(t *testing.T) {
	b := startBroker(t)
	px := startProxy(t, b.Addr)
	createTopic(t, b.Addr, "orders", 1)
	ctx := testCtx(t, 10*time.Second)
	p := newProducer(t, px.Addr(), client.WithRetries(3), client.WithRetryBackoff(time.Millisecond, 4*time.Millisecond),
		client.WithDeadLetterTopic("orders.dlq"))

	before := time.Now().Add(-time.Second)
	res, err := p.SendSync(ctx, client.Record{Topic: "orders", Key: []byte("order-42"), Value: []byte(`{"total":10}`)}, client.ToPartition(7))
	if !isCode(err, client.CodeUnknownTopic) || res.Offset != -1 || res.Partition != 7 {
		t.Fatalf("result %+v, err %v", res, err)
	}
	if res.DeadLetter == nil || res.DeadLetter.Err != nil || res.DeadLetter.Topic != "orders.dlq" || res.DeadLetter.Offset != 0 {
		t.Fatalf("dead letter result %+v", res.DeadLetter)
	}
	if n := px.count(apiProduce, "orders"); n != 4 {
		t.Fatalf("%d PRODUCE attempts to orders, want 1 + 3 retries", n)
	}
	got := fetchAll(t, b.Addr, "orders.dlq", 0)
	if len(got) != 1 || string(got[0].Key) != "order-42" {
		t.Fatalf("dead-letter topic holds %v", got)
	}
	d, err := client.ParseDeadLetter(got[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if d.Topic != "orders" || d.Partition != 7 || string(d.Key) != "order-42" || string(d.Value) != `{"total":10}` ||
		d.ErrorCode != client.CodeUnknownTopic || !strings.Contains(d.Error, "unknown topic") || d.Attempts != 4 ||
		d.FailedAt.Before(before) || d.FailedAt.After(time.Now()) {
		t.Fatalf("envelope %+v", d)
	}

	// A non-retriable error (an invalid topic name) is dead-lettered at
	// once; a null value stays null in the envelope.
	res, err = p.SendSync(ctx, client.Record{Topic: "bad name!", Value: nil})
	if !isCode(err, client.CodeInvalidTopic) || res.DeadLetter == nil || res.DeadLetter.Err != nil {
		t.Fatalf("invalid topic: %+v %v", res, err)
	}
	got = fetchAll(t, b.Addr, "orders.dlq", 0)
	if d, err = client.ParseDeadLetter(got[len(got)-1].Value); err != nil || d.Attempts != 1 || d.Topic != "bad name!" || d.Value != nil || d.Key != nil {
		t.Fatalf("envelope %+v %v", d, err)
	}
	if !strings.Contains(string(got[len(got)-1].Value), `"value":null`) {
		t.Fatalf("raw envelope %s", got[len(got)-1].Value)
	}

	// Without a dead-letter topic the error is the result.
	plain := newProducer(t, b.Addr, client.WithRetries(1), client.WithRetryBackoff(time.Millisecond, time.Millisecond))
	res, err = plain.SendSync(ctx, client.Record{Topic: "orders", Value: []byte("x")}, client.ToPartition(9))
	if !isCode(err, client.CodeUnknownTopic) || res.DeadLetter != nil {
		t.Fatalf("no dead-letter topic: %+v %v", res, err)
	}
}

// A dropped connection is a retriable error: the producer reconnects.
func TestProducerReconnects(t *testing.T) {
	b := startBroker(t)
	px := startProxy(t, b.Addr)
	ctx := testCtx(t, 10*time.Second)
	p := newProducer(t, px.Addr(), client.WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
	if _, err := p.SendSync(ctx, client.Record{Topic: "re", Value: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	px.cut()
	res, err := p.SendSync(ctx, client.Record{Topic: "re", Value: []byte("b")})
	if err != nil || res.Offset != 1 {
		t.Fatalf("after the cut: %+v %v", res, err)
	}
	px.mu.Lock()
	accepts := px.accepts
	px.mu.Unlock()
	if accepts != 2 {
		t.Fatalf("%d connections, want 2", accepts)
	}
}

// Close drains what was sent, refuses new records and leaves no
// goroutine behind; a Close that gives up fails what is left.
func TestProducerCloseDrainsWithoutLeaks(t *testing.T) {
	b := startBroker(t)
	px := startProxy(t, b.Addr)
	createTopic(t, b.Addr, "many", 3)
	ctx := testCtx(t, 20*time.Second)
	before := runtime.NumGoroutine()

	p, err := client.NewProducer(px.Addr(), client.WithLinger(time.Hour), client.WithTopicPartitions("many", 3),
		client.WithDeadLetterTopic("many.dlq"), client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	rs := newResults(n)
	for i := 0; i < n; i++ {
		rec := client.Record{Topic: "many", Key: []byte(fmt.Sprint(i)), Value: []byte("v")}
		switch i % 3 {
		case 1:
			rec.Topic = "other" // unknown count: split by key
		case 2:
			rec.Key = nil
		}
		if err := p.Send(ctx, rec, rs.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	// One record fails and goes to the dead-letter topic during Close.
	dead := make(chan client.Result, 1)
	if err := p.Send(ctx, client.Record{Topic: "many", Value: []byte("x")}, func(r client.Result) { dead <- r }, client.ToPartition(5)); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rs.check(t)
	if r := <-dead; r.Err == nil || r.DeadLetter == nil || r.DeadLetter.Err != nil {
		t.Fatalf("dead-lettered during Close: %+v", r)
	}
	if err := p.Send(ctx, client.Record{Topic: "many"}, nil); !errors.Is(err, client.ErrProducerClosed) {
		t.Fatalf("send after close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
	checkNoLeak(t, before)

	// A broker that never answers: Close gives up when its context ends
	// and fails what is left.
	p, err = client.NewProducer(px.Addr(), client.WithLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	px.pause(true)
	stuck := make(chan client.Result, 2)
	for i := 0; i < 2; i++ {
		if err := p.Send(ctx, client.Record{Topic: "many", Value: []byte("late")}, func(r client.Result) { stuck <- r }); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := p.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close of a stuck producer: %v", err)
	}
	for i := 0; i < 2; i++ {
		if r := <-stuck; !errors.Is(r.Err, client.ErrProducerClosed) {
			t.Fatalf("stuck record: %+v", r)
		}
	}
	px.pause(false)
	checkNoLeak(t, before)
}
