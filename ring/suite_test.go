//go:build unix

package ring

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/ringlog/ringlog/internal/testenv"
)

// backendCase names a way to build a Backend for the shared suite.
type backendCase struct {
	name   string
	uring  bool
	hybrid bool
	opts   Options
	locked bool // the goroutine must hold its OS thread (SingleIssuer)
}

var backendCases = []backendCase{
	{name: "pwritev"},
	{name: "io_uring", uring: true},
	{name: "io_uring-entries4", uring: true, opts: Options{Entries: 4}},
	{name: "io_uring-single-issuer", uring: true, opts: Options{Entries: 16, SingleIssuer: true}, locked: true},
	{name: "hybrid", hybrid: true, opts: Options{Entries: 4}},
}

// forEachBackend runs f as a subtest against every backend. The io_uring
// ones are skipped only when io_uring cannot be set up at all, and fail
// then too under RINGLOG_REQUIRE_IOURING.
func forEachBackend(t *testing.T, f func(t *testing.T, b Backend)) {
	t.Helper()
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			if bc.locked {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			var b Backend
			if bc.hybrid {
				h, fallback := NewHybrid(bc.opts)
				if fallback != "" {
					if _, perr := Probe(); perr == nil || testenv.Required(testenv.IOURing) {
						t.Fatalf("hybrid without io_uring: %s", fallback)
					}
				}
				b = h
			} else if bc.uring {
				u, err := NewURing(bc.opts)
				if err != nil {
					if _, perr := Probe(); perr != nil {
						testenv.Missing(t, testenv.IOURing, "io_uring cannot be set up: %v", perr)
					}
					t.Fatalf("NewURing(%+v): %v", bc.opts, err)
				}
				b = u
			} else {
				b = NewPortable()
			}
			defer b.Close()
			f(t, b)
		})
	}
}

// testFile is a file of the test's temp dir with the image its content
// should have.
type testFile struct {
	f    *os.File
	want []byte
}

func newTestFile(t *testing.T, name string) *testFile {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &testFile{f: f}
}

func (tf *testFile) fd() int { return int(tf.f.Fd()) }

// expect records that bufs will be written at off.
func (tf *testFile) expect(off int64, bufs [][]byte) {
	for _, b := range bufs {
		end := off + int64(len(b))
		if int64(len(tf.want)) < end {
			tf.want = append(tf.want, make([]byte, end-int64(len(tf.want)))...)
		}
		copy(tf.want[off:], b)
		off = end
	}
}

// writev returns an OpWritev op for bufs at off and records the expected
// image.
func (tf *testFile) writev(off int64, link bool, bufs ...[]byte) Op {
	tf.expect(off, bufs)
	return Op{Kind: OpWritev, Fd: tf.fd(), Offset: off, Bufs: bufs, Link: link}
}

func (tf *testFile) check(t *testing.T) {
	t.Helper()
	got, err := os.ReadFile(tf.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, tf.want) {
		t.Fatalf("%s: content differs: got %d bytes, want %d (first difference at %d)",
			filepath.Base(tf.f.Name()), len(got), len(tf.want), firstDiff(got, tf.want))
	}
}

func firstDiff(a, b []byte) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// pattern returns n bytes that depend on seed and position.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*131 + i*7 + i>>8)
	}
	return b
}

func mustRun(t *testing.T, b Backend, ops []Op) {
	t.Helper()
	if err := b.Run(ops); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func checkOK(t *testing.T, ops []Op) {
	t.Helper()
	for i := range ops {
		op := &ops[i]
		if op.Err != nil {
			t.Fatalf("op %d (%s fd %d): %v", i, op.Kind, op.Fd, op.Err)
		}
		if op.Kind == OpWritev && op.Res != op.Len() {
			t.Fatalf("op %d: Res %d, want %d", i, op.Res, op.Len())
		}
		if op.Kind == OpFdatasync && op.Res != 0 {
			t.Fatalf("op %d: fdatasync Res %d", i, op.Res)
		}
	}
}

func TestBackendWritesAtOffsets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		tf := newTestFile(t, "a")
		var bufs [][]byte
		for i := 0; i < 50; i++ {
			bufs = append(bufs, pattern(i, 1+i*97%3000))
		}
		ops := []Op{
			tf.writev(0, false, bufs...),
			tf.writev(1<<20, false, pattern(100, 4096), pattern(101, 1)),
			tf.writev(300_000, false, pattern(102, 12345)),
		}
		mustRun(t, b, ops)
		checkOK(t, ops)
		tf.check(t)

		// Run the same slice again after changing the data: Res and Err
		// are reset, the data rewritten.
		copy(bufs[3], pattern(7, len(bufs[3])))
		tf.expect(0, bufs)
		mustRun(t, b, ops)
		checkOK(t, ops)
		tf.check(t)
	})
}

