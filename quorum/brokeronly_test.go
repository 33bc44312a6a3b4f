package quorum

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/metadata"
)

// A broker-only node (an id not in the voters) joins through the voters,
// receives every record, never leads (not even with the leader gone),
// cannot propose, and, restarted on another port, joins again at its new
// address and catches up.
func TestBrokerOnlyNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newTestCluster(t, 3, nil)
	c.initialized(ctx)
	dir := filepath.Join(t.TempDir(), "node7")
	open := func() *Node {
		t.Helper()
		cfg := c.config(7)
		cfg.Dir = dir
		cfg.BindAddr = "127.0.0.1:0"
		n, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !n.BrokerOnly() {
			t.Fatal("node 7 is not broker-only")
		}
		return n
	}
	b := open()
	defer func() { b.Shutdown() }()
	c.mustPropose(ctx, metadata.AlterConfigs{Type: metadata.ConfigBroker, Ops: []metadata.ConfigOp{{Key: "log.retention.ms", Value: "1"}}})
	want := c.converge(ctx)
	waitImage := func(n *Node, idx uint64) {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		defer wcancel()
		if _, err := n.WaitIndex(wctx, idx); err != nil {
			t.Fatalf("the broker-only node did not reach index %d: %v (it has %d)", idx, err, n.Image().Index())
		}
	}
	waitImage(b, want.Index())
	if v, _ := b.Image().BrokerConfig("log.retention.ms"); v != "1" || b.Image().ClusterID() != want.ClusterID() {
		t.Fatalf("broker-only image: retention %q, cluster %q; want 1, %q", v, b.Image().ClusterID(), want.ClusterID())
	}
	if _, err := b.Propose(ctx, metadata.DeleteTopic{Name: "x"}); err == nil {
		t.Fatal("a broker-only node proposed")
	}
	if id, _ := b.Leader(); id < 1 || id > 3 {
		t.Fatalf("the broker-only node names leader %d", id)
	}
	// Another node claiming its id at another address is refused while
	// it answers at its own.
	if r := c.leader(ctx).admit(7, "127.0.0.1:1", false); !strings.Contains(r, "is alive") {
		t.Fatalf("a second node 7 while the first answers: %q", r)
	}

	// The leader goes: a voter takes over, never the broker-only node.
	old := c.leader(ctx)
	c.stop(old.ID())
	next := c.leader(ctx)
	if next.ID() == 7 || b.IsLeader() {
		t.Fatal("the broker-only node leads")
	}
	res := c.mustPropose(ctx, metadata.AlterConfigs{Type: metadata.ConfigBroker, Ops: []metadata.ConfigOp{{Key: "log.retention.ms", Value: "2"}}})
	waitImage(b, res.Index)
	c.start(old.ID(), nil)

	// Restarted on a new port, it joins again and catches up.
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	res = c.mustPropose(ctx, metadata.AlterConfigs{Type: metadata.ConfigBroker, Ops: []metadata.ConfigOp{{Key: "log.retention.ms", Value: "3"}}})
	b = open()
	waitImage(b, res.Index)
	if v, _ := b.Image().BrokerConfig("log.retention.ms"); v != "3" {
		t.Fatalf("after the restart: retention %q, want 3", v)
	}
	testenv.WaitFor(t, 10*time.Second, "the configuration to list the broker-only node at its new address", b.member)
}

// A join request for a voter's id, or from a node of another voter set,
// is refused.
func TestJoinRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newTestCluster(t, 3, nil)
	c.initialized(ctx)
	leader := c.leader(ctx)
	if r := leader.admit(2, "127.0.0.1:1", true); r == "" {
		t.Error("a voter's id was admitted as a non-voter")
	}
	if r := leader.admit(9, "nohost", true); r == "" {
		t.Error("a join address without a port was admitted")
	}
	if r := leader.admit(9, c.voters[0].Addr, true); r == "" {
		t.Error("a join at a voter's address was admitted")
	}
	if r := leader.admit(9, "0.0.0.0:9", true); r == "" {
		t.Error("a join at a wildcard address was admitted")
	}
	for _, n := range c.running() {
		if n != leader && n.admit(9, "127.0.0.1:1", true) == "" {
			t.Error("a follower admitted a non-voter")
		}
	}
	if _, err := advertised(&net.TCPAddr{IP: net.IPv4zero, Port: 5}, ""); err == nil {
		t.Error("a wildcard listener was advertised")
	}
}

// A join whose address leads back to a voter under another spelling
// (localhost for 127.0.0.1) is refused at the handshake when the leader
// dials it: the leader does not talk Raft to itself or another voter, and
// keeps its term.
func TestJoinAtAVotersAddressDoesNotDepose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newTestCluster(t, 3, nil)
	c.initialized(ctx)
	leader := c.leader(ctx)
	term := leader.Term()
	for _, v := range c.voters {
		_, port, _ := net.SplitHostPort(v.Addr)
		if r := leader.admit(int32(10+v.ID), "localhost:"+port, true); r != "" {
			t.Fatalf("join refused before the dial: %s", r)
		}
	}
	// Several heartbeats to the bogus members.
	testenv.Holds(t, 2*time.Second, fmt.Sprintf("node %d leading in term %d after the joins", leader.ID(), term), func() bool {
		return leader.IsLeader() && leader.Term() == term
	})
	c.mustPropose(ctx, metadata.AlterConfigs{Type: metadata.ConfigBroker, Ops: []metadata.ConfigOp{{Key: "log.retention.ms", Value: "9"}}})
}
