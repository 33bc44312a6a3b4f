package main

// Cluster mode (preview: metadata quorum, RF=1) with real processes on
// loopback: three brokers agree on topics through Raft, each serves its
// own partitions, clients find them through any broker.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/cluster"
	"github.com/ringlog/ringlog/internal/admintest"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/quorum"
)

// freePorts returns n distinct free 127.0.0.1 ports for brokers this test
// starts (which bind them themselves, later). They come from below the
// kernel's ephemeral range (ip_local_port_range, 32768 up by default),
// which every listener on port 0 and every outgoing connection draws
// from: a port handed out here cannot be taken by another test's proxy,
// broker or client between the check and the broker's bind, as a port
// picked by listening on port 0 could (the flake of issue 38). Within
// this test binary a counter keeps them distinct; the start is random so
// that two binaries (packages, -count) rarely meet.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var out []int
	for len(out) < n {
		p := int(nextFixedPort.Add(1))
		if p >= fixedPortEnd {
			nextFixedPort.Store(fixedPortStart)
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // taken: try the next
		}
		ln.Close()
		out = append(out, p)
	}
	return out
}

// consecutivePorts returns the first of n consecutive free ports, all of
// them taken from freePorts' counter, for a command that derives its
// other ports from the first (make run: native on +1, HTTP on +2); the
// next freePorts call cannot hand one of them to another test.
func consecutivePorts(t testing.TB, n int) int {
	t.Helper()
	for {
		last := int(nextFixedPort.Add(int64(n)))
		if last >= fixedPortEnd {
			nextFixedPort.Store(fixedPortStart)
			continue
		}
		first, free := last-n+1, true
		for p := first; p <= last && free; p++ {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				free = false
				continue
			}
			ln.Close()
		}
		if free {
			return first
		}
	}
}

// The fixed ports freePorts hands out: [fixedPortStart, fixedPortEnd),
// below the ephemeral range.
const fixedPortStart, fixedPortEnd = 20000, 32000

var nextFixedPort = func() *atomic.Int64 {
	var v atomic.Int64
	v.Store(fixedPortStart + rand.Int64N(fixedPortEnd-fixedPortStart-2000))
	return &v
}()

// testCluster is n brokers on fixed loopback ports, every one a voter
// but the spares of newTestClusterSpares.
type testCluster struct {
	t       testing.TB
	voters  string
	nvoters int // the first nvoters brokers are the voters
	dirs    []string
	kafka   []string // by node id - 1
	ctrl    []string
	procs   []*serveProc
	// links, when set (newLinkNet), proxies every link between the
	// brokers started with replicatedArgs.
	links *linkNet
	// clientOpts are how converge's clients reach the kafka listeners
	// (TLS, for a cluster whose inter-broker listener is SSL).
	clientOpts []kgo.Opt
	// extraArgs are more serve flags for startReplicated.
	extraArgs []string
}

func newTestCluster(t testing.TB, n int) *testCluster { return newTestClusterSpares(t, n, 0) }

// newTestClusterSpares is n voters and spares broker-only nodes (ids
// n+1...; their ctrl address is their --metadata-addr).
func newTestClusterSpares(t testing.TB, n, spares int) *testCluster {
	all := n + spares
	ports := freePorts(t, 2*all)
	c := &testCluster{t: t, nvoters: n}
	var vs []string
	for i := 0; i < all; i++ {
		c.kafka = append(c.kafka, "127.0.0.1:"+strconv.Itoa(ports[i]))
		c.ctrl = append(c.ctrl, "127.0.0.1:"+strconv.Itoa(ports[all+i]))
		c.dirs = append(c.dirs, t.TempDir())
		if i < n {
			vs = append(vs, fmt.Sprintf("%d@%s", i+1, c.ctrl[i]))
		}
	}
	c.voters = strings.Join(vs, ",")
	c.procs = make([]*serveProc, all)
	return c
}

// args are node id's serve flags (its listeners, no native or HTTP ones).
func (c *testCluster) args(id int, voters string) []string {
	meta := "--controller-addr"
	if c.nvoters > 0 && id > c.nvoters {
		meta = "--metadata-addr"
	}
	return []string{"--node-id", strconv.Itoa(id), "--kafka-addr", c.kafka[id-1], meta, c.ctrl[id-1],
		"--voters", voters, "--native-addr", "", "--http-addr", "", "--group-initial-rebalance-delay", "0s", "--shards", "1"}
}

