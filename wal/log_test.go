package wal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

func TestAppendReadDense(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		l := openLog(t, t.TempDir(), Options{SegmentBytes: 4096})
		defer l.Close()
		want := int64(0)
		for i := 0; i < 50; i++ {
			n := 1 + i%5
			res := appendOne(t, l, be, makeBatch(t, i, n, 30, 1000), i%3 == 0)
			if res.BaseOffset != want || res.LastOffset != want+int64(n)-1 {
				t.Fatalf("batch %d got [%d,%d], want base %d", i, res.BaseOffset, res.LastOffset, want)
			}
			want += int64(n)
		}
		if l.EndOffset() != want {
			t.Fatalf("end %d want %d", l.EndOffset(), want)
		}
		if l.SegmentCount() < 3 {
			t.Fatalf("expected rolls at 4 KiB, have %d segments", l.SegmentCount())
		}
		hs := readAll(t, l, false)
		if len(hs) != 50 {
			t.Fatalf("read %d batches", len(hs))
		}
	})
}

func TestReadSemantics(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	l := openLog(t, t.TempDir(), Options{SegmentBytes: 2000})
	defer l.Close()
	var sizes []int
	for i := 0; i < 20; i++ {
		b := makeBatch(t, i, 4, 50, 1000)
		sizes = append(sizes, len(b))
		appendOne(t, l, be, b, false)
	}
	end := l.EndOffset() // 80
	read := func(off int64, maxBytes int, upTo int64) (Chunk, error) {
		var c Chunk
		err := l.Read(&c, off, maxBytes, upTo)
		t.Cleanup(c.Release)
		return c, err
	}
	t.Run("at least one batch", func(t *testing.T) {
		c, err := read(0, 1, end)
		if err != nil || c.Bytes != int64(sizes[0]) || c.FirstOffset != 0 || c.NextOffset != 4 {
			t.Fatalf("maxBytes=1: %d bytes [%d,%d) %v", c.Bytes, c.FirstOffset, c.NextOffset, err)
		}
	})
	t.Run("inside a batch", func(t *testing.T) {
		c, err := read(6, 1, end)
		if err != nil || c.FirstOffset != 4 || c.NextOffset != 8 {
			t.Fatalf("offset 6: [%d,%d) %v", c.FirstOffset, c.NextOffset, err)
		}
	})
	t.Run("max bytes whole batches", func(t *testing.T) {
		c, err := read(0, sizes[0]*3+10, end)
		if err != nil || c.Bytes != int64(sizes[0]*3) || c.NextOffset != 12 {
			t.Fatalf("3 batches: %d bytes next %d %v", c.Bytes, c.NextOffset, err)
		}
	})
	t.Run("across segments", func(t *testing.T) {
		if l.SegmentCount() < 3 {
			t.Fatalf("want several segments, have %d", l.SegmentCount())
		}
		c, err := read(0, 1<<20, end)
		if err != nil || c.NextOffset != end || len(c.Ranges) != l.SegmentCount() {
			t.Fatalf("whole log: next %d ranges %d segments %d %v", c.NextOffset, len(c.Ranges), l.SegmentCount(), err)
		}
	})
	t.Run("up to bound", func(t *testing.T) {
		c, err := read(0, 1<<20, 10)
		if err != nil || c.NextOffset != 12 {
			// the batch holding offset 8..11 starts below 10: included whole
			t.Fatalf("upTo 10: next %d %v", c.NextOffset, err)
		}
		c, err = read(12, 1<<20, 12)
		if err != nil || c.Bytes != 0 {
			t.Fatalf("upTo==offset: %d bytes %v", c.Bytes, err)
		}
	})
	t.Run("end and out of range", func(t *testing.T) {
		c, err := read(end, 100, end)
		if err != nil || c.Bytes != 0 {
			t.Fatalf("read at end: %d bytes %v", c.Bytes, err)
		}
		if _, err := read(end+1, 100, end+1); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("past end: %v", err)
		}
		if _, err := read(-1, 100, end); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("negative: %v", err)
		}
	})
	t.Run("every offset", func(t *testing.T) {
		for off := int64(0); off < end; off++ {
			c, err := read(off, 1, end)
			if err != nil || c.FirstOffset > off || c.NextOffset <= off {
				t.Fatalf("offset %d: [%d,%d) %v", off, c.FirstOffset, c.NextOffset, err)
			}
		}
	})
}

