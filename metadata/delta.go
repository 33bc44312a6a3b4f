package metadata

import (
	"maps"
	"slices"
	"sort"
)

// Delta is what changed between two images (see Diff). Topics are matched
// by id, so a topic deleted and re-created under the same name appears in
// both DeletedTopics and CreatedTopics.
type Delta struct {
	Old, New *Image
	// Brokers lists brokers registered, re-registered, fenced or unfenced,
	// by id.
	Brokers []BrokerChange
	// CreatedTopics and DeletedTopics are sorted by name.
	CreatedTopics []*Topic
	DeletedTopics []*Topic
	// Partitions lists every partition whose state changed, including
	// every partition of a created topic and new partitions of an existing
	// one (Old nil then), by topic name and partition. Partitions of
	// deleted topics are not listed.
	Partitions []PartitionChange
	// TopicConfigs lists topics (existing in both images) whose config
	// overrides changed, by name.
	TopicConfigs []*Topic
	// BrokerConfigs is set when the cluster-wide broker defaults changed.
	BrokerConfigs bool
	// GroupConfigs is set when a group's config overrides changed.
	GroupConfigs bool
	// ClusterID is set when the cluster id changed (InitCluster).
	ClusterID bool
}

// BrokerChange is one broker's registration before (nil if new) and after.
type BrokerChange struct {
	Old *Broker
	New Broker
}

// PartitionChange is one partition's state before (nil if new) and after.
type PartitionChange struct {
	Topic     *Topic // in the new image
	Partition int32
	Old       *Partition
	New       *Partition
}

// Empty reports whether nothing changed.
func (d *Delta) Empty() bool {
	return len(d.Brokers) == 0 && len(d.CreatedTopics) == 0 && len(d.DeletedTopics) == 0 &&
		len(d.Partitions) == 0 && len(d.TopicConfigs) == 0 && !d.BrokerConfigs && !d.GroupConfigs && !d.ClusterID
}

// Diff computes what changed from old to new. It is cheap when little
// changed: Apply shares unchanged topics between images, so unchanged
// topics are skipped by pointer comparison. The pointers in the Delta
// point into old and new and must not be modified.
func Diff(old, new *Image) Delta {
	d := Delta{Old: old, New: new, ClusterID: old.clusterID != new.clusterID,
		BrokerConfigs: !maps.Equal(old.brokerConfigs, new.brokerConfigs),
		GroupConfigs:  !maps.EqualFunc(old.groupConfigs, new.groupConfigs, maps.Equal[map[string]string])}
	for _, b := range new.Brokers() {
		ob, ok := old.brokers[b.ID]
		switch {
		case !ok:
			d.Brokers = append(d.Brokers, BrokerChange{New: b})
		case !ob.Equal(b):
			d.Brokers = append(d.Brokers, BrokerChange{Old: &ob, New: b})
		}
	}
	for _, t := range new.Topics() {
		ot := old.TopicByID(t.ID)
		if ot == t {
			continue
		}
		if ot == nil {
			d.CreatedTopics = append(d.CreatedTopics, t)
		} else if !maps.Equal(ot.Configs, t.Configs) {
			d.TopicConfigs = append(d.TopicConfigs, t)
		}
		for i := range t.Partitions {
			np := &t.Partitions[i]
			if ot != nil && i < len(ot.Partitions) {
				op := &ot.Partitions[i]
				if samePartition(op, np) {
					continue
				}
				d.Partitions = append(d.Partitions, PartitionChange{Topic: t, Partition: int32(i), Old: op, New: np})
				continue
			}
			d.Partitions = append(d.Partitions, PartitionChange{Topic: t, Partition: int32(i), New: np})
		}
	}
	for _, t := range old.topics {
		if new.TopicByID(t.ID) == nil {
			d.DeletedTopics = append(d.DeletedTopics, t)
		}
	}
	sort.Slice(d.DeletedTopics, func(i, j int) bool { return d.DeletedTopics[i].Name < d.DeletedTopics[j].Name })
	return d
}

func samePartition(a, b *Partition) bool {
	return a.Leader == b.Leader && a.LeaderEpoch == b.LeaderEpoch && a.PartitionEpoch == b.PartitionEpoch &&
		slices.Equal(a.Replicas, b.Replicas) && slices.Equal(a.ISR, b.ISR) &&
		slices.Equal(a.AddingReplicas, b.AddingReplicas) && slices.Equal(a.RemovingReplicas, b.RemovingReplicas)
}

// Role is what one broker is for one partition.
type Role int8

// Roles.
const (
	// NotReplica: the broker holds no replica of the partition.
	NotReplica Role = iota
	// Leader: the broker leads the partition.
	Leader
	// Follower: the broker holds a replica and someone else (or no one)
	// leads.
	Follower
)

// RoleOf is broker's role for partition p (nil: NotReplica).
func RoleOf(p *Partition, broker int32) Role {
	switch {
	case p == nil || !contains(p.Replicas, broker):
		return NotReplica
	case p.Leader == broker:
		return Leader
	}
	return Follower
}
