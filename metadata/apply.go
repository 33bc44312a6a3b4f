package metadata

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Limits Apply enforces.
const (
	// MaxPartitions is the most partitions a topic may have.
	MaxPartitions = 100000
	// MaxReplicas is the most replicas a partition may have, a
	// reassignment's target and removing replicas together.
	MaxReplicas = 256
	// MaxProducerIDBlock is the largest AllocateProducerIDs.Count.
	MaxProducerIDBlock = 1 << 20
	// MaxRemoteLog is the largest manifest of a partition's remote
	// segments (SetRemoteLog): some thousands of segments.
	MaxRemoteLog = 1 << 20
	maxConfigKey = 255
	maxClusterID = 64
	maxRack      = 255
)

// Apply applies rec, the record at Raft log index index, and returns the
// resulting image and the result. It is a pure function of (img, index,
// rec): every node computes the same image and the same result. img is not
// modified; the new image shares everything rec did not change with it.
//
// A refused record (Result.Err set) yields an image equal to img but for
// its Index. Callers may also use Apply to check a record before proposing
// it (ValidateOnly requests); the index only matters for RegisterBroker,
// whose epoch it becomes.
func (img *Image) Apply(index uint64, rec Record) (*Image, Result) {
	t := &txn{index: index}
	t.img = img.shallowCopy()
	t.img.index = index
	res := Result{Index: index}
	if err := t.apply(rec, &res, true); err != nil {
		next := img.shallowCopy()
		next.index = index
		return next, Result{Index: index, Err: err}
	}
	return t.img, res
}

func (img *Image) shallowCopy() *Image {
	c := *img
	return &c
}

// txn builds the next image copy-on-write: a map or topic is copied the
// first time the transaction writes it, so one record (or one Batch)
// copies each touched structure once and shares the rest.
type txn struct {
	index         uint64
	img           *Image
	ownBrokers    bool
	ownTopics     bool // topics, topicIDs and collisions
	ownBrokerCfgs bool
	ownGroupCfgs  bool
	ownScram      bool
	ownTopic      map[string]bool
}

func (t *txn) brokers() map[int32]Broker {
	if !t.ownBrokers {
		t.img.brokers = maps.Clone(t.img.brokers)
		t.ownBrokers = true
	}
	return t.img.brokers
}

func (t *txn) topicMaps() {
	if !t.ownTopics {
		t.img.topics = maps.Clone(t.img.topics)
		t.img.topicIDs = maps.Clone(t.img.topicIDs)
		t.img.collisions = maps.Clone(t.img.collisions)
		t.ownTopics = true
	}
}

// topic returns a private copy of topic name (its Partitions slice copied;
// the replica slices inside stay shared and are replaced, never written).
func (t *txn) topic(name string) *Topic {
	t.topicMaps()
	if t.ownTopic == nil {
		t.ownTopic = map[string]bool{}
	}
	cur := t.img.topics[name]
	if t.ownTopic[name] {
		return cur
	}
	c := *cur
	c.Partitions = append([]Partition(nil), cur.Partitions...)
	t.img.topics[name] = &c
	t.ownTopic[name] = true
	return &c
}

func (t *txn) brokerConfigs() map[string]string {
	if !t.ownBrokerCfgs {
		t.img.brokerConfigs = maps.Clone(t.img.brokerConfigs)
		t.ownBrokerCfgs = true
	}
	return t.img.brokerConfigs
}

// groupConfigs returns a private copy of the group-config map; each
// group's own map is replaced, never written.
func (t *txn) groupConfigs() map[string]map[string]string {
	if !t.ownGroupCfgs {
		t.img.groupConfigs = maps.Clone(t.img.groupConfigs)
		if t.img.groupConfigs == nil {
			t.img.groupConfigs = map[string]map[string]string{}
		}
		t.ownGroupCfgs = true
	}
	return t.img.groupConfigs
}