func TestRollByAge(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	clk := newFakeClock()
	l := openLog(t, t.TempDir(), Options{SegmentAge: time.Minute, Now: clk.Now})
	defer l.Close()
	appendOne(t, l, be, makeBatch(t, 0, 1, 10, clk.Now().UnixMilli()), false)
	appendOne(t, l, be, makeBatch(t, 1, 1, 10, clk.Now().UnixMilli()), false)
	if l.SegmentCount() != 1 {
		t.Fatal("rolled too early")
	}
	clk.Advance(2 * time.Minute)
	appendOne(t, l, be, makeBatch(t, 2, 1, 10, clk.Now().UnixMilli()), false)
	if l.SegmentCount() != 2 {
		t.Fatalf("segments %d after segment.ms passed", l.SegmentCount())
	}
}

func TestReopenClean(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		dir := t.TempDir()
		l := openLog(t, dir, Options{SegmentBytes: 3000, IndexIntervalBytes: 200})
		for i := 0; i < 40; i++ {
			appendOne(t, l, be, makeBatch(t, i, 3, 40, int64(1000+i*10)), false)
		}
		end := l.EndOffset()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = openLog(t, dir, Options{SegmentBytes: 3000, IndexIntervalBytes: 200, Clean: true})
		defer l.Close()
		if l.EndOffset() != end {
			t.Fatalf("end %d after reopen, want %d", l.EndOffset(), end)
		}
		readAll(t, l, false)
		res := appendOne(t, l, be, makeBatch(t, 99, 1, 10, 5000), true)
		if res.BaseOffset != end {
			t.Fatalf("append after reopen got %d want %d", res.BaseOffset, end)
		}
	})
}

// segFiles lists the files with suffix in dir, sorted.
func segFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+suffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func fillLog(t *testing.T, dir string, be ring.Backend, batches int, opts Options) (end int64) {
	t.Helper()
	l := openLog(t, dir, opts)
	for i := 0; i < batches; i++ {
		appendOne(t, l, be, makeBatch(t, i, 2, 60, int64(1000+i)), false)
	}
	end = l.EndOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return end
}

func TestIndexesRebuilt(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	opts := Options{SegmentBytes: 4000, IndexIntervalBytes: 300}
	damage := map[string]func(t *testing.T, dir string){
		"deleted": func(t *testing.T, dir string) {
			for _, f := range append(segFiles(t, dir, indexSuffix), segFiles(t, dir, timeIndexSuffix)...) {
				os.Remove(f)
			}
		},
		"zeroed": func(t *testing.T, dir string) {
			for _, f := range append(segFiles(t, dir, indexSuffix), segFiles(t, dir, timeIndexSuffix)...) {
				fi, _ := os.Stat(f)
				os.WriteFile(f, make([]byte, fi.Size()), 0o644)
			}
		},
		"short": func(t *testing.T, dir string) {
			for _, f := range segFiles(t, dir, indexSuffix) {
				fi, _ := os.Stat(f)
				os.Truncate(f, fi.Size()-3)
			}
		},
		"garbage": func(t *testing.T, dir string) {
			for _, f := range segFiles(t, dir, timeIndexSuffix) {
				fi, _ := os.Stat(f)
				os.WriteFile(f, bytes.Repeat([]byte{0xab}, int(fi.Size())), 0o644)
			}
		},
	}
	for name, fn := range damage {
		for _, clean := range []bool{true, false} {
			t.Run(name+map[bool]string{true: "/clean", false: "/unclean"}[clean], func(t *testing.T) {
				dir := t.TempDir()
				end := fillLog(t, dir, be, 60, opts)
				fn(t, dir)
				o := opts
				o.Clean = clean
				l := openLog(t, dir, o)
				defer l.Close()
				if l.EndOffset() != end {
					t.Fatalf("end %d want %d", l.EndOffset(), end)
				}
				hs := readAll(t, l, false)
				if len(hs) != 60 {
					t.Fatalf("read %d batches", len(hs))
				}
				for off := int64(0); off < end; off += 7 {
					var c Chunk
					if err := l.Read(&c, off, 1, end); err != nil || c.FirstOffset > off || c.NextOffset <= off {
						t.Fatalf("offset %d: [%d,%d) %v", off, c.FirstOffset, c.NextOffset, err)
					}
					c.Release()
				}
				got, ok, err := l.OffsetForTime(1000 + 30)
				if err != nil || !ok || got.Offset != 59 || got.Timestamp != 1030 {
					t.Fatalf("offset for time: %+v %v %v", got, ok, err)
				}
			})
		}
	}
}

