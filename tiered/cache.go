package tiered

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Cache holds chunks of remote objects in memory for reads, bounded in
// bytes (least recently used go first). A miss starts a load on one of a
// bounded number of goroutines and returns at once: the caller (a fetch
// on an event loop) never waits for the store. The load's end calls the
// wake functions of everyone who missed it. A failed load is remembered
// for RetryAfter, so a store that is down answers fast, and then tried
// again.
type Cache struct {
	store      Store
	maxPending int
	chunkSize  int64
	maxBytes   int64
	retryAfter time.Duration
	timeout    time.Duration
	now        func() time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	slots  chan struct{}

	mu      sync.Mutex
	used    int64
	lru     *list.List // of *cached, most recent in front
	chunks  map[ChunkKey]*list.Element
	loading map[ChunkKey][]Waker
	failed  map[ChunkKey]failure

	hits, misses, bytesRead, loadErrors atomic.Int64
}

// Special values of a ChunkKey's Index: WholeObject names the whole
// object, read at once (a segment's index object); RangeRead the range
// from Off to the size Chunk is given (a batch too large to be read
// through the chunks; its key is its start).
const (
	WholeObject = -1
	RangeRead   = -2
)

// Waker is told when a load it waited for ended. Wakers are compared
// (==) so that one waiting for a chunk is told once however often it
// asked: use a pointer or a channel.
type Waker interface{ Wake() }

// ErrBusy is Chunk's answer when MaxPending loads are waiting already:
// the caller answers without the bytes and asks again later.
var ErrBusy = errors.New("tiered: too many remote reads pending")

// ChunkKey names one chunk: the object and the chunk's number in it
// (or WholeObject, or RangeRead with the range's start).
type ChunkKey struct {
	Object string
	Index  int64
	Off    int64
}

type cached struct {
	key  ChunkKey
	data []byte
}

// maxFailures bounds the failed loads a cache remembers.
const maxFailures = 4096

type failure struct {
	err error
	at  time.Time
}

// CacheConfig sizes a Cache.
type CacheConfig struct {
	// ChunkBytes is the size of a chunk (the range of one read); default
	// 1 MiB.
	ChunkBytes int64
	// MaxBytes bounds the chunks held; default 256 MiB.
	MaxBytes int64
	// Loads is the most reads in flight at once; default 8.
	Loads int
	// MaxPending bounds the chunks loading or waiting for a load slot
	// (each a goroutine); past it Chunk says ErrBusy. Default 256.
	MaxPending int
	// RetryAfter is how long a failed load's error is the answer;
	// default 1 s.
	RetryAfter time.Duration
	// Timeout bounds one load; default 30 s.
	Timeout time.Duration
}

// NewCache returns a cache reading store. Close stops its loads.
func NewCache(store Store, cfg CacheConfig) *Cache {
	if cfg.ChunkBytes <= 0 {
		cfg.ChunkBytes = 1 << 20
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 256 << 20
	}
	if cfg.Loads <= 0 {
		cfg.Loads = 8
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 256
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Cache{
		store: store, maxPending: cfg.MaxPending, chunkSize: cfg.ChunkBytes, maxBytes: cfg.MaxBytes, retryAfter: cfg.RetryAfter,
		timeout: cfg.Timeout, now: time.Now, ctx: ctx, cancel: cancel, slots: make(chan struct{}, cfg.Loads),
		lru: list.New(), chunks: map[ChunkKey]*list.Element{}, loading: map[ChunkKey][]Waker{}, failed: map[ChunkKey]failure{},
	}
}

// ChunkBytes is the chunk size.
func (c *Cache) ChunkBytes() int64 { return c.chunkSize }

// Chunk returns chunk k of an object of size bytes when it is cached.
// Otherwise it returns nil, with the error of a load that failed less
// than RetryAfter ago, ErrBusy when MaxPending loads wait already, or no
// error after starting a load (unless one runs) whose end wakes w (when
// not nil).
func (c *Cache) Chunk(k ChunkKey, size int64, w Waker) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if data, ok := c.hitLocked(k); ok {
		return data, nil
	}
	if err := c.recentFailureLocked(k); err != nil {
		return nil, err
	}
	if err := c.startLocked(k, size, w); err != nil {
		return nil, err
	}
	c.misses.Add(1)
	return nil, nil
}

// Peek returns chunk k when it is cached, and nil otherwise (it loads
// nothing).
func (c *Cache) Peek(k ChunkKey) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	data, _ := c.hitLocked(k)
	return data
}

