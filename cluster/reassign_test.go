package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/simcluster"
	"github.com/ringlog/ringlog/internal/testenv"
)

// Three voters and two broker-only nodes: under idempotent acks=all load,
// every partition of an RF=3 topic moves off broker 1
// (AlterPartitionReassignments, as kadm and kafka-reassign-partitions.sh
// send it) onto the broker-only nodes: the reassignments list empties,
// replicas and ISR are the new sets, broker 1's partition directories
// are gone, a preferred election puts each leader on its first replica,
// and every acknowledged record is read back exactly once.
func TestReassignOffABroker(t *testing.T) {
	c := startWithBrokers(t, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic, parts = "moving", 4
	adm := kadm.NewClient(c.Client())
	// Every partition has a replica on broker 1, half of them lead there.
	assign := map[int32][]int32{0: {1, 2, 3}, 1: {2, 3, 1}, 2: {3, 1, 2}, 3: {1, 3, 4}}
	if err := createAssigned(ctx, c.Client(), topic, assign); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "every replica in sync", func() bool { return allInSync(ctx, adm, topic, parts) })

	// Load: one idempotent producer, acks=all, until stopped.
	prod, err := c.NewClient(kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var loadDone sync.WaitGroup
	loadDone.Add(1)
	go func() {
		defer loadDone.Done()
		for i := 0; loadCtx.Err() == nil; i++ {
			v := fmt.Sprintf("r%06d", i)
			prod.Produce(loadCtx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err == nil {
					mu.Lock()
					acked[string(r.Value)] = true
					mu.Unlock()
				}
			})
			if i%50 == 49 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	waitAcked := func(n int, when string) {
		t.Helper()
		count := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(acked)
		}
		want := count() + n
		testenv.WaitFor(t, time.Minute, fmt.Sprintf("%d more records acknowledged %s", n, when), func() bool { return count() >= want })
	}
	waitAcked(500, "before the move")

	move := kadm.AlterPartitionAssignmentsReq{}
	target := map[int32][]int32{}
	for p, reps := range assign {
		var to []int32
		for _, id := range reps {
			if id != 1 {
				to = append(to, id)
			}
		}
		for _, id := range []int32{4 + p%2, 5 - p%2} {
			if !slices.Contains(to, id) {
				to = append([]int32{id}, to...) // the newcomer first: it will lead
				break
			}
		}
		target[p] = to
		move.Assign(topic, p, to)
	}
	res, err := adm.AlterPartitionAssignments(ctx, move)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Error(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "no reassignment in progress", func() bool {
		l, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}, 2: {}, 3: {}}})
		return err == nil && len(l) == 0
	})
	// (kgo answers Metadata from its cache for a few seconds.)
	var moved string
	if !testenv.Eventually(20*time.Second, func() bool {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return false
		}
		moved = ""
		for _, p := range md.Topics[topic].Partitions {
			if !slices.Equal(p.Replicas, target[p.Partition]) || slices.Contains(p.ISR, 1) || len(p.ISR) != 3 || p.Leader == 1 {
				moved += fmt.Sprintf(" partition %d: replicas %v (want %v) ISR %v leader %d;", p.Partition, p.Replicas, target[p.Partition], p.ISR, p.Leader)
			}
		}
		return moved == ""
	}) {
		t.Fatalf("after the move:%s", moved)
	}
	testenv.WaitFor(t, 20*time.Second, "broker 1's partition directories removed", func() bool {
		left, _ := filepath.Glob(filepath.Join(c.Node(1).Dir, topic+"-*"))
		return len(left) == 0
	})
	if _, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {0: {}, 1: {}, 2: {}, 3: {}}}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "every leader on its first replica", func() bool {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return false
		}
		for _, p := range md.Topics[topic].Partitions {
			if p.Leader != target[p.Partition][0] {
				return false
			}
		}
		return true
	})
	waitAcked(300, "on the new leaders")
	stopLoad()
	loadDone.Wait()
	fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
	if err := prod.Flush(fctx); err != nil {
		t.Logf("flush: %v", err)
	}
	fcancel()
	prod.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 100 {
		t.Fatalf("only %d records acknowledged", len(acked))
	}
	seen := readAll(t, c, topic)
	exactlyOnce(t, acked, seen)
	t.Logf("%d records acknowledged during the move, %d read back", len(acked), len(seen))
	if _, err := os.Stat(filepath.Join(c.Node(target[0][0]).Dir, topic+"-0")); err != nil {
		t.Errorf("broker %d has no replica of partition 0: %v", target[0][0], err)
	}
}

// startWithBrokers starts voters voters and brokerOnly broker-only nodes
// (ids after the voters), and waits until every one is registered and
// unfenced.
func startWithBrokers(t *testing.T, voters, brokerOnly int) *simcluster.Cluster {
	t.Helper()
	c := simcluster.Start(t, voters)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.WaitController(ctx); err != nil {
		t.Fatal(err)
	}
	for range brokerOnly {
		if _, err := c.AddBroker(); err != nil {
			t.Fatal(err)
		}
	}
	// (From the images: kgo answers Metadata from its cache.)
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("%d brokers live on every node", voters+brokerOnly), func() bool {
		for _, n := range c.Nodes() {
			if len(n.Broker().Cluster().Image().LiveBrokers()) != voters+brokerOnly {
				return false
			}
		}
		return true
	})
	return c
}

