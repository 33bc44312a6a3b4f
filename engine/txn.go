package engine

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/wal/batch"
)

// TxnCoordinator is the transaction coordinator: it owns every
// transactional id's state (producer id and epoch, the transaction's
// partitions and groups, its phase) and keeps it in the internal
// compacted topic __transaction_state, in Kafka's record formats (kmsg
// TxnMetadataKey/Value), each change written and fdatasync'ed before it
// is answered and replayed into memory at start.
//
// A transaction goes Empty → Ongoing (AddPartitionsToTxn,
// AddOffsetsToTxn) → PrepareCommit or PrepareAbort (EndTxn, a timeout, a
// fencing InitProducerId) → the markers are written to every partition of
// the transaction → CompleteCommit or CompleteAbort. The Prepare record
// is the decision: a coordinator that restarts finishes a prepared
// transaction (writes its markers again; a second marker changes
// nothing), and a background pass retries one whose markers failed.
//
// In cluster mode __transaction_state is the cluster's (created by the
// controller, replicated like any topic): a transactional id belongs to
// its partition TxnPartitionFor(id), and the leader of that partition is
// its coordinator. The publisher loads a partition's ids when this broker
// becomes its leader (LoadPartition) and forgets them when it stops
// (UnloadPartition); the other ids answer NOT_COORDINATOR. Records are
// written with acks=all, so an answer means the record is on every
// in-sync replica. Markers for partitions led elsewhere go to their
// leaders (ClusterHooks.WriteTxnMarkers).
//
// Concurrency: txnMu guards the id map; each transactional id's
// operations are serialised by its txnMeta.mu, held while its records and
// markers are written (never while the map's lock is held, never taken
// by a shard). The produce path checks a transactional batch against the
// id's published view (an atomic pointer), without locks.
type TxnCoordinator struct {
	eng *Engine
	cfg TxnConfig

	mu    sync.Mutex // guards txns, byPID, loaded
	txns  map[string]*txnMeta
	byPID map[int64]*txnMeta
	// loaded marks, in cluster mode, the __transaction_state partitions
	// whose ids this broker coordinates now; nil on a single node.
	loaded map[int32]bool
	// topic is __transaction_state: on a single node created by the
	// first InitProducerId with a transactional id (topicMu), as Kafka
	// creates it; in cluster mode the controller's, stored by the first
	// LoadPartition or write.
	topicMu sync.Mutex
	topic   atomic.Pointer[Topic]

	stop chan struct{}
	done chan struct{}

	// Counters for metrics.
	Commits  atomic.Int64
	Aborts   atomic.Int64
	Timeouts atomic.Int64
	Fenced   atomic.Int64
}

// TxnConfig configures the transaction coordinator.
type TxnConfig struct {
	// MaxTimeout bounds the transaction.timeout.ms a producer may ask
	// for (transaction.max.timeout.ms); 0: 15 minutes.
	MaxTimeout time.Duration
	// IDExpiration forgets a transactional id idle this long
	// (transactional.id.expiration.ms); 0: 7 days.
	IDExpiration time.Duration
	// CheckInterval is how often timed-out transactions are aborted
	// and expired ids forgotten; 0: 1 s.
	CheckInterval time.Duration
}

// TransactionStateTopic is the internal compacted topic holding the
// transaction coordinator's state.
const TransactionStateTopic = "__transaction_state"

// TxnState is a transaction's phase, numbered as Kafka's
// __transaction_state records number them.
type TxnState int8

// The phases.
const (
	TxnEmpty TxnState = iota
	TxnOngoing
	TxnPrepareCommit
	TxnPrepareAbort
	TxnCompleteCommit
	TxnCompleteAbort
	TxnDead
)

func (s TxnState) String() string {
	switch s {
	case TxnEmpty:
		return "Empty"
	case TxnOngoing:
		return "Ongoing"
	case TxnPrepareCommit:
		return "PrepareCommit"
	case TxnPrepareAbort:
		return "PrepareAbort"
	case TxnCompleteCommit:
		return "CompleteCommit"
	case TxnCompleteAbort:
		return "CompleteAbort"
	case TxnDead:
		return "Dead"
	}
	return fmt.Sprintf("TxnState(%d)", int8(s))
}

// ParseTxnState is String's inverse (ListTransactions' state filter).
func ParseTxnState(s string) (TxnState, bool) {
	for st := TxnEmpty; st <= TxnDead; st++ {
		if st.String() == s {
			return st, true
		}
	}
	return 0, false
}

// TopicPartition names one partition (group offsets, transactions).
type TopicPartition struct {
	Topic     string
	Partition int32
}

// txnMeta is one transactional id.
type txnMeta struct {
	id string
	mu sync.Mutex // serialises the id's operations (see TxnCoordinator)

	// Guarded by mu.
	pid     int64
	epoch   int16
	timeout time.Duration
	state   TxnState
	parts   map[TopicPartition]bool
	start   time.Time // when the open transaction began
	updated time.Time

	// gone: expired, or its partition unloaded (cluster mode), and
	// removed from the map.
	gone atomic.Bool

	view atomic.Pointer[txnView]
}

// txnView is what the produce path reads without locks.
type txnView struct {
	pid   int64
	epoch int16
	state TxnState
	parts map[TopicPartition]bool
}

