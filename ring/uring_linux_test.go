//go:build linux

package ring

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/internal/testenv"
)

func newURingOrSkip(t testing.TB, opts Options) *URing {
	t.Helper()
	u, err := NewURing(opts)
	if err != nil {
		if _, perr := Probe(); perr != nil {
			testenv.Missing(t, testenv.IOURing, "io_uring cannot be set up: %v", perr)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

func TestProbe(t *testing.T) {
	f, err := Probe()
	if err != nil {
		testenv.Missing(t, testenv.IOURing, "io_uring unavailable: %v", err)
	}
	t.Logf("io_uring features %#x: %s", f, FeatureNames(f))
	u := newURingOrSkip(t, Options{Entries: 100})
	if u.Entries() != 128 {
		t.Fatalf("Entries = %d, want 128 (rounded up)", u.Entries())
	}
	if u.Features() != f {
		t.Fatalf("Features %#x != Probe %#x", u.Features(), f)
	}
	if u.SingleIssuer() {
		t.Fatal("SingleIssuer without asking")
	}
	if u.cqEntries < u.sqEntries {
		t.Fatalf("CQ %d < SQ %d", u.cqEntries, u.sqEntries)
	}
	// A huge ring is clamped, not refused.
	big := newURingOrSkip(t, Options{Entries: 1 << 20})
	t.Logf("Entries 1<<20 clamped to %d", big.Entries())
}

// TestURingRoundsAndSplits checks that the io_uring path really submits to
// the kernel and splits batches as documented.
func TestURingRoundsAndSplits(t *testing.T) {
	u := newURingOrSkip(t, Options{Entries: 8})
	a := newTestFile(t, "a")
	var ops []Op
	for i := 0; i < 100; i++ { // chains of 4: two per round
		ops = append(ops, a.writev(int64(i)*10, i%4 != 3, pattern(i, 10)))
	}
	mustRun(t, u, ops)
	checkOK(t, ops)
	a.check(t)
	if u.stats.rounds != 13 || u.stats.sqes != 100 || u.stats.syncOps != 0 {
		t.Fatalf("stats %+v, want 13 rounds of 100 SQEs", u.stats)
	}

	// Chains of 3 in a ring of 8: two chains per round, never split.
	u.stats = uringStats{}
	ops = ops[:0]
	for i := 0; i < 30; i++ {
		ops = append(ops, a.writev(int64(i)*10, i%3 != 2, pattern(i+1, 10)))
	}
	mustRun(t, u, ops)
	checkOK(t, ops)
	a.check(t)
	if u.stats.rounds != 5 {
		t.Fatalf("stats %+v, want 5 rounds", u.stats)
	}

	// An op with more buffers than the ring can take in SQEs (9*1024 >
	// 8*1024) runs synchronously.
	u.stats = uringStats{}
	bufs := make([][]byte, 9*1024)
	for i := range bufs {
		bufs[i] = pattern(i, 1)
	}
	ops = []Op{a.writev(0, true, bufs...), {Kind: OpFdatasync, Fd: a.fd()}}
	mustRun(t, u, ops)
	checkOK(t, ops)
	a.check(t)
	if u.stats.syncOps != 1 || u.stats.sqes != 1 {
		t.Fatalf("stats %+v, want 1 sync op and 1 SQE", u.stats)
	}
}

func TestURingNoAllocs(t *testing.T) {
	u := newURingOrSkip(t, Options{Entries: 8})
	p := NewPortable()
	files := []*testFile{newTestFile(t, "a"), newTestFile(t, "b")}
	var ops []Op
	for i := 0; i < 20; i++ { // 20 ops: 3 rounds of an 8-entry ring
		tf := files[i%2]
		ops = append(ops, tf.writev(int64(i)*4096, i%4 != 3, pattern(i, 2048), pattern(i+1, 2048)))
	}
	bufs := make([][]byte, 1500) // two WRITEV SQEs
	for i := range bufs {
		bufs[i] = pattern(i, 3)
	}
	ops = append(ops, files[0].writev(1<<20, true, bufs...), Op{Kind: OpFdatasync, Fd: files[0].fd()})
	for _, b := range []Backend{u, p} {
		run := func() {
			if err := b.Run(ops); err != nil {
				t.Fatal(err)
			}
		}
		run() // grow the internal slices
		if n := testing.AllocsPerRun(20, run); n != 0 {
			t.Errorf("%s: %v allocations per Run, want 0", b.Name(), n)
		}
		checkOK(t, ops)
	}
	for _, tf := range files {
		tf.check(t)
	}
}

// sealedMemfd returns a memfd of size bytes that cannot grow: a write
// across its end writes the whole pages before the end and then fails with
// EPERM, a real short write.
func sealedMemfd(t *testing.T, size int64) int {
	fd, err := unix.MemfdCreate("ring-short", unix.MFD_ALLOW_SEALING|unix.MFD_CLOEXEC)
	if err != nil {
		t.Skipf("memfd_create: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_GROW); err != nil {
		t.Skipf("F_SEAL_GROW: %v", err)
	}
	return fd
}

func TestShortWrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		mfd := sealedMemfd(t, 4096+100)
		other := newTestFile(t, "other")
		var raw []int32
		if u, ok := b.(*URing); ok {
			u.testHookRes = func(op *Op, res int32) int32 {
				if op.Fd == mfd {
					raw = append(raw, res)
				}
				return res
			}
			defer func() { u.testHookRes = nil }()
		}
		ops := []Op{
			{Kind: OpWritev, Fd: mfd, Offset: 0, Bufs: [][]byte{pattern(1, 3000), pattern(2, 5192)}, Link: true},
			{Kind: OpWritev, Fd: other.fd(), Bufs: [][]byte{pattern(3, 10)}, Link: true},
			{Kind: OpFdatasync, Fd: other.fd()},
			other.writev(100, false, pattern(4, 10)),
		}
		mustRun(t, b, ops)
		if !errors.Is(ops[0].Err, ErrShortWrite) || !errors.Is(ops[0].Err, syscall.EPERM) || ops[0].Res != 4096 {
			t.Fatalf("write across a sealed end: Res %d, %v; want 4096 and ErrShortWrite+EPERM", ops[0].Res, ops[0].Err)
		}
		t.Logf("short write: %v (raw io_uring results %v)", ops[0].Err, raw)
		if len(raw) > 0 && raw[0] != 4096 {
			t.Fatalf("kernel result %d, want a short 4096", raw[0])
		}
		for k := 1; k < 3; k++ {
			if ops[k].Err != ErrCanceled {
				t.Fatalf("op %d: %v, want ErrCanceled", k, ops[k].Err)
			}
		}
		checkOK(t, ops[3:])
		other.check(t)
	})
}

// TestURingShortWriteRepaired fakes a short completion (the kernel wrote
// everything, but reports less) to check that Run finishes the write and
// runs the rest of the chain synchronously, in order.
func TestURingShortWriteRepaired(t *testing.T) {
	u := newURingOrSkip(t, Options{Entries: 8})
	a := newTestFile(t, "a")
	b := newTestFile(t, "b")
	u.testHookRes = func(op *Op, res int32) int32 {
		if op.Fd == a.fd() && op.Offset == 0 && res > 0 {
			return res / 3
		}
		return res
	}
	ops := []Op{
		a.writev(0, true, pattern(1, 1000), pattern(2, 2000)),
		b.writev(0, true, pattern(3, 500)),
		{Kind: OpFdatasync, Fd: a.fd(), Link: true},
		a.writev(3000, false, pattern(4, 100)),
		b.writev(500, false, pattern(5, 100)), // another chain
	}
	mustRun(t, u, ops)
	checkOK(t, ops)
	a.check(t)
	b.check(t)
	if u.stats.repairs != 1 || u.stats.syncOps != 3 {
		t.Fatalf("stats %+v, want 1 repair and 3 sync ops", u.stats)
	}
}

// TestURingSingleIssuerWrongThread checks that a SingleIssuer ring used
// from another OS thread fails cleanly (EEXIST, nothing left queued) and
// keeps working from its own thread.
func TestURingSingleIssuerWrongThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	u := newURingOrSkip(t, Options{Entries: 8, SingleIssuer: true})
	if !u.SingleIssuer() {
		testenv.Missing(t, testenv.IOURing, "kernel refused SINGLE_ISSUER|DEFER_TASKRUN")
	}
	a := newTestFile(t, "a")
	ops := []Op{a.writev(0, false, pattern(1, 100))}
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // surely not the creator's thread
		defer runtime.UnlockOSThread()
		done <- u.Run([]Op{{Kind: OpWritev, Fd: a.fd(), Offset: 0, Bufs: [][]byte{pattern(9, 100)}}})
	}()
	err := <-done
	if !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("Run from another thread: %v, want EEXIST", err)
	}
	t.Logf("wrong thread: %v", err)
	mustRun(t, u, ops)
	checkOK(t, ops)
	a.check(t)
	if u.stats.sqes != 2 || u.stats.rounds != 2 {
		t.Fatalf("stats %+v", u.stats)
	}
}

