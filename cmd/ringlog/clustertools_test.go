package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testenv"
)

// TestClusterToolsDuringFailover drives the command-line tools against a
// three-broker cluster as an operator would: topic create then describe
// at once through another broker (three times), cluster status healthy;
// then, with the leader of partition 0 killed, topic describe still
// answers promptly with what it knows, cluster status says what is wrong
// (exit 1), and once the failover is done describe names the dead broker
// as an offline replica.
func TestClusterToolsDuringFailover(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3)
	for id := 1; id <= 3; id++ {
		c.startReplicated(id)
	}
	ctx := deadlineCtx(t, 3*time.Minute)
	c.converge(ctx, 3)
	all := strings.Join(c.kafka, ",")
	run := func(wantCode int, brokers string, args ...string) toolResult {
		t.Helper()
		r := tool(t, "", nil, append(args, "--brokers", brokers)...)
		if r.code != wantCode {
			t.Fatalf("ringlog %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, wantCode, r.stdout, r.stderr)
		}
		return r
	}
	r := run(0, all, "cluster", "status", "--wait", "--min-brokers", "3")
	wantContains(t, "cluster status", r.stdout, "Healthy: yes", "3 brokers")

	// Created through broker i, described at once through broker i+1.
	for i := range 3 {
		name := fmt.Sprintf("ops-%d", i)
		run(0, c.kafka[i], "topic", "create", name, "--partitions", "6", "--replication-factor", "3")
		d := run(0, c.kafka[(i+1)%3], "topic", "describe", name)
		wantContains(t, "describe right after create", d.stdout, "Topic: "+name, "6 partitions, replication factor 3")
	}

	d := describeTopicJSON(t, all, "ops-0")
	victim := d.Partitions[0].Leader
	if victim < 1 || victim > 3 {
		t.Fatalf("ops-0 partition 0 has leader %d", victim)
	}
	var live []string
	for id := 1; id <= 3; id++ {
		if int32(id) != victim {
			live = append(live, c.kafka[id-1])
		}
	}
	c.procs[victim-1].kill()
	// At once: the leader is gone, the metadata may still name it.
	r = run(0, strings.Join(live, ","), "topic", "describe", "ops-0")
	if r.took > 10*time.Second {
		t.Errorf("topic describe during the failover took %v", r.took)
	}
	wantContains(t, "describe during the failover", r.stdout, "Topic: ops-0", "OFFLINE")
	t.Logf("describe right after broker %d was killed (%v):\n%s", victim, r.took.Round(time.Millisecond), r.stdout)

	// Once the controller has fenced it: under-replicated, offline
	// replica named, cluster status exits 1 and says why.
	if !testenv.Eventually(30*time.Second, func() bool {
		r = tool(t, "", nil, "cluster", "status", "--brokers", strings.Join(live, ","), "--min-brokers", "3")
		// The fencing and the elections it calls for are two
		// proposals: wait for both.
		return r.code == 1 && strings.Contains(r.stdout, "2 brokers") && strings.Contains(r.stdout, "under-replicated")
	}) {
		t.Fatalf("cluster status with broker %d dead: exit %d\n%s\n%s", victim, r.code, r.stdout, r.stderr)
	}
	wantContains(t, "cluster status, a broker dead", r.stdout, "Healthy: no", "under-replicated", "2 brokers live, want at least 3")
	wantContains(t, "cluster status, a broker dead", r.stderr, "cluster not healthy")
	// The broker asked may publish the elections a moment after the
	// one cluster status asked.
	var wrong []string
	if !testenv.Eventually(10*time.Second, func() bool {
		d = describeTopicJSON(t, strings.Join(live, ","), "ops-0")
		wrong = nil
		for _, p := range d.Partitions {
			if p.Leader == victim || len(p.Offline) != 1 || p.Offline[0] != victim {
				wrong = append(wrong, fmt.Sprintf("partition %d: leader %d, offline %v", p.Partition, p.Leader, p.Offline))
			}
		}
		return len(wrong) == 0
	}) {
		t.Fatalf("ops-0 after the failover: %s; want a live leader and offline [%d]", strings.Join(wrong, "; "), victim)
	}
}

// describeTopicJSON is `ringlog topic describe NAME --output json`.
func describeTopicJSON(t *testing.T, brokers, name string) topicDescribeJSON {
	t.Helper()
	r := tool(t, "", nil, "topic", "describe", name, "--brokers", brokers, "--output", "json")
	if r.code != 0 {
		t.Fatalf("topic describe %s: exit %d\n%s", name, r.code, r.stderr)
	}
	ds := decodeJSON[[]topicDescribeJSON](t, r.stdout)
	if len(ds) != 1 {
		t.Fatalf("topic describe %s: %d topics", name, len(ds))
	}
	return ds[0]
}
