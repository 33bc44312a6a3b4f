package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/peer"
	"github.com/ringlog/ringlog/metadata"
	"github.com/ringlog/ringlog/quorum"
)

// Controller says where requests for the controller go: self on the
// controller (the Raft leader); elsewhere the controller's inter-broker
// address, or an error wrapping NOT_CONTROLLER (which clients and
// brokers retry) when none can be named now.
func (c *Cluster) Controller() (addr string, self bool, err error) {
	if c.node.IsLeader() {
		return "", true, nil
	}
	leader := c.ControllerID()
	if leader < 0 {
		return "", false, fmt.Errorf("%w: no controller is known (election under way)", kerr.NotController)
	}
	b, ok := c.Image().Broker(leader)
	if !ok || b.KafkaAddr == "" {
		return "", false, fmt.Errorf("%w: the controller, broker %d, has not registered its address yet", kerr.NotController, leader)
	}
	return b.KafkaAddr, false, nil
}

// toController runs local on the controller, remote with the
// controller's address elsewhere. A failure to reach the controller, or
// an answer without a Kafka error, becomes NOT_CONTROLLER: retried.
func (c *Cluster) toController(local func() error, remote func(addr string) error) error {
	addr, self, err := c.Controller()
	switch {
	case self:
		return local()
	case err != nil:
		return err
	}
	if err := remote(addr); err != nil {
		var ke *kerr.Error
		if !errors.As(err, &ke) {
			return fmt.Errorf("%w: the controller at %s: %v", kerr.NotController, addr, err)
		}
		return err
	}
	return nil
}

// notController refuses a request meant for the controller on any other
// broker (a broker that sent it here took this one for the controller).
func (c *Cluster) notController() error {
	if c.node.IsLeader() {
		return nil
	}
	return fmt.Errorf("%w: this broker is not the controller", kerr.NotController)
}

// propose commits rec and returns the refusal or failure as an error.
func (c *Cluster) propose(ctx context.Context, rec metadata.Record) (metadata.Result, error) {
	res, err := c.node.Propose(ctx, rec)
	if err == nil {
		err = res.Err
	}
	if errors.Is(err, quorum.ErrUncertain) {
		err = fmt.Errorf("%w: %w", kerr.RequestTimedOut, err)
	}
	return res, controllerError(err)
}

// check applies rec to img without committing it (ValidateOnly).
func check(img *metadata.Image, rec metadata.Record) error {
	_, res := img.Apply(img.Index()+1, rec)
	return res.Err
}

// checkReplicationFactor refuses a replication factor the live brokers
// cannot hold.
func checkReplicationFactor(rf int, live int) error {
	if rf < 1 {
		return fmt.Errorf("%w: replication factor %d: it must be at least 1", kerr.InvalidReplicationFactor, rf)
	}
	if rf > live {
		return fmt.Errorf("%w: replication factor %d is larger than the %d available brokers", kerr.InvalidReplicationFactor, rf, live)
	}
	return nil
}

// Topic describes the topic named name in this broker's image.
func (c *Cluster) Topic(name string) (admin.Topic, bool) {
	if t := c.Image().Topic(name); t != nil {
		return describeTopic(t), true
	}
	return admin.Topic{}, false
}

// TopicByID describes the topic with id in this broker's image.
func (c *Cluster) TopicByID(id [16]byte) (admin.Topic, bool) {
	if t := c.Image().TopicByID(metadata.UUID(id)); t != nil {
		return describeTopic(t), true
	}
	return admin.Topic{}, false
}

func describeTopic(t *metadata.Topic) admin.Topic {
	out := admin.Topic{Name: t.Name, ID: t.ID, Internal: t.Internal, Partitions: int32(len(t.Partitions)), Configs: maps.Clone(t.Configs)}
	if len(t.Partitions) > 0 {
		out.ReplicationFactor = int16(len(t.Partitions[0].TargetReplicas()))
	}
	return out
}