func TestPortableCapsIovecs(t *testing.T) {
	// Bufs well over IOV_MAX go out in several pwritev calls.
	p := NewPortable()
	a := newTestFile(t, "a")
	bufs := make([][]byte, 3000)
	for i := range bufs {
		bufs[i] = pattern(i, 2)
	}
	ops := []Op{a.writev(7, false, bufs...)}
	mustRun(t, p, ops)
	checkOK(t, ops)
	a.check(t)
	if cap(p.sc.iov) > MaxIovecs {
		t.Fatalf("iovec scratch grew to %d", cap(p.sc.iov))
	}
}

// TestURingEINTR interrupts the thread waiting in io_uring_enter with a
// storm of the signal Go uses for preemption (SIGURG): Run must retry the
// interrupted waits and still complete every op. Every run writes new
// content over the same ranges, so a write lost or torn by an interrupted
// wait shows in the files; the counters must add up; and the storm must
// really have interrupted waits, or the test proved nothing.
func TestURingEINTR(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	u := newURingOrSkip(t, Options{Entries: 16})
	files := []*testFile{newTestFile(t, "a"), newTestFile(t, "b"), newTestFile(t, "c")}
	pid, tid := unix.Getpid(), unix.Gettid()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			unix.Tgkill(pid, tid, unix.SIGURG)
			time.Sleep(20 * time.Microsecond)
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()
	const wantInterrupted, minRuns = 20, 3
	deadline := time.Now().Add(20 * time.Second)
	runs := 0
	for ; runs < minRuns || u.stats.eintr < wantInterrupted; runs++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d runs, %d io_uring_enter calls, only %d interrupted: the signals never reached a waiting thread",
				runs, u.stats.enters, u.stats.eintr)
		}
		var ops []Op
		for i := 0; i < 30; i++ {
			tf := files[i%3]
			ops = append(ops, tf.writev(int64(i/3)*8192, true, pattern(runs*30+i, 8192)), Op{Kind: OpFdatasync, Fd: tf.fd()})
		}
		before := u.stats
		mustRun(t, u, ops)
		checkOK(t, ops)
		for _, tf := range files {
			tf.check(t)
		}
		d := u.stats
		sqes, rounds, enters, eintr := d.sqes-before.sqes, d.rounds-before.rounds, d.enters-before.enters, d.eintr-before.eintr
		if sqes != uint64(len(ops)) || d.syncOps != before.syncOps || d.repairs != before.repairs {
			t.Fatalf("run %d: %d SQEs for %d ops, %d ops run synchronously, %d repairs; want every op submitted once to the ring",
				runs, sqes, len(ops), d.syncOps-before.syncOps, d.repairs-before.repairs)
		}
		if rounds == 0 || enters < rounds || eintr > enters {
			t.Fatalf("run %d: %d rounds, %d io_uring_enter calls, %d interrupted", runs, rounds, enters, eintr)
		}
	}
	t.Logf("%d runs, %d io_uring_enter calls, %d interrupted", runs, u.stats.enters, u.stats.eintr)
}

