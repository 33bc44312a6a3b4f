package netio_test

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/wal/batch"
)

// fetchWriteHook counts the Fetch requests a kgo client writes.
type fetchWriteHook struct{ n atomic.Int32 }

func (h *fetchWriteHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 1 && err == nil {
		h.n.Add(1)
	}
}

// TestE2ELongPollWakeup parks a consumer in a fetch with a 5 s MaxWait on
// an empty partition, then produces: the append must wake the fetch, so
// the record arrives in well under the wait.
func TestE2ELongPollWakeup(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 20*time.Second)
	const topic = "longpoll"
	b.e2eCreate(ctx, topic, 1, nil)
	// A producer that is connected and knows its topics before timing.
	prod := b.client(kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
		kgo.ProducerLinger(0))
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "longpoll-warm-up", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := prod.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	hook := &fetchWriteHook{}
	cons := b.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}),
		kgo.FetchMaxWait(5*time.Second), kgo.WithHooks(hook))
	type arrival struct {
		recs []*kgo.Record
		at   time.Time
	}
	got := make(chan arrival, 1)
	go func() {
		for ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			if recs := fs.Records(); len(recs) > 0 {
				got <- arrival{recs, time.Now()}
				return
			}
		}
	}()
	e2eWaitFor(t, 10*time.Second, "the consumer's first fetch", func() bool { return hook.n.Load() > 0 })
	// A parked fetch is one request: a broker answering the empty fetch
	// at once would make kgo send more.
	testenv.Holds(t, 300*time.Millisecond, "one fetch written while the partition was empty (parked)", func() bool {
		return hook.n.Load() == 1
	})
	select {
	case a := <-got:
		t.Fatalf("got %d records before producing", len(a.recs))
	default:
	}
	start := time.Now()
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("wake up")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	acked := time.Since(start)
	var a arrival
	select {
	case a = <-got:
	case <-ctx.Done():
		t.Fatal("no record arrived")
	}
	latency := a.at.Sub(start)
	t.Logf("produce acknowledged after %v; record delivered %v after the produce started", acked, latency)
	if len(a.recs) != 1 || string(a.recs[0].Value) != "wake up" || a.recs[0].Offset != 0 {
		t.Fatalf("got %d records, first %q at %d", len(a.recs), a.recs[0].Value, a.recs[0].Offset)
	}
	if latency > 500*time.Millisecond {
		t.Fatalf("record delivered %v after produce: the append did not wake the parked fetch", latency)
	}
}

// TestE2EFetchInsideBatch stores one batch of 10 records and consumes from
// offset 5: the application sees records 5-9 only. The broker returns the
// whole batch (as Kafka does) and the client skips what is before 5.
func TestE2EFetchInsideBatch(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 20*time.Second)
	const topic = "inside"
	b.e2eCreate(ctx, topic, 1, nil)
	prod := b.client(kgo.DefaultProduceTopic(topic), kgo.ManualFlushing())
	var recs []*kgo.Record
	for i := 0; i < 10; i++ {
		recs = append(recs, &kgo.Record{Value: []byte(fmt.Sprintf("r%d", i))})
	}
	e2eProduceFlushed(t, ctx, prod, recs...)
	hs := b.e2eHeaders(topic, 0)
	if len(hs) != 1 || hs[0].BaseOffset != 0 || hs[0].LastOffsetDelta != 9 {
		t.Fatalf("want one stored batch of offsets 0-9, got %d batches", len(hs))
	}

	// Raw: a fetch at 5 returns the whole batch, with its base offset 0.
	fp := b.e2eRaw().rawFetch(12, topic, [16]byte{}, 0, 5)
	if fp.ErrorCode != 0 || fp.HighWatermark != 10 || fp.LogStartOffset != 0 {
		t.Fatalf("fetch at 5: error %d hw %d log start %d", fp.ErrorCode, fp.HighWatermark, fp.LogStartOffset)
	}
	h, err := batch.ParseHeader(fp.RecordBatches)
	if err != nil || h.BaseOffset != 0 || h.Size() != len(fp.RecordBatches) {
		t.Fatalf("fetch at 5: %d bytes, batch base %d size %d, err %v", len(fp.RecordBatches), h.BaseOffset, h.Size(), err)
	}

	cons := b.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(5)}}))
	got := e2ePoll(t, ctx, cons, 5)
	if len(got) != 5 {
		t.Fatalf("got %d records, want 5", len(got))
	}
	for i, r := range got {
		if r.Offset != int64(5+i) || string(r.Value) != fmt.Sprintf("r%d", 5+i) {
			t.Fatalf("record %d: offset %d value %q", i, r.Offset, r.Value)
		}
	}
	// Nothing else is pending: one more short poll brings nothing.
	short := testCtx(t, 300*time.Millisecond)
	if fs := cons.PollFetches(short); len(fs.Records()) != 0 {
		t.Fatalf("another %d records delivered", len(fs.Records()))
	}
}

