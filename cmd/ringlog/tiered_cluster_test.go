package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/s3test"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/wal/batch"
)

// Tiered storage on three brokers: the partition leader is killed (-9)
// while it copies segments, twice; the new leader goes on from the
// manifest in the metadata quorum. Every acknowledged record is read
// back from offset 0, offsets dense; the store ends up holding every
// offset once (no segment twice, the interrupted copies' objects
// deleted), with no gap; and every replica, followers too, deleted its
// local copy of what was copied.
func TestTieredClusterLeaderKill(t *testing.T) {
	s3 := s3test.Start(t)
	// A slow store: copies fall behind and take a while, so the kills
	// land in them.
	s3.SetPutDelay(150 * time.Millisecond)
	ctx := deadlineCtx(t, 400*time.Second)
	c, adm, view := startTieredCluster(t, ctx, s3, "2")
	prod := procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...), kgo.DefaultProduceTopic("tiered"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(time.Millisecond))
	load := startTieredLoad(ctx, prod, "c", 30*time.Millisecond)
	interrupted := 0 // new leaders that cleaned a copy the kill interrupted
	for cycle := range 2 {
		leader := view.Parts[0].Leader
		lp := c.procs[leader-1]
		testenv.WaitFor(t, 60*time.Second, fmt.Sprintf("broker %d (the leader) to copy segments", leader), func() bool {
			return strings.Count(lp.stderr.String(), "tiered storage: copied segment") >= 2+cycle
		})
		// Killed in the middle of a copy: only the leader uploads, and
		// each PUT takes 150 ms (a kill between two copies, as right
		// after the count above, leaves nothing to clean).
		testenv.WaitFor(t, 60*time.Second, fmt.Sprintf("broker %d (the leader) to be uploading", leader), func() bool {
			return s3.PutsInFlight() > 0
		})
		lp.kill()
		t.Logf("cycle %d: killed broker %d, the leader", cycle, leader)
		others := []int32{}
		for _, id := range []int32{1, 2, 3} {
			if id != leader {
				others = append(others, id)
			}
		}
		moved := c.waitLeadersMoved(ctx, "tiered", view, leader, others, 60*time.Second)
		np := c.procs[moved.Parts[0].Leader-1]
		before := strings.Count(np.stderr.String(), "tiered storage: copied segment")
		testenv.WaitFor(t, 60*time.Second, "the new leader's copies", func() bool {
			return strings.Count(np.stderr.String(), "tiered storage: copied segment") > before
		})
		if strings.Contains(np.stderr.String(), "removed an unfinished segment") {
			interrupted++
		}
		c.startReplicated(int(leader))
		view = c.waitFullISR(ctx, "tiered", 1, 3, 90*time.Second)
	}
	waitMoreAcked(t, 300, "after the last restart", load.count)
	s3.SetPutDelay(0)
	acked := load.halt(t, ctx, prod)
	// The copies catch up with everything produced.
	ends, err := adm.ListEndOffsets(ctx, "tiered")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("tiered", 0)
	waitCopiedUpTo(t, ctx, adm, prod, load, end.Offset)
	load.mu.Lock()
	n := len(acked)
	load.mu.Unlock()
	t.Logf("%d records acknowledged; %d of 2 leader kills left a copy for the new leader to clean", n, interrupted)
	if n < 1000 {
		t.Fatalf("only %d records acknowledged", n)
	}
	if interrupted == 0 {
		t.Fatal("no leader kill interrupted a copy: the test did not test that")
	}

	// Every record from offset 0, most of them out of the store.
	testenv.WaitFor(t, 60*time.Second, "the local log start to pass 0", func() bool {
		lo, err := localStart(ctx, adm)
		return err == nil && lo > 0
	})
	cons := procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...), kgo.ConsumeTopics("tiered"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxPartitionBytes(64<<10))
	readDense(t, ctx, cons, func(_ int64, seen map[string]bool) bool { return len(seen) >= n && allSeen(acked, seen) })

	// The store holds each offset once from 0 on, with no gap: the
	// kills' orphans are gone.
	var why string
	if !testenv.Eventually(30*time.Second, func() bool {
		why = storeHoldsEachOffsetOnce(t, s3)
		return why == ""
	}) {
		t.Fatalf("the store: %s", why)
	}
	// Followers delete what was copied too.
	for i, dir := range c.dirs {
		if _, err := os.Stat(filepath.Join(dir, "tiered-0", "00000000000000000000.log")); err == nil {
			t.Errorf("broker %d still has its first local segment", i+1)
		}
	}
	c.stopAll(view.Controller)
}