func TestTornTail(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	cases := map[string]func(data []byte) []byte{
		"garbage appended": func(d []byte) []byte { return append(d, bytes.Repeat([]byte{0x5a}, 777)...) },
		"zeros appended":   func(d []byte) []byte { return append(d, make([]byte, 4096)...) },
		"partial batch":    func(d []byte) []byte { return d[:len(d)-37] },
		"partial header":   func(d []byte) []byte { return append(d, 0, 0, 0) },
	}
	for name, mut := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			fillLog(t, dir, be, 10, Options{})
			seg := segFiles(t, dir, logSuffix)[0]
			data, _ := os.ReadFile(seg)
			last := batch.BatchLength(data) + batch.LogOverhead
			_ = last
			os.WriteFile(seg, mut(data), 0o644)
			os.Remove(filepath.Join(dir, recoveryPointFile))
			l := openLog(t, dir, Options{})
			defer l.Close()
			hs := readAll(t, l, false)
			want := 10
			if name == "partial batch" {
				want = 9
			}
			if len(hs) != want {
				t.Fatalf("%d batches survive, want %d", len(hs), want)
			}
			res := appendOne(t, l, be, makeBatch(t, 100, 1, 10, 1), true)
			if res.BaseOffset != int64(want*2) {
				t.Fatalf("next append at %d", res.BaseOffset)
			}
			readAll(t, l, false)
		})
	}
}

func TestCorruptionInTheMiddle(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	dir := t.TempDir()
	fillLog(t, dir, be, 20, Options{})
	seg := segFiles(t, dir, logSuffix)[0]
	data, _ := os.ReadFile(seg)
	bsize := int(batch.BatchLength(data)) + batch.LogOverhead
	// Flip bytes inside the 5th batch's records.
	data[4*bsize+batch.HeaderSize+5] ^= 0xff
	os.WriteFile(seg, data, 0o644)
	os.Remove(filepath.Join(dir, recoveryPointFile))

	_, err := Open(dir, Options{Logger: testLogger(t)})
	var ce *CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open of a log corrupt in the middle: %v", err)
	}
	if ce.Pos != int64(4*bsize) || ce.NextValid != int64(5*bsize) {
		t.Fatalf("corruption reported at %d, next valid %d", ce.Pos, ce.NextValid)
	}
	// Nothing was dropped by the refusal.
	if after, _ := os.ReadFile(seg); !bytes.Equal(after, data) {
		t.Fatal("refused open still modified the segment")
	}

	l := openLog(t, dir, Options{RepairCorruption: true})
	defer l.Close()
	hs := readAll(t, l, true)
	if len(hs) != 19 {
		t.Fatalf("%d batches kept after repair, want 19", len(hs))
	}
	if hs[4].BaseOffset != 10 || l.EndOffset() != 40 {
		t.Fatalf("after repair: batch 4 at %d, end %d", hs[4].BaseOffset, l.EndOffset())
	}
	saved, err := os.ReadFile(filepath.Join(dir, segmentName(0, corruptSuffix)))
	if err != nil || len(saved) != bsize {
		t.Fatalf("damaged bytes saved: %d bytes, %v", len(saved), err)
	}
	// Offsets in the gap read as the next batch.
	var c Chunk
	if err := l.Read(&c, 8, 1, l.EndOffset()); err != nil || c.FirstOffset != 10 {
		t.Fatalf("read in the repaired gap: %d %v", c.FirstOffset, err)
	}
	c.Release()
	if res := appendOne(t, l, be, makeBatch(t, 1, 1, 1, 1), false); res.BaseOffset != 40 {
		t.Fatalf("append after repair at %d", res.BaseOffset)
	}
}