func (t *txn) apply(rec Record, res *Result, top bool) *RefusedError {
	switch r := rec.(type) {
	case InitCluster:
		return t.initCluster(r)
	case RegisterBroker:
		return t.registerBroker(r, res)
	case FenceBroker:
		return t.setFenced(r.ID, r.Epoch, true)
	case UnfenceBroker:
		return t.setFenced(r.ID, r.Epoch, false)
	case CreateTopic:
		return t.createTopic(r)
	case DeleteTopic:
		return t.deleteTopic(r)
	case CreatePartitions:
		return t.createPartitions(r)
	case ChangePartition:
		return t.changePartition(r)
	case ReassignPartition:
		return t.reassignPartition(r)
	case UnregisterBroker:
		return t.unregisterBroker(r)
	case SetRemoteLog:
		return t.setRemoteLog(r)
	case AlterConfigs:
		return t.alterConfigs(r)
	case AllocateProducerIDs:
		return t.allocateProducerIDs(r, res)
	case TakeOffice:
		return t.takeOffice(r)
	case InOffice:
		if o := t.img.office; o.Controller != r.Controller || o.Term != r.Term || o.Term == 0 {
			return refuse(kerr.NotController, "controller %d in term %d is not in office (controller %d took office in term %d)", r.Controller, r.Term, o.Controller, o.Term)
		}
		return nil
	case UpsertScramCredential:
		return t.upsertScram(r)
	case DeleteScramCredential:
		return t.deleteScram(r)
	case CreateACLs:
		return t.createACLs(r)
	case DeleteACLs:
		return t.deleteACLs(r)
	case Batch:
		if !top {
			return refuse(kerr.InvalidRequest, "a Batch inside a Batch")
		}
		for i, sub := range r.Records {
			if sub == nil {
				return refuse(kerr.InvalidRequest, "batch record %d is nil", i)
			}
			if err := t.apply(sub, res, false); err != nil {
				return refuse(err.Code, "batch record %d (%s): %s", i, sub.Kind(), err.Reason)
			}
		}
		return nil
	case nil:
		return refuse(kerr.InvalidRequest, "nil record")
	}
	return refuse(kerr.InvalidRequest, "unknown record %T", rec)
}

func (t *txn) initCluster(r InitCluster) *RefusedError {
	if err := validClusterID(r.ClusterID); err != nil {
		return err
	}
	switch t.img.clusterID {
	case "":
		t.img.clusterID = r.ClusterID
	case r.ClusterID:
	default:
		return refuse(kerr.InconsistentClusterID, "the cluster id is %s, not %s", t.img.clusterID, r.ClusterID)
	}
	return nil
}

func (t *txn) registerBroker(r RegisterBroker, res *Result) *RefusedError {
	if r.ID < 0 {
		return refuse(kerr.InvalidRegistration, "broker id %d is negative", r.ID)
	}
	if r.Incarnation.IsZero() {
		return refuse(kerr.InvalidRegistration, "broker %d: zero incarnation id", r.ID)
	}
	if err := validHostPort(r.KafkaAddr); err != nil {
		return refuse(kerr.InvalidRegistration, "broker %d: kafka address: %v", r.ID, err)
	}
	if r.ControllerAddr != "" {
		if err := validHostPort(r.ControllerAddr); err != nil {
			return refuse(kerr.InvalidRegistration, "broker %d: controller address: %v", r.ID, err)
		}
	}
	if len(r.Rack) > maxRack {
		return refuse(kerr.InvalidRegistration, "broker %d: rack is %d bytes, the limit is %d", r.ID, len(r.Rack), maxRack)
	}
	if err := checkListeners(r.Listeners); err != nil {
		return refuse(kerr.InvalidRegistration, "broker %d: %v", r.ID, err)
	}
	if cur, ok := t.img.brokers[r.ID]; ok && cur.Incarnation == r.Incarnation && slices.Equal(cur.Listeners, r.Listeners) &&
		cur.KafkaAddr == r.KafkaAddr && cur.ControllerAddr == r.ControllerAddr && cur.Rack == r.Rack {
		res.BrokerEpoch = cur.Epoch // a retried registration
		return nil
	}
	b := Broker{ID: r.ID, Incarnation: r.Incarnation, Epoch: int64(t.index), KafkaAddr: r.KafkaAddr,
		ControllerAddr: r.ControllerAddr, Rack: r.Rack, Listeners: r.Listeners, Fenced: true}
	t.brokers()[r.ID] = b
	res.BrokerEpoch = b.Epoch
	return nil
}

