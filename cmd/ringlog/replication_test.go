package main

// Kafka-style ISR replication in cluster mode, with real processes on
// loopback: three brokers, topics with replication factor 3, idempotent
// acks=all producers that keep producing while partition leaders are
// killed or paused past their session timeout and the controller is
// killed. Afterwards every acknowledged record must be where its
// acknowledgement said, once, in dense offsets and in each producer's
// order, and the in-sync replicas' logs on disk must hold the same
// batches.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/cluster"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// Replication timings the tests give the brokers: the default session
// timeout (the failover figures are the defaults'), and a short replica
// lag, so that a follower that stopped fetching leaves the ISR within
// seconds. RINGLOG_REPL_DEFAULT_TIMEOUTS=1 runs with the default replica
// lag too.
var replSessionTimeout, replLagTimeMax = func() (time.Duration, time.Duration) {
	if os.Getenv("RINGLOG_REPL_DEFAULT_TIMEOUTS") != "" {
		return cluster.DefaultSessionTimeout, cluster.DefaultReplicaLagMax
	}
	return cluster.DefaultSessionTimeout, 2 * time.Second
}()

// replicatedArgs are node id's serve flags (testCluster.args) plus the
// replication timings of these tests.
func (c *testCluster) replicatedArgs(id int) []string {
	args := append(c.args(id, c.voters),
		"--broker-session-timeout", replSessionTimeout.String(),
		"--replica-lag-time-max", replLagTimeMax.String(),
		// The fault tests count every leadership move a fault did not
		// cause as a false failover: no balancing behind their back.
		"--auto-leader-rebalance=false")
	args = append(args, c.extraArgs...)
	if c.links != nil {
		args = append(args, "--peer-dial-map", c.links.peerDialMap(int32(id)))
	}
	return args
}

// startReplicated starts node id with replicatedArgs on its own data
// directory and fixed ports, records it in c.procs and returns it. A
// restart right after a kill retries for a few seconds while the kernel
// still reports a port in use.
func (c *testCluster) startReplicated(id int) *serveProc {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var p *serveProc
	var err error
	// The port may be held a moment longer: retry while it is.
	testenv.Eventually(time.Until(deadline), func() bool {
		p, err = tryStartServe(c.t, c.dirs[id-1], c.replicatedArgs(id)...)
		return err == nil || p == nil || !p.exited() || !strings.Contains(p.stderr.String(), "address already in use")
	})
	if err != nil {
		c.t.Fatalf("start broker %d: %v", id, err)
	}
	c.procs[id-1] = p
	return p
}

// running lists the ids of the brokers whose process has not exited (a
// paused one included).
func (c *testCluster) running() []int32 {
	var ids []int32
	for i, p := range c.procs {
		if p != nil && !p.exited() {
			ids = append(ids, int32(i+1))
		}
	}
	return ids
}

// stopAll stops every running broker with SIGTERM, one after the other,
// broker last at the end (pass the controller: it then stops last), and
// fails the test for a broker that does not exit with status 0 within 30 s.
func (c *testCluster) stopAll(last int32) {
	c.t.Helper()
	ids := c.running()
	sort.SliceStable(ids, func(i, j int) bool { return ids[j] == last && ids[i] != last })
	for _, id := range ids {
		code, took, err := c.procs[id-1].signal(syscall.SIGTERM, 30*time.Second)
		if err != nil || code != 0 {
			c.t.Errorf("broker %d on SIGTERM: exit %d after %v, %v", id, code, took.Round(time.Millisecond), err)
			continue
		}
		c.t.Logf("broker %d stopped by SIGTERM in %v", id, took.Round(time.Millisecond))
	}
}

// partView is one partition as one broker's Metadata describes it, with
// Replicas and ISR sorted.
type partView struct {
	Err      int16
	Leader   int32
	Epoch    int32
	Replicas []int32
	ISR      []int32
	Offline  []int32 // OfflineReplicas: on fenced or unregistered brokers
}

// full reports whether the partition has a leader, rf replicas, and all
// of them, the leader included, in the ISR.
func (p partView) full(rf int) bool {
	return p.Err == 0 && p.Leader > 0 && len(p.Replicas) == rf && slices.Equal(p.ISR, p.Replicas) && slices.Contains(p.ISR, p.Leader)
}

// topicView is one broker's Metadata answer about one topic.
type topicView struct {
	Controller int32
	Brokers    int        // brokers listed
	Parts      []partView // by partition
}