// controllerImage is an image holding everything committed, on the
// controller; elsewhere NOT_CONTROLLER (netio forwards admin requests
// to the controller, so this is a controller that just lost office).
func (c *Cluster) controllerImage(ctx context.Context) (*metadata.Image, error) {
	img, err := c.node.ConsistentImage(ctx)
	if err != nil {
		return nil, controllerError(err)
	}
	return img, nil
}

// controllerError gives a quorum error a Kafka code clients retry.
func controllerError(err error) error {
	var nl *quorum.NotLeaderError
	if errors.As(err, &nl) || errors.Is(err, quorum.ErrStopped) {
		return fmt.Errorf("%w: %w", kerr.NotController, err)
	}
	return err
}

// CreateTopic creates t: replicas placed on the live brokers (or as
// t.Assignment says, every replica a live broker), proposed to the
// quorum. Only the controller creates.
func (c *Cluster) CreateTopic(ctx context.Context, t admin.NewTopic, validateOnly bool) (admin.Topic, error) {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	img, err := c.controllerImage(ctx)
	if err != nil {
		return admin.Topic{}, err
	}
	replicas := t.Assignment
	if replicas != nil {
		if err := checkReplicas(img, replicas, 0); err != nil {
			return admin.Topic{}, err
		}
	} else {
		n, rf := int(t.Partitions), int(t.ReplicationFactor)
		if n == -1 {
			n = int(c.cfg.DefaultPartitions)
		}
		if rf == -1 {
			rf = int(c.cfg.DefaultReplicationFactor)
		}
		if err := checkReplicationFactor(rf, len(img.LiveBrokers())); err != nil {
			return admin.Topic{}, err
		}
		if replicas, err = metadata.PlaceReplicas(img, 0, n, rf); err != nil {
			return admin.Topic{}, err
		}
	}
	configs := t.Configs
	if configs == nil {
		configs = map[string]string{}
	}
	if err := c.eng.CheckTopicConfigsOver(configs, nil, img.BrokerConfigs(), true); err != nil {
		return admin.Topic{}, err
	}
	rec := metadata.CreateTopic{Name: t.Name, ID: metadata.NewUUID(), Replicas: replicas, Configs: configs}
	out := admin.Topic{Name: t.Name, Partitions: int32(len(replicas)), ReplicationFactor: int16(len(replicas[0])), Configs: configs}
	if validateOnly {
		return out, check(img, rec)
	}
	if _, err := c.propose(ctx, rec); err != nil {
		return admin.Topic{}, err
	}
	out.ID = rec.ID
	return out, nil
}

// checkReplicas refuses an assignment naming brokers that are not
// registered and unfenced, or more replicas than there are such brokers.
// first is the first partition's number (error messages).
func checkReplicas(img *metadata.Image, replicas [][]int32, first int) error {
	live := img.LiveBrokers()
	for i, reps := range replicas {
		if err := checkReplicationFactor(len(reps), len(live)); err != nil {
			return err
		}
		for _, id := range reps {
			if !slices.ContainsFunc(live, func(b metadata.Broker) bool { return b.ID == id }) {
				return fmt.Errorf("%w: partition %d: broker %d is not a live broker", kerr.InvalidReplicaAssignment, first+i, id)
			}
		}
	}
	return nil
}

// DeleteTopic deletes the topic named name; each broker removes its
// replicas' data when it applies the record.
func (c *Cluster) DeleteTopic(ctx context.Context, name string, id [16]byte) ([16]byte, error) {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	img, err := c.controllerImage(ctx)
	if err != nil {
		return [16]byte{}, err
	}
	t := img.Topic(name)
	if t == nil {
		return [16]byte{}, fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name)
	}
	if err := describeTopic(t).CheckID(id); err != nil {
		return [16]byte{}, err
	}
	if t.Internal {
		return [16]byte{}, fmt.Errorf("%w: %s is one of the brokers' internal topics", kerr.InvalidTopicException, name)
	}
	_, err = c.propose(ctx, metadata.DeleteTopic{Name: name, ID: t.ID})
	return t.ID, err
}

