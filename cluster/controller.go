package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/peer"
	"github.com/ringlog/ringlog/metadata"
)

// The controller's side of replication (CLUSTER.md a, c): it is the Raft
// leader, and on it one goroutine (controlLoop) watches broker heartbeats,
// fences a broker silent for the session timeout, and keeps every
// partition led by a live member of its ISR. ISR changes that leaders ask
// for (AlterPartition) are checked and committed here too. Every
// partition change goes through ChangePartition's compare-and-set on the
// partition epoch, and the controller's proposals are serialised by
// controller.mu, so the image it decides from is the one it changes.

// controlTick is how often the controller looks for silent brokers and
// leaderless partitions.
const controlTick = 100 * time.Millisecond

// controller is the controller's in-memory state: when each broker was
// last heard from. Only meaningful while this node is the Raft leader.
type controller struct {
	mu sync.Mutex // serialises the controller's partition proposals
	// balancedAt is when the leader balance was last checked (owned by
	// the control loop; zero: not since this node took office).
	balancedAt time.Time
	// prunedAt is when the broker-only nodes were last pruned (control
	// loop).
	prunedAt time.Time
	seenMu   sync.Mutex
	lastSeen map[int32]time.Time
	// reports are the metadata offsets the brokers' heartbeats reported
	// (seenMu), for DescribeQuorum.
	reports map[int32]metadataReport
}

// metadataReport is what a broker's last heartbeat said of its metadata:
// the index applied, when, and when it last was caught up.
type metadataReport struct {
	offset         int64
	at, caughtUpAt time.Time
	// target is the controller's index at targetAt: the broker is caught
	// up when it has applied that much. A new target is taken every half
	// session, so a broker counts as caught up while it applies what the
	// controller had half a session to a session ago.
	target   int64
	targetAt time.Time
	// lagFencedAt is the controller's index once it fenced the broker
	// for lagging (0: not fenced for that): it is unfenced only once it
	// has applied that much, the fence and its elections included.
	lagFencedAt int64
}

// reported records a heartbeat's metadata offset (committed: the
// controller's applied index now; half: half a session) and returns the
// broker's report.
func (k *controller) reported(id int32, offset, committed int64, now time.Time, half time.Duration) metadataReport {
	k.seenMu.Lock()
	defer k.seenMu.Unlock()
	if k.reports == nil {
		k.reports = map[int32]metadataReport{}
	}
	r := k.reports[id]
	r.offset, r.at = offset, now
	if offset >= r.target {
		r.caughtUpAt = now
	}
	if r.targetAt.IsZero() || now.Sub(r.targetAt) >= half {
		r.target, r.targetAt = committed, now
	}
	k.reports[id] = r
	return r
}

// lagFenced records that broker id was fenced for lagging, the
// controller's index being index after it; index 0 clears it.
func (k *controller) lagFenced(id int32, index int64) {
	k.seenMu.Lock()
	defer k.seenMu.Unlock()
	if r, ok := k.reports[id]; ok {
		r.lagFencedAt = index
		k.reports[id] = r
	}
}

// forgetReports drops the metadata reports of an earlier office: a new
// controller knows only what it heard itself.
func (k *controller) forgetReports() {
	k.seenMu.Lock()
	k.reports = nil
	k.seenMu.Unlock()
}

// report is broker id's last metadata report, if any.
func (k *controller) report(id int32) (metadataReport, bool) {
	k.seenMu.Lock()
	defer k.seenMu.Unlock()
	r, ok := k.reports[id]
	return r, ok
}

// heard records a heartbeat (or registration) of broker id.
func (k *controller) heard(id int32, now time.Time) {
	k.seenMu.Lock()
	if k.lastSeen == nil {
		k.lastSeen = map[int32]time.Time{}
	}
	k.lastSeen[id] = now
	k.seenMu.Unlock()
}

// silentSince is when broker id was last heard from; a broker never heard
// by this controller counts from since.
func (k *controller) silentSince(id int32, since time.Time) time.Time {
	k.seenMu.Lock()
	defer k.seenMu.Unlock()
	if t, ok := k.lastSeen[id]; ok && t.After(since) {
		return t
	}
	return since
}

