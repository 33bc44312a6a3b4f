package ratelog

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	var l Limiter
	t0 := time.Unix(1_700_000_000, 0)
	if n, ok := l.Allow(t0); !ok || n != 1 {
		t.Fatalf("first event: %d %v", n, ok)
	}
	for i := 1; i <= 5; i++ {
		if _, ok := l.Allow(t0.Add(time.Duration(i) * 100 * time.Millisecond)); ok {
			t.Fatalf("event %d within the second was let through", i)
		}
	}
	if n, ok := l.Allow(t0.Add(time.Second)); !ok || n != 6 {
		t.Fatalf("a second later: %d %v, want 6 events counted", n, ok)
	}
}
