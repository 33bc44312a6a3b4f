// Package admin is the one typed form of the Kafka admin requests that
// change topics and configs: CreateTopics, DeleteTopics,
// CreatePartitions, AlterConfigs and IncrementalAlterConfigs.
//
// netio decodes each request, authorizes it resource by resource, turns
// each resource into a value of this package, checks its shape here once
// (Check), and calls a Service: the single broker's engine (ForEngine) or
// the Raft cluster (cluster.Cluster). The Service checks the request
// against its own state (which topics exist, which brokers are alive) and
// applies it. Errors wrap a Kafka error (kerr) first; netio alone turns
// them into answers.
package admin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine"
)

// Service applies admin requests. Every method is safe for concurrent
// use; ctx bounds a call that waits (a proposal to the quorum).
type Service interface {
	// Topic describes the topic named name; false when there is none.
	Topic(name string) (Topic, bool)
	// TopicByID describes the topic with id; false when there is none.
	TopicByID(id [16]byte) (Topic, bool)
	// CreateTopic creates t, which Check accepted; with validateOnly
	// it checks t against the current state and creates nothing. The
	// answer describes the topic (its id is zero with validateOnly).
	CreateTopic(ctx context.Context, t NewTopic, validateOnly bool) (Topic, error)
	// DeleteTopic deletes the topic named name and its data, and
	// returns its id; with a non-zero id, only if the topic has that id
	// (else UNKNOWN_TOPIC_ID). Internal topics are refused with
	// INVALID_TOPIC_EXCEPTION.
	DeleteTopic(ctx context.Context, name string, id [16]byte) ([16]byte, error)
	// CreatePartitions grows a topic, as p says.
	CreatePartitions(ctx context.Context, p NewPartitions, validateOnly bool) error
	// AlterConfigs changes a topic's config overrides or the brokers'
	// defaults, as c says (Resolve turns c into the changes).
	AlterConfigs(ctx context.Context, c ConfigChange, validateOnly bool) error
	// ElectLeaders holds elections of typ for parts, answering each in
	// order; parts nil means every partition, and then only the
	// partitions whose leader moved or could not are answered (Kafka
	// leaves out ELECTION_NOT_NEEDED there).
	ElectLeaders(ctx context.Context, typ ElectionType, parts []PartitionRef) ([]Election, error)
	// AlterPartitionReassignments starts, replaces or cancels the
	// reassignment of each partition (KIP-455), answering each in order:
	// nil once the move is recorded (it completes when the new replicas
	// are in sync), UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT,
	// NO_REASSIGNMENT_IN_PROGRESS for a cancel of nothing, and
	// INVALID_REPLICATION_FACTOR for a change of the replica count when
	// allowRFChange is false.
	AlterPartitionReassignments(ctx context.Context, rs []Reassignment, allowRFChange bool) ([]error, error)
	// ListPartitionReassignments lists the reassignments in progress of
	// parts (nil: of every partition); partitions not being reassigned,
	// or unknown, are left out.
	ListPartitionReassignments(ctx context.Context, parts []PartitionRef) ([]OngoingReassignment, error)
}

// Reassignment asks for a partition to move to Replicas, preferred
// leader first; Replicas nil cancels its reassignment in progress.
type Reassignment struct {
	PartitionRef
	Replicas []int32
}

// OngoingReassignment is a partition being reassigned: Replicas is the
// target followed by the replicas being removed, Adding the target's
// replicas that are new.
type OngoingReassignment struct {
	PartitionRef
	Replicas, Adding, Removing []int32
}

// ElectionType is the kind of election ElectLeaders holds (Kafka's
// numbering).
type ElectionType int8

const (
	// PreferredElection gives each partition to its preferred replica
	// (the first of its replicas) when that one is alive and in sync:
	// nothing is lost, leadership goes back where placement put it.
	PreferredElection ElectionType = 0
	// UncleanElection gives a partition with no live in-sync replica to
	// its first live replica, which becomes the whole ISR: what only the
	// old ISR had is lost. Partitions with a live leader are left alone.
	UncleanElection ElectionType = 1
)

