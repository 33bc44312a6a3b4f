package metadata

import "fmt"

// Kind identifies a record type on the wire. Numbers are never reused.
type Kind uint8

// The record kinds.
const (
	KindInitCluster         Kind = 1
	KindRegisterBroker      Kind = 2
	KindFenceBroker         Kind = 3
	KindUnfenceBroker       Kind = 4
	KindCreateTopic         Kind = 5
	KindDeleteTopic         Kind = 6
	KindCreatePartitions    Kind = 7
	KindChangePartition     Kind = 8
	KindAlterConfigs        Kind = 9
	KindAllocateProducerIDs Kind = 10
	KindBatch               Kind = 11
	// KindRegisterBrokerListeners is a RegisterBroker with Listeners.
	KindRegisterBrokerListeners Kind = 12
	KindUpsertScramCredential   Kind = 13
	KindDeleteScramCredential   Kind = 14
	KindCreateACLs              Kind = 15
	KindDeleteACLs              Kind = 16
	KindTakeOffice              Kind = 17
	KindInOffice                Kind = 18
	KindReassignPartition       Kind = 19
	KindUnregisterBroker        Kind = 20
	KindSetRemoteLog            Kind = 21
)

var kindNames = map[Kind]string{
	KindInitCluster:         "InitCluster",
	KindRegisterBroker:      "RegisterBroker",
	KindFenceBroker:         "FenceBroker",
	KindUnfenceBroker:       "UnfenceBroker",
	KindCreateTopic:         "CreateTopic",
	KindDeleteTopic:         "DeleteTopic",
	KindCreatePartitions:    "CreatePartitions",
	KindChangePartition:     "ChangePartition",
	KindAlterConfigs:        "AlterConfigs",
	KindAllocateProducerIDs: "AllocateProducerIDs",
	KindBatch:               "Batch",

	KindRegisterBrokerListeners: "RegisterBroker",
	KindUpsertScramCredential:   "UpsertScramCredential",
	KindDeleteScramCredential:   "DeleteScramCredential",
	KindCreateACLs:              "CreateACLs",
	KindDeleteACLs:              "DeleteACLs",
	KindTakeOffice:              "TakeOffice",
	KindInOffice:                "InOffice",
	KindReassignPartition:       "ReassignPartition",
	KindUnregisterBroker:        "UnregisterBroker",
	KindSetRemoteLog:            "SetRemoteLog",
}

// String is the record type's name.
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Record is one replicated command: the Raft log holds encoded records
// (EncodeRecord), and Image.Apply applies them. The set is closed: only
// this package's types implement it.
type Record interface {
	// Kind is the record's wire type.
	Kind() Kind
	// sealed keeps other packages from implementing Record.
	sealed()
}

// InitCluster sets the cluster id. The first Raft leader commits it; once
// set, the id never changes (a different one is refused with
// INCONSISTENT_CLUSTER_ID, the same one is a no-op).
type InitCluster struct {
	ClusterID string
}

// RegisterBroker registers a broker process. A registration identical to
// the current one (same incarnation, endpoints, listeners and rack) is a no-op that
// returns the current epoch; any other replaces it with a new, fenced
// registration whose epoch is the record's log index.
type RegisterBroker struct {
	ID             int32
	Incarnation    UUID
	KafkaAddr      string
	ControllerAddr string // may be empty
	Rack           string
	// Listeners are the broker's named Kafka listeners, KafkaAddr's
	// among them (none: KafkaAddr is its one, PLAINTEXT, listener). A
	// registration with listeners is encoded as kind 12, one without as
	// kind 2, which brokers before listeners wrote.
	Listeners []Listener
}

// FenceBroker fences broker ID if its current epoch is Epoch. Fencing a
// fenced broker is a no-op. It does not touch partitions: the controller
// moves leadership and ISR membership away in the same Batch.
type FenceBroker struct {
	ID    int32
	Epoch int64
}

// UnfenceBroker unfences broker ID if its current epoch is Epoch.
// Unfencing an unfenced broker is a no-op.
type UnfenceBroker struct {
	ID    int32
	Epoch int64
}

// CreateTopic creates a topic with the full replica assignment (one list
// of broker ids per partition, preferred leader first; see
// PlaceReplicas). Each partition starts with ISR = Replicas, the first
// replica leading, and epochs 0.
type CreateTopic struct {
	Name     string
	ID       UUID
	Internal bool
	Replicas [][]int32
	Configs  map[string]string
}

