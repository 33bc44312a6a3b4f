package netio_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/wal/batch"
)

// TestE2EIdempotentRetriesNoDuplicates produces with kgo's idempotent
// producer through a proxy that lets the broker apply some produce
// requests but loses their responses (and the connection). kgo retries
// those batches with the same sequence numbers; the broker must answer
// them from its dedup window instead of appending them again. Every value
// is then in the log exactly once, at dense offsets.
func TestE2EIdempotentRetriesNoDuplicates(t *testing.T) {
	// Drop points at least five requests apart (kgo keeps up to five in
	// flight), so each one is a request on a live connection.
	proxy := newE2EDropProxy(t, 3, 12, 25, 40)
	b := startBroker(t, withServer(func(c *netio.Config) { c.AdvertisedAddr = proxy.addr() }))
	proxy.start(b.Addr)
	ctx := testCtx(t, 30*time.Second)
	const topic, n = "idem-retry", 3000
	b.e2eCreate(ctx, topic, 1, nil)
	prod := b.client(kgo.SeedBrokers(proxy.addr()), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchMaxBytes(1024), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }), kgo.MetadataMinAge(20*time.Millisecond))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Value: []byte(fmt.Sprintf("value-%05d", i))}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produces, dropped := proxy.stats()
	t.Logf("%d produce requests through the proxy, %d responses dropped", produces, dropped)
	if dropped != 4 {
		t.Fatalf("the proxy dropped %d responses, want 4 (only %d produce requests)", dropped, produces)
	}
	p := b.e2ePart(topic, 0)
	if end := p.HighWatermark(); end != n {
		t.Fatalf("log end offset %d after %d records: retried batches were appended again", end, n)
	}
	if in := p.RecordsIn.Load(); in != n {
		t.Fatalf("%d records appended, want %d", in, n)
	}
	got := b.e2eConsume(ctx, topic, n)
	seen := map[string]bool{}
	for i, r := range got {
		want := fmt.Sprintf("value-%05d", i)
		if r.Offset != int64(i) || string(r.Value) != want {
			t.Fatalf("record %d: offset %d value %q, want %q", i, r.Offset, r.Value, want)
		}
		if seen[want] {
			t.Fatalf("duplicate %s", want)
		}
		seen[want] = true
	}
	// Each request carries one batch. A request the broker handled
	// without error either appended its batch or was a retry answered
	// from the dedup window, so handled - failed - stored counts the
	// deduplicated retries: at least one per lost response. (Some
	// requests may fail with OUT_OF_ORDER_SEQUENCE_NUMBER: kgo can send
	// a new batch on the new connection before it resends the lost one;
	// it retries those.) Checked after consuming, so the last produce
	// handlers have long recorded their metrics.
	handled := int(e2eMetric(t, b, "ringlog_requests_total", "Produce"))
	failed := int(e2eMetric(t, b, "ringlog_request_errors_total", "Produce"))
	stored := len(b.e2eHeaders(topic, 0))
	t.Logf("broker: %d produce requests handled, %d with errors, %d batches stored", handled, failed, stored)
	if dups := handled - failed - stored; dups < dropped {
		t.Fatalf("broker handled %d produce requests (%d with errors) for %d stored batches: %d deduplicated retries, want at least %d", handled, failed, stored, dups, dropped)
	}
	// Every stored batch is an idempotent one of the same producer, and
	// sequences are dense too.
	next := int32(0)
	for _, h := range b.e2eHeaders(topic, 0) {
		if !h.Idempotent() || h.BaseSequence != next || int64(h.BaseSequence) != h.BaseOffset {
			t.Fatalf("batch at %d: producer %d sequence %d, want sequence %d", h.BaseOffset, h.ProducerID, h.BaseSequence, next)
		}
		next = h.LastSequence() + 1
	}
}