func (t *txn) setFenced(id int32, epoch int64, fenced bool) *RefusedError {
	b, ok := t.img.brokers[id]
	if !ok {
		return refuse(kerr.BrokerIDNotRegistered, "broker %d is not registered", id)
	}
	if b.Epoch != epoch {
		return refuse(kerr.StaleBrokerEpoch, "broker %d is registered with epoch %d, not %d", id, b.Epoch, epoch)
	}
	if b.Fenced != fenced {
		b.Fenced = fenced
		t.brokers()[id] = b
	}
	return nil
}

func (t *txn) unregisterBroker(r UnregisterBroker) *RefusedError {
	b, ok := t.img.brokers[r.ID]
	if !ok {
		return refuse(kerr.BrokerIDNotRegistered, "broker %d is not registered", r.ID)
	}
	if b.Epoch != r.Epoch {
		return refuse(kerr.StaleBrokerEpoch, "broker %d is registered with epoch %d, not %d (it registered again)", r.ID, b.Epoch, r.Epoch)
	}
	if !b.Fenced {
		return refuse(kerr.InvalidRequest, "broker %d is live: stop it first (the controller fences it a session later)", r.ID)
	}
	for _, topic := range t.img.topics {
		for i, p := range topic.Partitions {
			if contains(p.Replicas, r.ID) {
				return refuse(kerr.InvalidRequest, "broker %d holds a replica of %s-%d: move its replicas away first (ringlog cluster drain)", r.ID, topic.Name, i)
			}
		}
	}
	delete(t.brokers(), r.ID)
	return nil
}

func (t *txn) createTopic(r CreateTopic) *RefusedError {
	if err := validTopicName(r.Name); err != nil {
		return err
	}
	if _, ok := t.img.topics[r.Name]; ok {
		return refuse(kerr.TopicAlreadyExists, "topic %q already exists", r.Name)
	}
	if other, ok := t.img.collisions[collisionKey(r.Name)]; ok {
		return refuse(kerr.InvalidTopicException, "topic %q collides with existing topic %q (names may not differ only in '.' vs '_' or in letter case)", r.Name, other)
	}
	if r.ID.IsZero() {
		return refuse(kerr.InvalidRequest, "topic %q: zero topic id", r.Name)
	}
	if other, ok := t.img.topicIDs[r.ID]; ok {
		return refuse(kerr.InvalidRequest, "topic %q: id %s belongs to topic %q", r.Name, r.ID, other)
	}
	if len(r.Replicas) < 1 || len(r.Replicas) > MaxPartitions {
		return refuse(kerr.InvalidPartitions, "topic %q: %d partitions: use 1 to %d", r.Name, len(r.Replicas), MaxPartitions)
	}
	if err := t.checkAssignment(r.Name, 0, r.Replicas, len(r.Replicas[0])); err != nil {
		return err
	}
	for k := range r.Configs {
		if err := validConfigKey(k); err != nil {
			return err
		}
	}
	t.topicMaps()
	topic := &Topic{Name: r.Name, ID: r.ID, Internal: r.Internal, Partitions: newPartitions(r.Replicas)}
	if len(r.Configs) > 0 {
		topic.Configs = maps.Clone(r.Configs)
	}
	t.img.topics[r.Name] = topic
	t.img.topicIDs[r.ID] = r.Name
	t.img.collisions[collisionKey(r.Name)] = r.Name
	if t.ownTopic == nil {
		t.ownTopic = map[string]bool{}
	}
	t.ownTopic[r.Name] = true
	return nil
}

func newPartitions(assign [][]int32) []Partition {
	out := make([]Partition, len(assign))
	for i, reps := range assign {
		out[i] = Partition{
			Replicas: append([]int32(nil), reps...),
			ISR:      append([]int32(nil), reps...),
			Leader:   reps[0],
		}
	}
	return out
}

