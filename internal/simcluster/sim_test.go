package simcluster

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A seed draws the same actions whatever order its steps are drawn in and
// whatever came before them, and different seeds draw different runs
// that use every kind of action.
func TestDrawDependsOnSeedAndStepAlone(t *testing.T) {
	brokers := []int32{1, 2, 3, 4}
	const steps = 2000
	forward := make([]Action, steps)
	for i := range steps {
		forward[i] = Draw(1, i, brokers, 3)
	}
	kinds := map[ActionKind]int{}
	for i := steps - 1; i >= 0; i-- {
		a := Draw(1, i, brokers, 3)
		if !reflect.DeepEqual(a, forward[i]) {
			t.Fatalf("step %d drawn twice: %v, then %v", i, forward[i], a)
		}
		kinds[a.Kind]++
		if a.A == a.B || a.A < 1 || a.A > 4 || a.B < 1 || a.B > 4 {
			t.Fatalf("step %d: brokers %d and %d", i, a.A, a.B)
		}
	}
	if len(kinds) != int(Wait)+1 {
		t.Errorf("%d steps drew %d kinds of action of %d: %v", steps, len(kinds), Wait+1, kinds)
	}
	same := 0
	for i := range steps {
		if reflect.DeepEqual(Draw(2, i, brokers, 3), forward[i]) {
			same++
		}
	}
	if same > steps/4 {
		t.Errorf("seeds 1 and 2 draw the same action at %d steps of %d", same, steps)
	}
}

// The simulation's checks fail where they must: a record claimed
// acknowledged that the log does not have, and a second leader for a
// leader epoch already seen.
func TestSimulationChecksCatch(t *testing.T) {
	c := Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := NewSimulation(ctx, c, 7)
	if err != nil {
		t.Fatal(err)
	}
	// Every link up: acknowledged (a loaded machine may need a retry
	// of what timed out).
	var got string
	for range 3 {
		if got = s.produce(ctx, 10); strings.Contains(got, "all acknowledged") {
			break
		}
	}
	if !strings.Contains(got, "all acknowledged") {
		t.Fatalf("produce with every link up: %s", got)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("a healthy cluster fails the checks: %v", err)
	}
	for k, leader := range s.leaders {
		s.leaders[k] = leader%3 + 1
		break
	}
	if err := s.Check(); err == nil || !strings.Contains(err.Error(), "an earlier image named") {
		t.Errorf("two leaders for one epoch: %v", err)
	}
	clear(s.leaders)
	s.acked["never-written"] = position{0, 3}
	if err := s.Finish(ctx); err == nil || !strings.Contains(err.Error(), "acknowledged records lost or moved: never-written") {
		t.Errorf("Finish with a record acknowledged and not written: %v", err)
	}
}