// TestE2EIdempotentRawProduce drives the idempotence checks with hand-built
// batches: a retry of one of the last five batches gets its original
// offsets without a second append, a sequence gap is
// OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch is INVALID_PRODUCER_EPOCH,
// and a bumped epoch must start at sequence 0.
func TestE2EIdempotentRawProduce(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 20*time.Second)
	const topic = "idem-raw"
	b.e2eCreate(ctx, topic, 1, nil)
	rc := b.e2eRaw()

	initReq := kmsg.NewPtrInitProducerIDRequest()
	initReq.TransactionTimeoutMillis = 60000
	initReq.ProducerID, initReq.ProducerEpoch = -1, -1
	init := rc.do(initReq, 4).(*kmsg.InitProducerIDResponse)
	if init.ErrorCode != 0 || init.ProducerID < 0 || init.ProducerEpoch != 0 {
		t.Fatalf("InitProducerId: error %d id %d epoch %d", init.ErrorCode, init.ProducerID, init.ProducerEpoch)
	}
	pid := init.ProducerID
	ts := time.Now().UnixMilli()
	values := func(from, n int) []string {
		var out []string
		for i := from; i < from+n; i++ {
			out = append(out, fmt.Sprintf("v%d", i))
		}
		return out
	}
	expect := func(step string, got kmsg.ProduceResponseTopicPartition, code int16, base int64) {
		t.Helper()
		if got.ErrorCode != code || code == 0 && got.BaseOffset != base {
			t.Fatalf("%s: error %v base offset %d; want error %v base offset %d",
				step, kerr.ErrorForCode(got.ErrorCode), got.BaseOffset, kerr.ErrorForCode(code), base)
		}
	}
	end := func() int64 { t.Helper(); return b.e2ePart(topic, 0).HighWatermark() }

	b0 := e2eBatch(t, batch.CodecNone, ts, pid, 0, 0, values(0, 5)...) // seq 0-4
	expect("first batch", rc.rawProduce(topic, 0, b0), 0, 0)
	expect("same batch again", rc.rawProduce(topic, 0, b0), 0, 0)
	if e := end(); e != 5 {
		t.Fatalf("end offset %d after a duplicate, want 5", e)
	}
	b1 := e2eBatch(t, batch.CodecGzip, ts, pid, 0, 5, values(5, 3)...) // seq 5-7
	expect("second batch", rc.rawProduce(topic, 0, b1), 0, 5)
	expect("first batch, older retry", rc.rawProduce(topic, 0, b0), 0, 0)
	expect("second batch again", rc.rawProduce(topic, 0, b1), 0, 5)

	gap := e2eBatch(t, batch.CodecNone, ts, pid, 0, 10, values(10, 2)...) // expected 8
	expect("sequence gap", rc.rawProduce(topic, 0, gap), kerr.OutOfOrderSequenceNumber.Code, -1)
	if e := end(); e != 8 {
		t.Fatalf("end offset %d after refused batches, want 8", e)
	}
	// The window is the last five batches: after five more, b0 is no
	// longer known and a batch with its sequences is out of order.
	for i := 0; i < 5; i++ {
		seq := int32(8 + i)
		bi := e2eBatch(t, batch.CodecNone, ts, pid, 0, seq, values(int(seq), 1)...)
		expect(fmt.Sprintf("batch seq %d", seq), rc.rawProduce(topic, 0, bi), 0, int64(seq))
	}
	expect("batch that aged out of the window", rc.rawProduce(topic, 0, b0), kerr.OutOfOrderSequenceNumber.Code, -1)

	// InitProducerId naming the current id and epoch (KIP-360 v3+) gets
	// a fresh id, as Kafka answers without a transactional id: no client
	// can bump another's epoch.
	bump := kmsg.NewPtrInitProducerIDRequest()
	bump.TransactionTimeoutMillis = 60000
	bump.ProducerID, bump.ProducerEpoch = pid, 0
	bumped := rc.do(bump, 4).(*kmsg.InitProducerIDResponse)
	if bumped.ErrorCode != 0 || bumped.ProducerID == pid || bumped.ProducerEpoch != 0 {
		t.Fatalf("InitProducerId with an existing id: error %d id %d epoch %d, want a new id", bumped.ErrorCode, bumped.ProducerID, bumped.ProducerEpoch)
	}
	// The producer moves to epoch 1 on its own (as franz-go does after a
	// sequence error): the new epoch must start at sequence 0.
	notZero := e2eBatch(t, batch.CodecNone, ts, pid, 1, 3, "x")
	expect("new epoch not at sequence 0", rc.rawProduce(topic, 0, notZero), kerr.OutOfOrderSequenceNumber.Code, -1)
	e1 := e2eBatch(t, batch.CodecNone, ts, pid, 1, 0, "e1-0", "e1-1")
	expect("new epoch", rc.rawProduce(topic, 0, e1), 0, 13)
	old := e2eBatch(t, batch.CodecNone, ts, pid, 0, 13, "old")
	expect("older epoch", rc.rawProduce(topic, 0, old), kerr.InvalidProducerEpoch.Code, -1)
	expect("new epoch retry", rc.rawProduce(topic, 0, e1), 0, 13)

	// The log holds every accepted record once.
	want := append(values(0, 13), "e1-0", "e1-1")
	got := b.e2eConsume(ctx, topic, len(want))
	for i, r := range got {
		if r.Offset != int64(i) || string(r.Value) != want[i] {
			t.Fatalf("record %d: offset %d value %q, want %q", i, r.Offset, r.Value, want[i])
		}
	}
	if e := end(); e != int64(len(want)) {
		t.Fatalf("end offset %d, want %d", e, len(want))
	}

	// The producer state survives a restart: retries are still
	// recognised and gaps still refused.
	b.restart()
	rc = b.e2eRaw()
	expect("retry after restart", rc.rawProduce(topic, 0, e1), 0, 13)
	expect("older epoch after restart", rc.rawProduce(topic, 0, old), kerr.InvalidProducerEpoch.Code, -1)
	gap2 := e2eBatch(t, batch.CodecNone, ts, pid, 1, 5, "gap")
	expect("gap after restart", rc.rawProduce(topic, 0, gap2), kerr.OutOfOrderSequenceNumber.Code, -1)
	next := e2eBatch(t, batch.CodecNone, ts, pid, 1, 2, "e1-2")
	expect("next after restart", rc.rawProduce(topic, 0, next), 0, 15)
}

