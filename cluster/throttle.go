package cluster

import (
	"sync"
	"time"
)

// byteBucket is the replication throttle (--replication-throttle-bytes):
// a token bucket of bytes a second, shared by this broker's replica
// fetchers, that paces the fetches of the replicas being moved here
// (reassignment) so that a move does not take the disk and network from
// producers and the in-sync replicas, which are never throttled. It holds
// at most a second's worth; a fetcher charges each throttled partition
// it asks for a whole partition's fetch before asking (while the bucket
// holds anything), and is refunded what did not come: an overdraft stays
// within one partition's fetch per fetcher, which later rounds wait out.
type byteBucket struct {
	rate float64 // bytes a second
	now  func() time.Time

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newByteBucket(rate int64, now func() time.Time) *byteBucket {
	return &byteBucket{rate: float64(rate), now: now, tokens: float64(rate), last: now()}
}

// refill adds what accrued since the last call (b.mu held).
func (b *byteBucket) refill() {
	t := b.now()
	b.tokens = min(b.tokens+t.Sub(b.last).Seconds()*b.rate, b.rate)
	b.last = t
}

// wait is how long until the bucket has bytes again (0: now).
func (b *byteBucket) wait() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	if b.tokens > 0 {
		return 0
	}
	return time.Duration(-b.tokens/b.rate*float64(time.Second)) + time.Millisecond
}

// charge spends n bytes if the bucket holds any now (it may go below
// zero), and reports whether it did.
func (b *byteBucket) charge(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	if b.tokens <= 0 {
		return false
	}
	b.tokens -= float64(n)
	return true
}

// take spends n bytes, or gives them back when n < 0 (the bucket may go
// below zero).
func (b *byteBucket) take(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	b.tokens -= float64(n)
}
