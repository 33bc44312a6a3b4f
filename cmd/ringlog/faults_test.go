package main

// Faults injected into a replicated cluster of real processes while
// producers keep producing (replHarness), each measured from both sides:
// when the other brokers agreed on new leaders (cluster side), and when a
// producer had its first record produced after the fault acknowledged
// (producer side).

import (
	"context"
	"fmt"
	"maps"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The client sides of a replHarness (clientNet): the producers', and a
// zombie's (a client that, in the zombie-leader fault, can reach only the
// leader cut off from the other brokers).
const (
	sideMain   = "main"
	sideZombie = "zombie"
)

// fastFailoverOpts are the franz-go producer settings the README
// recommends for a fast failover: a produce on a dead connection (a
// black-holed or paused broker) is given up after the produce timeout
// plus the overhead, 3 s, instead of franz-go's default 20 s, and the
// metadata is refreshed 250 ms after an error instead of 5 s.
func fastFailoverOpts() []kgo.Opt {
	return []kgo.Opt{kgo.ProduceRequestTimeout(2 * time.Second), kgo.RequestTimeoutOverhead(time.Second),
		kgo.MetadataMinAge(250 * time.Millisecond)}
}

// faultWindow is when one fault started, and when it was undone (the
// heal, the SIGCONT, the restart).
type faultWindow struct {
	kind       string
	start, end time.Time
	// handedOver are the partitions ("topic-partition") whose
	// leadership the fault moves through metadata on purpose (a
	// reassignment removing the leader, a drain): until the old leader
	// has applied the move, a few milliseconds, it still names itself
	// leader, as Kafka's does (its writes cannot commit: the followers
	// follow the new leader).
	handedOver map[string]bool
}

// handover reports whether claim falls in a fault window that handed
// its partition's leadership over on purpose ("*": every partition, a
// drain's, which moves the other topics' too).
func (h *replHarness) handover(claim staleClaim) bool {
	key := fmt.Sprintf("%s-%d", claim.topic, claim.partition)
	for _, f := range h.faults {
		if (f.handedOver[key] || f.handedOver["*"]) && !claim.at.Before(f.start) && !claim.at.After(f.end) {
			return true
		}
	}
	return false
}

// faultResult is what one fault measured. cluster: from the fault until
// the other brokers agreed on new leaders for the partitions it hit;
// producer: from the fault until the first acknowledgement of a record
// produced after it to one of those partitions. The ok flags are false
// where that was not measured (the broker led nothing, or, for cluster,
// no failover is expected).
type faultResult struct {
	cluster, producer     time.Duration
	clusterOK, producerOK bool
}

// replHarness injects faults into a replicated cluster while producers
// keep producing, and keeps the last fully in-sync view of the topic.
type replHarness struct {
	t       *testing.T
	ctx     context.Context
	c       *testCluster
	clients *clientNet
	topic   string
	parts   int
	prods   *replProducers
	view    topicView     // the last view with every ISR full
	waitMax time.Duration // bound on each wait for new leaders or for full ISRs
	ackWait time.Duration // bound on the wait for the first acknowledgement after a fault
	faults  []faultWindow
	// collateral lists the leadership changes of partitions the faulted
	// broker did not lead (checkNoCollateral): each one a false failover.
	collateral []string
	// adm is the reassignment fault's admin client (made on first use).
	adm *kadm.Client
}

// begin starts a fault on broker id: the view before it, the partitions
// id leads (the producers' failover clock armed for them) and the start.
func (h *replHarness) begin(id int32) (before topicView, led map[int32]bool, start time.Time) {
	before = h.view
	led = before.ledBy(id)
	if len(led) > 0 {
		h.prods.clock.arm(led)
	}
	return before, led, time.Now()
}

// checkNoCollateral records every partition not led by the faulted
// broker id before the fault whose leader or leader epoch differs now:
// a fault of one broker must move only its own leaderships (a controller
// that dies takes no one else's with it).
func (h *replHarness) checkNoCollateral(label string, before topicView, id int32) {
	for p, was := range before.Parts {
		if was.Leader == id {
			continue
		}
		if now := h.view.Parts[p]; now.Leader != was.Leader || now.Epoch != was.Epoch {
			h.collateral = append(h.collateral, fmt.Sprintf("%s: partition %d, led by broker %d (not the faulted %d), moved: broker %d epoch %d -> broker %d epoch %d",
				label, p, was.Leader, id, was.Leader, was.Epoch, now.Leader, now.Epoch))
		}
	}
}

// others lists the running brokers other than id.
func (h *replHarness) others(id int32) []int32 {
	var out []int32
	for _, r := range h.c.running() {
		if r != id {
			out = append(out, r)
		}
	}
	return out
}

// mayLoseAcks1 reports whether an acks=1 record acknowledged at at may be
// lost: from a second before a fault (the followers may not have fetched
// it yet) until a session timeout and a second after its start (a leader
// cut off or paused acknowledges until its lease lapses, a session after
// the last heartbeat the controller accepted), and for a move (a
// reassignment, a drain) until a second after its end: the leadership is
// handed over when the move completes, and what the old leader
// acknowledged with acks=1 and the new one had not fetched yet is gone
// with it, as in Kafka. Outside these windows no acknowledged record may
// be lost.
func (h *replHarness) mayLoseAcks1(at time.Time) bool {
	for _, f := range h.faults {
		end := f.start.Add(replSessionTimeout + time.Second)
		if f.handedOver != nil && f.end.Add(time.Second).After(end) {
			end = f.end.Add(time.Second)
		}
		if !at.Before(f.start.Add(-time.Second)) && !at.After(end) {
			return true
		}
	}
	return false
}

// waitAck waits for the failover clock armed for a fault when armed is
// set, failing the test if no record produced after the fault to the
// partitions it hit is acknowledged within ackWait.
func (h *replHarness) waitAck(label string, armed bool) (time.Duration, bool) {
	h.t.Helper()
	if !armed {
		return 0, false
	}
	took, ok := h.prods.clock.wait(h.ctx, h.ackWait)
	if !ok {
		h.prods.acks.mu.Lock()
		failed := maps.Clone(h.prods.acks.failed)
		h.prods.acks.mu.Unlock()
		h.t.Fatalf("%s: no record produced after the fault to the partitions it hit was acknowledged within %v; %d records failed so far, e.g. %s",
			label, h.ackWait, len(failed), someFailures(failed))
	}
	return took, true
}

// killAndRestart SIGKILLs broker id, waits until the other brokers agree
// on new leaders (ISR members, higher epochs) for its partitions and on a
// new controller if it was the controller, waits for the first
// acknowledgement of a record produced after the kill to a partition it
// led, restarts it on the same data directory and flags and waits until
// every ISR is full again.
func (h *replHarness) killAndRestart(label string, id int32) faultResult {
	h.t.Helper()
	before, led, start := h.begin(id)
	h.c.procs[id-1].kill()
	moved := h.c.waitLeadersMoved(h.ctx, h.topic, before, id, h.others(id), h.waitMax)
	movedAfter := time.Since(start)
	var r faultResult
	r.producer, r.producerOK = h.waitAck(label, len(led) > 0)
	r.cluster, r.clusterOK = movedAfter, len(led) > 0
	h.c.startReplicated(int(id))
	restarted := time.Now()
	h.faults = append(h.faults, faultWindow{kind: "kill", start: start, end: restarted})
	h.view = h.c.waitFullISR(h.ctx, h.topic, h.parts, 3, h.waitMax)
	h.checkNoCollateral(label, before, id)
	h.t.Logf("%s: killed broker %d (controller %d, leading %v); leaders %v -> %v after %v; first ack after %s; ISR full %v after the restart",
		label, id, before.Controller, sortedParts(led), before.leaders(), moved.leaders(), movedAfter.Round(time.Millisecond),
		fmtFailover(r.producer, r.producerOK), time.Since(restarted).Round(time.Millisecond))
	return r
}

// pauseAndResume SIGSTOPs broker id past the session timeout, then
// SIGCONTs it (holdFault).
func (h *replHarness) pauseAndResume(label string, id int32) faultResult {
	h.t.Helper()
	p := h.c.procs[id-1]
	return h.holdFault(label, id, "paused", "SIGCONT", true, func() {
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			h.t.Fatalf("%s: SIGSTOP broker %d: %v", label, id, err)
		}
	}, func() {
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			h.t.Fatalf("%s: SIGCONT broker %d: %v", label, id, err)
		}
	})
}

