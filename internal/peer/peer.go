// Package peer is what one broker asks another in cluster mode, typed:
// the requests to the controller (registration, heartbeats, producer-id
// blocks, ISR changes, topic creation), their answers, and Transport,
// the interface that carries them. Package cluster asks and answers in
// these types; internal/peerwire carries them as Kafka's
// BrokerRegistration, BrokerHeartbeat, AllocateProducerIds,
// AlterPartition and CreateTopics requests, and netio turns those back
// into these types on the controller. Errors wrap a Kafka error (kerr)
// first.
package peer

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/metadata"
)

// Registration is a broker's BrokerRegistration.
type Registration struct {
	BrokerID    int32
	ClusterID   string
	Incarnation [16]byte
	// Listeners are the broker's advertised listeners; the first is the
	// inter-broker one.
	Listeners []metadata.Listener
	Rack      string
}

// Heartbeat is a broker's BrokerHeartbeat.
type Heartbeat struct {
	BrokerID    int32
	BrokerEpoch int64
	// MetadataOffset is the last metadata log index the broker applied.
	MetadataOffset int64
	// WantFence asks to be fenced (a controlled shutdown).
	WantFence bool
}

// HeartbeatAnswer is the controller's answer to a Heartbeat.
type HeartbeatAnswer struct {
	// Fenced: the broker is fenced (serves nothing as a leader).
	Fenced bool
	// CaughtUp: the broker's metadata holds everything the controller
	// had when it answered.
	CaughtUp bool
	// MetadataIndex is the controller's metadata index when it answered
	// (0: not told): a broker that has applied it holds everything
	// committed before it sent the heartbeat. It travels in the
	// BrokerHeartbeat response's MetadataIndexTag field.
	MetadataIndex int64
}

// MetadataIndexTag is the tag of a BrokerHeartbeat response's field that
// carries HeartbeatAnswer.MetadataIndex, 8 bytes big-endian (ringlog's
// own: past the tags Kafka uses).
const MetadataIndexTag = 0x4d49

// EncodeMetadataIndex is the MetadataIndexTag field's value.
func EncodeMetadataIndex(i int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }

// DecodeMetadataIndex reads the MetadataIndexTag field's value (bytes
// from the network): 0 when it is not 8 bytes of a positive index.
func DecodeMetadataIndex(b []byte) int64 {
	if len(b) != 8 {
		return 0
	}
	return max(int64(binary.BigEndian.Uint64(b)), 0)
}

// ProducerIDs is a block of producer ids: First to First+Count-1.
type ProducerIDs struct {
	First int64
	Count int32
}

// ISRChange is one partition's ISR change a leader asks for (KIP-497).
type ISRChange struct {
	TopicID        [16]byte
	Partition      int32
	LeaderEpoch    int32
	PartitionEpoch int32
	ISR            []int32
	// ISREpochs, when set, are the broker epochs of ISR's members, in
	// order (AlterPartition v3).
	ISREpochs []int64
}

// AlterPartition is a leader's request for ISR changes.
type AlterPartition struct {
	BrokerID    int32
	BrokerEpoch int64
	Changes     []ISRChange
}

// ISRChangeAnswer is the controller's answer to one ISRChange: Err, and
// the partition as the controller's image has it afterwards (Leader -1
// when unknown).
type ISRChangeAnswer struct {
	TopicID        [16]byte
	Partition      int32
	Err            error
	Leader         int32
	LeaderEpoch    int32
	PartitionEpoch int32
	ISR            []int32
}

// Transport carries requests to another broker's inter-broker listener at
// addr (the replica fetchers' connections are Replicas'). An error of the request as a whole (the broker is unreachable,
// not the controller, refused it) is the error result; per-partition
// refusals are in the answers.
type Transport interface {
	// Register registers a broker with the controller and returns its
	// broker epoch.
	Register(ctx context.Context, addr string, r Registration) (int64, error)
	// Heartbeat keeps a broker's session with the controller.
	Heartbeat(ctx context.Context, addr string, h Heartbeat) (HeartbeatAnswer, error)
	// AllocateProducerIDs takes a block of producer ids from the
	// controller for broker (registered with epoch).
	AllocateProducerIDs(ctx context.Context, addr string, broker int32, epoch int64) (ProducerIDs, error)
	// AlterPartition asks the controller for ISR changes; the answers
	// are in the order of a.Changes.
	AlterPartition(ctx context.Context, addr string, a AlterPartition) ([]ISRChangeAnswer, error)
	// CreateTopic asks the controller to create a topic with the
	// defaults (auto-creation).
	CreateTopic(ctx context.Context, addr string, name string) error
	// SetRemoteLog asks the controller to write a partition's remote
	// log manifest (tiered storage) as its leader.
	SetRemoteLog(ctx context.Context, addr string, r RemoteLog) error
}

// RemoteLog is a partition leader's new manifest of the partition's
// segments in tiered storage (metadata.SetRemoteLog). It travels as an
// AlterPartition partition entry (the leader's epochs, no ISR) whose
// tagged field RemoteLogTag holds Version (8 bytes, big-endian) and
// then Manifest.
type RemoteLog struct {
	BrokerID    int32
	BrokerEpoch int64
	TopicID     [16]byte
	Partition   int32
	LeaderEpoch int32
	Version     int64
	Manifest    []byte
}

// RemoteLogTag is the tag of an AlterPartition partition entry's field
// that carries a RemoteLog (ringlog's own: past the tags Kafka uses).
const RemoteLogTag = 0x524c

