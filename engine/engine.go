// Package engine is the broker: the topic and partition registry, the
// writer shards that own the partition logs and append to them in batches
// (group commit), high watermarks and fetch waiters, idempotent-producer
// state, and topic configuration.
//
// It does not parse bytes off a socket; package netio does, and calls the
// engine with decoded requests. Errors are Kafka's error vocabulary
// (kerr.Error values wrapped with context), because that is the domain's
// language: netio turns them into error codes unchanged.
//
// Ownership: a partition's log, its producer state and its appends belong
// to exactly one writer shard goroutine; everything else reaches the log
// through the shard (Shard.Do) or through the log's concurrent read API.
// The topic registry is guarded by Engine.mu.
package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal"
)

// Config configures an Engine.
type Config struct {
	// DataDir holds the metadata file and one directory per partition.
	DataDir string
	// NodeID is this broker's id in Metadata responses.
	NodeID int32
	// Shards is the number of writer goroutines; 0 means GOMAXPROCS.
	Shards int
	// ShardQueueBytes bounds the bytes queued for one shard; past it the
	// shard refuses new appends until it drains (backpressure). 0: 64 MiB.
	ShardQueueBytes int64
	// AutoCreateTopics creates unknown topics on Metadata and Produce.
	AutoCreateTopics bool
	// DefaultPartitions is the partition count of auto-created topics and
	// of CreateTopics with -1.
	DefaultPartitions int32
	// TopicDefaults overrides the built-in topic config defaults
	// (by topic key, e.g. "retention.ms").
	TopicDefaults map[string]string
	// WriteCaching acknowledges acks=all from the page cache for every
	// topic (the topic config write.caching can also turn it on).
	WriteCaching bool
	// WritebackBytes starts the kernel's writeback of each partition's new
	// data every this many bytes (see wal.Options.WritebackBytes), so that
	// dirty page cache stays small and appends are not throttled in
	// bursts. 0: leave writeback to the kernel.
	WritebackBytes int64
	// Backend selects the I/O backend (ring.KindAuto by default).
	Backend ring.Kind
	// RetentionCheckInterval is how often shards enforce retention
	// (log.retention.check.interval.ms). 0: 5 minutes.
	RetentionCheckInterval time.Duration
	// RepairCorruptLogs salvages logs damaged in the middle at open
	// instead of keeping them offline.
	RepairCorruptLogs bool
	// Logger receives the engine's logs. Default: slog.Default().
	Logger *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
	// ObserveSync, if set, receives the duration of every shard
	// submission that included an fdatasync (metrics).
	ObserveSync func(time.Duration)
	// Groups configures the group coordinator.
	Groups GroupConfig
	// CompactionInterval is how often the cleaner looks for compacted
	// topics' partitions to clean (log.cleaner.backoff.ms). 0: 15 s.
	CompactionInterval time.Duration
}

// Engine is one broker's state.
type Engine struct {
	cfg    Config
	logger *slog.Logger
	now    func() time.Time

	mu        sync.RWMutex // guards topics, byID, meta, closed
	topics    map[string]*Topic
	byID      map[TopicID]*Topic
	meta      *brokerMeta
	closed    bool
	clusterID string

	shards []*Shard

	pidMu    sync.Mutex // guards producer-id allocation
	nextPID  int64
	pidLimit int64

	backendName string
	stats       Stats
	coord       *Coordinator

	cleanerStop chan struct{}
	cleanerDone chan struct{}
	lock        *os.File // the data directory's lock, held until Close
}

// Stats are engine-wide counters.
type Stats struct {
	Syncs        atomic.Int64 // fdatasync-bearing submissions
	SyncNanos    atomic.Int64
	Submissions  atomic.Int64
	BytesWritten atomic.Int64
}

