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

// A broker is caught up when it has applied what the controller had at
// its previous heartbeat; one that stays behind stops being caught up.
func TestMetadataReports(t *testing.T) {
	var k controller
	t0 := time.Unix(100, 0)
	r := k.reported(4, 10, 10, t0)
	if !r.caughtUpAt.Equal(t0) {
		t.Fatal("the first report is caught up")
	}
	r = k.reported(4, 10, 20, t0.Add(time.Second)) // applied what the controller had before: still caught up
	if !r.caughtUpAt.Equal(t0.Add(time.Second)) {
		t.Fatal("a broker that applied the previous target is caught up")
	}
	r = k.reported(4, 12, 30, t0.Add(2*time.Second)) // behind the previous target (20)
	if !r.caughtUpAt.Equal(t0.Add(time.Second)) {
		t.Fatal("a broker behind the previous target counts as caught up")
	}
	k.forgetReports()
	if _, ok := k.report(4); ok {
		t.Fatal("reports survive a new office")
	}
}
