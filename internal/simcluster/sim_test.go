package simcluster

import (
	"context"
	"strings"
	"testing"
	"time"
)

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
