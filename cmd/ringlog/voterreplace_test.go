package main

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/testenv"
)

// Real processes, the runbook's "replace a dead voter": under idempotent
// acks=all load, voter 1 is killed and its data directory deleted; `cluster
// quorum remove-voter 1`; a new node 4 starts as a broker-only node and
// `cluster quorum add-voter 4` makes it a voter; `cluster drain 1` moves
// the dead broker's replicas onto the others and `cluster unregister 1`
// removes it. Then voter 2 is killed: 3 and 4 are a majority of the new
// voters {2,3,4}, so the cluster still changes metadata and takes writes.
// Every acknowledged record is read back once, and no partition went
// longer without an acknowledgement than the failover bound.
func TestClusterReplaceDeadVoter(t *testing.T) {
	c := newTestCluster(t, 3)
	for id := 1; id <= 3; id++ {
		c.start(id)
	}
	ports := freePorts(t, 2)
	kafka4, meta4 := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	seeds := append(slices.Clone(c.kafka), kafka4)
	brokers := strings.Join(seeds, ",")
	run := toolRunner(t, seeds)
	// eventually retries a step a new controller may refuse at first (it
	// has not heard every broker yet).
	eventually := func(args ...string) toolResult {
		t.Helper()
		var r toolResult
		if !testenv.Eventually(30*time.Second, func() bool {
			r = tool(t, "", nil, append(args, "--brokers", brokers)...)
			return r.code == 0
		}) {
			t.Fatalf("ringlog %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r
	}
	run(0, "cluster", "status", "--wait", "--min-brokers", "3", "--timeout", "25s")
	run(0, "topic", "create", "orders", "--partitions", "6", "--replication-factor", "3")
	run(2, "cluster", "quorum", "add-voter")
	run(2, "cluster", "quorum", "remove-voter", "one")
	r := run(1, "cluster", "quorum", "remove-voter", "9")
	wantContains(t, "remove a non-voter", r.stderr, "VOTER_NOT_FOUND")
	r = run(0, "cluster", "quorum", "add-voter", "2")
	wantContains(t, "add a voter", r.stdout, "a voter already")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("orders"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(2*time.Millisecond),
		kgo.ProduceRequestTimeout(2*time.Second), kgo.RequestTimeoutOverhead(time.Second), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	load := startAckedLoad(ctx, prod)
	load.waitMore(t, 1000, "before voter 1 dies")

	// Voter 1 dies with its disk.
	c.procs[0].kill()
	if err := os.RemoveAll(c.dirs[0]); err != nil {
		t.Fatal(err)
	}
	eventually("cluster", "quorum", "remove-voter", "1")
	startServe(t, t.TempDir(), "--node-id", "4", "--kafka-addr", kafka4, "--metadata-addr", meta4,
		"--voters", c.voters, "--native-addr", "", "--http-addr", "", "--group-initial-rebalance-delay", "0s", "--shards", "1")
	run(0, "cluster", "quorum", "add-voter", "4", "--timeout", "60s")
	r = run(0, "cluster", "quorum")
	for _, want := range []string{"Voters: 3", "Observers: 0"} {
		wantContains(t, "quorum", r.stdout, want)
	}
	r = run(0, "cluster", "drain", "1", "--timeout", "90s")
	wantContains(t, "drain", r.stdout, "Every move of the plan has completed")
	eventually("cluster", "unregister", "1")
	run(0, "cluster", "elect-leaders")

	// The new voter counts: with voter 2 gone, 3 and 4 carry on.
	c.procs[1].kill()
	eventually("topic", "create", "after", "--partitions", "1", "--replication-factor", "2")
	before := load.count()
	testenv.WaitFor(t, 30*time.Second, "writes after voter 2 died", func() bool { return load.count() > before+500 })
	acked := load.halt(t, ctx, prod)
	n := readBackOnce(t, ctx, kadm.NewClient(prod), seeds, "orders", acked)
	prod.Close()
	worst, maxGap := load.gaps()
	// Two leader failovers (kill -9 of voters 1 and 2), each the session
	// timeout (1.5 s) and a client metadata refresh; slack for a loaded
	// 2-core machine and the race detector.
	const bound = 8 * time.Second
	if worst > bound {
		t.Errorf("a partition went %v without an acknowledgement; the failover bound is %v", worst, bound)
	}
	t.Logf("%d records acknowledged across the voter replacement, %d read back; longest gap between acknowledgements of one partition %v (per partition %v)",
		len(acked), n, worst.Round(time.Millisecond), maxGap)
}
