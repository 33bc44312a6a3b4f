package cluster_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/simcluster"
)

// TestSimulation runs three voters and a broker-only node in this process
// through random steps (acks=all produces, link faults of every kind,
// crashes and restarts, preferred elections, reassignments) drawn from
// each seed, checking the cluster's invariants after
// every step and, at the end, that no acknowledged record was lost.
// RINGLOG_SIM_SEEDS (comma-separated) and RINGLOG_SIM_STEPS choose the
// run (make sim runs the long one); a failure names its seed, and
// RINGLOG_SIM_SEEDS=that seed draws the same actions again, step for step
// (simcluster.Draw), though not their timing.
func TestSimulation(t *testing.T) {
	seeds := []uint64{1, 2}
	steps := 25
	if v := os.Getenv("RINGLOG_SIM_SEEDS"); v != "" {
		seeds = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("RINGLOG_SIM_SEEDS: %v", err)
			}
			seeds = append(seeds, n)
		}
	}
	if v := os.Getenv("RINGLOG_SIM_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("RINGLOG_SIM_STEPS=%q: want a positive count", v)
		}
		steps = n
	}
	for _, seed := range seeds {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			runSimulation(t, seed, steps)
		})
	}
}

func runSimulation(t *testing.T, seed uint64, steps int) {
	start := time.Now()
	c := simcluster.Start(t, 3)
	// A broker-only node beside the three voters: reassignments move
	// replicas onto and off it, crashes and cuts hit it too.
	if _, err := c.AddBroker(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	s, err := simcluster.NewSimulation(ctx, c, seed)
	cancel()
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	report := func(err error) {
		t.Helper()
		tail := s.Log[max(0, len(s.Log)-30):]
		t.Fatalf("seed %d (the same actions again: RINGLOG_SIM_SEEDS=%d RINGLOG_SIM_STEPS=%d go test ./cluster -run TestSimulation): %v\nlast steps:\n%s",
			seed, seed, steps, err, strings.Join(tail, "\n"))
	}
	for i := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.Step(ctx, i)
		cancel()
		if testing.Verbose() {
			t.Log(s.Log[len(s.Log)-1])
		}
		if err != nil {
			report(err)
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := s.Finish(ctx); err != nil {
		report(err)
	}
	t.Logf("seed %d: %d steps, %d records acknowledged and read back, %v", seed, steps, s.Acknowledged(), time.Since(start).Round(time.Millisecond))
}