// Open loads the data directory (creating it), recovers every partition
// log, and starts the writer shards.
func Open(cfg Config) (*Engine, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("engine: no data directory")
	}
	if cfg.Shards <= 0 {
		cfg.Shards = runtime.GOMAXPROCS(0)
	}
	if cfg.ShardQueueBytes <= 0 {
		cfg.ShardQueueBytes = 64 << 20
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.RetentionCheckInterval <= 0 {
		cfg.RetentionCheckInterval = 5 * time.Minute
	}
	if cfg.CompactionInterval <= 0 {
		cfg.CompactionInterval = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	for k, v := range cfg.TopicDefaults {
		if err := ValidateTopicConfig(k, v); err != nil {
			return nil, fmt.Errorf("engine: broker default: %w", err)
		}
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg: cfg, logger: cfg.Logger, now: cfg.Now,
		topics: map[string]*Topic{}, byID: map[TopicID]*Topic{}, lock: lock,
	}
	ok := false
	defer func() {
		if !ok {
			lock.Close()
		}
	}()
	meta, found, err := loadMeta(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if !found {
		meta = &brokerMeta{Version: 1, ClusterID: newClusterID(), NextProducerID: 1000}
		if err := saveMeta(cfg.DataDir, meta); err != nil {
			return nil, fmt.Errorf("engine: write metadata: %w", err)
		}
		e.logger.Info("initialized data directory", "dir", cfg.DataDir, "cluster_id", meta.ClusterID)
	}
	e.meta = meta
	e.clusterID = meta.ClusterID
	e.nextPID, e.pidLimit = meta.NextProducerID, meta.NextProducerID

	clean := removeCleanMarker(cfg.DataDir, e.logger)
	removeDeletedDirs(cfg.DataDir, e.logger)

	for i := 0; i < cfg.Shards; i++ {
		s, err := newShard(e, i)
		if err != nil {
			e.stopShards()
			return nil, err
		}
		e.shards = append(e.shards, s)
	}
	e.backendName = e.shards[0].backend.Name()

	start := time.Now()
	if err := e.loadTopics(clean); err != nil {
		e.stopShards()
		return nil, err
	}
	e.coord = newCoordinator(e, cfg.Groups)
	if err := e.coord.start(); err != nil {
		e.stopShards()
		return nil, fmt.Errorf("engine: group coordinator: %w", err)
	}
	e.cleanerStop, e.cleanerDone = make(chan struct{}), make(chan struct{})
	go e.runCleaner(e.cleanerStop, e.cleanerDone)
	ok = true
	e.logger.Info("engine ready", "topics", len(e.topics), "shards", len(e.shards),
		"backend", e.backendName, "clean_start", clean, "recovery", time.Since(start).Round(time.Millisecond))
	return e, nil
}

// removeCleanMarker reports whether the last shutdown was clean and
// removes the marker durably, so a crash from now on is seen as unclean.
func removeCleanMarker(dir string, logger *slog.Logger) bool {
	path := filepath.Join(dir, cleanShutdownFile)
	if _, err := os.Stat(path); err != nil {
		return false
	}
	if err := os.Remove(path); err != nil {
		logger.Warn("cannot remove clean-shutdown marker; recovering as unclean", "err", err)
		return false
	}
	if err := fsutil.SyncDir(dir); err != nil {
		logger.Warn("cannot sync data directory; recovering as unclean", "err", err)
		return false
	}
	return true
}

// removeDeletedDirs finishes deletions of topics interrupted by a stop.
func removeDeletedDirs(dir string, logger *slog.Logger) {
	ents, _ := os.ReadDir(dir)
	for _, ent := range ents {
		if ent.IsDir() && strings.HasSuffix(ent.Name(), deleteSuffix) {
			logger.Info("removing deleted partition directory", "dir", ent.Name())
			os.RemoveAll(filepath.Join(dir, ent.Name()))
		}
	}
}

const deleteSuffix = "-delete"

// loadTopics opens every partition of every topic in the metadata, in
// parallel, and hands each log to its shard.
func (e *Engine) loadTopics(clean bool) error {
	type job struct {
		t *Topic
		p *Partition
	}
	var jobs []job
	for _, tm := range e.meta.Topics {
		t := e.newTopic(tm)
		e.topics[t.Name] = t
		e.byID[t.ID] = t
		for _, p := range t.Partitions() {
			jobs = append(jobs, job{t, p})
		}
	}
	work := make(chan job)
	var wg sync.WaitGroup
	for w := 0; w < max(2, runtime.GOMAXPROCS(0)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				e.openPartition(j.p, clean)
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	for _, j := range jobs {
		if j.p.log != nil {
			j.p.shard.adopt(j.p)
		}
	}
	return nil
}

func (e *Engine) newTopic(tm topicMeta) *Topic {
	t := &Topic{Name: tm.Name, ID: tm.ID, Internal: tm.Internal, eng: e}
	t.config.Store(e.topicConfig(tm.Configs))
	parts := make([]*Partition, tm.Partitions)
	for i := range parts {
		parts[i] = e.newPartition(t, int32(i))
	}
	t.parts.Store(&parts)
	return t
}

func (e *Engine) topicConfig(overrides map[string]string) *TopicConfig {
	c := &TopicConfig{overrides: map[string]string{}, defaults: map[string]string{}}
	for k, v := range overrides {
		c.overrides[k] = v
	}
	for k, v := range e.cfg.TopicDefaults {
		c.defaults[k] = v
	}
	for k, v := range e.meta.BrokerConfigs {
		c.defaults[k] = v
	}
	return c
}

func (e *Engine) newPartition(t *Topic, i int32) *Partition {
	p := &Partition{topic: t, Index: i, dir: filepath.Join(e.cfg.DataDir, fmt.Sprintf("%s-%d", t.Name, i))}
	p.shard = e.shards[shardFor(t.Name, i, len(e.shards))]
	p.producers = map[int64]*producerState{}
	return p
}

// shardFor spreads a topic's partitions over the shards, starting at a
// topic-dependent shard so small topics do not all land on shard 0.
func shardFor(topic string, partition int32, n int) int {
	var h uint32 = 2166136261
	for i := 0; i < len(topic); i++ {
		h = (h ^ uint32(topic[i])) * 16777619
	}
	return int((uint64(h) + uint64(partition)) % uint64(n))
}

// walOptions are the options of p's log: its topic's config over the
// engine's settings.
func (e *Engine) walOptions(p *Partition) wal.Options {
	return p.topic.Config().walOptions(wal.Options{
		WritebackBytes: e.cfg.WritebackBytes,
		Logger:         e.logger.With("partition", p.String()), Now: e.now,
	})
}

// openPartition opens (recovering) a partition's log and rebuilds its
// producer state. A log that cannot be opened keeps the partition offline.
func (e *Engine) openPartition(p *Partition, clean bool) {
	opts := e.walOptions(p)
	opts.Clean, opts.RepairCorruption = clean, e.cfg.RepairCorruptLogs
	l, err := wal.Open(p.dir, opts)
	if err != nil {
		p.setOffline(err)
		e.logger.Error("partition offline: its log cannot be opened", "partition", p.String(), "err", err)
		return
	}
	p.log = l
	if err := p.loadProducerState(); err != nil {
		e.logger.Warn("rebuilding producer state failed; idempotent producers of this partition restart their sequences", "partition", p.String(), "err", err)
	}
}

// Close stops the shards (answering what is queued), flushes and closes
// every log, and marks the data directory clean.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	close(e.cleanerStop)
	<-e.cleanerDone
	errs := e.stopShards()
	e.pidMu.Lock()
	e.mu.Lock()
	e.meta.NextProducerID = e.nextPID
	err := saveMeta(e.cfg.DataDir, e.meta)
	e.mu.Unlock()
	e.pidMu.Unlock()
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := fsutil.WriteFileAtomic(filepath.Join(e.cfg.DataDir, cleanShutdownFile), []byte("clean\n"), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	e.logger.Info("engine stopped", "clean", len(errs) == 0)
	e.lock.Close()
	return errors.Join(errs...)
}

func (e *Engine) stopShards() []error {
	var errs []error
	for _, s := range e.shards {
		if err := s.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Coordinator is the group coordinator.
func (e *Engine) Coordinator() *Coordinator { return e.coord }

// ClusterID is the id generated when the data directory was created.
func (e *Engine) ClusterID() string { return e.clusterID }

// NodeID is this broker's id.
func (e *Engine) NodeID() int32 { return e.cfg.NodeID }

// BackendName says which I/O backend the shards use.
func (e *Engine) BackendName() string { return e.backendName }

// AutoCreateTopics reports whether unknown topics are created on use.
func (e *Engine) AutoCreateTopics() bool { return e.cfg.AutoCreateTopics }

// DefaultPartitions is the partition count of auto-created topics.
func (e *Engine) DefaultPartitions() int32 { return e.cfg.DefaultPartitions }

// Shards returns the writer shards.
func (e *Engine) Shards() []*Shard { return e.shards }

// EngineStats returns the engine's counters.
func (e *Engine) EngineStats() *Stats { return &e.stats }

// Topic returns the topic named name, or nil.
func (e *Engine) Topic(name string) *Topic {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.topics[name]
}

// TopicByID returns the topic with id, or nil.
func (e *Engine) TopicByID(id TopicID) *Topic {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.byID[id]
}

// Topics returns every topic sorted by name.
func (e *Engine) Topics() []*Topic {
	e.mu.RLock()
	out := make([]*Topic, 0, len(e.topics))
	for _, t := range e.topics {
		out = append(out, t)
	}
	e.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ValidateTopicName applies Kafka's rules: 1 to 249 characters from
// [a-zA-Z0-9._-], not "." or "..".
func ValidateTopicName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: topic name is empty", kerr.InvalidTopicException)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w: topic name cannot be %q", kerr.InvalidTopicException, name)
	}
	if len(name) > 249 {
		return fmt.Errorf("%w: topic name is %d characters, the limit is 249", kerr.InvalidTopicException, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: topic name %q has %q: use letters, digits, '.', '_' and '-'", kerr.InvalidTopicException, name, c)
		}
	}
	return nil
}

// collisionKey folds the differences that make two topic names collide:
// '.' and '_' (Kafka's metric names cannot tell them apart) and letter case
// (directories on a case-insensitive file system cannot).
func collisionKey(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, ".", "_"))
}

// CreateTopicRequest asks for a new topic.
type CreateTopicRequest struct {
	Name              string
	Partitions        int32 // -1: the default
	ReplicationFactor int16 // -1 or 1
	Configs           map[string]string
	ValidateOnly      bool
	// Internal marks broker-owned topics (__consumer_offsets).
	Internal bool
}

// CreateTopic creates a topic (or, with ValidateOnly, checks that it could
// be created).
func (e *Engine) CreateTopic(req CreateTopicRequest) (*Topic, error) {
	if err := ValidateTopicName(req.Name); err != nil {
		return nil, err
	}
	if strings.HasPrefix(req.Name, "__") && !req.Internal {
		if req.Name == OffsetsTopic {
			return nil, fmt.Errorf("%w: %s is the broker's internal topic", kerr.InvalidTopicException, req.Name)
		}
	}
	if req.Partitions == -1 {
		req.Partitions = e.cfg.DefaultPartitions
	}
	if req.Partitions <= 0 || req.Partitions > MaxPartitions {
		return nil, fmt.Errorf("%w: %d partitions: use 1 to %d", kerr.InvalidPartitions, req.Partitions, MaxPartitions)
	}
	if req.ReplicationFactor != -1 && req.ReplicationFactor != 1 {
		return nil, fmt.Errorf("%w: replication factor %d: this is a single broker, use 1", kerr.InvalidReplicationFactor, req.ReplicationFactor)
	}
	for k, v := range req.Configs {
		if err := ValidateTopicConfig(k, v); err != nil {
			return nil, fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, fmt.Errorf("%w: broker is shutting down", kerr.BrokerNotAvailable)
	}
	if _, ok := e.topics[req.Name]; ok {
		return nil, fmt.Errorf("%w: topic %q already exists", kerr.TopicAlreadyExists, req.Name)
	}
	key := collisionKey(req.Name)
	for name := range e.topics {
		if collisionKey(name) == key {
			return nil, fmt.Errorf("%w: topic %q collides with existing topic %q (names may not differ only in '.' vs '_' or in letter case)", kerr.InvalidTopicException, req.Name, name)
		}
	}
	if req.ValidateOnly {
		return nil, nil
	}
	tm := topicMeta{Name: req.Name, ID: newTopicID(), Partitions: req.Partitions, Configs: req.Configs, Internal: req.Internal}
	t := e.newTopic(tm)
	for _, p := range t.Partitions() {
		if err := e.createPartitionLog(p); err != nil {
			for _, q := range t.Partitions() {
				if q.log != nil {
					q.log.Delete()
				}
			}
			return nil, err
		}
	}
	e.meta.Topics = append(e.meta.Topics, tm)
	if err := saveMeta(e.cfg.DataDir, e.meta); err != nil {
		e.meta.Topics = e.meta.Topics[:len(e.meta.Topics)-1]
		for _, p := range t.Partitions() {
			p.log.Delete()
		}
		return nil, fmt.Errorf("%w: write metadata: %v", kerr.KafkaStorageError, err)
	}
	for _, p := range t.Partitions() {
		p.shard.adopt(p)
	}
	e.topics[t.Name] = t
	e.byID[t.ID] = t
	e.logger.Info("created topic", "topic", t.Name, "partitions", req.Partitions, "id", t.ID.String(), "configs", req.Configs)
	return t, nil
}

// MaxPartitions bounds the partitions of one topic.
const MaxPartitions = 100000

func (e *Engine) createPartitionLog(p *Partition) error {
	if err := os.RemoveAll(p.dir); err != nil {
		return fmt.Errorf("%w: clear %s: %v", kerr.KafkaStorageError, p.dir, err)
	}
	l, err := wal.Open(p.dir, e.walOptions(p))
	if err != nil {
		return fmt.Errorf("%w: create log %s: %v", kerr.KafkaStorageError, p.dir, err)
	}
	p.log = l
	return nil
}

// GetOrCreateTopic returns the topic, auto-creating it with the default
// partition count when auto-creation is on. It returns nil and an
// UNKNOWN_TOPIC_OR_PARTITION error otherwise.
func (e *Engine) GetOrCreateTopic(name string) (*Topic, error) {
	if t := e.Topic(name); t != nil {
		return t, nil
	}
	if !e.cfg.AutoCreateTopics {
		return nil, fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name)
	}
	t, err := e.CreateTopic(CreateTopicRequest{Name: name, Partitions: -1, ReplicationFactor: -1})
	if errors.Is(err, kerr.TopicAlreadyExists) {
		if t := e.Topic(name); t != nil {
			return t, nil
		}
	}
	return t, err
}

// DeleteTopic removes a topic and its data.
func (e *Engine) DeleteTopic(name string) error {
	e.mu.Lock()
	t, ok := e.topics[name]
	if !ok {
		e.mu.Unlock()
		return fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name)
	}
	if t.Internal {
		e.mu.Unlock()
		return fmt.Errorf("%w: %s is internal", kerr.InvalidTopicException, name)
	}
	idx := -1
	for i, tm := range e.meta.Topics {
		if tm.Name == name {
			idx = i
		}
	}
	old := e.meta.Topics
	e.meta.Topics = append(append([]topicMeta(nil), old[:idx]...), old[idx+1:]...)
	if err := saveMeta(e.cfg.DataDir, e.meta); err != nil {
		e.meta.Topics = old
		e.mu.Unlock()
		return fmt.Errorf("%w: write metadata: %v", kerr.KafkaStorageError, err)
	}
	delete(e.topics, name)
	delete(e.byID, t.ID)
	e.mu.Unlock()
	t.deleted.Store(true)
	for _, p := range t.Partitions() {
		p.remove()
	}
	e.logger.Info("deleted topic", "topic", name, "id", t.ID.String())
	return nil
}