// EncodeRemoteLog is the tagged field's value: version, then manifest.
func EncodeRemoteLog(version int64, manifest []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(manifest)), uint64(version)), manifest...)
}

// DecodeRemoteLog splits a tagged field's value (bytes from the network:
// hostile) into the version and the manifest, which it leaves to be
// checked (tiered.DecodeManifest).
func DecodeRemoteLog(b []byte) (version int64, manifest []byte, err error) {
	if len(b) < 8 {
		return 0, nil, fmt.Errorf("%w: a remote log field of %d bytes", kerr.InvalidRequest, len(b))
	}
	version = int64(binary.BigEndian.Uint64(b))
	if version <= 0 {
		return 0, nil, fmt.Errorf("%w: remote log version %d", kerr.InvalidRequest, version)
	}
	return version, b[8:], nil
}

// ReplicaFetch is a follower's Fetch of the partitions one leader leads.
type ReplicaFetch struct {
	// ReplicaID is the follower's broker id.
	ReplicaID int32
	// MaxWait is how long the leader may hold the fetch for data.
	MaxWait time.Duration
	// MaxBytes bounds the answer; PartitionMaxBytes each partition's.
	MaxBytes, PartitionMaxBytes int32
	Partitions                  []FetchPartition
}

// FetchPartition is one partition of a ReplicaFetch.
type FetchPartition struct {
	Topic     string
	Partition int32
	// LeaderEpoch is the leader epoch the follower knows.
	LeaderEpoch int32
	// Offset is the follower's log end (durable): where to read from.
	Offset int64
}

// Fetched is the leader's answer for one partition of a ReplicaFetch.
type Fetched struct {
	Topic     string
	Partition int32
	Err       error
	// HighWatermark and LogStart are the leader's (-1 when unknown).
	HighWatermark, LogStart int64
	// Records are whole record batches from Offset on.
	Records []byte
}

// EpochQuery asks a leader where its leader epoch LeaderEpoch ends
// (OffsetForLeaderEpoch, KIP-101/279).
type EpochQuery struct {
	Topic     string
	Partition int32
	// CurrentLeaderEpoch is the leader epoch the follower knows.
	CurrentLeaderEpoch int32
	LeaderEpoch        int32
}

// EpochEnd is the leader's answer to an EpochQuery: the largest epoch it
// has at or below the one asked, and where that epoch ends (both -1 when
// it has none).
type EpochEnd struct {
	Topic       string
	Partition   int32
	Err         error
	LeaderEpoch int32
	EndOffset   int64
}

// ReplicaConn is a replica fetcher's own connection to one leader: one
// request at a time.
type ReplicaConn interface {
	// Fetch sends f; the answers are the leader's, per partition.
	Fetch(ctx context.Context, f ReplicaFetch) ([]Fetched, error)
	// EpochEnds asks where epochs end, for replica replicaID.
	EpochEnds(ctx context.Context, replicaID int32, qs []EpochQuery) ([]EpochEnd, error)
	// Close closes the connection.
	Close() error
}

// Replicas opens the replica fetchers' connections.
type Replicas interface {
	// DialReplica opens a connection to the leader at addr.
	DialReplica(ctx context.Context, addr string) (ReplicaConn, error)
}

// TxnVerify asks a transaction coordinator whether a partition is in the
// open transaction of a producer (AddPartitionsToTxn v4 with VerifyOnly,
// KIP-890), as a partition leader asks before a transactional append.
type TxnVerify struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Topic           string
	Partition       int32
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// TxnMarkers asks a leader to write a transaction's end marker in some of
// its partitions (WriteTxnMarkers).
type TxnMarkers struct {
	ProducerID       int64
	ProducerEpoch    int16
	Commit           bool
	CoordinatorEpoch int32
	Partitions       []TopicPartition
}

// Txns carries the transaction calls between brokers.
type Txns interface {
	// VerifyTxn asks the coordinator at addr; nil when the partition is
	// in the transaction.
	VerifyTxn(ctx context.Context, addr string, v TxnVerify) error
	// WriteTxnMarkers asks the leader at addr; the errors are per
	// partition, in the order of m.Partitions.
	WriteTxnMarkers(ctx context.Context, addr string, m TxnMarkers) ([]error, error)
}

// ShareKey names a share-partition's state (KIP-932): a share group's
// view of one topic partition.
type ShareKey struct {
	Group     string
	TopicID   [16]byte
	Partition int32
}

// ShareBatch is a run of offsets of a share-partition's state with one
// delivery state and count.
type ShareBatch struct {
	First, Last   int64
	State         int8
	DeliveryCount int16
}

// ShareState is a share-partition's persisted state.
type ShareState struct {
	StateEpoch, LeaderEpoch int32
	Start                   int64
	Batches                 []ShareBatch
}

// ShareStates is what a share-partition leader and a group coordinator
// ask the share coordinator of a key (the leader of its
// __share_group_state partition): Kafka's ReadShareGroupState,
// WriteShareGroupState, InitializeShareGroupState (a reset to a start
// offset at a new state epoch) and DeleteShareGroupState.
type ShareStates interface {
	// ReadShareState returns the state, false when there is none (then
	// StateEpoch is where a new one starts); leaderEpoch is the reading
	// partition leader's, which fences older leaders' writes.
	ReadShareState(ctx context.Context, addr string, k ShareKey, leaderEpoch int32) (ShareState, bool, error)
	WriteShareState(ctx context.Context, addr string, k ShareKey, st ShareState) error
	ResetShareState(ctx context.Context, addr string, k ShareKey, start int64) error
	DeleteShareState(ctx context.Context, addr string, k ShareKey) error
}
