package netio_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/wal/batch"
)

// e2eBatchHook records the per-batch metrics kgo reports when producing and
// fetching.
type e2eBatchHook struct {
	mu       sync.Mutex
	produced []kgo.ProduceBatchMetrics
	fetched  []kgo.FetchBatchMetrics
}

func (h *e2eBatchHook) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	h.mu.Lock()
	h.produced = append(h.produced, m)
	h.mu.Unlock()
}

func (h *e2eBatchHook) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	h.mu.Lock()
	h.fetched = append(h.fetched, m)
	h.mu.Unlock()
}

func (h *e2eBatchHook) producedRecords() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.produced {
		n += m.NumRecords
	}
	return n
}

// e2eRecordBytes is the size of a stored batch's records section (what kgo
// calls CompressedBytes): the batch minus its 61-byte header.
func e2eRecordBytes(h batch.Header) int { return h.Size() - batch.HeaderSize }

// TestE2ECompressionCodecs produces with every codec and checks that values,
// keys and headers round-trip; that the broker stored each batch exactly as
// kgo sent it (byte for byte, as captured by a proxy, but for the base
// offset and leader epoch it assigns; same codec, size and record count as
// kgo's produce metrics); that the fetched batches are the stored ones; and
// that the consumed records carry the codec in their attributes.
func TestE2ECompressionCodecs(t *testing.T) {
	// Clients go through a proxy that keeps a copy of every batch sent.
	proxy := newE2EDropProxy(t)
	var sentMu sync.Mutex
	sentBatches := map[string][][]byte{}
	proxy.onProduce = func(f []byte) {
		bs := e2eProduceFrameBatches(t, f)
		sentMu.Lock()
		for k, v := range bs {
			sentBatches[k] = append(sentBatches[k], v...)
		}
		sentMu.Unlock()
	}
	b := startBroker(t, withServer(func(c *netio.Config) { c.AdvertisedAddr = proxy.addr() }))
	proxy.start(b.Addr)
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
		id    uint8
	}{
		{"none", kgo.NoCompression(), 0},
		{"gzip", kgo.GzipCompression(), 1},
		{"snappy", kgo.SnappyCompression(), 2},
		{"lz4", kgo.Lz4Compression(), 3},
		{"zstd", kgo.ZstdCompression(), 4},
	}
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t, 20*time.Second)
			topic := "codec-" + c.name
			hook := &e2eBatchHook{}
			prod := b.client(kgo.SeedBrokers(proxy.addr()), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(c.codec),
				kgo.ProducerBatchMaxBytes(16<<10), kgo.WithHooks(hook))
			const n = 400
			want := make([]*kgo.Record, n)
			for i := range want {
				// Compressible values of varying length (even a
				// batch of one record compresses, so kgo never falls
				// back to no compression), some keys and headers, one
				// empty and one nil value.
				v := []byte(fmt.Sprintf("value-%04d-%s", i, strings.Repeat("abc", 50+i%50)))
				switch i {
				case 7:
					v = []byte{}
				case 8:
					v = nil
				}
				r := &kgo.Record{Value: v}
				if i%3 == 0 {
					r.Key = []byte(fmt.Sprintf("key-%d", i))
				}
				if i%5 == 0 {
					r.Headers = []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprint(i))}, {Key: "empty"}}
				}
				want[i] = r
			}
			if err := prod.ProduceSync(ctx, want...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			// kgo runs the produce hooks on their own goroutines.
			e2eWaitFor(t, 5*time.Second, "produce hooks", func() bool { return hook.producedRecords() == n })

			fhook := &e2eBatchHook{}
			got := b.e2eConsume(ctx, topic, n, kgo.WithHooks(fhook))
			if len(got) != n {
				t.Fatalf("consumed %d records, want %d", len(got), n)
			}
			for i, r := range got {
				w := want[i]
				if r.Offset != int64(i) || !bytes.Equal(r.Value, w.Value) || !bytes.Equal(r.Key, w.Key) {
					t.Fatalf("record %d: offset %d key %q value %q; want key %q value %q", i, r.Offset, r.Key, r.Value, w.Key, w.Value)
				}
				if (r.Value == nil) != (w.Value == nil) {
					t.Fatalf("record %d: value nil=%v, want nil=%v", i, r.Value == nil, w.Value == nil)
				}
				if len(r.Headers) != len(w.Headers) {
					t.Fatalf("record %d: %d headers, want %d", i, len(r.Headers), len(w.Headers))
				}
				for j := range w.Headers {
					if r.Headers[j].Key != w.Headers[j].Key || !bytes.Equal(r.Headers[j].Value, w.Headers[j].Value) {
						t.Fatalf("record %d header %d: %q=%q, want %q=%q", i, j, r.Headers[j].Key, r.Headers[j].Value, w.Headers[j].Key, w.Headers[j].Value)
					}
				}
				if got := r.Attrs.CompressionType(); got != c.id {
					t.Fatalf("record %d: fetched batch codec %d, want %d", i, got, c.id)
				}
			}

			// What kgo sent, what is stored and what was fetched are
			// the same batches (compare as multisets: kgo runs hooks
			// concurrently).
			type shape struct{ records, bytes int }
			hook.mu.Lock()
			var sent []shape
			for _, m := range hook.produced {
				if m.CompressionType != c.id {
					t.Fatalf("kgo produced a batch with codec %d, want %d", m.CompressionType, c.id)
				}
				sent = append(sent, shape{m.NumRecords, m.CompressedBytes})
			}
			hook.mu.Unlock()
			var stored []shape
			total := int64(0)
			for _, h := range b.e2eHeaders(topic, 0) {
				if uint8(h.Codec()) != c.id {
					t.Fatalf("stored batch at %d has codec %v, want %d", h.BaseOffset, h.Codec(), c.id)
				}
				stored = append(stored, shape{int(h.LastOffsetDelta) + 1, e2eRecordBytes(h)})
				total += int64(h.Size())
			}
			fhook.mu.Lock()
			var fetched []shape
			for _, m := range fhook.fetched {
				fetched = append(fetched, shape{m.NumRecords, m.CompressedBytes})
			}
			fhook.mu.Unlock()
			cmp := func(a, b shape) int {
				if a.records != b.records {
					return a.records - b.records
				}
				return a.bytes - b.bytes
			}
			slices.SortFunc(sent, cmp)
			slices.SortFunc(stored, cmp)
			slices.SortFunc(fetched, cmp)
			if !slices.Equal(sent, stored) {
				t.Fatalf("batches sent %v\nstored %v", sent, stored)
			}
			if !slices.Equal(stored, fetched) {
				t.Fatalf("batches stored %v\nfetched %v", stored, fetched)
			}
			if len(stored) < 2 {
				t.Fatalf("only %d batches: the test wants several", len(stored))
			}
			if c.id != 0 {
				hook.mu.Lock()
				for _, m := range hook.produced {
					if m.CompressedBytes >= m.UncompressedBytes {
						t.Errorf("batch not compressed: %d >= %d bytes", m.CompressedBytes, m.UncompressedBytes)
					}
				}
				hook.mu.Unlock()
			}
			// Byte for byte, each stored batch is the one sent, but for
			// the two fields the broker assigns: baseOffset (bytes
			// 0-7) and partitionLeaderEpoch (12-15), outside the CRC.
			p := b.e2ePart(topic, 0)
			l, _ := p.Log()
			raw, err := l.ReadBytes(nil, 0, 1<<30, l.EndOffset())
			if err != nil {
				t.Fatal(err)
			}
			storedRaw, err := batch.Split(raw, nil)
			if err != nil {
				t.Fatal(err)
			}
			sentMu.Lock()
			sentRaw := sentBatches[topic+"/0"]
			sentMu.Unlock()
			if len(sentRaw) != len(storedRaw) {
				t.Fatalf("%d batches sent, %d stored", len(sentRaw), len(storedRaw))
			}
			next := int64(0)
			for i := range storedRaw {
				st, se := storedRaw[i], sentRaw[i]
				if len(st) != len(se) || !bytes.Equal(st[8:12], se[8:12]) || !bytes.Equal(st[16:], se[16:]) {
					t.Fatalf("batch %d: stored bytes differ from the %d bytes sent", i, len(se))
				}
				if got := int64(binary.BigEndian.Uint64(st)); got != next {
					t.Fatalf("batch %d: base offset %d, want %d", i, got, next)
				}
				h, _ := batch.ParseHeader(st)
				next = h.NextOffset()
			}
			if p.BytesIn.Load() != total || l.Size() != total {
				t.Fatalf("bytes in %d, log size %d, stored batches %d", p.BytesIn.Load(), l.Size(), total)
			}
			t.Logf("%s: %d batches, %d bytes stored", c.name, len(stored), total)
		})
	}
}