func (c *testCluster) start(id int) *serveProc {
	c.procs[id-1] = startServe(c.t, c.dirs[id-1], c.args(id, c.voters)...)
	return c.procs[id-1]
}

// metadataFrom asks broker addr for the whole cluster's metadata.
func metadataFrom(ctx context.Context, addr string, opts ...kgo.Opt) (*kmsg.MetadataResponse, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	// A seed broker's id is its negative index: ask that very broker.
	resp, err := req.RequestWith(ctx, cl.Broker(-2147483648))
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// view is what a Metadata response says, in comparable form.
type view struct {
	Controller int32
	ClusterID  string
	Brokers    []string
	Leaders    map[string][]int32
}

func viewOf(m *kmsg.MetadataResponse) view {
	v := view{Controller: m.ControllerID, Leaders: map[string][]int32{}}
	if m.ClusterID != nil {
		v.ClusterID = *m.ClusterID
	}
	for _, b := range m.Brokers {
		v.Brokers = append(v.Brokers, fmt.Sprintf("%d@%s:%d", b.NodeID, b.Host, b.Port))
	}
	sort.Strings(v.Brokers)
	for _, t := range m.Topics {
		ls := make([]int32, len(t.Partitions))
		for _, p := range t.Partitions {
			ls[p.Partition] = p.Leader
		}
		v.Leaders[*t.Topic] = ls
	}
	return v
}

// converge waits until every running broker answers Metadata with the
// same view, listing want brokers and a controller, and returns it.
func (c *testCluster) converge(ctx context.Context, want int) view {
	c.t.Helper()
	var last []view
	var lastErr error
	var got view
	if eventually(ctx, func() bool {
		last, lastErr = nil, nil
		for i, p := range c.procs {
			if p == nil || p.exited() {
				continue
			}
			m, err := metadataFrom(ctx, c.kafka[i], c.clientOpts...)
			if err != nil {
				lastErr = err
				break
			}
			last = append(last, viewOf(m))
		}
		if lastErr == nil && len(last) > 0 && last[0].Controller >= 0 && len(last[0].Brokers) == want && last[0].ClusterID != "" {
			same := true
			for _, v := range last[1:] {
				same = same && reflect.DeepEqual(v, last[0])
			}
			if same {
				got = last[0]
				return true
			}
		}
		return false
	}) {
		return got
	}
	c.t.Fatalf("brokers did not converge on one metadata view with %d brokers: %+v (last error %v)", want, last, lastErr)
	return view{}
}

// produceAll writes n unique values to topic with an idempotent acks=all
// producer seeded with every broker, and returns them.
func produceAll(t *testing.T, ctx context.Context, seeds []string, topic, prefix string, n int, opts ...kgo.Opt) map[string]bool {
	t.Helper()
	cl := procClient(t, seeds[0], append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}, opts...)...)
	sent := map[string]bool{}
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		v := fmt.Sprintf("%s-%d", prefix, i)
		sent[v] = true
		recs = append(recs, &kgo.Record{Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
	return sent
}

// consumeAll reads topic from the start through a consumer group seeded
// with every broker until it has want records, failing on a duplicate or
// an unexpected value, commits, and leaves the group; it returns the
// partitions the records came from.
func consumeAll(t *testing.T, ctx context.Context, seeds []string, topic, group string, want map[string]bool) map[int32]int {
	t.Helper()
	cl := procClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	defer cl.Close() // leave the group: a later consumer of it gets every partition
	got := map[string]bool{}
	parts := map[int32]int{}
	for len(got) < len(want) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s before the deadline", len(got), len(want), topic)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if !want[v] {
				t.Fatalf("unexpected record %q at %s/%d@%d", v, r.Topic, r.Partition, r.Offset)
			}
			if got[v] {
				t.Fatalf("record %q read twice (%s/%d@%d)", v, r.Topic, r.Partition, r.Offset)
			}
			got[v] = true
			parts[r.Partition]++
		})
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return parts
}

