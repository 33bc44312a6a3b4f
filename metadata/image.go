package metadata

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"
)

// UUID is a 16-byte identifier: a topic id (Kafka's topic UUID) or a
// broker incarnation id. The zero UUID means "none". Its text form is
// Kafka's: unpadded URL-safe base64.
type UUID [16]byte

// NewUUID returns a random, non-zero UUID. Proposers call it; Apply never
// does (it must be deterministic).
func NewUUID() UUID {
	var u UUID
	for u == (UUID{}) {
		if _, err := rand.Read(u[:]); err != nil {
			panic(fmt.Sprintf("crypto/rand: %v", err)) // does not fail on Linux
		}
	}
	return u
}

// IsZero reports whether u is the zero ("none") UUID.
func (u UUID) IsZero() bool { return u == UUID{} }

// String is Kafka's text form of a UUID.
func (u UUID) String() string { return base64.RawURLEncoding.EncodeToString(u[:]) }

// MarshalText encodes u as its String form (snapshots are JSON).
func (u UUID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText decodes the String form.
func (u *UUID) UnmarshalText(b []byte) error {
	if len(b) != 22 {
		return fmt.Errorf("bad uuid %q: want 22 base64 characters", b)
	}
	n, err := base64.RawURLEncoding.Decode(u[:], b)
	if err != nil || n != 16 {
		return fmt.Errorf("bad uuid %q", b)
	}
	return nil
}

// ParseUUID parses the String form of a UUID.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	err := u.UnmarshalText([]byte(s))
	return u, err
}

// NoLeader is a partition's leader when none of its in-sync replicas can
// lead (all fenced): the partition is offline.
const NoLeader int32 = -1

// FirstProducerID is the first producer id handed out by a new cluster
// (ids below it are never used, as in the single-node broker).
const FirstProducerID int64 = 1000

// Broker is one registered broker.
type Broker struct {
	// ID is the broker's node id (--node-id).
	ID int32 `json:"id"`
	// Incarnation is chosen at random by the broker process at each start;
	// a new incarnation is a new registration.
	Incarnation UUID `json:"incarnation"`
	// Epoch is the Raft log index of the RegisterBroker record that created
	// this registration (Kafka's broker epoch): it grows with every
	// registration, so requests carrying an older epoch are stale.
	Epoch int64 `json:"epoch"`
	// KafkaAddr is the host:port clients and replica fetchers connect to.
	KafkaAddr string `json:"kafka_addr"`
	// ControllerAddr is the broker's controller (Raft) host:port; empty for
	// a broker that is not a controller.
	ControllerAddr string `json:"controller_addr,omitempty"`
	// Rack is broker.rack, empty when unset.
	Rack string `json:"rack,omitempty"`
	// Listeners are its named Kafka listeners (RegisterBroker.Listeners).
	Listeners []Listener `json:"listeners,omitempty"`
	// Fenced brokers lead nothing and do not join an ISR. A registration
	// starts fenced; the controller unfences a broker once it has caught up.
	Fenced bool `json:"fenced,omitempty"`
}

// Equal reports whether b and o are the same registration in every field.
func (b Broker) Equal(o Broker) bool {
	return b.ID == o.ID && b.Incarnation == o.Incarnation && b.Epoch == o.Epoch && b.KafkaAddr == o.KafkaAddr &&
		b.ControllerAddr == o.ControllerAddr && b.Rack == o.Rack && b.Fenced == o.Fenced && slices.Equal(b.Listeners, o.Listeners)
}

// Listener returns the address of b's listener named name. A broker
// registered without listeners has one, PLAINTEXT, at KafkaAddr.
func (b Broker) Listener(name string) (string, bool) {
	if len(b.Listeners) == 0 {
		return b.KafkaAddr, name == "PLAINTEXT"
	}
	for _, l := range b.Listeners {
		if l.Name == name {
			return l.Addr, true
		}
	}
	return "", false
}

// Partition is one partition's replication state. Leader and ISR are
// decided by the controller and change only through ChangePartition.
type Partition struct {
	// Replicas is the assignment, preferred leader first.
	Replicas []int32 `json:"replicas"`
	// ISR is the in-sync replica set, a non-empty subset of Replicas.
	ISR []int32 `json:"isr"`
	// Leader is a member of ISR, or NoLeader.
	Leader int32 `json:"leader"`
	// LeaderEpoch grows with every leader change (the epoch stamped in
	// batches and checked by Fetch, KIP-101/320).
	LeaderEpoch int32 `json:"leader_epoch"`
	// PartitionEpoch grows with every change of this partition (leader,
	// ISR or replicas): the compare-and-set version of ChangePartition
	// (KIP-497).
	PartitionEpoch int32 `json:"partition_epoch"`
	// AddingReplicas and RemovingReplicas are set while the partition is
	// being reassigned (see ReassignPartition): Replicas is then the
	// target followed by RemovingReplicas, and AddingReplicas are the
	// target's brokers that were not replicas before.
	AddingReplicas   []int32 `json:"adding_replicas,omitempty"`
	RemovingReplicas []int32 `json:"removing_replicas,omitempty"`
	// RemoteLogVersion counts the SetRemoteLog records applied to the
	// partition; RemoteLog is the last one's manifest (tiered storage;
	// immutable, shared between images).
	RemoteLogVersion int64  `json:"remote_log_version,omitempty"`
	RemoteLog        []byte `json:"remote_log,omitempty"`
}

// Reassigning reports whether a reassignment of p is in progress.
func (p *Partition) Reassigning() bool {
	return len(p.AddingReplicas) > 0 || len(p.RemovingReplicas) > 0
}