// isolateAndHeal cuts broker id off from the other brokers (every link
// between them black-holed; clients still reach it), then heals the
// links (holdFault).
func (h *replHarness) isolateAndHeal(label string, id int32) faultResult {
	h.t.Helper()
	return h.holdFault(label, id, "cut off", "the heal", true,
		func() { h.c.links.isolate(id, linkBlackhole) },
		func() { h.c.links.heal() })
}

// oneWayCutAndHeal holds every byte broker id sends to the other brokers
// (it still receives theirs) past the session timeout, then heals the cut
// with its Raft links slowed for 2 s (a catch-up after a long cut), and
// returns what holdFault does.
func (h *replHarness) oneWayCutAndHeal(label string, id int32) faultResult {
	h.t.Helper()
	return h.holdFault(label, id, "cut off one way", "the heal", true,
		func() { h.c.links.mute(id) },
		func() {
			h.c.links.healSlowRaft(id, 300*time.Millisecond)
			time.Sleep(2 * time.Second)
			h.c.links.heal()
		})
}

// deafAndHeal holds every byte the other brokers send to broker id (it
// still sends: its heartbeats reach the controller, the answers never
// come back) past the session timeout, then heals the cut. Its lease
// lapses, and the controller stops hearing it once a connection has to
// be re-established, so its leaderships move; it returns what holdFault
// does.
func (h *replHarness) deafAndHeal(label string, id int32) faultResult {
	h.t.Helper()
	return h.holdFault(label, id, "made deaf", "the heal", true,
		func() { h.c.links.deafen(id) },
		func() { h.c.links.heal() })
}

