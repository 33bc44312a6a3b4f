package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine/sharegroup"
)

// A topic hosting a subset of its partitions (cluster mode): the others
// have no log and answer NOT_LEADER_OR_FOLLOWER, across a restart and
// when partitions are added.
func TestHostedSubset(t *testing.T) {
	dir := t.TempDir()
	e := openTestEngine(t, dir, nil)
	id := newTopicID()
	tp, err := e.CreateTopic(CreateTopicRequest{Name: "t", ID: id, Partitions: 3, ReplicationFactor: -1, NotHosted: []int32{0, 2}})
	if err != nil {
		t.Fatal(err)
	}
	if tp.ID != id {
		t.Fatalf("topic id %s, want the given %s", tp.ID, id)
	}
	check := func(e *Engine, hosted map[int32]bool) {
		t.Helper()
		tp := e.Topic("t")
		for _, p := range tp.Partitions() {
			_, err := p.Log()
			_, serr := os.Stat(filepath.Join(dir, p.String()))
			if hosted[p.Index] {
				if err != nil || serr != nil || !p.Hosted() {
					t.Errorf("%s: hosted, but log %v, dir %v", p, err, serr)
				}
				continue
			}
			if !errors.Is(err, kerr.NotLeaderForPartition) || serr == nil || p.Hosted() {
				t.Errorf("%s: not hosted, but log error %v, dir %v", p, err, serr)
			}
		}
	}
	check(e, map[int32]bool{1: true})
	appendSync(t, e.Topic("t").Partition(1), idem(t, -1, 0, 0, 1), -1)
	if err := e.AddPartitions("t", 5, []int32{0, 2, 4}); err != nil {
		t.Fatal(err)
	}
	check(e, map[int32]bool{1: true, 3: true})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, dir, nil)
	check(e, map[int32]bool{1: true, 3: true})
	if got := e.Topic("t").Partition(1).HighWatermark(); got != 1 {
		t.Fatalf("hosted partition's data: high watermark %d, want 1", got)
	}
}

// StrayTopic keeps the data, renamed -stray; DeleteTopic removes it.
func TestStrayTopicKeepsData(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, nil)
	tp, err := e.CreateTopic(CreateTopicRequest{Name: "s", Partitions: 2, ReplicationFactor: -1})
	if err != nil {
		t.Fatal(err)
	}
	appendSync(t, tp.Partition(0), idem(t, -1, 0, 0, 1), -1)
	if err := e.StrayTopic("s"); err != nil {
		t.Fatal(err)
	}
	if e.Topic("s") != nil {
		t.Fatal("stray topic still registered")
	}
	for i := 0; i < 2; i++ {
		p := filepath.Join(dir, "s-"+string(rune('0'+i))+"."+tp.ID.String()+straySuffix)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("stray log kept as %s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "s-0")); !os.IsNotExist(err) {
		t.Fatalf("original directory still there: %v", err)
	}
	// The name is free again.
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "s", Partitions: 1, ReplicationFactor: -1}); err != nil {
		t.Fatal(err)
	}
}

// The cluster hooks: auto-creation and producer-id blocks come from the
// cluster.
func TestClusterHooks(t *testing.T) {
	e := openEngine(t, t.TempDir(), func(c *Config) { c.NodeID = 2 })
	var created []string
	e.SetClusterHooks(ClusterHooks{
		AutoCreateTopic: func(name string) error {
			created = append(created, name)
			_, err := e.CreateTopic(CreateTopicRequest{Name: name, Partitions: 1, ReplicationFactor: -1})
			return err
		},
		AllocateProducerIDs: func() (int64, int32, error) { return 5000, 2, nil },
	})
	if _, err := e.GetOrCreateTopic("auto"); err != nil || len(created) != 1 {
		t.Fatalf("auto-create through the hook: %v, calls %v", err, created)
	}
	for _, want := range []int64{5000, 5001, 5000} {
		id, err := e.AllocateProducerID()
		if err != nil || id != want {
			t.Fatalf("producer id %d (%v), want %d from the cluster's block", id, err, want)
		}
	}
}

