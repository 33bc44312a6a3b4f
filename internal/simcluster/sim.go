package simcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/metadata"
)

// Simulation drives a Cluster through random steps drawn from a seed:
// acks=all produces, link faults (both directions, one direction, a
// broker cut off from everyone, a client cut off from a broker, slow
// links), heals, crashes and restarts, preferred leader elections, voter
// changes, partition reassignments; after every step it checks the invariants
// (Check). The same seed draws the same steps (Draw); their timing, and so
// what each meets, is the machine's.
type Simulation struct {
	C     *Cluster
	Seed  uint64
	Topic string
	// Partitions and RF shape the topic the simulation writes.
	Partitions int
	RF         int16

	// acked is every record acknowledged: its value → where.
	acked map[string]position
	// leaders is the leader seen for each partition and leader epoch.
	leaders map[epochKey]int32
	down    int32 // the node crashed or stopped, 0 when none
	next    int   // the next record's number
	voters  int   // the founding voters: changeVoters keeps about so many
	// Log is one line per step taken, for the failure report.
	Log []string
}

type position struct {
	partition int32
	offset    int64
}

type epochKey struct {
	topic     string
	partition int
	epoch     int32
}

// NewSimulation creates the simulation's topic on c.
func NewSimulation(ctx context.Context, c *Cluster, seed uint64) (*Simulation, error) {
	s := &Simulation{C: c, Seed: seed, Topic: "sim", Partitions: 3, RF: 3,
		acked: map[string]position{}, leaders: map[epochKey]int32{},
		voters: len(c.voters)}
	if err := c.WaitController(ctx); err != nil {
		return nil, err
	}
	adm := kadm.NewClient(c.Client())
	for {
		res, err := adm.CreateTopic(ctx, int32(s.Partitions), s.RF, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, s.Topic)
		if err == nil && res.Err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("simcluster: create %s: %v %v", s.Topic, err, res.Err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Its replicas in sync before the first step: a step's faults, not
	// the topic's birth, decide what is acknowledged.
	if err := s.waitInSync(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Step takes step number i: the action Draw gives the seed and i, then
// Check.
func (s *Simulation) Step(ctx context.Context, i int) error {
	a := Draw(s.Seed, i, s.brokers(), s.Partitions)
	outcome := s.do(ctx, a)
	desc := a.String()
	if outcome != "" {
		desc += ": " + outcome
	}
	s.Log = append(s.Log, fmt.Sprintf("%d: %s", i, desc))
	if err := s.Check(); err != nil {
		return fmt.Errorf("after step %d (%s): %w", i, desc, err)
	}
	return nil
}

// brokers are the broker ids.
func (s *Simulation) brokers() []int32 {
	var out []int32
	for _, n := range s.C.Nodes() {
		out = append(out, n.ID)
	}
	return out
}

// ActionKind names what an Action does.
type ActionKind int

// The kinds of action, in the order Draw weighs them.
const (
	Produce        ActionKind = iota // Count records, acks=all
	PartitionLink                    // A and B cannot reach each other
	CutLink                          // A cannot reach B
	Isolate                          // A reaches no broker and no client
	CutClients                       // the clients cannot reach A
	DelayLink                        // A's packets to B wait Delay
	Heal                             // every link back
	DownOrRestart                    // restart the node that is down, else crash (Crash) or stop A
	ElectPreferred                   // a preferred leader election of every partition
	Reassign                         // move Partition to Target
	ChangeVoters                     // add or remove a voter, chosen by Pick
	Wait                             // nothing for Delay
)

// Action is one step of a simulation. Draw makes it from the seed and the
// step's number alone, never from the cluster's state, so a seed draws the
// same actions on every run whatever the earlier steps found; what an
// action meets (a leader, a voter set, a node already down) is the
// cluster's.
type Action struct {
	Kind      ActionKind
	A, B      int32         // the brokers it acts on
	Count     int           // Produce: how many records
	Delay     time.Duration // DelayLink, Wait
	Crash     bool          // DownOrRestart: crash, not a clean stop
	Partition int32         // Reassign
	Target    []int32       // Reassign: the new replicas, preferred leader first
	Pick      int           // ChangeVoters: which voter or observer, modulo their count
}

// Draw is step number step of seed's simulation over brokers and a topic
// of partitions partitions. Each step has a generator of its own, seeded
// by both numbers: a step's draws never shift a later step's.
func Draw(seed uint64, step int, brokers []int32, partitions int) Action {
	rng := rand.New(rand.NewPCG(seed, uint64(step)^0x9e3779b97f4a7c15))
	i := rng.IntN(len(brokers))
	a := Action{A: brokers[i], B: brokers[(i+1+rng.IntN(len(brokers)-1))%len(brokers)]}
	switch w := rng.IntN(25); {
	case w < 7:
		a.Kind, a.Count = Produce, 1+rng.IntN(20)
	case w < 8:
		a.Kind = PartitionLink
	case w < 9:
		a.Kind = CutLink
	case w < 10:
		a.Kind = Isolate
	case w < 11:
		a.Kind = CutClients
	case w < 12:
		a.Kind, a.Delay = DelayLink, time.Duration(10+rng.IntN(90))*time.Millisecond
	case w < 16:
		a.Kind = Heal
	case w < 18:
		a.Kind, a.Crash = DownOrRestart, rng.IntN(3) > 0
	case w < 19:
		a.Kind = ElectPreferred
	case w < 21:
		a.Kind, a.Partition = Reassign, int32(rng.IntN(partitions))
		b := slices.Clone(brokers)
		rng.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
		a.Target = b[:2+rng.IntN(min(len(b), 3)-1)]
	case w < 22:
		a.Kind, a.Pick = ChangeVoters, rng.IntN(1<<16)
	default:
		a.Kind, a.Delay = Wait, time.Duration(100+rng.IntN(1900))*time.Millisecond
	}
	return a
}

// String says what the action is, as the step log shows it.
func (a Action) String() string {
	switch a.Kind {
	case Produce:
		return fmt.Sprintf("produce %d", a.Count)
	case PartitionLink:
		return fmt.Sprintf("partition %d and %d", a.A, a.B)
	case CutLink:
		return fmt.Sprintf("cut %d→%d", a.A, a.B)
	case Isolate:
		return fmt.Sprintf("isolate %d", a.A)
	case CutClients:
		return fmt.Sprintf("cut the clients from %d", a.A)
	case DelayLink:
		return fmt.Sprintf("delay %d→%d by %v", a.A, a.B, a.Delay)
	case Heal:
		return "heal"
	case DownOrRestart:
		return fmt.Sprintf("restart the node down, or %s %d", map[bool]string{true: "crash", false: "stop"}[a.Crash], a.A)
	case ElectPreferred:
		return "elect preferred leaders"
	case Reassign:
		return fmt.Sprintf("reassign partition %d to %v", a.Partition, a.Target)
	case ChangeVoters:
		return fmt.Sprintf("change voters (pick %d)", a.Pick)
	case Wait:
		return fmt.Sprintf("wait %v", a.Delay)
	}
	return fmt.Sprintf("action %d", a.Kind)
}

// do takes action a and says what came of it.
func (s *Simulation) do(ctx context.Context, a Action) string {
	n := s.C.Net
	switch a.Kind {
	case Produce:
		return s.produce(ctx, a.Count)
	case PartitionLink:
		n.Partition(a.A, a.B)
	case CutLink:
		n.Cut(a.A, a.B)
	case Isolate:
		for _, b := range append(s.brokers(), Client) {
			if b != a.A {
				n.Partition(a.A, b)
			}
		}
	case CutClients:
		n.Partition(Client, a.A)
	case DelayLink:
		n.Delay(a.A, a.B, a.Delay)
	case Heal:
		n.Heal()
	case DownOrRestart:
		return s.downOrRestart(a)
	case ElectPreferred:
		return s.electPreferred(ctx)
	case Reassign:
		return s.reassign(ctx, a.Partition, a.Target)
	case ChangeVoters:
		return s.changeVoters(ctx, a.Pick)
	case Wait:
		select {
		case <-ctx.Done():
		case <-time.After(a.Delay):
		}
	}
	return ""
}

// downOrRestart restarts the node that is down, or takes a.A down when
// none is.
func (s *Simulation) downOrRestart(a Action) string {
	if s.down != 0 {
		id := s.down
		if err := s.C.Restart(id); err != nil {
			return fmt.Sprintf("restart %d: %v", id, err)
		}
		s.down = 0
		return fmt.Sprintf("restarted %d", id)
	}
	what, down := "stopped", s.C.Stop
	if a.Crash {
		what, down = "crashed", s.C.Crash
	}
	s.down = a.A
	if err := down(a.A); err != nil {
		return fmt.Sprintf("%s %d: %v", what, a.A, err)
	}
	return fmt.Sprintf("%s %d", what, a.A)
}

// electPreferred asks for preferred leader elections of every partition
// (leadership moves between live brokers, under whatever faults hold).
func (s *Simulation) electPreferred(ctx context.Context) string {
	cl, err := s.C.NewClient()
	if err != nil {
		return fmt.Sprintf("no client: %v", err)
	}
	defer cl.Close()
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := kadm.NewClient(cl).ElectLeaders(ectx, kadm.ElectPreferredReplica, nil)
	if err != nil {
		return err.Error()
	}
	moved, failed := 0, 0
	for _, ps := range res {
		for _, r := range ps {
			if r.Err != nil {
				failed++
			} else {
				moved++
			}
		}
	}
	return fmt.Sprintf("%d moved, %d could not", moved, failed)
}

// reassign moves partition p of the topic to target (two or three of
// the brokers in a random order): a move that drops a replica, adds one
// from an empty log, or only changes the preferred leader.
func (s *Simulation) reassign(ctx context.Context, p int32, target []int32) string {
	cl, err := s.C.NewClient()
	if err != nil {
		return fmt.Sprintf("no client: %v", err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req := kadm.AlterPartitionAssignmentsReq{}
	req.Assign(s.Topic, p, target)
	res, err := kadm.NewClient(cl).AlterPartitionAssignments(rctx, req)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		return err.Error()
	}
	return "done"
}

// changeVoters rotates the metadata quorum's voters (KIP-853's
// AddRaftVoter and RemoveRaftVoter, as `ringlog cluster quorum` sends
// them): with more voters than it began with, a random voter leaves (it
// stays on as an observer); otherwise a random observer becomes a voter.
// pick chooses which, modulo how many there are. Under the faults of the
// moment either may be refused.
func (s *Simulation) changeVoters(ctx context.Context, pick int) string {
	cl, err := s.C.NewClient()
	if err != nil {
		return fmt.Sprintf("no client: %v", err)
	}
	defer cl.Close()
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	dq := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
	dq.Topics = append(dq.Topics, rt)
	resp, err := dq.RequestWith(qctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Sprintf("describe the quorum: %v", err)
	}
	p := resp.Topics[0].Partitions[0]
	choose := func(rs []kmsg.DescribeQuorumResponseTopicPartitionReplicaState) int32 {
		return rs[pick%len(rs)].ReplicaID
	}
	switch {
	case len(p.CurrentVoters) > s.voters:
		id := choose(p.CurrentVoters)
		req := kmsg.NewPtrRemoveRaftVoterRequest()
		req.VoterID = id
		r, err := req.RequestWith(qctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(r.ErrorCode)
		}
		return fmt.Sprintf("remove voter %d: %v", id, err)
	case len(p.Observers) > 0:
		id := choose(p.Observers)
		req := kmsg.NewPtrAddRaftVoterRequest()
		req.VoterID, req.TimeoutMillis = id, 3000
		r, err := req.RequestWith(qctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(r.ErrorCode)
		}
		return fmt.Sprintf("add voter %d: %v", id, err)
	}
	return "no observer to promote"
}

// produce sends count records acks=all and remembers those acknowledged.
func (s *Simulation) produce(ctx context.Context, count int) string {
	recs := make([]*kgo.Record, count)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "s%d-%d", s.Seed, s.next)}
		s.next++
	}
	// A client of its own, closed after 5 s: franz-go keeps records
	// whose partition it cannot reach buffered past their context and
	// delivery timeout; closing the client fails them.
	cl, err := s.C.NewClient(kgo.DefaultProduceTopic(s.Topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(4*time.Second), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		return fmt.Sprintf("no client: %v", err)
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stop := context.AfterFunc(pctx, cl.Close)
	defer stop()
	ok := 0
	var firstErr error
	for _, r := range cl.ProduceSync(pctx, recs...) {
		if r.Err != nil {
			if firstErr == nil {
				firstErr = r.Err
			}
			continue
		}
		s.acked[string(r.Record.Value)] = position{r.Record.Partition, r.Record.Offset}
		ok++
	}
	if firstErr != nil {
		return fmt.Sprintf("%d acknowledged (%v)", ok, firstErr)
	}
	return "all acknowledged"
}

// Check verifies, on every running broker: each partition's ISR is a
// subset of its replicas and holds its leader; no two brokers ever named
// different leaders for one leader epoch; a leader's high watermark is no
// higher than the log end of any running in-sync replica.
func (s *Simulation) Check() error {
	var errs []error
	for _, n := range s.C.Nodes() {
		b := n.Broker()
		if b == nil {
			continue
		}
		img := b.Cluster().Image()
		for _, t := range img.Topics() {
			for i, p := range t.Partitions {
				if !subset(p.AddingReplicas, p.Replicas) || !subset(p.RemovingReplicas, p.Replicas) || len(p.RemovingReplicas) == len(p.Replicas) {
					errs = append(errs, fmt.Errorf("broker %d: %s-%d is moving from %v to %v: not within its replicas %v", n.ID, t.Name, i, p.RemovingReplicas, p.AddingReplicas, p.Replicas))
				}
				if !subset(p.ISR, p.Replicas) || len(p.ISR) == 0 {
					errs = append(errs, fmt.Errorf("broker %d: %s-%d has ISR %v outside its replicas %v", n.ID, t.Name, i, p.ISR, p.Replicas))
				}
				if p.Leader != metadata.NoLeader && !slices.Contains(p.ISR, p.Leader) {
					errs = append(errs, fmt.Errorf("broker %d: %s-%d is led by %d, not in its ISR %v", n.ID, t.Name, i, p.Leader, p.ISR))
				}
				if p.Leader == metadata.NoLeader {
					continue
				}
				k := epochKey{t.Name, i, p.LeaderEpoch}
				if prev, seen := s.leaders[k]; seen && prev != p.Leader {
					errs = append(errs, fmt.Errorf("%s-%d leader epoch %d: broker %d's image names leader %d, an earlier image named %d", t.Name, i, p.LeaderEpoch, n.ID, p.Leader, prev))
				}
				s.leaders[k] = p.Leader
			}
		}
		errs = append(errs, s.checkHighWatermarks(n.ID, b.Engine())...)
	}
	return errors.Join(errs...)
}

// checkHighWatermarks compares the high watermark of each partition eng
// leads with the log ends of its running in-sync replicas (the high
// watermark read first: log ends only grow past it).
func (s *Simulation) checkHighWatermarks(id int32, eng *engine.Engine) []error {
	var errs []error
	for _, t := range eng.Topics() {
		for _, p := range t.Partitions() {
			if !p.Hosted() || p.Role() != engine.RoleLeader {
				continue
			}
			hw, st := p.HighWatermark(), p.ReplicaState()
			for _, m := range st.ISR {
				end, ok := s.logEnd(m, t.Name, p.Index)
				if ok && end < hw {
					errs = append(errs, fmt.Errorf("%s: leader %d (epoch %d) has high watermark %d, in-sync replica %d's log ends at %d", p, id, st.LeaderEpoch, hw, m, end))
				}
			}
		}
	}
	return errs
}

// logEnd is the log end of topic-partition on broker id, false when it
// is down or has no log of it.
func (s *Simulation) logEnd(id int32, topic string, partition int32) (int64, bool) {
	b := s.C.Node(id).Broker()
	if b == nil {
		return 0, false
	}
	t := b.Engine().Topic(topic)
	if t == nil {
		return 0, false
	}
	p := t.Partition(partition)
	if p == nil || !p.Hosted() {
		return 0, false
	}
	l, err := p.Log()
	if err != nil {
		return 0, false
	}
	return l.EndOffset(), true
}

// Finish heals every link, restarts the node that is down, waits until
// every replica is back in sync, and reads every partition from its start:
// every record acknowledged must be there, at the offset it was
// acknowledged at.
func (s *Simulation) Finish(ctx context.Context) error {
	s.C.Net.Heal()
	if s.down != 0 {
		if err := s.C.Restart(s.down); err != nil {
			return err
		}
		s.down = 0
	}
	if err := s.C.WaitController(ctx); err != nil {
		return err
	}
	if err := s.waitInSync(ctx); err != nil {
		return err
	}
	if err := s.Check(); err != nil {
		return err
	}
	// A leader the image names may not serve yet (its lease is renewed
	// by its first heartbeat after a restart or a heal): ask again.
	adm := kadm.NewClient(s.C.Client())
	var ends kadm.ListedOffsets
	var err error
	for {
		if ends, err = adm.ListEndOffsets(ctx, s.Topic); err == nil {
			err = ends.Error()
		}
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("simcluster: end offsets of %s: %w", s.Topic, err)
	}
	left := map[int32]int64{} // partition → its end offset, until read
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl := s.C.Client(kgo.ConsumeTopics(s.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]position{}
	for len(left) > 0 {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("simcluster: reading %s back: partitions %v not read to their ends: %w", s.Topic, left, ctx.Err())
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if _, dup := got[string(r.Value)]; !dup {
				got[string(r.Value)] = position{r.Partition, r.Offset}
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	var missing []string
	for v, want := range s.acked {
		if have, ok := got[v]; !ok || have != want {
			missing = append(missing, fmt.Sprintf("%s (acknowledged at %d/%d, read at %v)", v, want.partition, want.offset, have))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("%d of %d acknowledged records lost or moved: %s", len(missing), len(s.acked), strings.Join(missing[:min(10, len(missing))], "; "))
	}
	return nil
}

// waitInSync waits until every partition of the topic has a leader and
// every replica in its ISR, on every broker's image.
func (s *Simulation) waitInSync(ctx context.Context) error {
	for {
		ok := true
		for _, n := range s.C.Nodes() {
			b := n.Broker()
			if b == nil {
				continue
			}
			t := b.Cluster().Image().Topic(s.Topic)
			if t == nil {
				ok = false
				continue
			}
			for _, p := range t.Partitions {
				if p.Leader == metadata.NoLeader || len(p.ISR) != len(p.Replicas) {
					ok = false
				}
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("simcluster: the replicas of %s did not all come back in sync: %w", s.Topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Acknowledged is how many records were acknowledged so far.
func (s *Simulation) Acknowledged() int { return len(s.acked) }

func subset(a, b []int32) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
