package testenv

import (
	"context"
	"testing"
	"time"
)

// waitPoll is how often WaitFor asks again.
const waitPoll = 10 * time.Millisecond

// WaitFor asks cond every 10 ms until it holds, and fails t when it has
// not within d: the one way tests wait for something to happen, instead
// of sleeping for a guess of how long it takes.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Eventually(d, cond) {
		t.Fatalf("waited %v for %s", d, what)
	}
}

// Eventually asks cond every 10 ms until it holds (true) or d has passed
// (false): WaitFor for a caller that reports the failure itself.
func Eventually(d time.Duration, cond func() bool) bool {
	return Poll(d, waitPoll, cond)
}

// Poll asks cond every period until it holds (true) or d has passed
// (false): Eventually for a condition too costly to ask every 10 ms (a
// request to each broker of a cluster).
func Poll(d, period time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// Holds asks cond every 10 ms for d and fails t the first time it does
// not hold: the way tests check that something does not happen for a
// while (no leader elected, no write made), which a sleep followed by
// one check would miss when it happens and undoes itself in between.
func Holds(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	for {
		if !cond() {
			t.Fatalf("%s stopped holding after %v of %v", what, time.Since(start).Round(time.Millisecond), d)
			return
		}
		if time.Since(start) >= d {
			return
		}
		<-tick.C
	}
}

// Until asks cond every 10 ms until it holds (true) or ctx ends (false):
// Eventually for a wait bounded by a test's context, as in a goroutine
// that may not fail t itself, or a retry loop whose attempt is cond.
func Until(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}
