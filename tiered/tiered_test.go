package tiered

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// segmentBytes builds a segment of n batches of 3 records each, from
// offset base, with timestamps 1000+i per batch, and returns its bytes
// and the position of each batch.
func segmentBytes(t testing.TB, base int64, n int, valueLen int) ([]byte, []int64) {
	t.Helper()
	var seg []byte
	var pos []int64
	b := batch.NewBuilder()
	for i := range n {
		b.Reset()
		for j := range 3 {
			b.Add(1000+int64(i), nil, bytes.Repeat([]byte{byte(i + j)}, valueLen), nil)
		}
		out, err := b.Build(nil, batch.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		batch.SetBaseOffset(out, base+int64(3*i))
		pos = append(pos, int64(len(seg)))
		seg = append(seg, out...)
	}
	return seg, pos
}

func TestBuildIndexAndLookup(t *testing.T) {
	seg, pos := segmentBytes(t, 100, 200, 1000) // ~3 KiB batches, ~600 KiB
	aborted := []wal.AbortedTxn{{ProducerID: 7, FirstOffset: 103, LastOffset: 150, LastStableOffset: 103}}
	ix, err := BuildIndex(bytes.NewReader(seg), 100, 700, int64(len(seg)), aborted)
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Entries) < 8 || ix.Entries[0].Pos != 0 || ix.Entries[0].Offset != 100 {
		t.Fatalf("entries %+v", ix.Entries[:min(3, len(ix.Entries))])
	}
	for i := 1; i < len(ix.Entries); i++ {
		if d := ix.Entries[i].Pos - ix.Entries[i-1].Pos; d < IndexInterval || d > IndexInterval+4096 {
			t.Fatalf("entries %d and %d are %d bytes apart", i-1, i, d)
		}
	}
	// Every offset's lookup starts at or before its batch, within one
	// interval.
	for i, p := range pos {
		for _, off := range []int64{100 + 3*int64(i), 100 + 3*int64(i) + 2} {
			e := ix.Lookup(off)
			if e.Pos > p || p-e.Pos > IndexInterval+4096 || e.Offset > off {
				t.Fatalf("lookup %d: %+v (batch at %d)", off, e, p)
			}
		}
	}
	if e, ok := ix.LookupTime(1150); !ok || e.MaxTimestamp < 1150 || e.Offset > 100+3*150 {
		t.Fatalf("lookup time 1150: %+v %v", e, ok)
	}
	if _, ok := ix.LookupTime(5000); ok {
		t.Fatal("a timestamp after every record was found")
	}
	got, err := DecodeIndex(ix.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if ix.MaxBatch != pos[1]-pos[0] {
		t.Fatalf("largest batch %d, want %d", ix.MaxBatch, pos[1]-pos[0])
	}
	got.MaxBatch = ix.MaxBatch // not encoded
	if fmt.Sprint(got) != fmt.Sprint(ix) {
		t.Fatalf("round trip:\n%+v\n%+v", got, ix)
	}
}

// A segment whose headers do not fit it is not indexed (not copied).
func TestBuildIndexRefusesDamage(t *testing.T) {
	seg, pos := segmentBytes(t, 0, 10, 100)
	for name, damage := range map[string]func([]byte){
		"length past the end": func(b []byte) { binary.BigEndian.PutUint32(b[pos[9]+8:], 1<<20) },
		"offsets backwards":   func(b []byte) { binary.BigEndian.PutUint64(b[pos[5]:], 0) },
		"magic":               func(b []byte) { b[pos[3]+16] = 1 },
		"past end offset":     func(b []byte) { binary.BigEndian.PutUint64(b[pos[9]:], 1000) },
	} {
		b := bytes.Clone(seg)
		damage(b)
		if _, err := BuildIndex(bytes.NewReader(b), 0, 30, int64(len(b)), nil); err == nil {
			t.Errorf("%s: indexed", name)
		}
	}
}

func TestDecodeIndexRefuses(t *testing.T) {
	seg, _ := segmentBytes(t, 0, 40, 3000)
	ix, err := BuildIndex(bytes.NewReader(seg), 0, 120, int64(len(seg)), nil)
	if err != nil {
		t.Fatal(err)
	}
	good := ix.Encode()
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		if _, err := DecodeIndex(b); !errors.Is(err, ErrBadIndex) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	for n := range len(good) {
		if _, err := DecodeIndex(good[:n]); !errors.Is(err, ErrBadIndex) {
			t.Fatalf("cut at %d: %v", n, err)
		}
	}
}

func FuzzDecodeIndex(f *testing.F) {
	seg, _ := segmentBytes(f, 5, 30, 3000)
	ix, err := BuildIndex(bytes.NewReader(seg), 5, 95, int64(len(seg)), []wal.AbortedTxn{{ProducerID: 1, FirstOffset: 6, LastOffset: 9}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ix.Encode())
	f.Add([]byte("RLRX"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := DecodeIndex(b)
		if err != nil {
			return
		}
		// What decodes is consistent and encodes back to the same bytes.
		if !bytes.Equal(ix.Encode(), b) {
			t.Fatal("decoded index does not encode back")
		}
		for _, off := range []int64{ix.Base, ix.End - 1, ix.Base - 1} {
			e := ix.Lookup(off)
			if e.Pos < 0 || e.Pos >= ix.Size {
				t.Fatalf("lookup %d: %+v", off, e)
			}
		}
	})
}

func testManifest() *Manifest {
	return &Manifest{Segments: []RemoteSegment{
		{ID: NewSegmentID(), State: CopyFinished, Base: 0, End: 100, Size: 5000, IndexSize: 60, MaxTimestamp: 10},
		{ID: NewSegmentID(), State: CopyFinished, Base: 100, End: 250, Size: 7000, IndexSize: 60, MaxTimestamp: 20,
			Aborted: []wal.AbortedTxn{{ProducerID: 3, FirstOffset: 120, LastOffset: 130, LastStableOffset: 120}}},
		{ID: NewSegmentID(), State: CopyStarted, Base: 250, End: 300, Size: 100, IndexSize: 60, MaxTimestamp: 30},
	}}
}

func TestManifestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	m, err := LoadManifest(dir)
	if err != nil || len(m.Segments) != 0 {
		t.Fatalf("no manifest: %v %+v", err, m)
	}
	want := testManifest()
	if err := want.Save(dir, fsutil.Perm{}); err != nil {
		t.Fatal(err)
	}
	got, err := LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("round trip:\n%+v\n%+v", got, want)
	}
	// A damaged manifest is an error, never an empty one (that would
	// leave the remote data unreachable, or worse).
	if err := os.WriteFile(dir+"/"+ManifestFile, []byte(`{"segments":[{"id":"x"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadManifest(dir); !errors.Is(err, ErrBadManifest) {
		t.Fatalf("damaged manifest: %v", err)
	}
}

func TestDecodeManifestRefuses(t *testing.T) {
	for name, change := range map[string]func(*Manifest){
		"state":       func(m *Manifest) { m.Segments[0].State = "lost" },
		"id":          func(m *Manifest) { m.Segments[1].ID = "../../etc" },
		"empty range": func(m *Manifest) { m.Segments[0].End = 0 },
		"overlap":     func(m *Manifest) { m.Segments[1].Base = 50 },
		"no size":     func(m *Manifest) { m.Segments[2].Size = 0 },
		"huge index":  func(m *Manifest) { m.Segments[2].IndexSize = 1 << 40 },
	} {
		m := testManifest()
		change(m)
		b, _ := jsonOf(m)
		if _, err := DecodeManifest(b); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzDecodeManifest(f *testing.F) {
	b, _ := jsonOf(testManifest())
	f.Add(b)
	f.Add([]byte(`{"segments":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			return
		}
		prev := int64(-1)
		for _, s := range m.Segments {
			if s.Base < prev || s.End <= s.Base || !validSegmentID(s.ID) {
				t.Fatalf("accepted %+v", s)
			}
			prev = s.End
		}
	})
}

