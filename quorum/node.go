package quorum

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/twmb/franz-go/pkg/kerr"
	"go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"

	"github.com/ringlog/ringlog/metadata"
)

// Files in a node's directory (besides identityFile).
const (
	raftDBFile   = "raft.db"   // raft-boltdb: the log and Raft's stable state (term, vote)
	snapshotsDir = "snapshots" // raft.FileSnapshotStore
)

// Defaults. The timeouts are under a third of hashicorp/raft's (1 s, 1 s,
// 500 ms): a controller's loss is detected and a new one elected in
// 0.3-0.6 s, well inside a broker's session timeout
// (cluster.DefaultSessionTimeout), so that the brokers' leadership leases
// outlive the election (raft sends heartbeats every HeartbeatTimeout/10,
// and appends do not delay them).
// SnapshotThreshold and TrailingLogs are lower than raft's (8192, 10240): a
// bbolt file never shrinks and its freelist slows writes as it grows, and
// metadata snapshots are small.
const (
	DefaultHeartbeatTimeout   = 300 * time.Millisecond
	DefaultElectionTimeout    = 300 * time.Millisecond
	DefaultLeaderLeaseTimeout = 150 * time.Millisecond
	DefaultCommitTimeout      = 50 * time.Millisecond
	DefaultSnapshotThreshold  = 1024
	DefaultTrailingLogs       = 1024
	DefaultSnapshotInterval   = 30 * time.Second
	DefaultHandshakeTimeout   = 5 * time.Second
	DefaultRPCTimeout         = 10 * time.Second
	snapshotsRetained         = 2
)

// Config configures a Node. NodeID, Dir and Voters are required.
type Config struct {
	// NodeID is this node's id: one of Voters, or, for a broker-only
	// node, an id none of them has (a Raft non-voter that joins through
	// the voters, receives the log and never votes).
	NodeID int32
	// Dir holds the node's Raft data: cluster.json, raft.db, snapshots/.
	Dir string
	// Voters is the founding voter set (ParseVoters): it bootstraps a
	// new cluster and is where joiners look; the Raft configuration's
	// voters change since. A node's directory keeps the set it was first
	// started with; starting it with another is an error.
	Voters Voters
	// ClusterID, if set, is the cluster this node belongs to: a directory
	// of another cluster is refused, and a new cluster takes this id.
	// Empty: the id recorded in Dir, or for a new cluster, the one the
	// first leader picks at random.
	ClusterID string
	// Listener, if set, is the Raft listener (tests pass one bound to port
	// 0); the node owns it from Open on, and closes it. Otherwise the node
	// listens on BindAddr, or its voter address.
	Listener net.Listener
	BindAddr string
	// AdvertiseHost is the host the leader reaches a broker-only node at
	// (its listener's port); empty: the listener's address, which must
	// then not be a wildcard. Voters are reached at their voter address.
	AdvertiseHost string
	// Dial connects to peers (default: a net.Dialer).
	Dial DialFunc
	// TLS, when set, runs every Raft connection over mutual TLS, before
	// the handshake; nil: plain TCP.
	TLS *TLS
	// Raft timing; zero values take the defaults above.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotThreshold  uint64
	TrailingLogs       uint64
	SnapshotInterval   time.Duration
	// HandshakeTimeout bounds a connection's handshake; RPCTimeout is the
	// transport's I/O deadline.
	HandshakeTimeout time.Duration
	RPCTimeout       time.Duration
	// Logger receives the node's and hashicorp/raft's messages (nil:
	// slog.Default()). RaftLogLevel is the lowest level of raft's own
	// messages that gets through (nil: warn; raft is chatty at info).
	Logger       *slog.Logger
	RaftLogLevel slog.Leveler
	// OnApply is passed to the FSM (metadata.FSMOptions.OnApply).
	OnApply func(metadata.ApplyEvent)

	// beforeRaft, set by tests only, runs once the node answers
	// handshakes and before its Raft log is loaded: the window in which
	// it is still starting.
	beforeRaft func()
}

