package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Capacity: how many partitions one broker takes on, and how fast clients
// may make it create topics by naming them. Without these, one Metadata
// request naming 8,000 new topics created 6,660 of them and used up the
// process's file descriptors, after which every creation failed without a
// word and 1,342 half-made directories stayed behind.

// fdsPerPartition is what a partition's open log holds: the active
// segment's .log file (its .index and .timeindex are mapped, their
// descriptors closed; wal/index.go).
const fdsPerPartition = 1

// fdReserve is the file descriptors a creation leaves free for
// connections, segment rolls and the rest of the process: a tenth of the
// limit, at least 256.
func fdReserve(limit int) int { return max(limit/10, 256) }

// capacity tracks the partitions a broker hosts and those being created.
type capacity struct {
	mu       sync.Mutex
	reserved int // partitions of creations in flight
}

// ErrCapacity wraps the refusals of reserve, for the log line and tests.
var ErrCapacity = fmt.Errorf("%w: broker capacity", kerr.PolicyViolation)

// reservePartitions takes room for n new partitions on this broker: the
// partitions it hosts plus those being created stay within
// MaxPartitions, and the file descriptors they need stay below the
// process's limit less a reserve. release gives the room back once the
// creation is published (its partitions then count as hosted) or failed.
func (e *Engine) reservePartitions(n int) (release func(), err error) {
	c := &e.capacity
	c.mu.Lock()
	defer c.mu.Unlock()
	e.mu.RLock()
	hosted := e.meta.hostedCount()
	e.mu.RUnlock()
	if total := hosted + c.reserved + n; total > e.cfg.MaxHostedPartitions {
		return nil, e.capacityRefusal(fmt.Errorf("%w: %d more partitions would make %d on this broker, over --max-partitions %d: delete topics, or raise the limit",
			ErrCapacity, n, total, e.cfg.MaxHostedPartitions))
	}
	if limit, inUse, ok := fileDescriptors(); ok {
		need := (n + c.reserved) * fdsPerPartition
		if inUse+need > limit-fdReserve(limit) {
			return nil, e.capacityRefusal(fmt.Errorf("%w: %d more partitions need about %d file descriptors; %d of the process's %d are in use (%d kept for connections): raise the limit (ulimit -n, systemd LimitNOFILE=) or delete topics",
				ErrCapacity, n, need, inUse, limit, fdReserve(limit)))
		}
	}
	c.reserved += n
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.reserved -= n
			c.mu.Unlock()
		})
	}, nil
}

// capacityRefusal logs a refusal (at most once a second, with the count
// since) and returns it.
func (e *Engine) capacityRefusal(err error) error {
	if n, ok := e.refusalLog.Allow(e.now()); ok {
		e.logger.Warn("refusing to create partitions", "err", err, "refused_since_last_log", n)
	}
	return err
}

// hostedCount is the partitions whose logs live on this broker.
func (m *brokerMeta) hostedCount() int {
	n := 0
	for _, t := range m.Topics {
		n += int(t.Partitions) - len(t.NotHosted)
	}
	return n
}

// tokenBucket paces auto-creation: rate tokens a second, at most burst
// saved up.
type tokenBucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

// take spends one token if there is one at now.
func (b *tokenBucket) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() {
		b.tokens = b.burst
	} else if d := now.Sub(b.last).Seconds(); d > 0 {
		b.tokens = min(b.burst, b.tokens+d*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
