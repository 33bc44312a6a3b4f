package perf

import (
	"strings"
	"testing"
	"time"
)

func TestStepClock(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newStepClock(4, func() time.Time { return now })
	c.startPhase("references", 1)
	now = now.Add(10 * time.Second)
	if got, want := c.step(), "[ 1/4 10s, ~30s left; references 1/1, done]"; got != want {
		t.Errorf("step 1 = %q, want %q", got, want)
	}
	c.startPhase("sweep", 3)
	now = now.Add(20 * time.Second)
	if got, want := c.step(), "[ 2/4 30s, ~30s left; sweep 1/3, ~40s left]"; got != want {
		t.Errorf("step 2 = %q, want %q", got, want)
	}
	now = now.Add(20 * time.Second)
	c.step()
	now = now.Add(20 * time.Second)
	c.step()
	// One more than planned: counts grow, nothing goes negative.
	now = now.Add(20 * time.Second)
	if got := c.step(); !strings.HasPrefix(got, "[ 5/5 1m30s, done; sweep 4/4, done]") {
		t.Errorf("extra step = %q", got)
	}
}

func TestStepClockSkip(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newStepClock(4, func() time.Time { return now })
	c.startPhase("consume", 4)
	c.skip(2)
	now = now.Add(10 * time.Second)
	if got, want := c.step(), "[ 1/2 10s, ~10s left; consume 1/2, ~10s left]"; got != want {
		t.Errorf("after skipping 2 of 4: %q, want %q", got, want)
	}
}

func TestTimeLeft(t *testing.T) {
	if got, want := timeLeft(12*time.Second+300*time.Millisecond, 30*time.Second), "[12s of 30s, 18s left]"; got != want {
		t.Errorf("timeLeft = %q, want %q", got, want)
	}
	if got, want := timeLeft(40*time.Second, 30*time.Second), "[40s of 30s, 0s left]"; got != want {
		t.Errorf("timeLeft past the end = %q, want %q", got, want)
	}
	if got, want := timeLeft(5*time.Second, 0), "[5s elapsed]"; got != want {
		t.Errorf("timeLeft unknown total = %q, want %q", got, want)
	}
}