func TestCorruptionAtEndOfOlderSegment(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	dir := t.TempDir()
	fillLog(t, dir, be, 40, Options{SegmentBytes: 1500})
	segs := segFiles(t, dir, logSuffix)
	if len(segs) < 3 {
		t.Fatal("need several segments")
	}
	// Damage the last batch of the first segment: valid data follows in
	// later segments, so this is corruption, not a torn tail.
	data, _ := os.ReadFile(segs[0])
	data[len(data)-3] ^= 0x01
	os.WriteFile(segs[0], data, 0o644)
	os.Remove(filepath.Join(dir, recoveryPointFile))
	_, err := Open(dir, Options{Logger: testLogger(t)})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.NextValid != -1 {
		t.Fatalf("got %v", err)
	}
}

func TestRetention(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	clk := newFakeClock()
	l := openLog(t, t.TempDir(), Options{SegmentBytes: 1000, Now: clk.Now})
	defer l.Close()
	for i := 0; i < 30; i++ {
		appendOne(t, l, be, makeBatch(t, i, 2, 50, clk.Now().UnixMilli()), false)
		clk.Advance(time.Second)
	}
	segs := l.SegmentCount()
	total := l.Size()
	// By bytes.
	o := l.Options()
	o.RetentionBytes = total / 2
	if err := l.SetOptions(o); err != nil {
		t.Fatal(err)
	}
	n, err := l.EnforceRetention()
	if err != nil || n == 0 || l.Size() > total/2+1000 || l.Size() < total/2-1000 {
		t.Fatalf("retention by bytes deleted %d (%v), size %d of %d", n, err, l.Size(), total)
	}
	if l.StartOffset() == 0 || l.SegmentCount() != segs-n {
		t.Fatalf("start %d, segments %d", l.StartOffset(), l.SegmentCount())
	}
	var c Chunk
	if err := l.Read(&c, 0, 100, l.EndOffset()); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below start: %v", err)
	}
	readAll(t, l, false)
	// By age: everything is older than 10 minutes after this jump, the
	// active segment too (it is rolled and deleted).
	o.RetentionBytes = 0
	o.RetentionAge = 10 * time.Minute
	l.SetOptions(o)
	clk.Advance(time.Hour)
	if _, err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != l.EndOffset() || l.Size() != 0 {
		t.Fatalf("after age retention start %d end %d size %d", l.StartOffset(), l.EndOffset(), l.Size())
	}
	res := appendOne(t, l, be, makeBatch(t, 1, 1, 1, clk.Now().UnixMilli()), false)
	if res.BaseOffset != 60 {
		t.Fatalf("append after full retention at %d", res.BaseOffset)
	}
}

