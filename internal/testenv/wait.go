package testenv

import (
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
	deadline := time.Now().Add(d)
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