// checkAssignment checks new partitions' replica lists (the first one
// numbered first): rf replicas each, distinct, every one a registered,
// unfenced broker, and rf no larger than the number of such brokers.
func (t *txn) checkAssignment(topic string, first int, assign [][]int32, rf int) *RefusedError {
	live := 0
	for _, b := range t.img.brokers {
		if !b.Fenced {
			live++
		}
	}
	if rf < 1 {
		return refuse(kerr.InvalidReplicationFactor, "topic %q: replication factor %d is below 1", topic, rf)
	}
	if rf > live {
		return refuse(kerr.InvalidReplicationFactor, "topic %q: replication factor %d is larger than the %d available (registered, unfenced) brokers", topic, rf, live)
	}
	if rf > MaxReplicas {
		return refuse(kerr.InvalidReplicationFactor, "topic %q: replication factor %d is above the limit, %d", topic, rf, MaxReplicas)
	}
	for i, reps := range assign {
		p := first + i
		if len(reps) != rf {
			return refuse(kerr.InvalidReplicaAssignment, "topic %q partition %d has %d replicas; the topic's replication factor is %d", topic, p, len(reps), rf)
		}
		for j, id := range reps {
			b, ok := t.img.brokers[id]
			if !ok {
				return refuse(kerr.InvalidReplicaAssignment, "topic %q partition %d: broker %d is not registered", topic, p, id)
			}
			if b.Fenced {
				return refuse(kerr.InvalidReplicaAssignment, "topic %q partition %d: broker %d is fenced", topic, p, id)
			}
			for _, prev := range reps[:j] {
				if prev == id {
					return refuse(kerr.InvalidReplicaAssignment, "topic %q partition %d lists broker %d twice", topic, p, id)
				}
			}
		}
	}
	return nil
}

// lookup finds the topic a DeleteTopic or CreatePartitions names.
func (t *txn) lookup(name string, id UUID) (*Topic, *RefusedError) {
	switch {
	case name == "" && id.IsZero():
		return nil, refuse(kerr.InvalidRequest, "neither a topic name nor a topic id")
	case name == "":
		if topic := t.img.TopicByID(id); topic != nil {
			return topic, nil
		}
		return nil, refuse(kerr.UnknownTopicID, "no topic has id %s", id)
	}
	topic := t.img.topics[name]
	if topic == nil {
		return nil, refuse(kerr.UnknownTopicOrPartition, "topic %q does not exist", name)
	}
	if !id.IsZero() && topic.ID != id {
		return nil, refuse(kerr.UnknownTopicID, "topic %q has id %s, not %s", name, topic.ID, id)
	}
	return topic, nil
}

func (t *txn) deleteTopic(r DeleteTopic) *RefusedError {
	topic, err := t.lookup(r.Name, r.ID)
	if err != nil {
		return err
	}
	t.topicMaps()
	delete(t.img.topics, topic.Name)
	delete(t.img.topicIDs, topic.ID)
	delete(t.img.collisions, collisionKey(topic.Name))
	delete(t.ownTopic, topic.Name)
	return nil
}

func (t *txn) createPartitions(r CreatePartitions) *RefusedError {
	topic, err := t.lookup(r.Name, r.ID)
	if err != nil {
		return err
	}
	have := len(topic.Partitions)
	if len(r.Replicas) < 1 {
		return refuse(kerr.InvalidPartitions, "topic %q has %d partitions; no new partition asked for", topic.Name, have)
	}
	if have+len(r.Replicas) > MaxPartitions {
		return refuse(kerr.InvalidPartitions, "topic %q: %d partitions: the limit is %d", topic.Name, have+len(r.Replicas), MaxPartitions)
	}
	if err := t.checkAssignment(topic.Name, have, r.Replicas, len(topic.Partitions[0].TargetReplicas())); err != nil {
		return err
	}
	w := t.topic(topic.Name)
	w.Partitions = append(w.Partitions, newPartitions(r.Replicas)...)
	return nil
}