// CreatePartitions grows a topic to total partitions.
func (e *Engine) CreatePartitions(name string, total int32, validateOnly bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.topics[name]
	if !ok {
		return fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name)
	}
	cur := int32(len(t.Partitions()))
	if total <= cur {
		return fmt.Errorf("%w: topic %q has %d partitions; the new count must be larger", kerr.InvalidPartitions, name, cur)
	}
	if total > MaxPartitions {
		return fmt.Errorf("%w: %d partitions exceeds %d", kerr.InvalidPartitions, total, MaxPartitions)
	}
	if validateOnly {
		return nil
	}
	parts := append([]*Partition(nil), t.Partitions()...)
	var added []*Partition
	for i := cur; i < total; i++ {
		p := e.newPartition(t, i)
		if err := e.createPartitionLog(p); err != nil {
			for _, q := range added {
				q.log.Delete()
			}
			return err
		}
		added = append(added, p)
	}
	for i := range e.meta.Topics {
		if e.meta.Topics[i].Name == name {
			e.meta.Topics[i].Partitions = total
		}
	}
	if err := saveMeta(e.cfg.DataDir, e.meta); err != nil {
		for _, q := range added {
			q.log.Delete()
		}
		for i := range e.meta.Topics {
			if e.meta.Topics[i].Name == name {
				e.meta.Topics[i].Partitions = cur
			}
		}
		return fmt.Errorf("%w: write metadata: %v", kerr.KafkaStorageError, err)
	}
	for _, p := range added {
		p.shard.adopt(p)
	}
	parts = append(parts, added...)
	t.parts.Store(&parts)
	e.logger.Info("added partitions", "topic", name, "from", cur, "to", total)
	return nil
}