// ledBy returns the partitions broker id leads.
func (v topicView) ledBy(id int32) map[int32]bool {
	led := map[int32]bool{}
	for p, pv := range v.Parts {
		if pv.Leader == id {
			led[int32(p)] = true
		}
	}
	return led
}

// leaders returns every partition's leader, by partition.
func (v topicView) leaders() []int32 {
	ls := make([]int32, len(v.Parts))
	for p, pv := range v.Parts {
		ls[p] = pv.Leader
	}
	return ls
}

// mostLeading returns the broker that leads the most partitions (the
// lowest id among ties).
func (v topicView) mostLeading() int32 {
	n := map[int32]int{}
	best := int32(-1)
	for _, pv := range v.Parts {
		n[pv.Leader]++
		if best < 0 || n[pv.Leader] > n[best] || (n[pv.Leader] == n[best] && pv.Leader < best) {
			best = pv.Leader
		}
	}
	return best
}

// sortedIDs returns a sorted copy of broker ids.
func sortedIDs(ids []int32) []int32 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// sortedParts returns the keys of a partition set, sorted (for messages).
func sortedParts(set map[int32]bool) []int32 {
	var out []int32
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// topicViewFrom asks broker addr for its Metadata (giving up after 3 s, so
// that a paused broker cannot hang the caller) and returns what it says
// about topic; a topic it does not list, or lists with an error, is an
// error.
func topicViewFrom(ctx context.Context, addr, topic string) (topicView, error) {
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := metadataFrom(qctx, addr)
	if err != nil {
		return topicView{}, err
	}
	v := topicView{Controller: m.ControllerID, Brokers: len(m.Brokers)}
	for _, mt := range m.Topics {
		if mt.Topic == nil || *mt.Topic != topic {
			continue
		}
		if mt.ErrorCode != 0 {
			return v, fmt.Errorf("topic %s: %v", topic, kerr.ErrorForCode(mt.ErrorCode))
		}
		v.Parts = make([]partView, len(mt.Partitions))
		for _, p := range mt.Partitions {
			if p.Partition < 0 || int(p.Partition) >= len(v.Parts) {
				return v, fmt.Errorf("topic %s: partition %d listed among %d", topic, p.Partition, len(mt.Partitions))
			}
			v.Parts[p.Partition] = partView{Err: p.ErrorCode, Leader: p.Leader, Epoch: p.LeaderEpoch,
				Replicas: sortedIDs(p.Replicas), ISR: sortedIDs(p.ISR), Offline: sortedIDs(p.OfflineReplicas)}
		}
		return v, nil
	}
	return v, fmt.Errorf("topic %s not in the metadata", topic)
}

// viewsAgree reports whether every view is the same as the first.
func viewsAgree(vs []topicView) bool {
	for _, v := range vs[1:] {
		if !reflect.DeepEqual(v, vs[0]) {
			return false
		}
	}
	return true
}

// pollViews asks brokers ids for their view of topic every 100 ms until
// ok accepts the views (in the order of ids) and returns them. It fails
// the test, with the last views and error seen, when d passes first.
func (c *testCluster) pollViews(ctx context.Context, ids []int32, topic string, d time.Duration, what string, ok func(vs []topicView) bool) []topicView {
	c.t.Helper()
	var vs []topicView
	var lastErr error
	if testenv.Poll(d, 100*time.Millisecond, func() bool {
		vs, lastErr = nil, nil
		for _, id := range ids {
			v, err := topicViewFrom(ctx, c.kafka[id-1], topic)
			if err != nil {
				lastErr = fmt.Errorf("broker %d: %w", id, err)
				break
			}
			vs = append(vs, v)
		}
		return ctx.Err() != nil || lastErr == nil && len(vs) > 0 && ok(vs)
	}) && ctx.Err() == nil {
		return vs
	}
	var b strings.Builder
	for i, v := range vs {
		fmt.Fprintf(&b, "\n  broker %d: %+v", ids[i], v)
	}
	c.t.Fatalf("timed out after %v waiting for %s; last views:%s\nlast error: %v", d, what, b.String(), lastErr)
	return nil
}

// waitFullISR waits up to d until every running broker's Metadata lists
// every broker and a controller, shows each of topic's parts partitions
// with a leader, rf replicas and all of them in the ISR, and all brokers
// say the same (controller, leaders, leader epochs, replicas, ISRs). It
// returns that view.
func (c *testCluster) waitFullISR(ctx context.Context, topic string, parts, rf int, d time.Duration) topicView {
	c.t.Helper()
	ids := c.running()
	vs := c.pollViews(ctx, ids, topic, d, fmt.Sprintf("every partition of %s fully in sync, the same on brokers %v", topic, ids), func(vs []topicView) bool {
		if !viewsAgree(vs) {
			return false
		}
		v := vs[0]
		if v.Controller <= 0 || v.Brokers != len(c.procs) || len(v.Parts) != parts {
			return false
		}
		for _, p := range v.Parts {
			if !p.full(rf) {
				return false
			}
		}
		return true
	})
	return vs[0]
}

// waitLeadersMoved waits up to d until brokers ids agree that every
// partition gone led in before has another leader, one of its ISR in
// before, with a higher leader epoch, and, when gone was the controller,
// on a controller other than gone. It returns the first broker's view.
func (c *testCluster) waitLeadersMoved(ctx context.Context, topic string, before topicView, gone int32, ids []int32, d time.Duration) topicView {
	c.t.Helper()
	led := before.ledBy(gone)
	what := fmt.Sprintf("brokers %v to agree on new leaders for partitions %v of %s (led by broker %d)", ids, sortedParts(led), topic, gone)
	if before.Controller == gone {
		what += " and on a new controller"
	}
	vs := c.pollViews(ctx, ids, topic, d, what, func(vs []topicView) bool {
		for _, v := range vs {
			if len(v.Parts) != len(before.Parts) {
				return false
			}
			if before.Controller == gone && (v.Controller <= 0 || v.Controller == gone || v.Controller != vs[0].Controller) {
				return false
			}
			for p := range led {
				was, now := before.Parts[p], v.Parts[p]
				if now.Leader <= 0 || now.Leader == gone || !slices.Contains(was.ISR, now.Leader) || now.Epoch <= was.Epoch ||
					now.Leader != vs[0].Parts[p].Leader || now.Epoch != vs[0].Parts[p].Epoch {
					return false
				}
			}
		}
		return true
	})
	return vs[0]
}

// failoverClock measures how long a fault kept records from being
// acknowledged: armed at the fault with the partitions it hit, it stops
// at the first successful acknowledgement of a record produced after
// that moment to one of them.
type failoverClock struct {
	mu    sync.Mutex
	since time.Time
	parts map[int32]bool // nil: any partition
	done  chan struct{}  // closed when stopped; nil before the first arm
	fired bool
	took  time.Duration
}

// arm starts a measurement now for partitions parts (nil: any).
func (f *failoverClock) arm(parts map[int32]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.since, f.parts, f.done, f.fired, f.took = time.Now(), parts, make(chan struct{}), false, 0
}

// observe is called with every record's outcome and the time it was
// handed to the producer.
func (f *failoverClock) observe(r *kgo.Record, producedAt time.Time, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil || f.done == nil || f.fired || producedAt.Before(f.since) || (f.parts != nil && !f.parts[r.Partition]) {
		return
	}
	f.fired, f.took = true, time.Since(f.since)
	close(f.done)
}

// wait waits up to d for the armed measurement and returns it; ok is false
// when nothing qualifying was acknowledged by then.
func (f *failoverClock) wait(ctx context.Context, d time.Duration) (time.Duration, bool) {
	f.mu.Lock()
	done := f.done
	f.mu.Unlock()
	if done == nil {
		return 0, false
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		return 0, false
	case <-ctx.Done():
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.took, true
}

// replProducers are background idempotent acks=all producers, each
// producing the values p<i>-<seq> (seq from 0) round robin over the
// partitions at a bounded rate, every outcome recorded in acks and
// reported to clock.
type replProducers struct {
	t       *testing.T
	clients []*kgo.Client
	acks    *ackTracker
	clock   *failoverClock
	sent    []atomic.Int64 // values handed to producer i: p<i>-0 .. p<i>-(sent-1)
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

// startReplProducers starts n producers on topic, seeded with every
// broker, each producing perSec records a second (a few hundred records
// buffered at most, so Produce blocks rather than piling up during an
// outage), records failing after deliveryTimeout; opts are added to each
// client's (a client side's dialer). They stop at finish, or at the end
// of the test.
func startReplProducers(t *testing.T, ctx context.Context, seeds []string, topic string, n, perSec int, deliveryTimeout time.Duration, opts ...kgo.Opt) *replProducers {
	t.Helper()
	p := &replProducers{t: t, acks: newAckTracker(), clock: &failoverClock{}, sent: make([]atomic.Int64, n), stop: make(chan struct{})}
	var logOpt []kgo.Opt
	// RINGLOG_TEST_KGO_LOG names a file for the producers' franz-go logs
	// (info level): what the clients saw during a fault.
	if path := os.Getenv("RINGLOG_TEST_KGO_LOG"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		logOpt = append(logOpt, kgo.WithLogger(kgo.BasicLogger(f, kgo.LogLevelInfo, func() string { return time.Now().UTC().Format("15:04:05.000 ") })))
	}
	for i := 0; i < n; i++ {
		copts := append(slices.Clone(logOpt), kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
			kgo.RecordDeliveryTimeout(deliveryTimeout), kgo.MaxBufferedRecords(500))
		copts = append(copts, fastFailoverOpts()...)
		p.clients = append(p.clients, procClient(t, seeds[0], append(copts, opts...)...))
	}
	// Produce's context: canceled only when the test ends (a canceled
	// context fails the records still buffered).
	pctx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() {
		cancel()
		p.halt()
	})
	const tick = 10 * time.Millisecond
	per := max(1, perSec*int(tick)/int(time.Second))
	for i, cl := range p.clients {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ticker := time.NewTicker(tick)
			defer ticker.Stop()
			for seq := 0; ; {
				select {
				case <-p.stop:
					return
				case <-pctx.Done():
					return
				case <-ticker.C:
				}
				for k := 0; k < per; k++ {
					v := fmt.Sprintf("p%d-%d", i, seq)
					seq++
					p.sent[i].Store(int64(seq))
					p.acks.mu.Lock()
					p.acks.sent++
					p.acks.mu.Unlock()
					at := time.Now()
					cl.Produce(pctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
						p.acks.promise(r, err)
						p.clock.observe(r, at, err)
					})
				}
			}
		}()
	}
	return p
}