// controlLoop is the controller's decision goroutine (every node runs it;
// it acts while the node is the Raft leader).
func (c *Cluster) controlLoop() {
	defer c.wg.Done()
	tick := time.NewTicker(controlTick)
	defer tick.Stop()
	var since time.Time // when this node took office (in term officeTerm)
	prev := int32(-1)   // the controller before it, when known for sure
	for c.await(tick.C) {
		if !c.node.IsLeader() {
			since = time.Time{}
			continue
		}
		if !since.IsZero() && !c.inOffice() {
			// Office lost and won back between two ticks: another
			// controller served meanwhile and heard the heartbeats this
			// one did not. Take office afresh, or every broker looks
			// silent since this one last heard it.
			since = time.Time{}
		}
		if since.IsZero() {
			// A new controller has no heartbeat history. A broker's
			// lease runs a session from the last heartbeat a
			// controller accepted, which may be just before this
			// one took office (a controller confirms its office with
			// a quorum before it accepts one, so none is accepted
			// after): every broker gets a full session from now, or
			// it could be fenced while it still leads. The
			// controller before this one is the exception: the
			// image names it (every controller commits TakeOffice
			// before it answers a heartbeat), and its broker held
			// only a controller's lease (controllerLease) since it
			// took office, so that much from now is enough: a
			// controller's death costs an election and a third of a
			// session, not a whole one.
			term := c.node.Term()
			var err error
			if prev, err = c.takeOffice(term); err != nil {
				if !errors.Is(err, context.Canceled) {
					c.log.Info("controller: could not take office yet", "term", term, "err", err)
				}
				continue
			}
			since = time.Now()
			c.ctrl.forgetReports()
			c.log.Info("controller: watching broker sessions", "session_timeout", c.cfg.SessionTimeout, "term", term, "previous_controller", prev)
		}
		c.controlOnce(since, prev)
	}
}

// takeOffice makes this node the controller of Raft term term: it applies
// everything committed before (Barrier), cuts its own broker's lease to a
// controller's, and commits TakeOffice, after which brokerHeartbeat
// answers. It returns the controller the image named before, -1 if none
// other than this node.
func (c *Cluster) takeOffice(term uint64) (prev int32, err error) {
	bctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = c.node.Barrier(bctx)
	cancel()
	if err != nil {
		return -1, fmt.Errorf("applying the log before taking office: %w", err)
	}
	if c.node.Term() != term {
		return -1, fmt.Errorf("term %d ended before the log was applied", term)
	}
	o, ok := c.Image().Office()
	if ok && o.Term == term && o.Controller == c.cfg.NodeID {
		// An earlier try in this term timed out, yet its TakeOffice
		// committed (the barrier applied it): the office is taken. The
		// image no longer names the controller before, so none is
		// fenced early.
		c.officeIndex.Store(int64(c.Image().Index()))
		c.officeTerm.Store(term)
		return -1, nil
	}
	prev = -1
	if ok && o.Term < term && o.Controller != c.cfg.NodeID {
		prev = o.Controller
	}
	now := int64(time.Since(c.clockBase))
	c.officeAt.Store(now)
	c.capLease(now + int64(controllerLease(c.cfg.SessionTimeout)))
	pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.propose(pctx, metadata.TakeOffice{Controller: c.cfg.NodeID, Term: term}); err != nil {
		return -1, fmt.Errorf("committing TakeOffice: %w", err)
	}
	c.officeIndex.Store(int64(c.Image().Index()))
	c.officeTerm.Store(term)
	return prev, nil
}

// inOffice reports whether this node took office (committed TakeOffice)
// in the Raft term it is in now: the only term in which it decides or
// grants anything as the controller.
func (c *Cluster) inOffice() bool { return c.officeTerm.Load() == c.node.Term() }

