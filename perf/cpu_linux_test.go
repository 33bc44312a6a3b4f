package perf

import (
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestRunDelay: the run-queue wait of this process's threads is read, and
// grows while more threads want a CPU than there are CPUs.
func TestRunDelay(t *testing.T) {
	before, ok := runDelay(os.Getpid())
	if !ok {
		t.Skip("no /proc/PID/task/*/schedstat here")
	}
	// Twice as many busy threads as CPUs for 200 ms: each waits about
	// half the time.
	n := 2 * runtime.NumCPU()
	prev := runtime.GOMAXPROCS(n)
	defer runtime.GOMAXPROCS(prev)
	var wg sync.WaitGroup
	end := time.Now().Add(200 * time.Millisecond)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for time.Now().Before(end) {
			}
		}()
	}
	wg.Wait()
	after, ok := runDelay(os.Getpid())
	if !ok || after-before < 50*time.Millisecond {
		t.Fatalf("run-queue wait grew %v with %d busy threads on %d CPUs for 200 ms (read %v)", after-before, n, runtime.NumCPU(), ok)
	}
}