// fakeStore is an in-memory Store whose reads can fail or wait.
type fakeStore struct {
	mu      sync.Mutex
	objects map[string][]byte
	fail    atomic.Bool
	gate    chan struct{} // when set, reads wait for it
	reads   atomic.Int64
}

func (s *fakeStore) Put(_ context.Context, key string, body io.ReadSeeker, size int64) error {
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[key] = b
	return nil
}

func (s *fakeStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	s.reads.Add(1)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if s.fail.Load() {
		return nil, errors.New("store down")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objects[key]
	if !ok {
		return nil, ErrNotFound
	}
	return bytes.Clone(b[off:min(off+n, int64(len(b)))]), nil
}

func (s *fakeStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, key)
	return nil
}

// The cache: a miss loads in the background and wakes, a hit does not
// read, failures are remembered for RetryAfter, and the bytes held stay
// within MaxBytes.
func TestCache(t *testing.T) {
	st := &fakeStore{objects: map[string][]byte{}}
	obj := bytes.Repeat([]byte("0123456789"), 1000) // 10,000 bytes
	_ = st.Put(context.Background(), "o", bytes.NewReader(obj), int64(len(obj)))
	c := NewCache(st, CacheConfig{ChunkBytes: 1000, MaxBytes: 3000, RetryAfter: 200 * time.Millisecond})
	defer c.Close()
	woke := make(chan struct{}, 1)
	wake := chanWaker(woke)
	k := ChunkKey{Object: "o", Index: 9}
	if b, err := c.Chunk(k, int64(len(obj)), wake); b != nil || err != nil {
		t.Fatalf("first call: %d bytes, %v", len(b), err)
	}
	<-woke
	b, err := c.Chunk(k, int64(len(obj)), nil)
	if err != nil || !bytes.Equal(b, obj[9000:]) {
		t.Fatalf("chunk 9: %v %q", err, b[:10])
	}
	reads := st.reads.Load()
	if _, _ = c.Chunk(k, int64(len(obj)), nil); st.reads.Load() != reads {
		t.Fatal("a hit read the store")
	}
	// Eviction: five more chunks, at most three held.
	for i := range int64(5) {
		c.Prefetch(ChunkKey{Object: "o", Index: i}, int64(len(obj)))
	}
	testenv.WaitFor(t, 5*time.Second, "the five reads", func() bool { return st.reads.Load() == reads+5 })
	testenv.WaitFor(t, 5*time.Second, "the cache to shrink to 3000 bytes", func() bool { return c.Stats().CachedBytes <= 3000 })
	// The store down: the error comes back, and is not retried before
	// RetryAfter.
	st.fail.Store(true)
	k = ChunkKey{Object: "o", Index: 7}
	c.Forget("o")
	_, _ = c.Chunk(k, int64(len(obj)), wake)
	<-woke
	if _, err := c.Chunk(k, int64(len(obj)), nil); err == nil {
		t.Fatal("a failed load gave no error")
	}
	st.fail.Store(false)
	time.Sleep(250 * time.Millisecond)
	if b, err := c.Chunk(k, int64(len(obj)), wake); b != nil || err != nil {
		t.Fatalf("after RetryAfter: %d bytes, %v", len(b), err)
	}
	<-woke
	if b, _ := c.Chunk(k, int64(len(obj)), nil); !bytes.Equal(b, obj[7000:8000]) {
		t.Fatal("chunk 7 after the store came back")
	}
	// The whole object at once, for index objects.
	wk := ChunkKey{Object: "o", Index: WholeObject}
	_, _ = c.Chunk(wk, int64(len(obj)), wake)
	<-woke
	if b, _ := c.Chunk(wk, int64(len(obj)), nil); !bytes.Equal(b, obj) {
		t.Fatal("whole object")
	}
}

