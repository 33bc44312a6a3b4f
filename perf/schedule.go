package perf

import (
	"math"
	"time"
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

// waitDue waits with p until due, but wakes no sooner than quantum after
// the previous wake-up (*lastWake, which it then sets): the pacing of
// both kinds of sender. A due time already past returns at once. interval
// is the schedule's (Schedule.Interval): with no quantum every wake-up is
// a due time, so the pacer's timer can stay armed at that period.
func waitDue(p *pacer, due time.Time, interval, quantum time.Duration, lastWake *time.Time) error {
	if !due.After(time.Now()) {
		return nil
	}
	wake, period := due, interval
	if quantum > 0 {
		period = 0 // wake-ups are off the schedule's grid
		if q := lastWake.Add(quantum); wake.Before(q) {
			wake = q
		}
	}
	if err := p.waitUntil(wake, period); err != nil {
		return err
	}
	*lastWake = time.Now()
	return nil
}