func TestClusterThreeBrokers(t *testing.T) {
	c := newTestCluster(t, 3)
	for id := 1; id <= 3; id++ {
		c.start(id)
	}
	ctx := deadlineCtx(t, 3*time.Minute)
	v := c.converge(ctx, 3)
	t.Logf("cluster %s, controller %d, brokers %v", v.ClusterID, v.Controller, v.Brokers)
	for i, addr := range c.kafka {
		dc, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, procClient(t, addr).Broker(-2147483648))
		if err != nil || dc.ErrorCode != 0 || dc.ClusterID != v.ClusterID || dc.ControllerID != v.Controller || len(dc.Brokers) != 3 {
			t.Fatalf("DescribeCluster on broker %d: %v %+v, want cluster %s, controller %d, 3 brokers", i+1, err, dc, v.ClusterID, v.Controller)
		}
	}

	// CreateTopics through kadm (franz-go sends it to the controller) and
	// straight to a broker that is not the controller (forwarded).
	adm := kadm.NewClient(procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...)))
	res, err := adm.CreateTopic(ctx, 6, 1, nil, "orders")
	if err != nil || res.Err != nil {
		t.Fatalf("create orders: %v %v", err, res.Err)
	}
	other := int32(1)
	if v.Controller == 1 {
		other = 2
	}
	direct := procClient(t, c.kafka[other-1])
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "events", 3, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, direct.Broker(-2147483648))
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics on non-controller broker %d: %v %+v", other, err, resp)
	}
	// RF above the broker count: refused, with a message.
	req.Topics[0].Topic, req.Topics[0].ReplicationFactor = "replicated", 4
	resp, err = req.RequestWith(ctx, direct.Broker(-2147483648))
	if err != nil || resp.Topics[0].ErrorCode != kerr.InvalidReplicationFactor.Code || resp.Topics[0].ErrorMessage == nil ||
		!strings.Contains(*resp.Topics[0].ErrorMessage, "larger than the 3 available brokers") {
		t.Fatalf("RF=4 with 3 brokers: want INVALID_REPLICATION_FACTOR naming the 3 brokers, got %v %+v", err, resp.Topics[0])
	}
	// The admin cases a single broker answers (netio's TestAdminCases),
	// answered alike through a broker that forwards every one of them.
	admintest.Run(t, ctx, direct, "forwarded")

	v = c.converge(ctx, 3)
	leaders := map[int32]bool{}
	for _, l := range v.Leaders["orders"] {
		leaders[l] = true
	}
	if len(v.Leaders["orders"]) != 6 || len(leaders) != 3 || len(v.Leaders["events"]) != 3 {
		t.Fatalf("want orders' 6 partitions spread over 3 brokers and events with 3: %v", v.Leaders)
	}
	for i, d := range c.dirs {
		for p, l := range v.Leaders["orders"] {
			path := filepath.Join(d, fmt.Sprintf("orders-%d", p))
			if l == int32(i+1) {
				// Each broker creates its logs when its publisher catches up.
				waitFor(t, ctx, fmt.Sprintf("orders-%d's log on its leader %d", p, l), func() bool {
					_, err := os.Stat(path)
					return err == nil
				})
			} else if _, err := os.Stat(path); err == nil {
				t.Errorf("broker %d: orders-%d is led by %d (RF 1), yet it has a log here", i+1, p, l)
			}
		}
	}

	// Topic configs go through the controller and reach every broker.
	ac, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("3600000")}}, "orders")
	if err != nil || ac[0].Err != nil {
		t.Fatalf("alter orders' config: %v %+v", err, ac)
	}
	for i, addr := range c.kafka {
		cl := procClient(t, addr)
		waitFor(t, ctx, fmt.Sprintf("broker %d to describe orders' retention.ms=3600000", i+1), func() bool {
			req := kmsg.NewPtrDescribeConfigsRequest()
			r := kmsg.NewDescribeConfigsRequestResource()
			r.ResourceType, r.ResourceName, r.ConfigNames = kmsg.ConfigResourceTypeTopic, "orders", []string{"retention.ms"}
			req.Resources = append(req.Resources, r)
			resp, err := req.RequestWith(ctx, cl.Broker(-2147483648))
			return err == nil && len(resp.Resources) == 1 && len(resp.Resources[0].Configs) == 1 &&
				resp.Resources[0].Configs[0].Value != nil && *resp.Resources[0].Configs[0].Value == "3600000"
		})
	}

	// Deleting through the quorum removes the logs on every broker.
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "short-lived"); err != nil {
		t.Fatal(err)
	}
	c.converge(ctx, 3)
	if r, err := adm.DeleteTopic(ctx, "short-lived"); err != nil || r.Err != nil {
		t.Fatalf("delete short-lived: %v %v", err, r.Err)
	}
	waitFor(t, ctx, "short-lived's logs deleted everywhere", func() bool {
		return len(globDirs(c.dirs, "short-lived-*")) == 0
	})

	// Auto-creation on a broker that is not the controller goes through it.
	autoSent := produceAll(t, ctx, []string{c.kafka[other-1]}, "auto", "auto", 30, kgo.AllowAutoTopicCreation())
	consumeAll(t, ctx, c.kafka, "auto", "g-auto", autoSent)
	// CreatePartitions places the new partitions over the brokers too.
	if r, err := adm.CreatePartitions(ctx, 2, "auto"); err != nil || r["auto"].Err != nil {
		t.Fatalf("grow auto: %v %+v", err, r)
	}
	grown := c.converge(ctx, 3).Leaders["auto"]
	if len(grown) != 3 {
		t.Fatalf("auto has leaders %v, want 3 partitions", grown)
	}
	for p, l := range grown {
		waitFor(t, ctx, fmt.Sprintf("auto-%d's log on broker %d", p, l), func() bool {
			_, err := os.Stat(filepath.Join(c.dirs[l-1], fmt.Sprintf("auto-%d", p)))
			return err == nil
		})
	}

	sent := produceAll(t, ctx, c.kafka, "orders", "a", 600)
	parts := consumeAll(t, ctx, c.kafka, "orders", "g1", sent)
	if len(parts) != 6 {
		t.Fatalf("records came from partitions %v, want all 6", parts)
	}

	// kill -9 the controller: another one is elected and creates topics.
	dead := v.Controller
	c.procs[dead-1].kill()
	var alive []string
	for i := range c.kafka {
		if int32(i+1) != dead {
			alive = append(alive, c.kafka[i])
		}
	}
	killed := time.Now()
	adm2 := kadm.NewClient(procClient(t, alive[0], kgo.SeedBrokers(alive...), kgo.RetryTimeout(2*time.Second)))
	for {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		res, err := adm2.CreateTopic(actx, 3, 1, nil, "after-failover")
		cancel()
		if err == nil && res.Err == nil {
			break
		}
		if ctx.Err() != nil || time.Since(killed) > 30*time.Second {
			t.Fatalf("no topic created within %v of killing controller %d: %v %v", time.Since(killed), dead, err, res.Err)
		}
	}
	t.Logf("controller %d killed: topic creation worked again after %v", dead, time.Since(killed).Round(time.Millisecond))
	// A topic deleted while a broker is down: that broker keeps its logs,
	// renamed -stray, when it returns (never delete data because the
	// metadata lacks it); the others delete theirs.
	if r, err := adm2.DeleteTopic(ctx, "events"); err != nil || r.Err != nil {
		t.Fatalf("delete events: %v %v", err, r.Err)
	}

	// Restart it: it rejoins and serves its partitions again.
	c.start(int(dead))
	v = c.converge(ctx, 3)
	waitFor(t, ctx, "events' logs deleted on the live brokers and set aside on the returning one", func() bool {
		live := globDirs(c.dirs, "events-*")
		stray := globDirs(c.dirs[dead-1:dead], "events-*-stray")
		return len(live) == 1 && len(stray) == 1
	})
	if v.Controller == dead {
		t.Logf("the restarted broker %d is controller again", dead)
	}
	more := produceAll(t, ctx, c.kafka, "orders", "b", 300)
	for k := range sent {
		more[k] = true
	}
	parts = consumeAll(t, ctx, c.kafka, "orders", "g2", more)
	if len(parts) != 6 {
		t.Fatalf("after the restart, records came from partitions %v, want all 6", parts)
	}
	// Group g1 committed its offsets on its coordinator: it resumes at the end.
	g1 := procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...))
	offs, err := kadm.NewClient(g1).FetchOffsets(ctx, "g1")
	if err != nil {
		t.Fatalf("fetch g1 offsets: %v", err)
	}
	total := int64(0)
	offs.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != 600 {
		t.Fatalf("g1 committed offsets sum to %d, want 600", total)
	}
}

