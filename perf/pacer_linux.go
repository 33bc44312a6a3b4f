package perf

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pacer waits for due times with microsecond precision. Go's timers round
// sleeps below a millisecond up to about a millisecond on Linux (the
// netpoller's timeout granularity), which would add up to a millisecond of
// the harness's own lateness to every measured latency. The pacer arms a
// timerfd(2) (no timer slack) and waits for it in Go's netpoller, so the
// sender's goroutine parks without holding a P. (An earlier pacer slept in
// nanosleep(2) on a locked thread: the sleeping thread kept its P until
// sysmon took it back, which left the client's goroutines one P short on
// 2 cores, and with GOMAXPROCS=1 delayed every record by milliseconds.)
//
// A wait costs system calls, and at 10k records/s on a 2-vCPU VM the load
// generator's own CPU is what its measured tail latency is most sensitive
// to, so the pacer spends as few as it can:
//   - A fixed-rate sender passes its interval: the timer is armed once,
//     periodic, on absolute CLOCK_MONOTONIC times, and later waits whose
//     due time falls on that grid wait for a later tick without re-arming
//     it. A wait costs one read(2) (and the netpoller's epoll_pwait),
//     where re-arming a one-shot timer cost three calls.
//   - The first read of a wait, which would fail with EAGAIN before the
//     timer fires, is skipped while the clock says the timer cannot have
//     fired since it was last read or armed. Go's netpoller is
//     edge-triggered and clears a stale readiness before each wait; the
//     clock check is what makes skipping that read safe: a timer that
//     fires later gives the parked waiter a new edge.
//   - A periodic timerfd fires once and then stops until it is read (the
//     kernel re-arms it, on its grid, in read(2)), so a tick that fired
//     while the sender was busy is read before waiting for the next.
type pacer struct {
	f  *os.File
	fd int
	rc syscall.RawConn
	// ref and refMono are one instant on Go's clock and on
	// CLOCK_MONOTONIC (the timer's clock); skew bounds their disagreement.
	ref     time.Time
	refMono int64
	skew    time.Duration
	// base and period are the armed timer's first expiry and interval
	// (period 0: a one-shot timer); next is no later than its next expiry
	// as of the last arming or read (zero: it will not fire).
	base   time.Time
	period time.Duration
	next   time.Time
	buf    [8]byte
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
	p := &pacer{f: f, fd: fd, rc: rc}
	if err := p.calibrate(); err != nil {
		f.Close()
		return nil, err
	}
	return p, nil
}

// calibrate pairs an instant of Go's clock with CLOCK_MONOTONIC (Go reads
// the same clock through the vDSO, but does not expose its value): the
// tightest of a few reads taken between two time.Now calls.
func (p *pacer) calibrate() error {
	p.skew = time.Hour
	for range 8 {
		var ts unix.Timespec
		t0 := time.Now()
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			return fmt.Errorf("perf: pacer: clock_gettime: %w", err)
		}
		t1 := time.Now()
		if d := t1.Sub(t0); d < p.skew {
			p.skew = d
			p.ref = t0.Add(d / 2)
			p.refMono = ts.Nano()
		}
	}
	p.skew = p.skew/2 + time.Microsecond
	return nil
}

// waitUntil returns at t or just after it (at most the clock calibration's
// skew, a microsecond or two, before it); it returns at once when t has
// passed. A sender whose due times are period apart passes period (> 0) so
// that the timer stays armed between waits; 0 arms a one-shot timer.
func (p *pacer) waitUntil(t time.Time, period time.Duration) error {
	if !t.After(time.Now()) {
		return nil
	}
	if !p.onGrid(t, period) {
		if err := p.arm(t, period); err != nil {
			return err
		}
	}
	early := t.Add(-p.skew)
	var rerr error
	err := p.rc.Read(func(fd uintptr) bool {
		for {
			now := time.Now()
			if !p.next.IsZero() && now.Before(p.next.Add(-p.skew)) {
				return false // cannot have fired: park until its edge
			}
			_, err := unix.Read(int(fd), p.buf[:])
			if err == unix.EAGAIN {
				return false // not yet: park in the netpoller
			}
			if err != nil {
				rerr = err
				return true
			}
			if p.period == 0 {
				p.next = time.Time{} // a one-shot timer armed for t is spent
				return true
			}
			// The kernel re-armed the timer at its first tick after the
			// read; now, taken before it, may name an earlier tick (a
			// spare read later), never a later one (a missed wake-up).
			p.next = p.base.Add((now.Sub(p.base)/p.period + 1) * p.period)
			if !now.Before(early) {
				return true
			}
			// A tick before t: the sender was late, or t is ticks ahead.
		}
	})
	if err != nil {
		return fmt.Errorf("perf: pacer: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("perf: pacer: read timerfd: %w", rerr)
	}
	return nil
}

// onGrid reports whether the armed periodic timer, with interval period,
// fires at t (within a microsecond: due times are rounded to nanoseconds).
func (p *pacer) onGrid(t time.Time, period time.Duration) bool {
	if period <= 0 || p.period != period || p.next.IsZero() || t.Before(p.next) {
		return false
	}
	off := t.Sub(p.base) % period
	return off <= time.Microsecond || period-off <= time.Microsecond
}

// arm programs the timer to fire first at t, then every period (0: once),
// on absolute CLOCK_MONOTONIC time.
func (p *pacer) arm(t time.Time, period time.Duration) error {
	spec := unix.ItimerSpec{
		Value:    unix.NsecToTimespec(p.refMono + int64(t.Sub(p.ref))),
		Interval: unix.NsecToTimespec(int64(max(period, 0))),
	}
	if err := unix.TimerfdSettime(p.fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		return fmt.Errorf("perf: timerfd_settime: %w", err)
	}
	p.base, p.period, p.next = t, max(period, 0), t
	return nil
}

// close releases the timerfd.
func (p *pacer) close() error { return p.f.Close() }
