package perf

import (
	"fmt"
	"math"
	"os"
	"syscall"
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
// the harness's own lateness to every measured latency. The pacer arms a
// timerfd(2) (no timer slack) and waits for it in Go's netpoller, so the
// sender's goroutine parks without holding a P. (An earlier pacer slept in
// nanosleep(2) on a locked thread: the sleeping thread kept its P until
// sysmon took it back, which left the client's goroutines one P short on
// 2 cores, and with GOMAXPROCS=1 delayed every record by milliseconds.)
type pacer struct {
	f  *os.File
	rc syscall.RawConn
}

// newPacer makes a pacer; close it when done.
func newPacer() (*pacer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perf: timerfd_create: %w", err)
	}
	// A non-blocking descriptor joins the netpoller.
	f := os.NewFile(uintptr(fd), "pacer-timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("perf: pacer: %w", err)
	}
	return &pacer{f: f, rc: rc}, nil
}

// waitUntil returns at t or just after it; it returns at once when t has
// passed.
func (p *pacer) waitUntil(t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(int(p.f.Fd()), 0, &spec, nil); err != nil {
		return fmt.Errorf("perf: timerfd_settime: %w", err)
	}
	var buf [8]byte
	var rerr error
	err := p.rc.Read(func(fd uintptr) bool {
		_, err := unix.Read(int(fd), buf[:])
		if err == unix.EAGAIN {
			return false // not yet: park in the netpoller
		}
		rerr = err
		return true
	})
	if err != nil {
		return fmt.Errorf("perf: pacer: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("perf: pacer: read timerfd: %w", rerr)
	}
	return nil
}

// close releases the timerfd.
func (p *pacer) close() error { return p.f.Close() }
