package wal

import (
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/ring"
)

// dropWait is how long the tests give the detached drops (io_uring runs
// each FADVISE on an io-wq worker, after Append returned) to take effect.
const dropWait = 10 * time.Second

// cachedBytes is how many bytes of f's first n are in the page cache.
func cachedBytes(t *testing.T, f *os.File, n int64) int64 {
	t.Helper()
	if n <= 0 {
		return 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	ps := int64(os.Getpagesize())
	vec := make([]byte, (n+ps-1)/ps)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	var in int64
	for _, v := range vec {
		in += int64(v & 1)
	}
	return in * ps
}

// pageCacheDir is a temporary directory whose files' pages can be
// dropped (not tmpfs).
func pageCacheDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs, whose pages cannot be dropped")
	}
	return dir
}

// TestPageCacheTailSealedSegments: segments rolled away from are dropped
// too, down to what the tail keeps of the log as a whole (segments
// smaller than the tail included): all synced, the log keeps about one
// tail in the page cache, however many segments it has.
func TestPageCacheTailSealedSegments(t *testing.T) {
	be := newBackend(t, ring.KindHybrid)
	const chunk, tail = 4096, 32 << 10
	l := openLog(t, pageCacheDir(t), Options{WritebackBytes: chunk, PageCacheTailBytes: tail, SegmentBytes: 16 << 10})
	defer l.Close()
	segs := appendRolled(t, l, be, 400, true) // 16 KiB segments: about 8
	if len(segs) < 8 {
		t.Fatalf("%d segments, the test needs 8", len(segs))
	}
	var total int64
	limit := int64(tail + 4*chunk)
	testenv.Eventually(dropWait, func() bool {
		total = 0
		for _, s := range segs {
			total += cachedBytes(t, s.f, s.size.Load())
		}
		return total <= limit
	})
	if total > limit {
		t.Fatalf("%d bytes of %d segments in the page cache, all synced; the tail keeps about %d", total, len(segs), limit)
	}
	if len(l.undropped) > 2 {
		t.Fatalf("%d sealed segments still waiting for their drop", len(l.undropped))
	}
}

// TestPageCacheTailLargeFolios: a stage writing several MiB to one log
// fills the page cache with large folios, which the kernel drops only
// when a range holds them whole; drops from the 2 MiB boundary below take
// the folio the drop before left across its end.
func TestPageCacheTailLargeFolios(t *testing.T) {
	be := newBackend(t, ring.KindHybrid)
	const chunk, tail = 1 << 20, 8 << 20
	l := openLog(t, pageCacheDir(t), Options{WritebackBytes: chunk, PageCacheTailBytes: tail})
	defer l.Close()
	var b [3][]byte
	for i := 0; i < 24; i++ {
		for k := range b {
			b[k] = makeBatch(t, 3*i+k, 1400, 1000, 1) // three 1.4 MB batches: a 4.2 MB write
		}
		if _, err := l.Append(be, b[:], true); err != nil {
			t.Fatal(err)
		}
	}
	s := l.active()
	if s.dropped < 16<<20 {
		t.Fatalf("dropped only %d of %d bytes", s.dropped, s.size.Load())
	}
	// The last span below dropped may wait for the next drop.
	var in int64
	testenv.Eventually(dropWait, func() bool {
		in = cachedBytes(t, s.f, s.dropped-folioSpan)
		return in == 0
	})
	if in > 0 {
		t.Fatalf("%d of the %d dropped bytes (synced) still in the page cache", in, s.dropped-folioSpan)
	}
}