// halt stops the producing goroutines and waits for them (idempotent).
func (p *replProducers) halt() {
	p.stopped.Do(func() { close(p.stop) })
	p.wg.Wait()
}

// sentCounts returns how many values each producer handed to its client.
func (p *replProducers) sentCounts() []int64 {
	out := make([]int64, len(p.sent))
	for i := range p.sent {
		out[i] = p.sent[i].Load()
	}
	return out
}

// counts returns how many records have been acknowledged and how many
// have failed so far.
func (p *replProducers) counts() (acked, failed int) {
	p.acks.mu.Lock()
	defer p.acks.mu.Unlock()
	return len(p.acks.acked), len(p.acks.failed)
}

// waitAcked waits until n more records are acknowledged than now.
func (p *replProducers) waitAcked(n int, when string) {
	p.t.Helper()
	waitMoreAcked(p.t, n, when, func() int { acked, _ := p.counts(); return acked })
}

// finish stops producing, flushes every client (waiting up to 2 minutes
// for the records still buffered), fails the test for a producer none of
// whose records was acknowledged, and returns every outcome.
func (p *replProducers) finish(ctx context.Context) (map[string]recLoc, map[string]error) {
	p.t.Helper()
	p.halt()
	for i, cl := range p.clients {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := cl.Flush(fctx)
		cancel()
		if err != nil {
			p.t.Fatalf("producer %d did not settle: %v", i, err)
		}
	}
	acked, failed := p.acks.snapshot()
	perProducer := make([]int, len(p.clients))
	for v := range acked {
		if i, _, ok := parseProduced(v); ok && i < len(perProducer) {
			perProducer[i]++
		}
	}
	for i, n := range perProducer {
		if n == 0 {
			p.t.Errorf("producer %d: none of its %d records was acknowledged", i, p.sent[i].Load())
		}
	}
	p.t.Logf("producers: %v records handed over, %v acknowledged each, %d failed", p.sentCounts(), perProducer, len(failed))
	return acked, failed
}

