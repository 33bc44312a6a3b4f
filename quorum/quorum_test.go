package quorum

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/metadata"
)

// TestConvergesUnderLeaderRestarts: 3 nodes; 200 CreateTopic/DeleteTopic
// commands sent to random nodes (forwarded to the leader) while the leader
// is shut down and restarted every 40 commands. Every node must end with
// the same image, holding exactly the topics the definite answers imply.
func TestConvergesUnderLeaderRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := newTestCluster(t, 3, nil)
	c.initialized(ctx)
	c.registerBrokers(ctx)
	img := c.converge(ctx)

	// A follower names the leader.
	leader := c.leader(ctx)
	for _, n := range c.running() {
		if n == leader {
			continue
		}
		_, err := n.Propose(ctx, metadata.DeleteTopic{Name: "x"})
		var nl *NotLeaderError
		if errors.As(err, &nl) && nl.LeaderID >= 0 {
			if nl.LeaderID != leader.ID() || nl.LeaderAddr != c.voters[leader.ID()-1].Addr || !errors.Is(err, kerr.NotController) {
				t.Fatalf("NotLeaderError %+v, leader is %d at %s", nl, leader.ID(), c.voters[leader.ID()-1].Addr)
			}
			break
		}
		if !errors.As(err, &nl) {
			t.Fatalf("follower Propose: %v", err)
		}
	}

	const ops, workers, restartEvery = 200, 4, 40
	var done atomic.Int64
	restart := make(chan struct{}, 1)
	chaosDone := make(chan int)
	go func() { // the chaos goroutine: restart the leader when told
		restarts := 0
		defer func() { chaosDone <- restarts }()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-restart:
				if !ok {
					return
				}
			}
			leader := func() *Node {
				for _, n := range c.running() {
					if n.IsLeader() {
						return n
					}
				}
				return nil
			}
			var old *Node
			if !testenv.Until(ctx, func() bool { old = leader(); return old != nil }) {
				return
			}
			c.stop(old.ID())
			// Wait for a new leader among the others before restarting it.
			testenv.Until(ctx, func() bool { return leader() != nil })
			cfg := c.config(old.ID())
			n, err := Open(cfg)
			if err != nil {
				t.Errorf("restart node %d: %v", old.ID(), err)
				return
			}
			c.mu.Lock()
			c.nodes[old.ID()] = n
			c.mu.Unlock()
			restarts++
		}
	}()

	// Each worker owns its topic names, so the definite answers say
	// exactly which of them exist at the end.
	expect := make([]map[string]bool, workers)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		expect[w] = map[string]bool{}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			ids := map[string]metadata.UUID{}
			for i := 0; i < ops/workers; i++ {
				name := fmt.Sprintf("w%d-t%d", w, i%7)
				var rec metadata.Record
				if expect[w][name] {
					rec = metadata.DeleteTopic{Name: name, ID: ids[name]}
				} else {
					assign, err := metadata.PlaceReplicas(img, 0, 1+i%3, 1+i%3)
					if err != nil {
						errc <- err
						return
					}
					ids[name] = metadata.NewUUID()
					rec = metadata.CreateTopic{Name: name, ID: ids[name], Replicas: assign}
				}
				_, err := c.proposeDefinite(ctx, rec)
				switch {
				case err == nil:
				case errors.Is(err, kerr.TopicAlreadyExists), errors.Is(err, kerr.UnknownTopicOrPartition):
					// An uncertain first try had been committed after all.
				default:
					errc <- fmt.Errorf("%s %s: %w", rec.Kind(), name, err)
					return
				}
				expect[w][name] = !expect[w][name]
				if done.Add(1)%restartEvery == 0 {
					select {
					case restart <- struct{}{}:
					default:
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(restart)
	restarts := <-chaosDone
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if restarts < 3 {
		t.Fatalf("only %d leader restarts during the workload", restarts)
	}

	final := c.converge(ctx)
	var want, got []string
	for w := range expect {
		for name, exists := range expect[w] {
			if exists {
				want = append(want, name)
			}
		}
	}
	for _, topic := range final.Topics() {
		got = append(got, topic.Name)
	}
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("topics %v, want %v", got, want)
	}
	// Every node recorded the committed cluster id in its directory.
	for _, v := range c.voters {
		id, ok, err := readIdentity(c.dirs[v.ID])
		if err != nil || !ok || id.ClusterID != final.ClusterID() || id.NodeID != v.ID {
			t.Fatalf("node %d identity %+v %v %v, cluster %s", v.ID, id, ok, err, final.ClusterID())
		}
	}
	t.Logf("%d commands, %d leader restarts, final index %d, %d topics", done.Load(), restarts, final.Index(), final.TopicCount())

	staleChangesRefusedEverywhere(ctx, t, c, final)
}

// staleChangesRefusedEverywhere shrinks an ISR (as its leader) and elects
// another leader (as the controller), then replays both: the election
// carries a stale partition epoch, the shrink comes from a deposed leader.
// Every node must refuse each with the same error. Last, the new leader
// with an old leader epoch is fenced.
func staleChangesRefusedEverywhere(ctx context.Context, t *testing.T, c *testCluster, img *metadata.Image) {
	rec := createTopic(t, img, "stale-check", 1, 3)
	c.mustPropose(ctx, rec)
	p := rec.Replicas[0]
	b, _ := img.Broker(p[0])
	shrink := metadata.ChangePartition{TopicID: rec.ID, ExpectedPartitionEpoch: 0, LeaderEpoch: new(int32(0)),
		Requester: &metadata.BrokerEpoch{ID: p[0], Epoch: b.Epoch}, ISR: p[:2]}
	c.mustPropose(ctx, shrink)
	elect := metadata.ChangePartition{TopicID: rec.ID, ExpectedPartitionEpoch: 1, Leader: new(int32(p[1]))}
	c.mustPropose(ctx, elect)

	for _, tc := range []struct {
		rec  metadata.ChangePartition
		code *kerr.Error
	}{
		{elect, kerr.InvalidUpdateVersion},   // the controller's election again: partition epoch 1, now 2
		{shrink, kerr.NotLeaderForPartition}, // the deposed leader's ISR change
	} {
		res, err := c.proposeDefinite(ctx, tc.rec)
		var re *metadata.RefusedError
		if !errors.As(err, &re) || !errors.Is(err, tc.code) {
			t.Fatalf("stale change: %v, want %s", err, tc.code.Message)
		}
		c.converge(ctx)
		nodes := c.running()
		c.mu.Lock()
		for _, n := range nodes {
			text, ok := c.events[n.ID()][res.Index]
			if !ok || text != err.Error() {
				t.Errorf("node %d at index %d: %q (seen %v), want %q", n.ID(), res.Index, text, ok, err.Error())
			}
		}
		c.mu.Unlock()
	}
	// An old leader epoch from the current leader is fenced too.
	cur := c.converge(ctx).Topic("stale-check").Partitions[0]
	b1, _ := img.Broker(p[1])
	_, err := c.proposeDefinite(ctx, metadata.ChangePartition{TopicID: rec.ID, ExpectedPartitionEpoch: cur.PartitionEpoch,
		LeaderEpoch: new(int32(cur.LeaderEpoch - 1)), Requester: &metadata.BrokerEpoch{ID: p[1], Epoch: b1.Epoch}, ISR: p})
	if !errors.Is(err, kerr.FencedLeaderEpoch) {
		t.Fatalf("old leader epoch: %v", err)
	}
}

// TestSnapshotRestartAndCatchUp: a node that was down while the others
// compacted their logs catches up from a snapshot; then every node
// restarts from its own snapshot with the same image.
func TestSnapshotRestartAndCatchUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 16
		cfg.TrailingLogs = 4
		cfg.SnapshotInterval = 100 * time.Millisecond
	})
	c.initialized(ctx)
	c.registerBrokers(ctx)
	img := c.converge(ctx)
	for i := 0; i < 5; i++ {
		c.mustPropose(ctx, createTopic(t, img, fmt.Sprintf("before-%d", i), 2, 3))
	}
	c.converge(ctx)

	var lagger int32
	for _, n := range c.running() {
		if !n.IsLeader() {
			lagger = n.ID()
		}
	}
	c.stop(lagger)
	img = c.converge(ctx) // the two others
	for i := 0; i < 30; i++ {
		c.mustPropose(ctx, createTopic(t, img, fmt.Sprintf("during-%d", i), 1, 2))
	}
	c.mustPropose(ctx, metadata.AlterConfigs{Type: metadata.ConfigBroker, Ops: []metadata.ConfigOp{{Key: "log.retention.ms", Value: "1"}}})
	for _, n := range c.running() {
		if err := n.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}

	n := c.start(lagger, nil)
	want := c.converge(ctx)
	// Raft records the installed snapshot just after the FSM restored it.
	for n.Stats()["last_snapshot_index"] == "0" {
		select {
		case <-ctx.Done():
			t.Fatalf("node %d caught up without installing a snapshot: %v", lagger, n.Stats())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if want.TopicCount() != 35 {
		t.Fatalf("%d topics, want 35", want.TopicCount())
	}
	for _, n := range c.running() {
		if err := n.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}

	c.stopAll()
	for _, v := range c.voters {
		n := c.start(v.ID, nil)
		// The image is restored from the snapshot before any election.
		if n.Image().Index() == 0 || n.Image().TopicCount() == 0 {
			t.Fatalf("node %d restarted with an empty image", v.ID)
		}
	}
	if got := c.converge(ctx); got.Hash() != want.Hash() {
		t.Fatalf("image after restarting every node differs:\n%s\n%s", metadata.EncodeImage(got), metadata.EncodeImage(want))
	}
}

// TestRefusesForeignDirectoriesAndVoters covers the startup refusals and
// the handshake's: other voters, another cluster's directory, another
// node's directory.
func TestRefusesForeignDirectoriesAndVoters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newTestCluster(t, 3, nil)
	cid := c.initialized(ctx).ClusterID()
	c.stop(3)

	// Own id not in the voters.
	cfg := c.config(4)
	cfg.Dir = t.TempDir()
	if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "not in the voters") {
		t.Fatalf("node outside the voters: %v", err)
	}
	// Node 3's directory started with other voters.
	cfg = c.config(3)
	cfg.Voters = append(append(Voters(nil), c.voters...), Voter{ID: 4, Addr: "127.0.0.1:1"})
	if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "first started with other voters") {
		t.Fatalf("other voters: %v", err)
	}
	// Node 3's directory for another cluster id.
	cfg = c.config(3)
	cfg.ClusterID = "another-cluster"
	if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "belongs to cluster "+cid) {
		t.Fatalf("other cluster id: %v", err)
	}
	// Node 2's directory as node 3.
	cfg = c.config(3)
	cfg.Dir = c.dirs[2]
	if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "belongs to node 2") {
		t.Fatalf("other node's directory: %v", err)
	}
	// Raft data without an identity file.
	bare := t.TempDir()
	if err := os.WriteFile(filepath.Join(bare, raftDBFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg = c.config(3)
	cfg.Dir = bare
	if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "no cluster.json") {
		t.Fatalf("raft data without identity: %v", err)
	}

	// A fresh node 3 formatted for another cluster: the peers and it
	// refuse each other in the handshake, and it learns nothing.
	foreign := filepath.Join(t.TempDir(), "foreign")
	if err := Format(foreign, 3, "another-cluster"); err != nil {
		t.Fatal(err)
	}
	if err := Format(foreign, 3, "another-cluster"); err != nil {
		t.Fatalf("formatting twice: %v", err)
	}
	if err := Format(foreign, 3, "third-cluster"); err == nil {
		t.Fatal("reformatted for another cluster")
	}
	c.dirs[3] = foreign
	n3 := c.start(3, nil)
	waitMismatch(ctx, t, "cluster ids differ", n3, c.node(1), c.node(2))
	if n3.Image().ClusterID() != "" || n3.ClusterID() != "another-cluster" {
		t.Fatalf("foreign node's image has cluster %q", n3.Image().ClusterID())
	}
	c.stop(3)

	// A fresh node 3 started with other voters: refused likewise.
	c.dirs[3] = filepath.Join(t.TempDir(), "fresh")
	cfg = c.config(3)
	cfg.Voters = append(append(Voters(nil), c.voters...), Voter{ID: 4, Addr: "127.0.0.1:1"})
	n3, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n3.Shutdown()
	waitMismatch(ctx, t, "voters differ", n3, c.node(1), c.node(2))

	// The two good nodes still commit.
	c.mustPropose(ctx, metadata.AlterConfigs{Type: metadata.ConfigBroker, Ops: []metadata.ConfigOp{{Key: "k", Value: "v"}}})
	if n3.Image().Index() != 0 {
		t.Fatal("the refused node applied records")
	}
}