// waitDetached reaps until no detached request is in flight.
func waitDetached(t *testing.T, u *URing) {
	t.Helper()
	if !testenv.Eventually(10*time.Second, func() bool { u.reap(); return u.detached == 0 }) {
		t.Fatalf("%d detached requests still in flight after 10 s", u.detached)
	}
}

// TestURingStartWriteback: writeback hints go to the ring without waiting,
// a batch run while they are in flight completes exactly as without them,
// a failed hint is reported by the next one (once), and hints past
// maxDetached, or too long for an SQE, run as system calls.
func TestURingStartWriteback(t *testing.T) {
	u := newURingOrSkip(t, Options{Entries: 8})
	if u.maxDetached != int(min(16, u.cqEntries-u.sqEntries)) || u.maxDetached == 0 {
		t.Fatalf("maxDetached %d with SQ %d, CQ %d", u.maxDetached, u.sqEntries, u.cqEntries)
	}
	a, b := newTestFile(t, "a"), newTestFile(t, "b")
	const chunk = 64 << 10
	var ops []Op
	for i := 0; i < 8; i++ {
		ops = append(ops, a.writev(int64(i)*chunk, false, pattern(i, chunk)))
	}
	mustRun(t, u, ops)
	checkOK(t, ops)
	for i := 0; i < u.maxDetached; i++ {
		if err := u.StartWriteback(a.fd(), int64(i%8)*chunk, chunk); err != nil {
			t.Fatalf("hint %d: %v", i, err)
		}
	}
	if u.stats.detached != uint64(u.maxDetached) {
		t.Fatalf("stats %+v: want %d hints detached", u.stats, u.maxDetached)
	}
	// A round while hints may still complete into the CQ.
	ops = ops[:0]
	for i := 0; i < 20; i++ {
		ops = append(ops, b.writev(int64(i)*100, true, pattern(100+i, 100)), Op{Kind: OpFdatasync, Fd: b.fd()})
	}
	mustRun(t, u, ops)
	checkOK(t, ops)
	b.check(t)
	waitDetached(t, u)

	// A hint the kernel fails (a pipe has no page cache to write back).
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if err := u.StartWriteback(p[1], 0, chunk); err != nil {
		t.Fatalf("hint on a pipe failed before it ran: %v", err)
	}
	waitDetached(t, u)
	if err := u.StartWriteback(a.fd(), 0, chunk); !errors.Is(err, syscall.ESPIPE) {
		t.Fatalf("next hint after a failed one: %v, want ESPIPE", err)
	}
	waitDetached(t, u)
	if err := u.StartWriteback(a.fd(), 0, chunk); err != nil {
		t.Fatalf("a failure reported twice: %v", err)
	}
	waitDetached(t, u)

	// Past the limit, and too long for an SQE: the system call, at once.
	before := u.stats
	u.maxDetached = 0
	if err := u.StartWriteback(a.fd(), 0, chunk); err != nil {
		t.Fatal(err)
	}
	if err := u.StartWriteback(p[1], 0, chunk); !errors.Is(err, syscall.ESPIPE) {
		t.Fatalf("synchronous hint on a pipe: %v, want ESPIPE", err)
	}
	u.maxDetached = 16
	if err := u.StartWriteback(a.fd(), 0, 1<<33); err != nil {
		t.Fatal(err)
	}
	if d := u.stats; d.detachedSync-before.detachedSync != 3 || d.detached != before.detached {
		t.Fatalf("stats %+v after %+v: want 3 synchronous hints", d, before)
	}
	a.check(t)
}

