package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/testenv"
)

// restartOn starts serve on dataDir listening on exactly kafkaAddr, so
// that clients of the previous process reconnect to the new one. The
// port was just released by a killed process; retry briefly while the
// kernel still reports it in use.
func restartOn(t *testing.T, dataDir, kafkaAddr string, flags ...string) *serveProc {
	t.Helper()
	flags = append([]string{"--kafka-addr", kafkaAddr}, flags...)
	var b *serveProc
	var err error
	// The port may be held a moment longer: retry while it is.
	testenv.Eventually(10*time.Second, func() bool {
		b, err = tryStartServe(t, dataDir, flags...)
		return err == nil || b == nil || !b.exited() || !strings.Contains(b.stderr.String(), "address already in use")
	})
	if err != nil {
		t.Fatalf("restart on %s: %v", kafkaAddr, err)
	}
	return b
}

// ackTracker records the outcome of every produced record.
type ackTracker struct {
	mu     sync.Mutex
	acked  map[string]recLoc
	failed map[string]error
	sent   int
}

func newAckTracker() *ackTracker {
	return &ackTracker{acked: map[string]recLoc{}, failed: map[string]error{}}
}

func (a *ackTracker) promise(r *kgo.Record, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.failed[string(r.Value)] = err
		return
	}
	a.acked[string(r.Value)] = recLoc{r.Partition, r.Offset}
}

func (a *ackTracker) snapshot() (acked map[string]recLoc, failed map[string]error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	acked = make(map[string]recLoc, len(a.acked))
	for k, v := range a.acked {
		acked[k] = v
	}
	failed = make(map[string]error, len(a.failed))
	for k, v := range a.failed {
		failed[k] = v
	}
	return acked, failed
}