// TestE2EKeyedOrdering produces keyed records to a multi-partition topic
// and checks that each key's records are in one partition, in order.
func TestE2EKeyedOrdering(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 20*time.Second)
	const topic, parts, keys, perKey = "keyed", 4, 20, 50
	b.e2eCreate(ctx, topic, parts, nil)
	prod := b.client(kgo.DefaultProduceTopic(topic))
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			wg.Add(1)
			prod.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("key-%02d", k)), Value: []byte(fmt.Sprintf("%02d:%03d", k, i))},
				func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Store(err)
					}
					wg.Done()
				})
		}
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
	got := b.e2eConsume(ctx, topic, keys*perKey)
	partOf := map[string]int32{}
	next := map[string]int{}
	lastOffset := map[int32]int64{}
	used := map[int32]int{}
	for _, r := range got {
		k := string(r.Key)
		if p, ok := partOf[k]; ok && p != r.Partition {
			t.Fatalf("key %s in partitions %d and %d", k, p, r.Partition)
		}
		partOf[k] = r.Partition
		var kk, i int
		if _, err := fmt.Sscanf(string(r.Value), "%d:%d", &kk, &i); err != nil || fmt.Sprintf("key-%02d", kk) != k {
			t.Fatalf("record %q with key %s", r.Value, k)
		}
		if i != next[k] {
			t.Fatalf("key %s: got sequence %d, want %d (partition %d offset %d)", k, i, next[k], r.Partition, r.Offset)
		}
		next[k]++
		if last, ok := lastOffset[r.Partition]; ok && r.Offset != last+1 {
			t.Fatalf("partition %d: offset %d after %d", r.Partition, r.Offset, last)
		}
		lastOffset[r.Partition] = r.Offset
		used[r.Partition]++
	}
	for k := 0; k < keys; k++ {
		if n := next[fmt.Sprintf("key-%02d", k)]; n != perKey {
			t.Fatalf("key-%02d: %d records, want %d", k, n, perKey)
		}
	}
	if len(used) < 2 {
		t.Fatalf("all keys landed in %d partition(s): %v", len(used), used)
	}
	for p, n := range used {
		if end := b.e2ePart(topic, p).HighWatermark(); end != int64(n) {
			t.Fatalf("partition %d: end offset %d, consumed %d", p, end, n)
		}
	}
	t.Logf("records per partition: %v", used)
}

