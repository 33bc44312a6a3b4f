package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// newest is what compaction must keep of one key: its last write.
type newest struct {
	offset int64
	value  []byte // nil: deleted (tombstone)
}

// compactedTopic creates a one-partition compacted topic with small
// segments and the given extra configs.
func compactedTopic(t *testing.T, e *Engine, name string, extra map[string]string) *Partition {
	t.Helper()
	cfg := map[string]string{"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}
	for k, v := range extra {
		cfg[k] = v
	}
	top, err := e.CreateTopic(CreateTopicRequest{Name: name, Partitions: 1, ReplicationFactor: 1, Configs: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return top.Partition(0)
}

// writeKeys appends recs in batches of 10, stamped ts, and records the
// newest offset of each key in want.
func writeKeys(t *testing.T, p *Partition, ts int64, recs []rec, want map[string]newest) {
	t.Helper()
	for len(recs) > 0 {
		n := min(10, len(recs))
		base := appendOK(t, p, buildBatch(t, ts, -1, 0, 0, recs[:n]...))
		for i, r := range recs[:n] {
			want[string(r.key)] = newest{base + int64(i), r.value}
		}
		recs = recs[n:]
	}
}

// checkCompacted reads the log and checks that every key's newest record
// is there at its original offset, and that no older record of a key in
// strict is left. Deleted keys must be gone when tombstonesGone.
func checkCompacted(t *testing.T, p *Partition, want map[string]newest, strict func(key string) bool, tombstonesGone bool) int {
	t.Helper()
	found := map[string]bool{}
	recs := readLog(t, p)
	for _, r := range recs {
		k := string(r.Key)
		w, ok := want[k]
		if !ok {
			t.Fatalf("offset %d: unknown key %q", r.Offset, k)
		}
		if r.Offset != w.offset {
			if strict(k) {
				t.Fatalf("key %q: an old record at offset %d survived (newest at %d)", k, r.Offset, w.offset)
			}
			continue
		}
		if string(r.Value) != string(w.value) || (r.Value == nil) != (w.value == nil) {
			t.Fatalf("key %q at %d: value %q, want %q", k, r.Offset, r.Value, w.value)
		}
		found[k] = true
	}
	for k, w := range want {
		switch {
		case w.value == nil && tombstonesGone:
			if found[k] {
				t.Fatalf("key %q: the tombstone outlived delete.retention.ms", k)
			}
		case !found[k]:
			t.Fatalf("key %q: its newest record (offset %d) is gone", k, w.offset)
		}
	}
	return len(recs)
}

// The cleaner keeps the newest record of every key at its original
// offset, removes the rest from sealed segments, honours
// min.compaction.lag.ms and delete.retention.ms on the engine's clock,
// and what it did survives a restart.
func TestCleanerKeepsNewestPerKey(t *testing.T) {
	dir := t.TempDir()
	clock := newTestClock(time.Unix(1_700_000_000, 0))
	e := openEngine(t, dir, clock.config())
	p := compactedTopic(t, e, "kv", map[string]string{
		"min.compaction.lag.ms": fmt.Sprint((10 * time.Minute).Milliseconds()),
		"delete.retention.ms":   fmt.Sprint(time.Hour.Milliseconds()),
	})
	want := map[string]newest{}
	const keys, rounds = 100, 8
	for round := 0; round < rounds; round++ {
		var recs []rec
		for k := 0; k < keys; k++ {
			recs = append(recs, pair(fmt.Sprintf("key-%03d", k), fmt.Sprintf("r%d-%d", round, k)))
		}
		writeKeys(t, p, clock.UnixMilli(), recs, want)
	}
	var dead []rec
	for k := 0; k < keys; k += 10 {
		dead = append(dead, tombstone(fmt.Sprintf("key-%03d", k)))
	}
	writeKeys(t, p, clock.UnixMilli(), dead, want)
	// Padding under its own key pushes every key's last write out of the
	// active segment, which is never cleaned.
	pad := func() {
		var recs []rec
		for i := 0; i < 60; i++ {
			recs = append(recs, pair("pad", fmt.Sprintf("pad-%d-%0100d", clock.UnixMilli(), i)))
		}
		writeKeys(t, p, clock.UnixMilli(), recs, want)
	}
	pad()
	l, _ := p.Log()
	end, size, segs := l.EndOffset(), l.Size(), l.SegmentCount()
	if segs < 5 {
		t.Fatalf("%d segments: the test needs many rolled ones", segs)
	}
	notPad := func(k string) bool { return k != "pad" }

	// Everything is younger than min.compaction.lag.ms: nothing to do.
	if st := e.CompactNow(); st.Segments != 0 || l.Size() != size {
		t.Fatalf("compacted records younger than the lag: %+v", st)
	}

	clock.Advance(20 * time.Minute)
	st := e.CompactNow()
	if st.Segments == 0 || st.RecordsPruned < (rounds-1)*keys {
		t.Fatalf("first pass: %+v", st)
	}
	if l.EndOffset() != end || l.StartOffset() != 0 {
		t.Fatalf("offsets moved: [%d, %d), was [0, %d)", l.StartOffset(), l.EndOffset(), end)
	}
	if l.Size() >= size/3 {
		t.Fatalf("%d bytes after compaction, %d before", l.Size(), size)
	}
	n1 := checkCompacted(t, p, want, notPad, false)
	t.Logf("first pass: %d segments, %d -> %d bytes, %d records kept of %d", st.Segments, size, l.Size(), n1, end)

	// Past delete.retention.ms, and with new data to make the log dirty,
	// the tombstones go too.
	clock.Advance(2 * time.Hour)
	pad()
	pad()
	clock.Advance(20 * time.Minute) // the new segments pass the lag too
	if st := e.CompactNow(); st.Segments == 0 {
		t.Fatalf("second pass did nothing: %+v", st)
	}
	n2 := checkCompacted(t, p, want, notPad, true)
	if n2 >= n1 {
		t.Fatalf("%d records after the tombstones expired, %d before", n2, n1)
	}

	// Compacted segments are what a restart finds (clean, then kill -9).
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, dir, clock.config())
	p = e.Topic("kv").Partition(0)
	if n := checkCompacted(t, p, want, notPad, true); n != n2 {
		t.Fatalf("%d records after a restart, %d before", n, n2)
	}
	e2 := openEngine(t, crashCopy(t, dir), clock.config())
	if n := checkCompacted(t, e2.Topic("kv").Partition(0), want, notPad, true); n != n2 {
		t.Fatalf("%d records after a kill -9, %d before", n, n2)
	}
}

// The cleaner goroutine runs a pass every CompactionInterval by itself.
func TestCleanerRunsOnItsInterval(t *testing.T) {
	e := openEngine(t, t.TempDir(), func(c *Config) { c.CompactionInterval = 5 * time.Millisecond })
	p := compactedTopic(t, e, "bg", nil)
	want := map[string]newest{}
	for round := 0; round < 20; round++ {
		var recs []rec
		for k := 0; k < 20; k++ {
			recs = append(recs, pair(fmt.Sprintf("k%d", k), fmt.Sprintf("v%d-%d", round, k)))
		}
		writeKeys(t, p, time.Now().UnixMilli(), recs, want)
	}
	l, _ := p.Log()
	written := l.EndOffset()
	waitUntil(t, "the background cleaner compacts", func() bool { return int64(len(readLog(t, p))) < written/2 })
	checkCompacted(t, p, want, func(string) bool { return false }, false)
}

// Compaction keeps each idempotent producer's last batch, even when all
// its records were overwritten, so that after a kill -9 (state rebuilt
// from batch headers) the producer's retry is still recognized and its
// sequence continues.
func TestCleanerKeepsProducerState(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, nil)
	p := compactedTopic(t, e, "idem", nil)
	pid, _ := e.AllocateProducerID()
	seq := int32(0)
	var lastBase int64
	var last []byte
	for i := 0; i < 20; i++ {
		last = buildBatch(t, time.Now().UnixMilli(), pid, 0, seq, pair("shared", fmt.Sprintf("idem-%d", i)), pair("shared2", "x"))
		lastBase = appendOK(t, p, last)
		seq += 2
	}
	// Plain writes overwrite the producer's keys and roll segments.
	want := map[string]newest{}
	for i := 0; i < 40; i++ {
		writeKeys(t, p, time.Now().UnixMilli(), []rec{pair("shared", fmt.Sprintf("plain-%d", i)), pair("shared2", "y"),
			pair("fill", fmt.Sprintf("%0200d", i))}, want)
	}
	if st := e.CompactNow(); st.RecordsPruned == 0 {
		t.Fatalf("nothing compacted: %+v", st)
	}
	for _, r := range readLog(t, p) {
		if r.ProducerID == pid {
			t.Fatalf("record %q of the idempotent producer at %d outlived its overwrite", r.Value, r.Offset)
		}
	}
	e2 := openEngine(t, crashCopy(t, dir), nil)
	p2 := e2.Topic("idem").Partition(0)
	retry(t, p2, lastBase, last)
	if err := appendErr(t, p2, idem(t, pid, 0, seq+4, 1)); !errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("gap after compaction and restart: %v (producer state lost)", err)
	}
	if got := appendOK(t, p2, idem(t, pid, 0, seq, 1)); got != p2.HighWatermark()-1 {
		t.Fatalf("next sequence at %d", got)
	}
}