// controlOnce fences silent brokers, then moves leadership and ISR
// membership off fenced brokers. since is when this controller took
// office; prev the controller before it (-1: not known for sure), fenced
// once silent for controllerLease from since.
func (c *Cluster) controlOnce(since time.Time, prev int32) {
	c.ctrl.mu.Lock()
	defer c.ctrl.mu.Unlock()
	// Still in the office it took, checked under the lock: an office
	// lost and won back while this waited for it started another
	// controller's sessions meanwhile, which this one's silence counts
	// know nothing of (the next tick takes office afresh).
	if !c.inOffice() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now := time.Now()
	img := c.Image()
	var fence []metadata.Record
	for _, b := range img.LiveBrokers() {
		from := since
		if b.ID == prev {
			from = since.Add(controllerLease(c.cfg.SessionTimeout) - c.cfg.SessionTimeout)
		}
		if last := c.ctrl.silentSince(b.ID, from); now.Sub(last) > c.cfg.SessionTimeout {
			c.log.Warn("controller: fencing a broker that missed its heartbeats", "broker", b.ID, "broker_epoch", b.Epoch, "silent_for", now.Sub(last).Round(time.Millisecond))
			fence = append(fence, metadata.FenceBroker{ID: b.ID, Epoch: b.Epoch})
		}
	}
	if len(fence) > 0 {
		if err := c.fenceAndElect(ctx, fence); err != nil {
			return
		}
		img = c.Image()
	}
	c.ensureInternalTopic(ctx, img, engine.OffsetsTopic, c.cfg.OffsetsPartitions)
	c.ensureInternalTopic(ctx, img, engine.TransactionStateTopic, c.cfg.TxnStatePartitions)
	c.ensureInternalTopic(ctx, img, engine.ShareStateTopic, engine.ShareStatePartitions)
	c.elect(ctx)
	if now.Sub(c.ctrl.prunedAt) >= min(pruneInterval, c.cfg.BrokerOnlyGrace) {
		c.ctrl.prunedAt = now
		c.pruneBrokerOnly(ctx, now, since)
	}
	if c.cfg.AutoLeaderRebalance {
		switch {
		case c.ctrl.balancedAt.Before(since):
			c.ctrl.balancedAt = now // the first check an interval after taking office
		case now.Sub(c.ctrl.balancedAt) >= c.cfg.LeaderImbalanceCheckInterval:
			c.ctrl.balancedAt = now
			c.rebalanceLeaders(ctx)
		}
	}
}

// pruneInterval is how often the controller looks for broker-only nodes
// to take out of the Raft configuration.
const pruneInterval = 10 * time.Second

// pruneBrokerOnly takes out of the Raft configuration the broker-only
// nodes (non-voters) that this controller has not heard from for
// Config.BrokerOnlyGrace since it took office and that the image has fenced or
// never registered: a stopped broker-only node otherwise stays there for
// good, the leader dialing it every heartbeat, and its address cannot be
// reused. One that comes back joins again.
func (c *Cluster) pruneBrokerOnly(ctx context.Context, now, since time.Time) {
	grace := c.cfg.BrokerOnlyGrace
	if now.Sub(since) < grace {
		return
	}
	_, nonVoters, err := c.node.Members()
	if err != nil {
		return
	}
	img := c.Image()
	for _, id := range nonVoters {
		if b, ok := img.Broker(id); ok && !b.Fenced {
			continue
		}
		if now.Sub(c.ctrl.silentSince(id, since)) < grace {
			continue
		}
		if err := c.node.RemoveNonVoter(ctx, id); err != nil {
			c.log.Warn("controller: could not remove a departed broker-only node from the metadata quorum", "node", id, "err", err)
			continue
		}
		c.log.Info("controller: removed a broker-only node gone for a while from the metadata quorum (it joins again if it comes back)",
			"node", id, "silent_for", now.Sub(c.ctrl.silentSince(id, since)).Round(time.Second))
	}
}