// Prefetch starts loading chunk k unless it is cached, loading, or
// failed lately, or the cache is busy: a sequential reader's next chunk.
func (c *Cache) Prefetch(k ChunkKey, size int64) {
	if k.Index < 0 || k.Index*c.chunkSize >= size {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, cached := c.chunks[k]; cached || c.recentFailureLocked(k) != nil {
		return
	}
	_ = c.startLocked(k, size, nil) // busy: no read-ahead
}

// hitLocked returns chunk k, most recently used now, when it is cached.
func (c *Cache) hitLocked(k ChunkKey) ([]byte, bool) {
	e, ok := c.chunks[k]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(e)
	c.hits.Add(1)
	return e.Value.(*cached).data, true
}

// recentFailureLocked returns the error of k's last load when it failed
// less than RetryAfter ago, and forgets an older one.
func (c *Cache) recentFailureLocked(k ChunkKey) error {
	f, ok := c.failed[k]
	if !ok {
		return nil
	}
	if c.now().Sub(f.at) < c.retryAfter {
		return f.err
	}
	delete(c.failed, k)
	return nil
}

// maxWakers bounds the wakers one load tells: past it Chunk says
// ErrBusy.
const maxWakers = 64

func (c *Cache) startLocked(k ChunkKey, size int64, w Waker) error {
	waiters, running := c.loading[k]
	if w != nil && !slices.Contains(waiters, w) {
		if len(waiters) == maxWakers {
			return ErrBusy // it would never be told
		}
		waiters = append(waiters, w)
	}
	if running {
		c.loading[k] = waiters
		return nil
	}
	if len(c.loading) >= c.maxPending {
		return ErrBusy
	}
	if c.ctx.Err() != nil {
		return c.ctx.Err()
	}
	c.loading[k] = waiters
	c.wg.Add(1)
	go c.load(k, size)
	return nil
}

// load reads one chunk from the store (on its own goroutine, at most
// Loads at once) and wakes whoever waits for it.
func (c *Cache) load(k ChunkKey, size int64) {
	defer c.wg.Done()
	var data []byte
	var err error
	select {
	case c.slots <- struct{}{}:
		off := k.Index * c.chunkSize
		n := min(c.chunkSize, size-off)
		switch k.Index {
		case WholeObject:
			off, n = 0, size
		case RangeRead:
			off, n = k.Off, size-k.Off
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
		data, err = c.store.GetRange(ctx, k.Object, off, n)
		cancel()
		<-c.slots
		if err == nil && int64(len(data)) != n {
			err = fmt.Errorf("tiered: %s: chunk %d: %d bytes, want %d", k.Object, k.Index, len(data), n)
		}
	case <-c.ctx.Done():
		err = c.ctx.Err()
	}
	c.mu.Lock()
	waiters := c.loading[k]
	delete(c.loading, k)
	if err != nil {
		c.loadErrors.Add(1)
		if len(c.failed) >= maxFailures {
			// Bounded: old failures are forgotten (retried).
			for fk, f := range c.failed {
				if c.now().Sub(f.at) >= c.retryAfter {
					delete(c.failed, fk)
				}
			}
		}
		if len(c.failed) < maxFailures {
			c.failed[k] = failure{err: err, at: c.now()}
		}
	} else {
		c.bytesRead.Add(int64(len(data)))
		c.chunks[k] = c.lru.PushFront(&cached{key: k, data: data})
		c.used += int64(len(data))
		for c.used > c.maxBytes && c.lru.Len() > 1 {
			old := c.lru.Remove(c.lru.Back()).(*cached)
			delete(c.chunks, old.key)
			c.used -= int64(len(old.data))
		}
	}
	c.mu.Unlock()
	for _, w := range waiters {
		w.Wake()
	}
}

// Forget drops the chunks of object (its segment was deleted).
func (c *Cache) Forget(object string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.chunks {
		if k.Object == object {
			c.used -= int64(len(e.Value.(*cached).data))
			c.lru.Remove(e)
			delete(c.chunks, k)
		}
	}
	for k := range c.failed {
		if k.Object == object {
			delete(c.failed, k)
		}
	}
}

// CacheStats are a Cache's counters.
type CacheStats struct {
	Hits, Misses, BytesRead, LoadErrors, CachedBytes int64
}

// Stats returns the counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	used := c.used
	c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), BytesRead: c.bytesRead.Load(), LoadErrors: c.loadErrors.Load(), CachedBytes: used}
}

// Close stops the loads (waking their waiters) and waits for them.
func (c *Cache) Close() {
	c.cancel()
	c.wg.Wait()
}