func (m *txnMeta) publish() {
	m.view.Store(&txnView{pid: m.pid, epoch: m.epoch, state: m.state, parts: m.parts})
}

// TxnInfo describes a transactional id (DescribeTransactions,
// ListTransactions, the CLI).
type TxnInfo struct {
	ID         string
	ProducerID int64
	Epoch      int16
	State      TxnState
	Timeout    time.Duration
	Start      time.Time // zero unless a transaction is open or ending
	Partitions []TopicPartition
	// Err is why Describe cannot describe the id here (cluster mode:
	// NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS).
	Err error
}

func newTxnCoordinator(e *Engine, cfg TxnConfig) *TxnCoordinator {
	def := DefaultConfig().Transactions
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = def.MaxTimeout
	}
	if cfg.IDExpiration <= 0 {
		cfg.IDExpiration = def.IDExpiration
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = def.CheckInterval
	}
	c := &TxnCoordinator{eng: e, cfg: cfg, txns: map[string]*txnMeta{}, byPID: map[int64]*txnMeta{}}
	if e.cfg.Replicated {
		c.loaded = map[int32]bool{}
	}
	return c
}

// TxnPartitionFor is the __transaction_state partition of transactional
// id among n partitions (fnv-1a of the id, mod n, as for groups); the
// cluster's FindCoordinator names its leader.
func TxnPartitionFor(id string, n int) int32 { return OffsetsPartitionFor(id, n) }

// partitionOf is id's __transaction_state partition, nil while the topic
// does not exist.
func (c *TxnCoordinator) partitionOf(id string) *Partition {
	t := c.topic.Load()
	if t == nil {
		t = c.eng.Topic(TransactionStateTopic)
		if t == nil || !t.Internal {
			return nil
		}
	}
	ps := t.Partitions()
	if len(ps) == 0 {
		return nil
	}
	return ps[TxnPartitionFor(id, len(ps))]
}

// checkCoordinator refuses an id this broker does not coordinate
// (cluster mode): NOT_COORDINATOR when another broker leads its
// partition, COORDINATOR_LOAD_IN_PROGRESS until the partition is loaded.
func (c *TxnCoordinator) checkCoordinator(id string) error {
	if c.loaded == nil {
		return nil
	}
	return checkLeads(c.partitionOf(id), TransactionStateTopic, "transactional id "+strconv.Quote(id), c.Loaded)
}