// zombieAndHeal makes broker id a zombie leader: cut off from the other
// brokers, out of the producers' reach, and the only broker the zombie
// side's clients can reach (a client on its side of the partition). The
// others elect new leaders; the zombie must stop acknowledging once its
// lease lapses, and name no leader on itself to its clients.
func (h *replHarness) zombieAndHeal(label string, id int32) faultResult {
	h.t.Helper()
	return h.holdFault(label, id, "made a zombie", "the heal", true,
		func() {
			h.c.links.isolate(id, linkBlackhole)
			h.clients.cut(sideMain, id, linkBlackhole)
			h.clients.onlyTo(sideZombie, id, linkBlackhole)
		},
		func() {
			h.c.links.heal()
			h.clients.heal()
		})
}

// clientCutAndHeal cuts the producers off from broker id (black-holed)
// while every broker still reaches every other: a client-side partition.
// No failover is expected (the leader is healthy; Kafka's the same): the
// leaders must not move, and the producers resume after the heal.
func (h *replHarness) clientCutAndHeal(label string, id int32) faultResult {
	h.t.Helper()
	before, led, start := h.begin(id)
	h.clients.cut(sideMain, id, linkBlackhole)
	time.Sleep(replSessionTimeout + 2*time.Second)
	h.clients.heal()
	ended := time.Now()
	h.faults = append(h.faults, faultWindow{kind: "client-cut", start: start, end: ended})
	var r faultResult
	r.producer, r.producerOK = h.waitAck(label, len(led) > 0)
	h.view = h.c.waitFullISR(h.ctx, h.topic, h.parts, 3, h.waitMax)
	for p, was := range before.Parts {
		if now := h.view.Parts[p]; now.Leader != was.Leader || now.Epoch != was.Epoch {
			h.t.Errorf("%s: partition %d's leadership moved (broker %d epoch %d -> broker %d epoch %d) though only clients were cut off",
				label, p, was.Leader, was.Epoch, now.Leader, now.Epoch)
		}
	}
	h.t.Logf("%s: producers cut off from broker %d (leading %v) for %v; first ack after %s",
		label, id, sortedParts(led), ended.Sub(start).Round(time.Millisecond), fmtFailover(r.producer, r.producerOK))
	return r
}