func TestReaderKeepsDeletedSegment(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	l := openLog(t, t.TempDir(), Options{SegmentBytes: 500})
	defer l.Close()
	for i := 0; i < 10; i++ {
		appendOne(t, l, be, makeBatch(t, i, 2, 50, 1), false)
	}
	var c Chunk
	if err := l.Read(&c, 0, 1, l.EndOffset()); err != nil {
		t.Fatal(err)
	}
	o := l.Options()
	o.RetentionBytes = 1
	l.SetOptions(o)
	if n, err := l.EnforceRetention(); err != nil || n == 0 {
		t.Fatalf("retention: %d %v", n, err)
	}
	buf := make([]byte, c.Ranges[0].Len)
	if _, err := c.Ranges[0].File.ReadAt(buf, c.Ranges[0].Pos); err != nil {
		t.Fatalf("read of a deleted segment still referenced: %v", err)
	}
	if _, err := batch.CheckStored(buf); err != nil {
		t.Fatal(err)
	}
	c.Release()
}

func TestGroupCommitManyLogs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		fb := &faultyBackend{Backend: be}
		fb.failFd.Store(-1)
		var logs []*Log
		for i := 0; i < 8; i++ {
			logs = append(logs, openLog(t, filepath.Join(t.TempDir(), "p"), Options{SegmentBytes: 2000}))
		}
		var b Batch
		for round := 0; round < 10; round++ {
			var stages []Ticket
			for i, l := range logs {
				st, err := b.Append(l, [][]byte{makeBatch(t, round, 2, 40, 1), makeBatch(t, round, 3, 40, 1)}, i%2 == 0)
				if err != nil {
					t.Fatal(err)
				}
				stages = append(stages, st)
			}
			if err := b.Submit(fb); err != nil {
				t.Fatal(err)
			}
			for i, st := range stages {
				if st.Err() != nil || st.Results()[1].LastOffset != int64(round*5+4) {
					t.Fatalf("log %d round %d: %+v %v", i, round, st.Results(), st.Err())
				}
			}
			b.Reset()
		}
		if fb.runs.Load() != 10 {
			t.Fatalf("%d submissions for 10 rounds", fb.runs.Load())
		}
		// 4 syncing logs per round, one fdatasync each (two when the
		// round rolled a segment).
		if s := fb.syncs.Load(); s < 40 || s > 60 {
			t.Fatalf("%d syncs", s)
		}
		for _, l := range logs {
			readAll(t, l, false)
			l.Close()
		}
	})
}

func TestWriteFailureIsStickyAndContained(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		fb := &faultyBackend{Backend: be}
		fb.failFd.Store(-1)
		good := openLog(t, t.TempDir(), Options{})
		bad := openLog(t, t.TempDir(), Options{})
		defer good.Close()
		defer bad.Close()
		appendOne(t, bad, fb, makeBatch(t, 0, 1, 10, 1), false)
		fb.failFd.Store(int64(bad.active().f.Fd()))
		var b Batch
		sg, _ := b.Append(good, [][]byte{makeBatch(t, 1, 1, 10, 1)}, true)
		sb, _ := b.Append(bad, [][]byte{makeBatch(t, 2, 1, 10, 1)}, true)
		if err := b.Submit(fb); err != nil {
			t.Fatal(err)
		}
		if sg.Err() != nil || !errors.Is(sb.Err(), errInjected) {
			t.Fatalf("good %v bad %v", sg.Err(), sb.Err())
		}
		if bad.EndOffset() != 1 || good.EndOffset() != 1 {
			t.Fatalf("end offsets bad %d good %d", bad.EndOffset(), good.EndOffset())
		}
		if _, err := bad.Append(be, [][]byte{makeBatch(t, 3, 1, 10, 1)}, false); !errors.Is(err, errInjected) {
			t.Fatalf("append after failure: %v", err)
		}
		readAll(t, bad, false)
	})
}

