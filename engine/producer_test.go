package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/ring"
)

// idemTopic creates a one-partition topic and returns its partition.
func idemTopic(t *testing.T, e *Engine, name string) *Partition {
	t.Helper()
	top, err := e.CreateTopic(CreateTopicRequest{Name: name, Partitions: 1, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	return top.Partition(0)
}

// appendErr appends batches as one request and returns its error,
// checking that a refused request wrote nothing.
func appendErr(t *testing.T, p *Partition, batches ...[]byte) error {
	t.Helper()
	before := p.HighWatermark()
	r := result(t, submit(t, p, -1, batches...))
	if r.Err != nil && p.HighWatermark() != before {
		t.Fatalf("refused (%v) but the log grew from %d to %d", r.Err, before, p.HighWatermark())
	}
	return r.Err
}

// retry appends a batch that must be recognized as a duplicate: answered
// with base offset want, nothing appended.
func retry(t *testing.T, p *Partition, want int64, batches ...[]byte) {
	t.Helper()
	before := p.HighWatermark()
	r := result(t, submit(t, p, -1, batches...))
	if r.Err != nil || r.BaseOffset != want {
		t.Fatalf("retry: offset %d %v, want the original %d", r.BaseOffset, r.Err, want)
	}
	if hw := p.HighWatermark(); hw != before {
		t.Fatalf("a retry was appended again: high watermark %d -> %d", before, hw)
	}
}

func TestIdempotentSequences(t *testing.T) {
	e := openEngine(t, t.TempDir(), nil)
	p := idemTopic(t, e, "idem")
	pid, err := e.AllocateProducerID()
	if err != nil {
		t.Fatal(err)
	}

	// Seven batches in sequence: offsets follow the record counts.
	type sent struct {
		seq   int32
		n     int
		first int64
	}
	var log []sent
	seq, off := int32(0), int64(0)
	for _, n := range []int{2, 3, 1, 2, 1, 4, 2} {
		if got := appendOK(t, p, idem(t, pid, 0, seq, n)); got != off {
			t.Fatalf("seq %d at offset %d, want %d", seq, got, off)
		}
		log = append(log, sent{seq, n, off})
		seq += int32(n)
		off += int64(n)
	}

	// A retry of any of the last five batches gets its original offsets;
	// the sixth-newest is forgotten, so its retry is out of order.
	for _, s := range log[2:] {
		retry(t, p, s.first, idem(t, pid, 0, s.seq, s.n))
	}
	if err := appendErr(t, p, idem(t, pid, 0, log[1].seq, log[1].n)); !errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("retry of a batch outside the window: %v", err)
	}
	// Same first sequence, different length: not a retry, and a gap.
	last := log[len(log)-1]
	if err := appendErr(t, p, idem(t, pid, 0, last.seq, last.n+1)); !errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("overlapping batch: %v", err)
	}
	// A gap.
	if err := appendErr(t, p, idem(t, pid, 0, seq+1, 1)); !errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("sequence gap: %v", err)
	}

	// Several batches of one producer in one request must follow each
	// other; the retry of the whole request is a duplicate.
	two := [][]byte{idem(t, pid, 0, seq, 1), idem(t, pid, 0, seq+1, 2)}
	if got := appendOK(t, p, two...); got != off {
		t.Fatalf("two-batch request at %d, want %d", got, off)
	}
	retry(t, p, off, idem(t, pid, 0, seq, 1), idem(t, pid, 0, seq+1, 2))
	seq, off = seq+3, off+3
	if err := appendErr(t, p, idem(t, pid, 0, seq-2, 2), idem(t, pid, 0, seq, 1)); !errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("request mixing a retry and a new batch: %v", err)
	}
	if err := appendErr(t, p, idem(t, pid, 0, seq, 1), idem(t, pid, 0, seq+2, 1)); !errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("request with a gap between its batches: %v", err)
	}

	// A new epoch starts over at sequence 0 and fences the old one.
	if err := appendErr(t, p, idem(t, pid, 1, 5, 1)); !errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("new epoch not at 0: %v", err)
	}
	if got := appendOK(t, p, idem(t, pid, 1, 0, 2)); got != off {
		t.Fatalf("new epoch at %d, want %d", got, off)
	}
	epoch1 := off
	off += 2
	if err := appendErr(t, p, idem(t, pid, 0, seq, 1)); !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("old epoch after the bump: %v", err)
	}
	retry(t, p, epoch1, idem(t, pid, 1, 0, 2))

	// Another producer, first seen mid-stream, may start anywhere; plain
	// batches are not checked at all.
	other, _ := e.AllocateProducerID()
	if got := appendOK(t, p, idem(t, other, 3, 42, 1)); got != off {
		t.Fatalf("new producer at %d, want %d", got, off)
	}
	off++
	for i := 0; i < 2; i++ {
		if got := appendOK(t, p, buildBatch(t, 1000, -1, 0, 0, pair("k", "plain"))); got != off {
			t.Fatalf("plain batch at %d, want %d", got, off)
		}
		off++
	}

	// Nothing refused or retried reached the log.
	if n := len(readLog(t, p)); int64(n) != off || p.HighWatermark() != off {
		t.Fatalf("%d records, high watermark %d; %d were acknowledged", n, p.HighWatermark(), off)
	}
}

