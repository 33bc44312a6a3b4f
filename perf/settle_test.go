package perf

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// fakeHost is a machine for the settler: its MemFree, and the steal each
// burn window meets (one entry a window, 0 once they run out).
type fakeHost struct {
	free    int64
	steal   time.Duration
	windows []time.Duration
	burned  int
}

func (h *fakeHost) settler() *settler {
	return &settler{
		memFree: func() int64 { return h.free },
		steal:   func() time.Duration { return h.steal },
		burn: func(context.Context, time.Duration) {
			if h.burned < len(h.windows) {
				h.steal += h.windows[h.burned]
			}
			h.burned++
		},
		flush: func() {},
		cpus:  2, // quiet: at most 20 ms of steal a window
	}
}

// TestSettlerWaitsForReclaim: a step that freed reclaimFreed or more on a
// machine that counts steal is followed by busy windows until quietWindows
// in a row are quiet; a noisy window starts the count again.
func TestSettlerWaitsForReclaim(t *testing.T) {
	h := &fakeHost{free: 10 << 30, steal: time.Second}
	s := h.settler()
	s.sample()
	h.free -= 4 << 30 // the step fills the page cache
	s.sample()
	h.free += 4 << 30 // and deletes its topic
	h.windows = []time.Duration{0, 150 * time.Millisecond, 0, 0, 200 * time.Millisecond, 10 * time.Millisecond, 0}
	if !s.waitReclaimed(context.Background()) {
		t.Fatal("4 GiB freed on a VM: the settle did not wait")
	}
	if h.burned != 8 { // the noisy windows 2 and 5 restart the count; 6, 7 and 8 are quiet
		t.Fatalf("%d windows burned, want 8", h.burned)
	}
	if s.waits != 1 {
		t.Fatalf("waits %d, want 1", s.waits)
	}
	// The low point starts again at the settle: nothing freed since.
	if s.waitReclaimed(context.Background()) {
		t.Fatal("waited again with nothing freed since the last settle")
	}
}

// TestSettlerSkipsReclaim: no wait when the step freed less than
// reclaimFreed, on bare metal (no steal counted ever), or when MemFree is
// unknown; and the wait ends after reclaimMaxWait on a host that never
// quiets down.
func TestSettlerSkipsReclaim(t *testing.T) {
	for _, c := range []struct {
		name  string
		freed int64
		steal time.Duration
		free  int64
	}{
		{"small", reclaimFreed - 1, time.Second, 10 << 30},
		{"bare metal", 4 << 30, 0, 10 << 30},
		{"no meminfo", 4 << 30, time.Second, 0},
	} {
		h := &fakeHost{free: c.free, steal: c.steal}
		s := h.settler()
		if c.free > 0 {
			h.free -= c.freed
			s.sample()
			h.free += c.freed
		}
		if s.waitReclaimed(context.Background()) || h.burned != 0 {
			t.Fatalf("%s: waited (%d windows)", c.name, h.burned)
		}
	}

	h := &fakeHost{free: 6 << 30, steal: time.Second}
	for range 100 {
		h.windows = append(h.windows, 100*time.Millisecond)
	}
	s := h.settler()
	s.sample()
	h.free += 2 << 30
	if !s.waitReclaimed(context.Background()) {
		t.Fatal("did not wait")
	}
	if want := int(reclaimMaxWait / reclaimWindow); h.burned != want {
		t.Fatalf("%d windows on a host that never quiets, want the cap %d", h.burned, want)
	}
}

// TestBurnCPUs: the burn lasts its window and gives GOMAXPROCS back.
func TestBurnCPUs(t *testing.T) {
	procs := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(procs)
	start := time.Now()
	burnCPUs(context.Background(), 50*time.Millisecond)
	if p := runtime.GOMAXPROCS(0); p != 1 {
		t.Fatalf("GOMAXPROCS %d after the burn, want 1 back", p)
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Fatalf("a 50 ms burn took %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	burnCPUs(ctx, time.Hour)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a cancelled burn took %v", d)
	}
}