// TestE2EAcks produces with acks 0, 1 and -1 and checks that everything
// arrives, and that only acks=-1 (without write caching) fsyncs.
func TestE2EAcks(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 30*time.Second)
	stats := b.Eng.EngineStats()
	cases := []struct {
		name      string
		acks      kgo.Acks
		idem      bool
		topicCfg  map[string]*string
		wantSyncs bool
	}{
		{"acks0", kgo.NoAck(), false, nil, false},
		{"acks1", kgo.LeaderAck(), false, nil, false},
		{"acksAll", kgo.AllISRAcks(), true, nil, true},
		{"acksAllNonIdempotent", kgo.AllISRAcks(), false, nil, true},
		{"acksAllWriteCaching", kgo.AllISRAcks(), true, map[string]*string{"write.caching": kmsg.StringPtr("true")}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			topic := "acks-" + c.name
			b.e2eCreate(ctx, topic, 1, c.topicCfg)
			opts := []kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(c.acks), kgo.ProducerBatchMaxBytes(4 << 10)}
			if !c.idem {
				opts = append(opts, kgo.DisableIdempotentWrite())
			}
			prod := b.client(opts...)
			// Connect and load metadata before measuring.
			if err := prod.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			syncs0, hist0, subs0 := stats.Syncs.Load(), e2eHistCount(t, b.Metrics.SyncSeconds), stats.Submissions.Load()
			const n = 300
			recs := make([]*kgo.Record, n)
			for i := range recs {
				recs[i] = &kgo.Record{Value: []byte(fmt.Sprintf("%s-%04d-%s", c.name, i, strings.Repeat("x", 64)))}
			}
			if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			got := b.e2eConsume(ctx, topic, n)
			for i, r := range got {
				if r.Offset != int64(i) || !bytes.Equal(r.Value, recs[i].Value) {
					t.Fatalf("record %d: offset %d value %q", i, r.Offset, r.Value)
				}
			}
			if end := b.e2ePart(topic, 0).HighWatermark(); end != n {
				t.Fatalf("end offset %d, want %d", end, n)
			}
			syncs, hist, subs := stats.Syncs.Load()-syncs0, e2eHistCount(t, b.Metrics.SyncSeconds)-hist0, stats.Submissions.Load()-subs0
			t.Logf("%s: %d submissions, %d with fsync, %d fsync observations", c.name, subs, syncs, hist)
			if subs == 0 {
				t.Fatal("no submissions counted")
			}
			if c.wantSyncs {
				if syncs == 0 || hist == 0 {
					t.Fatalf("acks=all: syncs %d, fsync histogram count %d; want both > 0", syncs, hist)
				}
				if hist != uint64(syncs) {
					t.Fatalf("fsync histogram counted %d, engine %d", hist, syncs)
				}
			} else if syncs != 0 || hist != 0 {
				t.Fatalf("%s: %d fsyncs (histogram %d), want none", c.name, syncs, hist)
			}
		})
	}
}