// A retry queued behind its original in the same drain (the producer
// resent before the first answer) is recognized too: one copy is written,
// both answers carry its offset.
func TestIdempotentRetryInSameDrain(t *testing.T) {
	e := openEngine(t, t.TempDir(), func(c *Config) { c.Shards = 1 })
	p := idemTopic(t, e, "drain")
	pid, _ := e.AllocateProducerID()
	appendOK(t, p, idem(t, pid, 0, 0, 3))
	release := holdShard(t, p.Shard())
	a := submit(t, p, -1, idem(t, pid, 0, 3, 2))
	b := submit(t, p, -1, idem(t, pid, 0, 3, 2))
	release()
	ra, rb := result(t, a), result(t, b)
	if ra.Err != nil || rb.Err != nil || ra.BaseOffset != 3 || rb.BaseOffset != 3 {
		t.Fatalf("original %+v, retry %+v; want both at offset 3", ra, rb)
	}
	if p.HighWatermark() != 5 {
		t.Fatalf("high watermark %d, want 5 (one copy)", p.HighWatermark())
	}
}

// checkProducerState checks, after a restart, that the engine still knows
// producer pid at epoch 0 with next sequence seq and the given last
// batches: retries of those get their original offsets, a gap is refused
// (an unknown producer would be accepted anywhere), and the next sequence
// is accepted.
func checkProducerState(t *testing.T, p *Partition, pid int64, seq int32, recent map[int32][2]int64) {
	t.Helper()
	for s, b := range recent {
		retry(t, p, b[1], idem(t, pid, 0, s, int(b[0])))
	}
	if err := appendErr(t, p, idem(t, pid, 0, seq+7, 1)); !errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("gap after restart: %v (the producer state was lost)", err)
	}
	hw := p.HighWatermark()
	if got := appendOK(t, p, idem(t, pid, 0, seq, 1)); got != hw {
		t.Fatalf("next sequence at %d, want %d", got, hw)
	}
}

// Producer state survives a clean restart (from the snapshot written at
// Close) and a kill -9 (rebuilt from the batch headers, with or without an
// older snapshot to start from).
func TestProducerStateSurvivesRestarts(t *testing.T) {
	dir := t.TempDir()
	e := openTestEngine(t, dir, nil)
	t.Cleanup(func() { e.Close() }) // the engine running at the end
	p := idemTopic(t, e, "durable")
	pid, _ := e.AllocateProducerID()
	recent := map[int32][2]int64{} // first sequence -> {records, first offset}
	seq := int32(0)
	write := func(p *Partition, batches int) {
		for i := 0; i < batches; i++ {
			n := 1 + i%3
			off := appendOK(t, p, idem(t, pid, 0, seq, n))
			recent[seq] = [2]int64{int64(n), off}
			seq += int32(n)
		}
		// Only the last five are remembered.
		for len(recent) > producerWindow {
			oldest := seq
			for s := range recent {
				oldest = min(oldest, s)
			}
			delete(recent, oldest)
		}
	}
	write(p, 8)

	t.Run("clean restart", func(t *testing.T) {
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "durable-0", producerSnapshotFile)); err != nil {
			t.Fatalf("no producer snapshot after Close: %v", err)
		}
		e = openTestEngine(t, dir, nil)
		p = e.Topic("durable").Partition(0)
		checkProducerState(t, p, pid, seq, recent)
		recent[seq] = [2]int64{1, p.HighWatermark() - 1}
		seq++
	})

	// The engine runs on from the snapshot; a crash now leaves that
	// snapshot (older than the log's end) and batches after it.
	write(p, 3)
	t.Run("kill -9 with an old snapshot", func(t *testing.T) {
		crash := crashCopy(t, dir)
		if _, err := os.Stat(filepath.Join(crash, "durable-0", producerSnapshotFile)); err != nil {
			t.Fatalf("the snapshot of the last clean stop is gone: %v", err)
		}
		e2 := openEngine(t, crash, nil)
		checkProducerState(t, e2.Topic("durable").Partition(0), pid, seq, recent)
	})

	t.Run("kill -9 without a snapshot", func(t *testing.T) {
		crash := crashCopy(t, dir)
		if err := os.Remove(filepath.Join(crash, "durable-0", producerSnapshotFile)); err != nil {
			t.Fatal(err)
		}
		e2 := openEngine(t, crash, nil)
		checkProducerState(t, e2.Topic("durable").Partition(0), pid, seq, recent)
	})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// syncCounter counts the fdatasyncs the shards' backends run.
