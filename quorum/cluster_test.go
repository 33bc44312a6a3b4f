package quorum

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/metadata"
)

// logBuffer collects a test cluster's log; it is printed if the test fails.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(l.b.String(), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// testCluster runs nodes in-process on loopback ports.
type testCluster struct {
	t      *testing.T
	voters Voters
	dirs   map[int32]string
	logs   *logBuffer
	log    *slog.Logger
	tune   func(*Config)

	mu     sync.Mutex
	nodes  map[int32]*Node
	events map[int32]map[uint64]string // node → index → refusal text ("" accepted)
}

// fastTiming are the test timeouts (hashicorp's defaults are 4x longer).
func fastTiming(c *Config) {
	c.HeartbeatTimeout = 300 * time.Millisecond
	c.ElectionTimeout = 300 * time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 10 * time.Millisecond
	c.HandshakeTimeout = 2 * time.Second
	c.RPCTimeout = 2 * time.Second
}

// newTestCluster starts n voters on free loopback ports (each listener
// is bound first, so its port is known and held).
func newTestCluster(t *testing.T, n int, tune func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, dirs: map[int32]string{}, logs: &logBuffer{}, tune: tune,
		nodes: map[int32]*Node{}, events: map[int32]map[uint64]string{}}
	c.log = slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	lns := map[int32]net.Listener{}
	for i := int32(1); i <= int32(n); i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		c.voters = append(c.voters, Voter{ID: i, Addr: ln.Addr().String()})
		c.dirs[i] = filepath.Join(t.TempDir(), fmt.Sprintf("node%d", i))
	}
	t.Cleanup(func() {
		c.stopAll()
		if t.Failed() {
			t.Logf("cluster log (tail):\n%s", c.logs.tail(300))
		}
	})
	for i := int32(1); i <= int32(n); i++ {
		c.start(i, lns[i])
	}
	return c
}

func (c *testCluster) config(id int32) Config {
	cfg := Config{NodeID: id, Dir: c.dirs[id], Voters: c.voters, Logger: c.log}
	fastTiming(&cfg)
	cfg.OnApply = func(e metadata.ApplyEvent) {
		text := ""
		if e.Result.Err != nil {
			text = e.Result.Err.Error()
		}
		c.mu.Lock()
		if c.events[id] == nil {
			c.events[id] = map[uint64]string{}
		}
		c.events[id][e.Index] = text
		c.mu.Unlock()
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	return cfg
}

// start opens node id, on ln or (nil) on its voter address.
func (c *testCluster) start(id int32, ln net.Listener) *Node {
	c.t.Helper()
	return c.open(id, func(cfg *Config) { cfg.Listener = ln })
}

// open opens node id with c's config, changed by set, and records it.
func (c *testCluster) open(id int32, set func(*Config)) *Node {
	c.t.Helper()
	cfg := c.config(id)
	set(&cfg)
	n, err := Open(cfg)
	if err != nil {
		c.t.Fatalf("start node %d: %v", id, err)
	}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return n
}

func (c *testCluster) stop(id int32) {
	c.mu.Lock()
	n := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	if n != nil {
		if err := n.Shutdown(); err != nil {
			c.t.Errorf("shutdown node %d: %v", id, err)
		}
	}
}

func (c *testCluster) stopAll() {
	for _, n := range c.running() {
		c.stop(n.ID())
	}
}

func (c *testCluster) node(id int32) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

func (c *testCluster) running() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Node
	for _, n := range c.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *Node) int { return int(a.ID() - b.ID()) })
	return out
}