// holdFault injects a fault on broker id that lasts (pause, cut), waits
// until the other brokers agree on new leaders for its partitions, keeps
// the fault for at least the session timeout + 2 s, undoes it, waits for
// the first acknowledgement of a record produced after the fault to a
// partition id led, then for every ISR to be full again with every broker
// agreeing; it logs what happened and returns what it measured.
func (h *replHarness) holdFault(label string, id int32, did, undone string, failover bool, inject, undo func()) faultResult {
	h.t.Helper()
	before, led, start := h.begin(id)
	inject()
	moved := h.c.waitLeadersMoved(h.ctx, h.topic, before, id, h.others(id), h.waitMax)
	movedAfter := time.Since(start)
	if rest := replSessionTimeout + 2*time.Second - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	undo()
	ended := time.Now()
	h.faults = append(h.faults, faultWindow{kind: did, start: start, end: ended})
	var r faultResult
	r.producer, r.producerOK = h.waitAck(label, len(led) > 0)
	r.cluster, r.clusterOK = movedAfter, failover && len(led) > 0
	h.view = h.c.waitFullISR(h.ctx, h.topic, h.parts, 3, h.waitMax)
	h.checkNoCollateral(label, before, id)
	h.t.Logf("%s: %s broker %d (controller %d, leading %v) for %v; leaders %v -> %v after %v; first ack after %s; ISR full %v after %s",
		label, did, id, before.Controller, sortedParts(led), ended.Sub(start).Round(time.Millisecond), before.leaders(), moved.leaders(),
		movedAfter.Round(time.Millisecond), fmtFailover(r.producer, r.producerOK), time.Since(ended).Round(time.Millisecond), undone)
	return r
}

// killAllAndRestart SIGKILLs every broker, restarts them all, and waits
// for the first acknowledgement of a record produced after the kill (any
// partition), then for every ISR to be full again. cluster is the time
// from the kill until every broker names a leader for every partition.
func (h *replHarness) killAllAndRestart(label string) faultResult {
	h.t.Helper()
	h.prods.clock.arm(nil)
	start := time.Now()
	for _, id := range h.c.running() {
		h.c.procs[id-1].kill()
	}
	for id := 1; id <= len(h.c.procs); id++ {
		h.c.startReplicated(id)
	}
	restartedAfter := time.Since(start)
	h.faults = append(h.faults, faultWindow{kind: "kill-all", start: start, end: time.Now()})
	var r faultResult
	h.c.pollViews(h.ctx, h.c.running(), h.topic, h.waitMax, "a leader for every partition on every broker", func(vs []topicView) bool {
		for _, v := range vs {
			if len(v.Parts) != h.parts {
				return false
			}
			for _, p := range v.Parts {
				if p.Leader <= 0 {
					return false
				}
			}
		}
		return true
	})
	r.cluster, r.clusterOK = time.Since(start), true
	r.producer, r.producerOK = h.waitAck(label, true)
	h.view = h.c.waitFullISR(h.ctx, h.topic, h.parts, 3, h.waitMax)
	h.t.Logf("%s: killed all brokers, all restarted after %v; leaders after %v; first ack after %s; ISR full %v after the kill; leaders %v",
		label, restartedAfter.Round(time.Millisecond), r.cluster.Round(time.Millisecond), fmtFailover(r.producer, r.producerOK),
		time.Since(start).Round(time.Millisecond), h.view.leaders())
	return r
}

// fmtFailover formats a failover time, "n/a" when it was not measured.
func fmtFailover(d time.Duration, measured bool) string {
	if !measured {
		return "n/a"
	}
	return d.Round(time.Millisecond).String()
}

// newReplHarness starts a cluster of three brokers with the replication
// flags (their links through in-test proxies, the clients' too), creates
// topic with parts partitions, replication factor 3 and
// min.insync.replicas 2, waits for every ISR to be full and starts three
// producers at 200 records/s each on the main client side. Each wait is
// bounded by waitMax, and so is the first acknowledgement after a fault.
func newReplHarness(t *testing.T, topic string, parts int, total, waitMax, deliveryTimeout time.Duration) *replHarness {
	return newReplHarnessSpares(t, topic, parts, 0, total, waitMax, deliveryTimeout)
}

