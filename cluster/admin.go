package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/kwire"
	"github.com/ringlog/ringlog/metadata"
	"github.com/ringlog/ringlog/quorum"
)

// Admin answers an admin request (CreateTopics, DeleteTopics,
// CreatePartitions, AlterConfigs, IncrementalAlterConfigs) or an internal
// one (BrokerRegistration, BrokerHeartbeat, AllocateProducerIds). The
// controller proposes the change; any other broker forwards the request
// to the controller and returns its answer, unless forwarded is set (the
// request was itself forwarded): then, and when no controller is known or
// reachable, the answer is NOT_CONTROLLER, which clients retry.
func (c *Cluster) Admin(ctx context.Context, req kmsg.Request, forwarded bool) kmsg.Response {
	if resp, ok := c.Forward(ctx, req, forwarded); ok {
		return resp
	}
	switch r := req.(type) {
	case *kmsg.CreateTopicsRequest:
		return c.createTopics(ctx, r)
	case *kmsg.DeleteTopicsRequest:
		return c.deleteTopics(ctx, r)
	case *kmsg.CreatePartitionsRequest:
		return c.createPartitions(ctx, r)
	case *kmsg.AlterConfigsRequest:
		return c.alterConfigs(ctx, r)
	case *kmsg.IncrementalAlterConfigsRequest:
		return c.incrementalAlterConfigs(ctx, r)
	case *kmsg.BrokerRegistrationRequest:
		return c.brokerRegistration(ctx, r)
	case *kmsg.BrokerHeartbeatRequest:
		return c.brokerHeartbeat(ctx, r)
	case *kmsg.AllocateProducerIDsRequest:
		return c.allocateProducerIDsAnswer(ctx, r)
	case *kmsg.AlterPartitionRequest:
		return c.alterPartition(ctx, r)
	}
	return errorResponse(req, kerr.InvalidRequest, fmt.Sprintf("%s is not an admin request", kmsg.NameForKey(req.Key())))
}

