package wal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

var errStop = errors.New("stop here")

// stopAt is a crashHook that fails at step.
func stopAt(step string) func(string) error {
	return func(s string) error {
		if s == step {
			return errStop
		}
		return nil
	}
}

// checkHealthy appends to a recovered log and reopens it.
func checkHealthy(t *testing.T, l *Log, be ring.Backend, opts Options) {
	t.Helper()
	end := l.EndOffset()
	if err := l.StartLeaderEpoch(max(l.LatestEpoch(), 0)); err != nil {
		t.Fatal(err)
	}
	r := appendOne(t, l, be, makeBatch(t, 999, 2, 10, 9999), true)
	if r.BaseOffset != end {
		t.Fatalf("append after recovery at %d, want %d", r.BaseOffset, end)
	}
	want := storedBatches(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	o := opts
	o.Clean = true
	l2 := openLog(t, l.Dir(), o)
	defer l2.Close()
	if !slices.EqualFunc(storedBatches(t, l2), want, bytes.Equal) {
		t.Fatal("log changed across a clean reopen")
	}
}

// TestTruncateCrashAtEachStep stops TruncateTo at each of its steps, as a
// crash would (the files stay as the step left them), reopens, and checks
// the log is exactly the old one (stopped before the commit point) or
// exactly the truncated one (after it), with a matching epoch cache. A
// second crash inside the completion at open is completed by the next.
func TestTruncateCrashAtEachStep(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	opts := Options{SegmentBytes: 1500, IndexIntervalBytes: 200}
	probe, _ := truncLog(t, fuzzDir(t), be, opts)
	var bases []int64
	for _, s := range probe.segs {
		bases = append(bases, s.base)
	}
	probe.Close()
	offs := map[string]int64{
		"mid-segment":      bases[1] + 5,
		"segment boundary": bases[2],
		"first segment":    2,
		"everything":       0,
	}
	steps := []string{stepPrepare, stepMarker, stepRecoveryPt, stepEpochs, stepSegments, stepSegmentCut, stepSynced, stepDone}
	for name, off := range offs {
		for _, step := range steps {
			for _, clean := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/clean=%v", name, step, clean), func(t *testing.T) {
					dir := fuzzDir(t) // a process crash: the page cache survives, any file system will do
					l, all := truncLog(t, dir, be, opts)
					// A leader epoch that never appended: it ends with the truncation.
					if err := l.StartLeaderEpoch(20); err != nil {
						t.Fatal(err)
					}
					oldEpochs, oldEnd := l.EpochEntries(), l.EndOffset()
					want, newEnd := keptBelow(all, off, 0)
					l.opts.crashHook = stopAt(step)
					if _, err := l.TruncateTo(off); !errors.Is(err, errStop) {
						t.Fatalf("TruncateTo did not stop at %s: %v", step, err)
					}
					crashLog(l)
					o := opts
					o.Clean = clean
					l2 := openLog(t, dir, o)
					if step == stepPrepare {
						if l2.EndOffset() != oldEnd || !slices.EqualFunc(storedBatches(t, l2), all, bytes.Equal) || !slices.Equal(l2.EpochEntries(), oldEpochs) {
							t.Fatalf("before the commit point: end %d epochs %v, want the old log (end %d epochs %v)", l2.EndOffset(), l2.EpochEntries(), oldEnd, oldEpochs)
						}
					} else {
						checkLogIs(t, l2, want, 0, newEnd)
					}
					if _, err := os.Stat(filepath.Join(dir, truncationMarkerFile)); !os.IsNotExist(err) {
						t.Fatalf("marker left after open: %v", err)
					}
					checkHealthy(t, l2, be, opts)
				})
			}
		}
		for _, step := range []string{stepCompleteSegs, stepCompleteMeta} {
			t.Run(fmt.Sprintf("%s/open-%s", name, step), func(t *testing.T) {
				dir := fuzzDir(t) // a process crash: the page cache survives, any file system will do
				l, all := truncLog(t, dir, be, opts)
				want, newEnd := keptBelow(all, off, 0)
				l.opts.crashHook = stopAt(stepRecoveryPt)
				if _, err := l.TruncateTo(off); !errors.Is(err, errStop) {
					t.Fatal(err)
				}
				crashLog(l)
				o := opts
				o.Logger, o.crashHook = testLogger(t), stopAt(step)
				if _, err := Open(dir, o); !errors.Is(err, errStop) {
					t.Fatalf("open did not stop at %s: %v", step, err)
				}
				l2 := openLog(t, dir, opts)
				checkLogIs(t, l2, want, 0, newEnd)
				checkHealthy(t, l2, be, opts)
			})
		}
	}
}

