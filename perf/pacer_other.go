//go:build !linux

package perf

import "time"

// pacer waits for due times with a Go timer. Off Linux there is no timerfd,
// so a wait is only as precise as the runtime's timers, and their
// lateness shows up in the latencies the harness measures from due times.
// Latency numbers are for Linux, where the pacer uses a timerfd
// (pacer_linux.go).
type pacer struct {
	t *time.Timer
}

// newPacer makes a pacer; close it when done.
func newPacer() (*pacer, error) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pacer{t: t}, nil
}

// waitUntil returns at t or just after it; it returns at once when t has
// passed. period (the Linux pacer's hint that due times are that far
// apart) is not used.
func (p *pacer) waitUntil(t time.Time, _ time.Duration) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	p.t.Reset(d)
	<-p.t.C
	return nil
}

// close stops the timer.
func (p *pacer) close() error {
	p.t.Stop()
	return nil
}
