package wal

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// FuzzRecover writes arbitrary bytes as a segment (after a valid prefix
// chosen by the input) and opens the log uncleanly, with and without
// repair. Recovery must never panic; it either refuses the log as corrupt
// or opens it, and then serves only valid batches with increasing offsets
// and keeps accepting appends.
func FuzzRecover(f *testing.F) {
	var seed []byte
	for i := 0; i < 3; i++ {
		seed = append(seed, makeBatch(f, i, 2, 20, 1000)...)
	}
	// Patch offsets as the log would have.
	var off int64
	for p := 0; p < len(seed); {
		n := int(batch.BatchLength(seed[p:])) + batch.LogOverhead
		batch.SetBaseOffset(seed[p:], off)
		off += 2
		p += n
	}
	f.Add(uint8(0), seed)
	f.Add(uint8(1), seed)
	f.Add(uint8(2), seed[:len(seed)-5])
	f.Add(uint8(3), append(append([]byte(nil), seed...), 0xde, 0xad))
	mid := append([]byte(nil), seed...)
	mid[70] ^= 0x40
	f.Add(uint8(4), mid)
	f.Add(uint8(5), []byte{})
	// One directory, backend and logger per fuzzing process, emptied
	// between executions: a fresh temp dir, a per-exec backend and the
	// wall clock made every execution slow and its coverage unstable, and
	// the fuzzer then spent its time minimizing (17 execs in 8 s).
	dir := fuzzDir(f)
	backend := ring.NewPortable()
	f.Cleanup(func() { backend.Close() })
	logger := slog.New(slog.DiscardHandler)
	clock := func() time.Time { return time.UnixMilli(1_700_000_000_000) }
	f.Fuzz(func(t *testing.T, mode uint8, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		if err := emptyDir(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, segmentName(0, logSuffix)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		opts := Options{SegmentBytes: 1 << 20, MaxIndexBytes: 4 * offsetEntrySize * 16, RepairCorruption: mode&1 == 1, Logger: logger, Now: clock}
		l, err := Open(dir, opts)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open failed with an unclassified error: %v", err)
			}
			if opts.RepairCorruption {
				t.Fatalf("repair mode refused the log: %v", err)
			}
			return
		}
		defer l.Close()
		// Offsets may jump (crafted batches with valid CRCs look like a
		// compacted log), but never go back, and every batch is valid.
		readAll(t, l, true)
		end := l.EndOffset()
		res, err := l.Append(backend, [][]byte{makeBatch(t, 9, 1, 3, 5)}, false)
		if err != nil || res[0].BaseOffset != end {
			t.Fatalf("append after recovery: %+v %v", res, err)
		}
	})
}

// emptyDir removes everything inside dir, keeping dir.
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// fuzzDir is a fresh directory on a memory file system when there is one:
// fuzzing runs thousands of opens, and fsyncs on a shared disk stall it.
func fuzzDir(t testing.TB) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "ringlog-fuzz-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// FuzzLoadIndexes opens a cleanly closed log whose offset and time index
// files were replaced by arbitrary bytes (the index decoders trusted on a
// clean start). Index damage must never lose or invent data: the log opens,
// serves every batch it holds with dense offsets, and keeps appending.
func FuzzLoadIndexes(f *testing.F) {
	tmpl := fuzzDir(f)
	backend := ring.NewPortable()
	f.Cleanup(func() { backend.Close() })
	logger := slog.New(slog.DiscardHandler)
	clock := func() time.Time { return time.UnixMilli(1_700_000_000_000) }
	opts := Options{SegmentBytes: 1 << 20, MaxIndexBytes: 64 * offsetEntrySize, IndexIntervalBytes: 150, Logger: logger, Now: clock}
	l, err := Open(tmpl, opts)
	if err != nil {
		f.Fatal(err)
	}
	const batches = 12
	for i := 0; i < batches; i++ {
		if _, err := l.Append(backend, [][]byte{makeBatch(f, i, 2, 30, int64(1000+i))}, false); err != nil {
			f.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		f.Fatal(err)
	}
	read := func(suffix string) []byte {
		b, err := os.ReadFile(filepath.Join(tmpl, segmentName(0, suffix)))
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	logBytes, idx, tidx := read(logSuffix), read(indexSuffix), read(timeIndexSuffix)
	if len(idx) < 2*offsetEntrySize || len(tidx) < 2*timeEntrySize {
		f.Fatalf("template indexes too small: %d and %d bytes", len(idx), len(tidx))
	}
	f.Add(idx, tidx)
	f.Add(make([]byte, len(idx)), tidx)
	f.Add(idx, make([]byte, len(tidx)))
	f.Add(idx[:len(idx)-3], tidx[:timeEntrySize])
	f.Add([]byte{}, []byte{})
	swapped := append(append([]byte(nil), idx[offsetEntrySize:2*offsetEntrySize]...), idx[:offsetEntrySize]...)
	f.Add(swapped, tidx)
	dir := fuzzDir(f)
	f.Fuzz(func(t *testing.T, idx, tidx []byte) {
		if len(idx) > 4096 || len(tidx) > 4096 {
			return
		}
		if err := emptyDir(dir); err != nil {
			t.Fatal(err)
		}
		for suffix, b := range map[string][]byte{logSuffix: logBytes, indexSuffix: idx, timeIndexSuffix: tidx} {
			if err := os.WriteFile(filepath.Join(dir, segmentName(0, suffix)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		o := opts
		o.Clean = true
		l, err := Open(dir, o)
		if err != nil {
			t.Fatalf("index damage refused the log: %v", err)
		}
		defer l.Close()
		if got := readAll(t, l, false); len(got) != batches {
			t.Fatalf("served %d batches, want %d", len(got), batches)
		}
		for off := int64(0); off < l.EndOffset(); off += 3 {
			b, err := l.ReadBytes(nil, off, 1, l.EndOffset())
			if err != nil || len(b) == 0 {
				t.Fatalf("read at %d: %d bytes, %v", off, len(b), err)
			}
			if h, _ := batch.ParseHeader(b); h.BaseOffset > off || h.LastOffset() < off {
				t.Fatalf("read at %d returned batch %d..%d", off, h.BaseOffset, h.LastOffset())
			}
			// A budget of a few batches takes the index's skip-ahead path.
			b, err = l.ReadBytes(nil, off, 400, l.EndOffset())
			for next := int64(-1); len(b) > 0; {
				n := int(batch.BatchLength(b)) + batch.LogOverhead
				h, err := batch.CheckStored(b[:n])
				if err != nil || (next < 0 && (h.BaseOffset > off || h.LastOffset() < off)) || (next >= 0 && h.BaseOffset != next) {
					t.Fatalf("read of 400 bytes at %d: batch %d..%d after %d: %v", off, h.BaseOffset, h.LastOffset(), next, err)
				}
				next, b = h.NextOffset(), b[n:]
			}
			if err != nil {
				t.Fatalf("read of 400 bytes at %d: %v", off, err)
			}
		}
		end := l.EndOffset()
		res, err := l.Append(backend, [][]byte{makeBatch(t, 99, 1, 3, 5)}, false)
		if err != nil || res[0].BaseOffset != end {
			t.Fatalf("append after load: %+v %v", res, err)
		}
	})
}