// Forward sends req to the controller and returns its answer, true; on
// the controller it returns false: the caller handles req there. A
// request that was itself forwarded (forwarded set), or one no controller
// can take now, is answered NOT_CONTROLLER, which clients retry.
func (c *Cluster) Forward(ctx context.Context, req kmsg.Request, forwarded bool) (kmsg.Response, bool) {
	if c.node.IsLeader() {
		return nil, false
	}
	if forwarded {
		return errorResponse(req, kerr.NotController, "this broker is not the controller"), true
	}
	leader := c.ControllerID()
	if leader < 0 {
		return errorResponse(req, kerr.NotController, "no controller is known (election under way)"), true
	}
	b, ok := c.Image().Broker(leader)
	if !ok {
		return errorResponse(req, kerr.NotController, fmt.Sprintf("the controller, broker %d, has not registered its address yet", leader)), true
	}
	resp, err := kwire.CallWith(ctx, c.kafkaDial, b.KafkaAddr, req)
	if err != nil {
		return errorResponse(req, kerr.NotController, fmt.Sprintf("forwarding to the controller, broker %d: %v", leader, err)), true
	}
	return resp, true
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
	return res, err
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

// isInternalName reports whether name is, or collides with, the cluster's
// __consumer_offsets or __transaction_state (created by the controller,
// never by a client).
func isInternalName(name string) bool {
	n := strings.ToLower(strings.ReplaceAll(name, ".", "_"))
	return n == engine.OffsetsTopic || n == engine.TransactionStateTopic
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

func (c *Cluster) createTopics(ctx context.Context, req *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	seen := map[string]int{}
	for _, rt := range req.Topics {
		seen[rt.Topic]++
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewCreateTopicsResponseTopic()
		tr.Topic = rt.Topic
		tr.NumPartitions, tr.ReplicationFactor = -1, -1
		err := c.createTopic(ctx, &rt, req.ValidateOnly, seen[rt.Topic] > 1, &tr)
		tr.ErrorCode, tr.ErrorMessage = codeOf(err)
		resp.Topics = append(resp.Topics, tr)
	}
	return resp
}

func (c *Cluster) createTopic(ctx context.Context, rt *kmsg.CreateTopicsRequestTopic, validateOnly, duplicate bool, tr *kmsg.CreateTopicsResponseTopic) error {
	if duplicate {
		return fmt.Errorf("%w: topic %q appears more than once in the request", kerr.InvalidRequest, rt.Topic)
	}
	if err := engine.ValidateTopicName(rt.Topic); err != nil {
		return err
	}
	if isInternalName(rt.Topic) {
		return fmt.Errorf("%w: %s is the brokers' internal topic", kerr.InvalidTopicException, rt.Topic)
	}
	configs := map[string]string{}
	for _, cf := range rt.Configs {
		if cf.Value == nil {
			continue
		}
		if err := engine.ValidateTopicConfig(cf.Name, *cf.Value); err != nil {
			return fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
		}
		configs[cf.Name] = *cf.Value
	}
	img, err := c.node.ConsistentImage(ctx)
	if err != nil {
		return err
	}
	live := len(img.LiveBrokers())
	var replicas [][]int32
	if len(rt.ReplicaAssignment) > 0 {
		if rt.NumPartitions != -1 || rt.ReplicationFactor != -1 {
			return fmt.Errorf("%w: give either a replica assignment or partition count and replication factor", kerr.InvalidRequest)
		}
		replicas = make([][]int32, len(rt.ReplicaAssignment))
		for _, a := range rt.ReplicaAssignment {
			if a.Partition < 0 || int(a.Partition) >= len(replicas) || replicas[a.Partition] != nil {
				return fmt.Errorf("%w: the assignment must name partitions 0 to %d once each", kerr.InvalidReplicaAssignment, len(replicas)-1)
			}
			if err := checkReplicationFactor(len(a.Replicas), live); err != nil {
				return err
			}
			if len(replicas) > 0 && replicas[0] != nil && len(replicas[0]) != len(a.Replicas) {
				return fmt.Errorf("%w: every partition needs the same number of replicas", kerr.InvalidReplicaAssignment)
			}
			replicas[a.Partition] = a.Replicas
		}
	} else {
		n, rf := int(rt.NumPartitions), int(rt.ReplicationFactor)
		if n == -1 {
			n = int(c.cfg.DefaultPartitions)
		}
		if rf == -1 {
			rf = int(c.cfg.DefaultReplicationFactor)
		}
		if err := checkReplicationFactor(rf, live); err != nil {
			return err
		}
		if replicas, err = metadata.PlaceReplicas(img, 0, n, rf); err != nil {
			return err
		}
	}
	rec := metadata.CreateTopic{Name: rt.Topic, ID: metadata.NewUUID(), Replicas: replicas, Configs: configs}
	tr.NumPartitions, tr.ReplicationFactor = int32(len(replicas)), int16(len(replicas[0]))
	if validateOnly {
		return check(img, rec)
	}
	if _, err := c.propose(ctx, rec); err != nil {
		return err
	}
	tr.TopicID = rec.ID
	return nil
}

func (c *Cluster) deleteTopics(ctx context.Context, req *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	if req.Version >= 6 {
		for _, t := range req.Topics {
			targets = append(targets, target{t.Topic, t.TopicID})
		}
	} else {
		for _, n := range req.TopicNames {
			targets = append(targets, target{name: &n})
		}
	}
	for _, tg := range targets {
		tr := kmsg.NewDeleteTopicsResponseTopic()
		tr.Topic, tr.TopicID = tg.name, tg.id
		rec := metadata.DeleteTopic{ID: metadata.UUID(tg.id)}
		var err error
		img := c.Image()
		switch {
		case tg.name != nil && *tg.name != "":
			rec.Name = *tg.name
			if t := img.Topic(rec.Name); t != nil && tg.id == [16]byte{} {
				tr.TopicID = t.ID
			}
		case tg.id != [16]byte{}:
			if t := img.TopicByID(rec.ID); t != nil {
				n := t.Name
				tr.Topic = &n
			}
		default:
			err = fmt.Errorf("%w: neither a topic name nor an id", kerr.InvalidRequest)
		}
		if t := img.Topic(rec.Name); err == nil && ((t != nil && t.Internal) || (rec.Name == "" && img.TopicByID(rec.ID) != nil && img.TopicByID(rec.ID).Internal)) {
			err = fmt.Errorf("%w: that is one of the brokers' internal topics", kerr.InvalidTopicException)
		}
		if err == nil {
			_, err = c.propose(ctx, rec)
		}
		tr.ErrorCode, tr.ErrorMessage = codeOf(err)
		resp.Topics = append(resp.Topics, tr)
	}
	return resp
}

func (c *Cluster) createPartitions(ctx context.Context, req *kmsg.CreatePartitionsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, rt := range req.Topics {
		tr := kmsg.NewCreatePartitionsResponseTopic()
		tr.Topic = rt.Topic
		err := c.createPartitionsOf(ctx, &rt, req.ValidateOnly)
		tr.ErrorCode, tr.ErrorMessage = codeOf(err)
		resp.Topics = append(resp.Topics, tr)
	}
	return resp
}

func (c *Cluster) createPartitionsOf(ctx context.Context, rt *kmsg.CreatePartitionsRequestTopic, validateOnly bool) error {
	img, err := c.node.ConsistentImage(ctx)
	if err != nil {
		return err
	}
	t := img.Topic(rt.Topic)
	if t == nil {
		return fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, rt.Topic)
	}
	if t.Internal {
		// Their keys map to partitions by count: more partitions would
		// move groups and transactional ids away from their state.
		return fmt.Errorf("%w: %s is one of the brokers' internal topics; its partition count is fixed", kerr.InvalidPartitions, rt.Topic)
	}
	cur := len(t.Partitions)
	if int(rt.Count) <= cur {
		return fmt.Errorf("%w: topic %q has %d partitions; the new count must be larger", kerr.InvalidPartitions, rt.Topic, cur)
	}
	var replicas [][]int32
	if len(rt.Assignment) > 0 {
		if len(rt.Assignment) != int(rt.Count)-cur {
			return fmt.Errorf("%w: %d assignments for %d new partitions", kerr.InvalidReplicaAssignment, len(rt.Assignment), int(rt.Count)-cur)
		}
		for _, a := range rt.Assignment {
			if err := checkReplicationFactor(len(a.Replicas), len(img.LiveBrokers())); err != nil {
				return err
			}
			replicas = append(replicas, a.Replicas)
		}
	} else if replicas, err = metadata.PlaceReplicas(img, cur, int(rt.Count)-cur, len(t.Partitions[0].Replicas)); err != nil {
		return err
	}
	rec := metadata.CreatePartitions{Name: t.Name, ID: t.ID, Replicas: replicas}
	if validateOnly {
		return check(img, rec)
	}
	_, err = c.propose(ctx, rec)
	return err
}

// configTarget turns a config resource into the record's type and name:
// topics, and the cluster-wide broker default (broker resource with an
// empty name). Per-broker settings are not replicated.
func configTarget(typ kmsg.ConfigResourceType, name string) (metadata.ConfigResourceType, error) {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		return metadata.ConfigTopic, nil
	case kmsg.ConfigResourceTypeBroker:
		if name != "" {
			return 0, fmt.Errorf("%w: per-broker configs are not available in cluster mode; alter the cluster-wide default (an empty broker name)", kerr.InvalidRequest)
		}
		return metadata.ConfigBroker, nil
	}
	return 0, fmt.Errorf("%w: config resource type %d is not supported", kerr.InvalidRequest, typ)
}

