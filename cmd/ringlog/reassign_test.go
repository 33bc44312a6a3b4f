package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ringlog/ringlog/internal/simcluster"
	"github.com/ringlog/ringlog/internal/testenv"
)

// placeReassignment keeps the replicas already on the named brokers,
// fills in from the least loaded, and spreads the preferred leaders.
func TestPlaceReassignment(t *testing.T) {
	current := reassignPlan{Version: 1, Partitions: []reassignTarget{
		{Topic: "t", Partition: 0, Replicas: []int32{1, 2, 3}},
		{Topic: "t", Partition: 1, Replicas: []int32{2, 3, 1}},
		{Topic: "t", Partition: 2, Replicas: []int32{3, 1, 2}},
		{Topic: "t", Partition: 3, Replicas: []int32{1, 2, 3}},
	}}
	got, err := placeReassignment(current, []int32{2, 3, 4, 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	load, leaders := map[int32]int{}, map[int32]int{}
	for i, p := range got.Partitions {
		was := current.Partitions[i].Replicas
		if len(p.Replicas) != 3 || slices.Contains(p.Replicas, 1) {
			t.Fatalf("partition %d: %v", p.Partition, p.Replicas)
		}
		kept := 0
		for _, id := range p.Replicas {
			load[id]++
			if slices.Contains(was, id) {
				kept++
			}
		}
		if kept != 2 {
			t.Errorf("partition %d: %v from %v moves more than broker 1's replica", p.Partition, p.Replicas, was)
		}
		leaders[p.Replicas[0]]++
	}
	if load[4]+load[5] != 4 || load[4] != 2 {
		t.Errorf("broker 1's four replicas spread unevenly: %v", load)
	}
	for id, n := range leaders {
		if n > 1 {
			t.Errorf("broker %d prefers %d partitions: %v", id, n, leaders)
		}
	}
	if _, err := placeReassignment(current, []int32{2, 3}, nil); err == nil {
		t.Error("three replicas placed on two brokers")
	}
}

// With racks, a replica moved off broker 1 goes to a rack its partition
// does not use yet, even where that broker is more loaded.
func TestPlaceReassignmentAcrossRacks(t *testing.T) {
	racks := map[int32]string{1: "a", 2: "a", 3: "b", 4: "a", 5: "c"}
	current := reassignPlan{Version: 1, Partitions: []reassignTarget{
		{Topic: "t", Partition: 0, Replicas: []int32{1, 3}},
		{Topic: "t", Partition: 1, Replicas: []int32{1, 2}},
	}}
	got, err := placeReassignment(current, []int32{2, 3, 4, 5}, racks)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got.Partitions {
		seen := map[string]bool{}
		for _, id := range p.Replicas {
			seen[racks[id]] = true
		}
		if len(seen) != 2 {
			t.Errorf("partition %d: %v spans %d racks, want 2", p.Partition, p.Replicas, len(seen))
		}
	}
	topics := kadm.TopicDetails{"t": {Topic: "t", Partitions: kadm.PartitionDetails{
		0: {Partition: 0, Replicas: []int32{1, 3}}, 1: {Partition: 1, Replicas: []int32{2, 1}}}}}
	plan, err := drainPlan(topics, 1, []int32{2, 3, 4, 5}, racks)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plan.Partitions {
		if p.Partition == 1 && racks[p.Replicas[1]] == "a" {
			t.Errorf("drain put partition 1's second replica on rack a beside broker 2: %v", p.Replicas)
		}
	}
}

// ringlog topic reassign against a four-broker cluster: --generate a plan
// off broker 1, carry it out with --wait, --list, --cancel of nothing,
// and the usage errors; then ringlog cluster drain empties broker 2 of
// every replica, internal topics' too.
func TestTopicReassignCommand(t *testing.T) {
	c := simcluster.Start(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitController(ctx); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(c.Client())
	if res, err := adm.CreateTopic(ctx, 3, 2, nil, "orders"); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	// Every broker has applied it before the tool asks any of them (a
	// broker behind answers that it does not exist, as Kafka's would).
	testenv.WaitFor(t, 10*time.Second, "orders on every broker", func() bool {
		for _, n := range c.Nodes() {
			if b := n.Broker(); b == nil || b.Cluster().Image().Topic("orders") == nil {
				return false
			}
		}
		return true
	})
	seeds := strings.Join(c.Seeds(), ",")
	run := func(code int, args ...string) toolResult {
		t.Helper()
		r := tool(t, "", nil, append(args, "--brokers", seeds)...)
		if r.code != code {
			t.Fatalf("ringlog %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
		}
		return r
	}
	dir := t.TempDir()
	back := filepath.Join(dir, "back.json")
	r := run(0, "topic", "reassign", "--generate", "--topic", "orders", "--broker-list", "2,3", "--rollback", back)
	plan := decodeJSON[reassignPlan](t, r.stdout)
	if len(plan.Partitions) != 3 {
		t.Fatalf("plan: %+v", plan)
	}
	for _, p := range plan.Partitions {
		if slices.Contains(p.Replicas, 1) || len(p.Replicas) != 2 {
			t.Fatalf("plan keeps a replica on broker 1: %+v", plan)
		}
	}
	if b, err := os.ReadFile(back); err != nil || !strings.Contains(string(b), `"partitions"`) {
		t.Fatalf("rollback file: %v %q", err, b)
	}
	planFile := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planFile, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	r = run(0, "topic", "reassign", "--plan", planFile, "--wait")
	wantContains(t, "reassign --wait", r.stdout, "orders-0", "moving", "Every move of the plan has completed (3 partitions).")
	r = run(0, "topic", "reassign", "--list")
	wantContains(t, "reassign --list", r.stdout, "No partition is being reassigned.")
	testenv.WaitFor(t, 20*time.Second, "every replica off broker 1", func() bool {
		md, err := adm.Metadata(ctx, "orders")
		if err != nil {
			return false
		}
		for _, p := range md.Topics["orders"].Partitions {
			if slices.Contains(p.Replicas, 1) || len(p.ISR) != 2 {
				return false
			}
		}
		return true
	})
	r = run(1, "topic", "reassign", "--plan", planFile, "--cancel")
	wantContains(t, "reassign --cancel", r.stdout, "NO_REASSIGNMENT_IN_PROGRESS")
	run(2, "topic", "reassign")
	run(2, "topic", "reassign", "--list", "--generate")
	run(2, "topic", "reassign", "--generate", "--topic", "orders")
	run(2, "topic", "reassign", "--list", "--wait")
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r = run(2, "topic", "reassign", "--plan", bad)
	wantContains(t, "an empty replica list", r.stderr, "no replicas")

	r = run(0, "cluster", "drain", "2", "--dry-run")
	if dry := decodeJSON[reassignPlan](t, r.stdout); len(dry.Partitions) < 3 {
		t.Fatalf("drain plan of broker 2 moves %d partitions, want orders' 3 at least: %+v", len(dry.Partitions), dry)
	}
	r = run(0, "cluster", "drain", "2")
	wantContains(t, "drain", r.stdout, "Every move of the plan has completed")
	testenv.WaitFor(t, 20*time.Second, "nothing on broker 2", func() bool {
		md, err := adm.Metadata(ctx)
		if err != nil {
			return false
		}
		for _, td := range md.Topics {
			for _, p := range td.Partitions {
				if slices.Contains(p.Replicas, 2) {
					return false
				}
			}
		}
		return true
	})
	r = run(0, "cluster", "drain", "2")
	wantContains(t, "drain again", r.stdout, "Broker 2 holds no replica.")
	run(2, "cluster", "drain")
	run(2, "cluster", "drain", "two")

	// Broker 2, drained, is unregistered once stopped (not before).
	r = run(1, "cluster", "unregister", "2")
	wantContains(t, "unregister a running broker", r.stderr, "is running")
	if err := c.Stop(2); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "broker 2 unregistered", func() bool {
		return tool(t, "", nil, "cluster", "unregister", "2", "--brokers", seeds).code == 0
	})
	testenv.WaitFor(t, 10*time.Second, "broker 2 gone from broker 1's image", func() bool {
		_, ok := c.Node(1).Broker().Cluster().Image().Broker(2)
		return !ok
	})
	run(1, "cluster", "unregister", "2") // (not registered any more)

	// The metadata quorum: four voters, each heard from.
	testenv.WaitFor(t, 10*time.Second, "every voter heard from", func() bool {
		r := tool(t, "", nil, "cluster", "quorum", "--brokers", seeds)
		return r.code == 0 && strings.Count(r.stdout, "voter") == 3 && strings.Count(r.stdout, "leader") == 2
	})
}