// TestE2EIdempotentAcrossRestart restarts the broker (cleanly, on the same
// port) while kgo's idempotent producer has requests in flight. Requests
// the broker had not parsed are lost with the connection and retried; the
// producer state written at shutdown lets the new broker recognise the
// retries of batches it had already appended. Every record ends up in the
// log once, at dense offsets, and no produce fails.
func TestE2EIdempotentAcrossRestart(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 30*time.Second)
	const topic, n = "idem-restart", 4000
	b.e2eCreate(ctx, topic, 1, nil)
	addr := b.Addr
	prod := b.client(kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(1024),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(0),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }), kgo.MetadataMinAge(20*time.Millisecond))
	var acked, failed atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			prod.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("value-%05d", i))}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				acked.Add(1)
			})
			if i%100 == 99 {
				time.Sleep(time.Millisecond) // keep producing through the restart
			}
		}
	}()
	e2eWaitFor(t, 10*time.Second, "a third of the records acknowledged", func() bool { return acked.Load() >= n/3 })
	before := acked.Load()
	b.Stop()
	b.Config.Kafka.Addr = addr // same port: the client reconnects to it
	b.Start()
	if b.Addr != addr {
		t.Fatalf("restarted on %s, want %s", b.Addr, addr)
	}
	<-done
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted after %d acknowledgements; %d acknowledged, %d failed", before, acked.Load(), failed.Load())
	if f := failed.Load(); f != 0 {
		t.Fatalf("%d records failed, first: %v", f, firstErr.Load())
	}
	if before == n {
		t.Fatal("everything was acknowledged before the restart: nothing was in flight")
	}
	if end := b.e2ePart(topic, 0).HighWatermark(); end != n {
		t.Fatalf("log end offset %d after %d records", end, n)
	}
	got := b.e2eConsume(ctx, topic, n)
	for i, r := range got {
		if want := fmt.Sprintf("value-%05d", i); r.Offset != int64(i) || string(r.Value) != want {
			t.Fatalf("record %d: offset %d value %q, want %q", i, r.Offset, r.Value, want)
		}
	}
}

// TestE2EIdempotentMultiBatchRequest sends produce requests whose records
// for one partition hold two consecutive idempotent batches (the protocol
// allows several batches per partition; Kafka checks each against the
// state the previous one left). Both are appended; a retry of the whole
// request gets the original offsets; a gap between the two is refused.
func TestE2EIdempotentMultiBatchRequest(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 20*time.Second)
	const topic = "idem-multi"
	b.e2eCreate(ctx, topic, 1, nil)
	rc := b.e2eRaw()
	initReq := kmsg.NewPtrInitProducerIDRequest()
	initReq.ProducerID, initReq.ProducerEpoch = -1, -1
	init := rc.do(initReq, 4).(*kmsg.InitProducerIDResponse)
	if init.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(init.ErrorCode))
	}
	pid, ts := init.ProducerID, time.Now().UnixMilli()
	two := func(seq, gap int32) []byte {
		a := e2eBatch(t, batch.CodecNone, ts, pid, 0, seq, fmt.Sprint(seq), fmt.Sprint(seq+1))
		c := e2eBatch(t, batch.CodecGzip, ts, pid, 0, seq+2+gap, fmt.Sprint(seq+2+gap), fmt.Sprint(seq+3+gap))
		return append(a, c...)
	}
	for _, seq := range []int32{0, 4, 8} {
		if pr := rc.rawProduce(topic, 0, two(seq, 0)); pr.ErrorCode != 0 || pr.BaseOffset != int64(seq) {
			t.Fatalf("two batches from sequence %d: %v, base offset %d", seq, kerr.ErrorForCode(pr.ErrorCode), pr.BaseOffset)
		}
	}
	if pr := rc.rawProduce(topic, 0, two(4, 0)); pr.ErrorCode != 0 || pr.BaseOffset != 4 {
		t.Fatalf("retry of the request from sequence 4: %v, base offset %d", kerr.ErrorForCode(pr.ErrorCode), pr.BaseOffset)
	}
	if pr := rc.rawProduce(topic, 0, two(12, 1)); pr.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("gap between the batches of one request: %v", kerr.ErrorForCode(pr.ErrorCode))
	}
	if end := b.e2ePart(topic, 0).HighWatermark(); end != 12 {
		t.Fatalf("end offset %d, want 12", end)
	}
	for i, r := range b.e2eConsume(ctx, topic, 12) {
		if r.Offset != int64(i) || string(r.Value) != fmt.Sprint(i) {
			t.Fatalf("record %d: offset %d value %q", i, r.Offset, r.Value)
		}
	}
}
