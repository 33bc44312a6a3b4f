package netio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/s3test"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/tiered"
	"github.com/ringlog/ringlog/wal"
)

// tieredBroker starts a broker whose tiered storage is store, looking
// for segments to copy every 50 ms and running retention as often.
func tieredBroker(t *testing.T, s3 *s3test.Server) *testBroker {
	t.Helper()
	return startBroker(t, func(c *broker.Config) {
		c.Engine.Tier.Store = s3.Store(t)
		c.Engine.Tier.Interval = 50 * time.Millisecond
		c.Engine.Tier.MaxBackoff = 500 * time.Millisecond
		c.Engine.RetentionCheckInterval = 50 * time.Millisecond
	})
}

func tieredConfigs(localBytes int) map[string]*string {
	s := func(v string) *string { return &v }
	return map[string]*string{
		"remote.storage.enable": s("true"),
		"segment.bytes":         s("65536"),
		"local.retention.bytes": s(fmt.Sprint(localBytes)),
	}
}

// tieredValue is record i's value: distinct, and long enough that the
// log rolls many segments.
// (random bytes, so that the producer's compression does not shrink it).
func tieredValue(i int) []byte {
	v := fmt.Appendf(nil, "record %06d ", i)
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	for len(v) < 230 {
		v = binary.LittleEndian.AppendUint64(v, rng.Uint64())
	}
	return v
}