// PartitionRef names one partition.
type PartitionRef struct {
	Topic     string
	Partition int32
}

// Election is the outcome of one partition's election: nil when its
// leader moved, ELECTION_NOT_NEEDED when it already had the leader asked
// for, PREFERRED_LEADER_NOT_AVAILABLE or ELIGIBLE_LEADERS_NOT_AVAILABLE
// when no replica may take it, UNKNOWN_TOPIC_OR_PARTITION.
type Election struct {
	PartitionRef
	Err error
}

// Topic describes a topic as the admin answers need it.
type Topic struct {
	Name              string
	ID                [16]byte
	Internal          bool
	Partitions        int32
	ReplicationFactor int16
	// Configs are the topic's overrides, by topic config key.
	Configs map[string]string
}

// NewTopic is one topic of a CreateTopics request.
type NewTopic struct {
	Name string
	// Partitions and ReplicationFactor are -1 for the broker's
	// defaults, and both -1 when Assignment is given.
	Partitions        int32
	ReplicationFactor int16
	// Assignment, when not nil, holds partition i's replicas at index
	// i, preferred leader first.
	Assignment [][]int32
	// Configs are the topic's overrides, by topic config key.
	Configs map[string]string
}

// NewPartitions is one topic of a CreatePartitions request.
type NewPartitions struct {
	Topic string
	// Count is the partition count wanted, larger than the current one.
	Count int32
	// Assignment, when not nil, holds the replicas of each new
	// partition, in order.
	Assignment [][]int32
}

// ResourceType is what a config change applies to.
type ResourceType int8

const (
	// TopicConfigs are one topic's overrides.
	TopicConfigs ResourceType = iota + 1
	// BrokerDefaults are the brokers' defaults of topic configs, which
	// every topic without its own override follows.
	BrokerDefaults
	// GroupConfigs are one group's overrides of the group settings
	// (share.auto.offset.reset, ...; engine.GroupConfigKeys).
	GroupConfigs
)

// OpKind is what a ConfigOp does.
type OpKind int8

const (
	// Set gives the key a value.
	Set OpKind = iota
	// Delete removes the override: the key goes back to its default.
	Delete
	// Append adds the value's items to a list config.
	Append
	// Subtract removes the value's items from a list config.
	Subtract
)

// ConfigOp is one change of one config key.
type ConfigOp struct {
	// Key is the topic config key (cleanup.policy, retention.ms, ...),
	// for broker defaults too.
	Key   string
	Kind  OpKind
	Value string
}

// ConfigChange is one resource of an AlterConfigs or
// IncrementalAlterConfigs request.
type ConfigChange struct {
	Type ResourceType
	// Name is the topic's name; empty for BrokerDefaults.
	Name string
	Ops  []ConfigOp
	// Replace (the legacy AlterConfigs on a topic) sends every override
	// not named in Ops back to its default.
	Replace bool
}

// CheckID refuses a topic whose id is not want (zero: any), as a
// request naming a topic by id expects.
func (t Topic) CheckID(want [16]byte) error {
	if want != ([16]byte{}) && t.ID != want {
		return fmt.Errorf("%w: topic %q has another id", kerr.UnknownTopicID, t.Name)
	}
	return nil
}

// IsInternalName reports whether name is, or collides with ('.' and
// '_' are the same in metric names), __consumer_offsets,
// __transaction_state or __share_group_state: topics the brokers create,
// never a client.
func IsInternalName(name string) bool {
	n := strings.ToLower(strings.ReplaceAll(name, ".", "_"))
	return n == engine.OffsetsTopic || n == engine.TransactionStateTopic || n == engine.ShareStateTopic
}

