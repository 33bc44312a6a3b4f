package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

func ee(pairs ...int64) []EpochEntry {
	var out []EpochEntry
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, EpochEntry{Epoch: int32(pairs[i]), StartOffset: pairs[i+1]})
	}
	return out
}

func TestAssignEpoch(t *testing.T) {
	cases := []struct {
		name    string
		in      []EpochEntry
		e       int32
		s, end  int64
		want    []EpochEntry
		changed bool
		err     bool
	}{
		{"first", nil, 0, 0, 0, ee(0, 0), true, false},
		{"first after a gap", nil, 2, 7, 0, ee(2, 7), true, false},
		{"same epoch", ee(0, 0), 0, 10, 10, ee(0, 0), false, false},
		{"new epoch", ee(0, 0), 2, 10, 10, ee(0, 0, 2, 10), true, false},
		{"new epoch after a gap", ee(0, 0), 2, 15, 10, ee(0, 0, 2, 15), true, false},
		{"no epoch", ee(0, 0), -1, 10, 10, ee(0, 0), false, false},
		{"no epoch ends empty leadership", ee(0, 0, 5, 10), -1, 12, 10, ee(0, 0), true, false},
		{"lower epoch after data", ee(0, 0, 2, 10), 1, 20, 20, ee(0, 0, 2, 10), false, true},
		// A leader's entry without data is superseded by whatever is
		// appended at or after it, even a lower epoch (a replica that
		// never truncated its own leadership entry).
		{"supersede empty leadership", ee(0, 0, 5, 10), 3, 10, 10, ee(0, 0, 3, 10), true, false},
		{"supersede empty leadership after a gap", ee(0, 0, 5, 10), 3, 15, 10, ee(0, 0, 3, 15), true, false},
		{"back to the data's epoch", ee(0, 0, 5, 10), 0, 10, 10, ee(0, 0), true, false},
		{"the leader's first batch", ee(0, 0, 5, 10), 5, 10, 10, ee(0, 0, 5, 10), false, false},
		{"the leader's epoch after a gap", ee(0, 0, 5, 10), 5, 12, 10, ee(0, 0, 5, 12), true, false},
		{"higher over empty leadership", ee(0, 0, 5, 10), 6, 10, 10, ee(0, 0, 6, 10), true, false},
		{"lower than data under empty leadership", ee(0, 0, 4, 5, 5, 10), 3, 10, 10, ee(0, 0, 4, 5, 5, 10), false, true},
	}
	for _, c := range cases {
		in := slices.Clone(c.in)
		got, changed, err := assignEpoch(c.in, c.e, c.s, c.end)
		if (err != nil) != c.err || changed != c.changed || !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v changed %v err %v; want %v changed %v err %v", c.name, got, changed, err, c.want, c.changed, c.err)
		}
		if err != nil && !errors.Is(err, ErrEpochOrder) {
			t.Errorf("%s: error %v is not ErrEpochOrder", c.name, err)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("%s: input modified", c.name)
		}
	}
}

func TestTruncateEpochs(t *testing.T) {
	e := ee(1, 0, 3, 10, 4, 20)
	if got, ok := truncateEpochsFromEnd(e, 20); !ok || !slices.Equal(got, ee(1, 0, 3, 10)) {
		t.Errorf("from end 20: %v", got)
	}
	if got, ok := truncateEpochsFromEnd(e, 21); ok || !slices.Equal(got, e) {
		t.Errorf("from end 21: %v", got)
	}
	if got, _ := truncateEpochsFromEnd(e, 0); len(got) != 0 {
		t.Errorf("from end 0: %v", got)
	}
	for _, c := range []struct {
		start int64
		want  []EpochEntry
		ok    bool
	}{
		{0, e, false},
		{5, ee(1, 5, 3, 10, 4, 20), true},
		{10, ee(3, 10, 4, 20), true},
		{15, ee(3, 15, 4, 20), true},
		{25, ee(4, 25), true},
	} {
		got, ok := truncateEpochsFromStart(e, c.start)
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("from start %d: %v %v, want %v %v", c.start, got, ok, c.want, c.ok)
		}
	}
	if got, ok := truncateEpochsFromStart(ee(2, 30), 10); ok || !slices.Equal(got, ee(2, 30)) {
		t.Errorf("start below the first entry: %v %v", got, ok)
	}
}

