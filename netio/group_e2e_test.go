package netio_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/testenv"
)

func createTopic(t *testing.T, b *testBroker, name string, partitions int32) {
	t.Helper()
	adm := kadm.NewClient(b.client())
	resp, err := adm.CreateTopic(testCtx(t, 10*time.Second), partitions, 1, nil, name)
	if err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", name, err, resp.Err)
	}
}

func produceN(t *testing.T, b *testBroker, topic string, from, n int) {
	t.Helper()
	cl := b.client(kgo.DefaultProduceTopic(topic))
	ctx := testCtx(t, 20*time.Second)
	for i := from; i < from+n; i++ {
		cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("v%d", i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestGroupConsumeEveryRecordOnce(t *testing.T) {
	for _, bal := range []struct {
		name string
		b    kgo.GroupBalancer
	}{{"cooperative-sticky", kgo.CooperativeStickyBalancer()}, {"range", kgo.RangeBalancer()}} {
		t.Run(bal.name, func(t *testing.T) {
			b := startBroker(t)
			createTopic(t, b, "g-topic", 6)
			const n = 600
			produceN(t, b, "g-topic", 0, n)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var mu sync.Mutex
			seen := map[string]int{}
			total := 0
			var wg sync.WaitGroup
			for i := 0; i < 3; i++ {
				cl := b.client(kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("g-topic"), kgo.Balancers(bal.b),
					kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(200*time.Millisecond),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						fs := cl.PollFetches(ctx)
						fs.EachRecord(func(r *kgo.Record) {
							mu.Lock()
							seen[string(r.Value)]++
							total++
							mu.Unlock()
						})
						if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
							t.Errorf("commit: %v", err)
						}
						mu.Lock()
						done := total >= n
						mu.Unlock()
						if done {
							cancel() // wake the members parked in PollFetches
							return
						}
					}
				}()
			}
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != n {
				t.Fatalf("consumed %d distinct records of %d", len(seen), n)
			}
			for v, c := range seen {
				if c != 1 {
					t.Fatalf("%s consumed %d times", v, c)
				}
			}
		})
	}
}

// cuttableDialer lets a test cut a client off the network, as if its
// process died: open connections are closed and new dials fail.
type cuttableDialer struct {
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func (d *cuttableDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, errors.New("network cut by the test")
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *cuttableDialer) Cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	for _, c := range d.conns {
		c.Close()
	}
}

// consumeUntil polls cl until want distinct values were seen or ctx ends.
func consumeUntil(ctx context.Context, t *testing.T, cl *kgo.Client, seen map[string]int, want int) {
	t.Helper()
	for len(seen) < want && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		cl.CommitUncommittedOffsets(ctx)
	}
}

func TestGroupEvictsMemberThatStopsHeartbeating(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b, "evict", 4)
	opts := []kgo.Opt{kgo.ConsumerGroup("evict-g"), kgo.ConsumeTopics("evict"), kgo.SessionTimeout(1500 * time.Millisecond),
		kgo.HeartbeatInterval(200 * time.Millisecond), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit()}
	var d cuttableDialer
	doomed := b.client(append(opts, kgo.Dialer(d.DialContext))...)
	survivor := b.client(opts...)
	ctx := testCtx(t, 30*time.Second)
	waitMembers(ctx, t, b, "evict-g", 2)
	d.Cut() // no LeaveGroup: the broker must notice by the session timeout
	_ = doomed
	start := time.Now()
	waitMembers(ctx, t, b, "evict-g", 1)
	t.Logf("dead member evicted after %v", time.Since(start).Round(time.Millisecond))
	produceN(t, b, "evict", 0, 200)
	seen := map[string]int{}
	consumeUntil(ctx, t, survivor, seen, 200)
	if len(seen) != 200 {
		t.Fatalf("the survivor consumed %d of 200: the dead member's partitions did not move", len(seen))
	}
}

