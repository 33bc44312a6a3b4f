package cluster

import (
	"testing"
	"time"
)

// The bucket holds a second's worth, may be overdrawn, and says how long
// the overdraft takes to pay back.
func TestByteBucket(t *testing.T) {
	now := time.Unix(100, 0)
	b := newByteBucket(1000, func() time.Time { return now })
	if w := b.wait(); w != 0 {
		t.Fatalf("a full bucket waits %v", w)
	}
	b.take(3000) // one large fetch: 2000 overdrawn
	if w := b.wait(); w < 2*time.Second || w > 2*time.Second+10*time.Millisecond {
		t.Fatalf("wait %v after overdrawing 2000 at 1000/s, want 2s", w)
	}
	now = now.Add(2100 * time.Millisecond)
	if w := b.wait(); w != 0 {
		t.Fatalf("wait %v once paid back", w)
	}
	now = now.Add(time.Hour)
	b.take(1000)
	if w := b.wait(); w == 0 {
		t.Fatal("an idle hour saved up more than a second's worth")
	}
}

// A broker is caught up when it has applied the controller's index of
// half a session to a session ago: a broker a heartbeat or two behind
// stays caught up, one that applies nothing does not.
func TestMetadataReports(t *testing.T) {
	var k controller
	half := 750 * time.Millisecond
	t0 := time.Unix(100, 0)
	r := k.reported(4, 10, 10, t0, half)
	if !r.caughtUpAt.Equal(t0) || r.target != 10 {
		t.Fatalf("the first report: %+v", r)
	}
	// Always one heartbeat behind the controller, which moves on: the
	// broker reaches each target (taken half a session before) in time.
	index := int64(10)
	for i := 1; i <= 20; i++ {
		now := t0.Add(time.Duration(i) * 250 * time.Millisecond)
		r = k.reported(4, index, index+5, now, half)
		index += 5
		if now.Sub(r.caughtUpAt) > time.Second {
			t.Fatalf("a broker a heartbeat behind counts as lagging at %v: %+v", now.Sub(t0), r)
		}
	}
	// Stuck: nothing applied any more.
	stuck := index
	var last metadataReport
	for i := 21; i <= 40; i++ {
		now := t0.Add(time.Duration(i) * 250 * time.Millisecond)
		last = k.reported(4, stuck, index, now, half)
		index += 5
	}
	if t0.Add(40*250*time.Millisecond).Sub(last.caughtUpAt) < 2*time.Second {
		t.Fatalf("a stuck broker still counts as caught up: %+v", last)
	}
	k.lagFenced(4, 99)
	if r, _ := k.report(4); r.lagFencedAt != 99 {
		t.Fatal("the lag fence is not recorded")
	}
	k.forgetReports()
	if _, ok := k.report(4); ok {
		t.Fatal("reports survive a new office")
	}
}