// leader waits until a running node is the leader and returns it.
func (c *testCluster) leader(ctx context.Context) *Node {
	c.t.Helper()
	for {
		for _, n := range c.running() {
			if n.IsLeader() {
				return n
			}
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("no leader: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// propose sends rec to a random running node, forwarding to the leader it
// names, until it gets a definite answer (a result or a refusal) or an
// uncertain one (returned as is).
func (c *testCluster) propose(ctx context.Context, rec metadata.Record) (metadata.Result, error) {
	for {
		nodes := c.running()
		if len(nodes) > 0 {
			n := nodes[rand.IntN(len(nodes))]
			for hop := 0; hop < 3 && n != nil; hop++ {
				res, err := n.Propose(ctx, rec)
				var nl *NotLeaderError
				if !errors.As(err, &nl) && !errors.Is(err, ErrStopped) {
					return res, err
				}
				if nl == nil || nl.LeaderID < 0 {
					break
				}
				n = c.node(nl.LeaderID) // forward; nil if that node is down
			}
		}
		select {
		case <-ctx.Done():
			return metadata.Result{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// proposeDefinite retries uncertain outcomes until the answer is definite.
func (c *testCluster) proposeDefinite(ctx context.Context, rec metadata.Record) (metadata.Result, error) {
	for {
		res, err := c.propose(ctx, rec)
		if errors.Is(err, ErrUncertain) && ctx.Err() == nil {
			continue
		}
		return res, err
	}
}

func (c *testCluster) mustPropose(ctx context.Context, rec metadata.Record) metadata.Result {
	c.t.Helper()
	res, err := c.proposeDefinite(ctx, rec)
	if err != nil {
		c.t.Fatalf("%s: %v", rec.Kind(), err)
	}
	return res
}

// converge waits until every running node applied everything the leader
// has, checks their images are identical, and returns one. Nothing else
// may be proposing, except the leader's own InitCluster: if an image moved
// past the leader's while waiting, it starts over.
func (c *testCluster) converge(ctx context.Context) *metadata.Image {
	c.t.Helper()
	for {
		leader := c.leader(ctx)
		if err := leader.Barrier(ctx); err != nil {
			var nl *NotLeaderError
			if !errors.As(err, &nl) {
				c.t.Fatalf("barrier: %v", err)
			}
			continue
		}
		want := leader.Image()
		moved := false
		for _, n := range c.running() {
			img, err := n.WaitIndex(ctx, want.Index())
			if err != nil {
				c.t.Fatalf("node %d: %v", n.ID(), err)
			}
			if img.Index() != want.Index() {
				moved = true
				break
			}
			if img.Hash() != want.Hash() {
				c.t.Fatalf("node %d image differs from leader %d's at index %d:\n%s\n%s", n.ID(), leader.ID(), want.Index(),
					metadata.EncodeImage(img), metadata.EncodeImage(want))
			}
		}
		if !moved {
			return want
		}
	}
}

// initialized waits until the first leader's InitCluster is applied
// everywhere and returns the converged image.
func (c *testCluster) initialized(ctx context.Context) *metadata.Image {
	c.t.Helper()
	for {
		if img := c.converge(ctx); img.ClusterID() != "" {
			return img
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("no cluster id committed: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// registerBrokers registers and unfences a broker per voter.
func (c *testCluster) registerBrokers(ctx context.Context) {
	c.t.Helper()
	for _, v := range c.voters {
		res := c.mustPropose(ctx, metadata.RegisterBroker{ID: v.ID, Incarnation: metadata.NewUUID(),
			KafkaAddr: fmt.Sprintf("127.0.0.1:%d", 19000+v.ID), ControllerAddr: v.Addr})
		c.mustPropose(ctx, metadata.UnfenceBroker{ID: v.ID, Epoch: res.BrokerEpoch})
	}
}

// createTopic builds a CreateTopic placed over the live brokers.
func createTopic(t testing.TB, img *metadata.Image, name string, parts, rf int) metadata.CreateTopic {
	assign, err := metadata.PlaceReplicas(img, 0, parts, rf)
	if err != nil {
		t.Fatal(err)
	}
	return metadata.CreateTopic{Name: name, ID: metadata.NewUUID(), Replicas: assign}
}