func (t *txn) changePartition(r ChangePartition) *RefusedError {
	topic, tp, err := t.partition(r.TopicID, r.Partition)
	if err != nil {
		return err
	}
	cur := topic.Partitions[r.Partition]
	if q := r.Requester; q != nil {
		b, ok := t.img.brokers[q.ID]
		if !ok {
			return refuse(kerr.BrokerIDNotRegistered, "%s: requesting broker %d is not registered", tp, q.ID)
		}
		if b.Epoch != q.Epoch {
			return refuse(kerr.StaleBrokerEpoch, "%s: requesting broker %d is registered with epoch %d, not %d", tp, q.ID, b.Epoch, q.Epoch)
		}
		if cur.Leader != q.ID {
			return refuse(kerr.NotLeaderForPartition, "%s: requesting broker %d is not the leader (%d is)", tp, q.ID, cur.Leader)
		}
	}
	if le := r.LeaderEpoch; le != nil {
		if *le < cur.LeaderEpoch {
			return refuse(kerr.FencedLeaderEpoch, "%s: leader epoch %d is older than the partition's %d", tp, *le, cur.LeaderEpoch)
		}
		if *le > cur.LeaderEpoch {
			return refuse(kerr.UnknownLeaderEpoch, "%s: leader epoch %d is newer than the partition's %d", tp, *le, cur.LeaderEpoch)
		}
	}
	if r.ExpectedPartitionEpoch != cur.PartitionEpoch {
		return refuse(kerr.InvalidUpdateVersion, "%s: partition epoch is %d, not %d", tp, cur.PartitionEpoch, r.ExpectedPartitionEpoch)
	}

	leader := cur.Leader
	if r.Leader != nil {
		leader = *r.Leader
		if leader != NoLeader {
			if !contains(cur.Replicas, leader) {
				return refuse(kerr.InvalidRequest, "%s: new leader %d is not a replica", tp, leader)
			}
			if b, ok := t.img.brokers[leader]; !ok || b.Fenced {
				return refuse(kerr.IneligibleReplica, "%s: new leader %d is fenced or not registered", tp, leader)
			}
		}
	}
	isr := cur.ISR
	if len(r.ISR) > 0 {
		if len(r.ISREpochs) > 0 && len(r.ISREpochs) != len(r.ISR) {
			return refuse(kerr.InvalidRequest, "%s: %d ISR epochs for %d ISR members", tp, len(r.ISREpochs), len(r.ISR))
		}
		for i, id := range r.ISR {
			if !contains(cur.Replicas, id) {
				return refuse(kerr.InvalidRequest, "%s: ISR member %d is not a replica", tp, id)
			}
			if contains(r.ISR[:i], id) {
				return refuse(kerr.InvalidRequest, "%s: ISR lists broker %d twice", tp, id)
			}
			b, ok := t.img.brokers[id]
			if !contains(cur.ISR, id) && (!ok || b.Fenced) {
				return refuse(kerr.IneligibleReplica, "%s: broker %d cannot join the ISR: fenced or not registered", tp, id)
			}
			if len(r.ISREpochs) > 0 && r.ISREpochs[i] >= 0 && (!ok || b.Epoch != r.ISREpochs[i]) {
				return refuse(kerr.IneligibleReplica, "%s: ISR member %d is not registered with epoch %d", tp, id, r.ISREpochs[i])
			}
		}
		isr = r.ISR
	}
	if leader != NoLeader && !contains(isr, leader) {
		return refuse(kerr.InvalidRequest, "%s: leader %d would not be in the ISR %v", tp, leader, isr)
	}

	next := cur
	next.Leader = leader
	if !sameSet(isr, cur.ISR) {
		next.ISR = append([]int32(nil), isr...)
	}
	t.completeReassignment(&next)
	return t.setPartition(topic, r.Partition, tp, cur, next)
}

// setRemoteLog replaces a partition's remote log manifest (see
// SetRemoteLog): the requester must lead it at its leader epoch, and the
// version follow the current one.
func (t *txn) setRemoteLog(r SetRemoteLog) *RefusedError {
	topic, tp, err := t.partition(r.TopicID, r.Partition)
	if err != nil {
		return err
	}
	cur := topic.Partitions[r.Partition]
	b, ok := t.img.brokers[r.Requester.ID]
	switch {
	case !ok:
		return refuse(kerr.BrokerIDNotRegistered, "%s: requesting broker %d is not registered", tp, r.Requester.ID)
	case b.Epoch != r.Requester.Epoch:
		return refuse(kerr.StaleBrokerEpoch, "%s: requesting broker %d is registered with epoch %d, not %d", tp, r.Requester.ID, b.Epoch, r.Requester.Epoch)
	case cur.Leader != r.Requester.ID:
		return refuse(kerr.NotLeaderForPartition, "%s: requesting broker %d is not the leader (%d is)", tp, r.Requester.ID, cur.Leader)
	case r.LeaderEpoch < cur.LeaderEpoch:
		return refuse(kerr.FencedLeaderEpoch, "%s: leader epoch %d is older than the partition's %d", tp, r.LeaderEpoch, cur.LeaderEpoch)
	case r.LeaderEpoch > cur.LeaderEpoch:
		return refuse(kerr.UnknownLeaderEpoch, "%s: leader epoch %d is newer than the partition's %d", tp, r.LeaderEpoch, cur.LeaderEpoch)
	case r.Version == cur.RemoteLogVersion && r.Version > 0 && bytes.Equal(r.Manifest, cur.RemoteLog):
		return nil // sent again after a lost answer: applied already
	case cur.RemoteLogVersion == math.MaxInt64 || r.Version != cur.RemoteLogVersion+1:
		return refuse(kerr.InvalidUpdateVersion, "%s: remote log version is %d, so the next is not %d", tp, cur.RemoteLogVersion, r.Version)
	case len(r.Manifest) > MaxRemoteLog:
		return refuse(kerr.InvalidRequest, "%s: a remote log manifest of %d bytes, more than %d", tp, len(r.Manifest), MaxRemoteLog)
	}
	next := cur
	next.RemoteLogVersion, next.RemoteLog = r.Version, r.Manifest
	t.topic(topic.Name).Partitions[r.Partition] = next
	return nil
}

