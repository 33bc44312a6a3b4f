package wal

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// directOptions are small segments written with DirectWrites; the test is
// skipped where dir's file system has no O_DIRECT (tmpfs).
func directOptions(t *testing.T, dir string) Options {
	t.Helper()
	probe := filepath.Join(dir, "probe")
	f, err := os.Create(probe)
	if err != nil {
		t.Fatal(err)
	}
	df, err := openDirect(f)
	f.Close()
	os.Remove(probe)
	if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EINVAL) {
		t.Skipf("no O_DIRECT here: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	df.Close()
	return Options{SegmentBytes: 64 << 10, DirectWrites: true}
}

// openDirectLog opens a log with directOptions in a new directory, with
// the hybrid backend and a random source seeded with seed.
func openDirectLog(t *testing.T, seed uint64) (string, Options, ring.Backend, *rand.Rand, *Log) {
	t.Helper()
	dir := t.TempDir()
	opts := directOptions(t, dir)
	return dir, opts, newBackend(t, ring.KindHybrid), rand.New(rand.NewPCG(seed, seed+1)), openLog(t, dir, opts)
}

// directAppends appends n batches of varied sizes (a few bytes of a block
// to several blocks), every fifth synced, some several to a submission,
// and returns them as appended (offsets set).
func directAppends(t *testing.T, l *Log, be ring.Backend, rng *rand.Rand, tag, n int) [][]byte {
	t.Helper()
	var out [][]byte
	for i := 0; i < n; {
		k := 1 + rng.IntN(3)
		var bs [][]byte
		for j := 0; j < k && i < n; j++ {
			bs = append(bs, makeBatch(t, tag*1000+i, 1+rng.IntN(4), 10+rng.IntN(3000), 1000))
			i++
		}
		if _, err := l.Append(be, bs, i%5 == 0); err != nil {
			t.Fatal(err)
		}
		out = append(out, bs...)
	}
	return out
}

// wantLog checks that l holds exactly want, in order.
func wantLog(t *testing.T, l *Log, want [][]byte) {
	t.Helper()
	got, err := l.ReadBytes(nil, l.StartOffset(), 1<<30, l.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Join(want, nil)) {
		t.Fatalf("the log holds %d bytes that are not the %d appended", len(got), len(bytes.Join(want, nil)))
	}
	readAll(t, l, false)
}

// segmentSizes maps each .log file of dir to its size.
func segmentSizes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*"+logSuffix))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = fi.Size()
	}
	return out
}

// TestDirectWrites: appends written with O_DIRECT read back as appended
// while the log is open, after a clean close (every segment cut back to
// its data) and after a crash (the active segment still padded: recovery
// drops the padding, warns of nothing torn, keeps every batch), and appends
// go on after a reopen without DirectWrites and with it again.
func TestDirectWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		dir := t.TempDir()
		opts := directOptions(t, dir)
		rng := rand.New(rand.NewPCG(1, 2))
		l := openLog(t, dir, opts)
		want := directAppends(t, l, be, rng, 1, 120)
		wantLog(t, l, want)
		if l.SegmentCount() < 3 {
			t.Fatalf("%d segments: the test wants rolls", l.SegmentCount())
		}
		// Sealed segments hold their data only; the active one is
		// padded to a block while open.
		act := l.active()
		for name, size := range segmentSizes(t, dir) {
			if name == filepath.Base(act.path(logSuffix)) {
				if size%directBlock != 0 || size < act.size.Load() {
					t.Fatalf("active segment %s: %d bytes for %d of data, want a padded whole block", name, size, act.size.Load())
				}
			} else {
				sealedData := int64(-1)
				for _, s := range l.segs {
					if filepath.Base(s.path(logSuffix)) == name {
						sealedData = s.size.Load()
					}
				}
				if size != sealedData {
					t.Fatalf("sealed segment %s: %d bytes on disk, %d of data", name, size, sealedData)
				}
			}
		}

		// A crash: a copy of the directory as it is now, padding and all.
		crashed := t.TempDir()
		copyDir(t, dir, crashed)
		var logs strings.Builder
		copts := opts
		copts.Logger = slogTo(&logs)
		c := openLog(t, crashed, copts)
		wantLog(t, c, want)
		if strings.Contains(logs.String(), "torn") || !strings.Contains(logs.String(), "padding of a direct write") {
			t.Fatalf("recovery of a padded segment logged:\n%s", logs.String())
		}
		if pad := c.PaddingDropped(); pad <= 0 || pad >= directBlock {
			t.Fatalf("recovery counted %d bytes of padding, want those of the active segment's last block", pad)
		}
		// Sealed segments gave back their O_DIRECT descriptors.
		for _, s := range l.segs[:len(l.segs)-1] {
			if s.df != nil || s.dtail != nil {
				t.Fatalf("sealed segment %d keeps its O_DIRECT file or its block", s.base)
			}
		}
		want2 := append(want, directAppends(t, c, be, rng, 2, 30)...)
		wantLog(t, c, want2)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}

		// A clean close cuts the active segment back.
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		for name, size := range segmentSizes(t, dir) {
			if size%directBlock == 0 && size > 0 && strings.HasSuffix(name, filepath.Base(act.path(logSuffix))) && size != act.size.Load() {
				t.Fatalf("%s still padded after Close: %d bytes, %d of data", name, size, act.size.Load())
			}
		}
		// Buffered appends after direct ones, then direct again.
		bopts := opts
		bopts.DirectWrites = false
		l = openLog(t, dir, bopts)
		want = append(want, directAppends(t, l, be, rng, 3, 20)...)
		wantLog(t, l, want)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = openLog(t, dir, opts)
		want = append(want, directAppends(t, l, be, rng, 4, 20)...)
		wantLog(t, l, want)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDirectWritesAfterTruncation: a truncation in the middle of a block
