package wal

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
	// Leader epochs are outside the CRC: damaged ones pass the scan.
	var bases []int
	for p := 0; p < len(seed); p += int(batch.BatchLength(seed[p:])) + batch.LogOverhead {
		bases = append(bases, p)
	}
	for i, epochs := range [][]int32{{0, 0, 7}, {0, -1, 0}, {5, 0, 0}, {0, 9, 0}} {
		e := append([]byte(nil), seed...)
		for j, p := range bases {
			batch.SetLeaderEpoch(e[p:], epochs[j])
		}
		f.Add(uint8(6+i), e)
	}
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
		// The log takes appends from a leader of its latest epoch or a
		// later one (leader epochs are outside the CRC: damage there
		// shows up as an epoch, not as corruption).
		if err := l.StartLeaderEpoch(max(l.LatestEpoch(), 0)); err != nil {
			t.Fatalf("leader epoch after recovery: %v", err)
		}
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

// FuzzEpochCheckpoint decodes arbitrary bytes as a leader-epoch-checkpoint
// file and as a truncation marker. Decoding never panics; what decodes
// re-encodes to the canonical form, which decodes to the same value; a
// checkpoint holds strictly increasing, non-negative entries. Then the
// bytes are planted in a log directory: Open either refuses a marker as
// corrupt or opens, and never trusts a checkpoint that disagrees with the
// batches.
func FuzzEpochCheckpoint(f *testing.F) {
	f.Add([]byte("0\n0\n"))
	f.Add([]byte("0\n2\n0 0\n3 10\n"))
	f.Add([]byte("0\n1\n7  4096\n"))
	f.Add([]byte("0\n2\n3 10\n1 20\n"))
	f.Add([]byte("truncate 12\n"))
	f.Add([]byte("reset 0\n"))
	f.Add([]byte("reset -1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if e, err := parseEpochCheckpoint(data); err == nil {
			for i, x := range e {
				if x.Epoch < 0 || x.StartOffset < 0 || i > 0 && (x.Epoch <= e[i-1].Epoch || x.StartOffset <= e[i-1].StartOffset) {
					t.Fatalf("accepted entries %v", e)
				}
			}
			again, err := parseEpochCheckpoint(encodeEpochCheckpoint(e))
			if err != nil || !slices.Equal(again, e) {
				t.Fatalf("round trip of %v: %v %v", e, again, err)
			}
		}
		kind, off, merr := parseMarker(data)
		if merr == nil {
			if k, o, err := parseMarker(encodeMarker(kind, off)); err != nil || k != kind || o != off || off < 0 {
				t.Fatalf("marker round trip: %q %d -> %q %d %v", kind, off, k, o, err)
			}
		}
		if len(data) > 4096 {
			return
		}
		// A small log with epochs 0 and 2, then the bytes as its files.
		dir := fuzzDir(t)
		be := ring.NewPortable()
		l, err := Open(dir, Options{SegmentBytes: 300, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			if i == 3 {
				if err := l.StartLeaderEpoch(2); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := l.Append(be, [][]byte{makeBatch(t, i, 2, 10, 1)}, false); err != nil {
				t.Fatal(err)
			}
		}
		want := l.EpochEntries()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, epochCheckpointFile), data, 0o644)
		l, err = Open(dir, Options{SegmentBytes: 300, Clean: true, Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("open with a checkpoint of %q: %v", data, err)
		}
		got := l.EpochEntries()
		l.Close()
		if !slices.Equal(got, want) && !(len(got) == len(want)+1 && slices.Equal(got[:len(want)], want) && got[len(want)].StartOffset == 12) {
			t.Fatalf("checkpoint %q gave epochs %v, want %v (or a leader entry at the end)", data, got, want)
		}
		os.WriteFile(filepath.Join(dir, truncationMarkerFile), data, 0o644)
		l, err = Open(dir, Options{SegmentBytes: 300, Logger: testLogger(t)})
		if err != nil {
			if merr != nil && errors.Is(err, ErrCorrupt) {
				return // a marker that does not parse: refused
			}
			t.Fatalf("open with marker %q: %v (marker parse: %v)", data, err, merr)
		}
		defer l.Close()
		if merr != nil {
			t.Fatalf("open accepted the bad marker %q", data)
		}
		if e := epochsFromHeaders(readAll(t, l, false)); !slices.Equal(l.EpochEntries(), e) && !(len(l.EpochEntries()) == len(e)+1 && l.EpochEntries()[len(e)].StartOffset == l.EndOffset()) {
			t.Fatalf("after marker %q: epochs %v, headers %v", data, l.EpochEntries(), e)
		}
	})
}

// FuzzTxnIndex decodes arbitrary .txnindex bytes: an accepted file is
// whole entries in marker order inside the segment, and encodes back to
// the same bytes (a torn tail aside).
func FuzzTxnIndex(f *testing.F) {
	f.Add(encodeAbortedTxn(encodeAbortedTxn(nil, AbortedTxn{ProducerID: 1, FirstOffset: 10, LastOffset: 12, LastStableOffset: 13}),
		AbortedTxn{ProducerID: 2, FirstOffset: 11, LastOffset: 20, LastStableOffset: 21}), int64(5))
	f.Add(make([]byte, txnEntrySize+3), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, base int64) {
		entries, err := decodeTxnIndex(b, base)
		if err != nil {
			return
		}
		var out []byte
		for i, a := range entries {
			if a.LastOffset < base || a.FirstOffset > a.LastOffset || i > 0 && entries[i-1].LastOffset >= a.LastOffset {
				t.Fatalf("accepted entry %d %+v", i, a)
			}
			out = encodeAbortedTxn(out, a)
		}
		if !bytes.Equal(out, b[:len(b)/txnEntrySize*txnEntrySize]) {
			t.Fatal("entries do not encode back to the file")
		}
	})
}