// TestKillNineKeepsAcknowledgedRecords kills the broker with SIGKILL at a
// random moment while an idempotent acks=all producer keeps producing,
// restarts it on the same data directory and port, lets the same producer
// finish (its in-flight batches are retried against the new process), and
// checks that every acknowledged record is stored exactly once at the
// offset its acknowledgement gave, that offsets are dense, that no value
// is stored twice (retries deduplicated across the crash) and that the
// topic's partition count and config survived. Repeated over many cycles
// on one data directory, so later cycles recover logs that earlier crashes
// left behind (several segments, rolls interrupted by the kill).
func TestKillNineKeepsAcknowledgedRecords(t *testing.T) {
	const (
		topic     = "crash"
		parts     = 3
		minCycles = 8
		maxCycles = 40
		budget    = 20 * time.Second
	)
	dir := t.TempDir()
	ctx := deadlineCtx(t, 90*time.Second)
	b := startServe(t, dir, "--default-partitions", "3")
	addr := b.Kafka // every restart listens here again

	adm := kadm.NewClient(procClient(t, addr))
	configs := map[string]string{"segment.bytes": "65536", "retention.ms": "-1"}
	set := map[string]*string{}
	for k, v := range configs {
		set[k] = cfgStr(v)
	}
	// -1 partitions: the broker's --default-partitions.
	cr, err := adm.CreateTopic(ctx, -1, -1, set, topic)
	if err == nil {
		err = cr.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	if cr.NumPartitions != parts {
		t.Fatalf("created %d partitions, want %d from --default-partitions", cr.NumPartitions, parts)
	}

	acks := newAckTracker()
	prod := procClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(2*time.Millisecond),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	var (
		gate   sync.Mutex // held while a burst is produced
		paused atomic.Bool
		stop   = make(chan struct{})
		done   = make(chan struct{})
	)
	paused.Store(true)
	pad := strings.Repeat("x", 80)
	go func() {
		defer close(done)
		seq := 0
		for {
			select {
			case <-stop:
				return
			default:
			}
			gate.Lock()
			if paused.Load() {
				gate.Unlock()
				time.Sleep(2 * time.Millisecond)
				continue
			}
			for i := 0; i < 16; i++ {
				v := fmt.Sprintf("rec-%08d-%s", seq, pad)
				seq++
				acks.mu.Lock()
				acks.sent++
				acks.mu.Unlock()
				prod.Produce(ctx, &kgo.Record{Key: []byte(v[:12]), Value: []byte(v)}, acks.promise)
			}
			gate.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()
	pause := func() {
		paused.Store(true)
		gate.Lock()
		//lint:ignore SA2001 an empty critical section is the barrier: the burst in progress is over
		gate.Unlock()
	}

	start := time.Now()
	cycle := 0
	inFlightTotal, dedupedTotal := 0, 0
	for ; cycle < maxCycles && (cycle < minCycles || time.Since(start) < budget); cycle++ {
		paused.Store(false)
		time.Sleep(100*time.Millisecond + rand.N(500*time.Millisecond))
		b.kill()
		if code := b.cmd.ProcessState.ExitCode(); code != -1 {
			t.Fatalf("cycle %d: broker exited with %d before the kill; stderr:\n%s", cycle, code, lastChars(b.stderr.String(), 4000))
		}
		// What the killed process had written, and what was
		// acknowledged by then: a record acknowledged only after the
		// restart at an offset the old process had already written
		// is a retry the new process answered from its rebuilt
		// producer state instead of appending it again.
		ackedAtKill, _ := acks.snapshot()
		var diskEnd [parts]int64
		for p := 0; p < parts; p++ {
			seg, _ := activeSegment(t, filepath.Join(dir, fmt.Sprintf("%s-%d", topic, p)))
			diskEnd[p] = segmentEnd(t, seg)
		}
		acks.mu.Lock()
		inFlight := acks.sent - len(acks.acked) - len(acks.failed)
		acks.mu.Unlock()
		inFlightTotal += inFlight
		b = restartOn(t, dir, addr, "--default-partitions", "3")
		if !strings.Contains(b.stderr.String(), "unclean shutdown: recovering") {
			t.Errorf("cycle %d: restart after SIGKILL did not log 'unclean shutdown: recovering':\n%s", cycle, lastChars(b.stderr.String(), 3000))
		}

		// Let every record produced so far settle (retries of what the
		// kill interrupted go to the new process), then check the log.
		pause()
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := prod.Flush(fctx)
		cancel()
		if err != nil {
			t.Fatalf("cycle %d: producer did not settle after the restart: %v", cycle, err)
		}
		acked, failed := acks.snapshot()
		if len(failed) > 0 {
			var ex []string
			for v, err := range failed {
				ex = append(ex, fmt.Sprintf("%s: %v", v[:12], err))
				if len(ex) == 5 {
					break
				}
			}
			t.Errorf("cycle %d: %d records failed although the producer retries without limit, e.g. %s", cycle, len(failed), strings.Join(ex, "; "))
		}
		got := readBackTopic(t, ctx, addr, topic, parts)
		checkAcked(t, topic, got, acked)
		checkTopicSurvived(t, ctx, addr, topic, parts, configs)
		deduped := 0
		for v, at := range acked {
			if _, before := ackedAtKill[v]; !before && at.Offset < diskEnd[at.Partition] {
				deduped++
			}
		}
		dedupedTotal += deduped
		t.Logf("cycle %d: %d records acknowledged, %d stored, high watermarks %v; %d in flight at the kill, %d of them written before it and deduplicated on retry",
			cycle, len(acked), len(got.byValue), got.ends, inFlight, deduped)
		if t.Failed() {
			t.FailNow()
		}
	}
	resendStoredBatches(t, ctx, dir, addr, b, topic, parts)

	acks.mu.Lock()
	sent := acks.sent
	acks.mu.Unlock()
	segs := 0
	for p := 0; p < parts; p++ {
		m, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("%s-%d", topic, p), "*.log"))
		segs += len(m)
	}
	t.Logf("%d kill -9 cycles in %v, %d records sent, %d segment files, %d records in flight at kills, %d retries deduplicated across a restart",
		cycle, time.Since(start).Round(time.Millisecond), sent, segs, inFlightTotal, dedupedTotal)
	if inFlightTotal == 0 {
		t.Fatal("no record was in flight at any kill: the test did not crash the broker under load")
	}
}

// resendStoredBatches makes a producer retry deterministic: it kills the
// broker, restarts it, and sends each partition's last stored batch again,
// byte for byte as it is on disk (same producer id, epoch and sequences,
// valid CRC: what a producer retries when the acknowledgement was lost in
// the crash). The broker must acknowledge it with the offset it got the
// first time and must not append it again.
func resendStoredBatches(t *testing.T, ctx context.Context, dir, addr string, b *serveProc, topic string, parts int) {
	t.Helper()
	b.kill()
	type stored struct {
		raw  []byte
		base int64
	}
	last := make([]stored, parts)
	for p := 0; p < parts; p++ {
		raw := lastStoredBatch(t, filepath.Join(dir, fmt.Sprintf("%s-%d", topic, p)))
		if int64(binary.BigEndian.Uint64(raw[43:])) < 0 {
			t.Fatalf("%s-%d: last stored batch has no producer id; the producer is idempotent", topic, p)
		}
		last[p] = stored{raw, int64(binary.BigEndian.Uint64(raw))}
	}
	restartOn(t, dir, addr, "--default-partitions", "3")
	before := readBackTopic(t, ctx, addr, topic, parts)
	cl := procClient(t, addr)
	for p := 0; p < parts; p++ {
		pr, err := sendBatch(ctx, cl, topic, int32(p), last[p].raw, 10000)
		if err != nil {
			t.Fatalf("resend to %s-%d: %v", topic, p, err)
		}
		if err := kerr.ErrorForCode(pr.ErrorCode); err != nil {
			t.Errorf("resend of the stored batch at %s-%d/%d after kill -9: %v; want it acknowledged as a duplicate", topic, p, last[p].base, err)
		} else if pr.BaseOffset != last[p].base {
			t.Errorf("resend of the stored batch at %s-%d/%d after kill -9 acknowledged at offset %d; want its original offset %d", topic, p, last[p].base, pr.BaseOffset, last[p].base)
		}
	}
	after := readBackTopic(t, ctx, addr, topic, parts)
	for p := 0; p < parts; p++ {
		if after.ends[p] != before.ends[p] {
			t.Errorf("%s-%d: high watermark went from %d to %d: a retried batch was appended again", topic, p, before.ends[p], after.ends[p])
		}
	}
}

// lastStoredBatch returns a copy of the last whole batch in a partition
// directory's segments.
func lastStoredBatch(t *testing.T, partDir string) []byte {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(partDir, "*.log"))
	sort.Strings(logs)
	for i := len(logs) - 1; i >= 0; i-- {
		data, err := os.ReadFile(logs[i])
		if err != nil {
			t.Fatal(err)
		}
		var last []byte
		for pos := 0; pos+batchHeaderLen <= len(data); {
			n := 12 + int(binary.BigEndian.Uint32(data[pos+8:]))
			if pos+n > len(data) {
				break
			}
			last = data[pos : pos+n]
			pos += n
		}
		if last != nil {
			return bytes.Clone(last)
		}
	}
	t.Fatalf("no batch stored in %s", partDir)
	return nil
}