func (c *Config) defaults() {
	setDur := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	setDur(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	setDur(&c.ElectionTimeout, DefaultElectionTimeout)
	setDur(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	setDur(&c.CommitTimeout, DefaultCommitTimeout)
	setDur(&c.SnapshotInterval, DefaultSnapshotInterval)
	setDur(&c.HandshakeTimeout, DefaultHandshakeTimeout)
	setDur(&c.RPCTimeout, DefaultRPCTimeout)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RaftLogLevel == nil {
		c.RaftLogLevel = slog.LevelWarn
	}
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
}

// ErrStopped is returned by a Node that was shut down (or stopped itself).
var ErrStopped = errors.New("quorum: node stopped")

// ErrUncertain is wrapped by Propose errors after which the record may or
// may not have been committed (leadership lost, shutdown or ctx ended while
// it was in flight). It also wraps kerr.RequestTimedOut. Retrying is safe
// for records whose preconditions make a second apply a refusal
// (CreateTopic → TOPIC_ALREADY_EXISTS) or a no-op.
var ErrUncertain = errors.New("quorum: the record may or may not have been committed")

// NotLeaderError is returned by leader-only calls on another node; the
// record was not committed. It names the leader, if one is known, so the
// caller can forward there; it wraps kerr.NotController.
type NotLeaderError struct {
	// LeaderID is the leader's node id, -1 when no leader is known (an
	// election is under way).
	LeaderID int32
	// LeaderAddr is the leader's Raft address ("" when unknown).
	LeaderAddr string
}

// Error names the leader, or says none is known.
func (e *NotLeaderError) Error() string {
	if e.LeaderID < 0 {
		return "quorum: not the metadata leader, and no leader is known (election under way)"
	}
	return fmt.Sprintf("quorum: not the metadata leader; node %d at %s is", e.LeaderID, e.LeaderAddr)
}

// Unwrap returns kerr.NotController.
func (e *NotLeaderError) Unwrap() error { return kerr.NotController }

// Node is one member of the metadata quorum: hashicorp/raft over
// raft-boltdb and a FileSnapshotStore in Config.Dir, driving a
// metadata.FSM, with a NetworkTransport over a StreamLayer that
// handshakes every connection.
type Node struct {
	cfg    Config
	log    *slog.Logger
	fsm    *metadata.FSM
	raft   *raft.Raft
	store  *raftboltdb.BoltStore
	stable *stableStore // store, as Raft's StableStore
	stream *streamLayer

	idMu       sync.Mutex // serializes identity file writes
	mu         sync.Mutex
	identity   identity
	mismatches map[int32]*MismatchError // by peer id
	fatal      error

	notify chan bool // raft's leadership changes

	// nonVoter is set on a node whose id is not in --voters (it joins
	// as a non-voter, and may be promoted); admitted once a node with an
	// empty directory founded the cluster or the leader took it in (Raft
	// connections are refused until then). advertise is the address the
	// leader reaches this node at.
	nonVoter  bool
	admitted  atomic.Bool
	advertise string
	// ready is set once raft is (joins can arrive before: the stream
	// layer listens first). deciding is set while a founding voter on an
	// empty directory finds out whether to found the cluster (foundLoop).
	ready    atomic.Bool
	deciding atomic.Bool
	// joined is set once this node saw a running cluster: a leader took
	// it in, or foundLoop found evidence of one. It is evidence in turn
	// (established), also before the node has any log.
	joined atomic.Bool

	stop         chan struct{}
	stopped      chan struct{}
	shutdownOnce sync.Once
	shutdownErr  error
	wg           sync.WaitGroup
}

// Open starts a node. On a new directory it records the node's identity
// and bootstraps Raft with the voters; on an existing one it checks that
// the directory is this node's, of this cluster (when Config.ClusterID is
// set), and was bootstrapped with the same voters.
func Open(cfg Config) (*Node, error) {
	cfg.defaults()
	if cfg.Dir == "" {
		return nil, errors.New("quorum: no directory")
	}
	if len(cfg.Voters) == 0 {
		return nil, errors.New("quorum: no voters")
	}
	if cfg.NodeID < 0 {
		return nil, fmt.Errorf("quorum: node id %d is negative", cfg.NodeID)
	}
	self, voter := cfg.Voters.Lookup(cfg.NodeID)
	if !voter && cfg.Listener == nil && cfg.BindAddr == "" {
		return nil, fmt.Errorf("quorum: node %d is not in the voters %q, so it is a broker-only node, which needs an address for its metadata listener", cfg.NodeID, cfg.Voters)
	}
	if cfg.ClusterID != "" {
		if err := metadata.ValidateClusterID(cfg.ClusterID); err != nil {
			return nil, fmt.Errorf("quorum: %w", err)
		}
	}
	if err := metadataPerm().MkdirAll(cfg.Dir); err != nil {
		return nil, fmt.Errorf("quorum: %w", err)
	}
	id, ok, err := readIdentity(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if ok {
		if err := id.check(cfg.Dir, cfg.NodeID, cfg.ClusterID); err != nil {
			return nil, err
		}
		if id.Voters != "" && id.Voters != cfg.Voters.String() {
			return nil, foundingMismatch(cfg.Dir, id.Voters, cfg.Voters.String())
		}
	} else {
		if hasRaftData(cfg.Dir) {
			return nil, fmt.Errorf("quorum: %s holds Raft data but no %s; refusing to guess which node and cluster it belongs to", cfg.Dir, identityFile)
		}
		id = identity{ClusterID: cfg.ClusterID, NodeID: cfg.NodeID}
		if err := writeIdentity(cfg.Dir, id); err != nil {
			return nil, err
		}
	}

	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.NodeID), identity: id,
		mismatches: map[int32]*MismatchError{}, notify: make(chan bool, 1),
		stop: make(chan struct{}), stopped: make(chan struct{}), nonVoter: !voter}
	n.fsm = metadata.NewFSM(metadata.FSMOptions{Logger: n.log, OnApply: n.onApply})
	if !voter {
		self = Voter{ID: cfg.NodeID}
	}
	if err := n.start(self); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Node) start(self Voter) (err error) {
	cfg := n.cfg
	hcl := newHclog(n.log, cfg.RaftLogLevel.Level())
	var cleanup []func()
	if cfg.Listener != nil {
		cleanup = append(cleanup, func() { cfg.Listener.Close() })
	}
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()

	if err := checkLogPresent(cfg.Dir); err != nil {
		return err
	}
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.Dir, raftDBFile),
		BoltOptions: &bbolt.Options{Timeout: time.Second},
	})
	if err != nil {
		if errors.Is(err, bbolterrors.ErrTimeout) {
			return fmt.Errorf("quorum: %s is in use by another process", filepath.Join(cfg.Dir, raftDBFile))
		}
		return fmt.Errorf("quorum: open %s: %w", raftDBFile, err)
	}
	cleanup = append(cleanup, func() { store.Close() })
	n.store = store
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		return fmt.Errorf("quorum: %w", err)
	}
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, snapshotsRetained, hcl.Named("snapshot"))
	if err != nil {
		return fmt.Errorf("quorum: snapshot store: %w", err)
	}
	// What raft made 0755/0644, and what an older ringlog left so,
	// becomes owner-only (see metadataPerm).
	if err := metadataPerm().Restrict(cfg.Dir); err != nil {
		return fmt.Errorf("quorum: restrict the modes in %s: %w", cfg.Dir, err)
	}
	snaps := ownerOnlySnapshots{FileSnapshotStore: fileSnaps, dir: cfg.Dir}

	ln := cfg.Listener
	if ln == nil {
		bind := cfg.BindAddr
		if bind == "" {
			bind = self.Addr
		}
		if ln, err = net.Listen("tcp", bind); err != nil {
			return fmt.Errorf("quorum: listen for Raft: %w", err)
		}
		cleanup = append(cleanup, func() { ln.Close() })
	}
	if n.nonVoter {
		if self.Addr, err = advertised(ln.Addr(), cfg.AdvertiseHost); err != nil {
			return fmt.Errorf("quorum: broker-only node %d: %w", cfg.NodeID, err)
		}
	}
	n.advertise = self.Addr
	hs := &handshaker{nodeID: cfg.NodeID, voters: cfg.Voters, clusterID: n.knownClusterID, report: n.reportPeer, join: n.admit,
		open: n.admitted.Load, established: n.established}
	n.stream = newStreamLayer(ln, self.Addr, cfg.Dial, cfg.TLS, cfg.HandshakeTimeout, hs)
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: n.stream, MaxPool: 3, Timeout: cfg.RPCTimeout, Logger: hcl.Named("transport"),
	})
	cleanup = append(cleanup, func() { trans.Close() })

	rc := raft.DefaultConfig()
	rc.LocalID = serverID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.NotifyCh = n.notify
	rc.Logger = hcl.Named("raft")
	// A leader that removes itself (RemoveVoter) steps down and stays a
	// node that can be added back, rather than a dead Raft under a live
	// broker.
	rc.ShutdownOnRemove = false
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("quorum: %w", err)
	}

	if cfg.beforeRaft != nil {
		cfg.beforeRaft()
	}
	existing, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return fmt.Errorf("quorum: %w", err)
	}
	n.admitted.Store(existing)
	// A founding voter on an empty directory decides between founding
	// the cluster and joining it in foundLoop, after Raft started.
	n.deciding.Store(!existing && !n.nonVoter)
	n.stable = &stableStore{s: store}
	r, err := raft.NewRaft(rc, n.fsm, logs, n.stable, snaps, trans)
	if err != nil {
		return fmt.Errorf("quorum: start raft: %w", err)
	}
	cleanup = append(cleanup, func() { r.Shutdown().Error() })
	n.raft = r
	n.ready.Store(true)
	if err := n.checkFoundingVoters(r); err != nil {
		return err
	}

	// A restored snapshot may already hold the committed cluster id.
	if err := n.learnClusterID(n.fsm.Image().ClusterID()); err != nil {
		return err
	}

	n.wg.Add(2)
	go n.leaderLoop()
	go n.watchLoop()
	n.wg.Add(1)
	go n.joinLoop()
	if n.deciding.Load() {
		n.wg.Add(1)
		go n.foundLoop()
	}
	n.log.Info("metadata quorum node started", "dir", cfg.Dir, "addr", self.Addr, "voters", cfg.Voters.String(),
		"broker_only", n.nonVoter, "deciding", !existing && !n.nonVoter, "cluster_id", n.knownClusterID(), "existing_state", existing)
	return nil
}