func validConfigOp(op metadata.ConfigOp) error {
	if op.Delete {
		if _, ok := engine.LookupTopicConfig(op.Key); !ok {
			return fmt.Errorf("%w: unknown topic config %q", kerr.InvalidConfig, op.Key)
		}
		return nil
	}
	if err := engine.ValidateTopicConfig(op.Key, op.Value); err != nil {
		return fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
	}
	return nil
}

func (c *Cluster) alterConfigsOf(ctx context.Context, typ kmsg.ConfigResourceType, name string, ops func(img *metadata.Image, t metadata.ConfigResourceType) ([]metadata.ConfigOp, error), validateOnly bool) error {
	rt, err := configTarget(typ, name)
	if err != nil {
		return err
	}
	img, err := c.node.ConsistentImage(ctx)
	if err != nil {
		return err
	}
	list, err := ops(img, rt)
	if err != nil {
		return err
	}
	for _, op := range list {
		if err := validConfigOp(op); err != nil {
			return err
		}
	}
	rec := metadata.AlterConfigs{Type: rt, Name: name, Ops: list}
	if validateOnly {
		return check(img, rec)
	}
	_, err = c.propose(ctx, rec)
	return err
}

func (c *Cluster) alterConfigs(ctx context.Context, req *kmsg.AlterConfigsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	for _, rr := range req.Resources {
		out := kmsg.NewAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = rr.ResourceType, rr.ResourceName
		// The legacy AlterConfigs replaces every override.
		err := c.alterConfigsOf(ctx, rr.ResourceType, rr.ResourceName, func(img *metadata.Image, t metadata.ConfigResourceType) ([]metadata.ConfigOp, error) {
			have := img.BrokerConfigs()
			if t == metadata.ConfigTopic {
				tp := img.Topic(rr.ResourceName)
				if tp == nil {
					return nil, fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, rr.ResourceName)
				}
				have = tp.Configs
			}
			var ops []metadata.ConfigOp
			given := map[string]bool{}
			for _, cf := range rr.Configs {
				if cf.Value == nil {
					continue
				}
				given[cf.Name] = true
				ops = append(ops, metadata.ConfigOp{Key: cf.Name, Value: *cf.Value})
			}
			for k := range have {
				if !given[k] {
					ops = append(ops, metadata.ConfigOp{Key: k, Delete: true})
				}
			}
			return ops, nil
		}, req.ValidateOnly)
		out.ErrorCode, out.ErrorMessage = codeOf(err)
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

func (c *Cluster) incrementalAlterConfigs(ctx context.Context, req *kmsg.IncrementalAlterConfigsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, rr := range req.Resources {
		out := kmsg.NewIncrementalAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = rr.ResourceType, rr.ResourceName
		err := c.alterConfigsOf(ctx, rr.ResourceType, rr.ResourceName, func(img *metadata.Image, t metadata.ConfigResourceType) ([]metadata.ConfigOp, error) {
			if t == metadata.ConfigTopic && img.Topic(rr.ResourceName) == nil {
				return nil, fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, rr.ResourceName)
			}
			var ops []metadata.ConfigOp
			for _, cf := range rr.Configs {
				switch cf.Op {
				case kmsg.IncrementalAlterConfigOpSet:
					if cf.Value == nil {
						return nil, fmt.Errorf("%w: SET %q without a value", kerr.InvalidConfig, cf.Name)
					}
					ops = append(ops, metadata.ConfigOp{Key: cf.Name, Value: *cf.Value})
				case kmsg.IncrementalAlterConfigOpDelete:
					ops = append(ops, metadata.ConfigOp{Key: cf.Name, Delete: true})
				default:
					return nil, fmt.Errorf("%w: %q: only SET and DELETE apply to single-valued configs", kerr.InvalidConfig, cf.Name)
				}
			}
			return ops, nil
		}, req.ValidateOnly)
		out.ErrorCode, out.ErrorMessage = codeOf(err)
		resp.Resources = append(resp.Resources, out)
	}
	return resp
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

// errorResponse answers req with code (and msg, where the response has a
// message) for every item it names.
func errorResponse(req kmsg.Request, code *kerr.Error, msg string) kmsg.Response {
	m := &msg
	switch r := req.(type) {
	case *kmsg.CreateTopicsRequest:
		resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, t := range r.Topics {
			tr := kmsg.NewCreateTopicsResponseTopic()
			tr.Topic, tr.ErrorCode, tr.ErrorMessage = t.Topic, code.Code, m
			tr.NumPartitions, tr.ReplicationFactor = -1, -1
			resp.Topics = append(resp.Topics, tr)
		}
		return resp
	case *kmsg.DeleteTopicsRequest:
		resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
		if r.Version >= 6 {
			for _, t := range r.Topics {
				tr := kmsg.NewDeleteTopicsResponseTopic()
				tr.Topic, tr.TopicID, tr.ErrorCode, tr.ErrorMessage = t.Topic, t.TopicID, code.Code, m
				resp.Topics = append(resp.Topics, tr)
			}
		} else {
			for _, n := range r.TopicNames {
				tr := kmsg.NewDeleteTopicsResponseTopic()
				tr.Topic, tr.ErrorCode, tr.ErrorMessage = &n, code.Code, m
				resp.Topics = append(resp.Topics, tr)
			}
		}
		return resp
	case *kmsg.CreatePartitionsRequest:
		resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
		for _, t := range r.Topics {
			tr := kmsg.NewCreatePartitionsResponseTopic()
			tr.Topic, tr.ErrorCode, tr.ErrorMessage = t.Topic, code.Code, m
			resp.Topics = append(resp.Topics, tr)
		}
		return resp
	case *kmsg.AlterConfigsRequest:
		resp := r.ResponseKind().(*kmsg.AlterConfigsResponse)
		for _, rr := range r.Resources {
			out := kmsg.NewAlterConfigsResponseResource()
			out.ResourceType, out.ResourceName, out.ErrorCode, out.ErrorMessage = rr.ResourceType, rr.ResourceName, code.Code, m
			resp.Resources = append(resp.Resources, out)
		}
		return resp
	case *kmsg.IncrementalAlterConfigsRequest:
		resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
		for _, rr := range r.Resources {
			out := kmsg.NewIncrementalAlterConfigsResponseResource()
			out.ResourceType, out.ResourceName, out.ErrorCode, out.ErrorMessage = rr.ResourceType, rr.ResourceName, code.Code, m
			resp.Resources = append(resp.Resources, out)
		}
		return resp
	case *kmsg.BrokerRegistrationRequest:
		resp := r.ResponseKind().(*kmsg.BrokerRegistrationResponse)
		resp.ErrorCode, resp.BrokerEpoch = code.Code, -1
		return resp
	case *kmsg.BrokerHeartbeatRequest:
		resp := r.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
		resp.ErrorCode, resp.IsFenced = code.Code, true
		return resp
	case *kmsg.AllocateProducerIDsRequest:
		resp := r.ResponseKind().(*kmsg.AllocateProducerIDsResponse)
		resp.ErrorCode = code.Code
		return resp
	case *kmsg.AlterPartitionRequest:
		resp := r.ResponseKind().(*kmsg.AlterPartitionResponse)
		resp.ErrorCode = code.Code
		return resp
	case *kmsg.CreateACLsRequest:
		resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
		for range r.Creations {
			res := kmsg.NewCreateACLsResponseResult()
			res.ErrorCode, res.ErrorMessage = code.Code, m
			resp.Results = append(resp.Results, res)
		}
		return resp
	case *kmsg.DeleteACLsRequest:
		resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
		for range r.Filters {
			res := kmsg.NewDeleteACLsResponseResult()
			res.ErrorCode, res.ErrorMessage = code.Code, m
			resp.Results = append(resp.Results, res)
		}
		return resp
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
		seen := map[string]bool{}
		add := func(user string) {
			if !seen[user] {
				seen[user] = true
				res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
				res.User, res.ErrorCode, res.ErrorMessage = user, code.Code, m
				resp.Results = append(resp.Results, res)
			}
		}
		for _, d := range r.Deletions {
			add(d.Name)
		}
		for _, u := range r.Upsertions {
			add(u.Name)
		}
		return resp
	}
	resp := req.ResponseKind()
	return resp
}
