package engine

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
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

// The cluster hooks: auto-creation, producer-id blocks and group ownership
// come from the cluster.
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
		CoordinatorFor: func(group string) int32 {
			if group == "mine" {
				return 2
			}
			return 1
		},
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
	if _, err := e.Coordinator().Group("mine", true); err != nil {
		t.Fatalf("own group: %v", err)
	}
	if _, err := e.Coordinator().Group("theirs", true); !errors.Is(err, kerr.NotCoordinator) {
		t.Fatalf("another broker's group: %v, want NOT_COORDINATOR", err)
	}
	if _, err := e.Coordinator().FetchOffsets("theirs", nil); !errors.Is(err, kerr.NotCoordinator) {
		t.Fatalf("another broker's offsets: %v, want NOT_COORDINATOR", err)
	}
}