// checkLogPresent refuses a directory that holds Raft snapshots but no
// raft.db. Snapshots are written only after raft.db was, so its log and,
// with it, the node's term and vote were lost. Started so, the node would
// count as having state but have forgotten whom it voted for: it could
// vote twice in one term and elect a second leader.
func checkLogPresent(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, raftDBFile)); !errors.Is(err, fs.ErrNotExist) {
		return nil // present, or unreadable: opening it reports that
	}
	snaps, err := os.ReadDir(filepath.Join(dir, snapshotsDir))
	if err != nil || len(snaps) == 0 {
		return nil // a first start
	}
	return fmt.Errorf("quorum: %s holds Raft snapshots but no %s: this node lost its Raft log and the term and vote it had cast, "+
		"and must not vote with them forgotten. Move the directory aside (keep it: the snapshots hold the metadata) and start on an empty one: "+
		"a voter that registered is then refused until `ringlog cluster quorum remove-voter` removes it, and joins again as an observer", dir, raftDBFile)
}

func foundingMismatch(dir, have, want string) error {
	return fmt.Errorf("quorum: %s was first started with other voters (%s), but this node was started with %q; "+
		"every node keeps the --voters the cluster was founded with, also after voters are added or removed", dir, have, want)
}

// established reports whether this node knows a cluster runs: its Raft
// log (or snapshot) goes past the bootstrap entry (a leader was elected
// once), or it saw a running cluster before it had any log (joined).
func (n *Node) established() bool {
	return n.ready.Load() && (n.raft.LastIndex() > 1 || n.joined.Load())
}