// TestE2EBackpressure runs fast producers against one writer shard with a
// small queue bound. The shard is first held busy (a control function that
// blocks it), so the producers must fill its queue: the queue reaches the
// bound and then stops growing (connections are paused, not read), and no
// more appends are acknowledged. Once released, every record is
// acknowledged and consumed intact, and the queue never exceeded the bound
// by more than one request per event loop.
func TestE2EBackpressure(t *testing.T) {
	const bound = 64 << 10
	b := startBroker(t, withEngine(func(c *engine.Config) { c.ShardQueueBytes = bound; c.Shards = 1 }))
	ctx := testCtx(t, 40*time.Second)
	const producers, perProducer, valueSize, maxBatch = 4, 1000, 1000, 16 << 10
	topics := make([]string, producers)
	for i := range topics {
		topics[i] = fmt.Sprintf("bp-%d", i)
		b.e2eCreate(ctx, topics[i], 1, nil)
	}
	shard := b.Eng.Shards()[0]
	// The bound may be overshot by the requests admitted at the same
	// moment: at most one per event loop (one batch of maxBatch each).
	limit := int64(bound + b.Kafka.EventLoops()*(maxBatch+1024))

	var maxQueued atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			q := shard.QueuedBytes()
			if q > maxQueued.Load() {
				maxQueued.Store(q)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()

	// kgo sends more than one request per partition only after a first
	// success on the connection: warm each producer up with one record
	// (offset 0) before the shard is held. Manual flushing buffers all
	// records first, so every request carries a whole (uncompressed)
	// batch: 4 producers x 5 requests in flight x 16 KiB are more than the
	// bound.
	prods := make([]*kgo.Client, producers)
	for i := range prods {
		prods[i] = b.client(kgo.DefaultProduceTopic(topics[i]), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
			kgo.MaxProduceRequestsInflightPerBroker(5), kgo.ProducerBatchMaxBytes(maxBatch), kgo.ManualFlushing(),
			kgo.ProducerBatchCompression(kgo.NoCompression()))
		var werr error
		prods[i].Produce(ctx, &kgo.Record{Value: []byte("warm-up")}, func(_ *kgo.Record, err error) { werr = err })
		if err := prods[i].Flush(ctx); err != nil || werr != nil {
			t.Fatal(err, werr)
		}
	}

	// Hold the shard goroutine.
	release := make(chan struct{})
	held := make(chan struct{})
	shard.Do(func() { close(held); <-release })
	<-held
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	var acked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for i, prod := range prods {
		wg.Add(1)
		go func(i int, prod *kgo.Client) {
			defer wg.Done()
			var failed atomic.Value
			var pw sync.WaitGroup
			for j := 0; j < perProducer; j++ {
				v := bytes.Repeat([]byte{byte('a' + i)}, valueSize)
				copy(v, fmt.Sprintf("p%d-%05d-", i, j))
				pw.Add(1)
				prod.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Store(err)
					} else {
						acked.Add(1)
					}
					pw.Done()
				})
			}
			if err := prod.Flush(ctx); err != nil {
				errs <- fmt.Errorf("producer %d: flush: %w", i, err)
				return
			}
			pw.Wait()
			if err, _ := failed.Load().(error); err != nil {
				errs <- fmt.Errorf("producer %d: %w", i, err)
			}
		}(i, prod)
	}

	// While the shard is held, the queue fills to the bound and stays.
	e2eWaitFor(t, 10*time.Second, "the shard queue to reach its bound", func() bool { return shard.QueuedBytes() >= bound })
	testenv.Holds(t, 300*time.Millisecond, fmt.Sprintf("the held shard's queue within %d bytes (bound %d)", limit, bound), func() bool {
		return shard.QueuedBytes() <= limit
	})
	q := shard.QueuedBytes()
	if n := acked.Load(); n != 0 {
		t.Fatalf("%d records acknowledged while the shard was held", n)
	}
	t.Logf("held shard: %d bytes queued (bound %d)", q, bound)
	close(release)
	released = true

	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := acked.Load(); n != producers*perProducer {
		t.Fatalf("%d records acknowledged, want %d", n, producers*perProducer)
	}
	for i, topic := range topics {
		got := b.e2eConsume(ctx, topic, perProducer+1)
		if string(got[0].Value) != "warm-up" {
			t.Fatalf("%s offset 0: %q", topic, got[0].Value)
		}
		for j, r := range got[1:] {
			prefix := fmt.Sprintf("p%d-%05d-", i, j)
			if r.Offset != int64(j+1) || len(r.Value) != valueSize || !bytes.HasPrefix(r.Value, []byte(prefix)) ||
				r.Value[valueSize-1] != byte('a'+i) {
				t.Fatalf("%s record %d: offset %d, %d bytes, prefix %q", topic, j, r.Offset, len(r.Value), r.Value[:min(len(r.Value), 16)])
			}
		}
		if end := b.e2ePart(topic, 0).HighWatermark(); end != perProducer+1 {
			t.Fatalf("%s: end offset %d, want %d", topic, end, perProducer+1)
		}
	}
	t.Logf("max queued %d bytes (bound %d, limit %d)", maxQueued.Load(), bound, limit)
	if maxQueued.Load() > limit {
		t.Fatalf("shard queue reached %d bytes; bound %d, allowed up to %d", maxQueued.Load(), bound, limit)
	}
	if q := shard.QueuedBytes(); q != 0 {
		t.Fatalf("queue holds %d bytes after everything was acknowledged", q)
	}
}

