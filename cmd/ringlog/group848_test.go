package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/cluster"
	"github.com/ringlog/ringlog/internal/testenv"
)

// consumerGroupView is what ConsumerGroupDescribe says of a group, in a
// comparable form: member id -> "epoch:partitions".
func consumerGroupView(ctx context.Context, cl *kgo.Client, group string) (state string, members map[string]string, err error) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", nil, err
	}
	g := resp.Groups[0]
	if g.ErrorCode != 0 {
		return "", nil, fmt.Errorf("describe %s: error %d", group, g.ErrorCode)
	}
	members = map[string]string{}
	for _, m := range g.Members {
		var ps []int32
		for _, t := range m.Assignment.TopicPartitions {
			ps = append(ps, t.Partitions...)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		members[m.MemberID] = fmt.Sprintf("%d:%v", m.MemberEpoch, ps)
	}
	return g.State, members, nil
}

// lossLog records partitions taken from group members (revoked or lost)
// once armed, as the failover tests count them.
type lossLog struct {
	armed atomic.Bool
	mu    sync.Mutex
	lost  []string
}

// hook is an OnPartitionsRevoked/OnPartitionsLost callback for member
// name that records losses of topic while armed and ctx is live.
func (l *lossLog) hook(ctx context.Context, topic, name, what string) func(context.Context, *kgo.Client, map[string][]int32) {
	return func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
		if l.armed.Load() && ctx.Err() == nil && len(ps[topic]) > 0 {
			l.mu.Lock()
			l.lost = append(l.lost, fmt.Sprintf("%s %s %v", name, what, ps))
			l.mu.Unlock()
		}
	}
}

func (l *lossLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lost) == 0 {
		return ""
	}
	return fmt.Sprint(l.lost)
}