func TestResetCrashAtEachStep(t *testing.T) {
	be := newBackend(t, ring.KindPortable)
	opts := Options{SegmentBytes: 1500, IndexIntervalBytes: 200}
	steps := []string{stepPrepare, stepMarker, stepEpochs, stepRecoveryPt, stepSegments, stepSynced, stepDone}
	for _, off := range []int64{0, 40, 500} {
		for _, step := range steps {
			t.Run(fmt.Sprintf("%d/%s", off, step), func(t *testing.T) {
				dir := fuzzDir(t) // a process crash: the page cache survives, any file system will do
				l, all := truncLog(t, dir, be, opts)
				oldEpochs, oldEnd := l.EpochEntries(), l.EndOffset()
				l.opts.crashHook = stopAt(step)
				if err := l.ResetTo(off); !errors.Is(err, errStop) {
					t.Fatalf("ResetTo did not stop at %s: %v", step, err)
				}
				crashLog(l)
				l2 := openLog(t, dir, opts)
				if step == stepPrepare {
					if l2.EndOffset() != oldEnd || !slices.EqualFunc(storedBatches(t, l2), all, bytes.Equal) || !slices.Equal(l2.EpochEntries(), oldEpochs) {
						t.Fatalf("before the commit point: not the old log")
					}
				} else {
					checkLogIs(t, l2, nil, off, off)
				}
				checkHealthy(t, l2, be, opts)
			})
		}
		t.Run(fmt.Sprintf("%d/open-%s", off, stepCompleteSegs), func(t *testing.T) {
			dir := fuzzDir(t) // a process crash: the page cache survives, any file system will do
			l, _ := truncLog(t, dir, be, opts)
			l.opts.crashHook = stopAt(stepEpochs)
			if err := l.ResetTo(off); !errors.Is(err, errStop) {
				t.Fatal(err)
			}
			crashLog(l)
			o := opts
			o.Logger, o.crashHook = testLogger(t), stopAt(stepCompleteSegs)
			if _, err := Open(dir, o); !errors.Is(err, errStop) {
				t.Fatalf("open did not stop: %v", err)
			}
			l2 := openLog(t, dir, opts)
			checkLogIs(t, l2, nil, off, off)
			checkHealthy(t, l2, be, opts)
		})
	}
}

func TestTruncationMarkerDamaged(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	l.Close()
	if err := os.WriteFile(filepath.Join(dir, truncationMarkerFile), []byte("truncate -3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{Logger: testLogger(t)}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with a damaged marker: %v", err)
	}
}

// The kill -9 version: a child appends (acknowledging after fdatasync),
// starts new leader epochs, truncates and resets, announcing each
// truncation before and after; the parent kills it at random moments and
// checks the recovered log against what was acknowledged.

const (
	envTruncDir  = "RINGLOG_TRUNC_CRASH_DIR"
	envTruncSeed = "RINGLOG_TRUNC_CRASH_SEED"
)

func truncCrashOptions() Options {
	return Options{SegmentBytes: 8 << 10, IndexIntervalBytes: 256}
}

// TestTruncateCrashChild is the process TestTruncateCrashRecovery kills.
func TestTruncateCrashChild(t *testing.T) {
	dir := os.Getenv(envTruncDir)
	if dir == "" {
		t.Skip("run by TestTruncateCrashRecovery")
	}
	seed, _ := strconv.ParseUint(os.Getenv(envTruncSeed), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 3))
	die := func(code int, args ...any) {
		fmt.Fprintln(os.Stderr, args...)
		os.Exit(code)
	}
	be, _, err := ring.New(ring.Options{})
	if err != nil {
		die(2, err)
	}
	o := truncCrashOptions()
	o.Logger = testLogger(t)
	l, err := Open(dir, o)
	if err != nil {
		die(3, "open:", err)
	}
	if err := l.StartLeaderEpoch(l.LatestEpoch() + 1); err != nil {
		die(4, "epoch:", err)
	}
	out := bufio.NewWriter(os.Stdout)
	for tag := 0; ; tag++ {
		switch r := rng.IntN(100); {
		case r == 0:
			off := l.EndOffset() + int64(rng.IntN(50))
			fmt.Fprintf(out, "R %d\n", off)
			out.Flush()
			if err := l.ResetTo(off); err != nil {
				die(8, "reset:", err)
			}
			fmt.Fprintf(out, "D %d\n", off)
			out.Flush()
		case r < 8 && l.EndOffset() > l.StartOffset():
			off := l.StartOffset() + rng.Int64N(l.EndOffset()-l.StartOffset())
			fmt.Fprintf(out, "T %d\n", off)
			out.Flush()
			end, err := l.TruncateTo(off)
			if err != nil {
				die(5, "truncate:", err)
			}
			fmt.Fprintf(out, "D %d\n", end)
			out.Flush()
		case r < 12:
			if err := l.StartLeaderEpoch(l.LatestEpoch() + 1); err != nil {
				die(6, "epoch:", err)
			}
		default:
			data := makeBatch(t, tag, 1+rng.IntN(4), rng.IntN(200), time.Now().UnixMilli())
			res, err := l.Append(be, [][]byte{data}, true)
			if err != nil {
				die(7, "append:", err)
			}
			h, _ := batch.ParseHeader(data)
			fmt.Fprintf(out, "A %d %d %d\n", res[0].BaseOffset, res[0].LastOffset, h.CRC)
			out.Flush()
		}
	}
}

