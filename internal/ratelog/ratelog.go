// Package ratelog holds Limiter, which lets one log line a second through
// for an event that can come in floods (refused connections, refused
// creations) and counts the rest, so a flood costs a line a second, not a
// line an event.
package ratelog

import (
	"sync"
	"time"
)

// Limiter lets one event a second be logged. The zero value is ready; it
// is safe for concurrent use.
type Limiter struct {
	mu      sync.Mutex
	last    time.Time
	pending int
}

// Allow counts one event and reports whether to log it now, with how many
// events (this one included) happened since the last line.
func (l *Limiter) Allow(now time.Time) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending++
	if !l.last.IsZero() && now.Sub(l.last) < time.Second {
		return 0, false
	}
	n := l.pending
	l.last, l.pending = now, 0
	return n, true
}
