// Package cluster wires a broker into the cluster (../shared/CLUSTER.md):
// it runs the broker's quorum.Node, registers the broker with the
// controller and keeps its session alive with heartbeats, keeps the
// engine's topics and each partition's replica role in step with the
// replicated image (the publisher), runs the replica fetchers of the
// partitions this broker follows, runs the controller's decisions while
// this node is the Raft leader (fencing silent brokers, electing leaders
// from the ISR, ISR changes), and answers the admin requests the Kafka
// listener hands it, proposing them on the controller or forwarding them
// to it.
//
// Brokers agree on brokers, topics, partition placement (replicas,
// leader, leader epoch, ISR), configs and producer-id blocks through Raft;
// partition data is replicated Kafka-style (ISR over the Fetch API, the
// high watermark in engine/replica.go), the cluster's __consumer_offsets
// included (see Groups).
//
// # Startup
//
// Open starts the Raft node on <data-dir>/metadata and sets the engine's
// cluster hooks; Start (once the Kafka listener is bound) begins the
// broker's life in a goroutine: register (a fresh incarnation id, the
// advertised Kafka address) with the controller, wait until the local
// image includes the registration (so it holds everything committed
// before it), reconcile the engine with the image, then ask to be
// unfenced (the first heartbeat), and from then on reconcile after every
// new image.
//
// A node that cannot register because its handshakes with the other
// voters fail (different --voters, or a data directory of another
// cluster) stops with quorum's PeerMismatch error after
// MismatchGrace: that is the startup error the operator sees.
//
// # Admin requests
//
// The controller (the Raft leader) validates an admin request against its
// image (after a Raft barrier), places replicas (metadata.PlaceReplicas)
// and proposes the record: Cluster is the admin.Service of cluster mode,
// which netio calls on the controller and forwards to it from any other
// broker (package admin, netio/admin.go). Registration, heartbeats,
// producer-id blocks and ISR changes are typed requests (internal/peer):
// the controller answers them (the Answer* methods); any other broker
// sends them to the controller through one client of the other brokers
// (internal/peerwire, Kafka's BrokerRegistration, BrokerHeartbeat,
// AllocateProducerIds and AlterPartition on the wire), and a broker that
// is not the controller answers NOT_CONTROLLER, so nothing travels in
// circles while the controller changes. This package speaks no Kafka
// protocol itself: replica fetches and transaction calls go through the
// same client.
//
// # Groups
//
// The cluster's __consumer_offsets is an internal topic of the image that
// the controller creates once enough brokers are live, replicated like
// any topic. The coordinator of group g is the leader of its partition
// (engine.OffsetsPartitionFor); the publisher makes the engine's
// coordinator replay a partition when this broker starts leading it and
// forget its groups when the leadership moves.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/kwire"
	"github.com/ringlog/ringlog/internal/peer"
	"github.com/ringlog/ringlog/internal/peerwire"
	"github.com/ringlog/ringlog/metadata"
	"github.com/ringlog/ringlog/quorum"
	"github.com/ringlog/ringlog/tiered"
)

// MetadataDir is the quorum node's directory inside the data directory.
const MetadataDir = "metadata"

// Defaults.
const (
	// DefaultMismatchGrace is how long a node that has not registered
	// keeps retrying while its handshakes with peers are refused, before
	// it stops with the mismatch.
	DefaultMismatchGrace = 5 * time.Second
	// producerIDBlock is how many producer ids a broker takes at once.
	producerIDBlock = 1000
	retryBackoff    = 100 * time.Millisecond
	// autoCreateWait bounds how long auto-creation waits for this
	// broker's engine to have the new topic.
	autoCreateWait = 10 * time.Second
	// DefaultSessionTimeout is broker.session.timeout: the controller
	// fences a broker it has not heard from for this long and moves its
	// partitions' leadership to other in-sync replicas. It bounds the
	// failover after a broker dies (Kafka's 9 s; measured in make chaos).
	DefaultSessionTimeout = 1500 * time.Millisecond
	// DefaultHeartbeatInterval is how often a broker heartbeats the
	// controller: six times a session.
	DefaultHeartbeatInterval = 250 * time.Millisecond
	// DefaultBrokerOnlyGrace is how long a stopped broker-only node stays
	// in the metadata quorum's configuration.
	DefaultBrokerOnlyGrace = time.Minute
	// DefaultLeaderImbalanceCheckInterval is
	// leader.imbalance.check.interval.seconds (Kafka's 300).
	DefaultLeaderImbalanceCheckInterval = 5 * time.Minute
	// DefaultLeaderImbalancePercent is
	// leader.imbalance.per.broker.percentage (Kafka's 10).
	DefaultLeaderImbalancePercent = 10
	// DefaultReplicaLagMax is replica.lag.time.max.ms: a follower not
	// caught up for this long leaves the ISR.
	DefaultReplicaLagMax = 10 * time.Second
	// DefaultOffsetsPartitions is the partition count of the cluster's
	// __consumer_offsets.
	DefaultOffsetsPartitions = 16
	// DefaultTxnStatePartitions is the partition count of the cluster's
	// __transaction_state (Kafka: 50; fewer partitions, fewer logs).
	DefaultTxnStatePartitions = 8
	// isrTick is how often leaders look for ISR changes to ask for.
	isrTick = 250 * time.Millisecond
)