// partition finds partition i of the topic with id, for a record that
// changes it; tp names it in refusals.
func (t *txn) partition(id UUID, i int32) (topic *Topic, tp string, err *RefusedError) {
	topic = t.img.TopicByID(id)
	if topic == nil {
		return nil, "", refuse(kerr.UnknownTopicID, "no topic has id %s", id)
	}
	if i < 0 || int(i) >= len(topic.Partitions) {
		return nil, "", refuse(kerr.UnknownTopicOrPartition, "topic %q has no partition %d", topic.Name, i)
	}
	return topic, fmt.Sprintf("%s-%d", topic.Name, i), nil
}

// setPartition makes next partition i of topic, if it differs from cur:
// the partition epoch grows, and the leader epoch with a new leader.
func (t *txn) setPartition(topic *Topic, i int32, tp string, cur, next Partition) *RefusedError {
	leaderChanged := next.Leader != cur.Leader
	if !leaderChanged && sameSet(next.ISR, cur.ISR) && slices.Equal(next.Replicas, cur.Replicas) &&
		slices.Equal(next.AddingReplicas, cur.AddingReplicas) && slices.Equal(next.RemovingReplicas, cur.RemovingReplicas) {
		return nil
	}
	if cur.PartitionEpoch == math.MaxInt32 || (leaderChanged && cur.LeaderEpoch == math.MaxInt32) {
		return refuse(kerr.InvalidUpdateVersion, "%s: epochs exhausted", tp)
	}
	if leaderChanged {
		next.LeaderEpoch++
	}
	next.PartitionEpoch++
	t.topic(topic.Name).Partitions[i] = next
	return nil
}

// reassignPartition starts, replaces or cancels a reassignment (see
// ReassignPartition). A replacement starts from the original replicas,
// as a cancel returns to them; either drops from the ISR the replicas no
// longer assigned (electing an in-sync one if the leader was among them).
func (t *txn) reassignPartition(r ReassignPartition) *RefusedError {
	topic, tp, err := t.partition(r.TopicID, r.Partition)
	if err != nil {
		return err
	}
	cur := topic.Partitions[r.Partition]
	next := cur
	orig := cur.OriginalReplicas()
	if r.Target == nil {
		if !cur.Reassigning() {
			return refuse(kerr.NoReassignmentInProgress, "%s is not being reassigned", tp)
		}
		next.Replicas, next.AddingReplicas, next.RemovingReplicas = orig, nil, nil
	} else {
		if len(r.Target) == 0 || len(r.Target) > MaxReplicas {
			return refuse(kerr.InvalidReplicaAssignment, "%s: %d target replicas; want 1 to %d", tp, len(r.Target), MaxReplicas)
		}
		for i, id := range r.Target {
			if _, ok := t.img.brokers[id]; !ok {
				return refuse(kerr.InvalidReplicaAssignment, "%s: target replica %d is not a registered broker", tp, id)
			}
			if contains(r.Target[:i], id) {
				return refuse(kerr.InvalidReplicaAssignment, "%s: target lists broker %d twice", tp, id)
			}
		}
		removing := without(orig, r.Target)
		next.Replicas = append(slices.Clone(r.Target), removing...)
		if len(next.Replicas) > MaxReplicas {
			return refuse(kerr.InvalidReplicaAssignment, "%s: %d replicas while moving; the limit is %d", tp, len(next.Replicas), MaxReplicas)
		}
		next.AddingReplicas, next.RemovingReplicas = nilIfEmpty(without(r.Target, orig)), nilIfEmpty(removing)
	}
	next.ISR = nil
	for _, id := range cur.ISR {
		if contains(next.Replicas, id) {
			next.ISR = append(next.ISR, id)
		}
	}
	if len(next.ISR) == 0 {
		return refuse(kerr.InvalidReplicaAssignment, "%s: none of the in-sync replicas %v would remain a replica", tp, cur.ISR)
	}
	if next.Leader != NoLeader && !contains(next.ISR, next.Leader) {
		if next.Leader = t.firstLive(next.Replicas, next.ISR); next.Leader == NoLeader {
			return refuse(kerr.InvalidReplicaAssignment, "%s: the leader would leave and no in-sync replica left (%v) is live to take over", tp, next.ISR)
		}
	}
	t.completeReassignment(&next)
	return t.setPartition(topic, r.Partition, tp, cur, next)
}

