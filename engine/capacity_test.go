package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"golang.org/x/sys/unix"
)

// TestMaxHostedPartitions: creations and partition growth past the
// broker's limit are refused POLICY_VIOLATION, concurrent ones cannot
// overshoot together, and a refused creation leaves no directory.
func TestMaxHostedPartitions(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, func(c *Config) { c.MaxHostedPartitions = 30 })
	// __consumer_offsets already takes its partitions.
	base := e.meta.hostedCount()
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "a", Partitions: int32(25 - base), ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := e.CreateTopic(CreateTopicRequest{Name: "big", Partitions: 10, ReplicationFactor: 1})
	if !errors.Is(err, ErrCapacity) || !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("a creation past --max-partitions: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "big-0")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused creation left a directory: %v", err)
	}
	if err := e.CreatePartitions("a", int32(25-base)+6, false); !errors.Is(err, ErrCapacity) {
		t.Fatalf("growth past --max-partitions: %v", err)
	}
	// Five creations of 2 partitions race for room for 5 (2 fit).
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.CreateTopic(CreateTopicRequest{Name: fmt.Sprintf("race-%d", i), Partitions: 2, ReplicationFactor: 1}); err == nil {
				mu.Lock()
				created++
				mu.Unlock()
			} else if !errors.Is(err, ErrCapacity) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if created != 2 || e.meta.hostedCount() > 30 {
		t.Fatalf("%d racing creations succeeded, %d partitions hosted; want 2 and at most 30", created, e.meta.hostedCount())
	}
}

// TestAutoCreationIsPaced: auto-creation spends a token bucket; past it
// names are answered UNKNOWN_TOPIC_OR_PARTITION until the clock refills
// it. Explicit creation is not paced.
func TestAutoCreationIsPaced(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := openEngine(t, t.TempDir(), func(c *Config) {
		c.AutoCreateRate, c.AutoCreateBurst, c.Now = 2, 5, clock
	})
	for i := 0; i < 5; i++ {
		if _, err := e.GetOrCreateTopic(fmt.Sprintf("auto-%d", i)); err != nil {
			t.Fatalf("auto-creation %d within the burst: %v", i, err)
		}
	}
	if _, err := e.GetOrCreateTopic("auto-5"); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("auto-creation past the burst: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if _, err := e.GetOrCreateTopic("auto-0"); err != nil {
		t.Fatalf("an existing topic is not paced: %v", err)
	}
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "explicit", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatalf("explicit creation is not paced: %v", err)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	for i := 5; i < 7; i++ {
		if _, err := e.GetOrCreateTopic(fmt.Sprintf("auto-%d", i)); err != nil {
			t.Fatalf("auto-creation after a second at 2/s: %v", err)
		}
	}
	if _, err := e.GetOrCreateTopic("auto-7"); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("a third auto-creation in that second: %v", err)
	}
}

// TestCreationRespectsFileDescriptors: with the process's open-file
// limit nearly used up, a creation that would need more descriptors is
// refused with the fix instead of failing halfway, and leaves nothing.
func TestCreationRespectsFileDescriptors(t *testing.T) {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	e := openEngine(t, dir, nil)
	_, inUse, ok := fileDescriptors()
	if !ok {
		t.Skip("no /proc/self/fd")
	}
	low := old
	low.Cur = uint64(inUse + 300 + 256)
	if low.Cur > old.Max {
		t.Skip("hard limit too low for the test")
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
	_, err := e.CreateTopic(CreateTopicRequest{Name: "many", Partitions: 400, ReplicationFactor: 1})
	if !errors.Is(err, ErrCapacity) {
		t.Fatalf("a creation needing 400 descriptors with ~300 free: %v", err)
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, "many-*")); len(ents) != 0 {
		t.Fatalf("the refused creation left %d directories", len(ents))
	}
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "few", Partitions: 5, ReplicationFactor: 1}); err != nil {
		t.Fatalf("a small creation that fits: %v", err)
	}
}