// createAssigned creates topic with the replica assignment given.
func createAssigned(ctx context.Context, cl *kgo.Client, topic string, assign map[int32][]int32) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
	for p := int32(0); p < int32(len(assign)); p++ {
		ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		ra.Partition, ra.Replicas = p, assign[p]
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 20000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.Topics[0].ErrorCode)
}

// allInSync reports whether topic's parts partitions each have a leader
// and every replica in sync.
func allInSync(ctx context.Context, adm *kadm.Client, topic string, parts int) bool {
	md, err := adm.Metadata(ctx, topic)
	if err != nil || len(md.Topics[topic].Partitions) != parts {
		return false
	}
	for _, p := range md.Topics[topic].Partitions {
		if p.Leader < 0 || len(p.ISR) != len(p.Replicas) {
			return false
		}
	}
	return true
}

// readAll reads topic from the start to its end offsets and counts each
// value.
func readAll(t *testing.T, c *simcluster.Cluster, topic string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := kadm.NewClient(c.Client())
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	cl, err := c.NewClient(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	got := map[int32]int64{}
	done := func() bool {
		for p, end := range want {
			if got[p] < end {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s back: read to %v of %v", topic, got, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)]++
			got[r.Partition] = r.Offset + 1
		})
	}
	return seen
}

// A move survives the crash (kill -9 of the in-process broker: its files
// as a crash leaves them) of the controller, a source and the target (a
// broker-only node) while it cannot progress (the target cut off from everyone), and
// completes once the target is reachable; nothing acknowledged is lost.
func TestReassignSurvivesCrashes(t *testing.T) {
	c := startWithBrokers(t, 3, 1) // the target, 4, is a broker-only node
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic = "crashy"
	adm := kadm.NewClient(c.Client())
	if err := createAssigned(ctx, c.Client(), topic, map[int32][]int32{0: {1, 2, 3}, 1: {2, 3, 1}}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "every replica in sync", func() bool { return allInSync(ctx, adm, topic, 2) })
	acked := map[string]bool{}
	next := 0
	produce := func(n int) {
		cl, err := c.NewClient(kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.RecordDeliveryTimeout(8*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Value: []byte(fmt.Sprintf("c%05d", next))}
			next++
		}
		for _, r := range cl.ProduceSync(pctx, recs...) {
			if r.Err == nil {
				acked[string(r.Record.Value)] = true
			}
		}
	}
	produce(200)

	// The target cannot reach anyone: the move is recorded and waits.
	for _, id := range []int32{1, 2, 3, simcluster.Client} {
		c.Net.Partition(4, id)
	}
	move := kadm.AlterPartitionAssignmentsReq{}
	move.Assign(topic, 0, []int32{4, 2, 3})
	move.Assign(topic, 1, []int32{2, 3, 4})
	testenv.WaitFor(t, 30*time.Second, "the moves recorded", func() bool {
		res, err := adm.AlterPartitionAssignments(ctx, move)
		return err == nil && res.Error() == nil
	})
	moving := func() int {
		l, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}}})
		if err != nil {
			return -1
		}
		return len(l[topic])
	}
	if n := moving(); n != 2 {
		t.Fatalf("%d partitions listed moving, want 2", n)
	}
	controller := func() int32 {
		for _, n := range c.Nodes() {
			if b := n.Broker(); b != nil && n.ID != 4 {
				if id := b.Cluster().ControllerID(); id > 0 {
					return id
				}
			}
		}
		return -1
	}
	crash := func(id int32, what string) {
		t.Helper()
		t.Logf("crashing %s, broker %d", what, id)
		if err := c.Crash(id); err != nil {
			t.Fatal(err)
		}
		produce(50)
		if err := c.Restart(id); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 60*time.Second, "the moves still listed after the crash of "+what, func() bool { return moving() == 2 })
	}
	first := controller()
	crash(first, "the controller")
	if first != 1 {
		crash(1, "a source")
	} else {
		crash(3, "a source")
	}
	crash(4, "the target")
	produce(100)
	c.Net.Heal()
	testenv.WaitFor(t, 90*time.Second, "the moves completed", func() bool { return moving() == 0 })
	var state string
	if !testenv.Eventually(30*time.Second, func() bool {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return false
		}
		state = ""
		for _, p := range md.Topics[topic].Partitions {
			want := []int32{4, 2, 3}
			if p.Partition == 1 {
				want = []int32{2, 3, 4}
			}
			if !slices.Equal(p.Replicas, want) || len(p.ISR) != 3 {
				state += fmt.Sprintf(" partition %d: replicas %v ISR %v (want %v);", p.Partition, p.Replicas, p.ISR, want)
			}
		}
		return state == ""
	}) {
		t.Fatalf("after the moves:%s", state)
	}
	// A source whose first image after its restart came only once the
	// move was over never saw itself drop the replica: it keeps the
	// directory aside (*-stray), as designed (under load, its catch-up
	// can be that late). Any other is removed.
	testenv.WaitFor(t, 20*time.Second, "broker 1's partition directories removed", func() bool {
		left, _ := filepath.Glob(filepath.Join(c.Node(1).Dir, topic+"-*"))
		left = slices.DeleteFunc(left, func(d string) bool { return strings.HasSuffix(d, "-stray") })
		return len(left) == 0
	})
	produce(50)
	seen := readAll(t, c, topic)
	exactlyOnce(t, acked, seen)
	t.Logf("%d acknowledged, %d read back", len(acked), len(seen))
}

// exactlyOnce fails t for an acknowledged value not read back and for a
// value read more than once.
func exactlyOnce(t *testing.T, acked map[string]bool, seen map[string]int) {
	t.Helper()
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
}
