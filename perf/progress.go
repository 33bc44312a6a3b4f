package perf

import (
	"fmt"
	"time"
)

// stepClock numbers the steps of a run made of many (suite, scale),
// grouped in phases, and estimates the time left, overall and in the
// current phase, from the average time per step so far.
type stepClock struct {
	now        func() time.Time
	began      time.Time
	total      int
	done       int
	phase      string
	phaseSteps int
	phaseDone  int
	phaseBegan time.Time
}

// newStepClock starts a clock for total steps; now is time.Now outside
// tests.
func newStepClock(total int, now func() time.Time) *stepClock {
	t := now()
	return &stepClock{now: now, began: t, total: total, phaseBegan: t}
}

// startPhase begins a phase of steps steps.
func (c *stepClock) startPhase(name string, steps int) {
	c.phase, c.phaseSteps, c.phaseDone, c.phaseBegan = name, steps, 0, c.now()
}

// skip takes n planned steps of the current phase off the plan (steps
// that will not run), so that they do not count as done in no time.
func (c *stepClock) skip(n int) {
	c.total -= n
	c.phaseSteps -= n
}

// step counts a step as done and returns the progress prefix:
// "[ 5/28 1m10s, ~4m26s left; sweep 3/14, ~2m12s left]".
func (c *stepClock) step() string {
	c.done++
	c.phaseDone++
	now := c.now()
	// A phase or run can take more steps than planned (a skipped step
	// elsewhere): never print a negative count left.
	total, phaseSteps := max(c.total, c.done), max(c.phaseSteps, c.phaseDone)
	el := now.Sub(c.began)
	s := fmt.Sprintf("[%2d/%d %s, %s", c.done, total, el.Round(time.Second), estimate(el, c.done, total))
	if c.phase != "" {
		s += fmt.Sprintf("; %s %d/%d, %s", c.phase, c.phaseDone, phaseSteps, estimate(now.Sub(c.phaseBegan), c.phaseDone, phaseSteps))
	}
	return s + "]"
}

// estimate is the time left after done of total steps took elapsed,
// at the same average pace.
func estimate(elapsed time.Duration, done, total int) string {
	if done >= total {
		return "done"
	}
	left := elapsed / time.Duration(done) * time.Duration(total-done)
	return fmt.Sprintf("~%s left", left.Round(time.Second))
}