// checkFoundingVoters refuses a directory first started with other
// --voters than this start's. The voters of the Raft configuration change
// (AddVoter, RemoveVoter), so the founding set is kept in the identity
// file; a directory from before that has it added here, from its Raft
// configuration, which could not change then.
func (n *Node) checkFoundingVoters(r *raft.Raft) error {
	want := n.cfg.Voters.String()
	n.mu.Lock()
	id := n.identity
	n.mu.Unlock()
	mismatch := func(have string) error { return foundingMismatch(n.cfg.Dir, have, want) }
	if id.Voters != "" {
		if id.Voters != want {
			return mismatch(id.Voters)
		}
		return nil
	}
	cf := r.GetConfiguration()
	if err := cf.Error(); err != nil {
		return fmt.Errorf("quorum: %w", err)
	}
	have, err := votersOf(cf.Configuration())
	if err != nil {
		return mismatch(err.Error())
	}
	if len(have) > 0 && have.String() != want {
		return mismatch(have.String())
	}
	n.idMu.Lock()
	defer n.idMu.Unlock()
	n.mu.Lock()
	id = n.identity
	n.mu.Unlock()
	id.Voters = want
	if err := writeIdentity(n.cfg.Dir, id); err != nil {
		return fmt.Errorf("quorum: record the founding voters: %w", err)
	}
	n.mu.Lock()
	n.identity = id
	n.mu.Unlock()
	return nil
}

