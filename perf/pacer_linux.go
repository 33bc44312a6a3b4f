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