func TestFlushMessages(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	fb := &faultyBackend{Backend: be}
	fb.failFd.Store(-1)
	l := openLog(t, t.TempDir(), Options{FlushMessages: 10})
	defer l.Close()
	for i := 0; i < 9; i++ {
		appendOne(t, l, fb, makeBatch(t, i, 3, 10, 1), false)
	}
	// 27 records: a sync at 12, 21 (counts reset after each sync).
	if s := fb.syncs.Load(); s != 2 {
		t.Fatalf("%d syncs for 27 records with flush.messages=10", s)
	}
	clk := newFakeClock()
	l2 := openLog(t, t.TempDir(), Options{FlushInterval: time.Second, Now: clk.Now})
	defer l2.Close()
	appendOne(t, l2, fb, makeBatch(t, 0, 1, 10, 1), false)
	if l2.FlushDue(clk.Now()) {
		t.Fatal("flush due immediately")
	}
	clk.Advance(2 * time.Second)
	if !l2.FlushDue(clk.Now()) {
		t.Fatal("flush not due after flush.ms")
	}
	var b Batch
	b.Sync(l2)
	if err := b.Submit(fb); err != nil {
		t.Fatal(err)
	}
	if l2.FlushDue(clk.Now()) {
		t.Fatal("flush still due after a sync")
	}
}

func TestLogAppendTimeAndTimeLookup(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	clk := newFakeClock()
	l := openLog(t, t.TempDir(), Options{LogAppendTime: true, Now: clk.Now})
	defer l.Close()
	res := appendOne(t, l, be, makeBatch(t, 0, 3, 10, 5), false)
	if res.AppendTime != clk.Now().UnixMilli() {
		t.Fatalf("append time %d", res.AppendTime)
	}
	hs := readAll(t, l, false)
	if !hs[0].LogAppendTime() || hs[0].MaxTimestamp != res.AppendTime {
		t.Fatalf("%+v", hs[0])
	}
	got, ok, err := l.MaxTimestamp()
	if err != nil || !ok || got.Timestamp != res.AppendTime {
		t.Fatalf("max ts %+v %v %v", got, ok, err)
	}
}

func TestOffsetForTime(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 1500, IndexIntervalBytes: 100})
	// batch i holds records with timestamps 1000+10i .. 1000+10i+3
	for i := 0; i < 40; i++ {
		appendOne(t, l, be, makeBatch(t, i, 4, 20, int64(1000+10*i)), false)
	}
	check := func(l *Log) {
		for _, tc := range []struct{ ts, off, got int64 }{
			{0, 0, 1000}, {1000, 0, 1000}, {1002, 2, 1002}, {1004, 4, 1010},
			{1205, 84, 1210}, {1392, 158, 1392}, {1393, 159, 1393},
		} {
			r, ok, err := l.OffsetForTime(tc.ts)
			if err != nil || !ok || r.Offset != tc.off || r.Timestamp != tc.got {
				t.Fatalf("ts %d: %+v ok=%v err=%v; want offset %d ts %d", tc.ts, r, ok, err, tc.off, tc.got)
			}
		}
		if _, ok, _ := l.OffsetForTime(5000); ok {
			t.Fatal("found a record after the newest timestamp")
		}
		r, ok, err := l.MaxTimestamp()
		if err != nil || !ok || r.Offset != 159 || r.Timestamp != 1393 {
			t.Fatalf("max timestamp %+v", r)
		}
	}
	check(l)
	l.Close()
	check(openLog(t, dir, Options{SegmentBytes: 1500, IndexIntervalBytes: 100, Clean: true}))
}

// TestWritebackChunks: with WritebackBytes, appends start the writeback of
// each whole chunk behind the tail exactly once, in order, never the
// partial chunk being written; synced appends and WritebackBytes 0 start
// none. The hint goes through the backend that committed the writes (the
// hybrid's io_uring, or the system call), and the real call must succeed.
func TestWritebackChunks(t *testing.T) {
	for _, kind := range []ring.Kind{ring.KindPortable, ring.KindHybrid} {
		t.Run(string(kind), func(t *testing.T) { testWritebackChunks(t, kind) })
	}
}