// completeReassignment completes p's reassignment if every target replica
// is in its ISR: the removed replicas leave Replicas and the ISR, and if
// the leader was one of them, the first live target replica leads (no
// live one: the move waits). A partition without a leader keeps none:
// electing one is the controller's.
func (t *txn) completeReassignment(p *Partition) {
	if !p.Reassigning() {
		return
	}
	target := p.TargetReplicas()
	for _, id := range target {
		if !contains(p.ISR, id) {
			return
		}
	}
	leader := p.Leader
	if leader != NoLeader && !contains(target, leader) {
		if leader = t.firstLive(target, target); leader == NoLeader {
			return
		}
	}
	var isr []int32
	for _, id := range p.ISR {
		if contains(target, id) {
			isr = append(isr, id)
		}
	}
	p.Replicas, p.ISR, p.Leader = target, isr, leader
	p.AddingReplicas, p.RemovingReplicas = nil, nil
}

// firstLive is the first of order that is in set and registered
// unfenced, or NoLeader.
func (t *txn) firstLive(order, set []int32) int32 {
	for _, id := range order {
		if b, ok := t.img.brokers[id]; ok && !b.Fenced && contains(set, id) {
			return id
		}
	}
	return NoLeader
}

func nilIfEmpty(s []int32) []int32 {
	if len(s) == 0 {
		return nil
	}
	return s
}

func (t *txn) alterConfigs(r AlterConfigs) *RefusedError {
	for i, op := range r.Ops {
		if err := validConfigKey(op.Key); err != nil {
			return err
		}
		for _, prev := range r.Ops[:i] {
			if prev.Key == op.Key {
				return refuse(kerr.InvalidRequest, "config %q appears twice", op.Key)
			}
		}
	}
	switch r.Type {
	case ConfigTopic:
		if t.img.topics[r.Name] == nil {
			return refuse(kerr.UnknownTopicOrPartition, "topic %q does not exist", r.Name)
		}
		if len(r.Ops) == 0 {
			return nil
		}
		w := t.topic(r.Name)
		w.Configs = applyConfigOps(maps.Clone(w.Configs), r.Ops)
	case ConfigBroker:
		if r.Name != "" {
			return refuse(kerr.InvalidRequest, "per-broker configs (broker %q) are not replicated; alter the cluster-wide default (empty name)", r.Name)
		}
		if len(r.Ops) > 0 {
			applyConfigOps(t.brokerConfigs(), r.Ops)
		}
	case ConfigGroup:
		if r.Name == "" {
			return refuse(kerr.InvalidRequest, "a group config needs the group id")
		}
		if len(r.Ops) == 0 {
			return nil
		}
		gc := t.groupConfigs()
		if gc[r.Name] == nil && len(gc) >= MaxGroupConfigs {
			return refuse(kerr.PolicyViolation, "%d groups have configs already (at most %d)", len(gc), MaxGroupConfigs)
		}
		if cfg := applyConfigOps(maps.Clone(gc[r.Name]), r.Ops); cfg == nil {
			delete(gc, r.Name)
		} else {
			gc[r.Name] = cfg
		}
	default:
		return refuse(kerr.InvalidRequest, "config resource type %d: use topic (2), broker (4) or group (32)", r.Type)
	}
	return nil
}