// A follower compacts its own copy of a compacted topic, but only up to
// its high watermark: the leader's batches copied as they are, the
// sealed segments wholly below the high watermark lose the older records
// of each key (offsets kept), and every record from the high watermark
// on, which a new leader could still truncate, stays.
func TestFollowerCompactsUpToHighWatermark(t *testing.T) {
	cfg := map[string]string{"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01",
		"min.insync.replicas": "1"}
	open := func() *Partition {
		e := openEngine(t, t.TempDir(), func(c *Config) { c.NodeID, c.Replicated = 1, true })
		tp, err := e.CreateTopic(CreateTopicRequest{Name: "c", Partitions: 1, ReplicationFactor: -1, Configs: cfg})
		if err != nil {
			t.Fatal(err)
		}
		return tp.Partition(0)
	}
	leader := open()
	if err := leader.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	want := map[string]newest{}
	for round := 0; round < 8; round++ {
		var recs []rec
		for k := 0; k < 10; k++ {
			recs = append(recs, pair(fmt.Sprintf("key-%d", k), fmt.Sprintf("round-%d-value-%040d", round, k)))
		}
		writeKeys(t, leader, time.Now().UnixMilli(), recs, want)
	}
	ll, _ := leader.Log()
	var batches [][]byte
	for off := int64(0); off < ll.EndOffset(); off += 10 {
		b, err := ll.ReadBytes(nil, off, 1, ll.EndOffset())
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
	}

	f := open()
	if err := f.SetReplicaState(ReplicaState{Role: RoleFollower, Leader: 2, LeaderEpoch: 1, PartitionEpoch: 1,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}); err != nil {
		t.Fatal(err)
	}
	appendReplicaOK(t, f, batches...)
	if st := f.topic.eng.CompactNow(); st.Segments != 0 {
		t.Fatalf("compacted %d segments with nothing committed", st.Segments)
	}
	const hw = 40
	f.SetFollowerHighWatermark(hw)
	st := f.topic.eng.CompactNow()
	if st.Segments == 0 || st.RecordsPruned == 0 {
		t.Fatalf("the follower compacted nothing below its high watermark: %+v", st)
	}
	recs := readLog(t, f)
	above := 0
	for _, r := range recs {
		if r.Offset >= hw {
			above++
		}
	}
	if above != 80-hw {
		t.Fatalf("%d records at or above the high watermark %d are left, want all %d", above, hw, 80-hw)
	}
	if len(recs) >= 80 {
		t.Fatalf("%d records left of 80", len(recs))
	}
	// What is left holds every key's newest record.
	checkCompacted(t, f, want, func(string) bool { return false }, false)
}