// In cluster mode a broker coordinates the groups of the __consumer_offsets
// partitions it leads, once it replayed them; commits survive a reload
// (what a new leader does).
func TestReplicatedCoordinatorFollowsLeadership(t *testing.T) {
	e := openEngine(t, t.TempDir(), func(c *Config) { c.NodeID, c.Replicated = 1, true })
	co := e.Coordinator()
	if _, err := co.Group("g", true); !errors.Is(err, kerr.CoordinatorNotAvailable) {
		t.Fatalf("no offsets topic yet: %v, want COORDINATOR_NOT_AVAILABLE", err)
	}
	tp, err := e.CreateTopic(CreateTopicRequest{Name: OffsetsTopic, Partitions: 2, ReplicationFactor: -1, Internal: true,
		Configs: map[string]string{"cleanup.policy": "compact"}})
	if err != nil {
		t.Fatal(err)
	}
	var mine, theirs string
	for i := 0; mine == "" || theirs == ""; i++ {
		g := fmt.Sprintf("g%d", i)
		if OffsetsPartitionFor(g, 2) == 0 {
			mine = g
		} else {
			theirs = g
		}
	}
	lead := ReplicaState{Role: RoleLeader, Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, ISR: []int32{1}}
	if err := tp.Partition(0).SetReplicaState(lead); err != nil {
		t.Fatal(err)
	}
	if err := tp.Partition(1).SetReplicaState(ReplicaState{Role: RoleFollower, Leader: 2, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2}, ISR: []int32{2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := co.Group(mine, true); !errors.Is(err, kerr.CoordinatorLoadInProgress) {
		t.Fatalf("leader of the group's partition, not loaded yet: %v, want COORDINATOR_LOAD_IN_PROGRESS", err)
	}
	if err := co.LoadPartition(0); err != nil {
		t.Fatal(err)
	}
	if _, err := co.Group(theirs, true); !errors.Is(err, kerr.NotCoordinator) {
		t.Fatalf("a group of a partition another broker leads: %v, want NOT_COORDINATOR", err)
	}
	if _, err := co.FetchOffsets(theirs, nil); !errors.Is(err, kerr.NotCoordinator) {
		t.Fatalf("another broker's offsets: %v, want NOT_COORDINATOR", err)
	}
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: -1}); err != nil {
		t.Fatal(err)
	}
	if errs, err := co.CommitOffsets(mine, "", nil, -1, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 42}}); err != nil || errs[0] != nil {
		t.Fatalf("commit: %v %v", err, errs)
	}
	// Leadership moves away and comes back at a new epoch: the groups are
	// forgotten, then replayed from the log.
	co.UnloadPartition(0)
	if co.Loaded(0) || len(co.Groups()) != 0 {
		t.Fatalf("after unloading: loaded %v, %d groups", co.Loaded(0), len(co.Groups()))
	}
	if err := co.LoadPartition(0); err != nil {
		t.Fatal(err)
	}
	got, err := co.FetchOffsets(mine, map[string][]int32{"t": {0}})
	if err != nil || len(got) != 1 || got[0].Offset != 42 {
		t.Fatalf("offsets after a reload: %+v %v, want 42", got, err)
	}
}

