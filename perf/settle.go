package perf

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// settler is what the suite does between two steps, so that one step's
// leftovers do not land in the next one's numbers: the load generator's
// garbage, the page cache's dirty data, and, on a VM, the memory the step
// freed that the hypervisor takes back.
//
// The last needs explaining. A VM with free page reporting (virtio_balloon
// on Firecracker, the host this suite is developed on) hands memory the
// guest freed back to the host, about every two seconds, a slice at a
// time. While the host unmaps it, it takes the guest's CPUs for tens of
// milliseconds at a time: after a step freed 5 GB of page cache (the
// consume phase's topic deleted), the next 10-15 s saw 1.8 s of steal on
// two busy CPUs, and the first latency run's p99 went from 1 to 20 ms. The
// guest cannot see the reporting itself, so the settler watches for what
// causes it: MemFree has grown by at least reclaimFreed since its lowest
// point during the step. Then it keeps every CPU busy (steal is only
// counted for a CPU that wants to run) and waits for quietWindows
// windows in a row in which steal took at most quietShare of the CPUs.
type settler struct {
	memFree func() int64                               // MemFree in bytes; 0: unknown
	steal   func() time.Duration                       // the machine's steal time so far
	burn    func(ctx context.Context, d time.Duration) // every CPU busy for d
	flush   func()                                     // the GC and sync(2) of settle
	cpus    int                                        // the CPUs burn keeps busy

	mu      sync.Mutex
	lowFree int64 // the lowest MemFree sampled since the last settle (0: none)

	// waits counts the settles that waited for the hypervisor, waited
	// their time.
	waits  int
	waited time.Duration
}

// The settler's thresholds.
const (
	reclaimFreed   = 512 << 20              // freed bytes that make a settle wait for the host
	reclaimWindow  = time.Second            // one steal sample, every CPU busy
	quietWindows   = 3                      // quiet windows in a row that end the wait (the reporting runs every 2 s)
	quietShare     = 0.01                   // the most steal of a quiet window, a share of its CPU time (20 ms on 2 CPUs; 5 GB freed stole 6 %)
	reclaimMaxWait = 30 * time.Second       // the longest wait
	freeSample     = 100 * time.Millisecond // how often MemFree is sampled during a step
	dirtyDrained   = 64 << 20               // dirty+writeback bytes a settle waits for
	dirtyMaxWait   = 10 * time.Second       // the longest wait for them
	settlePause    = 300 * time.Millisecond // the pause at the end of every settle
)

// newSettler returns the settler of this machine.
func newSettler() *settler {
	return &settler{
		memFree: func() int64 { return meminfo("MemFree") },
		steal:   stealTime,
		burn:    burnCPUs,
		cpus:    runtime.NumCPU(),
		flush: func() {
			runtime.GC() // the load generator's garbage of the last step, too
			unix.Sync()
		},
	}
}

// watch samples MemFree every freeSample until ctx ends, keeping its low
// point for the next settle. The suite runs it for as long as it runs.
func (s *settler) watch(ctx context.Context) {
	t := time.NewTicker(freeSample)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample takes one MemFree sample into the low point.
func (s *settler) sample() {
	free := s.memFree()
	if free <= 0 {
		return
	}
	s.mu.Lock()
	if s.lowFree == 0 || free < s.lowFree {
		s.lowFree = free
	}
	s.mu.Unlock()
}

// settle collects the load generator's garbage, flushes the page cache's
// dirty data (sync(2)), waits until Dirty+Writeback in /proc/meminfo are
// below dirtyDrained (at most dirtyMaxWait), then waits for the
// hypervisor to take back what the step freed (waitReclaimed).
func (s *settler) settle(ctx context.Context) {
	s.flush()
	deadline := time.Now().Add(dirtyMaxWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if meminfo("Dirty", "Writeback") < dirtyDrained {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.waitReclaimed(ctx)
	time.Sleep(settlePause)
}

// waitReclaimed waits, when MemFree has grown by reclaimFreed or more
// since its low point and the machine counts steal time (a VM: on bare
// metal the column stays 0), until the steal with every CPU busy has been
// quiet for quietWindows windows in a row, at most reclaimMaxWait. It
// reports whether it waited. The low point starts again from now.
func (s *settler) waitReclaimed(ctx context.Context) bool {
	free := s.memFree()
	s.mu.Lock()
	low := s.lowFree
	s.lowFree = free
	s.mu.Unlock()
	if free <= 0 || low <= 0 || free-low < reclaimFreed || s.steal() == 0 {
		return false
	}
	start := time.Now()
	quiet := 0
	quietSteal := time.Duration(quietShare * float64(time.Duration(s.cpus)*reclaimWindow))
	for waited := time.Duration(0); quiet < quietWindows && waited < reclaimMaxWait && ctx.Err() == nil; waited += reclaimWindow {
		before := s.steal()
		s.burn(ctx, reclaimWindow)
		if s.steal()-before <= quietSteal {
			quiet++
		} else {
			quiet = 0
		}
	}
	s.waits++
	s.waited += time.Since(start)
	return true
}

// burnCPUs keeps every CPU of the machine busy for d (or until ctx ends),
// GOMAXPROCS raised to them for the while.
func burnCPUs(ctx context.Context, d time.Duration) {
	n := runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
			}
		}()
	}
	wg.Wait()
}

// meminfo is the sum of the named fields of /proc/meminfo in bytes (0
// when unreadable).
func meminfo(keys ...string) int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var total int64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(keys, k) {
			continue
		}
		f := strings.Fields(v)
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			total += n << 10
		}
	}
	return total
}
