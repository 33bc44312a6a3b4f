package engine

import (
	"fmt"
	"maps"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ClusterHooks is what the engine asks of cluster mode (package cluster
// sets them, before the listeners start); in single-node mode there are
// none and the engine decides alone.
type ClusterHooks struct {
	// AutoCreateTopic creates topic name through the cluster controller
	// and returns once this broker's registry has it (or the error).
	AutoCreateTopic func(name string) error
	// AllocateProducerIDs reserves a block of producer ids from the
	// controller: [first, first+count).
	AllocateProducerIDs func() (first int64, count int32, err error)
	// VerifyTxn asks the coordinator of transactional id (another
	// broker) whether tp is in the open transaction of producer
	// pid/epoch (AddPartitionsToTxn v4, verify only); nil means it is.
	VerifyTxn func(id string, pid int64, epoch int16, tp TopicPartition) error
	// WriteTxnMarkers sends mk to the leaders of parts (WriteTxnMarkers)
	// and returns an error per partition, nil where the marker is
	// written (or the topic no longer exists).
	WriteTxnMarkers func(mk TxnMarker, parts []TopicPartition) []error
	// MayLead reports whether this broker's leadership lease holds. A
	// replicated partition's leader appends nothing without it (answer:
	// NOT_LEADER_OR_FOLLOWER): a broker that was paused, or could not
	// reach the controller, may have had its leaderships moved before
	// its metadata says so.
	MayLead func() bool
}

// SetClusterHooks turns on cluster mode's hooks. Call it once, before the
// engine serves requests.
func (e *Engine) SetClusterHooks(h ClusterHooks) { e.hooks.Store(&h) }

// clusterHooks returns the hooks, nil in single-node mode.
func (e *Engine) clusterHooks() *ClusterHooks { return e.hooks.Load() }

// DynamicBrokerConfigs returns the broker-level topic defaults set at run
// time (AlterBrokerDefaults), without the --topic-default ones.
func (e *Engine) DynamicBrokerConfigs() map[string]string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return maps.Clone(e.meta.BrokerConfigs)
}

// hostedOnly returns the partitions whose logs live here.
func hostedOnly(parts []*Partition) []*Partition {
	out := make([]*Partition, 0, len(parts))
	for _, p := range parts {
		if p.Hosted() {
			out = append(out, p)
		}
	}
	return out
}

// checkCoordinator refuses a group this broker does not coordinate
// (cluster mode): the coordinator of a group is the leader of its
// __consumer_offsets partition, once it replayed that partition.
func (c *Coordinator) checkCoordinator(group string) error {
	if c.loaded == nil {
		return nil
	}
	return checkLeads(c.partitionFor(group), OffsetsTopic, "group "+strconv.Quote(group), c.Loaded)
}

// checkLeads is the cluster-mode coordinator check of a key (a group, a
// transactional id) whose state is in partition p of an internal topic
// (nil while the topic does not exist): this broker must lead p and have
// loaded it (loaded).
func checkLeads(p *Partition, topic, key string, loaded func(int32) bool) error {
	if p == nil {
		return fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, topic)
	}
	if p.Role() != RoleLeader {
		return fmt.Errorf("%w: %s belongs to %s, which this broker does not lead", kerr.NotCoordinator, key, p)
	}
	if !loaded(p.Index) {
		return fmt.Errorf("%w: %s is being loaded", kerr.CoordinatorLoadInProgress, p)
	}
	return nil
}