// AlterTopicConfig applies changes to a topic's overrides: a nil value
// removes the override (back to the default). With replace, every
// override not in set is removed too (the legacy AlterConfigs).
func (e *Engine) AlterTopicConfig(name string, set map[string]*string, replace, validateOnly bool) error {
	for k, v := range set {
		if v != nil {
			if err := ValidateTopicConfig(k, *v); err != nil {
				return fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
			}
		} else if _, ok := LookupTopicConfig(k); !ok {
			return fmt.Errorf("%w: unknown topic config %q", kerr.InvalidConfig, k)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.topics[name]
	if !ok {
		return fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name)
	}
	next := t.Config().Overrides()
	if replace {
		next = map[string]string{}
	}
	for k, v := range set {
		if v == nil {
			delete(next, k)
		} else {
			next[k] = *v
		}
	}
	if validateOnly {
		return nil
	}
	idx := -1
	for i := range e.meta.Topics {
		if e.meta.Topics[i].Name == name {
			idx = i
		}
	}
	prev := e.meta.Topics[idx].Configs
	e.meta.Topics[idx].Configs = next
	if err := saveMeta(e.cfg.DataDir, e.meta); err != nil {
		e.meta.Topics[idx].Configs = prev
		return fmt.Errorf("%w: write metadata: %v", kerr.KafkaStorageError, err)
	}
	cfg := e.topicConfig(next)
	t.config.Store(cfg)
	t.applyConfig(cfg)
	e.logger.Info("altered topic config", "topic", name, "overrides", next)
	return nil
}

// BrokerConfigs returns the broker-level topic defaults set dynamically.
func (e *Engine) BrokerConfigs() map[string]string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := map[string]string{}
	for k, v := range e.cfg.TopicDefaults {
		out[k] = v
	}
	for k, v := range e.meta.BrokerConfigs {
		out[k] = v
	}
	return out
}