// TestE2EAcksZeroErrors checks what an acks=0 producer sees: nothing for
// a good produce (the connection keeps serving), and, as Kafka does, a
// closed connection when the produce failed, since there is no response
// to carry the error (Kafka's KafkaApis closes the connection so that the
// client notices and refreshes its metadata).
func TestE2EAcksZeroErrors(t *testing.T) {
	b := startBroker(t, withEngine(func(c *engine.Config) { c.AutoCreateTopics = false }))
	ctx := testCtx(t, 20*time.Second)
	b.e2eCreate(ctx, "acks0", 1, map[string]*string{"max.message.bytes": kmsg.StringPtr("1000")})
	produce0 := func(t *testing.T, rc *e2eConn, topic string, records []byte) {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.Acks = 0
		req.TimeoutMillis = 1000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = records
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		rc.send(req, 9)
	}
	alive := func(rc *e2eConn) {
		t.Helper()
		av := rc.do(kmsg.NewPtrApiVersionsRequest(), 3).(*kmsg.ApiVersionsResponse)
		if av.ErrorCode != 0 || len(av.ApiKeys) == 0 {
			t.Fatalf("ApiVersions after acks=0 produce: error %d", av.ErrorCode)
		}
	}
	closed := func(t *testing.T, rc *e2eConn, what string) {
		t.Helper()
		rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var one [1]byte
		n, err := rc.c.Read(one[:])
		if n > 0 || err == nil {
			t.Fatalf("%s: the broker sent %d bytes on an acks=0 produce", what, n)
		}
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: the connection stayed open: the producer cannot learn that its records were refused", what)
		}
	}

	rc := b.e2eRaw()
	produce0(t, rc, "acks0", e2eBatch(t, batch.CodecNone, time.Now().UnixMilli(), -1, -1, -1, "ok"))
	alive(rc)
	e2eWaitFor(t, 5*time.Second, "the acks=0 record", func() bool { return b.e2ePart("acks0", 0).HighWatermark() == 1 })

	t.Run("tooLarge", func(t *testing.T) {
		rc := b.e2eRaw()
		produce0(t, rc, "acks0", e2eBatch(t, batch.CodecNone, time.Now().UnixMilli(), -1, -1, -1, strings.Repeat("x", 2000)))
		closed(t, rc, "MESSAGE_TOO_LARGE")
	})
	t.Run("unknownTopic", func(t *testing.T) {
		rc := b.e2eRaw()
		produce0(t, rc, "no-such-topic", e2eBatch(t, batch.CodecNone, time.Now().UnixMilli(), -1, -1, -1, "x"))
		closed(t, rc, "UNKNOWN_TOPIC_OR_PARTITION")
	})
	if end := b.e2ePart("acks0", 0).HighWatermark(); end != 1 {
		t.Fatalf("end offset %d, want 1", end)
	}
}

