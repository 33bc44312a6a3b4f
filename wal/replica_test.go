package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// storedBatches reads the log's batches as stored bytes.
func storedBatches(t testing.TB, l *Log) [][]byte {
	t.Helper()
	buf, err := l.ReadBytes(nil, l.StartOffset(), 1<<30, l.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	out, err := batch.Split(buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// replicaBatch is a stored batch as a leader would send it.
func replicaBatch(t testing.TB, tag int, base int64, epoch int32, n int) []byte {
	t.Helper()
	b := makeBatch(t, tag, n, 16, 1_000+int64(tag))
	batch.SetBaseOffset(b, base)
	batch.SetLeaderEpoch(b, epoch)
	return b
}

func TestAppendReplicaCopiesTheLeader(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		leader := buildEpochLog(t, t.TempDir(), be, Options{SegmentBytes: 2500, IndexIntervalBytes: 256}, 200, 3)
		defer leader.Close()
		want := storedBatches(t, leader)
		dir := t.TempDir()
		f := openLog(t, dir, Options{SegmentBytes: 2500, IndexIntervalBytes: 256})
		// Fetch-sized chunks, as a fetcher would append them.
		for i := 0; i < len(want); i += 7 {
			res, err := f.AppendReplica(be, want[i:min(i+7, len(want))], i%2 == 0)
			if err != nil {
				t.Fatal(err)
			}
			for j, r := range res {
				h, _ := batch.ParseHeader(want[i+j])
				if r.BaseOffset != h.BaseOffset || r.LastOffset != h.LastOffset() || r.AppendTime != -1 {
					t.Fatalf("result %+v for batch at %d", r, h.BaseOffset)
				}
			}
		}
		got := storedBatches(t, f)
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("replica bytes differ from the leader's")
		}
		if !slices.Equal(f.EpochEntries(), leader.EpochEntries()) || f.EndOffset() != leader.EndOffset() {
			t.Fatalf("replica epochs %v end %d, leader %v end %d", f.EpochEntries(), f.EndOffset(), leader.EpochEntries(), leader.EndOffset())
		}
		for _, e := range []int32{0, 1, 3, 10, leader.LatestEpoch()} {
			fe, fo := f.EndOffsetForEpoch(e)
			le, lo := leader.EndOffsetForEpoch(e)
			if fe != le || fo != lo {
				t.Fatalf("EndOffsetForEpoch(%d): replica (%d,%d) leader (%d,%d)", e, fe, fo, le, lo)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		f2 := openLog(t, dir, Options{SegmentBytes: 2500, Clean: true})
		defer f2.Close()
		if !slices.EqualFunc(storedBatches(t, f2), want, bytes.Equal) || !slices.Equal(f2.EpochEntries(), leader.EpochEntries()) {
			t.Fatalf("replica changed across a reopen")
		}
	})
}

func TestAppendReplicaGapsAndSegmentNames(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 400})
	var want [][]byte
	base := int64(0)
	for i := 0; i < 12; i++ {
		b := replicaBatch(t, i, base, 1, 2)
		want = append(want, b)
		if _, err := l.AppendReplica(be, [][]byte{b}, false); err != nil {
			t.Fatal(err)
		}
		base += 2 + int64(i%3)*5 // a compaction gap after some batches
	}
	hs := readAll(t, l, true)
	if len(hs) != 12 || l.EndOffset() != hs[11].NextOffset() {
		t.Fatalf("read %d batches, end %d", len(hs), l.EndOffset())
	}
	// Rolled segments are named by their first batch.
	l.mu.RLock()
	for _, s := range l.segs {
		var hdr [batch.HeaderSize]byte
		if h, err := s.readHeader(0, &hdr); err != nil || h.BaseOffset != s.base {
			t.Errorf("segment %d starts with batch %d (%v)", s.base, h.BaseOffset, err)
		}
	}
	l.mu.RUnlock()
	if l.SegmentCount() < 3 {
		t.Fatalf("no rolls: %d segments", l.SegmentCount())
	}
	// Reads from inside gaps land on the next batch.
	for _, h := range hs[1:] {
		var c Chunk
		if err := l.Read(&c, h.BaseOffset-1, 1, l.EndOffset()); err != nil {
			t.Fatal(err)
		}
		if c.FirstOffset > h.BaseOffset {
			t.Fatalf("read from %d starts at %d", h.BaseOffset-1, c.FirstOffset)
		}
		c.Release()
	}
	crashLog(l)
	for _, clean := range []bool{false, true} {
		l2 := openLog(t, dir, Options{SegmentBytes: 400, Clean: clean})
		if !slices.EqualFunc(storedBatches(t, l2), want, bytes.Equal) {
			t.Fatalf("reopen (clean %v) changed the log", clean)
		}
		if err := l2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAppendReplicaRefusals(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	l := openLog(t, t.TempDir(), Options{SegmentBytes: 1 << 20})
	defer l.Close()
	if _, err := l.AppendReplica(be, [][]byte{replicaBatch(t, 0, 0, 4, 3), replicaBatch(t, 1, 3, 6, 2)}, false); err != nil {
		t.Fatal(err)
	}
	good := replicaBatch(t, 2, 5, 6, 1)
	corrupt := replicaBatch(t, 3, 6, 6, 1)
	corrupt[len(corrupt)-1] ^= 1
	short := replicaBatch(t, 3, 6, 6, 1)
	short = short[:len(short)-1]
	for _, c := range []struct {
		name    string
		batches [][]byte
		want    error
	}{
		{"corrupt", [][]byte{good, corrupt}, ErrCorrupt},
		{"short", [][]byte{short}, ErrCorrupt},
		{"below the end", [][]byte{replicaBatch(t, 4, 4, 6, 1)}, ErrOffsetOrder},
		{"overlapping its predecessor", [][]byte{good, replicaBatch(t, 5, 5, 6, 1)}, ErrOffsetOrder},
		{"lower epoch", [][]byte{good, replicaBatch(t, 6, 6, 5, 1)}, ErrEpochOrder},
	} {
		_, err := l.AppendReplica(be, c.batches, true)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if l.EndOffset() != 5 || l.Err() != nil || !slices.Equal(l.EpochEntries(), ee(4, 0, 6, 3)) {
			t.Fatalf("%s: a refused append left a trace: end %d err %v epochs %v", c.name, l.EndOffset(), l.Err(), l.EpochEntries())
		}
	}
	if _, err := l.AppendReplica(be, [][]byte{good}, false); err != nil {
		t.Fatalf("append after refusals: %v", err)
	}
	// A batch without a leader epoch (-1) is refused.
	if _, err := l.AppendReplica(be, [][]byte{replicaBatch(t, 7, 6, -1, 1)}, false); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("batch without an epoch: %v", err)
	}
	if l.EndOffset() != 6 || !slices.Equal(l.EpochEntries(), ee(4, 0, 6, 3)) {
		t.Fatalf("end %d epochs %v", l.EndOffset(), l.EpochEntries())
	}
}

// TestAppendReplicaGroupCommit: replica and leader appends to different
// logs share one submission and one fdatasync each; the durability of a
// replica stage is reported like an append's.
func TestAppendReplicaGroupCommit(t *testing.T) {
	fb := &faultyBackend{Backend: newBackend(t, ring.KindPortable)}
	fb.failFd.Store(-1)
	leader := openLog(t, t.TempDir(), Options{})
	defer leader.Close()
	follower := openLog(t, t.TempDir(), Options{})
	defer follower.Close()
	var b Batch
	tl, err := b.Append(leader, [][]byte{makeBatch(t, 0, 2, 10, 1)}, true)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := b.AppendReplica(follower, [][]byte{replicaBatch(t, 1, 0, 2, 2), replicaBatch(t, 2, 2, 2, 1)}, false)
	if err != nil {
		t.Fatal(err)
	}
	tf2, err := b.AppendReplica(follower, [][]byte{replicaBatch(t, 3, 3, 3, 1)}, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Submit(fb); err != nil {
		t.Fatal(err)
	}
	if fb.runs.Load() != 1 || fb.syncs.Load() != 2 {
		t.Fatalf("%d submissions, %d syncs; want 1 and 2", fb.runs.Load(), fb.syncs.Load())
	}
	if tl.Err() != nil || tf.Err() != nil || tf2.Err() != nil || !tf.Synced() || !tf2.Synced() {
		t.Fatalf("tickets: %v %v %v synced %v", tl.Err(), tf.Err(), tf2.Err(), tf.Synced())
	}
	if got := tf2.Results(); len(got) != 1 || got[0].BaseOffset != 3 {
		t.Fatalf("results %+v", got)
	}
	b.Reset()
	if follower.EndOffset() != 4 || !slices.Equal(follower.EpochEntries(), ee(2, 0, 3, 3)) {
		t.Fatalf("follower end %d epochs %v", follower.EndOffset(), follower.EpochEntries())
	}
	// A failed replica write leaves the cache as it was.
	fb.failFd.Store(int64(follower.active().f.Fd()))
	if _, err := follower.AppendReplica(fb, [][]byte{replicaBatch(t, 4, 4, 9, 1)}, true); !errors.Is(err, errInjected) {
		t.Fatalf("injected failure: %v", err)
	}
	if !slices.Equal(follower.EpochEntries(), ee(2, 0, 3, 3)) || follower.EndOffset() != 4 {
		t.Fatalf("after a failed write: epochs %v end %d", follower.EpochEntries(), follower.EndOffset())
	}
}

// truncLog builds a log of 60 batches of 1-3 records over several
// segments with epoch changes, and returns it with its stored batches.
func truncLog(t *testing.T, dir string, be ring.Backend, opts Options) (*Log, [][]byte) {
	t.Helper()
	l := openLog(t, dir, opts)
	for i := 0; i < 60; i++ {
		if i%17 == 0 {
			if err := l.StartLeaderEpoch(int32(i / 17 * 2)); err != nil {
				t.Fatal(err)
			}
		}
		appendOne(t, l, be, makeBatch(t, i, 1+i%3, 30, 1000+int64(i)), false)
	}
	return l, storedBatches(t, l)
}

// keptBelow is what TruncateTo(off) keeps of batches, and the new end.
func keptBelow(batches [][]byte, off, start int64) ([][]byte, int64) {
	end := start
	var out [][]byte
	for _, b := range batches {
		h, _ := batch.ParseHeader(b)
		if h.LastOffset() >= off {
			break
		}
		out = append(out, b)
		end = h.NextOffset()
	}
	return out, end
}

func checkLogIs(t *testing.T, l *Log, want [][]byte, start, end int64) {
	t.Helper()
	if l.StartOffset() != start || l.EndOffset() != end {
		t.Fatalf("start %d end %d, want %d %d", l.StartOffset(), l.EndOffset(), start, end)
	}
	got := storedBatches(t, l)
	if !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("log holds %d batches, want %d (or bytes differ)", len(got), len(want))
	}
	var hs []batch.Header
	for _, b := range want {
		h, _ := batch.ParseHeader(b)
		hs = append(hs, h)
	}
	if e := epochsFromHeaders(hs); !slices.Equal(l.EpochEntries(), e) {
		t.Fatalf("epochs %v, want %v", l.EpochEntries(), e)
	}
	// Every offset reads from the right batch.
	for _, h := range hs {
		for _, off := range []int64{h.BaseOffset, h.LastOffset()} {
			var c Chunk
			if err := l.Read(&c, off, 1, end); err != nil || c.FirstOffset != h.BaseOffset {
				t.Fatalf("read at %d: first %d err %v, want batch %d", off, c.FirstOffset, err, h.BaseOffset)
			}
			c.Release()
		}
		if ts, ok, err := l.OffsetForTime(h.MaxTimestamp); err != nil || !ok || ts.Offset > h.LastOffset() {
			t.Fatalf("offset for time %d: %+v %v %v", h.MaxTimestamp, ts, ok, err)
		}
	}
}

func TestTruncateTo(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	opts := Options{SegmentBytes: 1500, IndexIntervalBytes: 200}
	probe, all := truncLog(t, t.TempDir(), be, opts)
	end := probe.EndOffset()
	var bases []int64
	probe.mu.RLock()
	for _, s := range probe.segs {
		bases = append(bases, s.base)
	}
	probe.mu.RUnlock()
	probe.Close()
	offs := []int64{0, 1, 2, 3, 50, end - 1, end - 2, bases[1], bases[1] + 1, bases[1] - 1, bases[len(bases)-1], bases[len(bases)-1] + 1}
	for off := int64(4); off < end; off += 9 {
		offs = append(offs, off)
	}
	for _, off := range offs {
		t.Run(fmt.Sprint(off), func(t *testing.T) {
			dir := t.TempDir()
			l, _ := truncLog(t, dir, be, opts)
			want, newEnd := keptBelow(all, off, 0)
			got, err := l.TruncateTo(off)
			if err != nil || got != newEnd {
				t.Fatalf("TruncateTo(%d) = %d, %v; want %d", off, got, err, newEnd)
			}
			if newEnd > off {
				t.Fatalf("new end %d above %d", newEnd, off)
			}
			checkLogIs(t, l, want, 0, newEnd)
			if _, err := os.Stat(filepath.Join(dir, truncationMarkerFile)); !os.IsNotExist(err) {
				t.Fatalf("marker left: %v", err)
			}
			// Appends continue at the new end, in the indexes too.
			for i := 0; i < 15; i++ {
				r := appendOne(t, l, be, makeBatch(t, 100+i, 2, 30, 5000+int64(i)), i%4 == 0)
				if i == 0 && r.BaseOffset != newEnd {
					t.Fatalf("append after truncation at %d, want %d", r.BaseOffset, newEnd)
				}
			}
			want = storedBatches(t, l)
			checkLogIs(t, l, want, 0, l.EndOffset())
			end2 := l.EndOffset()
			crashLog(l)
			l2 := openLog(t, dir, opts)
			checkLogIs(t, l2, want, 0, end2)
			if err := l2.Close(); err != nil {
				t.Fatal(err)
			}
			o := opts
			o.Clean = true
			l3 := openLog(t, dir, o)
			checkLogIs(t, l3, want, 0, end2)
			l3.Close()
		})
	}
	t.Run("at or past the end", func(t *testing.T) {
		l, all := truncLog(t, t.TempDir(), be, opts)
		defer l.Close()
		for _, off := range []int64{end, end + 10} {
			if got, err := l.TruncateTo(off); err != nil || got != end {
				t.Fatalf("TruncateTo(%d) = %d, %v", off, got, err)
			}
			checkLogIs(t, l, all, 0, end)
		}
		// A leader epoch that never appended ends there.
		if err := l.StartLeaderEpoch(9); err != nil {
			t.Fatal(err)
		}
		if l.LatestEpoch() != 9 {
			t.Fatal("no leader entry")
		}
		if _, err := l.TruncateTo(end); err != nil || l.LatestEpoch() != 6 {
			t.Fatalf("leader entry kept: %v %v", err, l.EpochEntries())
		}
		if ck, _ := readEpochCheckpoint(l.Dir()); !slices.Equal(ck, l.EpochEntries()) {
			t.Fatalf("checkpoint %v, cache %v", ck, l.EpochEntries())
		}
	})
	t.Run("below the start", func(t *testing.T) {
		l := openLog(t, t.TempDir(), opts)
		defer l.Close()
		if err := l.ResetTo(100); err != nil {
			t.Fatal(err)
		}
		if _, err := l.TruncateTo(99); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("truncate below start: %v", err)
		}
	})
	t.Run("staged appends", func(t *testing.T) {
		l, _ := truncLog(t, t.TempDir(), be, opts)
		defer l.Close()
		var b Batch
		if _, err := b.Append(l, [][]byte{makeBatch(t, 0, 1, 5, 1)}, false); err != nil {
			t.Fatal(err)
		}
		if _, err := l.TruncateTo(3); err == nil {
			t.Fatal("truncation with staged appends")
		}
		if err := l.ResetTo(3); err == nil {
			t.Fatal("reset with staged appends")
		}
		if err := b.Submit(be); err != nil {
			t.Fatal(err)
		}
		b.Reset()
		if _, err := l.TruncateTo(3); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTruncateWithGapsAndPrealloc(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	opts := Options{SegmentBytes: 700, IndexIntervalBytes: 100, Preallocate: true}
	dir := t.TempDir()
	l := openLog(t, dir, opts)
	var all [][]byte
	base := int64(0)
	for i := 0; i < 30; i++ {
		b := replicaBatch(t, i, base, int32(i/10), 3)
		all = append(all, b)
		if _, err := l.AppendReplica(be, [][]byte{b}, false); err != nil {
			t.Fatal(err)
		}
		base += 3 + int64(i%2)*4
	}
	// Into a gap: the end becomes the end of the batch before it.
	want, newEnd := keptBelow(all, 45, 0)
	if got, err := l.TruncateTo(45); err != nil || got != newEnd || newEnd >= 45 {
		t.Fatalf("TruncateTo(45) = %d, %v; want %d", got, err, newEnd)
	}
	checkLogIs(t, l, want, 0, newEnd)
	if fi, _ := os.Stat(l.active().path(logSuffix)); fi.Size() != l.active().size.Load() {
		t.Fatalf("active file %d bytes, segment %d", fi.Size(), l.active().size.Load())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, dir, opts)
	defer l2.Close()
	checkLogIs(t, l2, want, 0, newEnd)
}

func TestResetTo(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	opts := Options{SegmentBytes: 1500, IndexIntervalBytes: 200}
	for _, off := range []int64{0, 5, 60, 100, 1000} {
		t.Run(fmt.Sprint(off), func(t *testing.T) {
			dir := t.TempDir()
			l, _ := truncLog(t, dir, be, opts)
			if err := l.ResetTo(off); err != nil {
				t.Fatal(err)
			}
			checkLogIs(t, l, nil, off, off)
			if l.LatestEpoch() != UndefinedEpoch || l.SegmentCount() != 1 {
				t.Fatalf("epochs %v segments %d", l.EpochEntries(), l.SegmentCount())
			}
			if _, err := os.Stat(filepath.Join(dir, segmentName(off, logSuffix))); err != nil {
				t.Fatal(err)
			}
			// The leader's batches follow from off.
			var want [][]byte
			for i := 0; i < 20; i++ {
				b := replicaBatch(t, i, off+int64(i)*2, 7, 2)
				want = append(want, b)
				if _, err := l.AppendReplica(be, [][]byte{b}, i%5 == 0); err != nil {
					t.Fatal(err)
				}
			}
			checkLogIs(t, l, want, off, off+40)
			crashLog(l)
			l2 := openLog(t, dir, opts)
			checkLogIs(t, l2, want, off, off+40)
			if err := l2.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCompactionPlanVoidAfterTruncate: a compaction built before a
// truncation must not install the old content of a truncated segment.
func TestCompactionPlanVoidAfterTruncate(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	l := openLog(t, t.TempDir(), Options{SegmentBytes: 800})
	defer l.Close()
	for i := 0; i < 60; i++ {
		appendOne(t, l, be, keyedBatch(t, 1, [2]*string{s(fmt.Sprintf("k%d", i%4)), s(fmt.Sprint(i))}), false)
	}
	p := l.PlanCompaction(CompactOptions{})
	if p == nil {
		t.Fatal("nothing to compact")
	}
	if err := p.Build(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TruncateTo(5); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 60; i++ {
		appendOne(t, l, be, keyedBatch(t, 1, [2]*string{s(fmt.Sprintf("n%d", i%4)), s(fmt.Sprint(i))}), false)
	}
	want := storedBatches(t, l)
	st, err := l.InstallCompaction(p)
	if err != nil || st.Segments != 0 {
		t.Fatalf("stale plan installed: %+v %v", st, err)
	}
	if !slices.EqualFunc(storedBatches(t, l), want, bytes.Equal) {
		t.Fatal("log changed")
	}
}