// produceTiered produces records [from, to) of tieredValue in batches
// of a few records each.
func produceTiered(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, from, to int) {
	t.Helper()
	for i := from; i < to; i += 20 {
		var recs []*kgo.Record
		for j := i; j < min(i+20, to); j++ {
			recs = append(recs, &kgo.Record{Topic: topic, Value: tieredValue(j)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
}

// checkAll consumes the topic from offset 0 and checks every record: in
// order, offsets dense, values as produced.
func checkAll(t *testing.T, ctx context.Context, b *testBroker, topic string, n int) {
	t.Helper()
	recs := b.e2eConsume(ctx, topic, n, kgo.FetchMaxPartitionBytes(64<<10))
	for i, r := range recs[:n] {
		if r.Offset != int64(i) || !bytes.Equal(r.Value, tieredValue(i)) {
			t.Fatalf("record %d: offset %d value %.20q", i, r.Offset, r.Value)
		}
	}
}

// The e2e: a tiered topic with a small local.retention.bytes gets
// ten times that; the copied local segments go, a consumer from offset 0
// reads every record in order with the same bytes, from the store, and
// again after a restart. ListOffsets knows both starts.
func TestTieredStorageEndToEnd(t *testing.T) {
	s3 := s3test.Start(t)
	b := tieredBroker(t, s3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const localBytes = 128 << 10
	b.e2eCreate(ctx, "tiered", 1, tieredConfigs(localBytes))
	cl := b.client()
	// About 10 × local.retention.bytes of records.
	const n = 10 * localBytes / 230
	produceTiered(t, ctx, cl, "tiered", 0, n)

	p := b.e2ePart("tiered", 0)
	l, err := p.Log()
	if err != nil {
		t.Fatal(err)
	}
	e2eWaitFor(t, 20*time.Second, "local segments deleted after their copy", func() bool {
		end, ok := p.RemoteEnd()
		return ok && l.StartOffset() > 0 && l.Size() <= localBytes+64<<10 && end >= l.StartOffset()
	})
	if got := p.LogStartOffset(); got != 0 {
		t.Fatalf("log start offset %d, want 0 (in the store)", got)
	}
	checkAll(t, ctx, b, "tiered", n)

	raw := b.e2eRaw()
	if got := raw.listOffset("tiered", 0, -2); got.Offset != 0 {
		t.Fatalf("earliest: %+v", got)
	}
	// Earliest-local (-4) needs ListOffsets v8; latest-tiered (-5) v9.
	if got := listOffsetAt(t, raw, "tiered", -4, 9); got.Offset != l.StartOffset() {
		t.Fatalf("earliest local: %d, want %d", got.Offset, l.StartOffset())
	}
	end, _ := p.RemoteEnd()
	if got := listOffsetAt(t, raw, "tiered", -5, 9); got.Offset != end-1 {
		t.Fatalf("latest tiered: %d, want %d", got.Offset, end-1)
	}
	// A timestamp before everything finds offset 0, in the store.
	if got := raw.listOffset("tiered", 0, 0); got.ErrorCode != 0 || got.Offset != 0 {
		t.Fatalf("offset for time 0: %+v", got)
	}

	// Each remote segment is in the store once: its log and its index.
	checkObjects(t, s3, b)
	checkLogDirs(t, ctx, b, p, l)

	b.Restart()
	if got := b.e2ePart("tiered", 0).LogStartOffset(); got != 0 {
		t.Fatalf("after restart: log start offset %d, want 0", got)
	}
	checkAll(t, ctx, b, "tiered", n)
	if st, _ := b.Eng.TierStats(); st.Cache.BytesRead == 0 || st.Cache.Misses == 0 {
		t.Fatalf("tier stats %+v", st)
	}
	// Deleting the topic deletes its objects.
	if _, err := b.e2eAdmin().DeleteTopic(ctx, "tiered"); err != nil {
		t.Fatal(err)
	}
	e2eWaitFor(t, 10*time.Second, "the deleted topic's objects to go", func() bool { return len(s3.Keys(t)) == 0 })
}

// checkObjects checks that the store holds exactly the objects of the
// finished segments of every tiered partition's manifest: nothing twice,
// no orphan.
func checkObjects(t *testing.T, s3 *s3test.Server, b *testBroker) {
	t.Helper()
	want := map[string]bool{}
	for _, tp := range b.Eng.Topics() {
		for _, p := range tp.Partitions() {
			l, err := p.Log()
			if err != nil {
				continue
			}
			m, err := tiered.LoadManifest(l.Dir())
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range m.Segments {
				if s.State != tiered.CopyFinished {
					t.Fatalf("%s: segment %d is %s", p, s.Base, s.State)
				}
				keys := tiered.Layout{}.Keys(tp.Name, tp.ID, p.Index, s.Base, s.ID)
				want[keys.Log], want[keys.Index] = true, true
			}
		}
	}
	got := s3.Keys(t)
	if len(got) != len(want) {
		t.Fatalf("the store holds %d objects, the manifests name %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for _, k := range got {
		if !want[k] {
			t.Fatalf("object %s is in no manifest", k)
		}
	}
}

// The store down for a while under load: producers keep going (the local
// log keeps what is not copied), fetches of remote offsets get a
// retriable error or wait, and once the store is back the copies catch
// up and every record is there.
func TestTieredStorageOutage(t *testing.T) {
	outage := 30 * time.Second
	if testing.Short() {
		outage = 3 * time.Second
	}
	s3 := s3test.Start(t)
	b := tieredBroker(t, s3)
	ctx, cancel := context.WithTimeout(context.Background(), outage+90*time.Second)
	defer cancel()
	const localBytes = 64 << 10
	b.e2eCreate(ctx, "out", 1, tieredConfigs(localBytes))
	cl := b.client()
	produceTiered(t, ctx, cl, "out", 0, 1000)
	p := b.e2ePart("out", 0)
	l, _ := p.Log()
	e2eWaitFor(t, 20*time.Second, "a first copy", func() bool { end, ok := p.RemoteEnd(); return ok && end > 0 && l.StartOffset() > 0 })

	s3.SetDown(true)
	copiedBefore, _ := p.RemoteEnd()
	deadline := time.Now().Add(outage)
	n := 1000
	for time.Now().Before(deadline) {
		produceTiered(t, ctx, cl, "out", n, n+200)
		n += 200
		time.Sleep(100 * time.Millisecond)
	}
	if end, _ := p.RemoteEnd(); end != copiedBefore {
		t.Fatalf("copies went on while the store was down: %d -> %d", copiedBefore, end)
	}
	// Uncopied segments stay local, whatever local.retention.bytes says.
	if l.Size() < 4*localBytes {
		t.Fatalf("local log of %d bytes: uncopied segments were deleted", l.Size())
	}
	// A fetch of a remote offset gets a retriable storage error (the
	// first may only start the load).
	raw := b.e2eRaw()
	tid := b.Eng.Topic("out").ID
	var code int16
	e2eWaitFor(t, 10*time.Second, "a storage error for a remote fetch", func() bool {
		code = raw.rawFetch(12, "out", tid, 0, 0).ErrorCode
		return code != 0
	})
	if code != kerr.KafkaStorageError.Code {
		t.Fatalf("remote fetch during the outage: error %d", code)
	}

	s3.SetDown(false)
	e2eWaitFor(t, 60*time.Second, "the copies to catch up", func() bool {
		end, _ := p.RemoteEnd()
		return end > copiedBefore && l.Size() <= localBytes+64<<10
	})
	checkAll(t, ctx, b, "out", n)
	checkObjects(t, s3, b)
}

// The topic configs Kafka refuses with tiered storage, and a broker
// without a store refusing it at all.
func TestTieredStorageConfigs(t *testing.T) {
	s3 := s3test.Start(t)
	b := tieredBroker(t, s3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := b.e2eAdmin()
	s := func(v string) *string { return &v }
	for name, cfg := range map[string]map[string]*string{
		"compacted":   {"remote.storage.enable": s("true"), "cleanup.policy": s("compact")},
		"local-bytes": {"remote.storage.enable": s("true"), "retention.bytes": s("1000000"), "local.retention.bytes": s("2000000")},
		"local-ms":    {"remote.storage.enable": s("true"), "retention.ms": s("1000"), "local.retention.ms": s("2000")},
	} {
		r, err := adm.CreateTopic(ctx, 1, 1, cfg, name)
		if err == nil {
			err = r.Err
		}
		if err != kerr.InvalidConfig {
			t.Errorf("%s: %v, want INVALID_CONFIG", name, err)
		}
	}
	b.e2eCreate(ctx, "t", 1, map[string]*string{"remote.storage.enable": s("true")})
	// Once on, it stays on.
	r, err := adm.AlterTopicConfigs(ctx, []kadmAlter{{Name: "remote.storage.enable", Value: s("false")}}, "t")
	if err == nil {
		err = r[0].Err
	}
	if err != kerr.InvalidConfig {
		t.Errorf("turning tiering off: %v, want INVALID_CONFIG", err)
	}

	plain := startBroker(t)
	r2, err := plain.e2eAdmin().CreateTopic(ctx, 1, 1, map[string]*string{"remote.storage.enable": s("true")}, "t")
	if err == nil {
		err = r2.Err
	}
	if err != kerr.InvalidConfig {
		t.Errorf("a broker without a store: %v, want INVALID_CONFIG", err)
	}
}

type kadmAlter = kadm.AlterConfig

// listOffsetAt asks ListOffsets at version v for partition 0 and ts.
func listOffsetAt(t *testing.T, r *e2eConn, topic string, ts int64, v int16) kmsg.ListOffsetsResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp, rp.CurrentLeaderEpoch = ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := r.do(req, v).(*kmsg.ListOffsetsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("list offsets response has %d topics", len(resp.Topics))
	}
	got := resp.Topics[0].Partitions[0]
	if got.ErrorCode != 0 {
		t.Fatalf("list offsets %d: error %d", ts, got.ErrorCode)
	}
	return got
}

// read_committed over remote segments: the aborted transactions of
// segments that are only in the store still hide their records.
func TestTieredReadCommitted(t *testing.T) {
	s3 := s3test.Start(t)
	b := tieredBroker(t, s3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := func(v string) *string { return &v }
	b.e2eCreate(ctx, "txn", 1, map[string]*string{
		"remote.storage.enable": s("true"), "segment.bytes": s("16384"), "local.retention.bytes": s("16384"),
	})
	prod := b.client(kgo.TransactionalID("tiered-txn"), kgo.DefaultProduceTopic("txn"))
	var want []string
	for k := range 40 {
		var vals []string
		for j := range 20 {
			vals = append(vals, string(tieredValue(k*20+j)))
		}
		commit := k%3 != 1
		txnProduce(t, ctx, prod, "txn", commit, vals...)
		if commit {
			want = append(want, vals...)
		}
	}
	p := b.e2ePart("txn", 0)
	l, _ := p.Log()
	e2eWaitFor(t, 20*time.Second, "most transactions to live only in the store", func() bool {
		return l.StartOffset() > l.EndOffset()/2
	})
	got := b.e2eConsume(ctx, "txn", len(want), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxPartitionBytes(8<<10))
	for i, r := range got {
		if i >= len(want) || string(r.Value) != want[i] {
			t.Fatalf("read_committed record %d (offset %d) is not the %dth committed value", i, r.Offset, i)
		}
	}
}

// A store that damaged a segment's bytes: the fetch of those offsets
// gets KAFKA_STORAGE_ERROR (the bytes are never sent), the broker keeps
// serving, and the local part of the log still reads.
func TestTieredDamagedObject(t *testing.T) {
	s3 := s3test.Start(t)
	b := tieredBroker(t, s3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b.e2eCreate(ctx, "bad", 1, tieredConfigs(64<<10))
	produceTiered(t, ctx, b.client(), "bad", 0, 2000)
	p := b.e2ePart("bad", 0)
	l, _ := p.Log()
	e2eWaitFor(t, 20*time.Second, "copies and local deletion", func() bool { return l.StartOffset() > 0 })
	var logKey, ixKey string
	for _, k := range s3.Keys(t) {
		if strings.Contains(k, "/00000000000000000000-") {
			if strings.HasSuffix(k, ".log") {
				logKey = k
			} else {
				ixKey = k
			}
		}
	}
	obj := s3.Object(t, logKey)
	obj[len(obj)/2] ^= 0xff // inside some batch
	s3.Replace(t, logKey, obj)
	raw := b.e2eRaw()
	tid := b.Eng.Topic("bad").ID
	// Read the segment batch by batch until the damaged one.
	var code int16
	for off := int64(0); off < l.StartOffset(); {
		var fp kmsg.FetchResponseTopicPartition
		e2eWaitFor(t, 10*time.Second, "an answer with records or an error", func() bool {
			fp = raw.rawFetch(12, "bad", tid, 0, off)
			return fp.ErrorCode != 0 || len(fp.RecordBatches) > 0
		})
		if code = fp.ErrorCode; code != 0 {
			break
		}
		var last int64
		for rest := fp.RecordBatches; len(rest) >= 61; {
			var rb kmsg.RecordBatch
			if err := rb.ReadFrom(rest); err != nil {
				t.Fatalf("offset %d: a damaged batch was sent: %v", off, err)
			}
			if crcOK := rb.CRC == int32(crc32.Checksum(rest[21:12+rb.Length], crc32.MakeTable(crc32.Castagnoli))); !crcOK {
				t.Fatalf("offset %d: a batch with a bad CRC was sent", rb.FirstOffset)
			}
			last = rb.FirstOffset + int64(rb.LastOffsetDelta)
			rest = rest[12+rb.Length:]
		}
		off = last + 1
	}
	if code != kerr.KafkaStorageError.Code {
		t.Fatalf("the damaged segment was read through (error %d)", code)
	}
	// An index object of garbage: also a storage error, no crash.
	s3.Replace(t, ixKey, []byte("RLRX not an index"))
	b.Restart() // forgets the decoded index
	raw = b.e2eRaw()
	e2eWaitFor(t, 10*time.Second, "a storage error for a garbage index", func() bool {
		return raw.rawFetch(12, "bad", tid, 0, 0).ErrorCode == kerr.KafkaStorageError.Code
	})
	// The local part of the log is fine.
	if fp := raw.rawFetch(12, "bad", tid, 0, l.EndOffset()-1); fp.ErrorCode != 0 || len(fp.RecordBatches) == 0 {
		t.Fatalf("local read after the damage: error %d, %d bytes", fp.ErrorCode, len(fp.RecordBatches))
	}
}

// checkLogDirs checks DescribeLogDirs: one directory, the data
// directory, the partition's local bytes (kadm), and its remote bytes in
// ringlog's tagged field (raw, v4).
func checkLogDirs(t *testing.T, ctx context.Context, b *testBroker, p *engine.Partition, l *wal.Log) {
	t.Helper()
	dirs, err := b.e2eAdmin().DescribeAllLogDirs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	dirs.Each(func(d kadm.DescribedLogDir) {
		got = append(got, d.Dir)
		if d.Err != nil || d.Dir != b.Eng.LogDir().Path {
			t.Errorf("log dir %q: %v; want %q", d.Dir, d.Err, b.Eng.LogDir().Path)
		}
		if size := d.Topics["tiered"][0].Size; size != l.Size() {
			t.Errorf("partition size %d, want %d", size, l.Size())
		}
		if d.TotalBytes <= 0 || d.UsableBytes <= 0 || d.UsableBytes > d.TotalBytes {
			t.Errorf("total %d, usable %d", d.TotalBytes, d.UsableBytes)
		}
	})
	if len(got) != 1 {
		t.Fatalf("log dirs %v", got)
	}
	req := kmsg.NewPtrDescribeLogDirsRequest()
	req.Version = 4
	rt := kmsg.NewDescribeLogDirsRequestTopic()
	rt.Topic, rt.Partitions = "tiered", []int32{0}
	req.Topics = append(req.Topics, rt)
	resp := b.e2eRaw().do(req, 4).(*kmsg.DescribeLogDirsResponse)
	st, _ := p.RemoteStatus()
	var remote int64 = -1
	resp.Dirs[0].Topics[0].Partitions[0].UnknownTags.Each(func(k uint32, v []byte) {
		if k == netio.RemoteBytesTag && len(v) == 8 {
			remote = int64(binary.BigEndian.Uint64(v))
		}
	})
	if remote <= 0 || remote != st.Bytes {
		t.Fatalf("remote bytes %d in the tagged field, want %d", remote, st.Bytes)
	}
}
