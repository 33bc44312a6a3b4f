package netio_test

// Helpers shared by the end-to-end tests (e2e_*_test.go): a raw Kafka
// connection for hand-built requests, an admin client, consuming helpers,
// and a response-dropping TCP proxy.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/wal/batch"
)

// e2eConn is one plain TCP connection speaking the Kafka protocol with
// requests encoded by kmsg at exactly the version the test picks.
type e2eConn struct {
	t    testing.TB
	c    net.Conn
	corr int32
	f    *kmsg.RequestFormatter
}

func (b *testBroker) e2eRaw() *e2eConn {
	b.t.Helper()
	c, err := net.DialTimeout("tcp", b.Addr, 5*time.Second)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { c.Close() })
	return &e2eConn{t: b.t, c: c, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test"))}
}

// send writes req at version v and returns its correlation id.
func (r *e2eConn) send(req kmsg.Request, v int16) int32 {
	r.t.Helper()
	req.SetVersion(v)
	r.corr++
	frame := r.f.AppendRequest(nil, req, r.corr)
	r.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.c.Write(frame); err != nil {
		r.t.Fatalf("write %T v%d: %v", req, v, err)
	}
	return r.corr
}

// recv reads the response to req (sent at v with correlation id corr).
func (r *e2eConn) recv(req kmsg.Request, v int16, corr int32) kmsg.Response {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(r.c, hdr[:]); err != nil {
		r.t.Fatalf("read %T v%d response: %v", req, v, err)
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(r.c, body); err != nil {
		r.t.Fatalf("read %T v%d response: %v", req, v, err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corr {
		r.t.Fatalf("%T v%d: correlation id %d, want %d", req, v, got, corr)
	}
	body = body[4:]
	if req.IsFlexible() && req.Key() != 18 {
		rest, ok := skipTags(body)
		if !ok {
			r.t.Fatalf("%T v%d: bad response header tags", req, v)
		}
		body = rest
	}
	resp := req.ResponseKind()
	resp.SetVersion(v)
	if err := resp.ReadFrom(body); err != nil {
		r.t.Fatalf("decode %T v%d: %v", resp, v, err)
	}
	return resp
}

// do sends req at version v and waits for its response.
func (r *e2eConn) do(req kmsg.Request, v int16) kmsg.Response {
	r.t.Helper()
	return r.recv(req, v, r.send(req, v))
}

// rawProduce sends one produce of records to topic/partition (acks -1,
// Produce v9) and returns the partition's answer.
func (r *e2eConn) rawProduce(topic string, partition int32, records []byte) kmsg.ProduceResponseTopicPartition {
	r.t.Helper()
	resp := r.do(produceRequest(topic, partition, -1, records), 9).(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		r.t.Fatalf("produce response has %d topics", len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0]
}

// produceRequest is a Produce of records to one partition with acks and
// a 10 s timeout.
func produceRequest(topic string, partition int32, acks int16, records []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = acks
	req.TimeoutMillis = 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// rawFetch fetches one partition once (no waiting) at version v, by name
// (v<13) or by id.
func (r *e2eConn) rawFetch(v int16, topic string, id [16]byte, partition int32, offset int64) kmsg.FetchResponseTopicPartition {
	r.t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = 1 << 20
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = partition
	rp.FetchOffset = offset
	rp.PartitionMaxBytes = 1 << 20
	rp.CurrentLeaderEpoch = -1
	rp.LogStartOffset = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := r.do(req, v).(*kmsg.FetchResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		r.t.Fatalf("fetch response has %d topics", len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0]
}

// listOffset asks ListOffsets (v7) for one partition and timestamp.
func (r *e2eConn) listOffset(topic string, partition int32, ts int64) kmsg.ListOffsetsResponseTopicPartition {
	r.t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = partition
	rp.Timestamp = ts
	rp.CurrentLeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := r.do(req, 7).(*kmsg.ListOffsetsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		r.t.Fatalf("list offsets response has %d topics", len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0]
}

// e2eBatch builds a v2 record batch of values with timestamp ts
// (fetchwire_test.go, shared with the internal tests).
var e2eBatch = netio.E2EBatch

// admin returns a kadm client on a fresh kgo client of the broker.
func (b *testBroker) e2eAdmin() *kadm.Client {
	b.t.Helper()
	return kadm.NewClient(b.client())
}

// createTopic creates a topic with kadm and fails the test on error.
func (b *testBroker) e2eCreate(ctx context.Context, name string, partitions int32, configs map[string]*string) kadm.CreateTopicResponse {
	b.t.Helper()
	resp, err := b.e2eAdmin().CreateTopic(ctx, partitions, 1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		b.t.Fatalf("create topic %s: %v (%s)", name, err, resp.ErrMessage)
	}
	return resp
}

// partition returns the engine's partition, failing the test if missing.
func (b *testBroker) e2ePart(topic string, p int32) *engine.Partition {
	b.t.Helper()
	tp := b.Eng.Topic(topic)
	if tp == nil {
		b.t.Fatalf("topic %s does not exist", topic)
	}
	part := tp.Partition(p)
	if part == nil {
		b.t.Fatalf("partition %s-%d does not exist", topic, p)
	}
	return part
}

// e2eHeaders returns the header of every batch stored in a partition.
func (b *testBroker) e2eHeaders(topic string, p int32) []batch.Header {
	b.t.Helper()
	l, err := b.e2ePart(topic, p).Log()
	if err != nil {
		b.t.Fatal(err)
	}
	var hs []batch.Header
	if err := l.ScanHeaders(l.StartOffset(), func(h *batch.Header) error {
		hs = append(hs, *h)
		return nil
	}); err != nil {
		b.t.Fatal(err)
	}
	return hs
}

// e2eSegments lists the .log files of a partition's directory.
func (b *testBroker) e2eSegments(topic string, p int32) []string {
	b.t.Helper()
	ents, err := os.ReadDir(filepath.Join(b.dir, fmt.Sprintf("%s-%d", topic, p)))
	if err != nil {
		b.t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			out = append(out, e.Name())
		}
	}
	return out
}

// e2ePoll polls cl until it has n records (failing on fetch errors or
// when ctx ends) and returns them in the order they were delivered.
func e2ePoll(t testing.TB, ctx context.Context, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("got %d of %d records before the deadline: %v", len(out), n, ctx.Err())
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("fetch error on %s-%d: %v", fe.Topic, fe.Partition, fe.Err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// e2eConsume consumes topic from the start with a fresh client until n
// records arrive.
func (b *testBroker) e2eConsume(ctx context.Context, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	b.t.Helper()
	opts = append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)
	return e2ePoll(b.t, ctx, b.client(opts...), n)
}

// e2eProduceFlushed produces recs with a client made with
// kgo.ManualFlushing, then flushes: records of one partition go out as one
// batch (up to the batch size limit), whatever the timing.
func e2eProduceFlushed(t testing.TB, ctx context.Context, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	var mu sync.Mutex
	var first error
	for _, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if first != nil {
		t.Fatal(first)
	}
}

// e2eProduceFrameBatches decodes a produce request frame (as the proxy
// sees it: length, header, body) and returns each partition's record
// batches, by "topic/partition", split into single batches. It runs on
// the proxy's goroutines, so it reports problems with t.Errorf.
func e2eProduceFrameBatches(t testing.TB, f []byte) map[string][][]byte {
	ver := int16(binary.BigEndian.Uint16(f[6:]))
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(ver)
	body := f[12:]
	idLen := int16(binary.BigEndian.Uint16(body))
	body = body[2:]
	if idLen > 0 {
		body = body[idLen:]
	}
	if req.IsFlexible() {
		rest, ok := skipTags(body)
		if !ok {
			t.Errorf("bad produce header tags")
			return nil
		}
		body = rest
	}
	if err := req.ReadFrom(body); err != nil {
		t.Errorf("decode produce v%d: %v", ver, err)
		return nil
	}
	out := map[string][][]byte{}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			bs, err := batch.Split(rp.Records, nil)
			if err != nil {
				t.Errorf("produce v%d records: %v", ver, err)
				return nil
			}
			k := fmt.Sprintf("%s/%d", rt.Topic, rp.Partition)
			for _, b := range bs {
				out[k] = append(out[k], append([]byte(nil), b...))
			}
		}
	}
	return out
}

// e2eHistCount is a histogram's sample count.
func e2eHistCount(t testing.TB, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// e2eMetric reads a counter of the broker's registry by name and the
// value of its one label (0 when absent).
func e2eMetric(t testing.TB, b *testBroker, name, label string) float64 {
	t.Helper()
	mfs, err := b.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// e2eWaitFor polls cond every 10 ms until it holds or d passes.
func e2eWaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, d, what, cond)
}

// e2eDropProxy forwards Kafka connections to a broker, and for chosen
// produce requests (by their order of arrival over all connections, from
// 1) lets the broker handle the request but drops its response and cuts
// the connection: the client must retry a request that was applied.
type e2eDropProxy struct {
	t      testing.TB
	ln     net.Listener
	target string
	dropAt map[int]bool
	// onProduce, if set, sees every produce request frame on its way to
	// the broker (set before start).
	onProduce func(frame []byte)

	mu       sync.Mutex
	produces int
	dropped  int
	conns    []net.Conn
}

func newE2EDropProxy(t testing.TB, dropAt ...int) *e2eDropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &e2eDropProxy{t: t, ln: ln, dropAt: map[int]bool{}}
	for _, n := range dropAt {
		p.dropAt[n] = true
	}
	t.Cleanup(p.close)
	return p
}

func (p *e2eDropProxy) addr() string { return p.ln.Addr().String() }

// start forwards accepted connections to target.
func (p *e2eDropProxy) start(target string) {
	p.target = target
	go func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
}

func (p *e2eDropProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

func (p *e2eDropProxy) stats() (produces, dropped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.produces, p.dropped
}

func e2eReadFrame(c net.Conn) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 4 || n > 200<<20 {
		return nil, errors.New("bad frame size")
	}
	f := make([]byte, 4+n)
	copy(f, hdr[:])
	_, err := io.ReadFull(c, f[4:])
	return f, err
}

func (p *e2eDropProxy) serve(client net.Conn) {
	broker, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, client, broker)
	p.mu.Unlock()
	var doomedMu sync.Mutex
	doomed := map[int32]bool{}
	kill := func() { client.Close(); broker.Close() }
	go func() { // client -> broker
		defer kill()
		for {
			f, err := e2eReadFrame(client)
			if err != nil {
				return
			}
			key := int16(binary.BigEndian.Uint16(f[4:]))
			corr := int32(binary.BigEndian.Uint32(f[8:]))
			if key == 0 && p.onProduce != nil {
				p.onProduce(f)
			}
			if key == 0 {
				p.mu.Lock()
				p.produces++
				drop := p.dropAt[p.produces]
				p.mu.Unlock()
				if drop {
					doomedMu.Lock()
					doomed[corr] = true
					doomedMu.Unlock()
				}
			}
			if _, err := broker.Write(f); err != nil {
				return
			}
		}
	}()
	go func() { // broker -> client
		defer kill()
		for {
			f, err := e2eReadFrame(broker)
			if err != nil {
				return
			}
			corr := int32(binary.BigEndian.Uint32(f[4:]))
			doomedMu.Lock()
			drop := doomed[corr]
			doomedMu.Unlock()
			if drop {
				p.mu.Lock()
				p.dropped++
				p.mu.Unlock()
				return // the response is lost with the connection
			}
			if _, err := client.Write(f); err != nil {
				return
			}
		}
	}()
}