// FSM returns the node's state machine (Subscribe for the publisher).
func (n *Node) FSM() *metadata.FSM { return n.fsm }

// Image returns the current metadata image: this node's applied state,
// possibly behind the leader's (see ConsistentImage, WaitIndex).
func (n *Node) Image() *metadata.Image { return n.fsm.Image() }

// WaitIndex waits until this node has applied log index i (a Result.Index
// returned by Propose on any node) and returns the image.
func (n *Node) WaitIndex(ctx context.Context, i uint64) (*metadata.Image, error) {
	return n.fsm.WaitIndex(ctx, i)
}

// ID is this node's id.
func (n *Node) ID() int32 { return n.cfg.NodeID }

// ClusterID is the cluster id this node knows: recorded in its directory,
// or committed in the log; empty before the first leader committed it.
func (n *Node) ClusterID() string { return n.knownClusterID() }

func (n *Node) knownClusterID() string {
	n.mu.Lock()
	cid := n.identity.ClusterID
	n.mu.Unlock()
	if cid == "" {
		cid = n.cfg.ClusterID
	}
	if cid == "" {
		cid = n.fsm.Image().ClusterID()
	}
	return cid
}

// Leader returns the current leader's id and Raft address as this node
// knows them; -1 and "" when it knows none.
func (n *Node) Leader() (int32, string) {
	addr, id := n.raft.LeaderWithID()
	if id == "" {
		return -1, ""
	}
	v, err := strconv.ParseInt(string(id), 10, 32)
	if err != nil {
		return -1, ""
	}
	return int32(v), string(addr)
}

// Term returns the current Raft term.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// IsLeader reports whether this node is the leader (the controller).
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// WaitForLeader waits until a leader is known and returns it.
func (n *Node) WaitForLeader(ctx context.Context) (int32, string, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if id, addr := n.Leader(); id >= 0 {
			return id, addr, nil
		}
		select {
		case <-ctx.Done():
			return -1, "", fmt.Errorf("quorum: no leader: %w", ctx.Err())
		case <-n.stopped:
			return -1, "", ErrStopped
		case <-t.C:
		}
	}
}