// rebalanceLeaders is auto.leader.rebalance.enable's check: a live broker
// that is the preferred (first) replica of P partitions and leads fewer
// than P·(100-LeaderImbalancePercent)/100 of them gets back, by
// preferred elections, those whose preferred replica may lead now (live
// and in sync). controller.mu held.
func (c *Cluster) rebalanceLeaders(ctx context.Context) {
	img := c.Image()
	preferred, away := map[int32]int{}, map[int32][]admin.PartitionRef{}
	for _, t := range img.Topics() {
		for i, p := range t.Partitions {
			first := p.Replicas[0]
			preferred[first]++
			if p.Leader != first {
				away[first] = append(away[first], admin.PartitionRef{Topic: t.Name, Partition: int32(i)})
			}
		}
	}
	var recs []metadata.Record
	for _, b := range img.LiveBrokers() {
		if len(away[b.ID])*100 <= preferred[b.ID]*c.cfg.LeaderImbalancePercent {
			continue
		}
		for _, ref := range away[b.ID] {
			if rec, err := electionOf(img, admin.PreferredElection, ref); err == nil {
				recs = append(recs, rec)
			}
		}
	}
	if len(recs) == 0 {
		return
	}
	moved := 0
	for _, err := range c.proposeAll(ctx, recs) {
		if err == nil {
			moved++
		}
	}
	c.log.Info("controller: leaders moved back to their preferred replicas (auto.leader.rebalance.enable)", "moved", moved, "asked", len(recs))
}

// fenceAndElect proposes fence (FenceBroker records), then the elections
// that move leadership and ISR membership off the fenced brokers, so that
// nothing can be proposed between them (controller.mu held).
func (c *Cluster) fenceAndElect(ctx context.Context, fence []metadata.Record) error {
	// Guarded: the fencing applies only if no other controller has
	// taken office since this one did (its silence counts are its own).
	guard := metadata.InOffice{Controller: c.cfg.NodeID, Term: c.officeTerm.Load()}
	if _, err := c.propose(ctx, metadata.Batch{Records: append([]metadata.Record{guard}, fence...)}); err != nil {
		c.log.Warn("controller: fencing failed", "err", err)
		return err
	}
	return c.elect(ctx)
}

// elect proposes electionChanges of the current image (controller.mu
// held).
func (c *Cluster) elect(ctx context.Context) error {
	changes := electionChanges(c.Image())
	if len(changes) == 0 {
		return nil
	}
	if _, err := c.propose(ctx, metadata.Batch{Records: changes}); err != nil {
		c.log.Warn("controller: partition leadership changes failed", "changes", len(changes), "err", err)
		return err
	}
	c.log.Info("controller: moved partition leadership or ISR off fenced brokers", "changes", len(changes))
	return nil
}

// electionChanges are the ChangePartition records that keep every
// partition led by a live (registered, unfenced) member of its ISR and
// drop fenced brokers from ISRs. A partition whose ISR has no live member
// loses its leader (offline, no unclean election) and keeps its ISR, so
// that the first of its members to return leads it again.
func electionChanges(img *metadata.Image) []metadata.Record {
	live := func(id int32) bool {
		b, ok := img.Broker(id)
		return ok && !b.Fenced
	}
	var out []metadata.Record
	for _, t := range img.Topics() {
		for i, p := range t.Partitions {
			var liveISR []int32
			for _, id := range p.ISR {
				if live(id) {
					liveISR = append(liveISR, id)
				}
			}
			rec := metadata.ChangePartition{TopicID: t.ID, Partition: int32(i), ExpectedPartitionEpoch: p.PartitionEpoch}
			leaderOK := p.Leader != metadata.NoLeader && live(p.Leader)
			switch {
			case !leaderOK && len(liveISR) > 0:
				// Preferred order: the first replica that is a live ISR member.
				leader := liveISR[0]
				for _, id := range p.Replicas {
					if slices.Contains(liveISR, id) {
						leader = id
						break
					}
				}
				rec.Leader, rec.ISR = &leader, liveISR
			case !leaderOK && p.Leader != metadata.NoLeader:
				none := metadata.NoLeader
				rec.Leader = &none
			case leaderOK && len(liveISR) < len(p.ISR):
				rec.ISR = liveISR
			default:
				continue
			}
			out = append(out, rec)
		}
	}
	return out
}

