// Package simcluster runs a cluster of real brokers inside one test
// process, on loopback, with every link between them and their clients
// under the test's control (Network): cut one direction or both, slow it,
// heal it; stop a broker, crash it (closed without its clean-shutdown
// mark, so it recovers as after kill -9) and restart it on its data
// directory.
//
// Each broker is the whole broker package's (engine, Kafka listener,
// cluster mode with its Raft node), as `ringlog serve --voters` runs it;
// only the process boundary is gone. Raft listeners are bound before the
// voters are named, so no port is raced for. What hashicorp/raft and the
// Go scheduler do in between is real time: a seeded test replays the same
// steps and faults, not the same interleaving.
package simcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/cluster"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/quorum"
)

// Cluster is a running simulated cluster.
type Cluster struct {
	// Net is the links between the brokers and the clients.
	Net *Network

	t         testing.TB
	voters    quorum.Voters
	configure []func(*broker.Config)

	mu    sync.Mutex
	nodes map[int32]*Node
}

// Node is one broker of a Cluster.
type Node struct {
	ID  int32
	Dir string
	// raftAddr is its voter address, the same across restarts.
	raftAddr string

	mu sync.Mutex
	b  *broker.Broker // nil while down
}

// Broker is the running broker, nil while the node is down.
func (n *Node) Broker() *broker.Broker {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b
}