func TestBackendManyFiles(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		files := make([]*testFile, 10)
		for i := range files {
			files[i] = newTestFile(t, fmt.Sprintf("f%d", i))
		}
		var ops []Op
		for j := 0; j < 20; j++ {
			for i, tf := range files {
				ops = append(ops, tf.writev(int64(j)*1000, false, pattern(i*100+j, 600), pattern(j, 400)))
			}
		}
		mustRun(t, b, ops)
		checkOK(t, ops)
		for _, tf := range files {
			tf.check(t)
		}
	})
}

func TestBackendLinkedSyncChains(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		var ops []Op
		var files []*testFile
		for i := 0; i < 4; i++ {
			tf := newTestFile(t, fmt.Sprintf("s%d", i))
			files = append(files, tf)
			ops = append(ops,
				tf.writev(0, true, pattern(i, 5000)),
				tf.writev(5000, true, pattern(i+1, 3000), pattern(i+2, 10)),
				Op{Kind: OpFdatasync, Fd: tf.fd()},
			)
		}
		mustRun(t, b, ops)
		checkOK(t, ops)
		for _, tf := range files {
			tf.check(t)
		}
	})
}

func TestBackendFailureCancelsChain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		good1 := newTestFile(t, "good1")
		good2 := newTestFile(t, "good2")
		victim := newTestFile(t, "victim")
		ro, err := os.Open(good1.f.Name())
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		roFd := int(ro.Fd())

		ops := []Op{
			// chain A: fine
			good1.writev(0, true, pattern(1, 1000)),
			{Kind: OpFdatasync, Fd: good1.fd()},
			// chain B: the write to a read-only fd fails (EBADF)
			{Kind: OpWritev, Fd: roFd, Offset: 0, Bufs: [][]byte{pattern(2, 100)}, Link: true},
			{Kind: OpFdatasync, Fd: victim.fd(), Link: true},
			{Kind: OpWritev, Fd: victim.fd(), Offset: 0, Bufs: [][]byte{pattern(3, 100)}},
			// chain C: fine
			good2.writev(0, true, pattern(4, 2000)),
			good2.writev(2000, false, pattern(5, 2000)),
			// a lone failing op (fd -1) does not affect the op after it
			{Kind: OpWritev, Fd: -1, Bufs: [][]byte{pattern(6, 10)}},
			good2.writev(4000, false, pattern(7, 10)),
			// an unknown kind fails and cancels its chain
			{Kind: 0, Fd: good2.fd(), Link: true},
			{Kind: OpWritev, Fd: victim.fd(), Offset: 0, Bufs: [][]byte{pattern(8, 100)}},
			// fdatasync of a bad fd fails, cancels the linked write
			{Kind: OpFdatasync, Fd: -1, Link: true},
			{Kind: OpWritev, Fd: victim.fd(), Offset: 0, Bufs: [][]byte{pattern(9, 100)}},
			// a negative offset is EINVAL (not "the file position")
			{Kind: OpWritev, Fd: victim.fd(), Offset: -1, Bufs: [][]byte{pattern(10, 100)}, Link: true},
			{Kind: OpWritev, Fd: victim.fd(), Offset: 0, Bufs: [][]byte{pattern(11, 100)}},
		}
		mustRun(t, b, ops)
		checkOK(t, ops[0:2])
		checkOK(t, ops[5:7])
		checkOK(t, ops[8:9])
		var oe *OpError
		if !errors.Is(ops[2].Err, syscall.EBADF) || !errors.As(ops[2].Err, &oe) || oe.Fd != roFd {
			t.Fatalf("write to read-only fd: %v, want EBADF in an OpError", ops[2].Err)
		}
		t.Logf("read-only write: %v", ops[2].Err)
		for _, k := range []int{3, 4, 10, 12, 14} {
			if ops[k].Err != ErrCanceled {
				t.Fatalf("op %d: %v, want ErrCanceled", k, ops[k].Err)
			}
			if ops[k].Res != 0 {
				t.Fatalf("op %d: Res %d", k, ops[k].Res)
			}
		}
		if !errors.Is(ops[7].Err, syscall.EBADF) {
			t.Fatalf("write to fd -1: %v", ops[7].Err)
		}
		if !errors.Is(ops[9].Err, errors.ErrUnsupported) {
			t.Fatalf("unknown kind: %v", ops[9].Err)
		}
		if !errors.Is(ops[11].Err, syscall.EBADF) {
			t.Fatalf("fdatasync of fd -1: %v", ops[11].Err)
		}
		if !errors.Is(ops[13].Err, syscall.EINVAL) {
			t.Fatalf("negative offset: %v", ops[13].Err)
		}
		good1.check(t)
		good2.check(t)
		victim.check(t) // still empty
	})
}