// LoadPartition replays partition i of the cluster's __transaction_state
// after this broker became its leader (cluster mode; the publisher calls
// it): its ids are coordinated here from then on, and the background pass
// finishes the transactions it finds prepared.
func (c *TxnCoordinator) LoadPartition(i int32) error {
	t := c.eng.Topic(TransactionStateTopic)
	if t == nil || !t.Internal || t.Partition(i) == nil {
		return fmt.Errorf("engine: %s has no partition %d", TransactionStateTopic, i)
	}
	c.topic.Store(t)
	p := t.Partition(i)
	l, err := p.ReplicaLog()
	if err != nil {
		return err
	}
	c.UnloadPartition(i) // what a previous leadership left
	tab := txnTable{txns: map[string]*txnMeta{}, byPID: map[int64]*txnMeta{}}
	records := 0
	apply := func(h *batch.Header, b []byte) error {
		return forEachRecord(b, h, func(r *batch.Record) {
			if err := tab.apply(r.Key, r.Value); err != nil {
				c.eng.logger.Warn("skipping unreadable record in "+TransactionStateTopic, "offset", h.BaseOffset+int64(r.OffsetDelta), "err", err)
			}
			records++
		})
	}
	next, err := replayBatchesFrom(p, l, l.StartOffset(), apply)
	if err != nil {
		return err
	}
	// The tail (a record an operation of the previous leadership wrote
	// meanwhile) is replayed on the partition's shard, which stages
	// nothing until the ids are in place.
	err = p.shard.Call(func() error {
		if _, err := replayBatchesFrom(p, l, next, apply); err != nil {
			return err
		}
		c.mu.Lock()
		for id, m := range tab.txns {
			c.txns[id] = m
			c.byPID[m.pid] = m
		}
		c.loaded[i] = true
		c.mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	c.eng.logger.Info("coordinating the transactions of a transaction-state partition", "partition", p.String(), "records", records, "transactional_ids", len(tab.txns))
	return nil
}

// Loaded reports whether partition i of __transaction_state is loaded
// here (cluster mode).
func (c *TxnCoordinator) Loaded(i int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loaded[i]
}

// UnloadPartition forgets the ids of partition i of __transaction_state
// after this broker lost its leadership (cluster mode): they answer
// NOT_COORDINATOR; an operation still running on one fails its write.
func (c *TxnCoordinator) UnloadPartition(i int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.loaded[i]
	delete(c.loaded, i)
	n := 0
	if t := c.eng.Topic(TransactionStateTopic); t != nil {
		n = len(t.Partitions())
	}
	for id, m := range c.txns {
		if n > 0 && TxnPartitionFor(id, n) == i {
			m.gone.Store(true)
			delete(c.txns, id)
			if c.byPID[m.pid] == m {
				delete(c.byPID, m.pid)
			}
		}
	}
	if was {
		c.eng.logger.Info("no longer coordinating the transactions of a transaction-state partition", "partition", TransactionStateTopic+"-"+fmt.Sprint(i))
	}
}

// start replays __transaction_state (when it exists), finishes the
// transactions a stop left prepared, and starts the timeout pass.
func (c *TxnCoordinator) start() error {
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	t := c.eng.Topic(TransactionStateTopic)
	if t == nil || c.loaded != nil {
		// Cluster mode: the publisher loads the partitions it leads.
		go c.run()
		return nil
	}
	c.topic.Store(t)
	records := 0
	for _, p := range t.Partitions() {
		l, err := p.Log()
		if err != nil {
			return fmt.Errorf("%s is offline: %w", p, err)
		}
		tab := txnTable{txns: c.txns, byPID: c.byPID}
		err = replayBatches(p, l, func(h *batch.Header, b []byte) error {
			return forEachRecord(b, h, func(r *batch.Record) {
				if err := tab.apply(r.Key, r.Value); err != nil {
					c.eng.logger.Warn("skipping unreadable record in "+TransactionStateTopic, "offset", h.BaseOffset+int64(r.OffsetDelta), "err", err)
				}
				records++
			})
		})
		if err != nil {
			return err
		}
	}
	open := 0
	for _, m := range c.txns {
		m.mu.Lock()
		switch m.state {
		case TxnPrepareCommit, TxnPrepareAbort:
			if err := c.complete(m); err != nil {
				c.eng.logger.Warn("finishing a prepared transaction failed; retrying in the background", "transactional_id", m.id, "err", err)
			}
		case TxnOngoing:
			open++
		}
		m.mu.Unlock()
	}
	c.eng.logger.Info("loaded transactions", "records", records, "transactional_ids", len(c.txns), "open", open)
	go c.run()
	return nil
}

// stateTopic returns __transaction_state, creating it the first time.
func (c *TxnCoordinator) stateTopic() (*Topic, error) {
	if t := c.topic.Load(); t != nil {
		return t, nil
	}
	if c.loaded != nil {
		// Cluster mode: the controller creates it.
		if t := c.eng.Topic(TransactionStateTopic); t != nil && t.Internal {
			c.topic.Store(t)
			return t, nil
		}
		return nil, fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, TransactionStateTopic)
	}
	c.topicMu.Lock()
	defer c.topicMu.Unlock()
	if t := c.topic.Load(); t != nil {
		return t, nil
	}
	t := c.eng.Topic(TransactionStateTopic)
	if t == nil {
		var err error
		t, err = c.eng.CreateTopic(CreateTopicRequest{
			Name: TransactionStateTopic, Partitions: 1, ReplicationFactor: 1, Internal: true,
			Configs: map[string]string{"cleanup.policy": "compact", "segment.bytes": offsetsSegmentBytes},
		})
		if err != nil {
			return nil, fmt.Errorf("%w: create %s: %w", kerr.CoordinatorNotAvailable, TransactionStateTopic, err)
		}
	}
	c.topic.Store(t)
	return t, nil
}

// close stops the timeout pass (before the shards stop).
func (c *TxnCoordinator) close() {
	if c.stop == nil {
		return
	}
	close(c.stop)
	<-c.done
}

// txnTable is the id maps a replay fills: the coordinator's own at a
// single node's start, a fresh one for a partition being loaded.
type txnTable struct {
	txns  map[string]*txnMeta
	byPID map[int64]*txnMeta
}

// apply replays one __transaction_state record.
func (c *txnTable) apply(key, value []byte) error {
	var k kmsg.TxnMetadataKey
	if err := k.ReadFrom(key); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if k.Version != 0 {
		return fmt.Errorf("key version %d", k.Version)
	}
	if value == nil {
		if m := c.txns[k.TransactionalID]; m != nil {
			delete(c.byPID, m.pid)
			delete(c.txns, k.TransactionalID)
		}
		return nil
	}
	var v kmsg.TxnMetadataValue
	if err := v.ReadFrom(value); err != nil {
		return fmt.Errorf("value of %q: %w", k.TransactionalID, err)
	}
	st := TxnState(v.State)
	if st < TxnEmpty || st > TxnDead || v.ProducerID < 0 || v.ProducerEpoch < 0 || v.TimeoutMillis <= 0 {
		return fmt.Errorf("value of %q: state %d, producer %d/%d, timeout %d", k.TransactionalID, v.State, v.ProducerID, v.ProducerEpoch, v.TimeoutMillis)
	}
	m := c.txns[k.TransactionalID]
	if m == nil {
		m = &txnMeta{id: k.TransactionalID}
		c.txns[m.id] = m
	} else {
		delete(c.byPID, m.pid)
	}
	m.pid, m.epoch, m.timeout, m.state = v.ProducerID, v.ProducerEpoch, time.Duration(v.TimeoutMillis)*time.Millisecond, st
	m.parts = map[TopicPartition]bool{}
	for _, t := range v.Topics {
		for _, p := range t.Partitions {
			m.parts[TopicPartition{t.Topic, p}] = true
		}
	}
	m.updated = time.UnixMilli(v.LastUpdateTimestamp)
	m.start = time.Time{}
	if v.StartTimestamp > 0 {
		m.start = time.UnixMilli(v.StartTimestamp)
	}
	c.byPID[m.pid] = m
	m.publish()
	return nil
}

// persist writes m's state (m.mu held) and waits until it is durable.
// An id whose partition was unloaded (its coordinator moved, or this
// broker reloaded it) writes nothing: the loaded state is the truth.
func (c *TxnCoordinator) persist(m *txnMeta) error {
	if m.gone.Load() {
		return fmt.Errorf("%w: the coordination of %q moved (its partition was unloaded)", kerr.NotCoordinator, m.id)
	}
	key := (&kmsg.TxnMetadataKey{Version: 0, TransactionalID: m.id}).AppendTo(nil)
	v := kmsg.NewTxnMetadataValue()
	v.Version = 0
	v.ProducerID, v.ProducerEpoch = m.pid, m.epoch
	v.TimeoutMillis = int32(m.timeout.Milliseconds())
	v.State = kmsg.TransactionState(m.state)
	v.LastUpdateTimestamp = m.updated.UnixMilli()
	v.StartTimestamp = -1
	if !m.start.IsZero() {
		v.StartTimestamp = m.start.UnixMilli()
	}
	byTopic := map[string][]int32{}
	for tp := range m.parts {
		byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
	}
	for _, name := range slices.Sorted(maps.Keys(byTopic)) {
		ps := byTopic[name]
		slices.Sort(ps)
		v.Topics = append(v.Topics, kmsg.TxnMetadataValueTopic{Topic: name, Partitions: ps})
	}
	return c.write(m.id, []kv{{key, v.AppendTo(nil)}})
}

func (c *TxnCoordinator) write(id string, recs []kv) error {
	t, err := c.stateTopic()
	if err != nil {
		return err
	}
	ps := t.Partitions()
	p := ps[TxnPartitionFor(id, len(ps))]
	if err := appendRecords(p, c.eng.now().UnixMilli(), recs); err != nil {
		if errors.Is(err, kerr.NotLeaderForPartition) {
			// The partition's leadership moved (cluster mode): so did
			// the id's coordinator; the record may or may not be there.
			return fmt.Errorf("%w: %s moved to another broker: %w", kerr.NotCoordinator, p, err)
		}
		return fmt.Errorf("%w: write %s: %w", kerr.CoordinatorNotAvailable, TransactionStateTopic, err)
	}
	return nil
}

// lookup returns the id's state, or nil.
func (c *TxnCoordinator) lookup(id string) *txnMeta {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.txns[id]
}

// lockLive locks the id's state, or returns nil when it does not exist
// (or expired while the caller waited for its lock).
func (c *TxnCoordinator) lockLive(id string) *txnMeta {
	m := c.lookup(id)
	if m == nil {
		return nil
	}
	m.mu.Lock()
	if m.gone.Load() {
		m.mu.Unlock()
		return nil
	}
	return m
}

// InitProducerID gives a transactional producer its producer id and a
// new epoch, fencing every older instance: an open transaction of the id
// is aborted first (with the new epoch, so the older instance's late
// batches are refused). producerID/epoch are the caller's current ones
// (KIP-360, -1 when it has none): a mismatch is PRODUCER_FENCED.
func (c *TxnCoordinator) InitProducerID(id string, timeout time.Duration, producerID int64, epoch int16) (int64, int16, error) {
	if id == "" {
		return -1, -1, fmt.Errorf("%w: empty transactional id", kerr.InvalidRequest)
	}
	if timeout <= 0 || timeout > c.cfg.MaxTimeout {
		return -1, -1, fmt.Errorf("%w: transaction.timeout.ms %d is outside 1..%d (transaction.max.timeout.ms)", kerr.InvalidTransactionTimeout, timeout.Milliseconds(), c.cfg.MaxTimeout.Milliseconds())
	}
	if err := c.checkCoordinator(id); err != nil {
		return -1, -1, err
	}
	now := c.eng.now()
	m := c.lockLive(id)
	if m == nil {
		pid, err := c.eng.AllocateProducerID()
		if err != nil {
			return -1, -1, err
		}
		nm := &txnMeta{id: id, pid: pid, timeout: timeout, state: TxnEmpty, parts: map[TopicPartition]bool{}, updated: now}
		nm.mu.Lock()
		defer nm.mu.Unlock()
		c.mu.Lock()
		if c.txns[id] != nil {
			c.mu.Unlock()
			return -1, -1, fmt.Errorf("%w: transactional id %q is being initialized by another producer", kerr.ConcurrentTransactions, id)
		}
		c.txns[id], c.byPID[pid] = nm, nm
		c.mu.Unlock()
		if err := c.persist(nm); err != nil {
			c.mu.Lock()
			delete(c.txns, id)
			delete(c.byPID, pid)
			c.mu.Unlock()
			nm.gone.Store(true)
			return -1, -1, err
		}
		nm.publish()
		return nm.pid, nm.epoch, nil
	}
	defer m.mu.Unlock()
	if producerID >= 0 && (producerID != m.pid || epoch != m.epoch) {
		c.Fenced.Add(1)
		return -1, -1, fmt.Errorf("%w: transactional id %q has producer %d epoch %d, not %d epoch %d", kerr.ProducerFenced, id, m.pid, m.epoch, producerID, epoch)
	}
	switch m.state {
	case TxnPrepareCommit, TxnPrepareAbort:
		if err := c.complete(m); err != nil {
			return -1, -1, fmt.Errorf("%w: the transaction of %q is still ending: %w", kerr.ConcurrentTransactions, id, err)
		}
	case TxnOngoing:
		// Fence the previous instance: abort its transaction at a new
		// epoch (the markers fence it at the partitions), then give the
		// new instance the epoch after that, as Kafka does.
		c.Fenced.Add(1)
		prevEpoch := m.epoch
		fenceEpoch(m)
		if err := c.end(m, false); err != nil {
			m.epoch = prevEpoch // nothing was decided: the next try fences again
			return -1, -1, err
		}
		if m.state != TxnCompleteAbort {
			// Decided, markers not all written: the background pass
			// finishes them; the client retries.
			return -1, -1, fmt.Errorf("%w: aborting the open transaction of %q", kerr.ConcurrentTransactions, id)
		}
		now = c.eng.now()
	}
	prevPID, prevEpoch := m.pid, m.epoch
	if err := c.bumpEpoch(m); err != nil {
		return -1, -1, err
	}
	m.timeout, m.state, m.start, m.updated = timeout, TxnEmpty, time.Time{}, now
	m.parts = map[TopicPartition]bool{}
	if err := c.persist(m); err != nil {
		c.setPID(m, prevPID, prevEpoch)
		return -1, -1, err
	}
	m.publish()
	return m.pid, m.epoch, nil
}

// fenceEpoch moves m to its next epoch under the same producer id (m.mu
// held), before an abort whose markers must carry the transaction's
// producer id and fence its older epoch. At the last epoch it stays.
func fenceEpoch(m *txnMeta) {
	if m.epoch < math.MaxInt16 {
		m.epoch++
	}
}

// bumpEpoch moves m to its next epoch, or to a fresh producer id when the
// epoch is exhausted (m.mu held; persisted by the caller).
func (c *TxnCoordinator) bumpEpoch(m *txnMeta) error {
	if m.epoch < math.MaxInt16 {
		m.epoch++
		return nil
	}
	pid, err := c.eng.AllocateProducerID()
	if err != nil {
		return err
	}
	c.setPID(m, pid, 0)
	return nil
}

func (c *TxnCoordinator) setPID(m *txnMeta, pid int64, epoch int16) {
	c.mu.Lock()
	if c.byPID[m.pid] == m {
		delete(c.byPID, m.pid)
	}
	c.byPID[pid] = m
	c.mu.Unlock()
	m.pid, m.epoch = pid, epoch
}

// check validates a request's producer id and epoch against m (m.mu held).
func (c *TxnCoordinator) check(m *txnMeta, producerID int64, epoch int16) error {
	switch {
	case m.pid != producerID:
		return fmt.Errorf("%w: transactional id %q has producer id %d, not %d", kerr.InvalidProducerIDMapping, m.id, m.pid, producerID)
	case epoch != m.epoch:
		c.Fenced.Add(1)
		return fmt.Errorf("%w: transactional id %q is at epoch %d, the request has %d", kerr.ProducerFenced, m.id, m.epoch, epoch)
	case m.state == TxnPrepareCommit || m.state == TxnPrepareAbort:
		return fmt.Errorf("%w: the transaction of %q is ending", kerr.ConcurrentTransactions, m.id)
	}
	return nil
}

// lockChecked begins each call a transactional producer makes on its open
// transaction: this node coordinates id, id is known and live, and
// producerID and epoch are its current ones. It returns id's state
// locked; the caller unlocks it.
func (c *TxnCoordinator) lockChecked(id string, producerID int64, epoch int16) (*txnMeta, error) {
	if err := c.checkCoordinator(id); err != nil {
		return nil, err
	}
	m := c.lockLive(id)
	if m == nil {
		return nil, fmt.Errorf("%w: transactional id %q is unknown: call InitProducerId first", kerr.InvalidProducerIDMapping, id)
	}
	if err := c.check(m, producerID, epoch); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	return m, nil
}

// AddPartitions adds partitions to the id's transaction, opening it.
// errs has one entry per partition; when any is unknown none is added
// (the others get OPERATION_NOT_ATTEMPTED). err fails the whole request.
func (c *TxnCoordinator) AddPartitions(id string, producerID int64, epoch int16, parts []TopicPartition) (errs []error, err error) {
	m, err := c.lockChecked(id, producerID, epoch)
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	errs = make([]error, len(parts))
	failed := false
	for i, tp := range parts {
		t := c.eng.Topic(tp.Topic)
		if t == nil || t.Partition(tp.Partition) == nil || t.Internal {
			errs[i] = fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, tp.Topic, tp.Partition)
			failed = true
		}
	}
	if failed {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = kerr.OperationNotAttempted
			}
		}
		return errs, nil
	}
	return errs, c.add(m, parts)
}