// DeleteTopic deletes a topic, named by Name, by ID, or by both (then both
// must match, so a delete aimed at an earlier topic of the same name
// cannot remove a re-created one).
type DeleteTopic struct {
	Name string
	ID   UUID
}

// CreatePartitions adds partitions to a topic (named as in DeleteTopic),
// with one replica list per new partition.
type CreatePartitions struct {
	Name     string
	ID       UUID
	Replicas [][]int32
}

// BrokerEpoch names a broker registration: a broker id at an epoch.
type BrokerEpoch struct {
	ID    int32
	Epoch int64
}

// ChangePartition changes a partition's leader and/or ISR, if the
// partition is still at ExpectedPartitionEpoch (compare-and-set). A leader
// change bumps the leader epoch and the partition epoch; an ISR change
// alone bumps the partition epoch only; no change is a no-op. The optional
// fields are pointers, so a zero value means "not given", never broker 0
// or epoch 0.
type ChangePartition struct {
	TopicID   UUID
	Partition int32
	// ExpectedPartitionEpoch must equal the partition's epoch.
	ExpectedPartitionEpoch int32
	// LeaderEpoch, if set, must equal the partition's leader epoch: a
	// leader asking for an ISR change (AlterPartition) sends its own.
	LeaderEpoch *int32
	// Requester, if set, is the broker asking for the change (the
	// partition leader, for AlterPartition): it must be the current leader,
	// still registered with that epoch.
	Requester *BrokerEpoch
	// Leader, if set, is the new leader: a replica, or NoLeader.
	Leader *int32
	// ISR, if not empty, is the new in-sync replica set.
	ISR []int32
	// ISREpochs, if not empty, has one broker epoch per ISR member (-1: do
	// not check) that the member must still be registered with (KIP-903).
	ISREpochs []int64
}

// ReassignPartition starts, replaces or cancels the reassignment of one
// partition (KIP-455). Target is the new replica list, preferred leader
// first; nil cancels the reassignment in progress.
//
// While a reassignment is in progress the partition's Replicas are the
// target followed by the original replicas it drops (RemovingReplicas);
// AddingReplicas are the target's brokers the original lacked. The
// adding replicas follow the leader and join the ISR as they catch up;
// the Apply that finds every target replica in the ISR completes the
// move in the same record: Replicas become the target, the ISR loses the
// removed replicas, and leadership moves to the first in-sync target
// replica if the leader was removed.
type ReassignPartition struct {
	TopicID   UUID
	Partition int32
	Target    []int32
}

// UnregisterBroker removes broker ID's registration at Epoch (a broker
// taken out of the cluster for good, after it was drained and stopped):
// it must be fenced, hold no replica, and not have registered again since
// (Epoch). It may register again later.
type UnregisterBroker struct {
	ID    int32
	Epoch int64
}

// SetRemoteLog replaces what the object store holds of one partition
// (tiered storage, KIP-405): its manifest, as the partition's leader
// wrote it (opaque here: package tiered's encoding, which every reader
// decodes as hostile bytes). Only the current leader, at the current
// leader epoch, may write it, and each write names the version after the
// partition's current one: a deposed leader changes nothing. The same
// write again (the current version, the same manifest, from the leader)
// is a no-op, not a refusal: the leader sends it again when it lost the
// answer. It changes neither epoch of the partition.
type SetRemoteLog struct {
	TopicID   UUID
	Partition int32
	// Requester is the leader writing it, registered with that epoch.
	Requester   BrokerEpoch
	LeaderEpoch int32
	// Version must be the partition's RemoteLogVersion + 1.
	Version  int64
	Manifest []byte
}

// ConfigResourceType is the kind of resource a config belongs to (Kafka's
// numbering).
type ConfigResourceType uint8

// Config resource types.
const (
	ConfigTopic  ConfigResourceType = 2
	ConfigBroker ConfigResourceType = 4
	// ConfigGroup is one group's overrides of the group settings (the
	// share-group configs), Name the group id.
	ConfigGroup ConfigResourceType = 32
)

// ConfigOp sets Key to Value, or deletes Key (back to its default).
type ConfigOp struct {
	Key    string
	Value  string
	Delete bool
}

// AlterConfigs applies Ops to a topic's overrides (Type ConfigTopic, Name
// the topic) or to the cluster-wide broker defaults (Type ConfigBroker,
// Name empty). The values are not interpreted here: the proposer validates
// them against the config table before proposing.
type AlterConfigs struct {
	Type ConfigResourceType
	Name string
	Ops  []ConfigOp
}