// AlterBrokerDefaults changes broker-level defaults of topic configs
// (by topic key); a nil value removes a dynamic default.
func (e *Engine) AlterBrokerDefaults(set map[string]*string, validateOnly bool) error {
	for k, v := range set {
		if v != nil {
			if err := ValidateTopicConfig(k, *v); err != nil {
				return fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
			}
		}
	}
	if validateOnly {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	prev := e.meta.BrokerConfigs
	next := map[string]string{}
	for k, v := range prev {
		next[k] = v
	}
	for k, v := range set {
		if v == nil {
			delete(next, k)
		} else {
			next[k] = *v
		}
	}
	e.meta.BrokerConfigs = next
	if err := saveMeta(e.cfg.DataDir, e.meta); err != nil {
		e.meta.BrokerConfigs = prev
		return fmt.Errorf("%w: write metadata: %v", kerr.KafkaStorageError, err)
	}
	for _, t := range e.topics {
		cfg := e.topicConfig(t.Config().overrides)
		t.config.Store(cfg)
		t.applyConfig(cfg)
	}
	return nil
}

// producerIDBlock is how many producer ids are reserved in the metadata
// file at once, so InitProducerId rarely writes it.
const producerIDBlock = 1000

// AllocateProducerID returns a fresh producer id; ids never repeat across
// restarts.
func (e *Engine) AllocateProducerID() (int64, error) {
	e.pidMu.Lock()
	defer e.pidMu.Unlock()
	if e.nextPID >= e.pidLimit {
		e.mu.Lock()
		e.meta.NextProducerID = e.nextPID + producerIDBlock
		err := saveMeta(e.cfg.DataDir, e.meta)
		e.mu.Unlock()
		if err != nil {
			return 0, fmt.Errorf("%w: reserve producer ids: %v", kerr.KafkaStorageError, err)
		}
		e.pidLimit = e.nextPID + producerIDBlock
	}
	id := e.nextPID
	e.nextPID++
	return id, nil
}

// ParseTopicID decodes a topic id from its base64 or hex form.
func ParseTopicID(s string) (TopicID, error) {
	var id TopicID
	if err := id.UnmarshalText([]byte(s)); err == nil {
		return id, nil
	}
	return id, fmt.Errorf("bad topic id %q", s)
}