// Config configures a broker's cluster mode.
type Config struct {
	// NodeID is this broker's id: one of Voters (a controller and a
	// broker), or another id (a broker-only node: a Raft non-voter that
	// follows the metadata log, never votes or controls).
	NodeID int32
	// Voters is every controller (--voters).
	Voters quorum.Voters
	// ControllerAddr is where the Raft listener binds (--controller-addr);
	// empty: this node's address in Voters. On a broker-only node it is
	// its metadata listener (--metadata-addr), which the controller
	// pushes the metadata log to; it must be set there.
	ControllerAddr string
	// Rack is this broker's rack (broker.rack, --rack; empty: none):
	// replica placement spreads each partition over racks.
	Rack string
	// AdvertiseHost is the host a broker-only node's metadata listener
	// is reached at (empty: the host it is bound to).
	AdvertiseHost string
	// RaftListener, if set, is the Raft listener, bound by the caller
	// (tests: bound before the voters are known, so no port is raced
	// for); the node owns it from Open on. It replaces ControllerAddr.
	RaftListener net.Listener
	// DataDir is the broker's data directory; the quorum node lives in
	// its MetadataDir.
	DataDir string
	// DefaultPartitions is the partition count of CreateTopics with -1
	// and of auto-created topics.
	DefaultPartitions int32
	// DefaultReplicationFactor is the replication factor of CreateTopics
	// with -1 and of auto-created topics (default.replication.factor): 0
	// means min(3, voters).
	DefaultReplicationFactor int16
	// SessionTimeout, HeartbeatInterval, ReplicaLagMax: see their
	// Default constants (0: the default).
	SessionTimeout, HeartbeatInterval, ReplicaLagMax time.Duration
	// OffsetsPartitions is the partition count of the cluster's
	// __consumer_offsets (offsets.topic.num.partitions; 0:
	// DefaultOffsetsPartitions), fixed when the controller creates it.
	OffsetsPartitions int32
	// TxnStatePartitions is the partition count of the cluster's
	// __transaction_state (transaction.state.log.num.partitions; 0:
	// DefaultTxnStatePartitions), fixed when the controller creates it.
	TxnStatePartitions int32
	// MismatchGrace: see DefaultMismatchGrace (0: the default).
	MismatchGrace time.Duration
	// AutoLeaderRebalance turns on the controller's leader balance
	// check (auto.leader.rebalance.enable): every
	// LeaderImbalanceCheckInterval (0: DefaultLeaderImbalanceCheckInterval)
	// a broker that leads fewer than (100 - LeaderImbalancePercent)% of
	// the partitions it is the preferred replica of (0:
	// DefaultLeaderImbalancePercent) gets them back by preferred
	// elections.
	AutoLeaderRebalance          bool
	LeaderImbalanceCheckInterval time.Duration
	LeaderImbalancePercent       int
	// BrokerOnlyGrace is how long a broker-only node may be gone (fenced
	// or unregistered, not heard from) before the controller takes it
	// out of the Raft configuration (0: DefaultBrokerOnlyGrace).
	BrokerOnlyGrace time.Duration
	// ReplicationThrottle, when positive, caps in bytes a second what
	// this broker fetches for the replicas being moved onto it
	// (--replication-throttle-bytes); in-sync replication is never
	// throttled.
	ReplicationThrottle int64
	// Dial opens every connection this broker makes to another broker:
	// Raft, replica fetches, requests to the controller (nil: a
	// net.Dialer). Tests route links through proxies with it
	// (--peer-dial-map).
	Dial kwire.DialFunc
	// KafkaTLS, when set, makes the connections to the other brokers'
	// inter-broker (Kafka) listeners TLS: replica fetches, registrations,
	// heartbeats and forwarded requests. It is called for each connection
	// (a certificate reload applies to the next one); an empty ServerName
	// is set to the peer's host. Raft's own connections stay as they are.
	KafkaTLS func() *tls.Config
	// Transport, when set, carries the requests to the controller in
	// place of the Kafka-protocol client (tests).
	Transport peer.Transport
	// RaftTLS, when set, runs the metadata quorum's connections over
	// mutual TLS (quorum.Config.TLS).
	RaftTLS *quorum.TLS
	// Raft timing (zero: quorum's defaults).
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// Logger receives the cluster's and Raft's logs.
	Logger *slog.Logger
}

// Cluster is one broker's cluster mode.
type Cluster struct {
	cfg    Config
	log    *slog.Logger
	node   *quorum.Node
	eng    *engine.Engine
	voters []int32 // sorted: the founding voters (--voters)
	// voterMu serializes AddVoter and RemoveVoter (the controller's
	// checks hold for the configuration they change).
	voterMu sync.Mutex

	// listeners are the advertised Kafka listeners, set by Start; the
	// first is the one the other brokers use.
	listeners []metadata.Listener
	sec       *Security
	// last is the image the publisher reconciled last (run's goroutine
	// only); nil before the first.
	last *metadata.Image

	ctrl  controller // the controller's state (while this node leads Raft)
	fetch fetchers   // replica fetchers of the partitions this broker follows
	// peers is this broker's one client of the other brokers' Kafka
	// listeners (internal/peerwire): the controller requests through
	// transport, the replica fetchers' connections, the transaction
	// calls, and netio's forwards (Peers).
	peers     *peerwire.Client
	transport peer.Transport
	replicas  peer.Replicas
	txns      peer.Txns

	caughtUp atomic.Bool // the image holds everything committed before the registration
	// selfFenced: no heartbeat got through for a session timeout, so the
	// controller has fenced this broker or is about to: the publisher
	// makes its partitions leaderless here (clients get
	// NOT_LEADER_OR_FOLLOWER, waiting acks=all produces fail with it)
	// until a heartbeat succeeds.
	selfFenced atomic.Bool
	// leaseUntil is when this broker's leadership lease ends, in
	// nanoseconds of the monotonic clock since clockBase: a session
	// timeout after it sent the last heartbeat the controller accepted
	// unfenced. The controller fences no sooner than a session after it
	// received that heartbeat, so a leader that appends only within its
	// lease never appends after its leaderships may have moved (a pause,
	// a one-way cut: see MayLead).
	leaseUntil atomic.Int64
	// officeAt is when this node last began to take office as the
	// controller (same clock as leaseUntil); officeTerm the Raft term
	// whose TakeOffice it committed, the only term in which it answers
	// heartbeats. Taking office cuts this broker's own lease to a
	// controller's (controllerLease), so a successor that finds this
	// node named in the image may fence it that soon.
	officeAt   atomic.Int64
	officeTerm atomic.Uint64
	// officeIndex is the metadata index once this controller took
	// office: a broker fenced before it (for lagging, under an earlier
	// controller whose lag records are gone) is unfenced only once it has
	// applied that much, its fence included.
	officeIndex atomic.Int64
	clockBase   time.Time
	kick        chan struct{} // asks the publisher to reconcile now

	// adminMu serialises the admin changes this node proposes as the
	// controller (admin.go): each decides from the image it changes, so
	// two APPENDs, or two growths of one topic, cannot lose one.
	adminMu sync.Mutex

	mu        sync.Mutex
	epoch     int64         // broker epoch; 0 until registered
	published chan struct{} // closed and replaced after every reconcile
	// answeredSent is when the newest heartbeat the controller answered
	// was sent, answeredIndex the controller's metadata index in that
	// answer; answered is closed and replaced at each answer
	// (SyncMetadata).
	answeredSent  time.Time
	answeredIndex int64
	answered      chan struct{}
	fatal         error

	stop     chan struct{}
	done     chan struct{} // closed when the cluster stopped (Close, or a fatal error)
	doneOnce sync.Once
	wg       sync.WaitGroup
}

