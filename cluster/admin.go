package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/kwire"
	"github.com/ringlog/ringlog/metadata"
	"github.com/ringlog/ringlog/quorum"
)

// Admin answers an internal request of cluster mode (BrokerRegistration,
// BrokerHeartbeat, AllocateProducerIds, AlterPartition). The controller
// proposes the change; any other broker forwards the request to the
// controller and returns its answer, unless forwarded is set (the
// request was itself forwarded): then, and when no controller is known or
// reachable, the answer is NOT_CONTROLLER, which brokers retry.
func (c *Cluster) Admin(ctx context.Context, req kmsg.Request, forwarded bool) kmsg.Response {
	resp, ok, err := c.Forward(ctx, req, forwarded)
	if err != nil {
		return internalError(req, err)
	}
	if ok {
		return resp
	}
	switch r := req.(type) {
	case *kmsg.BrokerRegistrationRequest:
		return c.brokerRegistration(ctx, r)
	case *kmsg.BrokerHeartbeatRequest:
		return c.brokerHeartbeat(ctx, r)
	case *kmsg.AllocateProducerIDsRequest:
		return c.allocateProducerIDsAnswer(ctx, r)
	case *kmsg.AlterPartitionRequest:
		return c.alterPartition(ctx, r)
	}
	return internalError(req, fmt.Errorf("%w: %s is not an internal request", kerr.InvalidRequest, kmsg.NameForKey(req.Key())))
}

// Forward sends req to the controller and returns its answer, true; on
// the controller it returns false: the caller handles req there. A
// request that was itself forwarded (forwarded set), or one no controller
// can take now, gets an error wrapping NOT_CONTROLLER, which clients
// retry.
func (c *Cluster) Forward(ctx context.Context, req kmsg.Request, forwarded bool) (kmsg.Response, bool, error) {
	if c.node.IsLeader() {
		return nil, false, nil
	}
	if forwarded {
		return nil, false, fmt.Errorf("%w: this broker is not the controller", kerr.NotController)
	}
	leader := c.ControllerID()
	if leader < 0 {
		return nil, false, fmt.Errorf("%w: no controller is known (election under way)", kerr.NotController)
	}
	b, ok := c.Image().Broker(leader)
	if !ok {
		return nil, false, fmt.Errorf("%w: the controller, broker %d, has not registered its address yet", kerr.NotController, leader)
	}
	resp, err := kwire.CallWith(ctx, c.kafkaDial, b.KafkaAddr, req)
	if err != nil {
		return nil, false, fmt.Errorf("%w: forwarding to the controller, broker %d: %v", kerr.NotController, leader, err)
	}
	return resp, true, nil
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

// codeOf is err's Kafka code and message.
func codeOf(err error) (int16, *string) {
	if err == nil {
		return 0, nil
	}
	var ke *kerr.Error
	code := kerr.UnknownServerError.Code
	if errors.As(err, &ke) {
		code = ke.Code
	}
	m := err.Error()
	if ke != nil {
		m = strings.TrimPrefix(strings.TrimPrefix(m, ke.Error()), ": ")
	}
	return code, &m
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
		out.ReplicationFactor = int16(len(t.Partitions[0].Replicas))
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
	rf := len(t.Partitions[0].Replicas)
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
	rec := metadata.AlterConfigs{Type: typ, Name: ch.Name}
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
	_, err = c.propose(ctx, rec)
	return err
}

func (c *Cluster) brokerRegistration(ctx context.Context, req *kmsg.BrokerRegistrationRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.BrokerRegistrationResponse)
	resp.BrokerEpoch = -1
	err := func() error {
		if cid := c.Image().ClusterID(); req.ClusterID != "" && cid != "" && req.ClusterID != cid {
			return fmt.Errorf("%w: broker %d belongs to cluster %s, this is %s", kerr.InconsistentClusterID, req.BrokerID, req.ClusterID, cid)
		}
		if len(req.Listeners) == 0 {
			return fmt.Errorf("%w: no listener (the first is the inter-broker one)", kerr.InvalidRegistration)
		}
		rec := metadata.RegisterBroker{ID: req.BrokerID, Incarnation: req.IncarnationID}
		for _, l := range req.Listeners {
			rec.Listeners = append(rec.Listeners, metadata.Listener{Name: l.Name, Addr: net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port)))})
		}
		rec.KafkaAddr = rec.Listeners[0].Addr
		if len(rec.Listeners) == 1 && rec.Listeners[0].Name == "PLAINTEXT" {
			rec.Listeners = nil // one PLAINTEXT listener: the registration brokers without listeners made
		}
		if v, ok := c.cfg.Voters.Lookup(req.BrokerID); ok {
			rec.ControllerAddr = v.Addr
		}
		if req.Rack != nil {
			rec.Rack = *req.Rack
		}
		res, err := c.propose(ctx, rec)
		if err == nil {
			resp.BrokerEpoch = res.BrokerEpoch
		}
		return err
	}()
	resp.ErrorCode, _ = codeOf(err)
	return resp
}

