package netio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/client"
	"github.com/ringlog/ringlog/internal/keyhash"
	"github.com/ringlog/ringlog/netio"
)

func nativeConn(t testing.TB, b *testBroker) *client.Conn {
	t.Helper()
	c, err := client.Dial(context.Background(), b.NativeAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func recs(n int, key func(i int) []byte) []client.Record {
	out := make([]client.Record, n)
	for i := range out {
		out[i] = client.Record{Key: key(i), Value: []byte(fmt.Sprintf("value-%d", i))}
	}
	return out
}

func TestNativeProduceFetchRoundTrip(t *testing.T) {
	b := startBroker(t)
	c := nativeConn(t, b)
	ctx := testCtx(t, 10*time.Second)
	if err := c.CreateTopic(ctx, "native", 3); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, "native", 3); !errors.Is(err, client.ErrTopicExists) {
		t.Fatalf("second create: %v", err)
	}
	for _, bad := range []string{"", "bad name!", ".."} {
		if err := c.CreateTopic(ctx, bad, 1); !errors.Is(err, client.ErrInvalidTopic) {
			t.Fatalf("create %q: %v", bad, err)
		}
	}
	if err := c.CreateTopic(ctx, "zero", 0); !errors.Is(err, client.ErrInvalidTopic) {
		t.Fatalf("create with 0 partitions: %v", err)
	}
	// A batch: one call, dense offsets, all in partition 1.
	p, base, err := c.Produce(ctx, "native", 1, recs(10, func(i int) []byte {
		if i%3 == 0 {
			return nil // null key
		}
		return []byte(fmt.Sprint(i))
	}))
	if err != nil || p != 1 || base != 0 {
		t.Fatalf("produce: p=%d base=%d %v", p, base, err)
	}
	_, base, err = c.Produce(ctx, "native", 1, recs(5, func(int) []byte { return []byte("k") }))
	if err != nil || base != 10 {
		t.Fatalf("second produce: base=%d %v", base, err)
	}
	got, err := c.Fetch(ctx, "native", 1, 0, 1<<20)
	if err != nil || len(got) != 15 {
		t.Fatalf("fetch: %d records %v", len(got), err)
	}
	for i, r := range got {
		if r.Offset != int64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
		if i < 10 && (i%3 == 0) != (r.Key == nil) {
			t.Fatalf("record %d key %q (null keys must stay null)", i, r.Key)
		}
		if r.Timestamp < time.Now().Add(-time.Minute).UnixMilli() {
			t.Fatalf("record %d timestamp %d", i, r.Timestamp)
		}
	}
	// From an offset inside the batch: only from that offset on.
	got, err = c.Fetch(ctx, "native", 1, 7, 1<<20)
	if err != nil || len(got) != 8 || got[0].Offset != 7 {
		t.Fatalf("fetch from 7: %d records, first %+v, %v", len(got), got, err)
	}
	// maxBytes=1 still makes progress: exactly one record.
	for off := int64(0); off < 15; off++ {
		got, err = c.Fetch(ctx, "native", 1, off, 1)
		if err != nil || len(got) != 1 || got[0].Offset != off {
			t.Fatalf("maxBytes=1 at %d: %+v %v", off, got, err)
		}
	}
	// At the end: nothing; past it: out of range.
	if got, err = c.Fetch(ctx, "native", 1, 15, 100); err != nil || len(got) != 0 {
		t.Fatalf("fetch at end: %+v %v", got, err)
	}
	var ne *client.Error
	if _, err = c.Fetch(ctx, "native", 1, 99, 100); !errors.As(err, &ne) || ne.Code != client.CodeOffsetOutOfRange {
		t.Fatalf("fetch past end: %v", err)
	}
	if _, err = c.Fetch(ctx, "nope", 0, 0, 100); !errors.As(err, &ne) || ne.Code != client.CodeUnknownTopic {
		t.Fatalf("fetch unknown topic: %v", err)
	}
	if _, _, err = c.Produce(ctx, "native", 9, recs(1, func(int) []byte { return nil })); !errors.As(err, &ne) || ne.Code != client.CodeUnknownTopic {
		t.Fatalf("produce to a missing partition: %v", err)
	}
}

func TestNativePartitioner(t *testing.T) {
	b := startBroker(t)
	c := nativeConn(t, b)
	ctx := testCtx(t, 10*time.Second)
	if err := c.CreateTopic(ctx, "parts", 3); err != nil {
		t.Fatal(err)
	}
	// Same key, same partition: the murmur2 partition, as Kafka clients.
	for i := 0; i < 30; i++ {
		key := []byte(fmt.Sprintf("seat-%d", i))
		p1, _, err := c.Produce(ctx, "parts", -1, []client.Record{{Key: key, Value: []byte("a")}})
		if err != nil {
			t.Fatal(err)
		}
		p2, _, _ := c.Produce(ctx, "parts", -1, []client.Record{{Key: key, Value: []byte("b")}})
		if p1 != p2 || p1 != keyhash.Partition(key, 3) {
			t.Fatalf("key %s went to %d then %d, murmur2 says %d", key, p1, p2, keyhash.Partition(key, 3))
		}
	}
	// Null keys: strict round-robin, 30 records over 3 partitions 10/10/10.
	counts := map[int32]int{}
	var last int32 = -1
	for i := 0; i < 30; i++ {
		p, _, err := c.Produce(ctx, "parts", -1, []client.Record{{Value: []byte("rr")}})
		if err != nil {
			t.Fatal(err)
		}
		if last >= 0 && p != (last+1)%3 {
			t.Fatalf("round-robin went %d -> %d", last, p)
		}
		last = p
		counts[p]++
	}
	if counts[0] != 10 || counts[1] != 10 || counts[2] != 10 {
		t.Fatalf("null keys spread %v", counts)
	}
}

func TestNativeCommitsAndRestart(t *testing.T) {
	b := startBroker(t)
	c := nativeConn(t, b)
	ctx := testCtx(t, 20*time.Second)
	if err := c.CreateTopic(ctx, "commits", 1); err != nil {
		t.Fatal(err)
	}
	if off, err := c.FetchOffset(ctx, "g", "commits", 0); err != nil || off != -1 {
		t.Fatalf("nothing committed: %d %v", off, err)
	}
	for _, off := range []int64{5, 9, 12, 3, 7} {
		if err := c.CommitOffset(ctx, "g", "commits", 0, off); err != nil {
			t.Fatal(err)
		}
	}
	c.CommitOffset(ctx, "other", "commits", 0, 100)
	for i := 0; i < 3; i++ {
		c.Produce(ctx, "commits", 0, recs(4, func(int) []byte { return nil }))
	}
	b.restart()
	c = nativeConn(t, b)
	// The newest commit wins, after a restart too.
	if off, err := c.FetchOffset(ctx, "g", "commits", 0); err != nil || off != 7 {
		t.Fatalf("after restart: %d %v, want 7", off, err)
	}
	if off, _ := c.FetchOffset(ctx, "other", "commits", 0); off != 100 {
		t.Fatalf("other group: %d", off)
	}
	// The next offset is recovered: appends continue at 12.
	if _, base, err := c.Produce(ctx, "commits", 0, recs(1, func(int) []byte { return nil })); err != nil || base != 12 {
		t.Fatalf("append after restart: base %d %v", base, err)
	}
	var ne *client.Error
	if err := c.CommitOffset(ctx, "g", "missing", 0, 1); !errors.As(err, &ne) || ne.Code != client.CodeUnknownTopic {
		t.Fatalf("commit to a missing topic: %v", err)
	}
}

func TestNativeCrossSegmentFetch(t *testing.T) {
	b := startBroker(t)
	c := nativeConn(t, b)
	ctx := testCtx(t, 20*time.Second)
	if err := c.CreateTopic(ctx, "segs", 1); err != nil {
		t.Fatal(err)
	}
	setTopicConfig(t, b, "segs", "segment.bytes", "1024")
	for i := 0; i < 40; i++ {
		if _, _, err := c.Produce(ctx, "segs", 0, recs(3, func(int) []byte { return []byte("k") })); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := b.Eng.Topic("segs").Partition(0).Log()
	if l.SegmentCount() < 5 {
		t.Fatalf("only %d segments", l.SegmentCount())
	}
	var all []client.Record
	for off := int64(0); off < 120; {
		got, err := c.Fetch(ctx, "segs", 0, off, 1<<20)
		if err != nil || len(got) == 0 {
			t.Fatalf("fetch at %d: %v", off, err)
		}
		all = append(all, got...)
		off = got[len(got)-1].Offset + 1
	}
	if len(all) != 120 {
		t.Fatalf("read %d records across segments", len(all))
	}
	// One fetch spans segment boundaries.
	got, _ := c.Fetch(ctx, "segs", 0, 0, 1<<20)
	if len(got) != 120 {
		t.Fatalf("one fetch returned %d of 120 records over %d segments", len(got), l.SegmentCount())
	}
}

func TestNativeCrossProtocol(t *testing.T) {
	b := startBroker(t)
	c := nativeConn(t, b)
	ctx := testCtx(t, 20*time.Second)
	if err := c.CreateTopic(ctx, "xp", 2); err != nil {
		t.Fatal(err)
	}
	// Native produce -> Kafka consume.
	for i := 0; i < 20; i++ {
		if _, _, err := c.Produce(ctx, "xp", int32(i%2), []client.Record{{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("n%d", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	cons := b.client(kgo.ConsumeTopics("xp"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	for len(seen) < 20 && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	if len(seen) != 20 {
		t.Fatalf("kafka consumer saw %d of 20 native records", len(seen))
	}
	// Kafka produce -> native fetch, with headers dropped and keys kept.
	prod := b.client(kgo.DefaultProduceTopic("xp"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := 0; i < 5; i++ {
		r := &kgo.Record{Key: []byte("kk"), Value: []byte(fmt.Sprintf("k%d", i)), Partition: 0, Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Fetch(ctx, "xp", 0, 10, 1<<20)
	if err != nil || len(got) != 5 || string(got[0].Value) != "k0" || string(got[0].Key) != "kk" {
		t.Fatalf("native fetch of kafka records: %+v %v", got, err)
	}
	// Offsets committed natively are seen by Kafka clients, and back.
	if err := c.CommitOffset(ctx, "xg", "xp", 0, 3); err != nil {
		t.Fatal(err)
	}
	kcl := b.client()
	resp, err := kcl.Request(ctx, offsetFetchReq("xg", "xp", 0))
	if err != nil {
		t.Fatal(err)
	}
	if off := firstOffset(resp); off != 3 {
		t.Fatalf("kafka OffsetFetch sees %d, want 3", off)
	}
}

// TestNativeMalformed: bad frames get an error or a closed connection,
// and the broker keeps serving.
func TestNativeMalformed(t *testing.T) {
	b := startBroker(t, withServer(func(c *netio.Config) { c.MaxRequestBytes = 1 << 20 }))
	ctx := testCtx(t, 10*time.Second)
	good := nativeConn(t, b)
	if err := good.CreateTopic(ctx, "m", 1); err != nil {
		t.Fatal(err)
	}
	send := func(frame []byte) (resp []byte, closed bool) {
		nc, err := net.Dial("tcp", b.NativeAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write(frame)
		nc.SetReadDeadline(time.Now().Add(time.Second))
		var hdr [4]byte
		if _, err := io.ReadFull(nc, hdr[:]); err != nil {
			return nil, true
		}
		resp = make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(nc, resp); err != nil {
			return nil, true
		}
		return resp, false
	}
	frame := func(key byte, payload []byte) []byte {
		out := binary.BigEndian.AppendUint32(nil, uint32(len(payload)+1))
		return append(append(out, key), payload...)
	}
	// Unknown api key: an answer with the key and UNKNOWN_API.
	if resp, _ := send(frame(42, nil)); !bytes.Equal(resp, []byte{42, 7}) {
		t.Fatalf("unknown api: %v", resp)
	}
	// Truncated produce payload: INVALID_REQUEST in PRODUCE's layout.
	if resp, _ := send(frame(0, []byte{0, 1, 'm'})); len(resp) != 18 || resp[0] != 0 || resp[1] != 2 {
		t.Fatalf("truncated produce: %v", resp)
	}
	// A record count that promises more than the frame holds.
	p := binary.BigEndian.AppendUint16(nil, 1)
	p = append(p, 'm')
	p = binary.BigEndian.AppendUint32(p, 0)
	p = binary.BigEndian.AppendUint32(p, 1_000_000)
	if resp, _ := send(frame(0, p)); len(resp) != 18 || resp[1] != 2 {
		t.Fatalf("lying record count: %v", resp)
	}
	// Absurd lengths close the connection before anything is allocated.
	for _, n := range []uint32{0, 2 << 20, 0xffffffff} {
		if _, closed := send(binary.BigEndian.AppendUint32(nil, n)); !closed {
			t.Fatalf("length %d was not refused", n)
		}
	}
	// The broker still serves.
	if _, _, err := good.Produce(ctx, "m", 0, recs(1, func(int) []byte { return nil })); err != nil {
		t.Fatalf("after malformed input: %v", err)
	}
}

func setTopicConfig(t *testing.T, b *testBroker, topic, key, value string) {
	t.Helper()
	adm := kadm.NewClient(b.client())
	resp, err := adm.AlterTopicConfigs(testCtx(t, 10*time.Second), []kadm.AlterConfig{{Name: key, Value: &value}}, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

func offsetFetchReq(group, topic string, partition int32) *kmsg.OffsetFetchRequest {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{partition}
	req.Topics = append(req.Topics, rt)
	return req
}

func firstOffset(resp kmsg.Response) int64 {
	r := resp.(*kmsg.OffsetFetchResponse)
	for _, g := range r.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				return p.Offset
			}
		}
	}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			return p.Offset
		}
	}
	return -2
}