// TestE2EZeroCopyFetch consumes a partition and checks that the record
// bytes went out with sendfile (at least all the partition's bytes) and
// none through a user-space copy.
func TestE2EZeroCopyFetch(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 20*time.Second)
	const topic, n = "zerocopy", 2000
	b.e2eCreate(ctx, topic, 1, nil)
	prod := b.client(kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()))
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		recs = append(recs, &kgo.Record{Value: bytes.Repeat([]byte{byte(i)}, 200)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := b.e2ePart(topic, 0)
	l, err := p.Log()
	if err != nil {
		t.Fatal(err)
	}
	size := l.Size()
	sent0, copied0 := testutil.ToFloat64(b.Metrics.SendfileBytes), testutil.ToFloat64(b.Metrics.CopiedBytes)
	writers0 := testutil.ToFloat64(b.Metrics.WritersStarted)
	out0 := p.BytesOut.Load()
	got := b.e2eConsume(ctx, topic, n)
	for i, r := range got {
		if r.Offset != int64(i) || !bytes.Equal(r.Value, recs[i].Value) {
			t.Fatalf("record %d: offset %d, %d bytes", i, r.Offset, len(r.Value))
		}
	}
	sent := testutil.ToFloat64(b.Metrics.SendfileBytes) - sent0
	copied := testutil.ToFloat64(b.Metrics.CopiedBytes)
	t.Logf("partition %d bytes; sendfile %v bytes, copied %v (before: %v), bytes out %d", size, sent, copied, copied0, p.BytesOut.Load()-out0)
	if sent < float64(size) {
		t.Fatalf("sendfile sent %v bytes, less than the %d bytes consumed", sent, size)
	}
	if copied != 0 {
		t.Fatalf("%v record bytes were copied through user space", copied)
	}
	if out := p.BytesOut.Load() - out0; out < size {
		t.Fatalf("partition bytes out %d, want at least %d", out, size)
	}
	// The fetch (about 420 KB) left from the goroutine that answered it,
	// with no writer goroutine woken for it.
	if w := testutil.ToFloat64(b.Metrics.WritersStarted) - writers0; w != 0 {
		t.Fatalf("%v connections started a writer goroutine for responses under 1 MiB", w)
	}
}

// TestE2ESmallFetchCopied consumes a partition holding a few small
// batches: a fetch of fewer than Config.FetchCopyBelow bytes goes out
// copied with its headers (CopiedBytes), not with sendfile, and the
// records arrive intact.
func TestE2ESmallFetchCopied(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 20*time.Second)
	const topic = "smallcopy"
	b.e2eCreate(ctx, topic, 1, nil)
	prod := b.client(kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()))
	var recs []*kgo.Record
	for i := range 3 {
		recs = append(recs, &kgo.Record{Value: bytes.Repeat([]byte{byte('a' + i)}, 300)})
	}
	for _, r := range recs { // three batches
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	l, err := b.e2ePart(topic, 0).Log()
	if err != nil {
		t.Fatal(err)
	}
	size := l.Size()
	sent0, copied0 := testutil.ToFloat64(b.Metrics.SendfileBytes), testutil.ToFloat64(b.Metrics.CopiedBytes)
	got := b.e2eConsume(ctx, topic, len(recs))
	for i, r := range got {
		if r.Offset != int64(i) || !bytes.Equal(r.Value, recs[i].Value) {
			t.Fatalf("record %d: offset %d, value %q...", i, r.Offset, r.Value[:min(8, len(r.Value))])
		}
	}
	sent := testutil.ToFloat64(b.Metrics.SendfileBytes) - sent0
	copied := testutil.ToFloat64(b.Metrics.CopiedBytes) - copied0
	t.Logf("partition %d bytes; copied %v, sendfile %v", size, copied, sent)
	if copied < float64(size) || sent != 0 {
		t.Fatalf("copied %v bytes and sent %v with sendfile; want all %d copied (below %d), none with sendfile", copied, sent, size, 16<<10)
	}
}