// parseProduced splits a value p<i>-<seq> into producer and sequence.
func parseProduced(v string) (producer int, seq int64, ok bool) {
	a, b, found := strings.Cut(strings.TrimPrefix(v, "p"), "-")
	if !found || !strings.HasPrefix(v, "p") {
		return 0, 0, false
	}
	i, err1 := strconv.Atoi(a)
	s, err2 := strconv.ParseInt(b, 10, 64)
	return i, s, err1 == nil && err2 == nil && i >= 0 && s >= 0
}

// someFailures formats up to five failed records with their errors.
func someFailures(failed map[string]error) string {
	var ex []string
	for v, err := range failed {
		ex = append(ex, fmt.Sprintf("%s: %v", v, err))
	}
	sort.Strings(ex)
	return strings.Join(ex[:min(5, len(ex))], "; ")
}

// checkReplicatedLog is the verdict on a replicated topic once the
// producers have finished: it reads every partition back from offset 0
// to its high watermark with a plain consumer (readBackTopic: offsets
// dense from 0, no value twice), checks that every acknowledged value is
// at its acknowledged partition and offset (checkAcked), that every value
// is one a producer sent and each producer's values follow its sequence
// along each partition's offsets, then stops every broker with SIGTERM
// and compares the logs of final's in-sync replicas on disk
// (checkReplicaLogs).
func checkReplicatedLog(t *testing.T, ctx context.Context, c *testCluster, topic string, parts int, final topicView, acked map[string]recLoc, sent []int64) {
	t.Helper()
	running := c.running()
	if len(running) == 0 {
		t.Fatal("no broker runs to read the topic back from")
	}
	got := readBackTopic(t, ctx, c.kafka[running[0]-1], topic, parts)
	checkAcked(t, topic, got, acked)
	checkProducerOrder(t, topic, got, sent)
	t.Logf("%s: %d records stored, %d acknowledged, high watermarks %v", topic, len(got.byValue), len(acked), got.ends)
	c.stopAll(final.Controller)
	checkReplicaLogs(t, c.dirs, topic, parts, final, acked)
}

