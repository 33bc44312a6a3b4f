package engine

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/wal/batch"
)

// Helpers for the engine's unit tests: batches built in memory, appends
// straight to a partition's shard, the log read back, a shard held still
// so requests pile up, a clock the test moves. No network anywhere.

// openEngine opens an engine on dir that is closed when the test ends,
// after any shard the test holds (holdShard) was let go.
func openEngine(t testing.TB, dir string, mod func(*Config)) *Engine {
	t.Helper()
	e := openTestEngine(t, dir, mod)
	t.Cleanup(func() { e.Close() })
	return e
}

// rec is one record to build into a batch; a nil value is a tombstone.
type rec struct {
	key, value []byte
}

func pair(key, value string) rec { return rec{[]byte(key), []byte(value)} }

func tombstone(key string) rec { return rec{key: []byte(key)} }

// buildBatch encodes recs (at least one) as a batch stamped ts, idempotent
// when pid >= 0.
func buildBatch(t testing.TB, ts int64, pid int64, epoch int16, seq int32, recs ...rec) []byte {
	t.Helper()
	b := batch.NewBuilder()
	if pid >= 0 {
		b.ProducerID, b.ProducerEpoch, b.BaseSequence = pid, epoch, seq
	}
	for _, r := range recs {
		b.Add(ts, r.key, r.value, nil)
	}
	data, err := b.Build(nil, batch.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// values returns n records "<prefix>-0".. with keys "k<prefix>-0"...
func values(prefix string, n int) []rec {
	out := make([]rec, n)
	for i := range out {
		out[i] = pair(fmt.Sprintf("k%s-%d", prefix, i), fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// idem builds an idempotent batch of n records for producer pid.
func idem(t testing.TB, pid int64, epoch int16, seq int32, n int) []byte {
	t.Helper()
	return buildBatch(t, time.Now().UnixMilli(), pid, epoch, seq, values(fmt.Sprintf("p%d-e%d-s%d", pid, epoch, seq), n)...)
}

// submit queues one request of batches to p's shard; the result arrives
// on the returned channel.
func submit(t testing.TB, p *Partition, acks int16, batches ...[]byte) <-chan AppendResult {
	t.Helper()
	req := &AppendRequest{Partition: p, Batches: batches, Acks: acks}
	for _, b := range batches {
		h, err := batch.Validate(b, batch.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		req.Headers = append(req.Headers, h)
		req.Bytes += len(b)
	}
	done := make(chan AppendResult, 1)
	req.Done = func(r AppendResult) { done <- r }
	p.Shard().Append(req)
	return done
}

// result waits for one answer.
func result(t testing.TB, c <-chan AppendResult) AppendResult {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to an append within 10s")
		return AppendResult{}
	}
}

// appendOK appends batches as one request and returns the base offset.
func appendOK(t testing.TB, p *Partition, batches ...[]byte) int64 {
	t.Helper()
	r := result(t, submit(t, p, -1, batches...))
	if r.Err != nil {
		t.Fatalf("append to %s: %v", p, r.Err)
	}
	return r.BaseOffset
}

// stored is a record as read back from a log.
type stored struct {
	Offset     int64
	Key, Value []byte // Value nil: a tombstone
	ProducerID int64
}

// readLog returns every record of p's log, in offset order, checking
// each batch's CRC and that offsets only grow.
func readLog(t testing.TB, p *Partition) []stored {
	t.Helper()
	l, err := p.ReplicaLog()
	if err != nil {
		t.Fatal(err)
	}
	var out []stored
	var scratch []byte
	end := l.EndOffset()
	last := int64(-1)
	for off := l.StartOffset(); off < end; {
		buf, err := l.ReadBytes(nil, off, 1<<20, end)
		if err != nil {
			t.Fatalf("read %s at %d: %v", p, off, err)
		}
		if len(buf) == 0 {
			t.Fatalf("read %s at %d: nothing below the end %d", p, off, end)
		}
		for len(buf) > 0 {
			n := int(batch.BatchLength(buf)) + batch.LogOverhead
			h, err := batch.CheckStored(buf[:n])
			if err != nil {
				t.Fatalf("%s: batch at %d: %v", p, off, err)
			}
			it, sc, err := batch.Records(buf[:n], &h, scratch)
			scratch = sc
			if err != nil {
				t.Fatal(err)
			}
			for r := range it.All() {
				o := h.BaseOffset + int64(r.OffsetDelta)
				if o <= last {
					t.Fatalf("%s: offset %d after %d", p, o, last)
				}
				last = o
				s := stored{Offset: o, Key: append([]byte(nil), r.Key...), ProducerID: h.ProducerID}
				if r.Value != nil {
					s.Value = append([]byte{}, r.Value...)
				}
				out = append(out, s)
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			off = h.NextOffset()
			buf = buf[n:]
		}
	}
	return out
}

// holdShard parks s's goroutine in a control function until the returned
// release is called (at the latest when the test ends), so that appends
// and control functions queue up behind it.
func holdShard(t testing.TB, s *Shard) (release func()) {
	t.Helper()
	held := make(chan struct{})
	gate := make(chan struct{})
	s.Do(func() {
		close(held)
		<-gate
	})
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the shard did not run a control function within 10s")
	}
	var once atomic.Bool
	release = func() {
		if once.CompareAndSwap(false, true) {
			close(gate)
		}
	}
	t.Cleanup(release)
	return release
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, what, cond)
}

// testClock is a clock the test moves by hand (Config.Now).
type testClock struct{ ns atomic.Int64 }

func newTestClock(start time.Time) *testClock {
	c := &testClock{}
	c.ns.Store(start.UnixNano())
	return c
}

func (c *testClock) Now() time.Time            { return time.Unix(0, c.ns.Load()) }
func (c *testClock) Advance(d time.Duration)   { c.ns.Add(int64(d)) }
func (c *testClock) UnixMilli() int64          { return c.Now().UnixMilli() }
func (c *testClock) config() func(cfg *Config) { return func(cfg *Config) { cfg.Now = c.Now } }

// crashCopy copies the data directory of a running engine, as a kill -9
// would leave it: everything written is in the files (page cache), but
// nothing of a clean shutdown (no clean marker, no producer snapshots
// newer than the last clean stop).
func crashCopy(t testing.TB, dir string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatalf("copy %s: %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dst, cleanShutdownFile)); err == nil {
		t.Fatal("a running engine's directory has the clean-shutdown marker")
	}
	return dst
}