// Start starts n brokers (ids 1 to n, every one a voter) and stops them at
// the test's cleanup. configure changes each broker's configuration
// (after the harness's: one writer shard, 1.5 s sessions, 2 s replica
// lag).
func Start(t testing.TB, n int, configure ...func(*broker.Config)) *Cluster {
	t.Helper()
	c := &Cluster{Net: NewNetwork(), t: t, configure: configure, nodes: map[int32]*Node{}}
	lns := map[int32]net.Listener{}
	for id := int32(1); id <= int32(n); id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[id] = ln
		addr := ln.Addr().String()
		c.voters = append(c.voters, quorum.Voter{ID: id, Addr: addr})
		c.nodes[id] = &Node{ID: id, Dir: filepath.Join(t.TempDir(), "data"), raftAddr: addr}
		c.Net.Register(id, addr)
	}
	t.Cleanup(c.Close)
	for id := int32(1); id <= int32(n); id++ {
		if err := c.start(c.nodes[id], lns[id]); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// AddBroker starts a broker-only node (not a voter: it follows the
// metadata log and hosts replicas) with the next free id, and returns
// that id. Like the voters, it restarts on the same metadata address,
// which the network knows as MetadataLink(id).
func (c *Cluster) AddBroker() (int32, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	id := int32(len(c.nodes) + 1) // (ids run from 1 without gaps)
	n := &Node{ID: id, Dir: filepath.Join(c.t.TempDir(), "data"), raftAddr: ln.Addr().String()}
	c.nodes[id] = n
	c.mu.Unlock()
	c.Net.Register(MetadataLink(id), n.raftAddr)
	return id, c.start(n, ln)
}

// MetadataLink is the network id of broker-only node id's metadata
// listener (where the Raft leader pushes it the log): apart from the
// node's own id, so a test can cut the metadata alone (Cut(leader,
// MetadataLink(id))) while its Kafka traffic flows.
func MetadataLink(id int32) int32 { return 1000 + id }

// start opens node's broker on its directory (ln: its Raft listener, or
// nil to bind its voter address again).
func (c *Cluster) start(n *Node, ln net.Listener) error {
	if ln == nil {
		var err error
		// The port was this node's a moment ago; another socket may
		// still hold it briefly.
		for i := 0; ; i++ {
			if ln, err = net.Listen("tcp", n.raftAddr); err == nil || i == 50 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("simcluster: node %d: bind its Raft address again: %w", n.ID, err)
		}
	}
	cfg := brokertest.Config(n.Dir)
	cfg.Engine.NodeID = n.ID
	cfg.Engine.Shards = 1
	cfg.Engine.Replicated = true
	cfg.NativeAddr, cfg.HTTPAddr = "", ""
	cfg.Cluster = &cluster.Config{NodeID: n.ID, Voters: c.voters, RaftListener: ln, Dial: c.Net.Dialer(n.ID),
		SessionTimeout: 1500 * time.Millisecond, ReplicaLagMax: 2 * time.Second}
	cfg.Logger = brokertest.Logger().With("node", n.ID)
	for _, f := range c.configure {
		f(&cfg)
	}
	b, err := broker.New(cfg)
	if err != nil {
		ln.Close()
		return fmt.Errorf("simcluster: start node %d: %w", n.ID, err)
	}
	c.Net.Register(n.ID, b.KafkaAddr())
	n.mu.Lock()
	n.b = b
	n.mu.Unlock()
	return nil
}

// Node is the node with id.
func (c *Cluster) Node(id int32) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// Nodes are every node, by id.
func (c *Cluster) Nodes() []*Node {
	var out []*Node
	for id := int32(1); ; id++ {
		n := c.Node(id)
		if n == nil {
			return out
		}
		out = append(out, n)
	}
}

// Stop stops node id cleanly (Shutdown); it does nothing to a node that
// is down.
func (c *Cluster) Stop(id int32) error { return c.down(id, false) }

// Crash closes node id without its clean-shutdown mark: its next start
// recovers every log from the files, as after kill -9 (the page cache
// survives, as it does a process crash).
func (c *Cluster) Crash(id int32) error { return c.down(id, true) }

func (c *Cluster) down(id int32, crash bool) error {
	n := c.Node(id)
	n.mu.Lock()
	b := n.b
	n.b = nil
	n.mu.Unlock()
	if b == nil {
		return nil
	}
	if !crash {
		return b.Shutdown()
	}
	err := b.Close()
	if rerr := os.Remove(filepath.Join(n.Dir, ".ringlog-clean-shutdown")); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// Restart starts node id again on its data directory (after Stop or
// Crash).
func (c *Cluster) Restart(id int32) error {
	n := c.Node(id)
	if n.Broker() != nil {
		return fmt.Errorf("simcluster: node %d is running", id)
	}
	return c.start(n, nil)
}

// Close stops every node cleanly.
func (c *Cluster) Close() {
	for _, n := range c.Nodes() {
		if err := c.Stop(n.ID); err != nil {
			c.t.Errorf("simcluster: stop node %d: %v", n.ID, err)
		}
	}
}

// Seeds are the Kafka addresses of the running brokers.
func (c *Cluster) Seeds() []string {
	var out []string
	for _, n := range c.Nodes() {
		if b := n.Broker(); b != nil {
			out = append(out, b.KafkaAddr())
		}
	}
	return out
}

// Client is a franz-go client of the cluster (NewClient) closed at the
// test's cleanup.
func (c *Cluster) Client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := c.NewClient(opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// NewClient is a franz-go client of the cluster whose connections go
// through Net as node Client (opts after the defaults); its seeds are
// every running node's address when it is made. The caller closes it.
func (c *Cluster) NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	opts = append([]kgo.Opt{kgo.SeedBrokers(c.Seeds()...), kgo.Dialer(c.Net.Dialer(Client))}, opts...)
	return kgo.NewClient(opts...)
}

// WaitController waits until a controller is known and every running
// broker is registered and unfenced in its image.
func (c *Cluster) WaitController(ctx context.Context) error {
	for {
		ok := true
		for _, n := range c.Nodes() {
			b := n.Broker()
			if b == nil {
				continue
			}
			img := b.Cluster().Image()
			if b.Cluster().ControllerID() < 0 {
				ok = false
			}
			for _, m := range c.Nodes() {
				if m.Broker() == nil {
					continue
				}
				if br, found := img.Broker(m.ID); !found || br.Fenced {
					ok = false
				}
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("simcluster: no controller with every running broker unfenced: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