// brokerHeartbeat keeps a broker's session alive (the controller fences
// it after SessionTimeout without one) and changes its fencing when it
// asks: WantFence false unfences a fenced broker whose metadata has caught
// up with its registration; WantFence true fences it. A heartbeat that
// changes nothing proposes nothing.
func (c *Cluster) brokerHeartbeat(ctx context.Context, req *kmsg.BrokerHeartbeatRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
	resp.IsFenced = true
	err := func() error {
		b, ok := c.Image().Broker(req.BrokerID)
		if !ok {
			return fmt.Errorf("%w: broker %d is not registered", kerr.BrokerIDNotRegistered, req.BrokerID)
		}
		if b.Epoch != req.BrokerEpoch {
			return fmt.Errorf("%w: broker %d is registered with epoch %d, not %d", kerr.StaleBrokerEpoch, req.BrokerID, b.Epoch, req.BrokerEpoch)
		}
		c.ctrl.heard(req.BrokerID, time.Now())
		// Changes of fencing are serialised with the controller's own
		// fencing and elections (controller.mu), and a fencing carries
		// its elections with it: the unfencing of a broker always comes
		// after the moves of the leaderships it had. IsCaughtUp is
		// judged under the same lock: a broker told it has caught up
		// holds every fencing and election decided before.
		c.ctrl.mu.Lock()
		defer c.ctrl.mu.Unlock()
		if b, ok = c.Image().Broker(req.BrokerID); !ok || b.Epoch != req.BrokerEpoch {
			return fmt.Errorf("%w: broker %d's registration changed", kerr.StaleBrokerEpoch, req.BrokerID)
		}
		resp.IsFenced = b.Fenced
		// Nothing is decided, and no lease granted, before this
		// controller has taken office in its current term (below).
		if !c.inOffice() {
			return fmt.Errorf("%w: this broker is still taking office as the controller", kerr.NotController)
		}
		var err error
		switch {
		case req.WantFence && !b.Fenced:
			if err = c.fenceAndElect(ctx, []metadata.Record{metadata.FenceBroker{ID: req.BrokerID, Epoch: req.BrokerEpoch}}); err == nil {
				resp.IsFenced = true
			}
		case !req.WantFence && b.Fenced && req.CurrentMetadataOffset >= req.BrokerEpoch:
			if _, err = c.propose(ctx, metadata.UnfenceBroker{ID: req.BrokerID, Epoch: req.BrokerEpoch}); err == nil {
				resp.IsFenced = false
			}
		}
		resp.IsCaughtUp = req.CurrentMetadataOffset >= int64(c.Image().Index())
		if err == nil {
			// The answer grants the broker a leadership lease of a
			// session from when it sent the heartbeat. A controller
			// that lost its office without noticing yet (resumed
			// from a pause, cut off from the quorum) must not grant
			// one: the next controller counts sessions only from the
			// start of its term. A quorum confirming this one is
			// still the leader proves no next term has started.
			// It also answers only in the term it committed
			// TakeOffice in, checked before (above) and after: the
			// image then names the controller that granted this
			// lease, and its successor fences no broker sooner than
			// it may (controlLoop).
			if verr := c.node.VerifyLeader(ctx); verr != nil {
				return fmt.Errorf("%w: this broker could not confirm it is still the controller: %v", kerr.NotController, verr)
			}
			if !c.inOffice() {
				return fmt.Errorf("%w: this broker's term as the controller ended", kerr.NotController)
			}
		}
		return err
	}()
	resp.ErrorCode, _ = codeOf(err)
	return resp
}

func (c *Cluster) allocateProducerIDsAnswer(ctx context.Context, req *kmsg.AllocateProducerIDsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AllocateProducerIDsResponse)
	res, err := c.propose(ctx, metadata.AllocateProducerIDs{Broker: req.BrokerID, BrokerEpoch: req.BrokerEpoch, Count: producerIDBlock})
	if err == nil {
		resp.ProducerIDStart, resp.ProducerIDLen = res.ProducerIDs.First, res.ProducerIDs.Count
	}
	resp.ErrorCode, _ = codeOf(err)
	return resp
}

// internalError answers an internal request with err's code.
func internalError(req kmsg.Request, err error) kmsg.Response {
	code, _ := codeOf(err)
	resp := req.ResponseKind()
	switch rr := resp.(type) {
	case *kmsg.BrokerRegistrationResponse:
		rr.ErrorCode, rr.BrokerEpoch = code, -1
	case *kmsg.BrokerHeartbeatResponse:
		rr.ErrorCode, rr.IsFenced = code, true
	case *kmsg.AllocateProducerIDsResponse:
		rr.ErrorCode = code
	case *kmsg.AlterPartitionResponse:
		rr.ErrorCode = code
	}
	return resp
}
