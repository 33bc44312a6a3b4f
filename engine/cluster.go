package engine

import (
	"fmt"
	"maps"

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
	// CoordinatorFor is the broker coordinating group; the engine serves
	// only the groups whose coordinator is its own NodeID (others get
	// NOT_COORDINATOR).
	CoordinatorFor func(group string) int32
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

// checkCoordinator refuses a group this broker does not coordinate (cluster
// mode).
func (c *Coordinator) checkCoordinator(group string) error {
	h := c.eng.clusterHooks()
	if h == nil || h.CoordinatorFor == nil {
		return nil
	}
	if id := h.CoordinatorFor(group); id != c.eng.NodeID() {
		return fmt.Errorf("%w: group %q is coordinated by broker %d", kerr.NotCoordinator, group, id)
	}
	return nil
}