func TestEndOffsetForEpochSemantics(t *testing.T) {
	e := ee(1, 5, 3, 10, 4, 20)
	const leo = 30
	for _, c := range []struct {
		req  int32
		ep   int32
		off  int64
		what string
	}{
		{-1, -1, -1, "undefined request"},
		{0, 0, 5, "older than the first epoch: start of the first"},
		{1, 1, 10, "epoch 1 ends where 3 starts"},
		{2, 1, 10, "missing epoch 2: largest below, and where 3 starts"},
		{3, 3, 20, "epoch 3 ends where 4 starts"},
		{4, 4, leo, "latest: the log end"},
		{5, -1, -1, "newer than the latest"},
	} {
		ep, off := endOffsetForEpoch(e, c.req, leo)
		if ep != c.ep || off != c.off {
			t.Errorf("%s: EndOffsetForEpoch(%d) = (%d, %d), want (%d, %d)", c.what, c.req, ep, off, c.ep, c.off)
		}
	}
	if ep, off := endOffsetForEpoch(nil, 0, leo); ep != -1 || off != -1 {
		t.Errorf("empty cache: (%d, %d)", ep, off)
	}
}

func TestEpochCheckpointFormat(t *testing.T) {
	// Kafka's LeaderEpochCheckpointFile, byte for byte.
	e := ee(0, 0, 2, 150, 7, 4096)
	want := "0\n3\n0 0\n2 150\n7 4096\n"
	if got := string(encodeEpochCheckpoint(e)); got != want {
		t.Fatalf("encoded %q, want %q", got, want)
	}
	got, err := parseEpochCheckpoint([]byte(want))
	if err != nil || !slices.Equal(got, e) {
		t.Fatalf("parsed %v %v", got, err)
	}
	if got, err := parseEpochCheckpoint([]byte("0\n0\n")); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v %v", got, err)
	}
	for _, bad := range []string{
		"", "0\n", "0\n1\n", "1\n0\n", "0\n2\n0 0\n", "0\n1\n0 0", "0\n1\n0\n",
		"0\n1\n-1 0\n", "0\n1\n0 -5\n", "0\n2\n3 0\n2 10\n", "0\n2\n1 10\n2 10\n",
		"0\n1\n0 0 0\n", "0\n-1\n", "0\n1\nx 0\n", "0\n1\n2147483648 0\n",
	} {
		if _, err := parseEpochCheckpoint([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func readCheckpointFile(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, epochCheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// crashLog abandons l as a killed process would: no flush, no checkpoint,
// no recovery point; only the files it wrote stay.
func crashLog(l *Log) {
	l.bg.Wait()
	l.closeSegments()
}

func TestLeaderEpochStampingAndCheckpoint(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 1000})
	for i := 0; i < 5; i++ {
		appendOne(t, l, be, makeBatch(t, i, 2, 20, 1000), false)
	}
	if got := l.EpochEntries(); !slices.Equal(got, ee(0, 0)) {
		t.Fatalf("single-node epochs %v", got)
	}
	if err := l.StartLeaderEpoch(3); err != nil {
		t.Fatal(err)
	}
	// The new leader's entry is on disk before StartLeaderEpoch returns.
	if got := readCheckpointFile(t, dir); got != "0\n2\n0 0\n3 10\n" {
		t.Fatalf("checkpoint after StartLeaderEpoch: %q", got)
	}
	if ep, off := l.EndOffsetForEpoch(0); ep != 0 || off != 10 {
		t.Fatalf("EndOffsetForEpoch(0) = (%d, %d)", ep, off)
	}
	for i := 0; i < 30; i++ {
		appendOne(t, l, be, makeBatch(t, i, 1, 20, 1000), false)
	}
	if err := l.StartLeaderEpoch(2); !errors.Is(err, ErrEpochOrder) {
		t.Fatalf("lower epoch: %v", err)
	}
	if err := l.StartLeaderEpoch(3); err != nil {
		t.Fatalf("same epoch again: %v", err)
	}
	if err := l.StartLeaderEpoch(5); err != nil {
		t.Fatal(err)
	}
	appendOne(t, l, be, makeBatch(t, 0, 1, 20, 1000), false)
	hs := readAll(t, l, false)
	for _, h := range hs {
		want := int32(0)
		switch {
		case h.BaseOffset >= 40:
			want = 5
		case h.BaseOffset >= 10:
			want = 3
		}
		if h.LeaderEpoch != want {
			t.Fatalf("batch %d epoch %d, want %d", h.BaseOffset, h.LeaderEpoch, want)
		}
	}
	wantE := ee(0, 0, 3, 10, 5, 40)
	if got := l.EpochEntries(); !slices.Equal(got, wantE) {
		t.Fatalf("epochs %v, want %v", got, wantE)
	}
	if l.LatestEpoch() != 5 {
		t.Fatalf("latest %d", l.LatestEpoch())
	}
	// SetOptions (a topic config change) does not change the epoch.
	o := l.Options()
	o.LeaderEpoch = 0
	if err := l.SetOptions(o); err != nil || l.Options().LeaderEpoch != 5 {
		t.Fatalf("SetOptions changed the leader epoch: %v %d", err, l.Options().LeaderEpoch)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readCheckpointFile(t, dir); got != "0\n3\n0 0\n3 10\n5 40\n" {
		t.Fatalf("checkpoint at close: %q", got)
	}
	l2 := openLog(t, dir, Options{SegmentBytes: 1000, Clean: true})
	defer l2.Close()
	if got := l2.EpochEntries(); !slices.Equal(got, wantE) {
		t.Fatalf("reopened epochs %v", got)
	}
	// Open with a lower epoch than the data: appends are refused.
	if _, err := l2.Append(be, [][]byte{makeBatch(t, 0, 1, 20, 1000)}, false); !errors.Is(err, ErrEpochOrder) {
		t.Fatalf("append at epoch 0 after epoch 5 data: %v", err)
	}
	if l2.EndOffset() != 41 || l2.Err() != nil {
		t.Fatalf("refused append changed the log: end %d err %v", l2.EndOffset(), l2.Err())
	}
}

// epochsFromHeaders derives the epoch cache from the batches themselves.
func epochsFromHeaders(hs []batch.Header) []EpochEntry {
	var out []EpochEntry
	for _, h := range hs {
		if n := len(out); h.LeaderEpoch >= 0 && (n == 0 || out[n-1].Epoch != h.LeaderEpoch) {
			out = append(out, EpochEntry{Epoch: h.LeaderEpoch, StartOffset: h.BaseOffset})
		}
	}
	return out
}

// buildEpochLog writes a log with many segments and epoch changes at
// random places, some several within one index interval.
func buildEpochLog(t *testing.T, dir string, be ring.Backend, opts Options, batches int, seed int) *Log {
	t.Helper()
	l := openLog(t, dir, opts)
	epoch := int32(0)
	x := uint32(seed)*2654435761 + 1
	for i := 0; i < batches; i++ {
		x = x*1103515245 + 12345
		if x>>24 < 12 {
			epoch += 1 + int32(x>>20&3)
			if err := l.StartLeaderEpoch(epoch); err != nil {
				t.Fatal(err)
			}
		}
		appendOne(t, l, be, makeBatch(t, i, 1+int(x>>16%3), 10, 1000+int64(i)), false)
	}
	return l
}

func TestEpochCacheRebuild(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	opts := Options{SegmentBytes: 3000, IndexIntervalBytes: 300}
	for seed := 0; seed < 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			dir := t.TempDir()
			l := buildEpochLog(t, dir, be, opts, 400, seed)
			hs := readAll(t, l, false)
			want := epochsFromHeaders(hs)
			if got := l.EpochEntries(); !slices.Equal(got, want) {
				t.Fatalf("live cache %v, headers say %v", got, want)
			}
			if len(want) < 5 || l.SegmentCount() < 5 {
				t.Fatalf("test log too simple: %d epochs, %d segments", len(want), l.SegmentCount())
			}
			// The bisecting scan agrees with a full walk.
			if got, err := l.scanEpochStarts(l.StartOffset()); err != nil || !slices.Equal(got, want) {
				t.Fatalf("scan %v %v, want %v", got, err, want)
			}
			for _, from := range []int64{1, 37, hs[len(hs)/2].BaseOffset, l.EndOffset() - 1} {
				var w []EpochEntry
				for _, h := range hs {
					if h.NextOffset() > from && (len(w) == 0 || w[len(w)-1].Epoch != h.LeaderEpoch) {
						w = append(w, EpochEntry{Epoch: h.LeaderEpoch, StartOffset: h.BaseOffset})
					}
				}
				if got, err := l.scanEpochStarts(from); err != nil || !slices.Equal(got, w) {
					t.Fatalf("scan from %d: %v %v, want %v", from, got, err, w)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			ck := filepath.Join(dir, epochCheckpointFile)
			for _, damage := range []struct {
				name  string
				apply func()
			}{
				{"missing", func() { os.Remove(ck) }},
				{"garbage", func() { os.WriteFile(ck, []byte("0\n2\nzz\n"), 0o644) }},
				{"wrong epoch", func() { os.WriteFile(ck, encodeEpochCheckpoint(ee(0, 0, 99, 10)), 0o644) }},
				{"entry missing", func() { os.WriteFile(ck, encodeEpochCheckpoint(want[:len(want)-1]), 0o644) }},
				{"first missing", func() { os.WriteFile(ck, encodeEpochCheckpoint(want[1:]), 0o644) }},
				{"shifted start", func() {
					w := slices.Clone(want)
					w[2].StartOffset++
					os.WriteFile(ck, encodeEpochCheckpoint(w), 0o644)
				}},
			} {
				for _, clean := range []bool{true, false} {
					damage.apply()
					o := opts
					o.Clean = clean
					l := openLog(t, dir, o)
					if got := l.EpochEntries(); !slices.Equal(got, want) {
						t.Fatalf("%s (clean %v): rebuilt %v, want %v", damage.name, clean, got, want)
					}
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					if got, err := readEpochCheckpoint(dir); err != nil || !slices.Equal(got, want) {
						t.Fatalf("%s: checkpoint after close %v %v", damage.name, got, err)
					}
				}
			}
		})
	}
}

// TestEpochCacheAfterCrash: epoch starts after the last checkpoint write
// come back from the headers that unclean recovery rescans; those below
// the recovery point come from the checkpoint, which was written before
// the recovery point passed them.
func TestEpochCacheAfterCrash(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	opts := Options{SegmentBytes: 2000, IndexIntervalBytes: 200}
	dir := t.TempDir()
	l := buildEpochLog(t, dir, be, opts, 300, 7)
	// The log turns follower: epoch starts the checkpoint learns lazily.
	for i := 0; i < 60; i++ {
		data := makeBatch(t, i, 1, 10, 5000)
		batch.SetLeaderEpoch(data, int32(1000+i/7))
		batch.SetBaseOffset(data, l.EndOffset())
		if _, err := l.AppendReplica(be, [][]byte{data}, false); err != nil {
			t.Fatal(err)
		}
	}
	want := epochsFromHeaders(readAll(t, l, false))
	if got := l.EpochEntries(); !slices.Equal(got, want) {
		t.Fatalf("live %v, want %v", got, want)
	}
	onDisk, _ := readEpochCheckpoint(dir)
	if slices.Equal(onDisk, want) {
		t.Fatalf("the checkpoint is already complete; the test shows nothing")
	}
	crashLog(l)
	l2 := openLog(t, dir, opts)
	defer l2.Close()
	if got := l2.EpochEntries(); !slices.Equal(got, want) {
		t.Fatalf("after crash %v, want %v (checkpoint had %v)", got, want, onDisk)
	}
}

func TestEpochRetentionTrim(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	dir := t.TempDir()
	opts := Options{SegmentBytes: 600, RetentionBytes: 1500}
	l := openLog(t, dir, opts)
	for i := 0; i < 40; i++ {
		if i%10 == 0 {
			if err := l.StartLeaderEpoch(int32(i / 10)); err != nil {
				t.Fatal(err)
			}
		}
		appendOne(t, l, be, makeBatch(t, i, 1, 40, 1000), false)
	}
	if _, err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	start := l.StartOffset()
	if start < 20 {
		t.Fatalf("retention left start %d", start)
	}
	got := l.EpochEntries()
	if got[0].StartOffset != start || got[len(got)-1] != (EpochEntry{3, 30}) || len(got) > 2 {
		t.Fatalf("after retention to %d: %v", start, got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, dir, Options{SegmentBytes: 600, Clean: true})
	defer l2.Close()
	if !slices.Equal(l2.EpochEntries(), got) {
		t.Fatalf("reopened %v, want %v", l2.EpochEntries(), got)
	}
}