// Check refuses a request whose shape is wrong whatever the state: a bad
// name, counts out of range, a malformed assignment, an unknown config
// key or a bad value. The Service checks the rest.
func (t NewTopic) Check() error {
	if err := engine.ValidateTopicName(t.Name); err != nil {
		return err
	}
	if IsInternalName(t.Name) {
		return fmt.Errorf("%w: %s is the brokers' internal topic", kerr.InvalidTopicException, t.Name)
	}
	if t.Assignment != nil {
		if t.Partitions != -1 || t.ReplicationFactor != -1 {
			return fmt.Errorf("%w: give either a replica assignment or partition count and replication factor", kerr.InvalidRequest)
		}
		if err := checkAssignment(t.Assignment); err != nil {
			return err
		}
		for i, reps := range t.Assignment {
			if len(reps) != len(t.Assignment[0]) {
				return fmt.Errorf("%w: partition %d has %d replicas, partition 0 has %d: every partition needs the same number", kerr.InvalidReplicaAssignment, i, len(reps), len(t.Assignment[0]))
			}
		}
	} else {
		if t.Partitions != -1 && (t.Partitions < 1 || t.Partitions > engine.MaxPartitions) {
			return fmt.Errorf("%w: %d partitions: use 1 to %d", kerr.InvalidPartitions, t.Partitions, engine.MaxPartitions)
		}
		if t.ReplicationFactor != -1 && t.ReplicationFactor < 1 {
			return fmt.Errorf("%w: replication factor %d: it must be at least 1", kerr.InvalidReplicationFactor, t.ReplicationFactor)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(t.Configs)) {
		if err := engine.ValidateTopicConfig(k, t.Configs[k]); err != nil {
			return fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
		}
	}
	return nil
}

// Check refuses a CreatePartitions topic whose shape is wrong.
func (p NewPartitions) Check() error {
	if p.Count < 1 || p.Count > engine.MaxPartitions {
		return fmt.Errorf("%w: %d partitions: use 1 to %d", kerr.InvalidPartitions, p.Count, engine.MaxPartitions)
	}
	if p.Assignment != nil {
		return checkAssignment(p.Assignment)
	}
	return nil
}

// CheckAssignment refuses new partitions' replicas that are not what the
// topic has: a count other than rf, where rf is known (> 0).
func (p NewPartitions) CheckAssignment(current int32, rf int) error {
	if int(p.Count)-int(current) != len(p.Assignment) {
		return fmt.Errorf("%w: %d assignments for %d new partitions", kerr.InvalidReplicaAssignment, len(p.Assignment), int(p.Count)-int(current))
	}
	for i, reps := range p.Assignment {
		if rf > 0 && len(reps) != rf {
			return fmt.Errorf("%w: new partition %d has %d replicas; the topic's have %d", kerr.InvalidReplicaAssignment, int(current)+i, len(reps), rf)
		}
	}
	return nil
}

// checkAssignment refuses an assignment of no partitions or too many,
// partitions without replicas, with a broker twice, or with a negative
// broker id.
func checkAssignment(as [][]int32) error {
	if len(as) == 0 || len(as) > engine.MaxPartitions {
		return fmt.Errorf("%w: an assignment of %d partitions: use 1 to %d", kerr.InvalidReplicaAssignment, len(as), engine.MaxPartitions)
	}
	for i, reps := range as {
		if len(reps) == 0 {
			return fmt.Errorf("%w: partition %d has no replicas", kerr.InvalidReplicaAssignment, i)
		}
		for j, id := range reps {
			if id < 0 {
				return fmt.Errorf("%w: partition %d: broker id %d", kerr.InvalidReplicaAssignment, i, id)
			}
			if slices.Contains(reps[:j], id) {
				return fmt.Errorf("%w: partition %d names broker %d twice", kerr.InvalidReplicaAssignment, i, id)
			}
		}
	}
	return nil
}

// Check refuses a config change with an unknown key, a key named twice
// (as Kafka does), a bad value, or a list operation on a key that is not
// a list.
func (c ConfigChange) Check() error {
	if c.Type != TopicConfigs && c.Type != BrokerDefaults && c.Type != GroupConfigs {
		return fmt.Errorf("%w: config resource type %d cannot be altered", kerr.InvalidRequest, c.Type)
	}
	seen := map[string]bool{}
	for _, op := range c.Ops {
		if seen[op.Key] {
			return fmt.Errorf("%w: config %q is named more than once", kerr.InvalidRequest, op.Key)
		}
		seen[op.Key] = true
		if c.Type == GroupConfigs {
			if err := checkGroupOp(op); err != nil {
				return err
			}
			continue
		}
		d, ok := engine.LookupTopicConfig(op.Key)
		if !ok {
			return fmt.Errorf("%w: unknown topic config %q", kerr.InvalidConfig, op.Key)
		}
		switch op.Kind {
		case Set:
			if err := engine.ValidateTopicConfig(op.Key, op.Value); err != nil {
				return fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
			}
		case Delete:
		case Append, Subtract:
			if d.Type != engine.TypeList {
				return fmt.Errorf("%w: %s is not a list; APPEND and SUBTRACT work on lists", kerr.InvalidConfig, op.Key)
			}
		default:
			return fmt.Errorf("%w: unknown config operation %d", kerr.InvalidRequest, op.Kind)
		}
	}
	return nil
}

// checkGroupOp checks one change of a group config: a known key, a valid
// value; group configs are not lists.
func checkGroupOp(op ConfigOp) error {
	switch op.Kind {
	case Set:
		if err := engine.ValidateGroupConfig(op.Key, op.Value); err != nil {
			return fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
		}
	case Delete:
		if !slices.Contains(engine.GroupConfigKeys, op.Key) {
			return fmt.Errorf("%w: unknown group config %q", kerr.InvalidConfig, op.Key)
		}
	default:
		return fmt.Errorf("%w: %s is not a list; APPEND and SUBTRACT work on lists", kerr.InvalidConfig, op.Key)
	}
	return nil
}

// Resolve turns c into the changes of the resource's overrides: a key
// with a value is set, a key with nil goes back to its default. current
// holds the resource's overrides now; effective(key) is a key's value now
// (an override, else the default), where APPEND and SUBTRACT start.
// Every key an op names is in the answer; with Replace, so is every
// current key no op names (nil).
func (c ConfigChange) Resolve(current map[string]string, effective func(key string) string) (map[string]*string, error) {
	out := map[string]*string{}
	if c.Replace {
		for k := range current {
			out[k] = nil
		}
	}
	for _, op := range c.Ops {
		switch op.Kind {
		case Set:
			v := op.Value
			out[op.Key] = &v
		case Delete:
			out[op.Key] = nil
		case Append, Subtract:
			// Check allows each key once: the value now is where
			// the list starts.
			items := splitList(effective(op.Key))
			for _, it := range splitList(op.Value) {
				i := slices.Index(items, it)
				if op.Kind == Append && i < 0 {
					items = append(items, it)
				} else if op.Kind == Subtract && i >= 0 {
					items = slices.Delete(items, i, i+1)
				}
			}
			v := strings.Join(items, ",")
			out[op.Key] = &v
		}
	}
	validate := engine.ValidateTopicConfig
	if c.Type == GroupConfigs {
		validate = engine.ValidateGroupConfig
	}
	for _, k := range slices.Sorted(maps.Keys(out)) {
		if v := out[k]; v != nil {
			if err := validate(k, *v); err != nil {
				return nil, fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
			}
		}
	}
	return out, nil
}

// splitList is a list config's items, trimmed, without empty ones.
func splitList(v string) []string {
	var out []string
	for _, it := range strings.Split(v, ",") {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, it)
		}
	}
	return out
}

// Quorum describes the metadata quorum as its leader sees it
// (DescribeQuorum): the leader, its Raft term, the committed index (the
// high watermark of the metadata log), the voters and the observers
// (broker-only nodes).
type Quorum struct {
	LeaderID      int32
	Term          uint64
	HighWatermark int64
	Voters        []QuorumReplica
	Observers     []QuorumReplica
	// VoterAddrs are the voters' Raft addresses, by id.
	VoterAddrs map[int32]string
}

// QuorumReplica is one member of the quorum: how far it has the metadata
// log (the leader's own log end; for the others, the index they last
// reported having applied, -1 when not heard from by this leader), when
// it last reported, and when it last reported being caught up (zero:
// unknown).
type QuorumReplica struct {
	ID                      int32
	LogEndOffset            int64
	LastFetch, LastCaughtUp time.Time
}
