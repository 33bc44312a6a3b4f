package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// keyedBatch builds a batch of records with the given keys and values (a
// nil value is a tombstone).
func keyedBatch(t testing.TB, ts int64, kvs ...[2]*string) []byte {
	t.Helper()
	b := batch.NewBuilder()
	for _, kv := range kvs {
		var k, v []byte
		if kv[0] != nil {
			k = []byte(*kv[0])
		}
		if kv[1] != nil {
			v = []byte(*kv[1])
		}
		b.Add(ts, k, v, nil)
	}
	out, err := b.Build(nil, batch.CodecLZ4)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func s(v string) *string { return &v }

// readMap reads the log from the start and returns key -> (value, offset)
// of the newest record per key, also checking offsets only grow.
func readMap(t *testing.T, l *Log) (map[string]string, int) {
	t.Helper()
	buf, err := l.ReadBytes(nil, l.StartOffset(), 1<<30, l.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	records := 0
	last := int64(-1)
	for len(buf) > 0 {
		n := int(batch.BatchLength(buf)) + batch.LogOverhead
		h, err := batch.CheckStored(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		it, _, err := batch.Records(buf[:n], &h, nil)
		if err != nil {
			t.Fatal(err)
		}
		for r := range it.All() {
			off := h.BaseOffset + int64(r.OffsetDelta)
			if off <= last {
				t.Fatalf("offset %d after %d", off, last)
			}
			last = off
			records++
			if r.Value == nil {
				delete(m, string(r.Key))
			} else {
				m[string(r.Key)] = string(r.Value)
			}
		}
		buf = buf[n:]
	}
	return m, records
}

func compactNow(t *testing.T, l *Log, o CompactOptions) CompactionStats {
	t.Helper()
	p := l.PlanCompaction(o)
	if p == nil {
		return CompactionStats{}
	}
	if err := p.Build(); err != nil {
		p.Abort()
		t.Fatal(err)
	}
	st, err := l.InstallCompaction(p)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestCompactionKeepsNewestPerKey(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	clk := newFakeClock()
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 2000, MaxIndexBytes: 1 << 16, Now: clk.Now})
	want := map[string]string{}
	for i := 0; i < 200; i++ {
		k := fmt.Sprintf("k%d", i%7)
		v := fmt.Sprintf("v%d", i)
		appendOne(t, l, be, keyedBatch(t, clk.Now().UnixMilli(), [2]*string{&k, &v}), false)
		want[k] = v
	}
	end := l.EndOffset()
	before, beforeRecords := readMap(t, l)
	size := l.Size()
	st := compactNow(t, l, CompactOptions{})
	if st.Segments == 0 || st.RecordsPruned == 0 {
		t.Fatalf("nothing compacted: %+v", st)
	}
	after, afterRecords := readMap(t, l)
	if fmt.Sprint(after) != fmt.Sprint(before) || fmt.Sprint(after) != fmt.Sprint(want) {
		t.Fatalf("map changed by compaction:\nbefore %v\nafter  %v", before, after)
	}
	if afterRecords >= beforeRecords || l.Size() >= size {
		t.Fatalf("records %d -> %d, bytes %d -> %d", beforeRecords, afterRecords, size, l.Size())
	}
	if l.EndOffset() != end {
		t.Fatalf("end offset moved %d -> %d", end, l.EndOffset())
	}
	// Appends continue at the same offset, and every offset still reads.
	res := appendOne(t, l, be, keyedBatch(t, 1, [2]*string{s("k0"), s("new")}), false)
	if res.BaseOffset != end {
		t.Fatalf("append after compaction at %d, want %d", res.BaseOffset, end)
	}
	for off := l.StartOffset(); off < l.EndOffset(); off += 13 {
		var c Chunk
		if err := l.Read(&c, off, 1, l.EndOffset()); err != nil || c.Bytes == 0 || c.NextOffset <= off {
			t.Fatalf("read at %d: %d bytes next %d %v", off, c.Bytes, c.NextOffset, err)
		}
		c.Release()
	}
	// The compacted log reopens (clean and unclean) with the same content.
	l.Close()
	for _, clean := range []bool{true, false} {
		if !clean {
			os.Remove(filepath.Join(dir, recoveryPointFile))
		}
		l2 := openLog(t, dir, Options{SegmentBytes: 2000, MaxIndexBytes: 1 << 16, Clean: clean, Now: clk.Now})
		m, _ := readMap(t, l2)
		want["k0"] = "new"
		if fmt.Sprint(m) != fmt.Sprint(want) || l2.EndOffset() != end+1 {
			t.Fatalf("reopen clean=%v: %v end %d", clean, m, l2.EndOffset())
		}
		l2.Close()
	}
}

func TestCompactionTombstones(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	clk := newFakeClock()
	l := openLog(t, t.TempDir(), Options{SegmentBytes: 1000, MaxIndexBytes: 1 << 16, Now: clk.Now})
	defer l.Close()
	for i := 0; i < 30; i++ {
		appendOne(t, l, be, keyedBatch(t, clk.Now().UnixMilli(), [2]*string{s(fmt.Sprintf("k%d", i%3)), s("x")}), false)
	}
	appendOne(t, l, be, keyedBatch(t, clk.Now().UnixMilli(), [2]*string{s("k1"), nil}), false)
	for i := 0; i < 30; i++ { // push the tombstone out of the active segment
		appendOne(t, l, be, keyedBatch(t, clk.Now().UnixMilli(), [2]*string{s("filler"), s("y")}), false)
	}
	opts := CompactOptions{DeleteRetention: time.Hour}
	compactNow(t, l, opts)
	_, n1 := readMap(t, l)
	if !hasTombstone(t, l, "k1") {
		t.Fatal("the tombstone was removed before delete.retention.ms")
	}
	clk.Advance(2 * time.Hour)
	appendOne(t, l, be, keyedBatch(t, clk.Now().UnixMilli(), [2]*string{s("filler"), s("z")}), false)
	for i := 0; i < 20; i++ {
		appendOne(t, l, be, keyedBatch(t, clk.Now().UnixMilli(), [2]*string{s("f2"), s("z")}), false)
	}
	// Every segment is dirty again only partly; force the pass.
	l.cleanedTo = 0
	compactNow(t, l, opts)
	if hasTombstone(t, l, "k1") {
		t.Fatal("the tombstone survived delete.retention.ms")
	}
	m, n2 := readMap(t, l)
	if _, ok := m["k1"]; ok || m["k0"] != "x" || m["k2"] != "x" {
		t.Fatalf("map after tombstone removal: %v", m)
	}
	if n2 >= n1+21 {
		t.Fatalf("records %d -> %d", n1, n2)
	}
}

func hasTombstone(t *testing.T, l *Log, key string) bool {
	buf, err := l.ReadBytes(nil, l.StartOffset(), 1<<30, l.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	for len(buf) > 0 {
		n := int(batch.BatchLength(buf)) + batch.LogOverhead
		h, _ := batch.CheckStored(buf[:n])
		it, _, _ := batch.Records(buf[:n], &h, nil)
		for r := range it.All() {
			if string(r.Key) == key && r.Value == nil {
				return true
			}
		}
		buf = buf[n:]
	}
	return false
}

func TestCompactionKeepsProducerLastBatch(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	l := openLog(t, t.TempDir(), Options{SegmentBytes: 600, MaxIndexBytes: 1 << 16})
	defer l.Close()
	// Producer 7 writes k=a once, then others overwrite it.
	b := batch.NewBuilder()
	b.ProducerID, b.ProducerEpoch, b.BaseSequence = 7, 0, 0
	b.Add(1, []byte("a"), []byte("from-7"), nil)
	data, _ := b.Build(nil, batch.CodecNone)
	appendOne(t, l, be, data, false)
	for i := 0; i < 40; i++ {
		appendOne(t, l, be, keyedBatch(t, 1, [2]*string{s("a"), s(fmt.Sprint(i))}), false)
	}
	compactNow(t, l, CompactOptions{})
	found := false
	l.ScanHeaders(0, func(h *batch.Header) error {
		if h.ProducerID == 7 {
			found = h.RecordCount == 0 && h.BaseSequence == 0
		}
		return nil
	})
	if !found {
		t.Fatal("the producer's last batch was not kept (empty) by compaction")
	}
}

func TestCompactionSwapCompletesAfterCrash(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 800, MaxIndexBytes: 1 << 16})
	for i := 0; i < 60; i++ {
		appendOne(t, l, be, keyedBatch(t, 1, [2]*string{s(fmt.Sprintf("k%d", i%4)), s(fmt.Sprint(i))}), false)
	}
	want, _ := readMap(t, l)
	end := l.EndOffset()
	p := l.PlanCompaction(CompactOptions{})
	if err := p.Build(); err != nil {
		t.Fatal(err)
	}
	// Simulate a crash right after the commit point: the first group's
	// .cleaned became .swap, nothing else happened.
	g := p.groups[0]
	swap := filepath.Join(dir, segmentName(g.srcs[0].base, logSuffix)+swapSuffix)
	if err := os.Rename(g.path, swap); err != nil {
		t.Fatal(err)
	}
	g.path = ""
	p.Abort()
	l.Close()
	os.Remove(filepath.Join(dir, recoveryPointFile))
	l2 := openLog(t, dir, Options{SegmentBytes: 800, MaxIndexBytes: 1 << 16})
	defer l2.Close()
	got, _ := readMap(t, l2)
	if fmt.Sprint(got) != fmt.Sprint(want) || l2.EndOffset() != end {
		t.Fatalf("after an interrupted swap: %v end %d, want %v end %d", got, l2.EndOffset(), want, end)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*"+swapSuffix)); len(m) != 0 {
		t.Fatalf("swap files left: %v", m)
	}
}