// AnswerAlterPartition answers a leader's ISR changes (shrink or
// expansion, KIP-497), on the controller: each change is one
// ChangePartition checked against the partition epoch, the leader epoch
// and the requesting broker's epoch; members joining must be live. The
// answers are in the order of a.Changes.
func (c *Cluster) AnswerAlterPartition(ctx context.Context, a peer.AlterPartition) ([]peer.ISRChangeAnswer, error) {
	if err := c.notController(); err != nil {
		return nil, err
	}
	c.ctrl.mu.Lock()
	defer c.ctrl.mu.Unlock()
	out := make([]peer.ISRChangeAnswer, 0, len(a.Changes))
	for _, ch := range a.Changes {
		ans := peer.ISRChangeAnswer{TopicID: ch.TopicID, Partition: ch.Partition, Leader: -1}
		le := ch.LeaderEpoch
		rec := metadata.ChangePartition{TopicID: metadata.UUID(ch.TopicID), Partition: ch.Partition,
			ExpectedPartitionEpoch: ch.PartitionEpoch, LeaderEpoch: &le,
			Requester: &metadata.BrokerEpoch{ID: a.BrokerID, Epoch: a.BrokerEpoch}, ISR: ch.ISR, ISREpochs: ch.ISREpochs}
		if len(ch.ISR) == 0 {
			ans.Err = fmt.Errorf("%w: an empty ISR", kerr.InvalidRequest)
		} else {
			_, ans.Err = c.propose(ctx, rec)
		}
		if t := c.Image().TopicByID(metadata.UUID(ch.TopicID)); t != nil && int(ch.Partition) < len(t.Partitions) && ch.Partition >= 0 {
			p := t.Partitions[ch.Partition]
			ans.Leader, ans.LeaderEpoch, ans.ISR, ans.PartitionEpoch = p.Leader, p.LeaderEpoch, slices.Clone(p.ISR), p.PartitionEpoch
		}
		out = append(out, ans)
	}
	return out, nil
}

// ensureInternalTopic creates one of the cluster's internal topics,
// __consumer_offsets or __transaction_state (internal, compacted, parts
// partitions, replication factor standardReplicationFactor, min.insync.replicas
// min(2, that)) once that many brokers are live, so that it never starts
// with fewer copies than it will have.
func (c *Cluster) ensureInternalTopic(ctx context.Context, img *metadata.Image, name string, parts int32) {
	if img.Topic(name) != nil {
		return
	}
	rf := standardReplicationFactor(len(c.voters))
	if len(img.LiveBrokers()) < rf {
		return
	}
	replicas, err := metadata.PlaceReplicas(img, 0, int(parts), rf)
	if err != nil {
		c.log.Warn("controller: cannot place an internal topic", "topic", name, "err", err)
		return
	}
	rec := metadata.CreateTopic{Name: name, ID: metadata.NewUUID(), Internal: true, Replicas: replicas,
		Configs: map[string]string{"cleanup.policy": "compact", "segment.bytes": "8388608", "min.insync.replicas": strconv.Itoa(min(2, rf))}}
	if _, err := c.propose(ctx, rec); err != nil {
		c.log.Warn("controller: cannot create an internal topic", "topic", name, "err", err)
		return
	}
	c.log.Info("controller: created an internal topic", "topic", name, "partitions", parts, "replication_factor", rf)
}

