package netio_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/client"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/wal/batch"
)

// handBatch wraps records (already compressed with codec, or not) in a
// v2 batch header declaring count records, with a correct CRC: what a
// hostile producer can send, since the CRC only proves the bytes arrived
// as built. Field offsets are those of wal/batch's package doc.
func handBatch(codec batch.Codec, count int32, records []byte) []byte {
	b := make([]byte, batch.HeaderSize, batch.HeaderSize+len(records))
	b = append(b, records...)
	be := binary.BigEndian
	be.PutUint32(b[8:], uint32(len(b)-batch.LogOverhead))
	b[16] = batch.Magic
	be.PutUint16(b[21:], uint16(codec))
	be.PutUint32(b[23:], uint32(count-1))
	now := time.Now().UnixMilli()
	be.PutUint64(b[27:], uint64(now))
	be.PutUint64(b[35:], uint64(now))
	be.PutUint64(b[43:], ^uint64(0)) // producer id -1
	be.PutUint16(b[51:], 0xffff)
	be.PutUint32(b[53:], 0xffffffff)
	be.PutUint32(b[57:], uint32(count))
	be.PutUint32(b[17:], batch.Checksum(b))
	return b
}

func zstdOf(t testing.TB, b []byte) []byte {
	t.Helper()
	out, err := batch.Compress(batch.CodecZstd, nil, b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// produceCode sends one raw batch to partition 0 of topic and returns the
// partition's error code.
func produceCode(t *testing.T, cl *kgo.Client, topic string, b []byte) int16 {
	t.Helper()
	resp, err := cl.Request(testCtx(t, 20*time.Second), produceRequest(topic, 0, -1, b))
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
}

// TestPoisonCompressedBatchesAreRefused: a compressed batch whose payload
// does not decompress, or whose inner offsets lie about the header, was
// acknowledged and then stalled every consumer behind it. Now it is
// refused INVALID_RECORD, and consumers read every good record.
func TestPoisonCompressedBatchesAreRefused(t *testing.T) {
	b := startBroker(t)
	cl := b.client(kgo.AllowAutoTopicCreation())
	ctx := testCtx(t, 60*time.Second)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "poison", Value: []byte("first")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rec := func(delta int32, v string) []byte { return batch.AppendRecord(nil, 0, delta, nil, []byte(v), nil) }
	poisons := map[string][]byte{
		"garbage labelled zstd":   handBatch(batch.CodecZstd, 1, []byte("this is not zstd at all")),
		"zstd of garbage":         handBatch(batch.CodecZstd, 1, zstdOf(t, []byte{0xff, 0xff, 0xff, 0xff, 0xff})),
		"inner deltas 0 and 1000": handBatch(batch.CodecZstd, 2, zstdOf(t, append(rec(0, "a"), rec(1000, "b")...))),
		"3 declared, 2 inside":    handBatch(batch.CodecZstd, 3, zstdOf(t, append(rec(0, "a"), rec(1, "b")...))),
		"gzip cut short":          handBatch(batch.CodecGzip, 1, mustCompress(t, batch.CodecGzip, rec(0, "a"))[:10]),
	}
	for name, p := range poisons {
		if code := produceCode(t, cl, "poison", p); code != kerr.InvalidRecord.Code {
			t.Errorf("%s: produce answered %d, want INVALID_RECORD (%d)", name, code, kerr.InvalidRecord.Code)
		}
	}
	// A good hand-made zstd batch passes the same path.
	if code := produceCode(t, cl, "poison", handBatch(batch.CodecZstd, 2, zstdOf(t, append(rec(0, "hand-0"), rec(1, "hand-1")...)))); code != 0 {
		t.Fatalf("a well-formed hand-made zstd batch: code %d", code)
	}
	var want []string
	for i := 0; i < 50; i++ {
		v := fmt.Sprintf("after-%d", i)
		want = append(want, v)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "poison", Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	want = append([]string{"first", "hand-0", "hand-1"}, want...)
	consumer := b.client(kgo.ConsumeTopics("poison"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for len(got) < len(want) {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records: %q", len(got), len(want), got)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("consumed %q, want %q", got, want)
	}
}

func varintSize(v int64) int { return len(binary.AppendVarint(nil, v)) }

func mustCompress(t testing.TB, c batch.Codec, b []byte) []byte {
	t.Helper()
	out, err := batch.Compress(c, nil, b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// zstdRecords is a zstd batch of n records of size bytes of zeros each,
// encoded as a stream: a large batch that is small on the wire.
func zstdRecords(t testing.TB, n, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, min(size, 1<<20))
	for i := 0; i < n; i++ {
		// The record as batch.AppendRecord lays it out, its value
		// written in chunks.
		body := 1 + 1 + varintSize(int64(i)) + 1 + varintSize(int64(size)) + size + 1
		hdr := binary.AppendVarint(nil, int64(body))
		hdr = append(hdr, 0, 0) // attributes, timestamp delta 0
		hdr = binary.AppendVarint(hdr, int64(i))
		hdr = binary.AppendVarint(hdr, -1) // null key
		hdr = binary.AppendVarint(hdr, int64(size))
		enc.Write(hdr)
		for left := size; left > 0; left -= len(zeros) {
			enc.Write(zeros[:min(left, len(zeros))])
		}
		enc.Write([]byte{0}) // no headers
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return handBatch(batch.CodecZstd, int32(n), buf.Bytes())
}

// TestDecompressionBombs: a 1 GB-of-zeros record in a 228 KB-style zstd
// batch is refused MESSAGE_TOO_LARGE after decompressing at most the
// limit, on a plain and on a compacted topic, with the broker's heap
// growing by far less than the bomb; and a legitimate large batch (40 MB
// of records, under the limit) fetched by 4 native consumers at once
// costs each a window, not the batch.
func TestDecompressionBombs(t *testing.T) {
	b := startBroker(t, withServer(func(c *netio.Config) { c.MaxUncompressedBatchBytes = 48 << 20 }))
	cl := b.client(kgo.AllowAutoTopicCreation())
	ctx := testCtx(t, 120*time.Second)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "plain"); err != nil {
		t.Fatal(err)
	}
	compact := "compact"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &compact}, "squeezed"); err != nil {
		t.Fatal(err)
	}
	bomb := zstdRecords(t, 1, 1<<30)
	t.Logf("bomb: %d bytes on the wire, 1 GiB of records", len(bomb))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(topic string) {
			defer wg.Done()
			if code := produceCode(t, cl, topic, bomb); code != kerr.MessageTooLarge.Code {
				t.Errorf("bomb to %s: code %d, want MESSAGE_TOO_LARGE", topic, code)
			}
		}([]string{"plain", "squeezed"}[i%2])
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Fatalf("4 bomb produces allocated %d MB", grew>>20)
	}

	// 40 MB of 1 KiB records, legitimately produced, in one batch.
	big := zstdRecords(t, 40<<10, 1000)
	if code := produceCode(t, cl, "plain", big); code != 0 {
		t.Fatalf("a 40 MB batch under the 48 MB limit: code %d", code)
	}
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := client.Dial(ctx, b.NativeAddr)
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			recs, err := nc.Fetch(ctx, "plain", 0, 0, 64<<10)
			if err != nil || len(recs) == 0 || len(recs) > 64 {
				t.Errorf("native fetch of 64 KiB: %d records, %v", len(recs), err)
			}
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	// Decoding the batch whole would take 4 x 40 MB; the bound leaves
	// room for the rest of the process (the race detector, other tests).
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 40<<20 {
		t.Fatalf("4 native fetches of 64 KiB from a 40 MB batch allocated %d MB", grew>>20)
	}
}

// TestClientsCannotWriteInternalTopics: a hand-built offset-commit record
// produced to __consumer_offsets was acknowledged and, after a restart,
// replaced a group's committed offset. Now produce to an internal topic
// is refused INVALID_TOPIC_EXCEPTION on both protocols, and the group's
// offset survives a restart untouched.
func TestClientsCannotWriteInternalTopics(t *testing.T) {
	b := startBroker(t)
	cl := b.client(kgo.AllowAutoTopicCreation())
	ctx := testCtx(t, 30*time.Second)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	commit := kadm.Offsets{}
	commit.AddOffset("orders", 0, 7, -1)
	if _, err := adm.CommitOffsets(ctx, "victim", commit); err != nil {
		t.Fatal(err)
	}
	key := (&kmsg.OffsetCommitKey{Version: 1, Group: "victim", Topic: "orders", Partition: 0}).AppendTo(nil)
	value := (&kmsg.OffsetCommitValue{Version: 1, Offset: 999_999, CommitTimestamp: time.Now().UnixMilli()}).AppendTo(nil)
	err := cl.ProduceSync(ctx, &kgo.Record{Topic: "__consumer_offsets", Key: key, Value: value}).FirstErr()
	if !errors.Is(err, kerr.InvalidTopicException) {
		t.Fatalf("forged commit over Kafka: %v, want INVALID_TOPIC_EXCEPTION", err)
	}
	nc, err := client.Dial(ctx, b.NativeAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, _, err = nc.Produce(ctx, "__consumer_offsets", 0, []client.Record{{Key: key, Value: value}})
	var ne *client.Error
	if !errors.As(err, &ne) || ne.Code != client.CodeInvalidTopic {
		t.Fatalf("forged commit over the native protocol: %v, want INVALID_TOPIC", err)
	}
	b.restart()
	adm = kadm.NewClient(b.client())
	got, err := adm.FetchOffsets(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := got.Lookup("orders", 0); !ok || o.At != 7 {
		t.Fatalf("victim's committed offset after restart: %+v, want 7", o)
	}
}

// TestAutoCreationFlood: one Metadata v0 request naming 8,000 new topics
// used to create 6,660 of them and exhaust the file descriptors. Now
// auto-creation is paced (here bursts of 40), a native CREATE_TOPIC of
// 100,000 partitions is refused by --max-partitions, nothing half-made
// stays on disk, and the broker keeps serving.
func TestAutoCreationFlood(t *testing.T) {
	b := startBroker(t, func(c *broker.Config) {
		c.Engine.AutoCreateRate, c.Engine.AutoCreateBurst = 1, 40
		c.Engine.MaxHostedPartitions = 1000
	})
	ctx := testCtx(t, 60*time.Second)
	req := kmsg.NewPtrMetadataRequest()
	for i := 0; i < 8000; i++ {
		mt := kmsg.NewMetadataRequestTopic()
		name := fmt.Sprintf("flood-%d", i)
		mt.Topic = &name
		req.Topics = append(req.Topics, mt)
	}
	rc := dialWire(t, b.Addr)
	resp := rc.roundTrip(req, 0, 1).(*kmsg.MetadataResponse)
	created := 0
	for _, mt := range resp.Topics {
		switch mt.ErrorCode {
		case 0:
			created++
		case kerr.UnknownTopicOrPartition.Code:
		default:
			t.Fatalf("topic %s: error %d", *mt.Topic, mt.ErrorCode)
		}
	}
	if created == 0 || created > 45 {
		t.Fatalf("one Metadata request auto-created %d of 8,000 topics, want at most the burst (40) and a few", created)
	}
	nc, err := client.Dial(ctx, b.NativeAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.CreateTopic(ctx, "huge", 100_000); !errors.Is(err, client.ErrInvalidTopic) {
		t.Fatalf("native CREATE_TOPIC of 100,000 partitions: %v", err)
	}
	dirs, _ := filepath.Glob(filepath.Join(b.Dir, "*-[0-9]*"))
	if len(dirs) > created+1 { // + __consumer_offsets-0
		t.Fatalf("%d partition directories for %d topics: half-made ones stayed", len(dirs), created)
	}
	cl := b.client()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, "after-flood"); err != nil {
		t.Fatalf("an explicit creation after the flood: %v", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "after-flood", Value: []byte("ok")}).FirstErr(); err != nil {
		t.Fatalf("produce after the flood: %v", err)
	}
}

// TestScrubberFindsAFlippedByte: a byte flipped on disk in a sealed
// segment is found by the scrubber within its interval, counted and
// logged; fetches get the records before it and KAFKA_STORAGE_ERROR at
// it, never the damaged bytes.
func TestScrubberFindsAFlippedByte(t *testing.T) {
	b := startBroker(t, func(c *broker.Config) {
		c.Engine.ScrubBytesPerSec, c.Engine.ScrubInterval = 64<<20, 200*time.Millisecond
	})
	ctx := testCtx(t, 60*time.Second)
	cl := b.client(kgo.DefaultProduceTopic("scrubbed"), kgo.ProducerLinger(0))
	seg := "4096"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"segment.bytes": &seg}, "scrubbed"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "record-%03d-%s", i, bytes.Repeat([]byte("x"), 100))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	p := b.Eng.Topic("scrubbed").Partition(0)
	l, err := p.Log()
	if err != nil {
		t.Fatal(err)
	}
	sealed := l.SealedSegments()
	if len(sealed) < 3 {
		t.Fatalf("%d sealed segments", len(sealed))
	}
	path := filepath.Join(l.Dir(), fmt.Sprintf("%020d.log", sealed[1]))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	one := []byte{0}
	f.ReadAt(one, 30)
	one[0] ^= 0x10
	if _, err := f.WriteAt(one, 30); err != nil { // in the first batch
		t.Fatal(err)
	}
	f.Close()
	e2eWaitFor(t, 20*time.Second, "the scrubber to find the flipped byte", func() bool { return b.Eng.EngineStats().ScrubDamaged.Load() > 0 })
	rc := b.e2eRaw()
	if fp := rc.rawFetch(12, "scrubbed", [16]byte{}, 0, sealed[0]); fp.ErrorCode != 0 || len(fp.RecordBatches) == 0 {
		t.Fatalf("fetch before the damage: %v, %d bytes", kerr.ErrorForCode(fp.ErrorCode), len(fp.RecordBatches))
	}
	fp := rc.rawFetch(12, "scrubbed", [16]byte{}, 0, sealed[1])
	if fp.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("fetch at the damage: %v with %d bytes, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(fp.ErrorCode), len(fp.RecordBatches))
	}
	if fp := rc.rawFetch(12, "scrubbed", [16]byte{}, 0, sealed[2]); fp.ErrorCode != 0 || len(fp.RecordBatches) == 0 {
		t.Fatalf("fetch after the damaged segment: %v", kerr.ErrorForCode(fp.ErrorCode))
	}
}

// TestUnreadPipelineMemoryBounded: a client pipelining requests it never
// reads the answers of makes its connection pause; what it sends on is
// held for it up to MaxRequestBytes, then the connection is closed. The
// memory that takes stays within 1.5x of that bound: it was about 4x while
// gnet's inbound buffer held the bytes (it grows a quarter at a time and
// keeps its old buffers in a pool).
func TestUnreadPipelineMemoryBounded(t *testing.T) {
	const limit = 16 << 20
	b := startBroker(t, withServer(func(c *netio.Config) { c.MaxRequestBytes = limit; c.MaxInflightPerConn = 4 }))
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0)
	one := reqFrame(req, 0, 1)
	burst := bytes.Repeat(one, (64<<10)/len(one))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	nc, err := net.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var peak uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	sent := 0
	// The writes block once the broker stops reading (the kernel's
	// buffers full); the broker has closed the connection by then.
	nc.SetWriteDeadline(time.Now().Add(6 * time.Second))
	for sent < 4*limit {
		n, err := nc.Write(burst)
		sent += n
		if err != nil {
			break
		}
	}
	// The broker closed it: reads end (after what answers it got out).
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, nc); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the connection was not closed after %d MiB sent unread", sent>>20)
		}
	}
	close(stop)
	<-sampled
	grew := int64(peak) - int64(base)
	t.Logf("sent %d MiB unread; the heap grew by %d MiB at most (limit %d MiB)", sent>>20, grew>>20, limit>>20)
	if grew > limit*3/2 {
		t.Fatalf("holding a %d MiB unread pipeline took %d MiB of heap, more than 1.5x", limit>>20, grew>>20)
	}
}