// TestE2EListOffsetsByTime stores records with known timestamps (two gzip
// batches, and one batch with timestamps out of order)
// and checks the offsets found by time, the start, end and max-timestamp
// offsets, and what a timestamp after every record gives.
func TestE2EListOffsetsByTime(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 20*time.Second)
	const topic = "bytime"
	b.e2eCreate(ctx, topic, 1, nil)
	base := time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()
	rc := b.e2eRaw()
	// Built by hand, one batch each (a client may split a flush in two
	// when the topic's metadata arrives in the middle of it): offsets
	// 0-9 and 10-19 gzip, timestamps +10 ms apart...
	for part := 0; part < 2; part++ {
		bld := batch.NewBuilder()
		for i := part * 10; i < part*10+10; i++ {
			bld.Add(base+int64(10*i), nil, []byte(fmt.Sprint(i)), nil)
		}
		raw, err := bld.Build(nil, batch.CodecGzip)
		if err != nil {
			t.Fatal(err)
		}
		if pr := rc.rawProduce(topic, 0, raw); pr.ErrorCode != 0 || pr.BaseOffset != int64(10*part) {
			t.Fatalf("raw produce: error %d base %d", pr.ErrorCode, pr.BaseOffset)
		}
	}
	// ... and offsets 20-22, timestamps +500, +300, +700 in one batch.
	bld := batch.NewBuilder()
	bld.Add(base+500, nil, []byte("20"), nil)
	bld.Add(base+300, nil, []byte("21"), nil)
	bld.Add(base+700, nil, []byte("22"), nil)
	raw, err := bld.Build(nil, batch.CodecLZ4)
	if err != nil {
		t.Fatal(err)
	}
	if pr := rc.rawProduce(topic, 0, raw); pr.ErrorCode != 0 || pr.BaseOffset != 20 {
		t.Fatalf("raw produce: error %d base %d", pr.ErrorCode, pr.BaseOffset)
	}
	if hs := b.e2eHeaders(topic, 0); len(hs) != 3 {
		t.Fatalf("want 3 stored batches, got %d", len(hs))
	}

	adm := b.e2eAdmin()
	cases := []struct {
		at     int64
		offset int64
		ts     int64
	}{
		{base - 1000, 0, base},
		{base, 0, base},
		{base + 1, 1, base + 10},
		{base + 15, 2, base + 20},
		{base + 90, 9, base + 90},
		{base + 91, 10, base + 100},
		{base + 105, 11, base + 110},
		{base + 190, 19, base + 190},
		// The first record at or after the time, by offset: 20 (+500)
		// comes before 21 (+300).
		{base + 191, 20, base + 500},
		{base + 300, 20, base + 500},
		{base + 500, 20, base + 500},
		{base + 501, 22, base + 700},
		{base + 700, 22, base + 700},
	}
	for _, c := range cases {
		lo, err := adm.ListOffsetsAfterMilli(ctx, c.at, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := lo.Lookup(topic, 0)
		if !ok || o.Err != nil || o.Offset != c.offset || o.Timestamp != c.ts {
			t.Errorf("after %+d ms: offset %d timestamp %+d err %v; want offset %d timestamp %+d", c.at-base, o.Offset, o.Timestamp-base, o.Err, c.offset, c.ts-base)
		}
		// The same through ListOffsets v7 directly.
		if r := rc.listOffset(topic, 0, c.at); r.ErrorCode != 0 || r.Offset != c.offset || r.Timestamp != c.ts || r.LeaderEpoch != 0 {
			t.Errorf("raw after %+d ms: offset %d timestamp %+d epoch %d error %d", c.at-base, r.Offset, r.Timestamp-base, r.LeaderEpoch, r.ErrorCode)
		}
	}
	// After the newest record: Kafka answers offset -1, timestamp -1;
	// kadm then falls back to the end offset.
	if r := rc.listOffset(topic, 0, base+701); r.ErrorCode != 0 || r.Offset != -1 || r.Timestamp != -1 {
		t.Errorf("raw after the last record: offset %d timestamp %d error %d; want -1 -1", r.Offset, r.Timestamp, r.ErrorCode)
	}
	lo, err := adm.ListOffsetsAfterMilli(ctx, base+701, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := lo.Lookup(topic, 0); o.Err != nil || o.Offset != 23 || o.Timestamp != -1 {
		t.Errorf("kadm after the last record: offset %d timestamp %d err %v; want the end offset 23, timestamp -1", o.Offset, o.Timestamp, o.Err)
	}
	start, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := start.Lookup(topic, 0); o.Err != nil || o.Offset != 0 {
		t.Errorf("start offset %d err %v, want 0", o.Offset, o.Err)
	}
	end, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := end.Lookup(topic, 0); o.Err != nil || o.Offset != 23 {
		t.Errorf("end offset %d err %v, want 23", o.Offset, o.Err)
	}
	maxTs, err := adm.ListMaxTimestampOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := maxTs.Lookup(topic, 0); o.Err != nil || o.Offset != 22 || o.Timestamp != base+700 {
		t.Errorf("max timestamp: offset %d timestamp %+d err %v, want 22 at +700", o.Offset, o.Timestamp-base, o.Err)
	}
	// The consumed records carry the producer's timestamps.
	for i, r := range b.e2eConsume(ctx, topic, 23) {
		want := base + int64(10*i)
		switch i {
		case 20:
			want = base + 500
		case 21:
			want = base + 300
		case 22:
			want = base + 700
		}
		if r.Timestamp.UnixMilli() != want || r.Attrs.TimestampType() != 0 {
			t.Fatalf("record %d: timestamp %+d type %d, want %+d CreateTime", i, r.Timestamp.UnixMilli()-base, r.Attrs.TimestampType(), want-base)
		}
	}
	// An empty partition: no max timestamp offset, and by time the end.
	b.e2eCreate(ctx, "bytime-empty", 1, nil)
	if r := rc.listOffset("bytime-empty", 0, -3); r.ErrorCode != 0 || r.Offset != -1 {
		t.Errorf("max timestamp of an empty partition: offset %d error %d, want -1", r.Offset, r.ErrorCode)
	}
	if r := rc.listOffset("bytime-empty", 0, base); r.ErrorCode != 0 || r.Offset != -1 || r.Timestamp != -1 {
		t.Errorf("by time on an empty partition: offset %d timestamp %d error %d, want -1 -1", r.Offset, r.Timestamp, r.ErrorCode)
	}
}

// TestE2ESlowReaderGetsEveryResponse pipelines large fetches and small
// requests to a client that does not read for a while: the broker's
// non-blocking writes hit a full socket and hand the rest to the
// connection's writer goroutine. Every response must still arrive whole,
// in request order, with the log's exact bytes.
func TestE2ESlowReaderGetsEveryResponse(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 30*time.Second)
	const topic = "slowreader"
	b.e2eCreate(ctx, topic, 1, nil)
	w := b.e2eRaw()
	value := strings.Repeat("v", 100<<10)
	for i := 0; i < 30; i++ {
		if r := w.rawProduce(topic, 0, e2eBatch(t, batch.CodecNone, 1, -1, -1, -1, value, fmt.Sprint(i))); r.ErrorCode != 0 {
			t.Fatalf("produce %d: error %d", i, r.ErrorCode)
		}
	}
	want := w.rawFetch(12, topic, [16]byte{}, 0, 0).RecordBatches
	if len(want) < 900<<10 {
		t.Fatalf("first fetch got %d bytes, want about a MiB of batches", len(want))
	}

	r := b.e2eRaw()
	if tc, ok := r.c.(*net.TCPConn); ok {
		// Keep the kernel from absorbing much. (Not smaller: with a
		// receive window below loopback's 32-64 KiB MSS the kernel's
		// sender stalls in zero-window probing, whoever sends.)
		tc.SetReadBuffer(32 << 10)
	}
	type sent struct {
		req  kmsg.Request
		corr int32
	}
	var reqs []sent
	for i := 0; i < 24; i++ {
		f := kmsg.NewPtrFetchRequest()
		f.ReplicaID, f.MinBytes, f.MaxBytes, f.SessionEpoch = -1, 1, 1<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 0, 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		f.Topics = append(f.Topics, rt)
		reqs = append(reqs, sent{f, r.send(f, 12)})
		av := kmsg.NewPtrApiVersionsRequest()
		reqs = append(reqs, sent{av, r.send(av, 3)})
	}
	time.Sleep(500 * time.Millisecond) // the broker's writes back up meanwhile
	if w := testutil.ToFloat64(b.Metrics.WritersStarted); w < 1 {
		t.Fatalf("writers started %v: the full socket's rest never went to the writer goroutine", w)
	}
	for i, s := range reqs {
		switch resp := r.recv(s.req, s.req.GetVersion(), s.corr).(type) {
		case *kmsg.FetchResponse:
			got := resp.Topics[0].Partitions[0].RecordBatches
			if !bytes.Equal(got, want) {
				t.Fatalf("response %d: %d bytes differ from the log's %d", i, len(got), len(want))
			}
		case *kmsg.ApiVersionsResponse:
			if resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
				t.Fatalf("response %d: ApiVersions error %d", i, resp.ErrorCode)
			}
		}
	}
}