// TestConsumerGroupSurvivesCoordinatorKill: a KIP-848 group's state
// (members, epochs, assignments) is durable in __consumer_offsets: the
// coordinator killed with -9 and restarted takes the group back as it
// was, the members keep heartbeating with their epochs, and nobody's
// partitions are revoked or lost.
func TestConsumerGroupSurvivesCoordinatorKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	flags := []string{"--group-initial-rebalance-delay", "0", "--group-consumer-heartbeat-interval", "300ms", "--group-consumer-session-timeout", "30s"}
	b := startServe(t, dir, flags...)
	if r := tool(t, "", nil, "topic", "create", "cg848", "--partitions", "4", "--brokers", b.Kafka); r.code != 0 {
		t.Fatalf("topic create: %d %s", r.code, r.stderr)
	}
	produceSpread(t, b.Kafka, "cg848", map[int32]int{0: 5, 1: 5, 2: 5, 3: 5}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var losses lossLog
	var wg sync.WaitGroup
	var clients []*kgo.Client
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("m%d", i)
		cl := procClient(t, b.Kafka, kgo.ConsumerGroup("g848"), kgo.ConsumeTopics("cg848"), kgo.ServerSideBalancer(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
			kgo.OnPartitionsRevoked(losses.hook(ctx, "cg848", name, "revoked")), kgo.OnPartitionsLost(losses.hook(ctx, "cg848", name, "lost")))
		clients = append(clients, cl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if fs := cl.PollFetches(ctx); fs.IsClientClosed() {
					return
				}
			}
		}()
	}
	admin := procClient(t, b.Kafka)
	var before map[string]string
	if !testenv.Eventually(30*time.Second, func() bool {
		state, m, err := consumerGroupView(ctx, admin, "g848")
		before = m
		if err != nil || state != "Stable" || len(m) != 2 {
			return false
		}
		for _, v := range m {
			if len(v) < 6 { // "E:[a b]"
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the group did not settle: %v", before)
	}

	losses.armed.Store(true)
	b.kill()
	b = restartOn(t, dir, b.Kafka, flags...)
	admin = procClient(t, b.Kafka)
	var after map[string]string
	var state string
	// The restarted coordinator has the group as it was, and the members
	// heartbeat into it with the epochs they had.
	testenv.Eventually(30*time.Second, func() bool {
		var err error
		state, after, err = consumerGroupView(ctx, admin, "g848")
		return err == nil && state == "Stable" && fmt.Sprint(after) == fmt.Sprint(before)
	})
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after kill -9 and restart the group is %s %v, before it was %v", state, after, before)
	}
	// A few more heartbeats, none of which may take a partition away.
	if testenv.Eventually(time.Second, func() bool { return losses.String() != "" }) {
		t.Errorf("partitions taken from members across the coordinator's restart: %s", losses.String())
	}

	// The restored group goes on rebalancing: one member leaves, the
	// other gets every partition.
	clients[0].Close()
	testenv.Eventually(30*time.Second, func() bool {
		state, after, _ = consumerGroupView(ctx, admin, "g848")
		for _, v := range after {
			return len(after) == 1 && state == "Stable" && len(v) > 8
		}
		return false
	})
	if len(after) != 1 || state != "Stable" {
		t.Fatalf("after a member left: %s %v", state, after)
	}
	cancel()
	clients[1].Close()
	wg.Wait()
}

// TestReplicatedConsumerGroupFailover: in a cluster, killing a KIP-848
// group's coordinator with -9 hands the group to the new leader of its
// __consumer_offsets partition with its state rebuilt from the log: the
// same members at the same epochs, the same assignment, and no member
// loses or gives up a partition. One of the two members is a classic
// client (the group is migrating): it is loaded back as one.
func TestReplicatedConsumerGroupFailover(t *testing.T) {
	ringlogBinary(t)
	c := newTestCluster(t, 3)
	// A member whose client takes long to find the new coordinator
	// (franz-go retries the dead one's address for a while; under -race
	// and a loaded machine it once took past the 45 s default) must not
	// expire meanwhile: this test is about the state the new coordinator
	// rebuilds, not about session expiry.
	c.extraArgs = []string{"--group-consumer-session-timeout", "3m"}
	for id := 1; id <= 3; id++ {
		c.startReplicated(id)
	}
	ctx := deadlineCtx(t, 3*time.Minute)
	c.converge(ctx, 3)
	admCl := procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...))
	adm := kadm.NewClient(admCl)
	const topic, group = "cg848r", "g848r"
	if res, err := adm.CreateTopic(ctx, 4, 3, nil, topic); err != nil || res.Err != nil {
		t.Fatalf("create %s: %v %v", topic, err, res.Err)
	}
	c.waitFullISR(ctx, topic, 4, 3, 30*time.Second)
	c.waitFullISR(ctx, "__consumer_offsets", int(cluster.DefaultOffsetsPartitions), 3, 30*time.Second)

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var losses lossLog
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("m%d", i)
		// m0 speaks the consumer protocol, m1 the classic one (a group
		// migrating between them): both must come back as they were.
		// A classic franz-go member drops its partitions itself when a
		// heartbeat cannot reach the dead coordinator (it retries only
		// the consumer protocol's) and gets them back from the new
		// one: its losses are the client's, and not counted.
		opts := []kgo.Opt{kgo.SeedBrokers(c.kafka...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.SessionTimeout(2 * time.Minute),
			kgo.FetchMaxWait(100 * time.Millisecond)}
		if i == 0 {
			opts = append(opts, kgo.ServerSideBalancer(),
				kgo.OnPartitionsRevoked(losses.hook(cctx, topic, name, "revoked")), kgo.OnPartitionsLost(losses.hook(cctx, topic, name, "lost")))
		} else {
			time.Sleep(time.Second) // after m0 made it a consumer group
			opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
		}
		cl := procClient(t, c.kafka[0], opts...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				if fs := cl.PollFetches(cctx); fs.IsClientClosed() {
					return
				}
			}
		}()
		defer cl.Close()
	}
	var before map[string]string
	waitFor(t, ctx, "the group to settle with two members", func() bool {
		state, m, err := consumerGroupView(ctx, admCl, group)
		before = m
		if err != nil || state != "Stable" || len(m) != 2 {
			return false
		}
		for _, v := range m {
			if len(v) < 6 {
				return false
			}
		}
		return true
	})
	coord := adm.FindGroupCoordinators(ctx, group)
	if coord[group].Err != nil {
		t.Fatalf("find %s's coordinator: %+v", group, coord)
	}
	victim := coord[group].NodeID
	losses.armed.Store(true)
	c.procs[victim-1].kill()
	killedAt := time.Now()
	var live []string
	for _, id := range c.running() {
		live = append(live, c.kafka[id-1])
	}
	var after map[string]string
	var state string
	var err error
	if !testenv.Poll(time.Minute, 200*time.Millisecond, func() bool {
		// A fresh client each try: franz-go keeps a group's coordinator
		// cached while dialing it fails.
		cl, cerr := kgo.NewClient(kgo.SeedBrokers(live...), kgo.RetryTimeout(2*time.Second))
		if cerr != nil {
			t.Fatal(cerr)
		}
		fctx, fcancel := context.WithTimeout(ctx, 3*time.Second)
		state, after, err = consumerGroupView(fctx, cl, group)
		fcancel()
		cl.Close()
		return err == nil && state == "Stable" && fmt.Sprint(after) == fmt.Sprint(before)
	}) {
		t.Fatalf("a minute after killing coordinator %d the group is %s %v (%v), before it was %v", victim, state, after, err, before)
	}
	t.Logf("coordinator %d killed: the group was served again, as it was, after %v", victim, time.Since(killedAt).Round(time.Millisecond))
	time.Sleep(6 * time.Second) // a heartbeat of each member against the new coordinator
	if _, now, err := consumerGroupView(ctx, procClient(t, live[0], kgo.SeedBrokers(live...)), group); err != nil || fmt.Sprint(now) != fmt.Sprint(before) {
		t.Fatalf("after the members' heartbeats: %v %v, before %v", now, err, before)
	}
	if l := losses.String(); l != "" {
		t.Errorf("partitions taken from members across the failover: %s", l)
	}
	cancel()
	wg.Wait()
	c.startReplicated(int(victim))
}