// Open starts the quorum node and sets the engine's cluster hooks. The
// broker then starts its listeners and calls Start.
func Open(cfg Config, eng *engine.Engine) (*Cluster, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MismatchGrace <= 0 {
		cfg.MismatchGrace = DefaultMismatchGrace
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.DefaultReplicationFactor <= 0 {
		cfg.DefaultReplicationFactor = int16(standardReplicationFactor(len(cfg.Voters)))
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.BrokerOnlyGrace <= 0 {
		cfg.BrokerOnlyGrace = DefaultBrokerOnlyGrace
	}
	if cfg.LeaderImbalanceCheckInterval <= 0 {
		cfg.LeaderImbalanceCheckInterval = DefaultLeaderImbalanceCheckInterval
	}
	if cfg.LeaderImbalancePercent <= 0 {
		cfg.LeaderImbalancePercent = DefaultLeaderImbalancePercent
	}
	if cfg.ReplicaLagMax <= 0 {
		cfg.ReplicaLagMax = DefaultReplicaLagMax
	}
	if cfg.TxnStatePartitions <= 0 {
		cfg.TxnStatePartitions = DefaultTxnStatePartitions
	}
	if cfg.OffsetsPartitions <= 0 {
		cfg.OffsetsPartitions = DefaultOffsetsPartitions
	}
	node, err := quorum.Open(quorum.Config{
		NodeID: cfg.NodeID, Dir: filepath.Join(cfg.DataDir, MetadataDir), Voters: cfg.Voters,
		BindAddr: cfg.ControllerAddr, Listener: cfg.RaftListener, AdvertiseHost: cfg.AdvertiseHost,
		Logger: cfg.Logger, Dial: quorum.DialFunc(cfg.Dial), TLS: cfg.RaftTLS,
		HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout, LeaderLeaseTimeout: cfg.LeaderLeaseTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger.With("component", "cluster"), node: node, eng: eng,
		published: make(chan struct{}), answered: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1),
		clockBase: time.Now()}
	c.fetch.c = c
	if cfg.ReplicationThrottle > 0 {
		c.fetch.throttle = newByteBucket(cfg.ReplicationThrottle, time.Now)
	}
	c.peers = peerwire.New(cfg.Dial, cfg.KafkaTLS)
	c.transport, c.replicas, c.txns = c.peers, c.peers, c.peers
	if cfg.Transport != nil {
		c.transport = cfg.Transport
	}
	if c.sec, err = newSecurity(c); err != nil {
		node.Shutdown()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	for _, v := range cfg.Voters {
		c.voters = append(c.voters, v.ID)
	}
	eng.SetClusterHooks(engine.ClusterHooks{
		AutoCreateTopic:     c.autoCreateTopic,
		AllocateProducerIDs: c.allocateProducerIDs,
		VerifyTxn:           c.verifyTxn,
		WriteTxnMarkers:     c.writeTxnMarkers,
		MayLead:             c.MayLead,
		ShareStates:         shareRemote{c},
		ShareMember:         c.shareMember,
		SetRemoteLog:        c.setRemoteLog,
		GroupConfigs:        func(group string) map[string]string { return c.Image().GroupConfigs()[group] },
		SyncMetadata:        c.SyncMetadata,
	})
	return c, nil
}

// Start begins registration and the publisher, advertising listeners
// (named by their security protocol, addresses host:port) to clients. The
// first is the inter-broker listener: replica fetchers and forwarded
// requests of the other brokers connect to it.
func (c *Cluster) Start(listeners []metadata.Listener) {
	c.listeners = listeners
	c.wg.Add(3)
	go c.run()
	go c.controlLoop()
	go c.isrLoop()
}

// Done is closed once the cluster stopped: after Close, or on a fatal
// error (Err).
func (c *Cluster) Done() <-chan struct{} { return c.done }

// Err is why the cluster stopped by itself, or nil.
func (c *Cluster) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

func (c *Cluster) fail(err error) {
	c.mu.Lock()
	if c.fatal == nil {
		c.fatal = err
	}
	c.mu.Unlock()
	c.log.Error("cluster mode stopped", "err", err)
	c.doneOnce.Do(func() { close(c.done) })
}

// Close stops the publisher and the quorum node. The engine is the
// caller's to close afterwards.
func (c *Cluster) Close() error {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.wg.Wait()
	c.fetch.close()
	c.peers.Close()
	err := c.node.Shutdown()
	c.doneOnce.Do(func() { close(c.done) })
	return err
}

// Image is this broker's view of the cluster metadata.
func (c *Cluster) Image() *metadata.Image { return c.node.Image() }

// Node is the quorum node (tests, diagnostics).
func (c *Cluster) Node() *quorum.Node { return c.node }

// ControllerID is the Raft leader's id, -1 when none is known.
func (c *Cluster) ControllerID() int32 {
	id, _ := c.node.Leader()
	return id
}

// CoordinatorFor is the broker coordinating group: the leader of its
// partition of the cluster's __consumer_offsets; -1 while the topic does
// not exist or that partition has no leader.
func (c *Cluster) CoordinatorFor(group string) int32 {
	t := c.Image().Topic(engine.OffsetsTopic)
	if t == nil || len(t.Partitions) == 0 {
		return -1
	}
	return t.Partitions[engine.OffsetsPartitionFor(group, len(t.Partitions))].Leader
}

// TxnCoordinatorFor is the broker coordinating transactional id: the
// leader of its partition of the cluster's __transaction_state; -1 while
// the topic does not exist or that partition has no leader.
func (c *Cluster) TxnCoordinatorFor(id string) int32 {
	t := c.Image().Topic(engine.TransactionStateTopic)
	if t == nil || len(t.Partitions) == 0 {
		return -1
	}
	return t.Partitions[engine.TxnPartitionFor(id, len(t.Partitions))].Leader
}

// CaughtUp reports whether this broker's image holds everything committed
// before its registration (it registered and caught up).
func (c *Cluster) CaughtUp() bool { return c.caughtUp.Load() }

// SyncMetadata waits until this broker's image holds everything the
// controller had committed at since: the controller answers a heartbeat
// sent at since or later with its metadata index, and this broker's
// image reaches it (within a heartbeat interval, a round trip and the
// metadata's way here). Calls with the same since share one heartbeat.
// It returns ctx's error if that does not happen in time, or an error
// once the cluster stops. A change an admin request was told is
// committed before since, such as a group's share.auto.offset.reset, is
// then in the image.
func (c *Cluster) SyncMetadata(ctx context.Context, since time.Time) error {
	for {
		c.mu.Lock()
		sent, index, ch := c.answeredSent, c.answeredIndex, c.answered
		c.mu.Unlock()
		if !sent.Before(since) {
			if _, err := c.node.WaitIndex(ctx, uint64(index)); err != nil {
				return fmt.Errorf("cluster: the metadata did not reach the controller's index %d: %w", index, err)
			}
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("cluster: no heartbeat answered by the controller since %s: %w", since.Format(time.RFC3339Nano), ctx.Err())
		case <-c.stop:
			return errors.New("cluster: stopped")
		}
	}
}

// controllerIndex is the metadata index a heartbeat's answer says the
// controller had (sentIndex: this broker's when it sent the heartbeat),
// false when it says nothing: the index it carries, or, from a
// controller that does not send one (an older version, during a rolling
// upgrade), this broker's own when the answer is CaughtUp (the
// controller had no more).
func controllerIndex(ans peer.HeartbeatAnswer, sentIndex int64) (int64, bool) {
	switch {
	case ans.MetadataIndex > 0:
		return ans.MetadataIndex, true
	case ans.CaughtUp:
		return sentIndex, true
	}
	return 0, false
}

// markAnswered records the controller's answer, with its metadata index,
// to a heartbeat sent at sent.
func (c *Cluster) markAnswered(sent time.Time, index int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sent.After(c.answeredSent) {
		c.answeredSent, c.answeredIndex = sent, index
	}
	close(c.answered)
	c.answered = make(chan struct{})
}

// BrokerEpoch is this broker's registration epoch, 0 before it registered.
func (c *Cluster) BrokerEpoch() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// run is the broker's life in the cluster: register, catch up, reconcile,
// unfence, then reconcile after every new image.
func (c *Cluster) run() {
	defer c.wg.Done()
	sub := c.node.FSM().Subscribe()
	defer sub.Close()
	epoch, ok := c.register()
	if !ok {
		return
	}
	ctx, cancel := c.stopContext()
	_, err := c.node.WaitIndex(ctx, uint64(epoch))
	cancel()
	if err != nil {
		return // stopping
	}
	c.mu.Lock()
	c.epoch = epoch
	c.mu.Unlock()
	c.caughtUp.Store(true)
	c.log.Info("registered with the controller", "broker_epoch", epoch)
	retry := !c.reconcile()
	// Heartbeats start once the engine follows the image: the first one
	// asks to be unfenced.
	c.wg.Add(1)
	go c.heartbeatLoop(epoch)
	for {
		var tick <-chan time.Time
		if retry {
			tick = time.After(time.Second)
		}
		select {
		case <-c.stop:
			return
		case <-c.node.Done():
			if err := c.node.Err(); err != nil {
				c.fail(fmt.Errorf("cluster: the metadata quorum node stopped: %w", err))
			}
			return
		case <-sub.C():
		case <-c.kick:
		case <-tick:
		}
		retry = !c.reconcile()
	}
}

// stopContext is a context cancelled by Close.
func (c *Cluster) stopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// register registers this broker with a fresh incarnation id until the
// controller accepts it; false when stopping. A node whose handshakes keep
// being refused (PeerMismatch) for MismatchGrace stops with that error.
func (c *Cluster) register() (int64, bool) {
	reg := peer.Registration{BrokerID: c.cfg.NodeID, Incarnation: metadata.NewUUID(), Rack: c.cfg.Rack}
	for _, ln := range c.listeners {
		host, port, err := splitHostPort(ln.Addr)
		if err != nil {
			c.fail(fmt.Errorf("cluster: advertised address %q of listener %s: %w", ln.Addr, ln.Name, err))
			return 0, false
		}
		// As the controller records it, whichever way it arrives.
		reg.Listeners = append(reg.Listeners, metadata.Listener{Name: ln.Name, Addr: net.JoinHostPort(host, strconv.Itoa(port))})
	}
	var mismatchSince time.Time
	var lastErr error
	for attempt := 0; ; attempt++ {
		if mm := c.node.PeerMismatch(); mm != nil && c.ControllerID() < 0 {
			if mismatchSince.IsZero() {
				mismatchSince = time.Now()
			} else if time.Since(mismatchSince) > c.cfg.MismatchGrace {
				c.fail(fmt.Errorf("cluster: the other controllers refuse this node, so it cannot join the metadata quorum: %w", mm))
				return 0, false
			}
		} else {
			mismatchSince = time.Time{}
		}
		reg.ClusterID = c.node.ClusterID()
		sctx, stop := c.stopContext()
		ctx, cancel := context.WithTimeout(sctx, 10*time.Second)
		var epoch int64
		err := c.toController(func() (err error) {
			epoch, err = c.AnswerRegistration(ctx, reg)
			return err
		}, func(addr string) (err error) {
			epoch, err = c.transport.Register(ctx, addr, reg)
			return err
		})
		cancel()
		stop()
		if err == nil {
			return epoch, true
		}
		if errors.Is(err, kerr.InvalidRegistration) || errors.Is(err, kerr.InconsistentClusterID) {
			c.fail(fmt.Errorf("cluster: the controller refused this broker's registration: %w", err))
			return 0, false
		}
		if lastErr == nil || lastErr.Error() != err.Error() || attempt%50 == 0 {
			c.log.Info("waiting to register with the controller", "err", err, "controller", c.ControllerID())
		}
		lastErr = err
		select {
		case <-c.stop:
			return 0, false
		case <-c.node.Done():
			c.fail(fmt.Errorf("cluster: the metadata quorum node stopped: %w", errors.Join(c.node.Err(), quorum.ErrStopped)))
			return 0, false
		case <-time.After(retryBackoff):
		}
	}
}

// heartbeatLoop keeps this broker's session with the controller alive,
// every HeartbeatInterval; the first heartbeats unfence it (the
// controller does so once the broker's metadata has caught up with its
// registration).
func (c *Cluster) heartbeatLoop(epoch int64) {
	defer c.wg.Done()
	fenced := true
	// A broker that stepped down does not ask to be fenced (WantFence):
	// its heartbeats fail just as much when the controller died, and a
	// new controller that fenced every broker asking it would leave the
	// ISRs to the old controller alone (make chaos found that). A broker
	// that can send but not receive is fenced anyway: its connections
	// cannot be re-established, so the controller stops hearing it.
	var lastErr string
	lastOK := time.Now()
	wait := time.NewTimer(c.cfg.HeartbeatInterval)
	defer wait.Stop()
	for {
		// Silent for a session (a pause ends here too): step down before
		// the answer to this heartbeat can renew anything.
		c.stepDownIfSilent(lastOK)
		hb := peer.Heartbeat{BrokerID: c.cfg.NodeID, BrokerEpoch: epoch, MetadataOffset: int64(c.Image().Index())}
		sctx, stop := c.stopContext()
		ctx, cancel := context.WithTimeout(sctx, max(2*c.cfg.HeartbeatInterval, time.Second))
		sent := time.Now()
		// The controller's own broker takes short leases (and renews
		// them twice as often): a controller that dies is then fenced
		// by its successor a third of a session after the election
		// (controlLoop).
		lease := c.cfg.SessionTimeout
		controller := c.node.IsLeader()
		var resp peer.HeartbeatAnswer
		err := c.toController(func() (err error) {
			resp, err = c.AnswerHeartbeat(ctx, hb)
			return err
		}, func(addr string) (err error) {
			resp, err = c.transport.Heartbeat(ctx, addr, hb)
			return err
		})
		cancel()
		stop()
		if controller = controller || c.node.IsLeader(); controller {
			lease = controllerLease(c.cfg.SessionTimeout)
		}
		if err == nil {
			lastOK = sent
			if index, ok := controllerIndex(resp, hb.MetadataOffset); ok {
				c.markAnswered(sent, index)
			}
			if !resp.Fenced {
				sentAt := int64(sent.Sub(c.clockBase))
				c.leaseUntil.Store(sentAt + int64(lease))
				// This node began to take office after it sent
				// the heartbeat: a controller's lease, whoever
				// answered (takeOffice cut the lease before,
				// this store must not lengthen it again).
				if c.officeAt.Load() >= sentAt {
					c.capLease(sentAt + int64(controllerLease(c.cfg.SessionTimeout)))
				}
			}
			// A broker that stepped down leads again only once the
			// controller has it unfenced and its image holds
			// everything the controller had when it answered: every
			// leadership the controller moved while this broker was
			// gone is then in the image, so it never takes back, from
			// a stale image, a leadership that moved to a newer epoch.
			if c.selfFenced.Load() && !resp.Fenced && resp.CaughtUp {
				c.selfFenced.Store(false)
				c.log.Info("heartbeats get through again and the metadata has caught up with the controller's: leading what it says", "broker_epoch", epoch)
				c.kickReconcile()
			}
		} else {
			c.stepDownIfSilent(lastOK)
		}
		switch {
		case err != nil:
			// Logged once per kind of refusal (a transport error's
			// text changes with every connection).
			msg := err.Error()
			var ke *kerr.Error
			if errors.As(err, &ke) {
				msg = ke.Message
			}
			if msg != lastErr {
				c.log.Info("heartbeat not accepted", "err", err, "controller", c.ControllerID())
				lastErr = msg
			}
		case resp.Fenced != fenced:
			fenced = resp.Fenced
			lastErr = ""
			if fenced {
				c.log.Warn("fenced by the controller", "broker_epoch", epoch)
			} else {
				c.log.Info("unfenced: serving as a cluster member", "broker_epoch", epoch)
			}
		default:
			lastErr = ""
		}
		next := c.cfg.HeartbeatInterval
		if controller {
			next /= 2
		}
		wait.Reset(max(next-time.Since(sent), 0))
		if !c.await(wait.C) {
			return
		}
	}
}

// standardReplicationFactor is the copies a partition gets unless told
// otherwise (the default replication factor, the internal topics):
// three, as in Kafka, or every voter on a smaller cluster.
func standardReplicationFactor(voters int) int { return min(3, voters) }

// controllerLease is the lease the controller's own broker takes: a third
// of a session. Its successor, which finds it named in the image's
// TakeOffice, fences it that long after taking office (controlLoop)
// instead of a whole session after: no lease it held outlives that.
func controllerLease(session time.Duration) time.Duration { return session / 3 }

// capLease shortens the lease to end by until (same clock as
// leaseUntil); it never lengthens it.
func (c *Cluster) capLease(until int64) {
	for {
		cur := c.leaseUntil.Load()
		if cur <= until || c.leaseUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// stepDownIfSilent steps down from partition leadership when no
// heartbeat the controller accepted was sent for a session timeout
// (lastOK): the controller fences a broker it has not heard from for a
// session, so this one's leaderships are moving or moved. Clients then go
// to the new leaders instead of waiting here for acks that cannot come.
func (c *Cluster) stepDownIfSilent(lastOK time.Time) {
	silent := time.Since(lastOK)
	if silent <= c.cfg.SessionTimeout || c.selfFenced.Load() {
		return
	}
	c.selfFenced.Store(true)
	c.log.Warn("no heartbeat answer for a session timeout: stepping down from partition leadership",
		"silent_for", silent.Round(time.Millisecond), "session_timeout", c.cfg.SessionTimeout)
	c.kickReconcile() // the publisher makes its leaders leaderless here
}

// MayLead reports whether this broker may append as a partition leader:
// it has not stepped down, and its lease holds (the controller accepted,
// unfenced, a heartbeat it sent less than a session timeout ago). The
// engine checks it on every leader append, so a broker that was paused or
// cut off stops acknowledging at once, before its publisher has caught
// up, and before the controller can have elected another leader.
func (c *Cluster) MayLead() bool {
	return !c.selfFenced.Load() && int64(time.Since(c.clockBase)) < c.leaseUntil.Load()
}

// kickReconcile asks the publisher to reconcile now.
func (c *Cluster) kickReconcile() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// isrLoop asks the controller for the ISR changes this broker's leaders
// want (engine.Partition.ISRChange): followers that lag leave, followers
// that caught up join.
func (c *Cluster) isrLoop() {
	defer c.wg.Done()
	tick := time.NewTicker(min(isrTick, c.cfg.ReplicaLagMax/4))
	defer tick.Stop()
	for c.await(tick.C) {
		c.askISRChanges()
	}
}

// await waits for a value on ch (a timer's or a ticker's): false, at
// once, when the cluster stops or its quorum node does.
func (c *Cluster) await(ch <-chan time.Time) bool {
	select {
	case <-c.stop:
		return false
	case <-c.node.Done():
		return false
	case <-ch:
		return true
	}
}

func (c *Cluster) askISRChanges() {
	epoch := c.BrokerEpoch()
	if epoch == 0 {
		return
	}
	type asked struct {
		p   *engine.Partition
		chg *engine.ISRChangeRequest
	}
	var all []asked
	req := peer.AlterPartition{BrokerID: c.cfg.NodeID, BrokerEpoch: epoch}
	for _, t := range c.eng.Topics() {
		for _, p := range t.Partitions() {
			if !p.Replicated() || !p.Hosted() || p.Role() != engine.RoleLeader {
				continue
			}
			chg := p.ISRChange(c.cfg.ReplicaLagMax)
			if chg == nil {
				continue
			}
			req.Changes = append(req.Changes, peer.ISRChange{TopicID: t.ID, Partition: p.Index,
				LeaderEpoch: chg.LeaderEpoch, PartitionEpoch: chg.PartitionEpoch, ISR: chg.ISR})
			all = append(all, asked{p, chg})
			c.log.Info("asking the controller to change an ISR", "partition", p.String(), "isr", chg.ISR, "shrink", chg.Shrink, "expand", chg.Expand)
		}
	}
	if len(all) == 0 {
		return
	}
	sctx, stop := c.stopContext()
	defer stop()
	ctx, cancel := context.WithTimeout(sctx, 5*time.Second)
	defer cancel()
	var answers []peer.ISRChangeAnswer
	err := c.toController(func() (err error) {
		answers, err = c.AnswerAlterPartition(ctx, req)
		return err
	}, func(addr string) (err error) {
		answers, err = c.transport.AlterPartition(ctx, addr, req)
		return err
	})
	stats := c.eng.EngineStats()
	for i, a := range all {
		aerr := err
		if aerr == nil && i < len(answers) {
			aerr = answers[i].Err
		}
		if aerr != nil {
			if uncertain(aerr) {
				// It may have committed: its members keep counting
				// for the high watermark until the image tells.
				c.log.Info("ISR change not answered", "partition", a.p.String(), "err", aerr)
				a.p.ISRChangeUncertain(c.cfg.ReplicaLagMax)
				continue
			}
			c.log.Info("ISR change refused", "partition", a.p.String(), "err", aerr)
			a.p.ISRChangeDone()
			continue
		}
		if len(a.chg.Shrink) > 0 {
			stats.ISRShrinks.Add(1)
		}
		if len(a.chg.Expand) > 0 {
			stats.ISRExpands.Add(1)
		}
	}
}

// uncertain reports whether a request to the controller that failed with
// err may still have committed: it was lost in transit, the controller
// changed, or its proposal's fate is unknown. A refusal the controller
// decided (a stale epoch, an ineligible member) is certain.
func uncertain(err error) bool {
	var ke *kerr.Error
	return !errors.As(err, &ke) || errors.Is(err, kerr.NotController) || errors.Is(err, kerr.RequestTimedOut) || errors.Is(err, kerr.UnknownServerError)
}

// reconcile makes the engine's topics follow the image: a topic deleted
// between the last reconciled image and this one is deleted; a local
// topic no image it has seen knows (by id) becomes stray (its logs
// renamed, never deleted); new topics and partitions are created (with
// logs only for the partitions this broker holds); topic config
// overrides and the cluster-wide broker defaults follow. It reports
// whether everything succeeded.
func (c *Cluster) reconcile() bool {
	img := c.Image()
	self := c.cfg.NodeID
	ok := true
	for _, t := range c.eng.Topics() {
		id := metadata.UUID(t.ID)
		if it := img.TopicByID(id); it != nil && it.Name == t.Name {
			continue
		}
		// Deleted through the quorum while this broker watched: delete.
		// Unknown to every image it has seen (deleted while it was
		// down, or from another cluster or mode): keep, renamed -stray.
		var err error
		var last *metadata.Topic
		if c.last != nil {
			last = c.last.TopicByID(id)
		}
		if it := last; it != nil {
			// Tiered storage: the last manifests this broker saw are
			// what the deletion deletes from the store.
			for i := range it.Partitions {
				if p := t.Partition(int32(i)); p != nil && p.Hosted() {
					p.SetRemoteLog(it.Partitions[i].RemoteLogVersion, it.Partitions[i].RemoteLog)
				}
			}
			err = c.eng.DeleteTopic(t.Name)
		} else {
			err = c.eng.StrayTopic(t.Name)
		}
		if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			c.log.Error("cannot remove a topic the cluster metadata does not have", "topic", t.Name, "err", err)
			ok = false
		}
	}
	for _, it := range img.Topics() {
		var notHosted []int32
		for i := range it.Partitions {
			if metadata.RoleOf(&it.Partitions[i], self) == metadata.NotReplica {
				notHosted = append(notHosted, int32(i))
			}
		}
		et := c.eng.Topic(it.Name)
		if et == nil {
			_, err := c.eng.CreateTopic(engine.CreateTopicRequest{Name: it.Name, ID: engine.TopicID(it.ID), Internal: it.Internal,
				Partitions: int32(len(it.Partitions)), ReplicationFactor: -1, Configs: maps.Clone(it.Configs), NotHosted: notHosted})
			if err != nil {
				c.log.Error("cannot create a topic of the cluster metadata", "topic", it.Name, "err", err)
				ok = false
			}
			continue
		}
		if n := len(et.Partitions()); n < len(it.Partitions) {
			if err := c.eng.AddPartitions(it.Name, int32(len(it.Partitions)), notHosted); err != nil {
				c.log.Error("cannot add partitions of the cluster metadata", "topic", it.Name, "err", err)
				ok = false
			}
		}
		if !c.rehost(img, it) {
			ok = false
		}
		if have := et.Config().Overrides(); !maps.Equal(have, it.Configs) {
			set := map[string]*string{}
			for k, v := range it.Configs {
				set[k] = &v
			}
			if err := c.eng.AlterTopicConfig(it.Name, set, true, false); err != nil {
				c.log.Error("cannot apply a topic's configs from the cluster metadata", "topic", it.Name, "err", err)
				ok = false
			}
		}
	}
	if !c.reconcileReplicas(img) {
		ok = false
	}
	if want := img.GroupConfigs(); !maps.EqualFunc(want, c.eng.AllGroupConfigs(), maps.Equal[map[string]string]) {
		if err := c.eng.ReplaceGroupConfigs(want); err != nil {
			c.log.Error("cannot apply the group configs", "err", err)
			ok = false
		}
	}
	if want, have := img.BrokerConfigs(), c.eng.DynamicBrokerConfigs(); !maps.Equal(want, have) {
		set := map[string]*string{}
		for k := range have {
			set[k] = nil
		}
		for k, v := range want {
			set[k] = &v
		}
		if err := c.eng.AlterBrokerDefaults(set, false); err != nil {
			c.log.Error("cannot apply the cluster-wide broker defaults", "err", err)
			ok = false
		}
	}
	c.last = img
	c.mu.Lock()
	close(c.published)
	c.published = make(chan struct{})
	c.mu.Unlock()
	return ok
}

// reconcileReplicas hands every hosted partition its role, leader, epochs
// and ISR from the image, and the replica fetchers the partitions this
// broker follows.
func (c *Cluster) reconcileReplicas(img *metadata.Image) bool {
	self := c.cfg.NodeID
	b, registered := img.Broker(self)
	selfLive := registered && !b.Fenced && b.Epoch == c.BrokerEpoch()
	ok := true
	want := map[*engine.Partition]followed{}
	for _, it := range img.Topics() {
		et := c.eng.Topic(it.Name)
		if et == nil || engine.TopicID(it.ID) != et.ID {
			continue
		}
		for i := range it.Partitions {
			ip := &it.Partitions[i]
			p := et.Partition(int32(i))
			if p == nil || !p.Hosted() || !p.Replicated() {
				continue
			}
			st := engine.ReplicaState{Leader: ip.Leader, LeaderEpoch: ip.LeaderEpoch, PartitionEpoch: ip.PartitionEpoch,
				Replicas: ip.Replicas, ISR: ip.ISR}
			switch metadata.RoleOf(ip, self) {
			case metadata.Leader:
				// Only a live member leads: not while stepped down, and
				// not while the image has this broker fenced (registered
				// again after a restart, or fenced by the controller,
				// which is moving its leaderships).
				if !c.selfFenced.Load() && selfLive {
					st.Role = engine.RoleLeader
				}
			case metadata.Follower:
				if ip.Leader != metadata.NoLeader {
					st.Role = engine.RoleFollower
				}
			}
			// Before the role: a new leader copies on from the manifest
			// its last leader wrote (the image has all of it, applied
			// before the leadership moved).
			p.SetRemoteLog(ip.RemoteLogVersion, ip.RemoteLog)
			cur := p.ReplicaState()
			if cur.Role != st.Role || cur.Leader != st.Leader || cur.LeaderEpoch != st.LeaderEpoch ||
				cur.PartitionEpoch != st.PartitionEpoch || !slices.Equal(cur.ISR, st.ISR) || !slices.Equal(cur.Replicas, st.Replicas) {
				if err := p.SetReplicaState(st); err != nil {
					c.log.Error("cannot take a partition's replica role", "partition", p.String(), "role", st.Role, "err", err)
					ok = false
					continue
				}
			}
			if co := c.coordinatorOf(it); co != nil && !c.followCoordinator(co, it.Name, int32(i), cur, st) {
				ok = false
			}
			if st.Role == engine.RoleFollower {
				want[p] = followed{p: p, topic: it.Name, leader: ip.Leader, leaderEpoch: ip.LeaderEpoch,
					throttled: slices.Contains(ip.AddingReplicas, self) && !slices.Contains(ip.ISR, self)}
			}
		}
	}
	c.fetch.update(want)
	return ok
}

// rehost makes this broker host exactly the partitions of topic it that
// the image gives it a replica of (a reassignment adds and removes
// replicas): a new replica gets an empty log for the fetcher to fill; a
// replica moved away while this broker watched (the last reconciled
// image had it here) is deleted, one the image dropped before this broker
// saw it (moved while it was down) is kept, renamed *-stray. It reports
// success.
func (c *Cluster) rehost(img *metadata.Image, it *metadata.Topic) bool {
	self := c.cfg.NodeID
	et := c.eng.Topic(it.Name)
	if et == nil || engine.TopicID(it.ID) != et.ID {
		return true
	}
	var before *metadata.Topic
	if c.last != nil {
		before = c.last.TopicByID(it.ID)
	}
	ok := true
	for _, p := range et.Partitions() {
		if int(p.Index) >= len(it.Partitions) {
			break
		}
		replica := metadata.RoleOf(&it.Partitions[p.Index], self) != metadata.NotReplica
		switch {
		case replica && !p.Hosted():
			if err := c.eng.HostPartition(it.Name, p.Index); err != nil {
				c.log.Error("cannot host a new replica", "partition", p.String(), "err", err)
				ok = false
			}
		case !replica && p.Hosted():
			watched := before != nil && int(p.Index) < len(before.Partitions) &&
				metadata.RoleOf(&before.Partitions[p.Index], self) != metadata.NotReplica
			if co := c.coordinatorOf(it); co != nil && co.Loaded(p.Index) {
				co.UnloadPartition(p.Index)
			}
			if err := c.eng.DropPartition(it.Name, p.Index, !watched); err != nil {
				c.log.Error("cannot remove a replica moved away", "partition", p.String(), "err", err)
				ok = false
			}
		}
	}
	return ok
}

// coordinatorOf is the coordinator whose state lives in topic it's
// partitions, or nil.
func (c *Cluster) coordinatorOf(it *metadata.Topic) partitionLoader {
	if !it.Internal {
		return nil
	}
	switch it.Name {
	case engine.OffsetsTopic:
		return c.eng.Coordinator()
	case engine.TransactionStateTopic:
		return c.eng.Transactions()
	case engine.ShareStateTopic:
		return c.eng.ShareStates()
	}
	return nil
}

// partitionLoader is a coordinator whose state lives in the partitions of
// an internal topic and is served by their leaders: the group
// coordinator (__consumer_offsets) and the transaction coordinator
// (__transaction_state).
type partitionLoader interface {
	Loaded(i int32) bool
	LoadPartition(i int32) error
	UnloadPartition(i int32)
}

// followCoordinator makes a coordinator follow the leadership of
// partition i of its internal topic: replay it at a new leader epoch (or
// until a replay succeeded), forget its state when the leadership moved
// away. It reports success.
func (c *Cluster) followCoordinator(co partitionLoader, topic string, i int32, cur, st engine.ReplicaState) bool {
	if st.Role != engine.RoleLeader {
		if co.Loaded(i) {
			co.UnloadPartition(i)
		}
		return true
	}
	if co.Loaded(i) && cur.Role == engine.RoleLeader && cur.LeaderEpoch == st.LeaderEpoch {
		return true
	}
	if err := co.LoadPartition(i); err != nil {
		c.log.Error("cannot load a coordinator's partition", "topic", topic, "partition", i, "err", err)
		return false
	}
	return true
}

// autoCreateTopic creates name through the controller (the engine hook)
// and waits until this broker's engine has it.
func (c *Cluster) autoCreateTopic(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), autoCreateWait)
	defer cancel()
	if err := c.createTopicAnywhere(ctx, name); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return err
	}
	for {
		c.mu.Lock()
		ch := c.published
		c.mu.Unlock()
		if c.eng.Topic(name) != nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: topic %q was created but this broker has not caught up yet", kerr.LeaderNotAvailable, name)
		}
	}
}