func testWritebackChunks(t *testing.T, kind ring.Kind) {
	be := newBackend(t, kind)
	type call struct {
		f      *os.File
		off, n int64
	}
	var calls []call
	record := func(l *Log) {
		l.writeback = func(b ring.Backend, f *os.File, off, n int64) error {
			if b != be {
				t.Fatalf("writeback through %v, want the committing backend %v", b, be)
			}
			calls = append(calls, call{f, off, n})
			err := hintWriteback(b, f, off, n) // the real call must work too
			if err != nil {
				t.Errorf("writeback of [%d,+%d): %v", off, n, err)
			}
			return err
		}
	}
	const chunk = 4096
	l := openLog(t, t.TempDir(), Options{WritebackBytes: chunk, SegmentBytes: 64 << 10})
	defer l.Close()
	record(l)
	segs := appendRolled(t, l, be, 200, false)
	// Per file: contiguous ranges from 0, chunk-aligned ends, covering
	// every whole chunk of the file (the last segment: of its size).
	byFile := map[*os.File][]call{}
	for _, c := range calls {
		byFile[c.f] = append(byFile[c.f], c)
	}
	for i, s := range segs {
		var next int64
		for _, c := range byFile[s.f] {
			if c.off != next || c.n <= 0 || (c.off+c.n)%chunk != 0 {
				t.Fatalf("segment %d: writeback of [%d,+%d) after %d", s.base, c.off, c.n, next)
			}
			next = c.off + c.n
		}
		size := s.size.Load()
		if next > size {
			t.Fatalf("segment %d: writeback up to %d past its size %d", s.base, next, size)
		}
		if last := i == len(segs)-1; last && next != size-size%chunk {
			t.Fatalf("active segment: writeback up to %d, want %d (size %d)", next, size-size%chunk, size)
		}
		if next == 0 {
			t.Fatalf("segment %d (%d bytes): no writeback started", s.base, size)
		}
	}
	n := len(calls)
	for i := 0; i < 20; i++ {
		appendOne(t, l, be, makeBatch(t, i, 3, 300, 1), true)
	}
	if len(calls) != n {
		t.Fatalf("synced appends started %d writebacks", len(calls)-n)
	}

	calls = nil
	off := openLog(t, t.TempDir(), Options{})
	defer off.Close()
	record(off)
	for i := 0; i < 50; i++ {
		appendOne(t, off, be, makeBatch(t, i, 3, 300, 1), false)
	}
	if len(calls) != 0 {
		t.Fatalf("WritebackBytes 0 started %d writebacks", len(calls))
	}
}

