package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/testenv"
)

// reassignUnderLoad is the chaos harness's reassignment fault, on one
// random partition of the topic under load: its replicas shrink off a
// random one (RF 3 → 2; when that one leads, leadership moves with the
// move), then grow back onto it at a random place in the list (2 → 3: it
// returns with an empty log and copies the leader's). With probability
// 1/2 a broker is SIGKILLed in the middle of the growing move — the
// replica being added, the partition's leader (the source), or the
// controller — and restarted a second later. Each move is waited for:
// no reassignment listed, the replicas the target, every one in sync.
// cluster is from the first Alter until the partition is whole again;
// producer the first acknowledgement on the partition after the start.
// Without a kill no other partition may change leader.
func (h *replHarness) reassignUnderLoad(label string, rng *rand.Rand) faultResult {
	h.t.Helper()
	if h.adm == nil {
		h.adm = kadm.NewClient(procClient(h.t, h.c.kafka[0], kgo.SeedBrokers(h.c.kafka...)))
	}
	before := h.view
	p := int32(rng.IntN(h.parts))
	was := before.Parts[p]
	x := was.Replicas[rng.IntN(len(was.Replicas))]
	var kept []int32
	for _, r := range was.Replicas {
		if r != x {
			kept = append(kept, r)
		}
	}
	rng.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
	grown := slices.Insert(slices.Clone(kept), rng.IntN(len(kept)+1), x)

	h.prods.clock.arm(map[int32]bool{p: true})
	start := time.Now()
	h.alterAssignment(label, p, kept)
	h.waitAssigned(label, p, kept)
	shrunk := time.Since(start)
	h.alterAssignment(label, p, grown)
	victim, role := int32(0), ""
	if rng.IntN(2) == 0 {
		now := h.c.pollViews(h.ctx, h.c.running(), h.topic, h.waitMax, "a view", func([]topicView) bool { return true })[0]
		switch rng.IntN(3) {
		case 0:
			victim, role = x, "the replica being added"
		case 1:
			victim, role = now.Parts[p].Leader, "the partition's leader"
		default:
			victim, role = now.Controller, "the controller"
		}
		if victim <= 0 {
			victim, role = x, "the replica being added"
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		h.c.procs[victim-1].kill()
		time.Sleep(time.Second)
		h.c.startReplicated(int(victim))
	}
	h.waitAssigned(label, p, grown)
	h.faults = append(h.faults, faultWindow{kind: "reassign", start: start, end: time.Now(),
		handedOver: map[string]bool{fmt.Sprintf("%s-%d", h.topic, p): true}})
	var r faultResult
	r.cluster, r.clusterOK = time.Since(start), true
	r.producer, r.producerOK = h.waitAck(label, true)
	h.view = h.c.waitFullISR(h.ctx, h.topic, h.parts, 3, h.waitMax)
	if victim == 0 {
		for q, b := range before.Parts {
			if now := h.view.Parts[q]; int32(q) != p && (now.Leader != b.Leader || now.Epoch != b.Epoch) {
				h.collateral = append(h.collateral, fmt.Sprintf("%s: partition %d (not the one reassigned) moved: broker %d epoch %d -> broker %d epoch %d",
					label, q, b.Leader, b.Epoch, now.Leader, now.Epoch))
			}
		}
	}
	killed := "no kill"
	if victim > 0 {
		killed = fmt.Sprintf("killed broker %d (%s) mid-move", victim, role)
	}
	h.t.Logf("%s: partition %d replicas %v -> %v (%v) -> %v, %s; whole again after %v; first ack after %s",
		label, p, was.Replicas, kept, shrunk.Round(time.Millisecond), grown, killed, r.cluster.Round(time.Millisecond), fmtFailover(r.producer, r.producerOK))
	return r
}

// alterAssignment asks for partition p's replicas to become target,
// retrying while the controller is being replaced.
func (h *replHarness) alterAssignment(label string, p int32, target []int32) {
	h.t.Helper()
	var err error
	if !testenv.Eventually(h.waitMax, func() bool {
		req := kadm.AlterPartitionAssignmentsReq{}
		req.Assign(h.topic, p, target)
		var resps kadm.AlterPartitionAssignmentsResponses
		if resps, err = h.adm.AlterPartitionAssignments(h.ctx, req); err == nil {
			err = resps.Error()
		}
		return err == nil
	}) {
		h.t.Fatalf("%s: reassign partition %d to %v: %v", label, p, target, err)
	}
}

// waitAssigned waits until no reassignment of the topic is listed and
// every running broker says partition p has the replicas of target, all
// in sync, and every other partition is whole.
func (h *replHarness) waitAssigned(label string, p int32, target []int32) {
	h.t.Helper()
	want := sortedIDs(target)
	deadline := time.Now().Add(h.waitMax)
	var listed kadm.ListPartitionReassignmentsResponses
	var err error
	if !testenv.Eventually(h.waitMax, func() bool {
		listed, err = h.adm.ListPartitionReassignments(h.ctx, nil)
		moving := 0
		for _, ps := range listed {
			moving += len(ps)
		}
		return err == nil && moving == 0
	}) {
		h.t.Fatalf("%s: the reassignment of partition %d to %v is still listed after %v: %v %v", label, p, target, h.waitMax, listed, err)
	}
	h.c.pollViews(h.ctx, h.c.running(), h.topic, time.Until(deadline)+h.waitMax, fmt.Sprintf("partition %d of %s on %v, in sync", p, h.topic, target),
		func(vs []topicView) bool {
			if !viewsAgree(vs) || len(vs[0].Parts) != h.parts {
				return false
			}
			for q, pv := range vs[0].Parts {
				if int32(q) == p {
					if !slices.Equal(pv.Replicas, want) || !pv.full(len(want)) {
						return false
					}
				} else if !pv.full(3) {
					return false
				}
			}
			return true
		})
}

// drainUnderLoad is the chaos harness's drain fault (it needs a spare
// broker, newReplHarnessSpares): `ringlog cluster drain X` moves every
// replica off a random broker X holding some of the topic, the internal topics' too, onto the
// others under load, and waits for the moves. Half of the time a broker
// is SIGKILLed mid-drain — X itself, another broker (one receiving
// replicas), or the controller — and restarted a second later; if the
// drain command then gives up it is run again, as an operator would.
// Then no partition of the topic has a replica on X and every one is in
// sync. cluster is from the start until then; producer the first
// acknowledgement, after the start, on a partition X held. Without a kill
// no partition X did not hold may change leader.
func (h *replHarness) drainUnderLoad(label string, rng *rand.Rand) faultResult {
	h.t.Helper()
	before := h.view
	// A broker holding replicas of the topic (the spare of the last
	// drain holds none).
	var holders []int32
	for id := int32(1); id <= int32(len(h.c.procs)); id++ {
		for _, pv := range before.Parts {
			if slices.Contains(pv.Replicas, id) {
				holders = append(holders, id)
				break
			}
		}
	}
	x := holders[rng.IntN(len(holders))]
	held := map[int32]bool{}
	for p, pv := range before.Parts {
		if slices.Contains(pv.Replicas, x) {
			held[int32(p)] = true
		}
	}
	armed := len(held) > 0
	if armed {
		h.prods.clock.arm(held)
	}
	start := time.Now()
	drained := make(chan drainOutcome, 1)
	go func() { drained <- h.runDrain(x) }()
	victim, role := int32(0), ""
	if rng.IntN(2) == 0 {
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
		switch rng.IntN(3) {
		case 0:
			victim, role = x, "the broker drained"
		case 1:
			victim, role = int32(1+rng.IntN(len(h.c.procs))), "a random broker"
		default:
			victim, role = before.Controller, "the controller"
		}
		if victim <= 0 {
			victim, role = x, "the broker drained"
		}
		h.c.procs[victim-1].kill()
		time.Sleep(time.Second)
		h.c.startReplicated(int(victim))
	}
	out := <-drained
	tries := 1
	for out.code != 0 && tries < 4 && victim > 0 {
		h.t.Logf("%s: drain of broker %d gave up after the kill (exit %d): %s; again", label, x, out.code, lastChars(out.stderr, 300))
		out = h.runDrain(x)
		tries++
	}
	if out.code != 0 {
		h.t.Fatalf("%s: ringlog cluster drain %d: exit %d, %v\nstdout:\n%s\nstderr:\n%s", label, x, out.code, out.err, out.stdout, out.stderr)
	}
	v := h.c.pollViews(h.ctx, h.c.running(), h.topic, h.waitMax, fmt.Sprintf("no replica of %s on broker %d, every partition in sync", h.topic, x),
		func(vs []topicView) bool {
			if !viewsAgree(vs) || len(vs[0].Parts) != h.parts || vs[0].Brokers != len(h.c.procs) {
				return false
			}
			for _, pv := range vs[0].Parts {
				if slices.Contains(pv.Replicas, x) || !pv.full(3) {
					return false
				}
			}
			return true
		})[0]
	// Every leadership on x moves, the other topics' too.
	h.faults = append(h.faults, faultWindow{kind: "drain", start: start, end: time.Now(), handedOver: map[string]bool{"*": true}})
	var r faultResult
	r.cluster, r.clusterOK = time.Since(start), true
	r.producer, r.producerOK = h.waitAck(label, armed)
	h.view = v
	if victim == 0 {
		for q, b := range before.Parts {
			if now := h.view.Parts[q]; !held[int32(q)] && (now.Leader != b.Leader || now.Epoch != b.Epoch) {
				h.collateral = append(h.collateral, fmt.Sprintf("%s: partition %d (not on the drained broker %d) moved: broker %d epoch %d -> broker %d epoch %d",
					label, q, x, b.Leader, b.Epoch, now.Leader, now.Epoch))
			}
		}
	}
	killed := "no kill"
	if victim > 0 {
		killed = fmt.Sprintf("killed broker %d (%s) mid-drain", victim, role)
	}
	h.t.Logf("%s: drained broker %d (it held %d of %d partitions of %s; %d tries), %s; done after %v; first ack after %s; leaders %v",
		label, x, len(held), h.parts, h.topic, tries, killed, r.cluster.Round(time.Millisecond), fmtFailover(r.producer, r.producerOK), h.view.leaders())
	return r
}

// drainOutcome is one `ringlog cluster drain` run.
type drainOutcome struct {
	stdout, stderr string
	code           int
	err            error
}

// runDrain runs `ringlog cluster drain x` against every broker (it may
// run in a goroutine: it never fails the test itself).
func (h *replHarness) runDrain(x int32) drainOutcome {
	ctx, cancel := context.WithTimeout(h.ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ringlogBinary(h.t), "cluster", "drain", strconv.Itoa(int(x)), "--timeout", "120s",
		"--brokers", strings.Join(h.c.kafka, ","))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := drainOutcome{stdout: stdout.String(), stderr: stderr.String(), err: err, code: -1}
	if cmd.ProcessState != nil {
		out.code = cmd.ProcessState.ExitCode()
	}
	return out
}
