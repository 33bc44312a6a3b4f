package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/simcluster"
	"github.com/ringlog/ringlog/internal/testenv"
)

// After a broker comes back, the partitions it prefers are led
// elsewhere; a preferred election (ElectLeaders, as kafka-leader-election
// --election-type preferred sends it) gives them back, answers only for
// those, and moves nothing the second time.
func TestPreferredElectionAfterARestart(t *testing.T) {
	c := simcluster.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitController(ctx); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(c.Client())
	if res, err := adm.CreateTopic(ctx, 6, 3, nil, "balanced"); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	leaders := func() (map[int32]int32, map[int32]int32, bool) {
		md, err := adm.Metadata(ctx, "balanced")
		if err != nil {
			return nil, nil, false
		}
		lead, pref := map[int32]int32{}, map[int32]int32{}
		full := true
		for _, p := range md.Topics["balanced"].Partitions {
			lead[p.Partition], pref[p.Partition] = p.Leader, p.Replicas[0]
			full = full && len(p.ISR) == 3
		}
		return lead, pref, full && len(lead) == 6
	}
	testenv.WaitFor(t, 30*time.Second, "every partition led by its preferred replica, in sync", func() bool {
		lead, pref, full := leaders()
		for p := range lead {
			full = full && lead[p] == pref[p]
		}
		return full
	})
	if err := c.Stop(1); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "broker 1's partitions led by others", func() bool {
		lead, pref, _ := leaders()
		away := 0
		for p := range lead {
			if pref[p] == 1 {
				if lead[p] == 1 {
					return false
				}
				away++
			}
		}
		return away > 0
	})
	if err := c.Restart(1); err != nil {
		t.Fatal(err)
	}
	var moved int
	var lead, pref map[int32]int32
	var full bool
	if !testenv.Eventually(60*time.Second, func() bool {
		lead, pref, full = leaders()
		moved = 0
		for p := range lead {
			if pref[p] == 1 && lead[p] != 1 {
				moved++
			}
		}
		return full && moved > 0
	}) {
		t.Fatalf("broker 1 not back in every ISR with its partitions led by others: leaders %v, preferred %v, ISRs full %v", lead, pref, full)
	}
	res, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, nil)
	if err != nil {
		t.Fatal(err)
	}
	answered := 0
	for topic, ps := range res {
		for p, r := range ps {
			if topic == "balanced" {
				answered++ // (the internal topics moved too)
			}
			if r.Err != nil {
				t.Errorf("%s-%d: %v", topic, p, r.Err)
			}
		}
	}
	if answered != moved {
		t.Errorf("%d partitions answered, %d were away from their preferred replica", answered, moved)
	}
	testenv.WaitFor(t, 30*time.Second, "every partition back on its preferred replica", func() bool {
		lead, pref, _ := leaders()
		for p := range lead {
			if lead[p] != pref[p] {
				return false
			}
		}
		return len(lead) == 6
	})
	// Named, once more: nothing to do.
	res, err = adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"balanced": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res["balanced"][0]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
		t.Errorf("a second election of partition 0: %v, want ELECTION_NOT_NEEDED", r.Err)
	}
}

// With auto.leader.rebalance.enable, the controller gives a restarted
// broker its preferred leaderships back by itself, once it is in sync.
func TestAutoLeaderRebalance(t *testing.T) {
	c := simcluster.Start(t, 3, func(cfg *broker.Config) {
		cfg.Cluster.AutoLeaderRebalance = true
		cfg.Cluster.LeaderImbalanceCheckInterval = time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitController(ctx); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(c.Client())
	if res, err := adm.CreateTopic(ctx, 6, 3, nil, "rebalanced"); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	// away counts the partitions not led by their preferred replica, and
	// those of broker 1's.
	away := func() (all, ofOne int, ok bool) {
		md, err := adm.Metadata(ctx, "rebalanced")
		if err != nil || len(md.Topics["rebalanced"].Partitions) != 6 {
			return 0, 0, false
		}
		for _, p := range md.Topics["rebalanced"].Partitions {
			if p.Leader != p.Replicas[0] {
				all++
				if p.Replicas[0] == 1 {
					ofOne++
				}
			}
		}
		return all, ofOne, true
	}
	testenv.WaitFor(t, 30*time.Second, "every partition on its preferred leader", func() bool {
		all, _, ok := away()
		return ok && all == 0
	})
	if err := c.Stop(1); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "broker 1's partitions led elsewhere", func() bool {
		_, n, ok := away()
		return ok && n > 0
	})
	if err := c.Restart(1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testenv.WaitFor(t, 60*time.Second, "broker 1's leaderships back without an ElectLeaders", func() bool {
		all, _, ok := away()
		return ok && all == 0
	})
	t.Logf("leaders back on their preferred replicas %v after the restart", time.Since(start).Round(100*time.Millisecond))
}