// createTopicAnywhere creates name with the defaults: here on the
// controller, through the controller elsewhere.
func (c *Cluster) createTopicAnywhere(ctx context.Context, name string) error {
	nt := admin.NewTopic{Name: name, Partitions: -1, ReplicationFactor: -1}
	if err := nt.Check(); err != nil {
		return err
	}
	return c.toController(func() error {
		_, err := c.CreateTopic(ctx, nt, false)
		return err
	}, func(addr string) error {
		return c.transport.CreateTopic(ctx, addr, name)
	})
}

// allocateProducerIDs takes a block of producer ids from the controller
// (the engine hook).
func (c *Cluster) allocateProducerIDs() (int64, int32, error) {
	epoch := c.BrokerEpoch()
	if epoch == 0 {
		return 0, 0, fmt.Errorf("%w: this broker has not registered with the controller yet", kerr.CoordinatorNotAvailable)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ids peer.ProducerIDs
	err := c.toController(func() (err error) {
		ids, err = c.AnswerAllocateProducerIDs(ctx, c.cfg.NodeID, epoch)
		return err
	}, func(addr string) (err error) {
		ids, err = c.transport.AllocateProducerIDs(ctx, addr, c.cfg.NodeID, epoch)
		return err
	})
	if err != nil {
		if errors.Is(err, kerr.NotController) {
			// Retriable for an InitProducerId client.
			err = fmt.Errorf("%w: %w", kerr.CoordinatorNotAvailable, err)
		}
		return 0, 0, fmt.Errorf("allocate producer ids: %w", err)
	}
	return ids.First, ids.Count, nil
}

// setRemoteLog is engine.ClusterHooks.SetRemoteLog: the leader's new
// remote log manifest of a partition, through the controller.
func (c *Cluster) setRemoteLog(topic engine.TopicID, partition, leaderEpoch int32, version int64, manifest []byte) error {
	epoch := c.BrokerEpoch()
	if epoch == 0 {
		return fmt.Errorf("%w: this broker has not registered with the controller yet", kerr.NotLeaderForPartition)
	}
	if len(manifest) > metadata.MaxRemoteLog {
		// Refused by the controller anyway: not sent into the log.
		return fmt.Errorf("%w: a remote log manifest of %d bytes, more than the metadata takes (%d): copies of this partition stop", kerr.InvalidRequest, len(manifest), metadata.MaxRemoteLog)
	}
	rl := peer.RemoteLog{BrokerID: c.cfg.NodeID, BrokerEpoch: epoch, TopicID: topic, Partition: partition,
		LeaderEpoch: leaderEpoch, Version: version, Manifest: manifest}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.toController(func() error {
		return c.AnswerSetRemoteLog(ctx, rl)
	}, func(addr string) error {
		return c.transport.SetRemoteLog(ctx, addr, rl)
	})
}

// AnswerSetRemoteLog writes a partition leader's remote log manifest
// (controller only): the manifest must decode and name the partition's
// topic; the record's Apply checks the leader, its epochs and the
// version.
func (c *Cluster) AnswerSetRemoteLog(ctx context.Context, r peer.RemoteLog) error {
	if err := c.notController(); err != nil {
		return err
	}
	if len(r.Manifest) > metadata.MaxRemoteLog {
		return fmt.Errorf("%w: a remote log manifest of %d bytes, more than %d", kerr.InvalidRequest, len(r.Manifest), metadata.MaxRemoteLog)
	}
	m, err := tiered.DecodeManifest(r.Manifest)
	if err != nil {
		return fmt.Errorf("%w: %w", kerr.InvalidRequest, err)
	}
	if m.TopicID != engine.TopicID(r.TopicID).String() {
		return fmt.Errorf("%w: the manifest names topic id %q", kerr.InvalidRequest, m.TopicID)
	}
	_, err = c.propose(ctx, metadata.SetRemoteLog{TopicID: metadata.UUID(r.TopicID), Partition: r.Partition,
		Requester: metadata.BrokerEpoch{ID: r.BrokerID, Epoch: r.BrokerEpoch}, LeaderEpoch: r.LeaderEpoch,
		Version: r.Version, Manifest: r.Manifest})
	return err
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, port, nil
}

// Peers is this broker's client of the other brokers' Kafka listeners
// (netio forwards admin requests to the controller with it).
func (c *Cluster) Peers() *peerwire.Client { return c.peers }
