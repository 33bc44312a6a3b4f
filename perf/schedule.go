package perf

import (
	"math"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Schedule is a fixed-rate send schedule: record i is due at
// Start + i/Rate, whatever happened to the records before it. A sender
// that falls behind sends the records that are due at once, and their
// latency is still measured from their due times, so the stall is seen
// (no coordinated omission).
type Schedule struct {
	// Start is when record 0 is due.
	Start time.Time
	// Rate is records per second (> 0).
	Rate float64
}

// Due returns the due time of record i.
func (s Schedule) Due(i int64) time.Time {
	return s.Start.Add(time.Duration(math.Round(float64(i) * 1e9 / s.Rate)))
}

// Interval is the time between two due times.
func (s Schedule) Interval() time.Duration {
	return time.Duration(math.Round(1e9 / s.Rate))
}

// ProducerSchedules splits a total rate over n senders: each sends rate/n
// records/s, their starts staggered by one total interval so that the sum
// of the n schedules is evenly spaced.
func ProducerSchedules(start time.Time, rate float64, n int) []Schedule {
	out := make([]Schedule, n)
	for i := range out {
		out[i] = Schedule{
			Start: start.Add(time.Duration(math.Round(float64(i) * 1e9 / rate))),
			Rate:  rate / float64(n),
		}
	}
	return out
}

// pacerQuantum is the shortest time between two wake-ups of a sender at
// the given per-sender rate. Up to 20k records/s every record gets its own
// wake-up; above, a sender sleeps at least 100 µs and then sends every
// record that fell due meanwhile: a wake-up costs ~20 µs of CPU on a VM
// (timer programming, two context switches), which at 100k+ records/s
// would take a large share of the cores the broker needs. Records sent
// late this way carry that lateness in their measured latency (it is
// measured from the due time).
func pacerQuantum(rate float64) time.Duration {
	if rate <= 20000 {
		return 0
	}
	return 100 * time.Microsecond
}

// pacer waits for due times with microsecond precision. Go's timers round
// sleeps below a millisecond up to about a millisecond on Linux (the
// netpoller's timeout granularity), which would add up to a millisecond of
// the harness's own lateness to every measured latency. The pacer sleeps in
// nanosleep(2) on a thread of its own with a 1 ns timer slack instead
// (measured: 20-50 µs late at p99 on the 2-vCPU VM instead of ~1 ms).
//
// newPacer locks the calling goroutine to its thread and never unlocks it:
// when the goroutine ends the thread ends too, so the changed timer slack
// does not leak into the runtime's thread pool.
type pacer struct{}

func newPacer() pacer {
	runtime.LockOSThread()
	// PR_SET_TIMERSLACK applies to the calling thread only.
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	return pacer{}
}

// waitUntil returns at t or just after it; it returns at once when t has
// passed.
func (pacer) waitUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		ts := unix.NsecToTimespec(int64(d))
		_ = unix.Nanosleep(&ts, nil) // EINTR: loop and sleep the rest
	}
}