// checkProducerOrder fails the test for a value that is not p<i>-<seq>
// with seq below what producer i sent, and for a producer's value that
// follows a later one of the same producer in a partition.
func checkProducerOrder(t *testing.T, topic string, got logContents, sent []int64) {
	t.Helper()
	byOffset := make([][]string, len(got.ends))
	for p, end := range got.ends {
		byOffset[p] = make([]string, max(end, 0))
	}
	for v, at := range got.byValue {
		if at.Offset >= 0 && at.Offset < int64(len(byOffset[at.Partition])) {
			byOffset[at.Partition][at.Offset] = v
		}
	}
	bad := 0
	for p, vs := range byOffset {
		last := make([]int64, len(sent))
		for i := range last {
			last[i] = -1
		}
		for off, v := range vs {
			if v == "" {
				continue // a gap: readBackTopic reported it
			}
			i, seq, ok := parseProduced(v)
			switch {
			case !ok || i >= len(sent) || seq >= sent[i]:
				if bad++; bad <= 10 {
					t.Errorf("%s-%d@%d: value %q was never produced", topic, p, off, v)
				}
			case seq <= last[i]:
				if bad++; bad <= 10 {
					t.Errorf("%s-%d@%d: %q follows p%d-%d: producer %d's records are out of order", topic, p, off, v, i, last[i], i)
				}
			default:
				last[i] = seq
			}
		}
	}
	if bad > 10 {
		t.Errorf("%s: %d values unexpected or out of producer order in all", topic, bad)
	}
}

// replicaBatch is what in-sync replicas must agree on about each batch.
type replicaBatch struct {
	Base, Last int64
	CRC        uint32
}

// readReplicaLog opens the partition log in dir (its broker stopped) and
// returns its batches and its end offset.
func readReplicaLog(dir string) ([]replicaBatch, int64, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, 0, err // wal.Open would create it
	}
	l, err := wal.Open(dir, wal.Options{})
	if err != nil {
		return nil, 0, err
	}
	defer l.Close()
	var bs []replicaBatch
	err = l.ScanHeaders(0, func(h *batch.Header) error {
		bs = append(bs, replicaBatch{h.BaseOffset, h.LastOffset(), h.CRC})
		return nil
	})
	return bs, l.EndOffset(), err
}