// add puts parts into m's transaction and persists it (m.mu held, checked).
func (c *TxnCoordinator) add(m *txnMeta, parts []TopicPartition) error {
	fresh := m.state != TxnOngoing
	changed := fresh
	for _, tp := range parts {
		if !m.parts[tp] {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	prev, prevState, prevStart := m.parts, m.state, m.start
	next := make(map[TopicPartition]bool, len(m.parts)+len(parts))
	if !fresh {
		for tp := range m.parts {
			next[tp] = true
		}
	}
	for _, tp := range parts {
		next[tp] = true
	}
	m.parts, m.state, m.updated = next, TxnOngoing, c.eng.now()
	if fresh {
		m.start = m.updated
	}
	if err := c.persist(m); err != nil {
		m.parts, m.state, m.start = prev, prevState, prevStart
		return err
	}
	m.publish()
	return nil
}

// VerifyPartitions answers AddPartitionsToTxn's verify-only form: nil per
// partition that is in the id's open transaction at that producer and
// epoch, INVALID_TXN_STATE for the others.
func (c *TxnCoordinator) VerifyPartitions(id string, producerID int64, epoch int16, parts []TopicPartition) ([]error, error) {
	if err := c.checkCoordinator(id); err != nil {
		return nil, err
	}
	m := c.lookup(id)
	if m == nil {
		return nil, fmt.Errorf("%w: transactional id %q is unknown", kerr.InvalidProducerIDMapping, id)
	}
	errs := make([]error, len(parts))
	for i, tp := range parts {
		errs[i] = c.verify(m, producerID, epoch, tp)
	}
	return errs, nil
}

func (c *TxnCoordinator) verify(m *txnMeta, producerID int64, epoch int16, tp TopicPartition) error {
	v := m.view.Load()
	switch {
	case v == nil:
		return fmt.Errorf("%w: transactional id %q is initializing", kerr.InvalidTxnState, m.id)
	case producerID != v.pid:
		return fmt.Errorf("%w: transactional id %q has producer id %d, not %d", kerr.InvalidProducerIDMapping, m.id, v.pid, producerID)
	case epoch < v.epoch:
		return fmt.Errorf("%w: producer %d epoch %d is fenced by epoch %d", kerr.InvalidProducerEpoch, producerID, epoch, v.epoch)
	case epoch > v.epoch || v.state != TxnOngoing || !v.parts[tp]:
		return fmt.Errorf("%w: %s-%d is not in an open transaction of producer %d epoch %d", kerr.InvalidTxnState, tp.Topic, tp.Partition, producerID, epoch)
	}
	return nil
}

// CheckProduce decides whether a transactional batch of producer id/epoch
// may be appended to topic/partition (any goroutine, no locks): it must be
// in that producer's open transaction (added with AddPartitionsToTxn),
// else INVALID_TXN_STATE, or INVALID_PRODUCER_EPOCH for a fenced epoch,
// so no transaction can be left open that the coordinator does not know.
func (c *TxnCoordinator) CheckProduce(producerID int64, epoch int16, topic string, partition int32) error {
	c.mu.Lock()
	m := c.byPID[producerID]
	c.mu.Unlock()
	if m == nil {
		return fmt.Errorf("%w: producer %d has no transactional id here", kerr.InvalidTxnState, producerID)
	}
	return c.verify(m, producerID, epoch, TopicPartition{topic, partition})
}

// AddOffsets adds group's __consumer_offsets partition to the id's
// transaction, so TxnOffsetCommit may commit the group's offsets in it.
func (c *TxnCoordinator) AddOffsets(id string, producerID int64, epoch int16, group string) error {
	if group == "" {
		return fmt.Errorf("%w: empty group id", kerr.InvalidGroupID)
	}
	m, err := c.lockChecked(id, producerID, epoch)
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	p := c.eng.coord.partitionFor(group)
	if p == nil {
		return fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, OffsetsTopic)
	}
	return c.add(m, []TopicPartition{{OffsetsTopic, p.Index}})
}

// lockOffsetsCommit is TxnOffsetCommit's check on the transaction side on
// a single node (cluster mode verifies through the partition's guards):
// the producer's open transaction must hold the group's offsets
// partition. On success the id stays locked until unlock is called, so
// the commit's records are written (and pending) before any EndTxn of
// the transaction can write its markers.
func (c *TxnCoordinator) lockOffsetsCommit(id string, producerID int64, epoch int16, group string) (unlock func(), err error) {
	m := c.lockLive(id)
	if m == nil {
		return nil, fmt.Errorf("%w: transactional id %q is unknown", kerr.InvalidProducerIDMapping, id)
	}
	p := c.eng.coord.partitionFor(group)
	switch {
	case p == nil:
		err = fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, OffsetsTopic)
	case m.pid != producerID:
		err = fmt.Errorf("%w: transactional id %q has producer id %d, not %d", kerr.InvalidProducerIDMapping, id, m.pid, producerID)
	case epoch < m.epoch:
		c.Fenced.Add(1)
		err = fmt.Errorf("%w: producer %d epoch %d is fenced by epoch %d", kerr.ProducerFenced, producerID, epoch, m.epoch)
	default:
		if verr := c.verify(m, producerID, epoch, TopicPartition{OffsetsTopic, p.Index}); verr != nil {
			err = fmt.Errorf("%w (call AddOffsetsToTxn for group %q first)", verr, group)
		}
	}
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	return m.mu.Unlock, nil
}