// activeSegment returns the path of the partition directory's last .log
// file (the one appends go to) and its size.
func activeSegment(t *testing.T, partDir string) (string, int64) {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(partDir, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no segments in %s (%v)", partDir, err)
	}
	sort.Strings(logs) // 20-digit zero-padded base offsets sort numerically
	last := logs[len(logs)-1]
	if len(filepath.Base(last)) != len("00000000000000000000.log") {
		t.Fatalf("unexpected segment name %s", last)
	}
	fi, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	return last, fi.Size()
}

func appendToFile(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// lastBatch returns a copy of the last record batch of a segment file.
func lastBatch(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var last []byte
	for pos := 0; pos+12 <= len(data); {
		n := 12 + int(binary.BigEndian.Uint32(data[pos+8:]))
		if pos+n > len(data) {
			t.Fatalf("%s: batch at %d runs past the end", path, pos)
		}
		last = data[pos : pos+n]
		pos += n
	}
	if last == nil {
		t.Fatalf("%s holds no batch", path)
	}
	return bytes.Clone(last)
}

// segmentEnd returns the offset after the last whole batch of a segment
// file (the file's base offset if it holds none).
func segmentEnd(t *testing.T, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var base int64
	if _, err := fmt.Sscanf(filepath.Base(path), "%020d.log", &base); err != nil {
		t.Fatalf("segment name %s: %v", path, err)
	}
	end := base
	for pos := 0; pos+batchHeaderLen <= len(data); {
		n := 12 + int(binary.BigEndian.Uint32(data[pos+8:]))
		if pos+n > len(data) {
			break
		}
		end = int64(binary.BigEndian.Uint64(data[pos:])) + int64(binary.BigEndian.Uint32(data[pos+23:])) + 1
		pos += n
	}
	return end
}

// batchHeaderLen is the size of a v2 record batch header; the last offset
// delta is the int32 at byte 23.
const batchHeaderLen = 61

// garbageBytes returns n bytes that cannot start a valid batch (magic byte,
// offset 16, is never 2).
func garbageBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if n > 16 {
		b[16] = 0xEE
	}
	return b
}

