package testenv

import (
	"context"
	"testing"
	"time"
)

// recorder stands in for a test, remembering how it was ended.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skip(args ...any)               { r.skip = args[0].(string) }
func (r *recorder) Fatalf(format string, a ...any) { r.fatal = format }

func TestMissing(t *testing.T) {
	const flag = "RINGLOG_TESTENV_SELFTEST"
	for _, tc := range []struct {
		val   string
		fails bool
	}{{"", false}, {"0", false}, {"1", true}, {"yes", true}} {
		t.Setenv(flag, tc.val)
		var r recorder
		Missing(&r, flag, "no %s here", "widget")
		if tc.fails {
			if r.fatal == "" || r.skip != "" {
				t.Fatalf("%s=%q: fatal %q skip %q, want a failure", flag, tc.val, r.fatal, r.skip)
			}
		} else if r.skip != "no widget here" || r.fatal != "" {
			t.Fatalf("%s=%q: fatal %q skip %q, want a skip", flag, tc.val, r.fatal, r.skip)
		}
		if Required(flag) != tc.fails {
			t.Fatalf("Required with %s=%q = %v", flag, tc.val, !tc.fails)
		}
	}
}

func TestWaitFor(t *testing.T) {
	n := 0
	WaitFor(t, time.Second, "the third call", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times", n)
	}
	start := time.Now()
	if Eventually(30*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds held")
	}
	if took := time.Since(start); took < 30*time.Millisecond || took > time.Second {
		t.Fatalf("Eventually gave up after %v, want about 30ms", took)
	}
}

func TestHolds(t *testing.T) {
	n := 0
	start := time.Now()
	Holds(t, 50*time.Millisecond, "a true condition", func() bool { n++; return true })
	if took := time.Since(start); took < 50*time.Millisecond || took > time.Second || n < 2 {
		t.Fatalf("Holds of 50ms returned after %v, %d calls", took, n)
	}
	// A condition that fails once, then holds again: the failure is
	// caught where one check after a sleep would have missed it.
	var r recorder
	n = 0
	Holds(&r, time.Second, "the count", func() bool { n++; return n != 3 })
	if r.fatal == "" || n != 3 {
		t.Fatalf("a condition false at its third call: fatal %q after %d calls", r.fatal, n)
	}
}

func TestUntil(t *testing.T) {
	n := 0
	if !Until(context.Background(), func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Until returned before the third call (%d calls)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	if Until(ctx, func() bool { return false }) {
		t.Fatal("a condition that never holds held")
	}
	if took := time.Since(start); took < 30*time.Millisecond || took > time.Second {
		t.Fatalf("Until gave up after %v, want about 30ms (the context's end)", took)
	}
}