// CreatePartitions grows a topic; new partitions get the replication
// factor of the first.
func (c *Cluster) CreatePartitions(ctx context.Context, p admin.NewPartitions, validateOnly bool) error {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	img, err := c.controllerImage(ctx)
	if err != nil {
		return err
	}
	t := img.Topic(p.Topic)
	if t == nil {
		return fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, p.Topic)
	}
	if t.Internal {
		// Their keys map to partitions by count: more partitions would
		// move groups and transactional ids away from their state.
		return fmt.Errorf("%w: %s is one of the brokers' internal topics; its partition count is fixed", kerr.InvalidPartitions, p.Topic)
	}
	cur := len(t.Partitions)
	if int(p.Count) <= cur {
		return fmt.Errorf("%w: topic %q has %d partitions; the new count must be larger", kerr.InvalidPartitions, p.Topic, cur)
	}
	rf := len(t.Partitions[0].TargetReplicas())
	replicas := p.Assignment
	if replicas != nil {
		if err := p.CheckAssignment(int32(cur), rf); err != nil {
			return err
		}
		if err := checkReplicas(img, replicas, cur); err != nil {
			return err
		}
	} else if replicas, err = metadata.PlaceReplicas(img, cur, int(p.Count)-cur, rf); err != nil {
		return err
	}
	rec := metadata.CreatePartitions{Name: t.Name, ID: t.ID, Replicas: replicas}
	if validateOnly {
		return check(img, rec)
	}
	_, err = c.propose(ctx, rec)
	return err
}

// AlterConfigs changes a topic's overrides or the cluster-wide broker
// defaults of topic configs (per-broker settings are not replicated).
func (c *Cluster) AlterConfigs(ctx context.Context, ch admin.ConfigChange, validateOnly bool) error {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	img, err := c.controllerImage(ctx)
	if err != nil {
		return err
	}
	if ch.Type == admin.GroupConfigs {
		current := img.GroupConfigs()[ch.Name]
		set, err := ch.Resolve(current, func(k string) string { return current[k] })
		if err != nil {
			return err
		}
		return c.proposeConfigs(ctx, img, metadata.AlterConfigs{Type: metadata.ConfigGroup, Name: ch.Name}, set, validateOnly)
	}
	typ, current := metadata.ConfigBroker, img.BrokerConfigs()
	effective := func(k string) string {
		if v, ok := current[k]; ok {
			return v
		}
		d, _ := engine.LookupTopicConfig(k)
		return d.Default
	}
	if ch.Type == admin.TopicConfigs {
		t := img.Topic(ch.Name)
		if t == nil {
			return fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, ch.Name)
		}
		defaults := current
		typ, current = metadata.ConfigTopic, t.Configs
		effective = func(k string) string {
			if v, ok := current[k]; ok {
				return v
			}
			if v, ok := defaults[k]; ok {
				return v
			}
			d, _ := engine.LookupTopicConfig(k)
			return d.Default
		}
	}
	set, err := ch.Resolve(current, effective)
	if err != nil {
		return err
	}
	if err := c.checkTiered(img, typ, ch.Name, current, set); err != nil {
		return err
	}
	return c.proposeConfigs(ctx, img, metadata.AlterConfigs{Type: typ, Name: ch.Name}, set, validateOnly)
}

// checkTiered refuses a config change that tiered storage cannot take
// (as a single broker does): for a topic, its new configuration must
// pass engine.CheckTopicConfigs; a broker default may not be
// remote.storage.enable, nor leave a tiered topic with a configuration
// that would not.
func (c *Cluster) checkTiered(img *metadata.Image, typ metadata.ConfigResourceType, name string, current map[string]string, set map[string]*string) error {
	if typ == metadata.ConfigTopic {
		return c.eng.CheckTopicConfigsOver(engine.ApplyConfigSet(current, set), current, img.BrokerConfigs(), false)
	}
	if _, ok := set["remote.storage.enable"]; ok {
		return fmt.Errorf("%w: remote.storage.enable is set per topic, not as a broker default", kerr.InvalidConfig)
	}
	defaults := engine.ApplyConfigSet(current, set)
	for _, t := range img.Topics() {
		if on, _ := strconv.ParseBool(strings.TrimSpace(t.Configs["remote.storage.enable"])); !on {
			continue
		}
		if err := c.eng.CheckTopicConfigsOver(t.Configs, t.Configs, defaults, false); err != nil {
			return fmt.Errorf("topic %q is tiered: %w", t.Name, err)
		}
	}
	return nil
}