// EndTxn commits or aborts the id's transaction. Retrying the call that
// ended it answers success; ending a transaction that is not open (or
// ended the other way) is INVALID_TXN_STATE.
func (c *TxnCoordinator) EndTxn(id string, producerID int64, epoch int16, commit bool) error {
	m, err := c.lockChecked(id, producerID, epoch)
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	switch {
	case m.state == TxnOngoing:
		return c.end(m, commit)
	case m.state == TxnCompleteCommit && commit, m.state == TxnCompleteAbort && !commit:
		return nil // a retry of the call that ended it
	case m.state == TxnEmpty:
		return fmt.Errorf("%w: transactional id %q has no open transaction", kerr.InvalidTxnState, id)
	default:
		return fmt.Errorf("%w: the last transaction of %q ended as %s; this request asks for commit=%v", kerr.InvalidTxnState, id, m.state, commit)
	}
}

// end decides m's open transaction (m.mu held): the Prepare record, then
// the markers and the group offsets (complete).
func (c *TxnCoordinator) end(m *txnMeta, commit bool) error {
	prev := m.state
	m.state, m.updated = TxnPrepareAbort, c.eng.now()
	if commit {
		m.state = TxnPrepareCommit
	}
	if err := c.persist(m); err != nil {
		m.state = prev
		return err
	}
	m.publish()
	if err := c.complete(m); err != nil {
		// Decided and durable: the background pass finishes it. The
		// client's retry waits on CONCURRENT_TRANSACTIONS until then.
		c.eng.logger.Warn("writing transaction markers failed; retrying in the background", "transactional_id", m.id, "err", err)
	}
	return nil
}

