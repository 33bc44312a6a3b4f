package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"time"

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
	// ShareStates reaches the share coordinator of a share-partition
	// state led by another broker (KIP-932).
	ShareStates ShareStateRemote
	// ShareMember asks the coordinator of share group group, another
	// broker, whether member is a member (nil when it is).
	ShareMember func(group, member string) error
	// SetRemoteLog writes the manifest of a partition's remote segments
	// (tiered storage) into the metadata, as its leader at leaderEpoch,
	// at version (the one after the metadata's); it returns once the
	// controller applied it, or why not.
	SetRemoteLog func(topic TopicID, partition, leaderEpoch int32, version int64, manifest []byte) error
	// GroupConfigs returns a group's config overrides in the newest
	// metadata this broker applied (do not modify). The engine's own
	// copy (ReplaceGroupConfigs) follows the metadata only at the end of
	// a reconcile pass, which on a broker creating many partitions takes
	// hundreds of milliseconds: a share-partition that starts meanwhile
	// must see the share.auto.offset.reset an AlterConfigs just set.
	GroupConfigs func(group string) map[string]string
	// SyncMetadata waits until this broker's metadata holds everything
	// the controller had committed at since, or ctx ends. A
	// share-partition starting without a state waits for it before it
	// reads share.auto.offset.reset: the AlterConfigs that set it may have
	// been answered by another broker, whose image this one's lags.
	SyncMetadata func(ctx context.Context, since time.Time) error
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

// HostPartition gives this broker a replica of partition i of topic name
// (cluster mode: a reassignment added this broker): a new, empty log that
// the replica fetcher fills from the leader. A directory already there
// (left by a crash) is kept aside, renamed *-stray. Hosting a hosted
// partition is a no-op.
func (e *Engine) HostPartition(name string, i int32) error { return e.rehost(name, i, true, false) }

// DropPartition removes this broker's replica of partition i of topic
// name (a reassignment moved it away): its log is closed and deleted, or
// with stray kept, renamed *-stray. Dropping a partition not hosted here
// is a no-op.
func (e *Engine) DropPartition(name string, i int32, stray bool) error {
	return e.rehost(name, i, false, stray)
}

// rehost replaces partition i of a topic by a new Partition hosted here
// or not: the metadata file lists the change before the new one is
// published, and the old one's log is removed only after that.
func (e *Engine) rehost(name string, i int32, hosted, stray bool) error {
	t, done, err := e.topicAdmin(name)
	if err != nil {
		return err
	}
	defer done()
	parts := t.Partitions()
	if i < 0 || int(i) >= len(parts) {
		return fmt.Errorf("%w: topic %q has no partition %d", kerr.UnknownTopicOrPartition, name, i)
	}
	old := parts[i]
	if old.Hosted() == hosted {
		return nil
	}
	np := e.newPartition(t, i)
	np.notHosted = !hosted
	if hosted {
		if _, err := os.Stat(np.dir); err == nil {
			if err := keepAside(np.dir, t.ID); err != nil {
				return fmt.Errorf("%w: %w", kerr.KafkaStorageError, err)
			}
			e.logger.Warn("a directory was in the way of a new replica: kept, renamed *"+straySuffix, "partition", np.String())
		}
		if err := e.createLogs([]*Partition{np}, t.Config()); err != nil {
			return err
		}
	}
	e.metaMu.Lock()
	next := e.meta.clone()
	for j := range next.Topics {
		if next.Topics[j].Name != name {
			continue
		}
		nh := slices.DeleteFunc(slices.Clone(next.Topics[j].NotHosted), func(x int32) bool { return x == i })
		if !hosted {
			nh = append(nh, i)
			slices.Sort(nh)
		}
		next.Topics[j].NotHosted = nh
	}
	if err := saveMeta(e.cfg.DataDir, e.cfg.Perm, next); err != nil {
		e.metaMu.Unlock()
		deleteLogs([]*Partition{np})
		return fmt.Errorf("%w: write metadata: %w", kerr.KafkaStorageError, err)
	}
	if hosted {
		np.shard.adopt(np)
	}
	newParts := slices.Clone(parts)
	newParts[i] = np
	e.mu.Lock()
	e.meta = next
	t.parts.Store(&newParts)
	e.mu.Unlock()
	e.metaMu.Unlock()
	old.remove(stray, false) // the remote segments are the partition's, wherever it lives
	if hosted {
		e.logger.Info("hosting a new replica", "partition", np.String())
	} else {
		e.logger.Info("removed a replica moved to other brokers", "partition", np.String(), "kept", stray)
	}
	return nil
}

// keepAside renames a partition directory <dir>.<topic id>-stray (or,
// when that is taken, <dir>.<topic id>.<n>-stray): kept for an operator,
// never deleted.
func keepAside(dir string, id TopicID) error {
	base := dir + "." + id.String()
	to := base + straySuffix
	for n := 1; ; n++ {
		if _, err := os.Lstat(to); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if n > 1000 {
			return fmt.Errorf("keep %s aside: too many stray copies", dir)
		}
		to = base + "." + strconv.Itoa(n) + straySuffix
	}
	if err := os.Rename(dir, to); err != nil {
		return fmt.Errorf("keep %s aside: %w", dir, err)
	}
	return nil
}