// TargetReplicas is the assignment p has once its reassignment (if any)
// completes: Replicas without RemovingReplicas. It is a new slice.
func (p *Partition) TargetReplicas() []int32 { return without(p.Replicas, p.RemovingReplicas) }

// OriginalReplicas is the assignment p had before its reassignment (if
// any) began: Replicas without AddingReplicas. It is a new slice.
func (p *Partition) OriginalReplicas() []int32 { return without(p.Replicas, p.AddingReplicas) }

// without is the members of s not in drop, in s's order, as a new slice.
func without(s, drop []int32) []int32 {
	out := make([]int32, 0, len(s))
	for _, id := range s {
		if !contains(drop, id) {
			out = append(out, id)
		}
	}
	return out
}

// Topic is one topic.
type Topic struct {
	Name string `json:"name"`
	ID   UUID   `json:"id"`
	// Internal marks broker-owned topics (__consumer_offsets).
	Internal   bool        `json:"internal,omitempty"`
	Partitions []Partition `json:"partitions"`
	// Configs holds the topic's config overrides (key → value).
	Configs map[string]string `json:"configs,omitempty"`
}

// Image is an immutable snapshot of the cluster metadata at one Raft log
// index. Apply returns a new Image and never changes the old one, so a
// reader may keep an Image as long as it likes without locks.
//
// Everything an Image returns (the *Topic values, their Partitions and
// replica slices, config maps) is shared with the Image and must not be
// modified.
type Image struct {
	index          uint64
	clusterID      string
	nextProducerID int64
	office         Office
	brokers        map[int32]Broker
	topics         map[string]*Topic
	topicIDs       map[UUID]string   // id → name
	collisions     map[string]string // collisionKey(name) → name
	brokerConfigs  map[string]string
	groupConfigs   map[string]map[string]string                  // group id → overrides; nil: none
	scram          map[string]map[ScramMechanism]ScramCredential // user → mechanism → credential
	acls           []ACLBinding                                  // sorted by compareACLs, unique
}

// NewImage returns the image of a new, empty cluster (index 0, no cluster
// id yet).
func NewImage() *Image {
	return &Image{
		nextProducerID: FirstProducerID,
		brokers:        map[int32]Broker{},
		topics:         map[string]*Topic{},
		topicIDs:       map[UUID]string{},
		collisions:     map[string]string{},
		brokerConfigs:  map[string]string{},
		scram:          map[string]map[ScramMechanism]ScramCredential{},
	}
}

// Index is the Raft log index of the last record applied to this image
// (refused records included), 0 for a new cluster.
func (img *Image) Index() uint64 { return img.index }

// ClusterID is the cluster's id, empty until the first Raft leader has
// committed InitCluster.
func (img *Image) ClusterID() string { return img.clusterID }

// NextProducerID is the first producer id of the next allocated block.
func (img *Image) NextProducerID() int64 { return img.nextProducerID }

// Office names a controller and the Raft term it took office in
// (TakeOffice).
type Office struct {
	Controller int32  `json:"controller"`
	Term       uint64 `json:"term"`
}

// Office returns the last controller that took office (TakeOffice); ok
// is false until one has.
func (img *Image) Office() (o Office, ok bool) { return img.office, img.office.Term > 0 }

// Broker returns broker id's registration.
func (img *Image) Broker(id int32) (Broker, bool) {
	b, ok := img.brokers[id]
	return b, ok
}

// Brokers returns every registered broker, by id.
func (img *Image) Brokers() []Broker {
	out := make([]Broker, 0, len(img.brokers))
	for _, b := range img.brokers {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// LiveBrokers returns the registered, unfenced brokers, by id: those that
// may hold new replicas, lead, or join an ISR.
func (img *Image) LiveBrokers() []Broker {
	out := make([]Broker, 0, len(img.brokers))
	for _, b := range img.brokers {
		if !b.Fenced {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Topic returns the topic named name, or nil.
func (img *Image) Topic(name string) *Topic { return img.topics[name] }

// TopicByID returns the topic with id, or nil.
func (img *Image) TopicByID(id UUID) *Topic {
	name, ok := img.topicIDs[id]
	if !ok {
		return nil
	}
	return img.topics[name]
}

// Topics returns every topic, by name.
func (img *Image) Topics() []*Topic {
	out := make([]*Topic, 0, len(img.topics))
	for _, t := range img.topics {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// TopicCount is the number of topics.
func (img *Image) TopicCount() int { return len(img.topics) }

// BrokerConfigs returns the cluster-wide broker config defaults (a copy).
func (img *Image) BrokerConfigs() map[string]string {
	out := make(map[string]string, len(img.brokerConfigs))
	for k, v := range img.brokerConfigs {
		out[k] = v
	}
	return out
}

// MaxGroupConfigs bounds the groups with config overrides in the image.
const MaxGroupConfigs = 10000

// GroupConfigs returns every group's config overrides (shared: do not
// modify).
func (img *Image) GroupConfigs() map[string]map[string]string { return img.groupConfigs }

// BrokerConfig returns one cluster-wide broker config default.
func (img *Image) BrokerConfig(key string) (string, bool) {
	v, ok := img.brokerConfigs[key]
	return v, ok
}

// Hash is the SHA-256 of the image's content: its snapshot encoding
// without the index. Two nodes that applied the same log prefix have equal
// hashes, whether they applied every record or restored a snapshot.
func (img *Image) Hash() [32]byte {
	return sha256.Sum256(encodeImage(img, false))
}