type syncCounter struct {
	n     *atomic.Int64
	inner ring.Backend
}

func (c syncCounter) Name() string { return c.inner.Name() }
func (c syncCounter) Close() error { return c.inner.Close() }
func (c syncCounter) Run(ops []ring.Op) error {
	for _, op := range ops {
		if op.Kind == ring.OpFdatasync {
			c.n.Add(1)
		}
	}
	return c.inner.Run(ops)
}

// TestRetryUnderAcksAllSyncs: a batch written and not synced (its first
// attempt's ack lost: an acks=1 produce here, or a broker killed between
// its write and its sync) is retried with acks=all. The retry is a
// duplicate and appends nothing, but its acknowledgement promises the
// batch durable: it must wait for an fdatasync of the log.
func TestRetryUnderAcksAllSyncs(t *testing.T) {
	var syncs atomic.Int64
	e := openEngine(t, t.TempDir(), func(c *Config) {
		c.WrapBackend = func(_ int, b ring.Backend) ring.Backend { return syncCounter{&syncs, b} }
	})
	p := idemTopic(t, e, "retry-sync")
	b := idem(t, 7, 0, 0, 3)
	first := result(t, submit(t, p, 1, b))
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	if n := syncs.Load(); n != 0 {
		t.Fatalf("an acks=1 append ran %d fdatasyncs", n)
	}
	retry(t, p, first.BaseOffset, b)
	if n := syncs.Load(); n == 0 {
		t.Fatal("the acks=all retry of an unsynced batch was acknowledged without an fdatasync")
	}
}

// Producers idle longer than producer.id.expiration.ms are forgotten,
// unless their transaction is open here; a marker counts as activity.
func TestProducerIDExpiration(t *testing.T) {
	clock := newTestClock(time.Now())
	e := openEngine(t, t.TempDir(), func(c *Config) { c.Now = clock.Now; c.ProducerIDExpiration = time.Hour })
	tp, err := e.CreateTopic(CreateTopicRequest{Name: "exp", Partitions: 1, ReplicationFactor: -1})
	if err != nil {
		t.Fatal(err)
	}
	p := tp.Partition(0)
	ts := clock.Now().UnixMilli()
	appendOK(t, p, buildBatch(t, ts, 1, 0, 0, pair("k", "idle")))
	appendOK(t, p, buildBatch(t, ts, 2, 0, 0, pair("k", "recent")))
	expire := func() (n int) {
		if err := p.Shard().Call(func() error { n = p.expireProducers(clock.Now()); return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	ids := func() []int64 {
		ps, err := p.Producers()
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, x := range ps {
			out = append(out, x.ProducerID)
		}
		return out
	}
	if n := expire(); n != 0 {
		t.Fatalf("expired %d producers seen just now", n)
	}
	clock.Advance(50 * time.Minute)
	appendOK(t, p, buildBatch(t, clock.Now().UnixMilli(), 2, 0, 1, pair("k", "again")))
	clock.Advance(20 * time.Minute) // producer 1: 70 min idle, producer 2: 20 min
	if n := expire(); n != 1 || fmt.Sprint(ids()) != "[2]" {
		t.Fatalf("expired %d, left %v; want producer 1 gone, 2 kept", n, ids())
	}
	// A forgotten producer's next batch starts it anew (any sequence).
	if r := result(t, submit(t, p, 1, buildBatch(t, clock.Now().UnixMilli(), 1, 0, 7, pair("k", "back")))); r.Err != nil {
		t.Fatalf("a forgotten producer's batch: %v", r.Err)
	}
}