// proposeConfigs proposes rec with the changes of set (nil: back to the
// default), or only checks it against img with validateOnly.
func (c *Cluster) proposeConfigs(ctx context.Context, img *metadata.Image, rec metadata.AlterConfigs, set map[string]*string, validateOnly bool) error {
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if v := set[k]; v != nil {
			rec.Ops = append(rec.Ops, metadata.ConfigOp{Key: k, Value: *v})
		} else {
			rec.Ops = append(rec.Ops, metadata.ConfigOp{Key: k, Delete: true})
		}
	}
	if validateOnly {
		return check(img, rec)
	}
	_, err := c.propose(ctx, rec)
	return err
}

// AnswerRegistration registers a broker, on the controller: the
// broker's epoch is the index of its RegisterBroker record.
func (c *Cluster) AnswerRegistration(ctx context.Context, r peer.Registration) (int64, error) {
	if err := c.notController(); err != nil {
		return -1, err
	}
	if cid := c.Image().ClusterID(); r.ClusterID != "" && cid != "" && r.ClusterID != cid {
		return -1, fmt.Errorf("%w: broker %d belongs to cluster %s, this is %s", kerr.InconsistentClusterID, r.BrokerID, r.ClusterID, cid)
	}
	if len(r.Listeners) == 0 {
		return -1, fmt.Errorf("%w: no listener (the first is the inter-broker one)", kerr.InvalidRegistration)
	}
	rec := metadata.RegisterBroker{ID: r.BrokerID, Incarnation: r.Incarnation, Listeners: slices.Clone(r.Listeners), Rack: r.Rack}
	rec.KafkaAddr = rec.Listeners[0].Addr
	if len(rec.Listeners) == 1 && rec.Listeners[0].Name == "PLAINTEXT" {
		rec.Listeners = nil // one PLAINTEXT listener: the registration brokers without listeners made
	}
	if v, ok := c.cfg.Voters.Lookup(r.BrokerID); ok {
		rec.ControllerAddr = v.Addr
	}
	res, err := c.propose(ctx, rec)
	if err != nil {
		return -1, err
	}
	return res.BrokerEpoch, nil
}