func (n *Node) notLeader() error {
	id, addr := n.Leader()
	return &NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

// timeoutOf is how long raft may wait to enqueue a call: until ctx's
// deadline, or a default.
func timeoutOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if t := time.Until(d); t > 0 {
			return t
		}
		return time.Millisecond
	}
	return 10 * time.Second
}

// errStoppedWaiting: the node stopped before a raft future was answered.
// hashicorp/raft can leave a committed entry's future unanswered forever
// when it shuts down between commit and apply (the entry waits in the FSM
// channel), so the outcome is unknown.
var errStoppedWaiting = errors.New("quorum: the node stopped before the outcome was known")

// wait waits for a raft future, or ctx, or the node stopping. Once the
// node stopped, a future still unanswered gets errStoppedWaiting (the
// goroutine waiting on it stays parked: raft gives no way to cancel it).
func (n *Node) wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		select {
		case err := <-done:
			return err
		default:
			return errStoppedWaiting
		}
	}
}

// Propose commits rec through the leader and returns its Result, once this
// node applied it. Errors:
//   - *NotLeaderError: this node is not the leader; nothing was committed.
//   - a *metadata.RefusedError (Result.Err): committed and refused, with
//     the same error on every node.
//   - ErrUncertain: it may or may not have been committed.
//   - ErrStopped, or an encoding error: nothing was committed.
func (n *Node) Propose(ctx context.Context, rec metadata.Record) (metadata.Result, error) {
	data, err := metadata.EncodeRecord(rec)
	if err != nil {
		return metadata.Result{}, err
	}
	if n.isStopped() {
		return metadata.Result{}, ErrStopped
	}
	if n.raft.State() != raft.Leader {
		return metadata.Result{}, n.notLeader()
	}
	f := n.raft.Apply(data, timeoutOf(ctx))
	err = n.wait(ctx, f)
	switch {
	case err == nil:
		res, ok := f.Response().(metadata.Result)
		if !ok {
			return metadata.Result{}, fmt.Errorf("quorum: unexpected FSM response %T", f.Response())
		}
		return res, res.Err
	case errors.Is(err, raft.ErrNotLeader):
		return metadata.Result{}, n.notLeader()
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return metadata.Result{}, fmt.Errorf("quorum: %w: %v", kerr.RequestTimedOut, err)
	}
	return metadata.Result{}, fmt.Errorf("%w (%w): %v", ErrUncertain, kerr.RequestTimedOut, err)
}

// Barrier waits until every record committed before it is applied on the
// leader (this node); on another node it returns *NotLeaderError.
func (n *Node) Barrier(ctx context.Context) error {
	if n.isStopped() {
		return ErrStopped
	}
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	err := n.wait(ctx, n.raft.Barrier(timeoutOf(ctx)))
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return n.notLeader()
	}
	if errors.Is(err, errStoppedWaiting) || errors.Is(err, raft.ErrRaftShutdown) {
		return ErrStopped
	}
	if err != nil {
		return fmt.Errorf("quorum: barrier: %w", err)
	}
	return nil
}

// VerifyLeader confirms with a quorum that this node is still the leader
// (a round of Raft heartbeats); on another node, or one that has lost
// its leadership without noticing yet (resumed from a pause, cut off),
// it returns *NotLeaderError. Once it returns nil, no other leader took
// office before the call.
func (n *Node) VerifyLeader(ctx context.Context) error {
	if n.isStopped() {
		return ErrStopped
	}
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	err := n.wait(ctx, n.raft.VerifyLeader())
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return n.notLeader()
	}
	if errors.Is(err, errStoppedWaiting) || errors.Is(err, raft.ErrRaftShutdown) {
		return ErrStopped
	}
	if err != nil {
		return fmt.Errorf("quorum: verify leadership: %w", err)
	}
	return nil
}