// A producer's pending transactional offsets are per __consumer_offsets
// partition: a marker in one applies only that partition's, and a
// partition's unload forgets only its own.
func TestTxnOffsetsPerOffsetsPartition(t *testing.T) {
	e := openEngine(t, t.TempDir(), func(c *Config) { c.NodeID, c.Replicated = 1, true })
	co := e.Coordinator()
	tp, err := e.CreateTopic(CreateTopicRequest{Name: OffsetsTopic, Partitions: 2, ReplicationFactor: -1, Internal: true,
		Configs: map[string]string{"cleanup.policy": "compact"}})
	if err != nil {
		t.Fatal(err)
	}
	groupOf := map[int32]string{}
	for i := 0; len(groupOf) < 2; i++ {
		g := fmt.Sprintf("g%d", i)
		if _, ok := groupOf[OffsetsPartitionFor(g, 2)]; !ok {
			groupOf[OffsetsPartitionFor(g, 2)] = g
		}
	}
	for i := int32(0); i < 2; i++ {
		lead := ReplicaState{Role: RoleLeader, Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, ISR: []int32{1}}
		if err := tp.Partition(i).SetReplicaState(lead); err != nil {
			t.Fatal(err)
		}
		if err := co.LoadPartition(i); err != nil {
			t.Fatal(err)
		}
		co.addTxnOffsets(i, 9, []groupOffset{{group: groupOf[i], tp: TopicPartition{"t", 0}, off: CommittedOffset{Offset: int64(100 + i)}}})
	}
	if errs := e.AppendTxnMarkers(TxnMarker{ProducerID: 9, Commit: true}, []*Partition{tp.Partition(0)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if n := co.PendingTxnOffsets(); n != 1 {
		t.Fatalf("%d offsets pending after the marker in partition 0, want partition 1's", n)
	}
	got, err := co.FetchOffsets(groupOf[0], map[string][]int32{"t": {0}})
	if err != nil || len(got) != 1 || got[0].Offset != 100 {
		t.Fatalf("group of partition 0: %+v %v, want 100 committed", got, err)
	}
	if got, err := co.FetchOffsets(groupOf[1], map[string][]int32{"t": {0}}); err != nil || len(got) != 1 || got[0].Found || !got[0].Unstable {
		t.Fatalf("group of partition 1: %+v %v, want nothing committed, one pending", got, err)
	}
	co.UnloadPartition(1)
	if n := co.PendingTxnOffsets(); n != 0 {
		t.Fatalf("%d offsets pending after partition 1's unload", n)
	}
}

// HostPartition and DropPartition move a replica onto and off this broker
// (reassignment), persistently; a dropped replica's directory is gone,
// or kept as *-stray; a directory in a new replica's way is kept aside.
func TestHostAndDropPartition(t *testing.T) {
	dir := t.TempDir()
	e := openTestEngine(t, dir, nil)
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "t", ID: newTopicID(), Partitions: 3, ReplicationFactor: -1, NotHosted: []int32{0, 2}}); err != nil {
		t.Fatal(err)
	}
	appendSync(t, e.Topic("t").Partition(1), idem(t, -1, 0, 0, 1), -1)
	// A leftover directory where partition 2 will live.
	if err := os.MkdirAll(filepath.Join(dir, "t-2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := e.HostPartition("t", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.HostPartition("t", 2); err != nil {
		t.Fatal(err)
	}
	if err := e.HostPartition("t", 2); err != nil {
		t.Fatalf("hosting twice: %v", err)
	}
	old := e.Topic("t").Partition(1)
	if err := e.DropPartition("t", 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Log(); err == nil {
		t.Fatal("the dropped partition's old object still has a log")
	}
	if err := e.DropPartition("t", 9, false); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("dropping a partition that does not exist: %v", err)
	}
	hosted := func(e *Engine) string {
		var s string
		for _, p := range e.Topic("t").Partitions() {
			s += fmt.Sprint(p.Hosted()) + " "
		}
		return s
	}
	if got, want := hosted(e), "true false true "; got != want {
		t.Fatalf("hosted %q, want %q", got, want)
	}
	strays, _ := filepath.Glob(filepath.Join(dir, "t-*-stray"))
	if len(strays) != 2 {
		t.Fatalf("stray directories %v: want the dropped t-1 and the leftover t-2", strays)
	}
	if _, err := os.Stat(filepath.Join(dir, "t-1")); !os.IsNotExist(err) {
		t.Fatalf("t-1 still there: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, dir, nil)
	if got, want := hosted(e), "true false true "; got != want {
		t.Fatalf("after a restart: hosted %q, want %q", got, want)
	}
	if err := e.DropPartition("t", 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "t-0")); !os.IsNotExist(err) {
		t.Fatalf("a deleted replica's directory is still there: %v", err)
	}
}

// sharedTopic is an engine with topic "shared": one partition, ten
// records.
func sharedTopic(t *testing.T) (*Engine, *Topic, *Partition) {
	t.Helper()
	e := openEngine(t, t.TempDir(), nil)
	tp, err := e.CreateTopic(CreateTopicRequest{Name: "shared", Partitions: 1, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := tp.Partition(0)
	appendOK(t, p, buildBatch(t, 1000, -1, -1, -1, values("v", 10)...))
	return e, tp, p
}

// TestShareStartReadsTheNewestGroupConfigs: in cluster mode a
// share-partition that starts reads share.auto.offset.reset from the
// newest metadata applied (the hook), not the engine's copy, which
// follows it only at the end of a reconcile pass: an AlterConfigs just
// made must not be missed, or the group starts at the end of the log and
// never delivers what was produced before it.
func TestShareStartReadsTheNewestGroupConfigs(t *testing.T) {
	e, _, p := sharedTopic(t)
	if got, err := e.Shares().initialOffset("g", p); err != nil || got != 10 {
		t.Fatalf("without an override: start %d (%v), want the high watermark 10", got, err)
	}
	e.SetClusterHooks(ClusterHooks{GroupConfigs: func(group string) map[string]string {
		if group == "g" {
			return map[string]string{"share.auto.offset.reset": "earliest"}
		}
		return nil
	}})
	if len(e.AllGroupConfigs()) != 0 {
		t.Fatal("the engine's own copy has group configs")
	}
	if got, err := e.Shares().initialOffset("g", p); err != nil || got != 0 {
		t.Fatalf("with earliest in the newest metadata: start %d (%v), want 0", got, err)
	}
}

// A share-partition waiting to start (for its metadata sync here; a read
// of its state from another broker takes the same path) does not hold
// its lock: the publisher, applying a change of the group's configs
// (ReplaceGroupConfigs → applyLimits, which locks each of the group's
// share-partitions), goes on meanwhile. The start then reads the newest
// share.auto.offset.reset. (A hostile review found the publisher held
// for the whole wait, up to 5 s, or 40 s behind a stalled read.)
func TestShareStartDoesNotHoldTheShareLock(t *testing.T) {
	e, _, p := sharedTopic(t)
	waiting, release := make(chan struct{}), make(chan struct{})
	var syncs atomic.Int32
	e.SetClusterHooks(ClusterHooks{
		GroupConfigs: func(group string) map[string]string {
			if group == "g" {
				return map[string]string{"share.auto.offset.reset": "earliest"}
			}
			return nil
		},
		SyncMetadata: func(ctx context.Context, since time.Time) error {
			if syncs.Add(1) == 1 {
				close(waiting)
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	type fetched struct {
		acq []sharegroup.Acquisition
		err error
	}
	done := make(chan fetched, 1)
	go func() {
		_, acq, err := e.Shares().Fetch(time.Now(), "g", "member", p, 1<<20, 0, false)
		done <- fetched{acq, err}
	}()
	<-waiting
	applied := make(chan error, 1)
	go func() {
		applied <- e.ReplaceGroupConfigs(map[string]map[string]string{"g": {"share.record.lock.duration.ms": "12345"}})
	}()
	select {
	case err := <-applied:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("applying the group's configs waited for a share-partition's start")
	}
	close(release)
	f := <-done
	if f.err != nil || len(f.acq) != 1 || f.acq[0].First != 0 || f.acq[0].Last != 9 {
		t.Fatalf("acquired %v (%v), want offsets 0-9", f.acq, f.err)
	}
	if n := syncs.Load(); n != 1 {
		t.Fatalf("%d metadata syncs for one start", n)
	}
}

// A share-partition whose load is under way (its lock free meanwhile) is
// not idle: evictIdle keeps it, and drops one that holds nothing.
func TestEvictIdleKeepsALoadingSharePartition(t *testing.T) {
	e := openEngine(t, t.TempDir(), nil)
	s := e.Shares()
	loading := &sharePart{key: ShareKey{Group: "g", Partition: 0}, loading: make(chan struct{})}
	empty := &sharePart{key: ShareKey{Group: "g", Partition: 1}}
	s.mu.Lock()
	s.parts[loading.key], s.parts[empty.key] = loading, empty
	s.evictIdle()
	_, loadingKept := s.parts[loading.key]
	_, emptyKept := s.parts[empty.key]
	s.mu.Unlock()
	if !loadingKept || emptyKept {
		t.Fatalf("after evictIdle: the loading share-partition kept %v, the empty one kept %v", loadingKept, emptyKept)
	}
}

// A group config changed while a share-partition loads (its lock free
// meanwhile) reaches the share-partition: the publisher swaps the image
// (ClusterHooks.GroupConfigs) and then applies the limits
// (ReplaceGroupConfigs → applyLimits), which finds no partition yet; the
// load, seeing the limits changed, loads again with the new ones instead
// of keeping the old lock duration (and delivery limit) while ShareFetch
// reports the new one (LockMillis). (From a hostile review.)
//
// The interleaving is pinned with the GroupConfigs hook: the load's
// first read of the group's configs after its metadata sync (the limits
// it starts with) returns the old image, and the publisher runs right
// after that read, before the hook returns. On a load that holds the
// share-partition's lock the publisher cannot finish meanwhile; the hook
// gives it 1 s and returns anyway, and the publisher applies the new
// limits once the load is done.
func TestShareLoadKeepsAConfigChangeMadeDuringIt(t *testing.T) {
	e, tp, p := sharedTopic(t)

	oldCfg := map[string]string{"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "30000"}
	newCfg := map[string]string{"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "5000"}
	var image atomic.Pointer[map[string]string]
	image.Store(&oldCfg)
	var armed atomic.Bool
	var fired atomic.Bool
	published := make(chan error, 1)
	e.SetClusterHooks(ClusterHooks{
		GroupConfigs: func(group string) map[string]string {
			if group != "g" {
				return nil
			}
			cur := *image.Load()
			if armed.Load() && fired.CompareAndSwap(false, true) {
				func() {
					// The publisher: a new image, then its configs
					// applied to the engine.
					image.Store(&newCfg)
					go func() {
						published <- e.ReplaceGroupConfigs(map[string]map[string]string{"g": newCfg})
					}()
					select {
					case err := <-published:
						published <- err
					case <-time.After(time.Second):
					}
				}()
			}
			return cur
		},
		SyncMetadata: func(ctx context.Context, since time.Time) error {
			armed.Store(true)
			return nil
		},
	})

	_, acq, err := e.Shares().Fetch(time.Now(), "g", "member", p, 1<<20, 0, false)
	if err != nil || len(acq) != 1 || acq[0].First != 0 {
		t.Fatalf("fetch: %v (%v), want offsets from 0", acq, err)
	}
	select {
	case err := <-published:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the publisher did not finish")
	}
	if got := e.Shares().LockMillis("g"); got != 5000 {
		t.Fatalf("ShareFetch reports a lock of %d ms, want 5000 (the new config)", got)
	}
	k := ShareKey{Group: "g", Topic: tp.ID, Partition: 0}
	e.Shares().mu.Lock()
	sp := e.Shares().parts[k]
	e.Shares().mu.Unlock()
	sp.mu.Lock()
	lock := time.Duration(sp.p.NextDeadline()-time.Now().UnixMilli()) * time.Millisecond
	sp.mu.Unlock()
	if lock > 10*time.Second {
		t.Fatalf("the records fetched are locked for %v after the group's share.record.lock.duration.ms became 5000 (applied while the share-partition loaded): the change was lost", lock.Round(time.Second))
	}
}