// TestTruncateCrashRecovery: after each kill, the log holds every
// acknowledged batch not truncated by a finished TruncateTo; a truncation
// in progress at the kill left either the old or the truncated log,
// nothing in between; the epoch cache matches the batch headers.
func TestTruncateCrashRecovery(t *testing.T) {
	cycles := 25
	if s := os.Getenv("RINGLOG_CRASH_CYCLES"); s != "" {
		cycles, _ = strconv.Atoi(s)
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	var acked []crashAck // the log as acknowledged, in order
	start := int64(0)    // and its start
	truncs, resets, interrupted := 0, 0, 0
	for cycle := 0; cycle < cycles; cycle++ {
		env := []string{envTruncDir + "=" + dir, fmt.Sprintf("%s=%d", envTruncSeed, rng.Uint64())}
		lines := killChildAfter(t, "TestTruncateCrashChild", env, time.Duration(40+rng.IntN(160))*time.Millisecond)
		pending := false // truncation or reset announced but not finished
		var before []crashAck
		beforeStart := start
		for _, line := range lines {
			var a crashAck
			var off int64
			switch {
			case strings.HasPrefix(line, "A "):
				if _, err := fmt.Sscanf(line, "A %d %d %d", &a.base, &a.last, &a.crc); err == nil {
					acked = append(acked, a)
				}
			case strings.HasPrefix(line, "T "):
				if _, err := fmt.Sscanf(line, "T %d", &off); err == nil {
					pending, before, beforeStart = true, slices.Clone(acked), start
					acked = slices.DeleteFunc(acked, func(a crashAck) bool { return a.last >= off })
				}
			case strings.HasPrefix(line, "R "):
				if _, err := fmt.Sscanf(line, "R %d", &off); err == nil {
					pending, before, beforeStart = true, slices.Clone(acked), start
					acked, start = acked[:0], off
					resets++
				}
			case strings.HasPrefix(line, "D "):
				pending = false
				truncs++
			}
		}
		o := truncCrashOptions()
		o.Logger = testLogger(t)
		l, err := Open(dir, o)
		if err != nil {
			t.Fatalf("cycle %d: reopen: %v", cycle, err)
		}
		hs := readAll(t, l, false)
		// has: the log starts at st and begins with want; exact: nothing after.
		has := func(want []crashAck, st int64, exact bool) bool {
			if len(hs) < len(want) || exact && len(hs) != len(want) || l.StartOffset() != st {
				return false
			}
			for i, a := range want {
				if h := hs[i]; h.BaseOffset != a.base || h.LastOffset() != a.last || h.CRC != a.crc {
					return false
				}
			}
			return true
		}
		switch {
		case pending && has(acked, start, true):
			// the operation completed (at open, or just before the kill)
			interrupted++
		case pending && has(before, beforeStart, true):
			// killed before its commit point: the old log
			start = beforeStart
			interrupted++
		case !pending && has(acked, start, false):
		default:
			t.Fatalf("cycle %d: log of %d batches from %d (end %d) is neither the acknowledged one (%d batches from %d) nor, with an operation pending (%v), the old one (%d batches from %d)",
				cycle, len(hs), l.StartOffset(), l.EndOffset(), len(acked), start, pending, len(before), beforeStart)
		}
		derived := epochsFromHeaders(hs)
		got := l.EpochEntries()
		if !slices.Equal(got, derived) && !(len(got) == len(derived)+1 && slices.Equal(got[:len(derived)], derived) && got[len(derived)].StartOffset == l.EndOffset()) {
			t.Fatalf("cycle %d: epoch cache %v, headers say %v (end %d)", cycle, got, derived, l.EndOffset())
		}
		// What is in the log now is the truth the next child builds on.
		acked = acked[:0]
		for _, h := range hs {
			acked = append(acked, crashAck{base: h.BaseOffset, last: h.LastOffset(), crc: h.CRC})
		}
		l.Close()
	}
	if truncs == 0 {
		t.Fatal("no truncation ever completed")
	}
	t.Logf("%d kill cycles (%d during a truncation or reset), %d truncations and resets completed (%d resets begun), %d batches at the end",
		cycles, interrupted, truncs, resets, len(acked))
}
