package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/tiered"
)

// memStore is an in-memory tiered.Store; Put blocks while putGate is set.
type memStore struct {
	mu       sync.Mutex
	objs     map[string][]byte
	putGate  chan struct{} // non-nil: Put waits for it to close
	putStart chan string
	getGate  func(key string, off int64) chan struct{}
	delay    time.Duration
}

func newMemStore() *memStore { return &memStore{objs: map[string][]byte{}} }

func (s *memStore) Put(ctx context.Context, key string, body io.ReadSeeker, size int64) error {
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	s.mu.Lock()
	gate, started := s.putGate, s.putStart
	s.mu.Unlock()
	if gate != nil {
		if started != nil {
			select {
			case started <- key:
			default:
			}
		}
		<-gate
	}
	s.mu.Lock()
	s.objs[key] = b
	s.mu.Unlock()
	return nil
}

func (s *memStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	time.Sleep(s.delay)
	if s.getGate != nil {
		if g := s.getGate(key, off); g != nil {
			select {
			case <-g:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objs[key]
	if !ok {
		return nil, tiered.ErrNotFound
	}
	if off >= int64(len(b)) {
		return nil, io.EOF
	}
	return bytes.Clone(b[off:min(off+n, int64(len(b)))]), nil
}

func (s *memStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	delete(s.objs, key)
	s.mu.Unlock()
	return nil
}

// remoteFixture: one remote segment of two batches of one ~3000-byte
// record each (offsets 0 and 1); the second straddles the 4096-byte chunk
// boundary.
func remoteFixture(t *testing.T, store *memStore, chunk, cache int64) (*Engine, *Partition, tiered.RemoteSegment, tiered.SegmentKeys) {
	t.Helper()
	b0 := buildBatch(t, 1000, -1, 0, 0, pair("k0", strings.Repeat("a", 3000)))
	b1 := buildBatch(t, 1001, -1, 0, 0, pair("k1", strings.Repeat("b", 3000)))
	binary.BigEndian.PutUint64(b1[0:8], 1) // base offset 1 (not under the CRC)
	seg := append(bytes.Clone(b0), b1...)
	if !(int64(len(b0)) < chunk && int64(len(seg)) > chunk) {
		t.Fatalf("fixture: %d %d", len(b0), len(seg))
	}
	ix, err := tiered.BuildIndex(bytes.NewReader(seg), 0, 2, int64(len(seg)), nil)
	if err != nil {
		t.Fatal(err)
	}
	idx := ix.Encode()
	e := &Engine{remote: newTier(TierConfig{Store: store, ChunkBytes: chunk, CacheBytes: cache})}
	t.Cleanup(e.remote.cache.Close)
	top := &Topic{Name: "t", eng: e}
	p := &Partition{topic: top}
	rs := tiered.RemoteSegment{ID: tiered.NewSegmentID(), State: tiered.CopyFinished, Base: 0, End: 2,
		Size: int64(len(seg)), IndexSize: int64(len(idx)), MaxTimestamp: 1001}
	keys := e.remote.layout.Keys("t", top.ID, 0, 0, rs.ID)
	store.objs[keys.Log], store.objs[keys.Index] = seg, idx
	pt := &partitionTier{manifest: &tiered.Manifest{Segments: []tiered.RemoteSegment{rs}}}
	pt.publish()
	p.tier.Store(pt)
	return e, p, rs, keys
}

// A batch that straddles a chunk boundary, its first chunk cached and
// the second still loading, is not returned in part: the read returns
// nothing yet (a partial batch would crash a time lookup and make Java
// consumers fail the fetch).
func TestRemoteReadNeverReturnsPartOfABatch(t *testing.T) {
	store := newMemStore()
	release := make(chan struct{})
	defer close(release)
	e, p, rs, keys := remoteFixture(t, store, 4096, 1<<20)
	store.getGate = func(key string, off int64) chan struct{} {
		if key == keys.Log && off == 4096 {
			return release // chunk 1 does not come
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pt := p.tier.Load()
	if _, err := remoteWait(ctx, func(w tiered.Waker) (*tiered.Index, error) { return e.remoteIndex(pt, rs, keys, w) }); err != nil {
		t.Fatal(err)
	}
	if _, err := remoteWait(ctx, func(w tiered.Waker) ([][]byte, error) { return e.remote.pieces(keys.Log, rs.Size, 0, 4096, w, nil) }); err != nil {
		t.Fatal(err)
	}
	rd, err := p.ReadRemote(1, 1<<20, 2, &RemoteQuota{})
	if err != nil {
		t.Fatal(err)
	}
	if rd.Bytes > 0 {
		t.Fatalf("ReadRemote(1) returned %d bytes, offsets %d-%d, while the batch's second chunk is not there", rd.Bytes, rd.FirstOffset, rd.NextOffset)
	}
	// Nor does a time lookup that meets that batch panic.
	tctx, tcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer tcancel()
	if _, _, err := p.RemoteOffsetForTime(tctx, 1001); err == nil {
		t.Fatal("a time lookup whose chunk never came succeeded")
	}
}

// A batch that needs more of the cache than it may hold at once (its
// chunks could evict each other forever) is read whole, as one range.
func TestRemoteBatchLargerThanTheCacheAllows(t *testing.T) {
	store := newMemStore()
	e, p, rs, _ := remoteFixture(t, store, 4096, 16384) // batches over 2 KiB read as ranges
	pt := p.tier.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for off := int64(0); off < 2; {
		rd, err := remoteWait(ctx, func(w tiered.Waker) (RemoteRead, error) { return e.readRemote(p, pt, rs, off, 1, 2, w) })
		if err != nil || rd.FirstOffset != off || rd.NextOffset != off+1 || len(rd.Parts) != 1 {
			t.Fatalf("offset %d: %d bytes in %d parts, offsets %d-%d, %v", off, rd.Bytes, len(rd.Parts), rd.FirstOffset, rd.NextOffset, err)
		}
		off = rd.NextOffset
	}
}

// tieredTopic creates a one-partition topic with cfg and appends n
// batches of one 600-byte record of fill to it.
func tieredTopic(t *testing.T, e *Engine, name string, cfg map[string]string, n int, fill string) *Partition {
	t.Helper()
	top, err := e.CreateTopic(CreateTopicRequest{Name: name, Partitions: 1, ReplicationFactor: 1, Configs: cfg})
	if err != nil {
		t.Fatal(err)
	}
	p := top.Partition(0)
	appendFill(t, p, n, fill)
	return p
}

// appendFill appends n batches of one 600-byte record of fill to p.
func appendFill(t *testing.T, p *Partition, n int, fill string) {
	t.Helper()
	for range n {
		appendOK(t, p, buildBatch(t, time.Now().UnixMilli(), -1, 0, 0, pair("k", strings.Repeat(fill, 600))))
	}
}

func tierEngine(t *testing.T, dir string, store tiered.Store) *Engine {
	return openEngine(t, dir, func(c *Config) {
		c.Tier = TierConfig{Store: store, Interval: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
		c.RetentionCheckInterval = 20 * time.Millisecond
	})
}

// A copy in flight when its topic is deleted does not leave its manifest
// to a re-created topic of the same name: the new topic, once tiered,
// copies its own offsets from 0 and reads them all back.
func TestTieredDeleteWhileCopying(t *testing.T) {
	store := newMemStore()
	store.putGate, store.putStart = make(chan struct{}), make(chan string, 1)
	dir := t.TempDir()
	e := tierEngine(t, dir, store)
	cfg := map[string]string{"remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1024"}
	tieredTopic(t, e, "t", cfg, 10, "x")
	select {
	case <-store.putStart:
	case <-time.After(10 * time.Second):
		t.Fatal("no copy started")
	}
	if err := e.DeleteTopic("t"); err != nil {
		t.Fatal(err)
	}
	p2 := tieredTopic(t, e, "t", map[string]string{"segment.bytes": "1024"}, 10, "y")
	store.mu.Lock()
	gate := store.putGate
	store.putGate = nil
	store.mu.Unlock()
	close(gate)
	time.Sleep(200 * time.Millisecond) // the old copy ends
	if err := e.AlterTopicConfig("t", map[string]*string{"remote.storage.enable": ptr("true"), "local.retention.bytes": ptr("1024")}, false, false); err != nil {
		t.Fatal(err)
	}
	l, _ := p2.Log()
	waitUntil(t, "local retention", func() bool { return l.StartOffset() > 2 })
	if got := p2.LogStartOffset(); got != 0 {
		t.Fatalf("new topic's log start %d", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for off := int64(0); off < l.StartOffset(); {
		rd, err := remoteWait(ctx, func(w tiered.Waker) (RemoteRead, error) {
			seg, ok := p2.tier.Load().view.Load().find(off)
			if !ok {
				return RemoteRead{}, fmt.Errorf("offset %d is in no remote segment", off)
			}
			return e.readRemote(p2, p2.tier.Load(), seg, off, 1<<20, 100, w)
		})
		if err != nil || rd.Bytes == 0 || rd.FirstOffset != off {
			t.Fatalf("new topic, offset %d: %+v %v", off, rd, err)
		}
		if !bytes.Contains(joinPieces(nil, rd.Parts), []byte("yyyy")) {
			t.Fatalf("offset %d holds the deleted topic's records", off)
		}
		off = rd.NextOffset
	}
}

// Share groups read the local log: earliest is its start, never the
// object store's (share fetches would find nothing there, forever).
func TestShareGroupOnTieredTopicStartsLocal(t *testing.T) {
	e := tierEngine(t, t.TempDir(), newMemStore())
	cfg := map[string]string{"remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1024"}
	p := tieredTopic(t, e, "q", cfg, 10, "x")
	l, _ := p.Log()
	waitUntil(t, "copied and deleted locally", func() bool { return l.StartOffset() > 2 && p.LogStartOffset() == 0 })
	if err := e.AlterGroupConfigs("g", map[string]*string{"share.auto.offset.reset": ptr("earliest")}, false); err != nil {
		t.Fatal(err)
	}
	joinShare(t, e, "g", "a", "q")
	var err error
	if testenv.Eventually(time.Second, func() bool {
		var recs []byte
		recs, _, err = e.Shares().Fetch(time.Now(), "g", "a", p, 1<<20, 0, false)
		return err != nil || len(recs) > 0
	}) && err == nil {
		return
	}
	t.Fatalf("the share group got nothing (log start %d, local start %d, end %d): %v", p.LogStartOffset(), l.StartOffset(), l.EndOffset(), err)
}

// A broker default that would make a tiered topic compacted is refused,
// as the topic's own change would be.
func TestBrokerDefaultsCannotCompactATieredTopic(t *testing.T) {
	e := tierEngine(t, t.TempDir(), newMemStore())
	top, err := e.CreateTopic(CreateTopicRequest{Name: "tt", Partitions: 1, ReplicationFactor: 1,
		Configs: map[string]string{"remote.storage.enable": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, validateOnly := range []bool{true, false} {
		err := e.AlterBrokerDefaults(map[string]*string{"cleanup.policy": ptr("compact,delete")}, validateOnly)
		if !errors.Is(err, kerr.InvalidConfig) || !strings.Contains(err.Error(), "tt") {
			t.Fatalf("validate only %v: %v", validateOnly, err)
		}
	}
	if c := top.Config(); c.Compact() {
		t.Fatal("the tiered topic is compacted")
	}
	// Local retention above retention, by a default: refused too.
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "lr", Partitions: 1, ReplicationFactor: 1,
		Configs: map[string]string{"remote.storage.enable": "true", "local.retention.ms": "60000"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.AlterBrokerDefaults(map[string]*string{"retention.ms": ptr("1000")}, false); !errors.Is(err, kerr.InvalidConfig) {
		t.Fatalf("retention.ms below a tiered topic's local.retention.ms: %v", err)
	}
}
