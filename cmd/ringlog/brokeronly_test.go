package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/testenv"
)

// Real processes: three voters and two broker-only nodes (--node-id not in
// --voters, --metadata-addr). Under idempotent acks=all load, `ringlog
// cluster drain 1` moves every replica off broker 1 (internal topics'
// too) onto the others; then no partition has a replica there, broker 1's
// partition directories are gone, `cluster elect-leaders` puts every
// leader on its first replica, and every acknowledged record is read back
// exactly once.
func TestClusterBrokerOnlyNodes(t *testing.T) {
	c := newTestCluster(t, 3)
	for id := 1; id <= 3; id++ {
		c.start(id)
	}
	ports := freePorts(t, 4)
	seeds := slices.Clone(c.kafka)
	for i, id := range []int{4, 5} {
		kafka, meta := "127.0.0.1:"+strconv.Itoa(ports[2*i]), "127.0.0.1:"+strconv.Itoa(ports[2*i+1])
		startServe(t, t.TempDir(), "--node-id", strconv.Itoa(id), "--kafka-addr", kafka, "--metadata-addr", meta,
			"--voters", c.voters, "--native-addr", "", "--http-addr", "", "--group-initial-rebalance-delay", "0s", "--shards", "1")
		seeds = append(seeds, kafka)
	}
	run := toolRunner(t, seeds)
	run(0, "cluster", "status", "--wait", "--min-brokers", "5", "--timeout", "25s")
	run(0, "topic", "create", "moving", "--partitions", "6", "--replication-factor", "3")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("moving"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	load := startAckedLoad(ctx, prod)
	load.waitMore(t, 1000, "before the drain")

	r := run(0, "cluster", "drain", "1", "--timeout", "90s")
	wantContains(t, "drain", r.stdout, "Every move of the plan has completed")
	run(0, "cluster", "elect-leaders")
	adm := kadm.NewClient(prod)
	var state string
	if !testenv.Eventually(30*time.Second, func() bool {
		md, err := metadataFrom(ctx, seeds[1])
		if err != nil {
			return false
		}
		state = ""
		for _, mt := range md.Topics {
			for _, p := range mt.Partitions {
				if slices.Contains(p.Replicas, 1) || p.Leader != p.Replicas[0] || len(p.ISR) != len(p.Replicas) {
					state += fmt.Sprintf(" %s-%d: replicas %v ISR %v leader %d;", *mt.Topic, p.Partition, p.Replicas, p.ISR, p.Leader)
				}
			}
		}
		return state == ""
	}) {
		t.Fatalf("after the drain and the election:%s", state)
	}
	testenv.WaitFor(t, 20*time.Second, "broker 1's partition directories removed", func() bool {
		left, _ := filepath.Glob(filepath.Join(c.dirs[0], "moving-*"))
		offsets, _ := filepath.Glob(filepath.Join(c.dirs[0], "__consumer_offsets-*"))
		return len(left) == 0 && len(offsets) == 0
	})
	load.waitMore(t, 300, "on the new leaders")
	acked := load.halt(t, ctx, prod)
	if len(acked) < 100 {
		t.Fatalf("only %d records acknowledged", len(acked))
	}
	n := readBackOnce(t, ctx, adm, seeds, "moving", acked)
	prod.Close()
	t.Logf("%d records acknowledged while broker 1 was drained, %d read back", len(acked), n)
}

// readBackOnce reads topic from its start to the end offsets it has now
// and fails the test for an acknowledged value that is not there and for
// a value read twice; it returns how many values it read.
func readBackOnce(t *testing.T, ctx context.Context, adm *kadm.Client, seeds []string, topic string, acked map[string]bool) int {
	t.Helper()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen, got := map[string]int{}, map[int32]int64{}
	for {
		done := true
		for p, end := range want {
			done = done && got[p] >= end
		}
		if done {
			break
		}
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s back: at %v of %v", topic, got, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)]++
			got[r.Partition] = r.Offset + 1
		})
	}
	for v := range acked {
		if seen[v] == 0 {
			t.Errorf("acknowledged %s lost", v)
		}
	}
	for v, n := range seen {
		if n > 1 {
			t.Errorf("%s read %d times", v, n)
		}
	}
	return len(seen)
}

// toolRunner runs `ringlog args... --brokers seeds` and fails the test
// unless it exits with code.
func toolRunner(t *testing.T, seeds []string) func(code int, args ...string) toolResult {
	brokers := strings.Join(seeds, ",")
	return func(code int, args ...string) toolResult {
		t.Helper()
		r := tool(t, "", nil, append(args, "--brokers", brokers)...)
		if r.code != code {
			t.Fatalf("ringlog %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
		}
		return r
	}
}

// ackedLoad produces r0000000, r0000001, ... through a producer (to its
// default topic) until halted, and keeps the values acknowledged and,
// per partition, the longest time between two acknowledgements.
type ackedLoad struct {
	mu     sync.Mutex
	acked  map[string]bool
	last   map[int32]time.Time
	maxGap map[int32]time.Duration
	stop   context.CancelFunc
	done   sync.WaitGroup
}

func startAckedLoad(ctx context.Context, prod *kgo.Client) *ackedLoad {
	l := &ackedLoad{acked: map[string]bool{}, last: map[int32]time.Time{}, maxGap: map[int32]time.Duration{}}
	loadCtx, stop := context.WithCancel(ctx)
	l.stop = stop
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		for i := 0; loadCtx.Err() == nil; i++ {
			prod.Produce(loadCtx, &kgo.Record{Value: []byte(fmt.Sprintf("r%07d", i))}, func(r *kgo.Record, err error) {
				if err != nil {
					return
				}
				now := time.Now()
				l.mu.Lock()
				defer l.mu.Unlock()
				l.acked[string(r.Value)] = true
				if last, ok := l.last[r.Partition]; ok && now.Sub(last) > l.maxGap[r.Partition] {
					l.maxGap[r.Partition] = now.Sub(last)
				}
				l.last[r.Partition] = now
			})
			if i%100 == 99 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	return l
}

// count is how many records were acknowledged so far.
func (l *ackedLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitMore waits until n more records are acknowledged than now.
func (l *ackedLoad) waitMore(t *testing.T, n int, when string) {
	t.Helper()
	waitMoreAcked(t, n, when, l.count)
}

// halt stops producing, flushes what is in flight, and returns the
// values acknowledged.
func (l *ackedLoad) halt(t *testing.T, ctx context.Context, prod *kgo.Client) map[string]bool {
	l.stop()
	l.done.Wait()
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := prod.Flush(fctx); err != nil {
		t.Logf("flush: %v", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.acked)
}

// gaps returns the longest time between two acknowledgements of one
// partition, and each partition's.
func (l *ackedLoad) gaps() (time.Duration, map[int32]time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var worst time.Duration
	for _, g := range l.maxGap {
		worst = max(worst, g)
	}
	return worst, maps.Clone(l.maxGap)
}