// globDirs lists the entries matching pattern in dirs.
func globDirs(dirs []string, pattern string) []string {
	var out []string
	for _, d := range dirs {
		m, _ := filepath.Glob(filepath.Join(d, pattern))
		out = append(out, m...)
	}
	return out
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if !eventually(ctx, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitMoreAcked waits until count (records a test's load had
// acknowledged) is n above what it is now: the load the cluster carried
// at this point of the test (before a fault, after it, on new leaders),
// not a guess of how long that takes.
func waitMoreAcked(t *testing.T, n int, when string, count func() int) {
	t.Helper()
	want := count() + n
	testenv.WaitFor(t, time.Minute, fmt.Sprintf("%d more records acknowledged %s", n, when), func() bool { return count() >= want })
}

// eventually asks cond until it holds (true) or ctx ends (false), a
// minute at most when ctx has no deadline.
func eventually(ctx context.Context, cond func() bool) bool {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	return testenv.Until(ctx, cond)
}

// Nodes started with different --voters never talk: the odd one stops with
// a startup error naming the mismatch.
func TestClusterVotersMismatch(t *testing.T) {
	c := newTestCluster(t, 3)
	c.start(1)
	c.start(2)
	bad := strings.Replace(c.voters, "3@", "4@", 1) + "," // node 4 instead of 3
	bad = strings.TrimSuffix(bad, ",")
	args := c.args(3, bad)
	args[1] = "4"
	p := startServe(t, c.dirs[2], args...)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("node with other voters still runs")
	}
	if p.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(p.stderr.String(), "voters") || !strings.Contains(p.stderr.String(), "cannot join the metadata quorum") {
		t.Fatalf("exit %d; want a startup error about the voters; stderr:\n%s", p.cmd.ProcessState.ExitCode(), lastChars(p.stderr.String(), 3000))
	}
}

// A data directory of another cluster is refused.
func TestClusterOtherClusterID(t *testing.T) {
	c := newTestCluster(t, 3)
	c.start(1)
	c.start(2)
	c.converge(deadlineCtx(t, time.Minute), 2)
	if err := quorum.Format(filepath.Join(c.dirs[2], cluster.MetadataDir), 3, "another-cluster"); err != nil {
		t.Fatal(err)
	}
	p := c.start(3)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("node of another cluster still runs")
	}
	if p.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(p.stderr.String(), "another-cluster") {
		t.Fatalf("exit %d; want a refusal naming the cluster ids; stderr:\n%s", p.cmd.ProcessState.ExitCode(), lastChars(p.stderr.String(), 3000))
	}
}

// With no --voters nothing of cluster mode runs: no metadata directory,
// no internal APIs, Metadata as before.
func TestSingleNodeHasNoCluster(t *testing.T) {
	dir := t.TempDir()
	p := startServe(t, dir)
	if _, err := os.Stat(filepath.Join(dir, cluster.MetadataDir)); !os.IsNotExist(err) {
		t.Fatalf("single node made %s: %v", cluster.MetadataDir, err)
	}
	cl := procClient(t, p.Kafka)
	req := kmsg.NewPtrBrokerRegistrationRequest()
	if _, err := req.RequestWith(deadlineCtx(t, 10*time.Second), cl); err == nil {
		t.Fatalf("a single node answered BrokerRegistration")
	}
	if code, _, stderr := runBinary(t, 10*time.Second, "serve", "--controller-addr", "127.0.0.1:0"); code == 0 || !strings.Contains(stderr, "--controller-addr needs --voters") {
		t.Fatalf("--controller-addr without --voters: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runBinary(t, 10*time.Second, "serve", "--voters", "1@127.0.0.1:1", "--node-id", "2", "--controller-addr", "127.0.0.1:0"); code == 0 || !strings.Contains(stderr, "broker-only node: it has no --controller-addr") {
		t.Fatalf("a broker-only node with --controller-addr: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runBinary(t, 10*time.Second, "serve", "--voters", "1@127.0.0.1:1", "--node-id", "2", "--kafka-addr", "0.0.0.0:0"); code == 0 || !strings.Contains(stderr, "--advertised-kafka-addr") {
		t.Fatalf("a broker-only node on a wildcard address: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runBinary(t, 10*time.Second, "serve", "--voters", "1@127.0.0.1:1", "--node-id", "1", "--metadata-addr", "127.0.0.1:0"); code == 0 || !strings.Contains(stderr, "is for broker-only nodes") {
		t.Fatalf("a voter with --metadata-addr: exit %d, %s", code, stderr)
	}
	_ = syscall.SIGTERM
}