// (a follower cut back to its leader's log) leaves the bytes the next
// direct write rewrites before it different from those it kept: it reads
// them back instead.
func TestDirectWritesAfterTruncation(t *testing.T) {
	_, _, be, rng, l := openDirectLog(t, 3)
	defer l.Close()
	want := directAppends(t, l, be, rng, 1, 40)
	// Cut the last three batches: with random sizes, inside a block.
	keep := len(want) - 3
	cut := readAll(t, l, false)[keep].BaseOffset
	if _, err := l.TruncateTo(cut); err != nil {
		t.Fatal(err)
	}
	want = want[:keep]
	wantLog(t, l, want)
	want = append(want, directAppends(t, l, be, rng, 2, 40)...)
	wantLog(t, l, want)
}

// TestDirectPaddingInSealedSegment: a crash between a roll and the old
// segment's cut back leaves padding before later data; recovery drops it
// as padding, not as corruption in the middle of the log.
func TestDirectPaddingInSealedSegment(t *testing.T) {
	dir, opts, be, rng, l := openDirectLog(t, 5)
	want := directAppends(t, l, be, rng, 1, 60)
	first := l.segs[0].path(logSuffix)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size()%directBlock == 0 {
		t.Skip("the first segment happens to end on a block")
	}
	if err := os.Truncate(first, roundBlock(fi.Size())); err != nil {
		t.Fatal(err)
	}
	// The recovery point must not cover it: as after a kill.
	if err := os.Remove(filepath.Join(dir, recoveryPointFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	l = openLog(t, dir, opts)
	wantLog(t, l, want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Zeros where the first segment's last batch was, to a block's end,
	// before the next segment: lost data, not padding (the data does not
	// reach the next segment's base). Refused as corruption, with direct
	// writes and without.
	l = openLog(t, dir, opts)
	headers, next := readAll(t, l, false), l.segs[1].base
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lastPos, end := int64(0), int64(0) // the first segment's last batch
	for _, h := range headers {
		if h.NextOffset() > next {
			break
		}
		lastPos, end = end, end+int64(h.Size())
	}
	if roundBlock(lastPos) == lastPos {
		t.Skip("the first segment's last batch does not end its block")
	}
	if err := os.Truncate(first, lastPos); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(first, roundBlock(lastPos)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, recoveryPointFile))
	for _, direct := range []bool{true, false} {
		o := opts
		o.DirectWrites, o.Logger = direct, testLogger(t)
		if bad, err := Open(dir, o); !errors.Is(err, ErrCorrupt) {
			if err == nil {
				bad.Close()
			}
			t.Fatalf("direct writes %v: a lost batch that reads as padding before later data opened: %v", direct, err)
		}
	}

	// Zeros that are not padding (a whole block, or not to a block's
	// end) are still corruption.
	if IsDirectPadding(bytes.NewReader(make([]byte, 2*directBlock)), directBlock-1, 2*directBlock) {
		t.Fatal("a block and more of zeros taken for padding")
	}
	if IsDirectPadding(bytes.NewReader(make([]byte, directBlock+100)), directBlock, directBlock+100) {
		t.Fatal("zeros to an unaligned end taken for padding")
	}
	junk := make([]byte, directBlock)
	junk[directBlock-1] = 1
	if IsDirectPadding(bytes.NewReader(junk), 100, directBlock) {
		t.Fatal("bytes that are not all zero taken for padding")
	}
}

// copyDir copies the files of src into dst: what a kill -9 leaves of a log
// that is open.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// slogTo is a logger writing every level as text to w.
func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