func TestBackendBatchLargerThanRing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		a := newTestFile(t, "a")
		c := newTestFile(t, "c")
		ro, err := os.Open(a.f.Name())
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		var ops []Op
		off := int64(0)
		// 100 ops in chains of 5 linked writes.
		for i := 0; i < 100; i++ {
			ops = append(ops, a.writev(off, i%5 != 4, pattern(i, 100+i)))
			off += int64(100 + i)
		}
		// One chain of 20 linked writes and a sync: larger than a small ring.
		for i := 0; i < 20; i++ {
			ops = append(ops, a.writev(off, true, pattern(i, 50)))
			off += 50
		}
		ops = append(ops, Op{Kind: OpFdatasync, Fd: a.fd()})
		// A long chain that fails at its third op: the 17 after it, in
		// later rounds for a small ring, are canceled.
		failAt := len(ops) + 2
		for i := 0; i < 20; i++ {
			if len(ops) == failAt {
				ops = append(ops, Op{Kind: OpWritev, Fd: int(ro.Fd()), Bufs: [][]byte{pattern(i, 10)}, Link: true})
				continue
			}
			if len(ops) < failAt {
				ops = append(ops, c.writev(int64(i)*10, true, pattern(i, 10)))
			} else {
				ops = append(ops, Op{Kind: OpWritev, Fd: c.fd(), Offset: int64(i) * 10, Bufs: [][]byte{pattern(i, 10)}, Link: i != 19})
			}
		}
		// Followed by an unrelated chain that works.
		ops = append(ops, a.writev(off, false, pattern(1, 10)))

		mustRun(t, b, ops)
		checkOK(t, ops[:failAt])
		if !errors.Is(ops[failAt].Err, syscall.EBADF) {
			t.Fatalf("op %d: %v, want EBADF", failAt, ops[failAt].Err)
		}
		for k := failAt + 1; k < len(ops)-1; k++ {
			if ops[k].Err != ErrCanceled {
				t.Fatalf("op %d: %v, want ErrCanceled", k, ops[k].Err)
			}
		}
		checkOK(t, ops[len(ops)-1:])
		a.check(t)
		c.check(t)
	})
}

func TestBackendManyIovecs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		a := newTestFile(t, "a")
		mk := func(seed, n int) [][]byte {
			bufs := make([][]byte, n)
			for i := range bufs {
				bufs[i] = pattern(seed+i, 1+i%5)
			}
			return bufs
		}
		// 2500 buffers: three WRITEV SQEs for io_uring; 5000: five, more
		// than a 4-entry ring holds (run synchronously there).
		ops := []Op{
			a.writev(0, true, mk(0, 2500)...),
			a.writev(100_000, true, mk(1, 5000)...),
			{Kind: OpFdatasync, Fd: a.fd()},
		}
		mustRun(t, b, ops)
		checkOK(t, ops)
		a.check(t)
	})
}

func TestBackendZeroLength(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		a := newTestFile(t, "a")
		ops := []Op{
			{Kind: OpWritev, Fd: a.fd(), Offset: 10, Link: true},
			a.writev(0, true, []byte{}),
			a.writev(0, true, nil, pattern(1, 5), []byte{}, pattern(2, 3), nil),
			{Kind: OpWritev, Fd: a.fd(), Offset: 100, Bufs: [][]byte{nil, {}}},
		}
		mustRun(t, b, ops)
		checkOK(t, ops)
		for i, want := range []int64{0, 0, 8, 0} {
			if ops[i].Res != want {
				t.Fatalf("op %d: Res %d, want %d", i, ops[i].Res, want)
			}
		}
		a.check(t)
		if err := b.Run(nil); err != nil {
			t.Fatalf("Run(nil): %v", err)
		}
	})
}

func TestBackendRunAfterClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		a := newTestFile(t, "a")
		ops := []Op{a.writev(0, false, pattern(1, 10))}
		mustRun(t, b, ops)
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.Run(ops); err != ErrClosed {
			t.Fatalf("Run after Close: %v, want ErrClosed", err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

// TestBackendStartWriteback: every backend takes writeback hints for data
// it wrote, and runs batches as before after them.
func TestBackendStartWriteback(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		a := newTestFile(t, "a")
		for round := 0; round < 3; round++ {
			ops := []Op{a.writev(int64(round)<<16, false, pattern(round, 1<<16))}
			mustRun(t, b, ops)
			checkOK(t, ops)
			if err := StartWriteback(b, a.fd(), int64(round)<<16, 1<<16); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		ops := []Op{{Kind: OpFdatasync, Fd: a.fd()}}
		mustRun(t, b, ops)
		checkOK(t, ops)
		a.check(t)
	})
}