// checkReplicaLogs compares, for every partition of topic, the logs that
// final's ISR members hold in their data directories (dirs by node id -
// 1): each must be contiguous from offset 0, the shortest must end at or
// past the last acknowledged offset + 1, and all must have the same
// batches (base offset, last offset, CRC) below the shortest one's end
// (followers may lag behind the leader's tail).
func checkReplicaLogs(t *testing.T, dirs []string, topic string, parts int, final topicView, acked map[string]recLoc) {
	t.Helper()
	ackedEnd := make([]int64, parts)
	for _, at := range acked {
		if int(at.Partition) < parts {
			ackedEnd[at.Partition] = max(ackedEnd[at.Partition], at.Offset+1)
		}
	}
	type replicaLog struct {
		id      int32
		batches []replicaBatch
		end     int64
	}
	for p := 0; p < parts; p++ {
		ids := final.Parts[p].ISR
		var logs []replicaLog
		for _, id := range ids {
			dir := filepath.Join(dirs[id-1], fmt.Sprintf("%s-%d", topic, p))
			bs, end, err := readReplicaLog(dir)
			if err != nil {
				t.Errorf("%s-%d: replica on broker %d: %v", topic, p, id, err)
				continue
			}
			next := int64(0)
			for _, b := range bs {
				if b.Base != next || b.Last < b.Base {
					t.Errorf("%s-%d: replica on broker %d: batch %d..%d where offset %d was next", topic, p, id, b.Base, b.Last, next)
					break
				}
				next = b.Last + 1
			}
			logs = append(logs, replicaLog{id, bs, end})
		}
		if len(logs) != len(ids) || len(logs) == 0 {
			continue
		}
		ref := logs[0]
		ends := map[int32]int64{}
		for _, l := range logs {
			ends[l.id] = l.end
			if l.end < ref.end {
				ref = l
			}
		}
		if ref.end < ackedEnd[p] {
			t.Errorf("%s-%d: in-sync replica on broker %d ends at %d, but offset %d was acknowledged (replica ends %v)", topic, p, ref.id, ref.end, ackedEnd[p]-1, ends)
		}
		for _, l := range logs {
			if l.id == ref.id {
				continue
			}
			n := sort.Search(len(l.batches), func(i int) bool { return l.batches[i].Base >= ref.end })
			mine := l.batches[:n]
			for i := 0; i < max(len(mine), len(ref.batches)); i++ {
				var a, b replicaBatch
				if i < len(ref.batches) {
					a = ref.batches[i]
				}
				if i < len(mine) {
					b = mine[i]
				}
				if a != b || i >= len(ref.batches) || i >= len(mine) {
					t.Errorf("%s-%d: replicas diverge at batch %d below offset %d: broker %d has %+v, broker %d has %+v (%d and %d batches)",
						topic, p, i, ref.end, ref.id, a, l.id, b, len(ref.batches), len(mine))
					break
				}
			}
		}
		t.Logf("%s-%d: replicas %v end at %v; identical below %d (%d batches), %d acknowledged", topic, p, ids, ends, ref.end, len(ref.batches), ackedEnd[p])
	}
}

// produceRaw sends one record to topic's partition on broker addr in a raw
// acks=all Produce request (no client retries) and returns the
// partition's error code.
func produceRaw(ctx context.Context, addr, topic string, partition int32, value string) (int16, error) {
	b := batch.NewBuilder()
	b.Add(time.Now().UnixMilli(), nil, []byte(value), nil)
	raw, err := b.Build(nil, batch.CodecNone)
	if err != nil {
		return 0, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rp, err := sendBatch(rctx, cl.Broker(-2147483648), topic, partition, raw, 5000)
	return rp.ErrorCode, err
}

// sendBatch sends records (stored-format batches) to topic's partition
// in one raw acks=all Produce request through r, the broker waiting up to
// timeoutMs for the replicas, and returns the partition's answer.
func sendBatch(ctx context.Context, r kmsg.Requestor, topic string, partition int32, records []byte, timeoutMs int32) (kmsg.ProduceResponseTopicPartition, error) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = timeoutMs
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, r)
	if err != nil {
		return kmsg.ProduceResponseTopicPartition{}, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.ProduceResponseTopicPartition{}, fmt.Errorf("malformed produce response %+v", resp)
	}
	return resp.Topics[0].Partitions[0], nil
}

// produceRawUntil repeats produceRaw to the current leader of topic's
// partition 0 (asked of brokers ids) for up to d while the answer is a
// retriable error other than want, and fails the test unless it ends with
// want (0: success).
func (c *testCluster) produceRawUntil(ctx context.Context, ids []int32, topic string, want int16, d time.Duration) {
	c.t.Helper()
	var (
		v      topicView
		leader int32
		code   int16
		err    error
	)
	if testenv.Poll(d, 200*time.Millisecond, func() bool {
		v = c.pollViews(ctx, ids, topic, d, fmt.Sprintf("a leader for %s-0", topic), func(vs []topicView) bool {
			return len(vs[0].Parts) > 0 && vs[0].Parts[0].Leader > 0
		})[0]
		leader = v.Parts[0].Leader
		code, err = produceRaw(ctx, c.kafka[leader-1], topic, 0, fmt.Sprintf("raw-%d", time.Now().UnixNano()))
		// A success where an error is wanted is final; an error where
		// success is wanted may be the leader catching up on an ISR
		// change the metadata already shows.
		retry := err != nil || (code != 0 && kerr.IsRetriable(kerr.ErrorForCode(code)))
		return err == nil && code == want || !retry
	}) && err == nil && code == want {
		return
	}
	c.t.Fatalf("acks=all produce to %s-0 on its leader %d (ISR %v): error %v, request error %v; want %v",
		topic, leader, v.Parts[0].ISR, kerr.ErrorForCode(code), err, kerr.ErrorForCode(want))
}

