package netio_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/nativeproto"
)

// TestCreateTopicDoesNotStallProduce creates a 1,000-partition topic while
// producing to another topic, one record at a time, and checks that those
// produces keep flowing: creating the partition logs (thousands of files
// and fsyncs) must not hold a lock the produce path takes, nor run on an
// event loop. When it did, a produce issued during the creation waited
// for all of it.
func TestCreateTopicDoesNotStallProduce(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 1,000 partitions")
	}
	b := startBroker(t)
	ctx := testCtx(t, 2*time.Minute)
	b.e2eCreate(ctx, "steady", 1, nil)
	// acks=1: the latencies are the broker's request path, not fsyncs
	// competing with the creation's for the disk.
	cl := b.client(kgo.DefaultProduceTopic("steady"), kgo.RequiredAcks(kgo.LeaderAck()),
		kgo.DisableIdempotentWrite(), kgo.ProducerLinger(0))
	produce := func() time.Duration {
		start := time.Now()
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		return time.Since(start)
	}
	var base []time.Duration
	for range 200 {
		base = append(base, produce())
	}

	adm := kadm.NewClient(b.client())
	created := make(chan error, 1)
	begin := time.Now()
	go func() {
		resp, err := adm.CreateTopic(ctx, 1000, 1, nil, "wide")
		if err == nil {
			err = resp.Err
		}
		created <- err
	}()
	var during []time.Duration
	var took time.Duration
	for took == 0 {
		during = append(during, produce())
		select {
		case err := <-created:
			if err != nil {
				t.Fatalf("create 1,000 partitions: %v", err)
			}
			took = time.Since(begin)
		default:
		}
	}

	p99 := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[(len(s)*99)/100]
	}
	worst := slices.Max(during)
	t.Logf("baseline: %d produces, p99 %v, max %v", len(base), p99(base), slices.Max(base))
	t.Logf("during a %v creation of 1,000 partitions: %d produces, p99 %v, max %v", took, len(during), p99(during), worst)
	// Produces must keep completing while the partitions are created: no
	// single one may wait for a large part of the creation. The bound is
	// loose (a 2-core machine is busy creating files and the race
	// detector slows everything), but a produce that waits for the
	// creation takes about all of it.
	if worst > took/2 {
		t.Errorf("a produce took %v during a %v topic creation: it waited for the creation", worst, took)
	}
	if len(during) < 5 {
		t.Errorf("only %d produces completed during a %v topic creation", len(during), took)
	}
}

// TestAutoCreateProduceKeepsOrder pipelines produces to a topic that does
// not exist yet on one connection: the first leaves the event loop to
// create the topic, and the ones behind it must still be appended, and
// answered, in request order.
func TestAutoCreateProduceKeepsOrder(t *testing.T) {
	b := startBroker(t)
	rc := b.e2eRaw()
	const n = 20
	var reqs []*kmsg.ProduceRequest
	var corrs []int32
	for i := range n {
		req := produceRequest("ordered", 0, 1, e2eBatch(t, 0, time.Now().UnixMilli(), -1, -1, -1, fmt.Sprint(i)))
		reqs = append(reqs, req)
		corrs = append(corrs, rc.send(req, 9))
	}
	for i, req := range reqs {
		resp := rc.recv(req, 9, corrs[i]).(*kmsg.ProduceResponse)
		pr := resp.Topics[0].Partitions[0]
		if pr.ErrorCode != 0 || pr.BaseOffset != int64(i) {
			t.Fatalf("produce %d: %v at offset %d, want offset %d", i, kerr.ErrorForCode(pr.ErrorCode), pr.BaseOffset, i)
		}
	}
	// Back on the event loop once the queue is empty.
	if pr := rc.rawProduce("ordered", 0, e2eBatch(t, 0, time.Now().UnixMilli(), -1, -1, -1, "last")); pr.ErrorCode != 0 || pr.BaseOffset != n {
		t.Fatalf("produce after: %v at %d", kerr.ErrorForCode(pr.ErrorCode), pr.BaseOffset)
	}
	got := b.e2eConsume(testCtx(t, 20*time.Second), "ordered", n+1)
	for i, r := range got[:n] {
		if string(r.Value) != fmt.Sprint(i) {
			t.Fatalf("record %d is %q", i, r.Value)
		}
	}
}

// TestNativePipelineKeepsOrder pipelines native produces that auto-create
// a topic and fetches (both off the event loop) on one connection: the
// answers come back in request order and the produces land in it.
func TestNativePipelineKeepsOrder(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 20*time.Second)
	if _, _, err := nativeConn(t, b).Produce(ctx, "existing", 0, recs(3, func(int) []byte { return nil })); err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", b.NativeAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	str := func(b []byte, s string) []byte {
		return append(binary.BigEndian.AppendUint16(b, uint16(len(s))), s...)
	}
	frame := func(key byte, payload []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(1+len(payload))), append([]byte{key}, payload...)...)
	}
	var sent []byte
	var out []byte
	for i := range 10 {
		p := str(nil, "nauto")
		p = binary.BigEndian.AppendUint32(p, 0)                      // partition
		p = binary.BigEndian.AppendUint32(p, 1)                      // one record
		p = binary.BigEndian.AppendUint32(p, 0xffffffff)             // null key
		p = append(binary.BigEndian.AppendUint32(p, 1), byte('0'+i)) // value
		out = append(out, frame(nativeproto.KeyProduce, p)...)
		sent = append(sent, nativeproto.KeyProduce)
		f := str(nil, "existing")
		f = binary.BigEndian.AppendUint32(f, 0)
		f = binary.BigEndian.AppendUint64(f, uint64(i%3))
		f = binary.BigEndian.AppendUint32(f, 1<<20)
		out = append(out, frame(nativeproto.KeyFetch, f)...)
		sent = append(sent, nativeproto.KeyFetch)
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	produced := int64(0)
	for i, key := range sent {
		var hdr [4]byte
		if _, err := io.ReadFull(nc, hdr[:]); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(nc, body); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if body[0] != key || body[1] != nativeproto.CodeOK {
			t.Fatalf("response %d: api key %d code %d, want api key %d, OK", i, body[0], body[1], key)
		}
		switch key {
		case nativeproto.KeyProduce:
			if base := int64(binary.BigEndian.Uint64(body[6:])); base != produced {
				t.Fatalf("produce %d at offset %d", produced, base)
			}
			produced++
		case nativeproto.KeyFetch:
			want := 3 - (i/2)%3
			if got := binary.BigEndian.Uint32(body[2:]); int(got) != want {
				t.Fatalf("fetch %d: %d records, want %d", i/2, got, want)
			}
		}
	}
}