// complete writes the markers of m's prepared transaction to every
// partition in it, applies or drops the group offsets committed in it,
// and records the end (m.mu held).
func (c *TxnCoordinator) complete(m *txnMeta) error {
	prepared, parts, start := m.state, m.parts, m.start
	commit := prepared == TxnPrepareCommit
	if err := c.writeMarkers(m, commit); err != nil {
		return err
	}
	m.state, m.updated, m.start, m.parts = TxnCompleteAbort, c.eng.now(), time.Time{}, map[TopicPartition]bool{}
	if commit {
		m.state = TxnCompleteCommit
	}
	if err := c.persist(m); err != nil {
		// The markers are written; the retry (or a restart replaying
		// the Prepare record) writes them again, which changes nothing.
		m.state, m.parts, m.start = prepared, parts, start
		return err
	}
	if commit {
		c.Commits.Add(1)
	} else {
		c.Aborts.Add(1)
	}
	m.publish()
	return nil
}

// writeMarkers appends the markers of m's transaction to all its
// partitions at once and waits for all of them: here for the partitions
// this broker leads (or all, on a single node), through their leaders
// for the others (cluster mode). A partition whose topic was deleted is
// skipped.
func (c *TxnCoordinator) writeMarkers(m *txnMeta, commit bool) error {
	mk := TxnMarker{ProducerID: m.pid, ProducerEpoch: m.epoch, Commit: commit}
	var local []*Partition
	var remote []TopicPartition
	for tp := range m.parts {
		t := c.eng.Topic(tp.Topic)
		if t == nil {
			continue
		}
		p := t.Partition(tp.Partition)
		if p == nil {
			continue
		}
		if c.loaded != nil && p.Role() != RoleLeader {
			remote = append(remote, tp)
			continue
		}
		local = append(local, p)
	}
	if c.loaded != nil {
		if sp := c.partitionOf(m.id); sp != nil {
			mk.CoordinatorEpoch = sp.LeaderEpoch()
		}
	}
	var errs []error
	remoteErrs := make(chan []error, 1)
	if h := c.eng.clusterHooks(); len(remote) > 0 && h != nil && h.WriteTxnMarkers != nil {
		go func() { remoteErrs <- h.WriteTxnMarkers(mk, remote) }()
	} else if len(remote) > 0 {
		errs = append(errs, fmt.Errorf("%w: no way to reach the leaders of %v", kerr.CoordinatorNotAvailable, remote))
		remote = nil
	}
	for i, err := range c.eng.AppendTxnMarkers(mk, local) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", local[i], err))
		}
	}
	if len(remote) > 0 {
		for i, err := range <-remoteErrs {
			if err != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", remote[i].Topic, remote[i].Partition, err))
			}
		}
	}
	return errors.Join(errs...)
}