// ElectLeaders holds elections on the controller (admin.Service): a
// preferred election gives a partition to its first replica when that is
// live and in the ISR; an unclean one gives a partition without a live
// leader to its first live ISR member, or, when the ISR has none, to its
// first live replica alone in a new ISR (what only the old ISR had is
// lost). Each is a ChangePartition, a compare-and-set on the partition
// epoch it was decided from; they are proposed in batches of
// proposeBatch (one commit each, so that controller.mu, which the
// control loop's failovers and AlterPartition also need, is held for a
// few commits, not one per partition), a refused batch one by one. A
// partition named twice is answered once.
func (c *Cluster) ElectLeaders(ctx context.Context, typ admin.ElectionType, parts []admin.PartitionRef) ([]admin.Election, error) {
	if typ != admin.PreferredElection && typ != admin.UncleanElection {
		return nil, fmt.Errorf("%w: election type %d (0 preferred, 1 unclean)", kerr.InvalidRequest, typ)
	}
	if _, err := c.controllerImage(ctx); err != nil {
		return nil, err
	}
	c.ctrl.mu.Lock()
	defer c.ctrl.mu.Unlock()
	img := c.Image()
	all := parts == nil
	if all {
		for _, t := range img.Topics() {
			for i := range t.Partitions {
				parts = append(parts, admin.PartitionRef{Topic: t.Name, Partition: int32(i)})
			}
		}
	}
	out := make([]admin.Election, 0, len(parts))
	seen := map[admin.PartitionRef]bool{}
	var recs []metadata.ChangePartition
	var at []int // out index of each rec
	for _, ref := range parts {
		if seen[ref] {
			continue
		}
		seen[ref] = true
		rec, err := electionOf(img, typ, ref)
		if all && errors.Is(err, kerr.ElectionNotNeeded) {
			continue // as Kafka: only what moves, or cannot
		}
		out = append(out, admin.Election{PartitionRef: ref, Err: err})
		if err == nil {
			recs, at = append(recs, rec), append(at, len(out)-1)
		}
	}
	batch := make([]metadata.Record, len(recs))
	for i, rec := range recs {
		batch[i] = rec
	}
	for i, err := range c.proposeAll(ctx, batch) {
		out[at[i]].Err = err
	}
	for i, rec := range recs {
		if out[at[i]].Err == nil && typ == admin.UncleanElection && len(rec.ISR) == 1 && *rec.Leader == rec.ISR[0] {
			if t := img.TopicByID(rec.TopicID); t != nil && !slices.Contains(t.Partitions[rec.Partition].ISR, *rec.Leader) {
				c.log.Warn("controller: unclean leader election: records only the old ISR had are lost", "topic", t.Name, "partition", rec.Partition,
					"leader", *rec.Leader, "old_isr", t.Partitions[rec.Partition].ISR)
			}
		}
	}
	if len(out) > 0 {
		c.log.Info("controller: leader elections asked for", "type", typ, "partitions", len(parts), "answered", len(out))
	}
	return out, nil
}

// electionOf decides one partition's election of typ (ElectLeaders): the
// change to propose, or why there is none.
func electionOf(img *metadata.Image, typ admin.ElectionType, ref admin.PartitionRef) (metadata.ChangePartition, error) {
	t := img.Topic(ref.Topic)
	if t == nil || ref.Partition < 0 || int(ref.Partition) >= len(t.Partitions) {
		return metadata.ChangePartition{}, fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, ref.Topic, ref.Partition)
	}
	p := t.Partitions[ref.Partition]
	live := func(id int32) bool {
		b, ok := img.Broker(id)
		return ok && !b.Fenced
	}
	rec := metadata.ChangePartition{TopicID: t.ID, Partition: ref.Partition, ExpectedPartitionEpoch: p.PartitionEpoch}
	switch typ {
	case admin.PreferredElection:
		preferred := p.Replicas[0]
		switch {
		case p.Leader == preferred:
			return rec, fmt.Errorf("%w: %s-%d is led by its preferred replica %d", kerr.ElectionNotNeeded, ref.Topic, ref.Partition, preferred)
		case !live(preferred) || !slices.Contains(p.ISR, preferred):
			return rec, fmt.Errorf("%w: %s-%d's preferred replica %d is not live and in sync (ISR %v)", kerr.PreferredLeaderNotAvailable, ref.Topic, ref.Partition, preferred, p.ISR)
		}
		rec.Leader = &preferred
	default:
		if p.Leader != metadata.NoLeader && live(p.Leader) {
			return rec, fmt.Errorf("%w: %s-%d has a live leader, %d", kerr.ElectionNotNeeded, ref.Topic, ref.Partition, p.Leader)
		}
		var liveISR []int32
		for _, id := range p.ISR {
			if live(id) {
				liveISR = append(liveISR, id)
			}
		}
		leader := metadata.NoLeader
		for _, id := range p.Replicas {
			if (len(liveISR) > 0 && slices.Contains(liveISR, id)) || (len(liveISR) == 0 && live(id)) {
				leader = id
				break
			}
		}
		if leader == metadata.NoLeader {
			return rec, fmt.Errorf("%w: no replica of %s-%d (%v) is live", kerr.EligibleLeadersNotAvailable, ref.Topic, ref.Partition, p.Replicas)
		}
		rec.Leader, rec.ISR = &leader, liveISR
		if len(liveISR) == 0 {
			rec.ISR = []int32{leader}
		}
	}
	return rec, nil
}