// TestPageCacheTail: with PageCacheTailBytes, appends drop each segment's
// whole writeback chunks from the page cache once they lie more than that
// far behind the segment's end, each once and in order, never past the
// writeback started (or the sync done); after a truncation the drops go
// on from the cut. The
// hint goes through the committing backend, the real call succeeds, and
// every batch reads back the same. PageCacheTailBytes 0 drops nothing.
func TestPageCacheTail(t *testing.T) {
	be := newBackend(t, ring.KindHybrid)
	const chunk, tail = 4096, 16 << 10
	type call struct {
		f      *os.File
		off, n int64
	}
	var drops []call
	record := func(l *Log) {
		l.drop = func(b ring.Backend, f *os.File, off, n int64) error {
			if b != be {
				t.Fatalf("drop through %v, want the committing backend %v", b, be)
			}
			st, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			// The active segment drops whole chunks behind its tail; a
			// sealed one what the segments after it leave behind it.
			limit := st.Size()
			if f == l.active().f {
				limit -= tail
				if (off+n)%chunk != 0 {
					t.Fatalf("drop of [%d,+%d) of the active segment ends inside a chunk", off, n)
				}
			}
			if off%folioSpan != 0 || n <= 0 || off+n > limit {
				t.Fatalf("drop of [%d,+%d) of a %d-byte segment", off, n, st.Size())
			}
			drops = append(drops, call{f, off, n})
			err = hintDrop(b, f, off, n) // the real call must work too
			if err != nil {
				t.Errorf("drop of [%d,+%d): %v", off, n, err)
			}
			return err
		}
	}
	l := openLog(t, t.TempDir(), Options{WritebackBytes: chunk, PageCacheTailBytes: tail, SegmentBytes: 64 << 10})
	defer l.Close()
	record(l)
	segs := appendRolled(t, l, be, 250, false)
	next := map[*os.File]int64{}
	for _, c := range drops {
		if c.off > next[c.f] || c.off+c.n <= next[c.f] {
			t.Fatalf("drop of [%d,+%d) after %d", c.off, c.n, next[c.f])
		}
		next[c.f] = c.off + c.n
	}
	for _, s := range segs[:len(segs)-1] {
		if next[s.f] == 0 {
			t.Fatalf("segment %d (%d bytes): nothing dropped", s.base, s.size.Load())
		}
	}
	if len(segs) > 2 && next[segs[0].f] != segs[0].size.Load() {
		t.Fatalf("first segment (%d bytes) dropped up to %d: wholly behind the tail, it goes whole", segs[0].size.Load(), next[segs[0].f])
	}
	if got := len(readAll(t, l, false)); got != 250 {
		t.Fatalf("%d batches read back after the drops, want 250", got)
	}

	// A truncation into the dropped part of the active segment: the drops
	// start again from the cut.
	act := segs[len(segs)-1]
	cutAt := act.base + 30
	if _, err := l.TruncateTo(cutAt); err != nil {
		t.Fatal(err)
	}
	cut := act.size.Load()
	if cut >= next[act.f] {
		t.Fatalf("cut at %d is not below the dropped %d: the test needs a deeper truncation", cut, next[act.f])
	}
	drops = nil
	for i := 0; i < 60; i++ {
		appendOne(t, l, be, makeBatch(t, 1000+i, 3, 300, 1), false)
	}
	// A sealed segment's flush, done in the background, may let its own
	// drop come first: the active segment's first is the one that counts.
	i := slices.IndexFunc(drops, func(c call) bool { return c.f == act.f })
	if i < 0 || drops[i].off != cut-cut%folioSpan {
		t.Fatalf("drops after truncating the active segment to %d: %+v", cut, drops)
	}
	// Synced appends (acks=all, flush.messages) start no writeback, but
	// their fdatasync wrote the chunks back: the drops go on.
	drops = nil
	for i := 0; i < 100; i++ {
		appendOne(t, l, be, makeBatch(t, 2000+i, 3, 300, 1), true)
	}
	if len(drops) == 0 {
		t.Fatal("synced appends dropped nothing")
	}

	drops = nil
	off := openLog(t, t.TempDir(), Options{WritebackBytes: chunk})
	defer off.Close()
	record(off)
	for i := 0; i < 100; i++ {
		appendOne(t, off, be, makeBatch(t, i, 3, 300, 1), false)
	}
	if len(drops) != 0 {
		t.Fatalf("PageCacheTailBytes 0 dropped %d ranges", len(drops))
	}
}

// appendRolled appends n batches of three 300-byte records to l (synced
// or not), fails unless the log rolled at least once, and returns its
// segments, oldest first.
func appendRolled(t *testing.T, l *Log, be ring.Backend, n int, sync bool) []*segment {
	t.Helper()
	for i := 0; i < n; i++ {
		appendOne(t, l, be, makeBatch(t, i, 3, 300, 1), sync)
	}
	if l.SegmentCount() < 2 {
		t.Fatalf("%d segments: the test needs rolls", l.SegmentCount())
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	return slices.Clone(l.segs)
}