// newReplHarnessSpares is newReplHarness with spares broker-only nodes
// beside the three voters (the drain fault moves replicas onto them).
func newReplHarnessSpares(t *testing.T, topic string, parts, spares int, total, waitMax, deliveryTimeout time.Duration) *replHarness {
	t.Helper()
	ringlogBinary(t) // build it before the clock starts
	c := newTestClusterSpares(t, 3, spares)
	newLinkNet(t, c)
	clients := newClientNet(t, c, sideMain, sideZombie)
	for id := 1; id <= 3+spares; id++ {
		c.startReplicated(id)
	}
	ctx := deadlineCtx(t, total)
	c.converge(ctx, 3+spares)
	adm := kadm.NewClient(procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...)))
	res, err := adm.CreateTopic(ctx, int32(parts), 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatalf("create %s with RF 3: %v", topic, err)
	}
	h := &replHarness{t: t, ctx: ctx, c: c, clients: clients, topic: topic, parts: parts, waitMax: waitMax, ackWait: waitMax}
	h.view = c.waitFullISR(ctx, topic, parts, 3, waitMax)
	t.Logf("%s: controller %d, leaders %v, epochs and ISRs %+v", topic, h.view.Controller, h.view.leaders(), h.view.Parts)
	h.prods = startReplProducers(t, ctx, c.kafka, topic, 3, 200, deliveryTimeout, clients.dialer(sideMain))
	return h
}

// TestReplicationFailover runs three idempotent acks=all producers against
// a topic with 6 partitions, RF 3 and min.insync.replicas 2 through four
// faults, each followed by a return to full ISRs: (a) the broker leading
// the most partitions is killed and restarted, (b) partition 0's leader is
// paused past the session timeout and resumed, (c) the controller is
// killed and restarted, (d) partition 1's leader is cut off from the other
// brokers, (e) a leader that is not the controller is made deaf to the
// other brokers (what it sends arrives, their answers do not). No record may fail (the delivery timeout is far longer than
// any fault), and checkReplicatedLog must pass.
func TestReplicationFailover(t *testing.T) {
	const topic, parts = "repl", 6
	h := newReplHarness(t, topic, parts, 150*time.Second, 30*time.Second, 60*time.Second)
	h.prods.waitAcked(500, "before the first fault")

	fa := h.killAndRestart("(a) kill the broker leading the most partitions", h.view.mostLeading())
	fb := h.pauseAndResume("(b) pause partition 0's leader", h.view.Parts[0].Leader)
	fc := h.killAndRestart("(c) kill the controller", h.view.Controller)
	fd := h.isolateAndHeal("(d) cut partition 1's leader off the other brokers", h.view.Parts[1].Leader)
	deaf := h.view.Parts[2].Leader
	for _, p := range h.view.Parts {
		if p.Leader != h.view.Controller { // a deaf controller loses office by Raft alone
			deaf = p.Leader
			break
		}
	}
	fe := h.deafAndHeal("(e) make a leader other than the controller deaf to the other brokers", deaf)
	h.prods.waitAcked(300, "after the last fault")

	acked, failed := h.prods.finish(h.ctx)
	t.Logf("failover, cluster side / producer side: (a) leader kill %s / %s, (b) leader pause %s / %s, (c) controller kill %s / %s, (d) leader cut off %s / %s, (e) deaf leader %s / %s",
		fmtFailover(fa.cluster, fa.clusterOK), fmtFailover(fa.producer, fa.producerOK),
		fmtFailover(fb.cluster, fb.clusterOK), fmtFailover(fb.producer, fb.producerOK),
		fmtFailover(fc.cluster, fc.clusterOK), fmtFailover(fc.producer, fc.producerOK),
		fmtFailover(fd.cluster, fd.clusterOK), fmtFailover(fd.producer, fd.producerOK),
		fmtFailover(fe.cluster, fe.clusterOK), fmtFailover(fe.producer, fe.producerOK))
	if len(failed) > 0 {
		t.Errorf("%d records failed (delivery timeout 60 s), e.g. %s", len(failed), someFailures(failed))
	}
	for _, c := range h.collateral {
		t.Errorf("false failover: %s", c)
	}
	checkReplicatedLog(t, h.ctx, h.c, topic, parts, h.view, acked, h.prods.sentCounts())
}