// waitMismatch waits until n and one of the peers report a mismatch
// containing what.
func waitMismatch(ctx context.Context, t *testing.T, what string, n *Node, peers ...*Node) {
	t.Helper()
	for {
		mine := n.PeerMismatch()
		theirs := false
		for _, p := range peers {
			if err := p.PeerMismatch(); err != nil && strings.Contains(err.Error(), what) {
				theirs = true
			}
		}
		if mine != nil && strings.Contains(mine.Error(), what) && theirs {
			var mm *MismatchError
			if !errors.As(mine, &mm) {
				t.Fatalf("mismatch %v is not a *MismatchError", mine)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %q mismatch reported: node %d: %v", what, n.ID(), mine)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestStopsOnUndecodableEntry: an entry the FSM cannot decode (a newer
// node's record) halts the FSM and stops the node, rather than letting its
// image silently diverge.
func TestStopsOnUndecodableEntry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newTestCluster(t, 1, nil)
	c.initialized(ctx)
	n := c.node(1)
	f := n.raft.Apply([]byte{metadata.RecordVersion + 1, 1}, time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Done():
	case <-ctx.Done():
		t.Fatal("the node did not stop")
	}
	if err := n.Err(); err == nil || !errors.Is(err, metadata.ErrMalformed) {
		t.Fatalf("Err %v", err)
	}
	if _, err := n.Propose(ctx, metadata.DeleteTopic{Name: "x"}); !errors.Is(err, ErrStopped) {
		t.Fatalf("Propose on a stopped node: %v", err)
	}
}

// TestProposeReturnsWhenTheNodeStops: proposals in flight on a leader that
// shuts down all return (hashicorp/raft can drop a committed entry's
// future unanswered when it stops between commit and apply), and those
// that are not definite say so with ErrUncertain or ErrStopped.
func TestProposeReturnsWhenTheNodeStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newTestCluster(t, 1, nil)
	c.initialized(ctx)
	for round := 0; round < 15; round++ {
		n := c.leader(ctx)
		var wg sync.WaitGroup
		returned := make(chan error, 64)
		var answered atomic.Int64
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					_, err := n.Propose(ctx, metadata.DeleteTopic{Name: fmt.Sprintf("absent-%d", i)})
					if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
						returned <- err
						return
					}
					answered.Add(1)
				}
			}()
		}
		// Stop it a little later each round, with proposals in flight.
		testenv.WaitFor(t, 10*time.Second, "proposals answered", func() bool { return answered.Load() > int64(8*round) })
		c.stop(n.ID())
		stopped := time.Now()
		allDone := make(chan struct{})
		go func() { wg.Wait(); close(allDone) }()
		select {
		case <-allDone:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: proposals still waiting 5 s after the node stopped", round)
		}
		close(returned)
		for err := range returned {
			var nl *NotLeaderError
			if !errors.Is(err, ErrUncertain) && !errors.Is(err, ErrStopped) && !errors.As(err, &nl) {
				t.Fatalf("round %d: a proposal on a stopping node returned %v", round, err)
			}
		}
		t.Logf("round %d: every proposal returned %v after the stop", round, time.Since(stopped).Round(time.Millisecond))
		c.start(n.ID(), nil)
	}
}
