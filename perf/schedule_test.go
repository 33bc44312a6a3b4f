package perf

import (
	"testing"
	"time"
)

// TestScheduleExactIntervals: due times are exactly i/rate after the
// start, however long sends take.
func TestScheduleExactIntervals(t *testing.T) {
	start := time.Unix(1700000000, 0)
	for _, rate := range []float64{1, 1000, 10000, 50000, 3} {
		s := Schedule{Start: start, Rate: rate}
		for _, i := range []int64{0, 1, 2, 10, 999, 123456} {
			want := start.Add(time.Duration(float64(i) * 1e9 / rate))
			if d := s.Due(i).Sub(want); d < -time.Nanosecond || d > time.Nanosecond {
				t.Errorf("rate %v: Due(%d) = %v, want %v", rate, i, s.Due(i), want)
			}
		}
	}
	s := Schedule{Start: start, Rate: 1000}
	for i := int64(1); i < 5000; i++ {
		if d := s.Due(i).Sub(s.Due(i - 1)); d != time.Millisecond {
			t.Fatalf("interval %d = %v, want 1ms", i, d)
		}
	}
	if s.Interval() != time.Millisecond {
		t.Errorf("Interval = %v", s.Interval())
	}
}

// TestScheduleIgnoresSendCompletion: a sender whose sends stall still gets
// the same due times; the stall shows up as lateness (measured latency),
// and the records due during the stall are sent at once afterwards.
func TestScheduleIgnoresSendCompletion(t *testing.T) {
	start := time.Now()
	s := Schedule{Start: start, Rate: 2000} // every 500 µs
	var dues []time.Time
	var late []time.Duration
	stallAt := 20
	p := pacerLike{}
	for i := int64(0); i < 100; i++ {
		due := s.Due(i)
		p.waitUntil(due)
		dues = append(dues, due)
		late = append(late, time.Since(due))
		if i == int64(stallAt) {
			time.Sleep(20 * time.Millisecond) // a send that blocks
		}
	}
	for i, d := range dues {
		if want := start.Add(time.Duration(i) * 500 * time.Microsecond); !d.Equal(want) {
			t.Fatalf("due %d = %v, want %v", i, d.Sub(start), want.Sub(start))
		}
	}
	// The record after the stall is ~20 ms late, not re-based.
	if late[stallAt+1] < 15*time.Millisecond {
		t.Errorf("record after the stall only %v late: the schedule moved with the send", late[stallAt+1])
	}
}

// pacerLike runs a fresh real pacer for each wait.
type pacerLike struct{}

func (pacerLike) waitUntil(t time.Time) {
	p, err := newPacer()
	if err != nil {
		panic(err)
	}
	defer p.close()
	if err := p.waitUntil(t, 0); err != nil {
		panic(err)
	}
}

func TestProducerSchedulesInterleave(t *testing.T) {
	start := time.Unix(0, 0)
	ss := ProducerSchedules(start, 3000, 3)
	var all []time.Time
	for i := int64(0); i < 100; i++ {
		for _, s := range ss {
			all = append(all, s.Due(i))
		}
	}
	third := time.Second / 3000
	for i := 1; i < len(all); i++ {
		d := all[i].Sub(all[i-1])
		if d < third-time.Microsecond || d > third+time.Microsecond {
			t.Fatalf("gap %d = %v, want %v", i, d, third)
		}
	}
}