// AllocateProducerIDs hands the next Count producer ids to broker Broker,
// registered with BrokerEpoch (KIP-730); Result.ProducerIDs holds the
// block.
type AllocateProducerIDs struct {
	Broker      int32
	BrokerEpoch int64
	Count       int32
}

// TakeOffice records that node Controller, the Raft leader of Term, took
// office as the controller. A controller commits it before it answers any
// broker heartbeat, so the image always names the last controller that
// may have granted leadership leases: its successor fences that one's
// broker after the short lease a controller grants itself, not after a
// whole session. Terms only grow: an older or equal one is refused
// (STALE_CONTROLLER_EPOCH).
type TakeOffice struct {
	Controller int32
	Term       uint64
}

// InOffice changes nothing: it is refused (NOT_CONTROLLER) unless the last
// TakeOffice is Controller's in Term. A controller puts it first in a Batch
// whose records it decided from its own observations (the fencing of
// brokers it has not heard from), so that the Batch applies only while
// no other controller has taken office since: a proposal that reaches the
// log after a successor's TakeOffice changes nothing.
type InOffice struct {
	Controller int32
	Term       uint64
}

// Batch applies its records in order, atomically: if one is refused, the
// whole batch is, and the image stays as it was. Batches do not nest.
type Batch struct {
	Records []Record
}

// Kind implements Record.
func (InitCluster) Kind() Kind { return KindInitCluster }

// Kind implements Record.
func (r RegisterBroker) Kind() Kind {
	if len(r.Listeners) > 0 {
		return KindRegisterBrokerListeners
	}
	return KindRegisterBroker
}

// Kind implements Record.
func (FenceBroker) Kind() Kind { return KindFenceBroker }

// Kind implements Record.
func (UnfenceBroker) Kind() Kind { return KindUnfenceBroker }

// Kind implements Record.
func (CreateTopic) Kind() Kind { return KindCreateTopic }

// Kind implements Record.
func (DeleteTopic) Kind() Kind { return KindDeleteTopic }

// Kind implements Record.
func (CreatePartitions) Kind() Kind { return KindCreatePartitions }

// Kind implements Record.
func (ChangePartition) Kind() Kind { return KindChangePartition }

// Kind implements Record.
func (AlterConfigs) Kind() Kind { return KindAlterConfigs }

// Kind implements Record.
func (AllocateProducerIDs) Kind() Kind { return KindAllocateProducerIDs }

// Kind implements Record.
func (Batch) Kind() Kind { return KindBatch }

// Kind implements Record.
func (TakeOffice) Kind() Kind { return KindTakeOffice }

// Kind implements Record.
func (InOffice) Kind() Kind { return KindInOffice }

// Kind implements Record.
func (ReassignPartition) Kind() Kind { return KindReassignPartition }

// Kind implements Record.
func (UnregisterBroker) Kind() Kind { return KindUnregisterBroker }

// Kind implements Record.
func (SetRemoteLog) Kind() Kind { return KindSetRemoteLog }

func (InitCluster) sealed()         {}
func (RegisterBroker) sealed()      {}
func (FenceBroker) sealed()         {}
func (UnfenceBroker) sealed()       {}
func (CreateTopic) sealed()         {}
func (DeleteTopic) sealed()         {}
func (CreatePartitions) sealed()    {}
func (ChangePartition) sealed()     {}
func (AlterConfigs) sealed()        {}
func (AllocateProducerIDs) sealed() {}
func (Batch) sealed()               {}
func (TakeOffice) sealed()          {}
func (InOffice) sealed()            {}
func (ReassignPartition) sealed()   {}
func (UnregisterBroker) sealed()    {}
func (SetRemoteLog) sealed()        {}

// ProducerIDBlock is a range of producer ids [First, First+Count).
type ProducerIDBlock struct {
	First int64
	Count int32
}

// Result is what applying one record returned. Only the node that proposed
// the record sees it (through quorum.Node.Propose); every node computes
// the same one.
type Result struct {
	// Index is the record's Raft log index.
	Index uint64
	// Err is nil, or a *RefusedError: the record is in the log but changed
	// nothing.
	Err error
	// BrokerEpoch is the broker's epoch after RegisterBroker.
	BrokerEpoch int64
	// ProducerIDs is the block AllocateProducerIDs handed out.
	ProducerIDs ProducerIDBlock
}