// AnswerHeartbeat keeps a broker's session alive, on the controller
// (which fences it after SessionTimeout without one), and changes its
// fencing when it asks: WantFence false unfences a fenced broker whose
// metadata has caught up with its registration; WantFence true fences
// it. A heartbeat that changes nothing proposes nothing.
func (c *Cluster) AnswerHeartbeat(ctx context.Context, h peer.Heartbeat) (peer.HeartbeatAnswer, error) {
	ans := peer.HeartbeatAnswer{Fenced: true}
	if err := c.notController(); err != nil {
		return ans, err
	}
	b, ok := c.Image().Broker(h.BrokerID)
	if !ok {
		return ans, fmt.Errorf("%w: broker %d is not registered", kerr.BrokerIDNotRegistered, h.BrokerID)
	}
	if b.Epoch != h.BrokerEpoch {
		return ans, fmt.Errorf("%w: broker %d is registered with epoch %d, not %d", kerr.StaleBrokerEpoch, h.BrokerID, b.Epoch, h.BrokerEpoch)
	}
	now := time.Now()
	c.ctrl.heard(h.BrokerID, now)
	report := c.ctrl.reported(h.BrokerID, h.MetadataOffset, int64(c.Image().Index()), now, c.cfg.SessionTimeout/2)
	// A broker that has not applied what the controller had half a
	// session earlier for a whole session gets no metadata (its Raft
	// link down, a broker-only node's listener unreachable): it would go
	// on leading partitions the controller has moved. It is fenced (its
	// leaderships moved, no lease granted) until it has applied the
	// fence itself and what came before.
	lagging := now.Sub(report.caughtUpAt) > c.cfg.SessionTimeout
	behindFence := (report.lagFencedAt > 0 && h.MetadataOffset < report.lagFencedAt) ||
		(b.Fenced && h.BrokerEpoch < c.officeIndex.Load() && h.MetadataOffset < c.officeIndex.Load())
	// Changes of fencing are serialised with the controller's own
	// fencing and elections (controller.mu), and a fencing carries its
	// elections with it: the unfencing of a broker always comes after
	// the moves of the leaderships it had. CaughtUp is judged under the
	// same lock: a broker told it has caught up holds every fencing and
	// election decided before.
	c.ctrl.mu.Lock()
	defer c.ctrl.mu.Unlock()
	if b, ok = c.Image().Broker(h.BrokerID); !ok || b.Epoch != h.BrokerEpoch {
		return ans, fmt.Errorf("%w: broker %d's registration changed", kerr.StaleBrokerEpoch, h.BrokerID)
	}
	ans.Fenced = b.Fenced
	// Nothing is decided, and no lease granted, before this controller
	// has taken office in its current term (below).
	if !c.inOffice() {
		return ans, fmt.Errorf("%w: this broker is still taking office as the controller", kerr.NotController)
	}
	var err error
	switch {
	case (h.WantFence || lagging) && !b.Fenced:
		if lagging {
			c.log.Warn("controller: fencing a broker whose metadata lags", "broker", h.BrokerID, "metadata_offset", h.MetadataOffset,
				"controller_index", c.Image().Index(), "caught_up", now.Sub(report.caughtUpAt).Round(time.Millisecond).String()+" ago")
		}
		if err = c.fenceAndElect(ctx, []metadata.Record{metadata.FenceBroker{ID: h.BrokerID, Epoch: h.BrokerEpoch}}); err == nil {
			ans.Fenced = true
			if lagging {
				c.ctrl.lagFenced(h.BrokerID, int64(c.Image().Index()))
			}
		}
	case !h.WantFence && !lagging && !behindFence && b.Fenced && h.MetadataOffset >= h.BrokerEpoch:
		if _, err = c.propose(ctx, metadata.UnfenceBroker{ID: h.BrokerID, Epoch: h.BrokerEpoch}); err == nil {
			ans.Fenced = false
			c.ctrl.lagFenced(h.BrokerID, 0)
		}
	}
	ans.MetadataIndex = int64(c.Image().Index())
	ans.CaughtUp = h.MetadataOffset >= ans.MetadataIndex
	if err != nil {
		return ans, err
	}
	// The answer grants the broker a leadership lease of a session from
	// when it sent the heartbeat. A controller that lost its office
	// without noticing yet (resumed from a pause, cut off from the
	// quorum) must not grant one: the next controller counts sessions
	// only from the start of its term. A quorum confirming this one is
	// still the leader proves no next term has started. It also answers
	// only in the term it committed TakeOffice in, checked before
	// (above) and after: the image then names the controller that
	// granted this lease, and its successor fences no broker sooner than
	// it may (controlLoop).
	if verr := c.node.VerifyLeader(ctx); verr != nil {
		return ans, fmt.Errorf("%w: this broker could not confirm it is still the controller: %v", kerr.NotController, verr)
	}
	if !c.inOffice() {
		return ans, fmt.Errorf("%w: this broker's term as the controller ended", kerr.NotController)
	}
	return ans, nil
}

// AnswerAllocateProducerIDs hands broker the next block of producer ids,
// on the controller.
func (c *Cluster) AnswerAllocateProducerIDs(ctx context.Context, broker int32, epoch int64) (peer.ProducerIDs, error) {
	if err := c.notController(); err != nil {
		return peer.ProducerIDs{}, err
	}
	res, err := c.propose(ctx, metadata.AllocateProducerIDs{Broker: broker, BrokerEpoch: epoch, Count: producerIDBlock})
	if err != nil {
		return peer.ProducerIDs{}, err
	}
	return peer.ProducerIDs{First: res.ProducerIDs.First, Count: res.ProducerIDs.Count}, nil
}