// TestReplicationBadInput: a replication factor above the number of
// brokers is refused with INVALID_REPLICATION_FACTOR and creates nothing;
// produce to a follower is refused with NOT_LEADER_OR_FOLLOWER; with min.insync.replicas 3 on RF 3, once a killed follower has left the
// ISR, acks=all produce is refused with NOT_ENOUGH_REPLICAS (raw request
// to the leader, and franz-go without retries), and accepted again once
// the follower is back in the ISR.
func TestReplicationBadInput(t *testing.T) {
	ringlogBinary(t)
	c := newTestCluster(t, 3)
	for id := 1; id <= 3; id++ {
		c.startReplicated(id)
	}
	ctx := deadlineCtx(t, 2*time.Minute)
	c.converge(ctx, 3)
	cl := procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...))

	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "too-many", 3, 4
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != kerr.InvalidReplicationFactor.Code {
		t.Fatalf("CreateTopics RF 4 on 3 brokers: want INVALID_REPLICATION_FACTOR, got %v %+v", err, resp)
	}
	for id := 1; id <= 3; id++ {
		if _, err := topicViewFrom(ctx, c.kafka[id-1], "too-many"); err == nil || !strings.Contains(err.Error(), "not in the metadata") {
			t.Errorf("broker %d: refused topic too-many: %v, want it absent from the metadata", id, err)
		}
	}

	const topic = "strict"
	adm := kadm.NewClient(cl)
	res, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("3")}, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	v := c.waitFullISR(ctx, topic, 1, 3, 30*time.Second)
	c.produceRawUntil(ctx, c.running(), topic, 0, 10*time.Second)
	for _, id := range v.Parts[0].Replicas {
		if id == v.Parts[0].Leader {
			continue
		}
		if code, err := produceRaw(ctx, c.kafka[id-1], topic, 0, "to-a-follower"); err != nil || code != kerr.NotLeaderForPartition.Code {
			t.Errorf("produce to %s-0 on follower %d (leader %d): error %v, request error %v; want NOT_LEADER_OR_FOLLOWER",
				topic, id, v.Parts[0].Leader, kerr.ErrorForCode(code), err)
		}
	}

	// Kill a follower, the controller only if both followers are.
	leader := v.Parts[0].Leader
	victim := int32(-1)
	for _, id := range v.Parts[0].Replicas {
		if id != leader && (victim < 0 || victim == v.Controller) {
			victim = id
		}
	}
	c.procs[victim-1].kill()
	var live []int32
	var liveAddrs []string
	for _, id := range c.running() {
		live = append(live, id)
		liveAddrs = append(liveAddrs, c.kafka[id-1])
	}
	killed := time.Now()
	c.pollViews(ctx, live, topic, 15*time.Second, fmt.Sprintf("the ISR of %s-0 to shrink to 2 without broker %d, listed offline", topic, victim), func(vs []topicView) bool {
		for _, v := range vs {
			// The dead broker's replica is listed offline once it is fenced.
			if len(v.Parts) != 1 || len(v.Parts[0].ISR) != 2 || slices.Contains(v.Parts[0].ISR, victim) || v.Parts[0].Leader <= 0 ||
				!slices.Equal(v.Parts[0].Offline, []int32{victim}) {
				return false
			}
		}
		return true
	})
	t.Logf("broker %d killed: ISR of %s-0 shrank to 2 after %v", victim, topic, time.Since(killed).Round(time.Millisecond))
	c.produceRawUntil(ctx, live, topic, kerr.NotEnoughReplicas.Code, 10*time.Second)

	kcl := procClient(t, liveAddrs[0], kgo.SeedBrokers(liveAddrs...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(0), kgo.RecordDeliveryTimeout(10*time.Second))
	for try := 0; ; try++ {
		err = kcl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("franz-%d", try))}).FirstErr()
		if errors.Is(err, kerr.NotEnoughReplicas) {
			break
		}
		if err == nil || !kerr.IsRetriable(err) || try == 4 {
			t.Fatalf("franz-go acks=all produce with an ISR of 2 < min.insync.replicas 3: %v, want NOT_ENOUGH_REPLICAS", err)
		}
	}

	c.startReplicated(int(victim))
	c.waitFullISR(ctx, topic, 1, 3, 30*time.Second)
	c.produceRawUntil(ctx, c.running(), topic, 0, 10*time.Second)
}