// A store that returns more or fewer bytes than asked fails the load.
func TestCacheShortRead(t *testing.T) {
	st := &fakeStore{objects: map[string][]byte{"o": make([]byte, 500)}}
	c := NewCache(st, CacheConfig{ChunkBytes: 1000})
	defer c.Close()
	woke := make(chan struct{}, 1)
	_, _ = c.Chunk(ChunkKey{Object: "o"}, 1000, chanWaker(woke)) // the manifest says 1000
	<-woke
	if _, err := c.Chunk(ChunkKey{Object: "o"}, 1000, nil); err == nil {
		t.Fatal("a short object was cached")
	}
}

// Close wakes the waiters of loads in flight and returns.
func TestCacheClose(t *testing.T) {
	st := &fakeStore{objects: map[string][]byte{"o": make([]byte, 10)}, gate: make(chan struct{})}
	c := NewCache(st, CacheConfig{})
	woke := make(chan struct{}, 1)
	_, _ = c.Chunk(ChunkKey{Object: "o"}, 10, chanWaker(woke))
	c.Close()
	select {
	case <-woke:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the waiter")
	}
}

func jsonOf(m *Manifest) ([]byte, error) { return json.Marshal(m) }

// chanWaker wakes by a send that never blocks.
type chanWaker chan struct{}

func (w chanWaker) Wake() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// hangStore never answers a read until its context ends (a store that is
// slow, or a path that black-holes).
type hangStore struct{}

func (hangStore) Put(context.Context, string, io.ReadSeeker, int64) error { return nil }
func (hangStore) GetRange(ctx context.Context, _ string, _, _ int64) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (hangStore) Delete(context.Context, string) error { return nil }

// Misses of many distinct chunks on a hanging store start at most
// MaxPending loads (goroutines); the rest are told ErrBusy. A waker that
// asks again is told once.
func TestCacheBoundsPendingLoads(t *testing.T) {
	c := NewCache(hangStore{}, CacheConfig{ChunkBytes: 1 << 20, MaxPending: 100})
	defer c.Close()
	before := runtime.NumGoroutine()
	busy := 0
	for i := range 10000 {
		if _, err := c.Chunk(ChunkKey{Object: fmt.Sprintf("seg-%d.log", i/1000), Index: int64(i % 1000)}, 1<<30, nil); errors.Is(err, ErrBusy) {
			busy++
		}
	}
	if n := runtime.NumGoroutine() - before; n > 110 || busy != 10000-100 {
		t.Fatalf("%d goroutines, %d busy answers for 10,000 misses with MaxPending 100", n, busy)
	}
	w := chanWaker(make(chan struct{}, 1))
	k := ChunkKey{Object: "seg-0.log", Index: 1}
	for range 1000 {
		_, _ = c.Chunk(k, 1<<30, w)
	}
	c.mu.Lock()
	n := len(c.loading[k])
	c.mu.Unlock()
	if n != 1 {
		t.Fatalf("one waker asking 1,000 times is told %d times", n)
	}
}