// applyConfigOps applies ops to cfg (which it may allocate) and returns
// it, nil when empty (so an image's encoding never depends on whether a
// map was emptied or never filled).
func applyConfigOps(cfg map[string]string, ops []ConfigOp) map[string]string {
	if cfg == nil {
		cfg = map[string]string{}
	}
	for _, op := range ops {
		if op.Delete {
			delete(cfg, op.Key)
		} else {
			cfg[op.Key] = op.Value
		}
	}
	if len(cfg) == 0 {
		return nil
	}
	return cfg
}

func (t *txn) allocateProducerIDs(r AllocateProducerIDs, res *Result) *RefusedError {
	b, ok := t.img.brokers[r.Broker]
	if !ok {
		return refuse(kerr.BrokerIDNotRegistered, "broker %d is not registered", r.Broker)
	}
	if b.Epoch != r.BrokerEpoch {
		return refuse(kerr.StaleBrokerEpoch, "broker %d is registered with epoch %d, not %d", r.Broker, b.Epoch, r.BrokerEpoch)
	}
	if r.Count < 1 || r.Count > MaxProducerIDBlock {
		return refuse(kerr.InvalidRequest, "a block of %d producer ids: use 1 to %d", r.Count, MaxProducerIDBlock)
	}
	next := t.img.nextProducerID
	if next > math.MaxInt64-int64(r.Count) {
		return refuse(kerr.UnknownServerError, "producer ids are exhausted")
	}
	t.img.nextProducerID = next + int64(r.Count)
	res.ProducerIDs = ProducerIDBlock{First: next, Count: r.Count}
	return nil
}

func (t *txn) takeOffice(r TakeOffice) *RefusedError {
	if r.Controller < 0 || r.Term == 0 {
		return refuse(kerr.InvalidRequest, "controller %d in term %d: ids are ≥ 0 and terms ≥ 1", r.Controller, r.Term)
	}
	if r.Term <= t.img.office.Term {
		return refuse(kerr.StaleControllerEpoch, "controller %d in term %d: controller %d took office in term %d", r.Controller, r.Term, t.img.office.Controller, t.img.office.Term)
	}
	t.img.office = Office(r)
	return nil
}

// validTopicName applies Kafka's rules: 1 to 249 characters from
// [a-zA-Z0-9._-], not "." or "..".
func validTopicName(name string) *RefusedError {
	switch {
	case name == "":
		return refuse(kerr.InvalidTopicException, "topic name is empty")
	case name == "." || name == "..":
		return refuse(kerr.InvalidTopicException, "topic name cannot be %q", name)
	case len(name) > 249:
		return refuse(kerr.InvalidTopicException, "topic name is %d characters, the limit is 249", len(name))
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return refuse(kerr.InvalidTopicException, "topic name %q has %q: use letters, digits, '.', '_' and '-'", name, c)
		}
	}
	return nil
}

// collisionKey folds what makes two topic names collide: '.' vs '_'
// (Kafka's metric names cannot tell them apart) and letter case (directory
// names on case-insensitive file systems cannot).
func collisionKey(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, ".", "_"))
}

// ValidateClusterID checks a cluster id as InitCluster does: 1 to 64
// characters from [A-Za-z0-9._-].
func ValidateClusterID(id string) error {
	if err := validClusterID(id); err != nil {
		return err
	}
	return nil
}

func validClusterID(id string) *RefusedError {
	if id == "" || len(id) > maxClusterID {
		return refuse(kerr.InvalidRequest, "cluster id %q: use 1 to %d characters", id, maxClusterID)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return refuse(kerr.InvalidRequest, "cluster id %q has %q: use letters, digits, '.', '_' and '-'", id, c)
		}
	}
	return nil
}

func validConfigKey(k string) *RefusedError {
	if k == "" || len(k) > maxConfigKey {
		return refuse(kerr.InvalidConfig, "config key %q: use 1 to %d bytes", k, maxConfigKey)
	}
	return nil
}

// validHostPort checks a host:port with a non-empty host and a port in
// 1..65535.
func validHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("%q has no host", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port must be 1 to 65535", s)
	}
	return nil
}

func contains(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// sameSet reports whether a and b (each without duplicates) hold the same
// brokers, in any order.
func sameSet(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !contains(b, x) {
			return false
		}
	}
	return true
}
