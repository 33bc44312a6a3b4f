package metadata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// SnapshotVersion is the "version" of the image encoding.
const SnapshotVersion = 1

// ErrBadSnapshot is wrapped by every DecodeImage error.
var ErrBadSnapshot = errors.New("metadata: bad snapshot")

// snapshot is the JSON form of an image. Lists are sorted (brokers by id,
// topics by name) and empty fields omitted, so the encoding is a function
// of the image's content alone.
type snapshot struct {
	Version        int               `json:"version"`
	Index          uint64            `json:"index,omitempty"`
	ClusterID      string            `json:"cluster_id,omitempty"`
	NextProducerID int64             `json:"next_producer_id"`
	Office         *Office           `json:"office,omitempty"`
	Brokers        []Broker          `json:"brokers,omitempty"`
	Topics         []*Topic          `json:"topics,omitempty"`
	BrokerConfigs  map[string]string `json:"broker_configs,omitempty"`
	// GroupConfigs: group id → config overrides (share-group configs).
	GroupConfigs map[string]map[string]string `json:"group_configs,omitempty"`
	Scram        []snapshotScram              `json:"scram,omitempty"`
	ACLs         []ACLBinding                 `json:"acls,omitempty"`
}

// EncodeImage encodes the whole image as JSON (the Raft snapshot).
func EncodeImage(img *Image) []byte { return encodeImage(img, true) }

func encodeImage(img *Image, withIndex bool) []byte {
	s := snapshot{
		Version:        SnapshotVersion,
		ClusterID:      img.clusterID,
		NextProducerID: img.nextProducerID,
		Brokers:        img.Brokers(),
		Topics:         img.Topics(),
		BrokerConfigs:  img.brokerConfigs,
		GroupConfigs:   img.groupConfigs,
		Scram:          img.scramList(),
		ACLs:           img.acls,
	}
	if o, ok := img.Office(); ok {
		s.Office = &o
	}
	if withIndex {
		s.Index = img.index
	}
	b, err := json.Marshal(&s)
	if err != nil {
		// Only unsupported types or values fail, and the image has none.
		panic(fmt.Sprintf("metadata: encode image: %v", err))
	}
	return b
}

// DecodeImage decodes and checks an EncodeImage encoding. It never panics;
// every error wraps ErrBadSnapshot. Besides the JSON it checks what Apply
// guarantees: unique broker ids, valid and unique topic names and ids,
// partitions whose replicas are distinct registered brokers, whose ISR is
// a non-empty subset of them and whose leader is in the ISR (or none).
func DecodeImage(b []byte) (*Image, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s snapshot
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the image", ErrBadSnapshot)
	}
	if s.Version != SnapshotVersion {
		return nil, fmt.Errorf("%w: version %d (this broker reads version %d)", ErrBadSnapshot, s.Version, SnapshotVersion)
	}
	img, err := buildImage(&s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	return img, nil
}