// resident counts the pages of f's first n bytes in the page cache.
func resident(t *testing.T, f *os.File, n int) int {
	t.Helper()
	m, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (n+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	in := 0
	for _, v := range vec {
		in += int(v & 1)
	}
	return in
}

// TestDropCache: a drop hint, through the ring (detached), through a
// backend without one and as the package function, leaves the clean pages
// of its range out of the page cache and keeps the others; the file reads
// the same after it.
func TestDropCache(t *testing.T) {
	u := newURingOrSkip(t, Options{Entries: 8})
	const chunk = 256 << 10
	drops := map[string]func(fd int, off, n int64) error{
		"ring": func(fd int, off, n int64) error {
			before := u.stats.detached
			err := u.DropCache(fd, off, n)
			if u.stats.detached != before+1 {
				t.Errorf("drop was not detached: stats %+v", u.stats)
			}
			waitDetached(t, u)
			return err
		},
		"system call": func(fd int, off, n int64) error { return DropCache(nil, fd, off, n) },
	}
	for name, drop := range drops {
		t.Run(name, func(t *testing.T) {
			// Two files, dropped whole: the kernel caches written data
			// in large folios, and a folio across the range's end stays.
			a, b := newTestFile(t, "a"), newTestFile(t, "b")
			var st unix.Statfs_t
			if err := unix.Fstatfs(a.fd(), &st); err != nil {
				t.Fatal(err)
			}
			if st.Type == unix.TMPFS_MAGIC {
				t.Skip("the temporary directory is on tmpfs, whose pages cannot be dropped")
			}
			ops := []Op{a.writev(0, false, pattern(1, chunk)), b.writev(0, false, pattern(2, chunk)),
				{Kind: OpFdatasync, Fd: a.fd()}, {Kind: OpFdatasync, Fd: b.fd()}}
			mustRun(t, u, ops)
			checkOK(t, ops)
			pages := chunk / os.Getpagesize()
			if in := resident(t, a.f, chunk) + resident(t, b.f, chunk); in != 2*pages {
				t.Skipf("%d of %d written pages in the page cache before the drop: nothing to observe", in, 2*pages)
			}
			if err := drop(a.fd(), 0, chunk); err != nil {
				t.Fatal(err)
			}
			if in := resident(t, a.f, chunk); in != 0 {
				t.Fatalf("%d of %d dropped pages still in the page cache", in, pages)
			}
			if in := resident(t, b.f, chunk); in != pages {
				t.Fatalf("%d of %d pages of another file left in the page cache", in, pages)
			}
			a.check(t)
			b.check(t)
		})
	}
	// A hint the kernel fails is reported by the next one, naming it.
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if err := u.DropCache(p[1], 0, chunk); err != nil {
		t.Fatalf("drop on a pipe failed before it ran: %v", err)
	}
	waitDetached(t, u)
	tf := newTestFile(t, "g")
	if err := u.StartWriteback(tf.fd(), 0, chunk); !errors.Is(err, syscall.ESPIPE) || !strings.Contains(err.Error(), "fadvise") {
		t.Fatalf("next hint after a failed drop: %v, want fadvise's ESPIPE", err)
	}
}

// TestDropCacheWithoutFadviseOp: a kernel whose io_uring lacks
// IORING_OP_FADVISE (before 5.6) answers the drop SQE with EINVAL; that is
// no failure to report, and from then on DropCache makes the system call,
// which drops the pages. The kernel here has the opcode, so the ring is
// given one no kernel has, which meets the same EINVAL.
func TestDropCacheWithoutFadviseOp(t *testing.T) {
	u := newURingOrSkip(t, Options{Entries: 8})
	u.fadviseOp = 0xf0
	const chunk = 256 << 10
	a := newTestFile(t, "a")
	var st unix.Statfs_t
	if err := unix.Fstatfs(a.fd(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs, whose pages cannot be dropped")
	}
	ops := []Op{a.writev(0, true, pattern(1, chunk)), {Kind: OpFdatasync, Fd: a.fd()}}
	mustRun(t, u, ops)
	checkOK(t, ops)
	pages := chunk / os.Getpagesize()
	if in := resident(t, a.f, chunk); in != pages {
		t.Skipf("%d of %d written pages in the page cache before the drop: nothing to observe", in, pages)
	}
	if err := u.DropCache(a.fd(), 0, chunk); err != nil {
		t.Fatalf("first drop: %v", err)
	}
	waitDetached(t, u)
	if !u.noFadvise {
		t.Fatal("the ring did not notice the kernel refused the opcode")
	}
	before := u.stats
	if err := u.DropCache(a.fd(), 0, chunk); err != nil {
		t.Fatalf("drop after the refusal: %v", err)
	}
	if err := u.StartWriteback(a.fd(), 0, chunk); err != nil {
		t.Fatalf("the refused opcode was reported as a writeback failure: %v", err)
	}
	if u.stats.detachedSync != before.detachedSync+1 {
		t.Fatalf("stats %+v after %+v: the drop did not make the system call", u.stats, before)
	}
	if in := resident(t, a.f, chunk); in != 0 {
		t.Fatalf("%d of %d clean pages still cached after the system call's drop", in, pages)
	}
	a.check(t)
}