// AppendTxnMarkers appends mk to every partition of parts, which this
// broker leads, at once, and waits for all of them (acks=all): the
// coordinator's markers for its own partitions, and WriteTxnMarkers from
// another broker's coordinator. Once the marker is in a __consumer_offsets
// partition, the offsets the transaction committed for its groups are
// applied (commit) or dropped (abort). A partition whose topic was
// deleted meanwhile counts as done; one moved off this broker
// (reassignment) fails, for the marker to go to its new leader. errs has
// one entry per partition.
func (e *Engine) AppendTxnMarkers(mk TxnMarker, parts []*Partition) (errs []error) {
	dones := make([]chan AppendResult, len(parts))
	for i, p := range parts {
		done := make(chan AppendResult, 1)
		dones[i] = done
		marker := mk
		p.Shard().Append(&AppendRequest{Partition: p, Acks: -1, Marker: &marker,
			Done: func(r AppendResult) { done <- r }})
	}
	errs = make([]error, len(parts))
	for i, p := range parts {
		r := <-dones[i]
		if r.Err != nil && !(p.removed.Load() && p.topic.deleted.Load()) {
			errs[i] = r.Err
			continue
		}
		// In cluster mode a partition not loaded yet replays the marker
		// with the rest of its log (Coordinator.LoadPartition).
		if p.topic.Internal && p.topic.Name == OffsetsTopic && (e.coord.loaded == nil || e.coord.Loaded(p.Index)) {
			e.coord.completeTxnOffsets(p.Index, mk.ProducerID, mk.Commit)
		}
	}
	return errs
}