// waitMembers waits until the group is Stable with n members.
func waitMembers(ctx context.Context, t *testing.T, b *testBroker, group string, n int) engine.GroupDescription {
	t.Helper()
	for {
		g, _ := b.Eng.Coordinator().Group(group, false)
		if g != nil {
			if d := g.Describe(); d.State == engine.StateStable && len(d.Members) == n {
				return d
			}
		}
		select {
		case <-ctx.Done():
			var d engine.GroupDescription
			if g != nil {
				d = g.Describe()
			}
			t.Fatalf("group %s never became stable with %d members: %+v", group, n, d)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestGroupResumesFromCommittedOffsetsAfterRestart(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b, "resume", 3)
	produceN(t, b, "resume", 0, 300)
	ctx := testCtx(t, 30*time.Second)
	opts := []kgo.Opt{kgo.ConsumerGroup("resume-g"), kgo.ConsumeTopics("resume"), kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit()}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for len(seen) < 150 && ctx.Err() == nil {
		fs := cl.PollRecords(ctx, 50)
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	committed := len(seen)

	b.restart()
	cl2, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	consumeUntil(ctx, t, cl2, seen, 300)
	if len(seen) != 300 {
		t.Fatalf("consumed %d of 300 after restart", len(seen))
	}
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("%s consumed %d times: the restart did not resume from the %d committed offsets", v, n, committed)
		}
	}
}

func TestGroupStaticMemberRestartWithoutRebalance(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b, "static", 4)
	ctx := testCtx(t, 30*time.Second)
	opts := func(inst string) []kgo.Opt {
		return []kgo.Opt{kgo.SeedBrokers(b.Addr), kgo.ConsumerGroup("static-g"), kgo.ConsumeTopics("static"), kgo.InstanceID(inst),
			kgo.SessionTimeout(5 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)}
	}
	a, err := kgo.NewClient(opts("inst-a")...)
	if err != nil {
		t.Fatal(err)
	}
	other := b.client(opts("inst-b")[1:]...)
	_ = other
	go a.PollFetches(ctx)
	go other.PollFetches(ctx)
	before := waitMembers(ctx, t, b, "static-g", 2)
	a.Close() // a static member does not leave the group on close
	a2, err := kgo.NewClient(opts("inst-a")...)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	go a2.PollFetches(ctx)
	testenv.Holds(t, 2*time.Second, fmt.Sprintf("generation %d through the static member's restart (no rebalance)", before.Generation), func() bool {
		g, _ := b.Eng.Coordinator().Group("static-g", false)
		return g.Describe().Generation == before.Generation
	})
	d := waitMembers(ctx, t, b, "static-g", 2)
	var sawNewA bool
	for _, m := range d.Members {
		if m.InstanceID != nil && *m.InstanceID == "inst-a" && m.MemberID != memberIDOf(before, "inst-a") {
			sawNewA = true
		}
	}
	if !sawNewA {
		t.Fatalf("the restarted static member was not readmitted: %+v", d)
	}
}

func memberIDOf(d engine.GroupDescription, inst string) string {
	for _, m := range d.Members {
		if m.InstanceID != nil && *m.InstanceID == inst {
			return m.MemberID
		}
	}
	return ""
}

func TestGroupJoinLeaveStormSettles(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b, "storm", 6)
	produceN(t, b, "storm", 0, 300)
	ctx := testCtx(t, 40*time.Second)
	opts := []kgo.Opt{kgo.SeedBrokers(b.Addr), kgo.ConsumerGroup("storm-g"), kgo.ConsumeTopics("storm"),
		kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit()}
	// Eight members come and go quickly, without consuming anything.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 2; j++ {
				cl, err := kgo.NewClient(opts...)
				if err != nil {
					t.Error(err)
					return
				}
				pctx, cancel := context.WithTimeout(ctx, time.Duration(100+50*i)*time.Millisecond)
				cl.PollRecords(pctx, 1)
				cancel()
				cl.Close() // LeaveGroup
			}
		}(i)
	}
	wg.Wait()
	// Two stay and must consume everything exactly once between them.
	c1, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan struct{})
	for _, cl := range []*kgo.Client{c1, c2} {
		go func(cl *kgo.Client) {
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
				n := len(seen)
				mu.Unlock()
				cl.CommitUncommittedOffsets(ctx)
				if n >= 300 {
					select {
					case <-done:
					default:
						close(done)
					}
					return
				}
			}
		}(cl)
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	waitMembers(ctx, t, b, "storm-g", 2)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 300 {
		t.Fatalf("consumed %d of 300 after the storm", len(seen))
	}
}

func TestGroupLagMetrics(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b, "lagged", 2)
	produceN(t, b, "lagged", 0, 100)
	ctx := testCtx(t, 10*time.Second)
	adm := kadm.NewClient(b.client())
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "lagged", Partition: 0, At: 10, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: "lagged", Partition: 1, At: 3, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "lag-g", offs); err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, "lagged")
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := b.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "ringlog_group_lag" && mf.GetName() != "ringlog_group_committed_offset" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["group"] == "lag-g" {
				got[mf.GetName()+"/"+labels["partition"]] = m.GetGauge().GetValue()
			}
		}
	}
	for p, committed := range map[int32]int64{0: 10, 1: 3} {
		end, _ := ends.Lookup("lagged", p)
		key := fmt.Sprint(p)
		if got["ringlog_group_committed_offset/"+key] != float64(committed) || got["ringlog_group_lag/"+key] != float64(end.Offset-committed) {
			t.Fatalf("partition %d: metrics %v, want committed %d lag %d", p, got, committed, end.Offset-committed)
		}
	}
}