// TestRestartRecoveryTornTail damages the tail of each partition's active
// segment in a different way after a kill -9 (random bytes; a batch cut
// short, as a write interrupted by a power loss leaves it; a whole batch
// with the next offset and a bad CRC) and checks that the broker comes up,
// truncates exactly the damage, keeps every record before it, and gives
// new records the next dense offsets. A second round does the same after
// a clean shutdown (the start then trusts the files but must still notice
// the bad tail).
func TestRestartRecoveryTornTail(t *testing.T) {
	const topic, parts, perPart = "torn", 3, 120
	dir := t.TempDir()
	ctx := deadlineCtx(t, 60*time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	b := startServe(t, dir)
	adm := kadm.NewClient(procClient(t, b.Kafka))
	cr, err := adm.CreateTopic(ctx, parts, 1, map[string]*string{"segment.bytes": cfgStr("8192")}, topic)
	if err == nil {
		err = cr.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}

	acked := map[string]recLoc{}
	next := make([]int64, parts) // expected next offset per partition
	produce := func(addr string, round, n int) {
		t.Helper()
		cl := procClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerBatchCompression(kgo.NoCompression()))
		defer cl.Close()
		var recs []*kgo.Record
		for p := 0; p < parts; p++ {
			for i := 0; i < n; i++ {
				v := fmt.Sprintf("r%d-p%d-%04d-%s", round, p, i, strings.Repeat("y", 60))
				recs = append(recs, &kgo.Record{Partition: int32(p), Value: []byte(v)})
			}
		}
		// Several produce calls, so each partition gets several batches.
		for len(recs) > 0 {
			k := min(len(recs), 25)
			res := cl.ProduceSync(ctx, recs[:k]...)
			if err := res.FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			for _, r := range res {
				p := r.Record.Partition
				if r.Record.Offset != next[p] {
					t.Errorf("%s-%d: new record got offset %d, want the next dense offset %d", topic, p, r.Record.Offset, next[p])
				}
				next[p] = r.Record.Offset + 1
				acked[string(r.Record.Value)] = recLoc{p, r.Record.Offset}
			}
			recs = recs[k:]
		}
	}
	partDir := func(p int) string { return filepath.Join(dir, fmt.Sprintf("%s-%d", topic, p)) }

	// damage appends a different kind of bad tail to each partition's
	// active segment and returns the sizes the files must be cut back to.
	damage := func(withBadCRC bool) []int64 {
		sizes := make([]int64, parts)
		for p := 0; p < parts; p++ {
			seg, size := activeSegment(t, partDir(p))
			if size == 0 {
				t.Fatalf("%s is empty: the test needs data in the active segment", seg)
			}
			sizes[p] = size
			var bad []byte
			switch p {
			case 0:
				bad = garbageBytes(rng, 200+rng.IntN(300))
			case 1:
				// The next batch, torn: only its first part reached the file.
				bt := lastBatch(t, seg)
				binary.BigEndian.PutUint64(bt, uint64(next[p]))
				bad = bt[:len(bt)-1-rng.IntN(len(bt)/2)]
			case 2:
				bt := lastBatch(t, seg)
				binary.BigEndian.PutUint64(bt, uint64(next[p]))
				if withBadCRC {
					bt[len(bt)-1] ^= 0xFF // a record byte: the CRC no longer matches
				} else {
					bt = bt[:30] // shorter than a batch header
				}
				bad = bt
			}
			appendToFile(t, seg, bad)
		}
		return sizes
	}
	checkCut := func(round string, sizes []int64, restarted *serveProc) {
		t.Helper()
		for p := 0; p < parts; p++ {
			seg, size := activeSegment(t, partDir(p))
			if size != sizes[p] {
				t.Errorf("%s: %s is %d bytes after recovery, want %d (exactly the damage cut off)", round, seg, size, sizes[p])
			}
		}
		got := readBackTopic(t, ctx, restarted.Kafka, topic, parts)
		for p := 0; p < parts; p++ {
			if got.ends[p] != next[p] {
				t.Errorf("%s: %s-%d high watermark %d after recovery, want %d", round, topic, p, got.ends[p], next[p])
			}
		}
		checkAcked(t, topic, got, acked)
		if len(got.byValue) != len(acked) {
			t.Errorf("%s: %d records stored, %d were produced", round, len(got.byValue), len(acked))
		}
	}

	// Round 1: kill -9, damage, restart (an unclean start rescans).
	produce(b.Kafka, 1, perPart)
	for p := 0; p < parts; p++ {
		// The damage must go to the last of several segments.
		if m, _ := filepath.Glob(filepath.Join(partDir(p), "*.log")); len(m) < 2 {
			t.Fatalf("%s has %d segments, want at least 2 (segment.bytes=8192)", partDir(p), len(m))
		}
	}
	b.kill()
	sizes := damage(true)
	b = startServe(t, dir)
	if !strings.Contains(b.stderr.String(), "unclean shutdown: recovering") {
		t.Errorf("restart after SIGKILL did not log 'unclean shutdown: recovering'")
	}
	if n := strings.Count(b.stderr.String(), "truncating torn tail"); n != parts {
		t.Errorf("restart logged %d torn-tail truncations, want %d:\n%s", n, parts, lastChars(b.stderr.String(), 3000))
	}
	checkCut("after kill -9", sizes, b)
	produce(b.Kafka, 2, perPart/4)
	if t.Failed() {
		t.FailNow()
	}

	// Round 2: clean shutdown, damage, restart (a clean start trusts the
	// files but must not trust a tail that is not whole batches).
	if code, _, err := b.signal(syscall.SIGTERM, 15*time.Second); err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit %d, %v", code, err)
	}
	sizes = damage(false)
	b = startServe(t, dir)
	if !strings.Contains(b.stderr.String(), "start=clean") {
		t.Errorf("restart after SIGTERM did not log start=clean")
	}
	checkCut("after clean shutdown", sizes, b)
	produce(b.Kafka, 3, perPart/4)
	got := readBackTopic(t, ctx, b.Kafka, topic, parts)
	checkAcked(t, topic, got, acked)
	for p := 0; p < parts; p++ {
		if got.ends[p] != next[p] {
			t.Errorf("%s-%d: high watermark %d at the end, want %d", topic, p, got.ends[p], next[p])
		}
	}
}