// run aborts timed-out transactions, retries unfinished ones and forgets
// expired ids, every CheckInterval, until close.
func (c *TxnCoordinator) run() {
	defer close(c.done)
	tick := time.NewTicker(c.cfg.CheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
			c.housekeeping()
		}
	}
}

func (c *TxnCoordinator) housekeeping() {
	c.mu.Lock()
	ms := make([]*txnMeta, 0, len(c.txns))
	for _, m := range c.txns {
		ms = append(ms, m)
	}
	c.mu.Unlock()
	for _, m := range ms {
		select {
		case <-c.stop:
			return
		default:
		}
		if !m.mu.TryLock() {
			continue // busy: its operation decides
		}
		c.keep(m)
		m.mu.Unlock()
	}
}

// keep does one id's housekeeping (m.mu held).
func (c *TxnCoordinator) keep(m *txnMeta) {
	if m.gone.Load() {
		return
	}
	now := c.eng.now()
	switch m.state {
	case TxnOngoing:
		if now.Sub(m.start) < m.timeout {
			return
		}
		// Timed out: abort at a new epoch, which fences the producer
		// (its next call is PRODUCER_FENCED), as Kafka does.
		c.eng.logger.Info("aborting a transaction past its timeout", "transactional_id", m.id, "producer_id", m.pid, "timeout", m.timeout)
		c.Timeouts.Add(1)
		prevEpoch := m.epoch
		fenceEpoch(m)
		if err := c.end(m, false); err != nil {
			m.epoch = prevEpoch // nothing was decided: the next pass fences again
			c.eng.logger.Warn("abort of a timed-out transaction", "transactional_id", m.id, "err", err)
		}
	case TxnPrepareCommit, TxnPrepareAbort:
		if err := c.complete(m); err != nil {
			c.eng.logger.Warn("finishing a transaction failed; retrying", "transactional_id", m.id, "err", err)
		}
	case TxnEmpty, TxnCompleteCommit, TxnCompleteAbort:
		if now.Sub(m.updated) < c.cfg.IDExpiration {
			return
		}
		key := (&kmsg.TxnMetadataKey{Version: 0, TransactionalID: m.id}).AppendTo(nil)
		if err := c.write(m.id, []kv{{key, nil}}); err != nil {
			c.eng.logger.Warn("expiring a transactional id", "transactional_id", m.id, "err", err)
			return
		}
		c.mu.Lock()
		delete(c.txns, m.id)
		if c.byPID[m.pid] == m {
			delete(c.byPID, m.pid)
		}
		c.mu.Unlock()
		m.gone.Store(true)
		c.eng.logger.Info("expired an idle transactional id", "transactional_id", m.id)
	}
}

// Open counts the ids with a transaction open now, from their published
// views (no id's lock: a scrape never waits for markers being written).
func (c *TxnCoordinator) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.txns {
		if v := m.view.Load(); v != nil && v.state == TxnOngoing {
			n++
		}
	}
	return n
}

// Describe returns the ids' states; a missing id's State is TxnDead.
func (c *TxnCoordinator) Describe(ids []string) []TxnInfo {
	out := make([]TxnInfo, 0, len(ids))
	for _, id := range ids {
		if err := c.checkCoordinator(id); err != nil {
			out = append(out, TxnInfo{ID: id, ProducerID: -1, Epoch: -1, State: TxnDead, Err: err})
			continue
		}
		m := c.lookup(id)
		if m == nil {
			out = append(out, TxnInfo{ID: id, ProducerID: -1, Epoch: -1, State: TxnDead})
			continue
		}
		out = append(out, m.info())
	}
	return out
}

// List returns every id (sorted) whose state is in states (all when
// empty), whose producer id is in pids (all when empty), and whose open
// transaction has run at least minDuration (when > 0).
func (c *TxnCoordinator) List(states []TxnState, pids []int64, minDuration time.Duration) []TxnInfo {
	c.mu.Lock()
	ms := make([]*txnMeta, 0, len(c.txns))
	for _, m := range c.txns {
		ms = append(ms, m)
	}
	c.mu.Unlock()
	now := c.eng.now()
	var out []TxnInfo
	for _, m := range ms {
		in := m.info()
		if len(states) > 0 && !slices.Contains(states, in.State) {
			continue
		}
		if len(pids) > 0 && !slices.Contains(pids, in.ProducerID) {
			continue
		}
		if minDuration > 0 && (in.Start.IsZero() || now.Sub(in.Start) < minDuration) {
			continue
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (m *txnMeta) info() TxnInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	in := TxnInfo{ID: m.id, ProducerID: m.pid, Epoch: m.epoch, State: m.state, Timeout: m.timeout, Start: m.start}
	for tp := range m.parts {
		in.Partitions = append(in.Partitions, tp)
	}
	sort.Slice(in.Partitions, func(i, j int) bool {
		a, b := in.Partitions[i], in.Partitions[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return in
}
