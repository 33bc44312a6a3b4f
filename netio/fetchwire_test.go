package netio

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// testLogger discards, unless RINGLOG_TEST_LOG is set (as
// brokertest.Logger, which these internal tests cannot import).
func testLogger() *slog.Logger {
	if os.Getenv("RINGLOG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// e2eBatch builds a v2 record batch of values with timestamp ts.
func e2eBatch(t testing.TB, codec batch.Codec, ts int64, pid int64, epoch int16, seq int32, values ...string) []byte {
	t.Helper()
	bld := batch.NewBuilder()
	bld.ProducerID, bld.ProducerEpoch, bld.BaseSequence = pid, epoch, seq
	for _, v := range values {
		bld.Add(ts, nil, []byte(v), nil)
	}
	out, err := bld.Build(nil, codec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wireLog is a real log in a temp dir with nBatches batches of 3 records
// each, in small segments so reads span several files.
func wireLog(t *testing.T, nBatches int) *wal.Log {
	t.Helper()
	l, err := wal.Open(t.TempDir(), wal.Options{SegmentBytes: 1024, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	be := ring.NewPortable()
	t.Cleanup(func() { be.Close() })
	var wb wal.Batch
	for i := 0; i < nBatches; i++ {
		codec := batch.CodecNone
		if i%2 == 1 {
			codec = batch.CodecGzip
		}
		raw := e2eBatch(t, codec, 1700000000000+int64(i), -1, -1, -1,
			fmt.Sprintf("b%d-r0-%0100d", i, i), fmt.Sprintf("b%d-r1", i), fmt.Sprintf("b%d-r2", i))
		if _, err := batch.Validate(raw, batch.Limits{}); err != nil {
			t.Fatal(err)
		}
		if _, err := wb.Append(l, [][]byte{raw}, false); err != nil {
			t.Fatal(err)
		}
		if err := wb.Submit(be); err != nil {
			t.Fatal(err)
		}
		wb.Reset()
	}
	return l
}

// wireRead reads the log from offset into a chunk (released at cleanup).
func wireRead(t *testing.T, l *wal.Log, offset int64, maxBytes int) wal.Chunk {
	t.Helper()
	var c wal.Chunk
	if err := l.Read(&c, offset, maxBytes, l.EndOffset()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	return c
}

// wireBytes concatenates the parts of an encoded response, reading the
// file ranges.
func wireBytes(t *testing.T, parts []part) []byte {
	t.Helper()
	var out []byte
	for _, p := range parts {
		if p.f.File == nil {
			out = append(out, p.b...)
			continue
		}
		buf := make([]byte, p.f.Len)
		if _, err := p.f.File.ReadAt(buf, p.f.Pos); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf...)
	}
	return out
}

// wireRecords decodes record batches and returns "offset=value" strings.
func wireRecords(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	for len(b) > 0 {
		h, err := batch.ParseHeader(b)
		if err != nil || h.Size() > len(b) {
			t.Fatalf("bad batch in records: %v (%d of %d bytes)", err, h.Size(), len(b))
		}
		raw := b[:h.Size()]
		b = b[h.Size():]
		if _, err := batch.CheckStored(raw); err != nil {
			t.Fatalf("batch at %d: %v", h.BaseOffset, err)
		}
		it, _, err := batch.Records(raw, &h, nil)
		if err != nil {
			t.Fatal(err)
		}
		for r := range it.All() {
			out = append(out, fmt.Sprintf("%d=%s", h.BaseOffset+int64(r.OffsetDelta), r.Value))
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
	}
	return out
}

// TestFetchWireAllVersions encodes Fetch responses with encodeFetch for
// every served version (4-17), with records from a real log (several file
// ranges across segments), an empty partition and an error, and decodes
// them with kmsg at that version: every field must come back, and kmsg's
// own encoding of the decoded response must be byte-identical.
func TestFetchWireAllVersions(t *testing.T) {
	l := wireLog(t, 24)
	all := wireRead(t, l, 0, 1<<20)  // every batch
	part := wireRead(t, l, 20, 1500) // from inside batch 6, bounded
	if len(all.Ranges) < 3 {
		t.Fatalf("want a read over several segments, got %d ranges", len(all.Ranges))
	}
	if part.FirstOffset != 18 || part.Bytes == 0 || part.Bytes > 1500+400 {
		t.Fatalf("bounded read: first offset %d, %d bytes", part.FirstOffset, part.Bytes)
	}
	want := map[string][]string{}
	for name, c := range map[string]wal.Chunk{"all": all, "part": part} {
		var raw []byte
		for _, fr := range c.Ranges {
			buf := make([]byte, fr.Len)
			if _, err := fr.File.ReadAt(buf, fr.Pos); err != nil {
				t.Fatal(err)
			}
			raw = append(raw, buf...)
		}
		want[name] = wireRecords(t, raw)
	}
	if len(want["all"]) != 72 || want["all"][0] != "0=b0-r0-"+fmt.Sprintf("%0100d", 0) || want["all"][71] != "71=b23-r2" {
		t.Fatalf("records of the log: %d, first %q", len(want["all"]), want["all"][0])
	}
	if want["part"][0] != "18="+fmt.Sprintf("b6-r0-%0100d", 6) {
		t.Fatalf("bounded read starts with %q", want["part"][0])
	}

	idA := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	idB := [16]byte{0xff, 0xee}
	topics := []fetchTopicResult{
		{name: "alpha", id: idA, parts: []fetchPartResult{
			{partition: 0, hw: 72, lso: 72, logStart: 0, chunk: all},
			{partition: 1, hw: 0, lso: 0, logStart: 0},                                                // empty
			{partition: 7, errCode: kerr.UnknownTopicOrPartition.Code, hw: -1, lso: -1, logStart: -1}, // error
		}},
		{name: "beta", id: idB, parts: []fetchPartResult{
			{partition: 3, hw: 72, lso: 70, logStart: 5, chunk: part},
		}},
		{name: "gamma-empty", id: [16]byte{9}, parts: nil},
	}
	wantRecs := map[string][]string{"alpha/0": want["all"], "beta/3": want["part"]}

	for v := int16(4); v <= 17; v++ {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			r := &request{key: 1, version: v, corr: 0x1234567, flexible: v >= 12}
			wire := wireBytes(t, first(encodeFetch(r, 0, 0, topics, 0, nil)))
			// Copying the small partitions' records (below part's size:
			// beta/3 only; below 1 MiB: all of them) changes how the
			// bytes go out, never which bytes.
			for _, below := range []int64{part.Bytes + 1, 1 << 20} {
				parts, copied := encodeFetch(r, 0, 0, topics, below, nil)
				files := 0
				for _, p := range parts {
					if p.f.File != nil {
						files++
					}
				}
				wantCopied, wantFiles := part.Bytes, len(all.Ranges)
				if below == 1<<20 {
					wantCopied, wantFiles = part.Bytes+all.Bytes, 0
				}
				if copied != wantCopied || files != wantFiles {
					t.Fatalf("copy below %d: %d bytes copied, %d file ranges; want %d and %d", below, copied, files, wantCopied, wantFiles)
				}
				if got := wireBytes(t, parts); !bytes.Equal(got, wire) {
					t.Fatalf("copy below %d: the response differs from the one with file ranges", below)
				}
			}
			body := wireCheckFrame(t, wire, v)
			resp := kmsg.NewPtrFetchResponse()
			resp.SetVersion(v)
			if err := resp.ReadFrom(body); err != nil {
				t.Fatalf("kmsg cannot decode v%d: %v", v, err)
			}
			if again := resp.AppendTo(nil); !bytes.Equal(again, body) {
				t.Fatalf("kmsg re-encodes v%d differently: %d vs %d bytes", v, len(again), len(body))
			}
			if resp.ThrottleMillis != 0 || resp.ErrorCode != 0 || resp.SessionID != 0 {
				t.Fatalf("top level: throttle %d error %d session %d", resp.ThrottleMillis, resp.ErrorCode, resp.SessionID)
			}
			if len(resp.Topics) != len(topics) {
				t.Fatalf("%d topics, want %d", len(resp.Topics), len(topics))
			}
			for i, tr := range resp.Topics {
				wt := topics[i]
				if v <= 12 && tr.Topic != wt.name || v >= 13 && tr.TopicID != wt.id {
					t.Fatalf("topic %d: name %q id %v, want %q %v", i, tr.Topic, tr.TopicID, wt.name, wt.id)
				}
				if v >= 13 && tr.Topic != "" {
					t.Fatalf("v%d carries the topic name %q", v, tr.Topic)
				}
				if len(tr.Partitions) != len(wt.parts) {
					t.Fatalf("topic %s: %d partitions, want %d", wt.name, len(tr.Partitions), len(wt.parts))
				}
				for j, pr := range tr.Partitions {
					wp := wt.parts[j]
					if pr.Partition != wp.partition || pr.ErrorCode != wp.errCode || pr.HighWatermark != wp.hw || pr.LastStableOffset != wp.lso {
						t.Fatalf("%s/%d: partition %d error %d hw %d lso %d", wt.name, wp.partition, pr.Partition, pr.ErrorCode, pr.HighWatermark, pr.LastStableOffset)
					}
					if v >= 5 && pr.LogStartOffset != wp.logStart {
						t.Fatalf("%s/%d: log start %d, want %d", wt.name, wp.partition, pr.LogStartOffset, wp.logStart)
					}
					if len(pr.AbortedTransactions) != 0 {
						t.Fatalf("%s/%d: aborted transactions %v", wt.name, wp.partition, pr.AbortedTransactions)
					}
					if v >= 11 && pr.PreferredReadReplica != -1 {
						t.Fatalf("%s/%d: preferred read replica %d", wt.name, wp.partition, pr.PreferredReadReplica)
					}
					if int64(len(pr.RecordBatches)) != wp.chunk.Bytes {
						t.Fatalf("%s/%d: %d record bytes, want %d", wt.name, wp.partition, len(pr.RecordBatches), wp.chunk.Bytes)
					}
					got := wireRecords(t, pr.RecordBatches)
					w := wantRecs[fmt.Sprintf("%s/%d", wt.name, wp.partition)]
					if fmt.Sprint(got) != fmt.Sprint(w) {
						t.Fatalf("%s/%d: records %v, want %v", wt.name, wp.partition, got, w)
					}
				}
			}
		})
	}
}

// TestFetchWireTopLevelError encodes a response with only a top-level
// error (a fetch session we never gave), for every version that has one.
func TestFetchWireTopLevelError(t *testing.T) {
	for v := int16(7); v <= 17; v++ {
		r := &request{key: 1, version: v, corr: 42, flexible: v >= 12}
		wire := wireBytes(t, first(encodeFetch(r, kerr.FetchSessionIDNotFound.Code, 0, nil, 0, nil)))
		body := wireCheckFrame(t, wire, v)
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(v)
		if err := resp.ReadFrom(body); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if resp.ErrorCode != kerr.FetchSessionIDNotFound.Code || resp.SessionID != 0 || len(resp.Topics) != 0 {
			t.Fatalf("v%d: error %d session %d topics %d", v, resp.ErrorCode, resp.SessionID, len(resp.Topics))
		}
		if again := resp.AppendTo(nil); !bytes.Equal(again, body) {
			t.Fatalf("v%d: kmsg re-encodes differently", v)
		}
	}
}

// wireCheckFrame checks the frame length, correlation id and header tags
// and returns the response body.
func wireCheckFrame(t *testing.T, wire []byte, v int16) []byte {
	t.Helper()
	if len(wire) < 8 {
		t.Fatalf("v%d: %d bytes", v, len(wire))
	}
	if n := binary.BigEndian.Uint32(wire); int(n) != len(wire)-4 {
		t.Fatalf("v%d: frame length %d, have %d bytes after it", v, n, len(wire)-4)
	}
	if corr := binary.BigEndian.Uint32(wire[4:]); corr != 0x1234567 && corr != 42 {
		t.Fatalf("v%d: correlation id %#x", v, corr)
	}
	body := wire[8:]
	if v >= 12 {
		if body[0] != 0 {
			t.Fatalf("v%d: response header has %d tagged fields", v, body[0])
		}
		body = body[1:]
	}
	return body
}

func first[A, B any](a A, _ B) A { return a }

// TestFetchWireOneBuffer: a response whose partitions' records are all
// copied costs its two allocations (the parts and one buffer) whatever
// the partition count: the buffer is sized for every header field and
// copied byte up front, so reading records into it never grows it. (A
// regrown buffer doubled what a tail consumer's fetches allocate.)
func TestFetchWireOneBuffer(t *testing.T) {
	l := wireLog(t, 24)
	small := wireRead(t, l, 20, 1500)
	var ps []fetchPartResult
	for i := int32(0); i < 64; i++ {
		ps = append(ps, fetchPartResult{partition: i, hw: 72, lso: 72, chunk: small,
			readCommitted: i%2 == 0, aborted: []wal.AbortedTxn{{ProducerID: 1, FirstOffset: 2}}})
	}
	topics := []fetchTopicResult{{name: strings.Repeat("t", 249), parts: ps}}
	for _, v := range []int16{4, 12, 13, 17} {
		r := &request{key: 1, version: v, flexible: v >= 12}
		var copied int64
		allocs := testing.AllocsPerRun(20, func() {
			_, copied = encodeFetch(r, 0, 0, topics, 1<<20, nil)
		})
		if copied != 64*small.Bytes {
			t.Fatalf("v%d: copied %d bytes, want %d", v, copied, 64*small.Bytes)
		}
		if allocs > 2 {
			t.Errorf("v%d: %v allocations per response, want 2", v, allocs)
		}
		// With a connection's scratch, the next response reuses its
		// memory: no allocation at all.
		sc := new(fetchScratch)
		encodeFetch(r, 0, 0, topics, 1<<20, sc)
		want := wireBytes(t, first(encodeFetch(r, 0, 0, topics, 1<<20, nil)))
		if allocs := testing.AllocsPerRun(20, func() { encodeFetch(r, 0, 0, topics, 1<<20, sc) }); allocs != 0 {
			t.Errorf("v%d: %v allocations per response with a scratch, want 0", v, allocs)
		}
		if got := wireBytes(t, first(encodeFetch(r, 0, 0, topics, 1<<20, sc))); !bytes.Equal(got, want) {
			t.Fatalf("v%d: a response encoded in a reused scratch differs from a fresh one", v)
		}
	}
}

// TestFetchScratchReset: a scratch handed to the next fetch comes back
// with every result reset (an error code, offsets or an aborted list of
// the last fetch would otherwise leak into its answer) and with its
// memory kept.
func TestFetchScratchReset(t *testing.T) {
	sc := new(fetchScratch)
	sc.resize(2)
	sc.resizeTopic(0, 3)
	sc.resizeTopic(1, 1)
	for i := range sc.topics {
		sc.topics[i].name = "old"
		for j := range sc.topics[i].parts {
			pr := &sc.topics[i].parts[j]
			*pr = fetchPartResult{partition: 9, errCode: 3, hw: 5, lso: 5, logStart: 1, readCommitted: true,
				aborted: append(pr.aborted, wal.AbortedTxn{ProducerID: 1})}
			sc.parts[i][j] = new(engine.Partition)
		}
	}
	// The decoded request: nothing of the last one survives (a v4
	// request has no session id or rack of its own), the topic array's
	// memory does.
	req := sc.request()
	req.SessionID, req.Rack, req.IsolationLevel = 7, "rack", 1
	req.Topics = append(req.Topics, kmsg.FetchRequestTopic{Topic: "t"}, kmsg.FetchRequestTopic{Topic: "u"})
	topics := &req.Topics[0]
	if req = sc.request(); req.SessionID != 0 || req.Rack != "" || req.IsolationLevel != 0 || len(req.Topics) != 0 {
		t.Fatalf("request not emptied: %+v", req)
	}
	if req.Topics = req.Topics[:1]; &req.Topics[0] != topics || req.Topics[0].Topic != "" {
		t.Fatalf("topic array reallocated or not cleared: %+v", req.Topics[0])
	}
	topic0 := &sc.topics[0].parts[0]
	sc.resize(1)
	sc.resizeTopic(0, 2)
	if len(sc.topics) != 1 || len(sc.parts) != 1 || len(sc.topics[0].parts) != 2 || len(sc.parts[0]) != 2 {
		t.Fatalf("resized to %d topics, %d partitions", len(sc.topics), len(sc.topics[0].parts))
	}
	if &sc.topics[0].parts[0] != topic0 {
		t.Fatal("the partition results were reallocated")
	}
	for j, pr := range sc.topics[0].parts {
		if pr.partition != 0 || pr.errCode != 0 || pr.hw != 0 || pr.lso != 0 || pr.logStart != 0 || pr.readCommitted || len(pr.aborted) != 0 {
			t.Fatalf("partition %d not reset: %+v", j, pr)
		}
		if cap(pr.aborted) == 0 {
			t.Fatalf("partition %d: the aborted list's memory was dropped", j)
		}
		if sc.parts[0][j] != nil {
			t.Fatalf("partition %d still points at the last fetch's partition", j)
		}
	}
}

// TestFetchWireIncremental encodes an incremental session's response:
// omitted partitions are absent, a topic whose partitions are all omitted
// is absent, a topic named with no partitions stays, and the session id
// is in the header; kmsg decodes and re-encodes it byte for byte, for
// every version with sessions.
func TestFetchWireIncremental(t *testing.T) {
	topics := []fetchTopicResult{
		{name: "alpha", id: [16]byte{1}, parts: []fetchPartResult{
			{partition: 0, hw: 5, lso: 5, omit: true},
			{partition: 1, hw: 9, lso: 9, logStart: 2},
			{partition: 2, hw: 5, lso: 5, omit: true},
		}},
		{name: "beta", id: [16]byte{2}, parts: []fetchPartResult{
			{partition: 0, hw: 1, omit: true},
		}},
		{name: "gamma", id: [16]byte{3}, parts: []fetchPartResult{
			{partition: 4, errCode: kerr.NotLeaderForPartition.Code, hw: -1, lso: -1, logStart: -1},
		}},
		{name: "delta-empty", id: [16]byte{4}},
	}
	for v := int16(7); v <= 17; v++ {
		r := &request{key: 1, version: v, corr: 42, flexible: v >= 12}
		body := wireCheckFrame(t, wireBytes(t, first(encodeFetch(r, 0, 0x5eed, topics, 0, nil))), v)
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(v)
		if err := resp.ReadFrom(body); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if again := resp.AppendTo(nil); !bytes.Equal(again, body) {
			t.Fatalf("v%d: kmsg re-encodes differently", v)
		}
		var got []string
		for _, rt := range resp.Topics {
			name := rt.Topic
			if v >= 13 {
				name = fmt.Sprint(rt.TopicID[0])
			}
			got = append(got, fmt.Sprintf("%s:%d", name, len(rt.Partitions)))
			for _, rp := range rt.Partitions {
				got = append(got, fmt.Sprintf("%d/%d/%d", rp.Partition, rp.ErrorCode, rp.HighWatermark))
			}
		}
		want := "[alpha:1 1/0/9 gamma:1 4/6/-1 delta-empty:0]"
		if v >= 13 {
			want = "[1:1 1/0/9 3:1 4/6/-1 4:0]"
		}
		if resp.SessionID != 0x5eed || fmt.Sprint(got) != want {
			t.Fatalf("v%d: session %x, topics %v, want %s", v, resp.SessionID, got, want)
		}
	}
}