func buildImage(s *snapshot) (*Image, error) {
	img := NewImage()
	img.index = s.Index
	if s.ClusterID != "" {
		if err := validClusterID(s.ClusterID); err != nil {
			return nil, errors.New(err.Reason)
		}
	}
	img.clusterID = s.ClusterID
	if s.NextProducerID < 0 {
		return nil, fmt.Errorf("next producer id %d is negative", s.NextProducerID)
	}
	img.nextProducerID = s.NextProducerID
	if o := s.Office; o != nil {
		if o.Controller < 0 || o.Term == 0 {
			return nil, fmt.Errorf("office: controller %d in term %d", o.Controller, o.Term)
		}
		img.office = *o
	}
	for _, b := range s.Brokers {
		if b.ID < 0 {
			return nil, fmt.Errorf("broker id %d is negative", b.ID)
		}
		if _, dup := img.brokers[b.ID]; dup {
			return nil, fmt.Errorf("broker %d appears twice", b.ID)
		}
		if b.Epoch < 0 {
			return nil, fmt.Errorf("broker %d: epoch %d is negative", b.ID, b.Epoch)
		}
		if !utf8.ValidString(b.KafkaAddr) || !utf8.ValidString(b.ControllerAddr) || !utf8.ValidString(b.Rack) {
			return nil, fmt.Errorf("broker %d: a string is not UTF-8", b.ID)
		}
		if err := checkListeners(b.Listeners); err != nil {
			return nil, fmt.Errorf("broker %d: %v", b.ID, err)
		}
		if len(b.Listeners) == 0 {
			b.Listeners = nil
		}
		img.brokers[b.ID] = b
	}
	for _, t := range s.Topics {
		if t == nil {
			return nil, errors.New("null topic")
		}
		if err := validTopicName(t.Name); err != nil {
			return nil, errors.New(err.Reason)
		}
		if _, dup := img.topics[t.Name]; dup {
			return nil, fmt.Errorf("topic %q appears twice", t.Name)
		}
		if other, ok := img.collisions[collisionKey(t.Name)]; ok {
			return nil, fmt.Errorf("topic %q collides with %q", t.Name, other)
		}
		if t.ID.IsZero() {
			return nil, fmt.Errorf("topic %q: zero id", t.Name)
		}
		if other, ok := img.topicIDs[t.ID]; ok {
			return nil, fmt.Errorf("topic %q: id %s belongs to %q", t.Name, t.ID, other)
		}
		if len(t.Partitions) < 1 || len(t.Partitions) > MaxPartitions {
			return nil, fmt.Errorf("topic %q: %d partitions", t.Name, len(t.Partitions))
		}
		for i, p := range t.Partitions {
			if err := img.checkPartition(p); err != nil {
				return nil, fmt.Errorf("topic %q partition %d: %v", t.Name, i, err)
			}
		}
		for k, v := range t.Configs {
			if err := validConfigKey(k); err != nil {
				return nil, fmt.Errorf("topic %q: %s", t.Name, err.Reason)
			}
			if !utf8.ValidString(v) {
				return nil, fmt.Errorf("topic %q: config %q is not UTF-8", t.Name, k)
			}
		}
		if len(t.Configs) == 0 {
			t.Configs = nil
		}
		img.topics[t.Name] = t
		img.topicIDs[t.ID] = t.Name
		img.collisions[collisionKey(t.Name)] = t.Name
	}
	for k, v := range s.BrokerConfigs {
		if err := validConfigKey(k); err != nil {
			return nil, errors.New(err.Reason)
		}
		if !utf8.ValidString(v) {
			return nil, fmt.Errorf("broker config %q is not UTF-8", k)
		}
		img.brokerConfigs[k] = v
	}
	if len(s.GroupConfigs) > MaxGroupConfigs {
		return nil, fmt.Errorf("%d groups with configs, at most %d", len(s.GroupConfigs), MaxGroupConfigs)
	}
	for g, cfg := range s.GroupConfigs {
		if g == "" || !utf8.ValidString(g) || len(cfg) == 0 {
			return nil, fmt.Errorf("group config of group %q: empty or not UTF-8", g)
		}
		for k, v := range cfg {
			if err := validConfigKey(k); err != nil {
				return nil, errors.New(err.Reason)
			}
			if !utf8.ValidString(v) {
				return nil, fmt.Errorf("group config %q is not UTF-8", k)
			}
		}
		if img.groupConfigs == nil {
			img.groupConfigs = map[string]map[string]string{}
		}
		img.groupConfigs[g] = cfg
	}
	if err := img.restoreSecurity(s.Scram, s.ACLs); err != nil {
		return nil, err
	}
	return img, nil
}

// checkPartition checks the invariants Apply keeps for one partition.
func (img *Image) checkPartition(p Partition) error {
	if len(p.Replicas) == 0 || len(p.Replicas) > MaxReplicas {
		return fmt.Errorf("%d replicas; want 1 to %d", len(p.Replicas), MaxReplicas)
	}
	for i, id := range p.AddingReplicas {
		if !contains(p.Replicas, id) || contains(p.AddingReplicas[:i], id) || contains(p.RemovingReplicas, id) {
			return fmt.Errorf("adding replica %d is not a replica, is listed twice, or is also removing", id)
		}
	}
	for i, id := range p.RemovingReplicas {
		if !contains(p.Replicas, id) || contains(p.RemovingReplicas[:i], id) {
			return fmt.Errorf("removing replica %d is not a replica or is listed twice", id)
		}
	}
	if len(p.RemovingReplicas) == len(p.Replicas) {
		return errors.New("every replica is removing")
	}
	for i, id := range p.Replicas {
		if _, ok := img.brokers[id]; !ok {
			return fmt.Errorf("replica %d is not a registered broker", id)
		}
		if contains(p.Replicas[:i], id) {
			return fmt.Errorf("replica %d appears twice", id)
		}
	}
	if len(p.ISR) == 0 {
		return errors.New("empty ISR")
	}
	for i, id := range p.ISR {
		if !contains(p.Replicas, id) {
			return fmt.Errorf("ISR member %d is not a replica", id)
		}
		if contains(p.ISR[:i], id) {
			return fmt.Errorf("ISR member %d appears twice", id)
		}
	}
	if p.Leader != NoLeader && !contains(p.ISR, p.Leader) {
		return fmt.Errorf("leader %d is not in the ISR", p.Leader)
	}
	if p.LeaderEpoch < 0 || p.PartitionEpoch < 0 {
		return fmt.Errorf("negative epoch (leader %d, partition %d)", p.LeaderEpoch, p.PartitionEpoch)
	}
	if p.RemoteLogVersion < 0 || len(p.RemoteLog) > MaxRemoteLog {
		return fmt.Errorf("remote log version %d of %d bytes", p.RemoteLogVersion, len(p.RemoteLog))
	}
	return nil
}
