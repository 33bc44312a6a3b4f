package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/tiered"
	"github.com/ringlog/ringlog/wal"
)

// A batch larger than a cached read takes (an eighth of the cache) is
// copied and, once its local copy is gone, still read (as one range).
func TestTieredBigBatchStaysReadable(t *testing.T) {
	store := newMemStore()
	e := openEngine(t, t.TempDir(), func(c *Config) {
		// batchMax = 64 KiB / 8 = 8 KiB (the CLI's minimum, 16 MiB, gives 2 MiB).
		c.Tier = TierConfig{Store: store, Interval: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, CacheBytes: 64 << 10}
		c.RetentionCheckInterval = 20 * time.Millisecond
	})
	cfg := map[string]string{"remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1024"}
	top, err := e.CreateTopic(CreateTopicRequest{Name: "big", Partitions: 1, ReplicationFactor: 1, Configs: cfg})
	if err != nil {
		t.Fatal(err)
	}
	p := top.Partition(0)
	appendOK(t, p, buildBatch(t, time.Now().UnixMilli(), -1, 0, 0, pair("k", strings.Repeat("x", 12000)))) // offset 0, ~12 KB
	for range 4 {
		appendOK(t, p, buildBatch(t, time.Now().UnixMilli(), -1, 0, 0, pair("k", strings.Repeat("y", 600))))
	}
	l, _ := p.Log()
	waitUntil(t, "offset 0 copied and deleted locally", func() bool { return l.StartOffset() > 0 && p.LogStartOffset() == 0 })
	var rd RemoteRead
	testenv.Eventually(time.Second, func() bool {
		rd, err = p.ReadRemote(0, 1<<20, p.HighWatermark(), &RemoteQuota{})
		return err != nil || rd.Bytes > 0
	})
	if err != nil || rd.Bytes < 12000 || rd.FirstOffset != 0 {
		t.Fatalf("acknowledged offset 0: %d bytes, %v", rd.Bytes, err)
	}
	rd.Release()
}

// Dropping repeated aborted transactions takes linear time (it runs on
// an event loop for every read_committed fetch of a tiered partition).
func TestDedupAbortedIsLinear(t *testing.T) {
	a := make([]wal.AbortedTxn, 200000)
	for i := range a {
		a[i] = wal.AbortedTxn{ProducerID: 7, FirstOffset: int64(2 * i), LastOffset: int64(2*i + 1)}
	}
	a = append(a, a[:1000]...)
	start := time.Now()
	out := dedupAborted(a)
	if len(out) != 200000 || time.Since(start) > 2*time.Second {
		t.Fatalf("%d left of 201,000 (200,000 distinct) in %v", len(out), time.Since(start))
	}
}

// deleteFailStore fails every Delete while fail is set.
type deleteFailStore struct {
	*memStore
	fail atomic.Bool
}

func (s *deleteFailStore) Delete(ctx context.Context, key string) error {
	if s.fail.Load() {
		return errors.New("store unavailable")
	}
	return s.memStore.Delete(ctx, key)
}

// A topic deleted while the store refuses deletes, then a stop: the
// next start resumes the deletion of its objects (recorded in
// remote-deletions/) until none is left.
func TestTieredDeletionResumesAfterRestart(t *testing.T) {
	store := &deleteFailStore{memStore: newMemStore()}
	dir := t.TempDir()
	mod := func(c *Config) {
		c.Tier = TierConfig{Store: store, Interval: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
		c.RetentionCheckInterval = 20 * time.Millisecond
	}
	e := openEngine(t, dir, mod)
	cfg := map[string]string{"remote.storage.enable": "true", "segment.bytes": "1024"}
	p := tieredTopic(t, e, "gone", cfg, 6, "x")
	waitUntil(t, "copies", func() bool { end, _ := p.RemoteEnd(); return end >= 3 })
	store.fail.Store(true)
	if err := e.DeleteTopic("gone"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	e.Close()
	store.fail.Store(false)
	openEngine(t, dir, mod)
	waitUntil(t, "the deleted topic's objects to go", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.objs) == 0
	})
	waitUntil(t, "the deletion's record to go", func() bool {
		ents, _ := os.ReadDir(filepath.Join(dir, pendingDeletionsDir))
		return len(ents) == 0
	})
}

// A lookup that comes after 64 others wait for the same load is not
// forgotten: it gets the bytes soon after they arrive.
func TestRemoteWaitBeyondMaxWakers(t *testing.T) {
	store := newMemStore()
	gate := make(chan struct{})
	e, p, rs, keys := remoteFixture(t, store, 4096, 1<<20)
	store.getGate = func(key string, off int64) chan struct{} {
		if key == keys.Index {
			return gate
		}
		return nil
	}
	ck := tiered.ChunkKey{Object: keys.Index, Index: tiered.WholeObject}
	for range 64 {
		if _, err := e.remote.cache.Chunk(ck, rs.IndexSize, make(chanWaker, 1)); err != nil {
			t.Fatal(err)
		}
	}
	pt := p.tier.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	go func() { time.Sleep(100 * time.Millisecond); close(gate) }()
	start := time.Now()
	_, err := remoteWait(ctx, func(w tiered.Waker) (*tiered.Index, error) { return e.remoteIndex(pt, rs, keys, w) })
	if err != nil || time.Since(start) > time.Second {
		t.Fatalf("index loaded after 100 ms, the lookup got it after %v: %v", time.Since(start), err)
	}
}

// Once retention expired every remote segment, the uploader does not
// copy the (expired, copied) local segments again, neither then nor after
// a restart (the manifest keeps the copied end).
func TestNoRecopyAfterRemoteExpiry(t *testing.T) {
	store := newMemStore()
	dir := t.TempDir()
	mod := func(c *Config) {
		c.Tier = TierConfig{Store: store, Interval: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
		c.RetentionCheckInterval = time.Hour
	}
	e := openEngine(t, dir, mod)
	cfg := map[string]string{"remote.storage.enable": "true", "segment.bytes": "1024", "retention.ms": "500"}
	p := tieredTopic(t, e, "r", cfg, 4, "x")
	waitUntil(t, "copies", func() bool { end, _ := p.RemoteEnd(); return end >= 3 })
	waitUntil(t, "remote expiry", func() bool { st, _ := e.TierStats(); return st.DeletedSegments >= 3 })
	testenv.Holds(t, 500*time.Millisecond, "3 sealed segments: at most 3 copies and 3 remote deletions", func() bool {
		st, _ := e.TierStats()
		return st.CopiedSegments <= 3 && st.DeletedSegments == 3
	})
	e.Close()
	e2 := openEngine(t, dir, mod)
	testenv.Holds(t, 500*time.Millisecond, "no expired segment copied again after a restart", func() bool {
		st, _ := e2.TierStats()
		return st.CopiedSegments == 0
	})
}