// TestReplicatedGroupOffsets: the cluster's __consumer_offsets is
// replicated and its partitions' leaders coordinate the groups, so a
// group's committed offsets survive SIGKILL of its coordinator: another
// broker takes the group over (FindCoordinator names it) with every
// offset committed before the kill, and the group resumes where it was,
// reading only what was produced after.
func TestReplicatedGroupOffsets(t *testing.T) {
	ringlogBinary(t)
	c := newTestCluster(t, 3)
	for id := 1; id <= 3; id++ {
		c.startReplicated(id)
	}
	ctx := deadlineCtx(t, 2*time.Minute)
	c.converge(ctx, 3)
	adm := kadm.NewClient(procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...)))
	const topic, group = "grouped", "g-failover"
	if res, err := adm.CreateTopic(ctx, 3, 3, nil, topic); err != nil || res.Err != nil {
		t.Fatalf("create %s: %v %v", topic, err, res.Err)
	}
	c.waitFullISR(ctx, topic, 3, 3, 30*time.Second)
	c.waitFullISR(ctx, "__consumer_offsets", int(cluster.DefaultOffsetsPartitions), 3, 30*time.Second)

	first := produceAll(t, ctx, c.kafka, topic, "a", 300)
	consumeAll(t, ctx, c.kafka, topic, group, first)
	before, err := adm.FetchOffsets(ctx, group)
	if err != nil || before.Error() != nil {
		t.Fatalf("fetch %s's offsets: %v %v", group, err, before.Error())
	}
	coord := adm.FindGroupCoordinators(ctx, group)
	if len(coord) != 1 || coord[group].Err != nil {
		t.Fatalf("find %s's coordinator: %+v", group, coord)
	}
	victim := coord[group].NodeID
	c.procs[victim-1].kill()
	killed := time.Now()

	var live []string
	for _, id := range c.running() {
		live = append(live, c.kafka[id-1])
	}
	// A fresh client each try: franz-go keeps a group's coordinator
	// cached while dialing it fails.
	var adm2 *kadm.Client
	var after kadm.OffsetResponses
	if !testenv.Poll(30*time.Second, 100*time.Millisecond, func() bool {
		cl, cerr := kgo.NewClient(kgo.SeedBrokers(live...), kgo.RetryTimeout(2*time.Second))
		if cerr != nil {
			t.Fatal(cerr)
		}
		adm2 = kadm.NewClient(cl)
		fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		after, err = adm2.FetchOffsets(fctx, group)
		cancel()
		if err == nil && after.Error() == nil && len(after) > 0 {
			t.Cleanup(cl.Close)
			return true
		}
		cl.Close()
		return false
	}) {
		t.Fatalf("no broker served %s's offsets within 30 s of killing its coordinator %d: %v %v", group, victim, err, after.Error())
	}
	took := time.Since(killed)
	// Brokers apply the new leadership a few milliseconds apart: the one
	// asked may name the fenced broker for a moment.
	var now kadm.FindCoordinatorResponses
	waitFor(t, ctx, fmt.Sprintf("FindCoordinator to name another broker than %d", victim), func() bool {
		now = adm2.FindGroupCoordinators(ctx, group)
		return now[group].Err == nil && now[group].NodeID != victim
	})
	total := int64(0)
	before.Each(func(o kadm.OffsetResponse) {
		got, ok := after.Lookup(o.Topic, o.Partition)
		if !ok || got.At != o.At {
			t.Errorf("%s/%d: committed %d before the kill, %+v after", o.Topic, o.Partition, o.At, got)
		}
		total += o.At
	})
	if total != 300 {
		t.Fatalf("the group committed %d records' worth of offsets, want 300", total)
	}
	t.Logf("coordinator %d killed: broker %d serves %s's offsets (all %d partitions intact) after %v",
		victim, now[group].NodeID, group, len(before), took.Round(time.Millisecond))

	// The group resumes at its commits: only the new records come.
	second := produceAll(t, ctx, live, topic, "b", 90)
	consumeAll(t, ctx, live, topic, group, second)

	c.startReplicated(int(victim))
	c.waitFullISR(ctx, "__consumer_offsets", int(cluster.DefaultOffsetsPartitions), 3, 30*time.Second)
}