// TestE2EPipelinedProducesShareWrites sends eight acks=1 produces in one
// write, as a producer with requests in flight does under load: the
// event loop reads them together, writes each on the direct-write path,
// and answers them, in order and with consecutive offsets, in fewer socket
// writes than responses (conn.holdWrites). Answered one by one they took
// eight writes.
func TestE2EPipelinedProducesShareWrites(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 20*time.Second)
	const topic, n = "pipelined", 8
	b.e2eCreate(ctx, topic, 1, nil)
	rc := dialWire(t, b.Addr)
	apiVersionsOK(t, rc, 1)
	var frames []byte
	for i := range n {
		req := produceReq(topic, 1, testBatch(t, 3, batch.CodecNone, fmt.Sprintf("p%d", i)))
		frames = append(frames, reqFrame(req, 9, int32(100+i))...)
	}
	writes0 := testutil.ToFloat64(b.Metrics.ResponseWrites)
	rc.write(frames)
	for i := range n {
		resp := rc.readResp(kmsg.NewPtrProduceRequest(), 9, int32(100+i)).(*kmsg.ProduceResponse)
		rp := resp.Topics[0].Partitions[0]
		if rp.ErrorCode != 0 || rp.BaseOffset != int64(3*i) {
			t.Fatalf("produce %d: error %d, base offset %d (want 0, %d)", i, rp.ErrorCode, rp.BaseOffset, 3*i)
		}
	}
	writes := testutil.ToFloat64(b.Metrics.ResponseWrites) - writes0
	t.Logf("%d produce responses in %v writes", n, writes)
	if writes >= n {
		t.Fatalf("%d pipelined produce responses took %v socket writes, want fewer than one each", n, writes)
	}
}

// TestE2ELargeRequestReadDirect: a Produce request larger than what gnet
// reads per readable event is completed by reads straight into its
// buffer (ringlog_request_direct_read_bytes_total), and its records read
// back intact, in order.
func TestE2ELargeRequestReadDirect(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 30*time.Second)
	const topic = "bigrequest"
	b.e2eCreate(ctx, topic, 1, nil)
	prod := b.client(kgo.DefaultProduceTopic(topic), kgo.ManualFlushing(), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(1<<20))
	var recs []*kgo.Record
	for i := 0; i < 8; i++ {
		v := make([]byte, 100<<10)
		for j := range v {
			v[j] = byte(i*31 + j*7)
		}
		recs = append(recs, &kgo.Record{Value: v})
	}
	before := testutil.ToFloat64(b.Metrics.DirectReadBytes)
	e2eProduceFlushed(t, ctx, prod, recs...)
	direct := testutil.ToFloat64(b.Metrics.DirectReadBytes) - before
	if direct <= 0 || direct > 800<<10+4096 {
		t.Fatalf("%v bytes of an 800 KiB request read straight into its buffer", direct)
	}
	got := b.e2eConsume(ctx, topic, len(recs))
	for i, r := range got {
		if r.Offset != int64(i) || !bytes.Equal(r.Value, recs[i].Value) {
			t.Fatalf("record %d: offset %d, %d bytes, not the %d produced", i, r.Offset, len(r.Value), len(recs[i].Value))
		}
	}
	t.Logf("%v of the request's bytes read directly", direct)
}