// storeHoldsEachOffsetOnce checks the log objects in s3 (one partition's)
// hold every offset from 0 to their end exactly once, each with its
// index object; it returns what is wrong, "" when nothing is.
func storeHoldsEachOffsetOnce(t *testing.T, s3 *s3test.Server) string {
	type span struct {
		key        string
		base, next int64
	}
	keys := s3.Keys(t)
	have := map[string]bool{}
	for _, k := range keys {
		have[k] = true
	}
	var spans []span
	for _, k := range keys {
		if !strings.HasSuffix(k, ".log") {
			continue
		}
		if !have[strings.TrimSuffix(k, ".log")+".rix"] {
			return fmt.Sprintf("%s has no index object", k)
		}
		bs, err := batch.Split(s3.Object(t, k), nil)
		if err != nil || len(bs) == 0 {
			return fmt.Sprintf("%s: %d batches: %v", k, len(bs), err)
		}
		first, _ := batch.ParseHeader(bs[0])
		last, _ := batch.ParseHeader(bs[len(bs)-1])
		spans = append(spans, span{k, first.BaseOffset, last.LastOffset() + 1})
	}
	if len(spans) == 0 || 2*len(spans) != len(keys) {
		return fmt.Sprintf("%d log objects among %d keys", len(spans), len(keys))
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].base < spans[j].base })
	at := int64(0)
	for _, s := range spans {
		if s.base != at {
			return fmt.Sprintf("%s holds [%d, %d), after objects ending at %d", s.key, s.base, s.next, at)
		}
		at = s.next
	}
	return ""
}

// A follower that was down while the leader's local retention moved
// past its log end (the data below is in the store) starts its log at
// the leader's local log start and rejoins the ISR; it never fetches
// remote data.
func TestTieredClusterFollowerBehind(t *testing.T) {
	s3 := s3test.Start(t)
	ctx := deadlineCtx(t, 240*time.Second)
	c, adm, view := startTieredCluster(t, ctx, s3, "1")
	leader := view.Parts[0].Leader
	// The follower to stop: not the controller, if it can be helped.
	var behind int32
	for _, id := range []int32{3, 2, 1} {
		if id != leader && (behind == 0 || id != view.Controller) {
			behind = id
		}
	}
	var seeds []string
	for i, a := range c.kafka {
		if int32(i+1) != behind {
			seeds = append(seeds, a)
		}
	}
	prod := procClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("tiered"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	pad := strings.Repeat("f", 2000)
	produce := func(prefix string, n int) {
		for i := range n {
			if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%s%d-%s", prefix, i, pad))}).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
	}
	produce("a", 20)
	c.procs[behind-1].kill()
	produce("b", 300)
	testenv.WaitFor(t, 60*time.Second, "the leader's local log start to pass the stopped follower's end", func() bool {
		lo, err := localStart(ctx, adm)
		return err == nil && lo > 100
	})
	c.startReplicated(int(behind))
	c.waitFullISR(ctx, "tiered", 1, 3, 60*time.Second)
	if !strings.Contains(c.procs[behind-1].stderr.String(), "reset the log to the leader's log start") {
		t.Fatalf("broker %d rejoined without starting its log at the leader's local start", behind)
	}
	// Everything is still there from offset 0 (the store, then the
	// leader's local log).
	cons := procClient(t, seeds[0], kgo.SeedBrokers(c.kafka...), kgo.ConsumeTopics("tiered"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	readDense(t, ctx, cons, func(next int64, _ map[string]bool) bool { return next >= 320 })
	c.stopAll(view.Controller)
}

// startTieredCluster starts three brokers with tiered storage on s3 and
// creates topic "tiered" (one partition, three replicas, 32 KiB
// segments, 64 KiB local retention, minISR), and waits for its ISR.
func startTieredCluster(t *testing.T, ctx context.Context, s3 *s3test.Server, minISR string) (*testCluster, *kadm.Client, topicView) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	c := newTestCluster(t, 3)
	c.extraArgs = tieredFlags(s3)
	for id := 1; id <= 3; id++ {
		c.startReplicated(id)
	}
	c.converge(ctx, 3)
	adm := kadm.NewClient(procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...)))
	cr, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{
		"remote.storage.enable": cfgStr("true"), "segment.bytes": cfgStr("32768"), "local.retention.bytes": cfgStr("65536"),
		"min.insync.replicas": cfgStr(minISR),
	}, "tiered")
	if err == nil {
		err = cr.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	return c, adm, c.waitFullISR(ctx, "tiered", 1, 3, 60*time.Second)
}
