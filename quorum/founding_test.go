package quorum

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/metadata"
)

// cutDial returns a tune that routes every node's dials through a
// filter: cut(from, to) stops node from reaching address to.
func cutDial() (tune func(*Config), cut func(from int32, to string, on bool)) {
	var blocked sync.Map
	tune = func(cfg *Config) {
		from := cfg.NodeID
		var d net.Dialer
		cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if _, ok := blocked.Load(fmt.Sprintf("%d>%s", from, addr)); ok {
				return nil, errors.New("test: link cut")
			}
			return d.DialContext(ctx, network, addr)
		}
	}
	cut = func(from int32, to string, on bool) {
		if on {
			blocked.Store(fmt.Sprintf("%d>%s", from, to), true)
		} else {
			blocked.Delete(fmt.Sprintf("%d>%s", from, to))
		}
	}
	return tune, cut
}

// TestAdmittedEmptyVoterIsEvidence: voter 3 starts late (first start);
// the leader takes it in (it never registered), but nothing of the
// leader's reaches it yet (the leader dies right after, or its
// replication to 3 is in backoff). 3 is now a member of the running
// cluster with an empty log and no leader known. Voter f, which holds
// the commit with the dead leader, loses its directory. f asks the
// founding voters: the leader is down, and 3 answers "not the leader",
// without Established (its LastIndex is 0): f counts it, founds the
// cluster again, and 3 (admitted: it takes Raft connections) votes with
// it. The commit lives only on the dead leader.
func TestAdmittedEmptyVoterIsEvidence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tune, cut := cutDial()
	c := newTestCluster(t, 3, tune)
	c.stop(3)
	if err := os.RemoveAll(c.dirs[3]); err != nil {
		t.Fatal(err)
	}
	c.initialized(ctx)
	for _, id := range []int32{1, 2} { // 3 never registers
		v, _ := c.voters.Lookup(id)
		res := c.mustPropose(ctx, metadata.RegisterBroker{ID: id, Incarnation: metadata.NewUUID(),
			KafkaAddr: fmt.Sprintf("127.0.0.1:%d", 19000+id), ControllerAddr: v.Addr})
		c.mustPropose(ctx, metadata.UnfenceBroker{ID: id, Epoch: res.BrokerEpoch})
	}
	c.mustPropose(ctx, metadata.AlterConfigs{Type: metadata.ConfigBroker, Ops: []metadata.ConfigOp{{Key: "k", Value: "committed"}}})
	l := c.leader(ctx).ID()
	f := 3 - l
	v3, _ := c.voters.Lookup(3)
	addr3 := v3.Addr
	cut(l, addr3, true) // nothing of l's reaches 3
	cut(f, addr3, true)
	n3 := c.start(3, nil)
	if !testenv.Eventually(10*time.Second, func() bool { return n3.admitted.Load() && !n3.deciding.Load() }) {
		t.Fatal("3 was not taken in")
	}
	c.stop(l)
	c.stop(f)
	if err := os.RemoveAll(c.dirs[f]); err != nil {
		t.Fatal(err)
	}
	cut(f, addr3, false)
	if n3.raft.LastIndex() != 0 {
		t.Fatalf("3 has log index %d", n3.raft.LastIndex())
	}
	before := strings.Count(c.logs.tail(5000), "founded the metadata quorum")
	empty := c.start(f, nil)
	testenv.Holds(t, 10*c.config(f).ElectionTimeout, "the emptied voter not founding the cluster again (the leader with the commit is down)", func() bool {
		return empty.raft.LastIndex() == 0
	})
	if strings.Count(c.logs.tail(5000), "founded the metadata quorum") != before {
		t.Fatal("the emptied voter founded the cluster again")
	}
}

// TestMissingRaftDBRefused: a voter whose raft.db is gone while its
// snapshots are there lost its log and the vote it cast; it must not start
// (it would count as having state and could vote twice in one term), and
// says how to come back. Nothing in the directory is removed.
func TestMissingRaftDBRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newTestCluster(t, 3, nil)
	c.initialized(ctx)
	c.registerBrokers(ctx)
	l := c.leader(ctx)
	if err := l.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	c.stop(id)
	if err := os.Remove(filepath.Join(c.dirs[id], raftDBFile)); err != nil {
		t.Fatal(err)
	}
	n, err := Open(c.config(id))
	if err == nil {
		n.Shutdown()
		t.Fatal("a voter without its raft.db but with snapshots started")
	}
	if !strings.Contains(err.Error(), "no raft.db") || !strings.Contains(err.Error(), "remove-voter") {
		t.Fatalf("unclear refusal: %v", err)
	}
	if snaps, _ := os.ReadDir(filepath.Join(c.dirs[id], snapshotsDir)); len(snaps) == 0 {
		t.Fatal("the snapshots were removed")
	}
	if _, err := os.Stat(filepath.Join(c.dirs[id], raftDBFile)); err == nil {
		t.Fatal("the refused start created a raft.db")
	}
}