// ConsistentImage returns, on the leader, an image that includes every
// record committed before the call (a linearizable read); on another node
// it returns *NotLeaderError (forward, or use WaitIndex).
func (n *Node) ConsistentImage(ctx context.Context) (*metadata.Image, error) {
	if err := n.Barrier(ctx); err != nil {
		return nil, err
	}
	return n.fsm.Image(), nil
}

// Snapshot takes a Raft snapshot now (and compacts the log behind it),
// unless nothing was applied since the last one.
func (n *Node) Snapshot() error {
	if err := n.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return fmt.Errorf("quorum: snapshot: %w", err)
	}
	return nil
}

// Stats returns hashicorp/raft's statistics (state, term, indexes,
// last_snapshot_index, ...).
func (n *Node) Stats() map[string]string { return n.raft.Stats() }

// PeerMismatch returns the configuration mismatches with peers seen in
// handshakes (different voters or cluster ids), one per peer, or nil. A
// peer's entry is cleared when a handshake with it succeeds.
func (n *Node) PeerMismatch() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	ids := make([]int32, 0, len(n.mismatches))
	for id := range n.mismatches {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	errs := make([]error, 0, len(ids))
	for _, id := range ids {
		errs = append(errs, n.mismatches[id])
	}
	return errors.Join(errs...)
}

func (n *Node) reportPeer(peer int32, addr string, mm *MismatchError) {
	n.mu.Lock()
	prev := n.mismatches[peer]
	if mm == nil {
		delete(n.mismatches, peer)
	} else {
		n.mismatches[peer] = mm
	}
	n.mu.Unlock()
	if mm != nil && (prev == nil || prev.Reason != mm.Reason) {
		n.log.Error("refusing a Raft peer", "peer", peer, "addr", addr, "reason", mm.Reason)
	}
}

// Done is closed once the node has stopped: after Shutdown, or when it
// stopped itself (Err says why).
func (n *Node) Done() <-chan struct{} { return n.stopped }

// Err is why the node stopped itself, nil otherwise: its FSM halted on an
// entry it cannot decode, or the quorum committed a cluster id other than
// the one its directory belongs to.
func (n *Node) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.fatal
}

func (n *Node) isStopped() bool {
	select {
	case <-n.stop:
		return true
	default:
		return false
	}
}

// Shutdown stops the node: Raft, the transport, the stores. It is
// idempotent; every call waits until the node is down.
func (n *Node) Shutdown() error {
	n.shutdownOnce.Do(func() {
		close(n.stop)
		err := n.raft.Shutdown().Error()
		n.wg.Wait()
		n.stable.close()
		if cerr := n.store.Close(); cerr != nil && err == nil {
			err = cerr
		}
		n.shutdownErr = err
		n.log.Info("metadata quorum node stopped")
		close(n.stopped)
	})
	<-n.stopped
	return n.shutdownErr
}

// stopItself records a fatal condition and shuts the node down from a new
// goroutine (the caller is one Shutdown waits for).
func (n *Node) stopItself(err error) {
	n.mu.Lock()
	if n.fatal != nil {
		n.mu.Unlock()
		return
	}
	n.fatal = err
	n.mu.Unlock()
	n.log.Error("metadata quorum node stopping", "err", err)
	go n.Shutdown()
}

// leaderLoop commits InitCluster when this node becomes the leader of a
// cluster without an id.
func (n *Node) leaderLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case isLeader := <-n.notify:
			if isLeader {
				n.log.Info("became the metadata leader")
				n.initCluster()
			}
		}
	}
}

func (n *Node) initCluster() {
	backoff := n.cfg.HeartbeatTimeout / 4
	for n.IsLeader() {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ElectionTimeout*4)
		err := n.Barrier(ctx) // apply everything committed first: the id may be set already
		if err == nil && n.fsm.Image().ClusterID() == "" {
			cid := n.knownClusterID()
			if cid == "" {
				cid = metadata.NewUUID().String()
			}
			_, err = n.Propose(ctx, metadata.InitCluster{ClusterID: cid})
		}
		cancel()
		var re *metadata.RefusedError
		if err == nil || errors.As(err, &re) {
			return
		}
		n.log.Warn("committing the cluster id", "err", err)
		select {
		case <-n.stop:
			return
		case <-time.After(backoff):
		}
	}
}

// onApply runs on Raft's FSM goroutine after every entry: a committed
// InitCluster is recorded in the directory before the next entry applies,
// so a node cannot restart without knowing the cluster it belongs to.
func (n *Node) onApply(e metadata.ApplyEvent) {
	if ic, ok := e.Record.(metadata.InitCluster); ok && e.Result.Err == nil {
		if err := n.learnClusterID(ic.ClusterID); err != nil {
			n.stopItself(err)
		}
	}
	if n.cfg.OnApply != nil {
		n.cfg.OnApply(e)
	}
}

// learnClusterID records the committed cluster id cid in the identity
// file if the directory has none yet; an id different from the
// directory's, or from Config.ClusterID, is an error (another cluster's
// directory).
func (n *Node) learnClusterID(cid string) error {
	if cid == "" {
		return nil
	}
	if want := n.cfg.ClusterID; want != "" && cid != want {
		return fmt.Errorf("quorum: this node was started for cluster %s, but the quorum's cluster id (in %s) is %s", want, n.cfg.Dir, cid)
	}
	n.idMu.Lock()
	defer n.idMu.Unlock()
	n.mu.Lock()
	have := n.identity.ClusterID
	n.mu.Unlock()
	switch have {
	case cid:
		return nil
	case "":
		n.mu.Lock()
		id := n.identity
		n.mu.Unlock()
		id.ClusterID = cid
		if err := writeIdentity(n.cfg.Dir, id); err != nil {
			return fmt.Errorf("quorum: record the cluster id: %w", err)
		}
		n.mu.Lock()
		n.identity = id
		n.mu.Unlock()
		n.log.Info("joined cluster", "cluster_id", cid)
		return nil
	}
	return fmt.Errorf("quorum: %s belongs to cluster %s, but the quorum's cluster id is %s: it is another cluster's data directory", n.cfg.Dir, have, cid)
}

// watchLoop stops the node if its FSM halts, and checks the cluster id of
// images that arrive by snapshot (InstallSnapshot), which onApply does not
// see.
func (n *Node) watchLoop() {
	defer n.wg.Done()
	sub := n.fsm.Subscribe()
	defer sub.Close()
	for {
		if err := n.fsm.Err(); err != nil {
			n.stopItself(err)
			return
		}
		if err := n.learnClusterID(n.fsm.Image().ClusterID()); err != nil {
			n.stopItself(err)
			return
		}
		select {
		case <-n.stop:
			return
		case <-sub.C():
		}
	}
}

// stableStore is the Raft node's StableStore: the bolt store until
// Shutdown, then writes are dropped and reads fail. hashicorp/raft
// handles a heartbeat on the transport's connection goroutine, which
// raft.Shutdown does not wait for, and panics when it cannot save the
// term the heartbeat carries ("database not open" once the store is
// closed). A node that is down has nothing to save: a term it drops is a
// heartbeat it never got. The lock keeps the store open for a write in
// progress.
type stableStore struct {
	mu     sync.RWMutex
	closed bool
	s      raft.StableStore
}

var errStableClosed = errors.New("quorum: node stopped")

// Set implements raft.StableStore.
func (s *stableStore) Set(key, val []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	return s.s.Set(key, val)
}

// Get implements raft.StableStore.
func (s *stableStore) Get(key []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errStableClosed
	}
	return s.s.Get(key)
}

// SetUint64 implements raft.StableStore.
func (s *stableStore) SetUint64(key []byte, val uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	return s.s.SetUint64(key, val)
}

// GetUint64 implements raft.StableStore.
func (s *stableStore) GetUint64(key []byte) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, errStableClosed
	}
	return s.s.GetUint64(key)
}

// close makes the store refuse from now on (once writes in progress are
// done); the caller closes the bolt store after it.
func (s *stableStore) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}
