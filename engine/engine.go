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
// The topic registry is guarded by Engine.mu, which is never held during
// disk I/O: admin operations create and delete logs outside it and write
// the metadata file under Engine.metaMu, then publish under Engine.mu.
package engine

import (
	"cmp"
	"errors"
	"fmt"
	"github.com/ringlog/ringlog/engine/consumergroup"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/internal/ratelog"
	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal"
)

// Config configures an Engine; DefaultConfig is what ships.
type Config struct {
	// DataDir holds the metadata file and one directory per partition.
	DataDir string
	// Perm is the mode of every file and directory the engine creates
	// under DataDir (the directory itself if missing, partition
	// directories, segments, indexes, metadata and checkpoint files).
	// The zero value is owner-only (0600/0700); GroupRead gives the
	// group read access (0640/0750): --data-dir-group-access.
	Perm fsutil.Perm
	// NodeID is this broker's id in Metadata responses.
	NodeID int32
	// Shards is the number of writer goroutines; 0 means GOMAXPROCS.
	Shards int
	// ShardQueueBytes bounds the bytes queued for one shard; past it the
	// shard refuses new appends until it drains (backpressure). 0: 64 MiB.
	ShardQueueBytes int64
	// PassBytes bounds the bytes of produce requests one pass of a writer
	// shard takes from its queue (at least one request), so the group
	// commit's latency is bounded: the first request of a pass waits for
	// at most this much to be written (and synced) before its answer,
	// and a deep queue is answered pass by pass. 0: 8 MiB.
	PassBytes int64
	// AutoCreateTopics creates unknown topics on Metadata and Produce.
	AutoCreateTopics bool
	// AutoCreateRate bounds auto-creation to this many topics a second,
	// with AutoCreateBurst saved up; past it a name is answered
	// UNKNOWN_TOPIC_OR_PARTITION (retriable) and logged. 0: 50 a second,
	// bursts of 500.
	AutoCreateRate  float64
	AutoCreateBurst int
	// ScrubBytesPerSec paces the scrubber, which re-reads every sealed
	// segment at most once per ScrubInterval and checks every batch's
	// CRC32C (scrub.go); 0: DefaultConfig's, negative: no scrubber.
	ScrubBytesPerSec int64
	ScrubInterval    time.Duration
	// DiskFullRetry is how often a partition taken offline by a full
	// disk (a write found no room) checks whether the disk has
	// DiskFullResumeBytes free again, and if so accepts appends again,
	// without a restart. 0: 5 s and 16 MiB.
	DiskFullRetry       time.Duration
	DiskFullResumeBytes int64
	// MaxHostedPartitions bounds the partitions this broker hosts (all
	// topics, internal ones too): a creation past it is refused
	// POLICY_VIOLATION and logged, as is one whose logs would need more
	// file descriptors than the process may open (less a reserve for
	// connections). 0: 10,000.
	MaxHostedPartitions int
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
	// PageCacheTailBytes drops each partition's data from the page cache
	// once it was written back and lies this many bytes behind the tail
	// (see wal.Options.PageCacheTailBytes): consumers within it read the
	// page cache, and appends reuse the freed pages. 0: leave the page
	// cache to the kernel. Needs WritebackBytes.
	PageCacheTailBytes int64
	// DirectWrites writes every partition's appends with O_DIRECT, past
	// the page cache (see wal.Options.DirectWrites): no page-cache pages
	// are allocated and filled for them, and consumers read the disk.
	// WritebackBytes and PageCacheTailBytes then do nothing. Open checks
	// that the data directory's file system supports it.
	DirectWrites bool
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
	// Transactions configures the transaction coordinator.
	Transactions TxnConfig
	// ProducerIDExpiration forgets a partition's idempotent or
	// transactional producer whose last batch there is this old and
	// that has no open transaction there (producer.id.expiration.ms),
	// checked with retention. 0: 24 hours.
	ProducerIDExpiration time.Duration
	// CompactionInterval is how often the cleaner looks for compacted
	// topics' partitions to clean (log.cleaner.backoff.ms). 0: 15 s.
	CompactionInterval time.Duration
	// HighWatermarkCheckpointInterval is how often, in cluster mode, the
	// replicated partitions' high watermarks are written to the data
	// directory's checkpoint (replica.high.watermark.checkpoint.interval.ms;
	// hwcheckpoint.go). 0: 5 s.
	HighWatermarkCheckpointInterval time.Duration
	// Replicated is cluster mode: every partition of a non-internal topic
	// replicates, and serves clients only once the cluster's publisher
	// made this broker its leader (Partition.SetReplicaState).
	Replicated bool
	// Tier is tiered storage (remote.go): with a Store, topics may set
	// remote.storage.enable. Single node only: Open refuses a Store
	// with Replicated.
	Tier TierConfig
	// WrapBackend, if set, wraps each writer shard's I/O backend (shard
	// is its index). It is a seam for tests only (internal/faultring
	// injects EIO, ENOSPC and slow writes through it); nothing that
	// ships sets it.
	WrapBackend func(shard int, b ring.Backend) ring.Backend
	// SyncFile, if set, replaces (*os.File).Sync for the segment flushes
	// the logs do outside the ring (wal.Options.SyncFile): a test seam.
	SyncFile func(*os.File) error
}

// DefaultConfig is the engine configuration that ships (package broker's
// DefaultConfig builds on it; DataDir is left to the caller). Open fills a
// zero Shards, ShardQueueBytes, PassBytes, DefaultPartitions, RetentionCheckInterval,
// CompactionInterval and group session timeouts from it; a zero
// AutoCreateTopics, WritebackBytes, PageCacheTailBytes or
// Groups.InitialRebalanceDelay means off, so a Config built field by field is not what ships: start from
// this.
func DefaultConfig() Config {
	return Config{
		Shards:                          0, // one per CPU
		ShardQueueBytes:                 64 << 20,
		PassBytes:                       8 << 20,
		AutoCreateTopics:                true,
		AutoCreateRate:                  50,
		AutoCreateBurst:                 500,
		MaxHostedPartitions:             10000,
		ScrubBytesPerSec:                8 << 20,
		ScrubInterval:                   24 * time.Hour,
		DiskFullRetry:                   5 * time.Second,
		DiskFullResumeBytes:             16 << 20,
		DefaultPartitions:               1,
		WritebackBytes:                  1 << 20,
		PageCacheTailBytes:              64 << 20,
		Backend:                         ring.KindAuto,
		RetentionCheckInterval:          5 * time.Minute,
		CompactionInterval:              15 * time.Second,
		HighWatermarkCheckpointInterval: 5 * time.Second,
		Tier:                            TierConfig{Interval: 5 * time.Second, CacheBytes: 256 << 20, RequestTimeout: 30 * time.Second},
		ProducerIDExpiration:            24 * time.Hour,
		Groups: GroupConfig{
			MinSessionTimeout:     6 * time.Second,
			MaxSessionTimeout:     30 * time.Minute,
			InitialRebalanceDelay: 3 * time.Second,
			MigrationPolicy:       MigrateBidirectional,
			MaxMetadataBytes:      defaultGroupMetadataBytes,
			Consumer:              consumergroup.DefaultConfig(),
			Share:                 DefaultShareConfig(),
		},
		Transactions: TxnConfig{
			MaxTimeout:    15 * time.Minute,
			IDExpiration:  7 * 24 * time.Hour,
			CheckInterval: time.Second,
		},
	}
}

// Engine is one broker's state.
type Engine struct {
	cfg    Config
	logger *slog.Logger
	now    func() time.Time

	// metaMu serialises changes of the metadata: a change writes the
	// file (and fsyncs it) holding metaMu alone, then takes mu only to
	// swap the in-memory state, so lookups never wait for the disk.
	// Taken before mu, never the reverse.
	metaMu sync.Mutex
	// mu guards the registry. topics, byID, meta and defaultsGen change
	// only under both metaMu and mu, so either one is enough to read
	// them; pending and closed change under mu alone. meta is copy on
	// write: a published *brokerMeta (and its maps) is never modified.
	mu     sync.RWMutex
	topics map[string]*Topic
	byID   map[TopicID]*Topic
	// topicsGen counts the topics created, deleted and grown (consumer
	// groups look at their subscriptions again when it moves).
	topicsGen   atomic.Uint64
	pending     map[string]*pendingTopic // names being created or deleted
	meta        *brokerMeta
	defaultsGen uint64 // counts AlterBrokerDefaults changes
	closed      bool
	clusterID   string
	// admin counts the admin operations in flight (registered under mu
	// while not closed); Close waits for them before stopping the shards.
	admin sync.WaitGroup

	shards []*Shard

	pidMu    sync.Mutex // guards producer-id allocation; taken before metaMu
	nextPID  int64
	pidLimit int64

	backendName string
	stats       Stats
	coord       *Coordinator
	txn         *TxnCoordinator
	shareStates *ShareStates
	shares      *SharePartitions

	hooks       atomic.Pointer[ClusterHooks] // nil: single node
	remote      *tier                        // tiered storage (remote.go); nil: none
	noStore     sync.Once                    // logs once that tiered replicas are hosted without a store
	cleanerStop chan struct{}
	cleanerDone chan struct{}
	scrubDone   chan struct{} // the scrubber stops with cleanerStop
	lock        *os.File      // the data directory's lock, held until Close
	// hwCheckpoint is the high-watermark checkpoint read at open (nil
	// after Open: read by the partition loaders only); hwDone closes
	// once its writer (cluster mode) has stopped, with cleanerStop.
	hwCheckpoint map[hwKey]int64
	hwDone       chan struct{}

	// capacity counts partitions being created (capacity.go); its mu
	// is taken before mu (never while holding it).
	capacity   capacity
	autoCreate tokenBucket     // paces auto-creation
	refusalLog ratelog.Limiter // rate-limits the capacity refusal log line
}

// Stats are engine-wide counters.
type Stats struct {
	Syncs       atomic.Int64 // fdatasync-bearing submissions
	SyncNanos   atomic.Int64
	Submissions atomic.Int64
	// InlineAppends counts appends written on the appender's goroutine
	// (the direct-write fast path; each is one of Submissions).
	InlineAppends atomic.Int64
	BytesWritten  atomic.Int64
	// Replication (cluster mode).
	TruncatedBelowHW atomic.Int64 // follower truncations below the high watermark
	ISRShrinks       atomic.Int64 // ISR shrinks this broker's leaders asked for and got
	ISRExpands       atomic.Int64 // ISR expansions likewise
	// The scrubber (scrub.go): bytes checked, damaged batches found,
	// damaged followers truncated to fetch again.
	ScrubbedBytes atomic.Int64
	ScrubDamaged  atomic.Int64
	ScrubHealed   atomic.Int64
}

// Open loads the data directory (creating it), recovers every partition
// log, and starts the writer shards.
func Open(cfg Config) (*Engine, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("engine: no data directory")
	}
	def := DefaultConfig()
	if cfg.Shards <= 0 {
		cfg.Shards = runtime.GOMAXPROCS(0)
	}
	if cfg.ShardQueueBytes <= 0 {
		cfg.ShardQueueBytes = def.ShardQueueBytes
	}
	if cfg.PassBytes <= 0 {
		cfg.PassBytes = def.PassBytes
	}
	if cfg.AutoCreateRate <= 0 {
		cfg.AutoCreateRate, cfg.AutoCreateBurst = def.AutoCreateRate, def.AutoCreateBurst
	}
	if cfg.AutoCreateBurst <= 0 {
		cfg.AutoCreateBurst = max(1, int(cfg.AutoCreateRate))
	}
	if cfg.ScrubBytesPerSec == 0 {
		cfg.ScrubBytesPerSec = def.ScrubBytesPerSec
	}
	if cfg.ScrubInterval <= 0 {
		cfg.ScrubInterval = def.ScrubInterval
	}
	if cfg.DiskFullRetry <= 0 {
		cfg.DiskFullRetry = def.DiskFullRetry
	}
	if cfg.DiskFullResumeBytes <= 0 {
		cfg.DiskFullResumeBytes = def.DiskFullResumeBytes
	}
	if cfg.MaxHostedPartitions <= 0 {
		cfg.MaxHostedPartitions = def.MaxHostedPartitions
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = def.DefaultPartitions
	}
	if cfg.ProducerIDExpiration <= 0 {
		cfg.ProducerIDExpiration = def.ProducerIDExpiration
	}
	if cfg.RetentionCheckInterval <= 0 {
		cfg.RetentionCheckInterval = def.RetentionCheckInterval
	}
	if cfg.CompactionInterval <= 0 {
		cfg.CompactionInterval = def.CompactionInterval
	}
	if cfg.HighWatermarkCheckpointInterval <= 0 {
		cfg.HighWatermarkCheckpointInterval = def.HighWatermarkCheckpointInterval
	}
	// A member's session and heartbeat have no meaningful zero: an unset
	// one expired a member at its first timer (engine tests, whose Config
	// leaves Groups empty, failed on it).
	if c := &cfg.Groups.Consumer; c.SessionTimeout <= 0 || c.HeartbeatInterval <= 0 {
		c.SessionTimeout, c.HeartbeatInterval = def.Groups.Consumer.SessionTimeout, def.Groups.Consumer.HeartbeatInterval
	}
	if sh := &cfg.Groups.Share.Group; sh.SessionMillis <= 0 || sh.HeartbeatMillis <= 0 {
		sh.SessionMillis, sh.HeartbeatMillis = def.Groups.Share.Group.SessionMillis, def.Groups.Share.Group.HeartbeatMillis
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	for k, v := range cfg.TopicDefaults {
		if err := validateBrokerDefault(k, v); err != nil {
			return nil, fmt.Errorf("engine: broker default: %w", err)
		}
	}
	lock, err := lockDataDir(cfg.DataDir, cfg.Perm)
	if err != nil {
		return nil, err
	}
	if cfg.DirectWrites {
		if err := wal.CheckDirectWrites(cfg.DataDir); err != nil {
			lock.Close()
			return nil, fmt.Errorf("engine: %w (start without --direct-writes, or put the data directory on a file system such as ext4 or xfs)", err)
		}
	}
	e := &Engine{
		cfg: cfg, logger: cfg.Logger, now: cfg.Now,
		topics: map[string]*Topic{}, byID: map[TopicID]*Topic{}, pending: map[string]*pendingTopic{}, lock: lock,
		autoCreate: tokenBucket{rate: cfg.AutoCreateRate, burst: float64(cfg.AutoCreateBurst)},
	}
	ok := false
	defer func() {
		if !ok {
			lock.Close()
		}
	}()
	if cfg.Tier.Store != nil {
		e.remote = newTier(cfg.Tier)
		defer func() {
			if !ok {
				e.remote.cancel()
				e.remote.cache.Close()
			}
		}()
	}
	meta, found, err := loadMeta(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if !found {
		meta = &brokerMeta{Version: 1, ClusterID: newClusterID(), NextProducerID: 1000}
		if err := saveMeta(cfg.DataDir, cfg.Perm, meta); err != nil {
			return nil, fmt.Errorf("engine: write metadata: %w", err)
		}
		e.logger.Info("initialized data directory", "dir", cfg.DataDir, "cluster_id", meta.ClusterID)
	}
	e.meta = meta
	e.clusterID = meta.ClusterID
	e.nextPID, e.pidLimit = meta.NextProducerID, meta.NextProducerID

	if limit, inUse, ok := fileDescriptors(); ok {
		if need := meta.hostedCount() * fdsPerPartition; inUse+need > limit-fdReserve(limit) {
			e.logger.Warn("this data directory's partitions need about as many file descriptors as the process may open: some logs may fail to open (KAFKA_STORAGE_ERROR) and connections be refused; raise the limit (ulimit -n, systemd LimitNOFILE=)",
				"partitions", meta.hostedCount(), "descriptors_needed", need, "limit", limit)
		}
	}
	clean := removeCleanMarker(cfg.DataDir, e.logger)
	removeDeletedDirs(cfg.DataDir, e.logger)
	if found && !cfg.Replicated {
		removeOrphanDirs(cfg.DataDir, meta, e.logger)
	}

	for i := 0; i < cfg.Shards; i++ {
		s, err := newShard(e, i)
		if err != nil {
			e.stopShards()
			return nil, err
		}
		e.shards = append(e.shards, s)
	}
	e.backendName = e.shards[0].backend.Name()

	startKind := "clean"
	switch {
	case !found:
		startKind = "initialized"
	case !clean:
		startKind = "recovered"
		e.logger.Warn("unclean shutdown: recovering", "dir", cfg.DataDir, "partitions", e.meta.partitionCount())
	}
	start := time.Now()
	if cfg.Replicated {
		e.hwCheckpoint = e.loadHWCheckpoint()
	}
	cut, err := e.loadTopics(clean)
	e.hwCheckpoint = nil
	if err != nil {
		e.stopShards()
		return nil, err
	}
	if startKind == "recovered" {
		e.logTruncations(cut)
	}
	e.coord = newCoordinator(e, cfg.Groups)
	if err := e.coord.start(); err != nil {
		e.stopShards()
		return nil, fmt.Errorf("engine: group coordinator: %w", err)
	}
	e.txn = newTxnCoordinator(e, cfg.Transactions)
	if err := e.txn.start(); err != nil {
		e.stopShards()
		return nil, fmt.Errorf("engine: transaction coordinator: %w", err)
	}
	e.shareStates, e.shares = newShareStates(e), newSharePartitions(e)
	if err := e.shareStates.start(); err != nil {
		e.stopShards()
		return nil, fmt.Errorf("engine: share coordinator: %w", err)
	}
	e.cleanerStop, e.cleanerDone = make(chan struct{}), make(chan struct{})
	go e.runCleaner(e.cleanerStop, e.cleanerDone)
	e.scrubDone = make(chan struct{})
	go e.runScrubber(e.cleanerStop, e.scrubDone)
	if e.remote != nil {
		e.resumeDeletions()
		go e.runTiering()
	}
	e.hwDone = make(chan struct{})
	if cfg.Replicated {
		go e.runHWCheckpoints(cfg.HighWatermarkCheckpointInterval, e.cleanerStop, e.hwDone)
	} else {
		close(e.hwDone)
	}
	ok = true
	e.logger.Info("engine ready", "topics", len(e.topics), "shards", len(e.shards),
		"backend", e.backendName, "start", startKind, "recovery", time.Since(start).Round(time.Millisecond))
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

// looksLikeLog reports whether dir is empty or holds a segment file
// (twenty digits, .log).
func looksLikeLog(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, ent := range ents {
		if base, ok := strings.CutSuffix(ent.Name(), ".log"); ok && len(base) == 20 && strings.Trim(base, "0123456789") == "" {
			return true
		}
	}
	return len(ents) == 0
}

// removeOrphanDirs deals with the partition directories (<topic>-<n>) of
// no partition in the metadata: what a kill left of a topic deletion (the
// metadata is written first, the directories go after) or of a creation
// (the logs are created first, the metadata after). One whose logs hold
// no record is removed. One that holds records is never deleted on the
// strength of the metadata: it is renamed <dir>.orphan-stray, kept for
// an operator, and logged. The caller runs this only when the metadata
// file was there at start and not in cluster mode (where cluster metadata
// decides, and unknown logs are kept as strays).
func removeOrphanDirs(dir string, meta *brokerMeta, logger *slog.Logger) {
	parts := map[string]int32{}
	for _, tm := range meta.Topics {
		parts[tm.Name] = tm.Partitions
	}
	ents, _ := os.ReadDir(dir)
	for _, ent := range ents {
		name := ent.Name()
		topic, n, ok := parsePartitionDir(name)
		if !ent.IsDir() || !ok {
			continue // not <topic>-<n>: a deleted or stray directory, or not ours
		}
		if count, ok := parts[topic]; ok && n < count {
			continue
		}
		path := filepath.Join(dir, name)
		if !looksLikeLog(path) {
			continue // someone else's directory: leave it
		}
		if holdsRecords(path) {
			logger.Warn("a partition directory that no topic in the metadata has holds records: kept, renamed *.orphan"+straySuffix+" (move it back and run `ringlog recover-metadata` if the topic should exist, or delete it)", "dir", name)
			if err := os.Rename(path, path+".orphan"+straySuffix); err != nil {
				logger.Warn("cannot rename orphan partition directory", "dir", name, "err", err)
			}
			continue
		}
		logger.Info("removing an empty partition directory that no topic in the metadata has (left by a topic creation interrupted by a crash)", "dir", name)
		gone := path + ".orphan" + deleteSuffix
		if err := os.Rename(path, gone); err != nil {
			logger.Warn("cannot remove orphan partition directory", "dir", name, "err", err)
			continue
		}
		os.RemoveAll(gone)
	}
}

// holdsRecords reports whether a partition directory has a segment file
// that is not empty (or cannot tell: then it counts as holding records).
func holdsRecords(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	for _, ent := range ents {
		if !strings.HasSuffix(ent.Name(), ".log") {
			continue
		}
		fi, err := ent.Info()
		if err != nil || fi.Size() > 0 {
			return true
		}
	}
	return false
}

// straySuffix ends the directory of a log that cluster metadata no longer
// knows (StrayTopic): kept for an operator, never deleted.
const straySuffix = "-stray"

// loadTopics opens every partition of every topic in the metadata, in
// parallel, and hands each log to its shard; it returns what recovery
// truncated in each partition.
func (e *Engine) loadTopics(clean bool) ([]truncation, error) {
	type job struct {
		t *Topic
		p *Partition
	}
	var jobs []job
	for _, tm := range e.meta.Topics {
		t := e.newTopic(tm, e.topicConfig(tm.Configs))
		e.topics[t.Name] = t
		e.byID[t.ID] = t
		for _, p := range t.Partitions() {
			if p.Hosted() {
				jobs = append(jobs, job{t, p})
			}
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
	var cut []truncation
	for _, j := range jobs {
		if j.p.log != nil {
			j.p.shard.adopt(j.p)
		}
		if j.p.recoveryCut > 0 {
			cut = append(cut, truncation{j.p.String(), j.p.recoveryCut})
		}
	}
	return cut, nil
}

// truncation is what recovery removed from one partition's log.
type truncation struct {
	partition string
	bytes     int64
}

// logTruncations summarises, after an unclean start, what recovery cut
// from the logs (torn tails; with --repair-corrupt-logs, damaged bytes
// moved aside): at WARN when anything was, the largest ten by name.
func (e *Engine) logTruncations(cut []truncation) {
	if len(cut) == 0 {
		e.logger.Info("unclean shutdown: recovery truncated nothing")
		return
	}
	var total int64
	for _, c := range cut {
		total += c.bytes
	}
	slices.SortFunc(cut, func(a, b truncation) int { return cmp.Compare(b.bytes, a.bytes) })
	var parts []string
	for i, c := range cut {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("and %d more", len(cut)-10))
			break
		}
		parts = append(parts, fmt.Sprintf("%s:%dB", c.partition, c.bytes))
	}
	e.logger.Warn("unclean shutdown: recovery truncated logs", "partitions", len(cut), "bytes", total, "truncated", strings.Join(parts, " "))
}

// partitionCount is the number of partitions of every topic.
func (m *brokerMeta) partitionCount() int {
	n := 0
	for _, t := range m.Topics {
		n += int(t.Partitions)
	}
	return n
}

// logFilesSize is the size of the segment files (*.log) in dir.
func logFilesSize(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, de := range ents {
		if !strings.HasSuffix(de.Name(), ".log") {
			continue
		}
		if fi, err := de.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

func (e *Engine) newTopic(tm topicMeta, cfg *TopicConfig) *Topic {
	t := &Topic{Name: tm.Name, ID: tm.ID, Internal: tm.Internal, eng: e}
	t.config.Store(cfg)
	parts := make([]*Partition, tm.Partitions)
	for i := range parts {
		parts[i] = e.newPartition(t, int32(i))
		parts[i].notHosted = slices.Contains(tm.NotHosted, int32(i))
	}
	t.parts.Store(&parts)
	return t
}

// topicConfig is the configuration of a topic with these overrides over
// the broker's defaults (e.mu or e.metaMu held, for e.meta).
func (e *Engine) topicConfig(overrides map[string]string) *TopicConfig {
	return e.topicConfigOver(overrides, e.meta.BrokerConfigs)
}

// topicConfigOver is topicConfig with brokerConfigs as the dynamic
// broker defaults (ones about to be set, checkTieredUnder).
func (e *Engine) topicConfigOver(overrides, brokerConfigs map[string]string) *TopicConfig {
	c := &TopicConfig{overrides: map[string]string{}, defaults: map[string]string{}}
	maps.Copy(c.overrides, overrides)
	maps.Copy(c.defaults, e.cfg.TopicDefaults)
	maps.Copy(c.defaults, brokerConfigs)
	return c
}

func (e *Engine) newPartition(t *Topic, i int32) *Partition {
	p := &Partition{topic: t, Index: i, dir: filepath.Join(e.cfg.DataDir, fmt.Sprintf("%s-%d", t.Name, i))}
	p.shard = e.shards[shardFor(t.Name, i, len(e.shards))]
	p.producers = map[int64]*producerState{}
	p.openTxns = map[int64]int64{}
	if e.cfg.Replicated {
		p.rep = &replication{}
	}
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
	return p.topic.Config().walOptions(e.baseWALOptions(p))
}

// baseWALOptions are the engine's settings for p's log, before its
// topic's config.
func (e *Engine) baseWALOptions(p *Partition) wal.Options {
	return wal.Options{
		WritebackBytes: e.cfg.WritebackBytes, PageCacheTailBytes: e.cfg.PageCacheTailBytes, DirectWrites: e.cfg.DirectWrites,
		Logger: e.logger.With("partition", p.String()), Now: e.now,
		SyncFile: e.cfg.SyncFile, Perm: e.cfg.Perm,
	}
}

// openPartition opens (recovering) a partition's log and rebuilds its
// producer state. A log that cannot be opened keeps the partition offline.
func (e *Engine) openPartition(p *Partition, clean bool) {
	opts := e.walOptions(p)
	opts.Clean, opts.RepairCorruption = clean, e.cfg.RepairCorruptLogs
	var before int64
	if !clean {
		before = logFilesSize(p.dir)
	}
	l, err := wal.Open(p.dir, opts)
	if err == nil && !clean {
		p.recoveryCut = max(before-l.Size()-l.PaddingDropped(), 0)
	}
	if err != nil {
		p.setOffline(err)
		e.logger.Error("partition offline: its log cannot be opened", "partition", p.String(), "err", err)
		return
	}
	// One node leads every partition at the epoch its data already has
	// (0 unless the log was written by a cluster's leader, or the epoch
	// field of a batch was damaged: it is not covered by the CRC): appends
	// must never stamp an epoch below the data's, which wal refuses.
	if ep := l.LatestEpoch(); ep > 0 && p.rep == nil {
		if err := l.StartLeaderEpoch(ep); err != nil {
			e.logger.Error("partition offline: cannot take over its leader epoch", "partition", p.String(), "epoch", ep, "err", err)
			l.Close()
			p.setOffline(err)
			return
		}
	}
	p.log = l
	if p.rep != nil {
		p.loadHighWatermark()
	}
	if p.topic.Config().RemoteStorage() {
		e.loadTier(p)
	}
	if err := p.loadProducerState(); err != nil {
		e.logger.Warn("rebuilding producer state failed; idempotent producers of this partition restart their sequences", "partition", p.String(), "err", err)
	}
}

// Close refuses new admin operations and waits for those in flight, stops
// the shards (answering what is queued), flushes and closes every log, and
// marks the data directory clean.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.admin.Wait()
	e.txn.close()
	close(e.cleanerStop)
	<-e.cleanerDone
	<-e.scrubDone
	<-e.hwDone
	if e.remote != nil {
		e.remote.close()
	}
	errs := e.stopShards()
	e.pidMu.Lock()
	err := e.saveNextProducerID(e.nextPID)
	// Any later allocation needs a reservation, which a closed engine
	// refuses: no id past the one just saved is handed out.
	e.pidLimit = e.nextPID
	e.pidMu.Unlock()
	if err != nil {
		errs = append(errs, fmt.Errorf("engine: write metadata: %w", err))
	}
	if len(errs) == 0 {
		if err := fsutil.WriteFileAtomic(filepath.Join(e.cfg.DataDir, cleanShutdownFile), []byte("clean\n"), e.cfg.Perm.File()); err != nil {
			errs = append(errs, err)
		}
	}
	e.logger.Info("engine stopped", "clean", len(errs) == 0)
	e.lock.Close()
	return errors.Join(errs...)
}

// stopShards stops every shard at once (each closes its own partitions).
func (e *Engine) stopShards() []error {
	errc := make([]error, len(e.shards))
	var wg sync.WaitGroup
	for i, s := range e.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc[i] = s.stop()
		}()
	}
	wg.Wait()
	var errs []error
	for _, err := range errc {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Coordinator is the group coordinator.
func (e *Engine) Coordinator() *Coordinator { return e.coord }

// Transactions returns the transaction coordinator (in cluster mode, of
// the transactional ids whose __transaction_state partitions this broker
// leads).
func (e *Engine) Transactions() *TxnCoordinator { return e.txn }

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

// TopicsGeneration changes whenever a topic is created, deleted or gets
// more partitions.
func (e *Engine) TopicsGeneration() uint64 { return e.topicsGen.Load() }

// Topics returns every topic, sorted by name.
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
	// ID is the topic's id; zero: a new random one. Cluster mode passes
	// the id from the cluster metadata.
	ID TopicID
	// NotHosted lists partitions whose logs live on other brokers
	// (cluster mode): they exist in the registry but have no log here.
	NotHosted []int32
}

// pendingTopic reserves a topic name while its topic is being created or
// its partitions removed; done is closed when that ends.
type pendingTopic struct {
	deleting bool
	done     chan struct{}
}

// beginAdmin registers an admin operation that Close must wait for; it
// fails once Close has started. End it with e.admin.Done.
func (e *Engine) beginAdmin() error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return fmt.Errorf("%w: broker is shutting down", kerr.BrokerNotAvailable)
	}
	e.admin.Add(1)
	return nil
}

// checkNewName says why a topic named name cannot be created now (e.mu
// held): the broker is closing, or the name is taken by a topic, existing
// or pending, or collides with one.
func (e *Engine) checkNewName(name string) error {
	if e.closed {
		return fmt.Errorf("%w: broker is shutting down", kerr.BrokerNotAvailable)
	}
	if _, ok := e.topics[name]; ok {
		return fmt.Errorf("%w: topic %q already exists", kerr.TopicAlreadyExists, name)
	}
	if op := e.pending[name]; op != nil {
		if op.deleting {
			return fmt.Errorf("%w: topic %q is being deleted", kerr.TopicAlreadyExists, name)
		}
		return fmt.Errorf("%w: topic %q is being created", kerr.TopicAlreadyExists, name)
	}
	key := collisionKey(name)
	collides := func(other string) error {
		if collisionKey(other) == key {
			return fmt.Errorf("%w: topic %q collides with existing topic %q (names may not differ only in '.' vs '_' or in letter case)", kerr.InvalidTopicException, name, other)
		}
		return nil
	}
	for other := range e.topics {
		if err := collides(other); err != nil {
			return err
		}
	}
	for other := range e.pending {
		if err := collides(other); err != nil {
			return err
		}
	}
	return nil
}

// CreateTopic creates a topic (or, with ValidateOnly, checks that it could
// be created).
//
// The name is reserved under e.mu, the partition logs are created with no
// lock held (in parallel), and the metadata file is written under
// e.metaMu; only then is the topic published under e.mu. Concurrent
// creations of the same name get TOPIC_ALREADY_EXISTS. A failure leaves
// nothing behind: no logs, no metadata entry, the name free again.
func (e *Engine) CreateTopic(req CreateTopicRequest) (*Topic, error) {
	if err := ValidateTopicName(req.Name); err != nil {
		return nil, err
	}
	if strings.HasPrefix(req.Name, "__") && !req.Internal {
		if req.Name == OffsetsTopic || req.Name == TransactionStateTopic || req.Name == ShareStateTopic {
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
			return nil, fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
		}
	}
	if !e.cfg.Replicated {
		// (In cluster mode the controller checked the topic.)
		e.mu.RLock()
		next := e.topicConfig(req.Configs)
		e.mu.RUnlock()
		if err := CheckTopicConfigs(next, nil, e.remote != nil); err != nil {
			return nil, fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
		}
	}
	hostedHere := int(req.Partitions) - len(req.NotHosted)
	if req.ValidateOnly {
		e.mu.RLock()
		err := e.checkNewName(req.Name)
		e.mu.RUnlock()
		if err == nil && !e.cfg.Replicated {
			var release func()
			if release, err = e.reservePartitions(hostedHere); err == nil {
				release()
			}
		}
		return nil, err
	}
	// In cluster mode the controller placed the partitions: this broker
	// hosts what the metadata says, or they would have no replica here.
	release := func() {}
	if !e.cfg.Replicated {
		var err error
		if release, err = e.reservePartitions(hostedHere); err != nil {
			return nil, err
		}
	}
	defer release()

	e.mu.Lock()
	if err := e.checkNewName(req.Name); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	e.admin.Add(1)
	defer e.admin.Done()
	op := &pendingTopic{done: make(chan struct{})}
	e.pending[req.Name] = op
	id := req.ID
	if id == (TopicID{}) {
		id = newTopicID()
	}
	tm := topicMeta{Name: req.Name, ID: id, Partitions: req.Partitions, Configs: maps.Clone(req.Configs), Internal: req.Internal,
		NotHosted: slices.Clone(req.NotHosted)}
	cfg, gen := e.topicConfig(tm.Configs), e.defaultsGen
	e.mu.Unlock()
	t := e.newTopic(tm, cfg)
	unreserve := func() {
		e.mu.Lock()
		delete(e.pending, req.Name)
		e.mu.Unlock()
		close(op.done)
	}

	hosted := hostedOnly(t.Partitions())
	if err := e.createLogs(hosted, cfg); err != nil {
		unreserve()
		return nil, err
	}

	e.metaMu.Lock()
	next := e.meta.clone()
	next.Topics = append(next.Topics, tm)
	if err := saveMeta(e.cfg.DataDir, e.cfg.Perm, next); err != nil {
		e.metaMu.Unlock()
		deleteLogs(hosted)
		unreserve()
		return nil, fmt.Errorf("%w: write metadata: %w", kerr.KafkaStorageError, err)
	}
	if e.defaultsGen != gen {
		// The broker defaults changed while the logs were created.
		cfg = e.topicConfig(tm.Configs)
		t.config.Store(cfg)
		e.setLogOptions(hosted, cfg)
	}
	for _, p := range hosted {
		p.shard.adopt(p)
	}
	e.mu.Lock()
	e.meta = next
	e.topics[t.Name] = t
	e.byID[t.ID] = t
	delete(e.pending, t.Name)
	e.topicsGen.Add(1)
	e.mu.Unlock()
	e.metaMu.Unlock()
	close(op.done)
	e.logger.Info("created topic", "topic", t.Name, "partitions", req.Partitions, "id", t.ID.String(), "configs", req.Configs)
	return t, nil
}

// MaxPartitions bounds the partitions of one topic.
const MaxPartitions = 100000

// createLogs creates empty logs for new partitions with the topic
// configuration cfg, in parallel (creating a log is a few files and
// fsyncs). On failure it deletes the logs it created and returns the
// first error.
func (e *Engine) createLogs(parts []*Partition, cfg *TopicConfig) error {
	errs := make([]error, len(parts))
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < min(len(parts), max(2, runtime.GOMAXPROCS(0))); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= len(parts) {
					return
				}
				if errs[i] = e.createPartitionLog(parts[i], cfg); errs[i] != nil {
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			// Every partition attempted: one whose log opened is
			// deleted with it; one that failed midway may have left a
			// directory (the one createPartitionLog cleared first, so
			// nothing else's).
			attempted := min(int(next.Load()), len(parts))
			deleteLogs(parts[:attempted])
			for _, p := range parts[:attempted] {
				os.RemoveAll(p.dir)
			}
			e.logger.Warn("creating partition logs failed: removed what was created", "partitions", attempted, "err", err)
			return err
		}
	}
	return nil
}

func (e *Engine) createPartitionLog(p *Partition, cfg *TopicConfig) error {
	if err := os.RemoveAll(p.dir); err != nil {
		return fmt.Errorf("%w: clear %s: %w", kerr.KafkaStorageError, p.dir, err)
	}
	l, err := wal.Open(p.dir, cfg.walOptions(e.baseWALOptions(p)))
	if err != nil {
		return fmt.Errorf("%w: create log %s: %w", kerr.KafkaStorageError, p.dir, err)
	}
	p.log = l
	return nil
}

// deleteLogs deletes the logs of partitions that were never published.
func deleteLogs(parts []*Partition) {
	for _, p := range parts {
		if p.log != nil {
			p.log.Delete()
			p.log = nil
		}
	}
}

// setLogOptions gives the logs of partitions not yet adopted by their
// shards (so owned by the caller) the configuration cfg.
func (e *Engine) setLogOptions(parts []*Partition, cfg *TopicConfig) {
	for _, p := range parts {
		if err := p.log.SetOptions(cfg.walOptions(p.log.Options())); err != nil {
			e.logger.Warn("apply topic config", "partition", p.String(), "err", err)
		}
	}
}

// GetOrCreateTopic returns the topic, auto-creating it with the default
// partition count when auto-creation is on. It returns nil and an
// UNKNOWN_TOPIC_OR_PARTITION error otherwise. When the topic is being
// created (or deleted) by someone else, it waits for that to finish: it
// may block for as long as creating a topic takes.
func (e *Engine) GetOrCreateTopic(name string) (*Topic, error) {
	for {
		e.mu.RLock()
		t, op := e.topics[name], e.pending[name]
		e.mu.RUnlock()
		switch {
		case t != nil:
			return t, nil
		case op != nil:
			<-op.done
			continue
		case !e.cfg.AutoCreateTopics:
			return nil, fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name)
		}
		if err := ValidateTopicName(name); err != nil {
			return nil, err
		}
		if !e.autoCreate.take(e.now()) {
			err := fmt.Errorf("%w: topic %q: auto-creation is paced at %.0f topics a second (--auto-create-topics-rate); retry, or create it with CreateTopics",
				kerr.UnknownTopicOrPartition, name, e.cfg.AutoCreateRate)
			if n, ok := e.refusalLog.Allow(e.now()); ok {
				e.logger.Warn("not auto-creating a topic: too many auto-creations", "topic", name, "rate", e.cfg.AutoCreateRate, "refused_since_last_log", n)
			}
			return nil, err
		}
		if h := e.clusterHooks(); h != nil && h.AutoCreateTopic != nil {
			if err := h.AutoCreateTopic(name); err != nil {
				return nil, err
			}
			if t := e.Topic(name); t != nil {
				return t, nil
			}
			return nil, fmt.Errorf("%w: topic %q is being created", kerr.LeaderNotAvailable, name)
		}
		t, err := e.CreateTopic(CreateTopicRequest{Name: name, Partitions: -1, ReplicationFactor: -1})
		if errors.Is(err, kerr.TopicAlreadyExists) {
			continue // created or deleted by someone else meanwhile: look again
		}
		return t, err
	}
}

// topicAdmin starts an admin change of the topic named name: it
// registers the operation (so Close waits for it), takes the topic's admin
// lock (one change of a topic at a time) and checks that the topic is
// still the registered one of its name. done releases both.
func (e *Engine) topicAdmin(name string) (t *Topic, done func(), err error) {
	if err := e.beginAdmin(); err != nil {
		return nil, nil, err
	}
	if t = e.Topic(name); t == nil {
		e.admin.Done()
		return nil, nil, fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name)
	}
	t.adminMu.Lock()
	if e.Topic(name) != t {
		t.adminMu.Unlock()
		e.admin.Done()
		return nil, nil, fmt.Errorf("%w: topic %q was deleted", kerr.UnknownTopicOrPartition, name)
	}
	return t, func() { t.adminMu.Unlock(); e.admin.Done() }, nil
}

// DeleteTopic removes a topic and its data. The metadata file no longer
// lists it when DeleteTopic returns; its name stays reserved until its
// partitions are closed and their directories moved aside.
func (e *Engine) DeleteTopic(name string) error {
	return e.removeTopic(name, false)
}

// StrayTopic takes a topic out of the registry like DeleteTopic, but keeps
// its data: each hosted partition's directory is renamed
// <topic>-<n>.<topic id>-stray, never deleted. Cluster mode calls it for
// local topics the cluster metadata does not know (never delete data
// because metadata is missing).
func (e *Engine) StrayTopic(name string) error {
	return e.removeTopic(name, true)
}

func (e *Engine) removeTopic(name string, stray bool) error {
	t, done, err := e.topicAdmin(name)
	if err != nil {
		return err
	}
	defer done()
	if t.Internal {
		return fmt.Errorf("%w: %s is internal", kerr.InvalidTopicException, name)
	}

	e.metaMu.Lock()
	next := e.meta.clone()
	next.Topics = slices.DeleteFunc(next.Topics, func(tm topicMeta) bool { return tm.Name == name })
	if err := saveMeta(e.cfg.DataDir, e.cfg.Perm, next); err != nil {
		e.metaMu.Unlock()
		return fmt.Errorf("%w: write metadata: %w", kerr.KafkaStorageError, err)
	}
	op := &pendingTopic{deleting: true, done: make(chan struct{})}
	e.mu.Lock()
	e.meta = next
	delete(e.topics, name)
	delete(e.byID, t.ID)
	e.pending[name] = op
	e.topicsGen.Add(1)
	e.mu.Unlock()
	e.metaMu.Unlock()

	t.deleted.Store(true)
	for _, p := range t.Partitions() {
		p.remove(stray, true)
	}
	e.mu.Lock()
	delete(e.pending, name)
	e.mu.Unlock()
	close(op.done)
	if stray {
		e.logger.Warn("cluster metadata does not know this topic: its logs are kept, renamed *"+straySuffix, "topic", name, "id", t.ID.String())
		return nil
	}
	e.logger.Info("deleted topic", "topic", name, "id", t.ID.String())
	return nil
}

// CreatePartitions grows a topic to total partitions. The new logs are
// created with no registry lock held; the partitions are published once
// the metadata file lists them.
func (e *Engine) CreatePartitions(name string, total int32, validateOnly bool) error {
	return e.addPartitions(name, total, validateOnly, nil)
}

// AddPartitions grows a topic to total partitions, as CreatePartitions,
// hosting only the new partitions not in notHosted (cluster mode).
func (e *Engine) AddPartitions(name string, total int32, notHosted []int32) error {
	return e.addPartitions(name, total, false, notHosted)
}

func (e *Engine) addPartitions(name string, total int32, validateOnly bool, notHosted []int32) error {
	t, done, err := e.topicAdmin(name)
	if err != nil {
		return err
	}
	defer done()
	cur := int32(len(t.Partitions()))
	if total <= cur {
		return fmt.Errorf("%w: topic %q has %d partitions; the new count must be larger", kerr.InvalidPartitions, name, cur)
	}
	if total > MaxPartitions {
		return fmt.Errorf("%w: %d partitions exceeds %d", kerr.InvalidPartitions, total, MaxPartitions)
	}
	if !e.cfg.Replicated {
		release, err := e.reservePartitions(int(total - cur))
		if err != nil {
			return err
		}
		defer release()
	}
	if validateOnly {
		return nil
	}
	var added []*Partition
	for i := cur; i < total; i++ {
		p := e.newPartition(t, i)
		p.notHosted = slices.Contains(notHosted, i)
		added = append(added, p)
	}
	cfg := t.Config()
	hosted := hostedOnly(added)
	if err := e.createLogs(hosted, cfg); err != nil {
		return err
	}

	e.metaMu.Lock()
	next := e.meta.clone()
	for i := range next.Topics {
		if next.Topics[i].Name == name {
			next.Topics[i].Partitions = total
			for _, p := range added {
				if !p.Hosted() {
					next.Topics[i].NotHosted = append(slices.Clone(next.Topics[i].NotHosted), p.Index)
				}
			}
		}
	}
	if err := saveMeta(e.cfg.DataDir, e.cfg.Perm, next); err != nil {
		e.metaMu.Unlock()
		deleteLogs(hosted)
		return fmt.Errorf("%w: write metadata: %w", kerr.KafkaStorageError, err)
	}
	if now := t.Config(); now != cfg {
		// The broker defaults changed while the logs were created.
		e.setLogOptions(hosted, now)
	}
	for _, p := range hosted {
		p.shard.adopt(p)
	}
	parts := append(slices.Clone(t.Partitions()), added...)
	e.mu.Lock()
	e.meta = next
	t.parts.Store(&parts)
	e.topicsGen.Add(1)
	e.mu.Unlock()
	e.metaMu.Unlock()
	e.logger.Info("added partitions", "topic", name, "from", cur, "to", total)
	return nil
}

// AlterTopicConfig applies changes to a topic's overrides: a nil value
// removes the override (back to the default). With replace, every
// override not in set is removed too (the legacy AlterConfigs).
func (e *Engine) AlterTopicConfig(name string, set map[string]*string, replace, validateOnly bool) error {
	return e.AlterTopicConfigWith(name, func(cfg *TopicConfig) (map[string]*string, error) {
		out := maps.Clone(set)
		if out == nil {
			out = map[string]*string{}
		}
		if replace {
			for k := range cfg.overrides {
				if _, named := out[k]; !named {
					out[k] = nil
				}
			}
		}
		return out, nil
	}, validateOnly)
}

// AlterTopicConfigWith changes a topic's overrides as change says, given
// the topic's configuration now: a nil value removes an override. change
// runs under the topic's admin lock, so a change computed from the
// current values (APPEND, the legacy replace) is not lost to another
// made meanwhile.
func (e *Engine) AlterTopicConfigWith(name string, change func(*TopicConfig) (map[string]*string, error), validateOnly bool) error {
	t, done, err := e.topicAdmin(name)
	if err != nil {
		return err
	}
	defer done()
	set, err := change(t.Config())
	if err != nil {
		return err
	}
	for k, v := range set {
		if v != nil {
			if err := ValidateTopicConfig(k, *v); err != nil {
				return fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
			}
		} else if _, ok := LookupTopicConfig(k); !ok {
			return fmt.Errorf("%w: unknown topic config %q", kerr.InvalidConfig, k)
		}
	}
	overrides := t.Config().Overrides()
	for k, v := range set {
		if v == nil {
			delete(overrides, k)
		} else {
			overrides[k] = *v
		}
	}
	if !e.cfg.Replicated {
		e.mu.RLock()
		next := e.topicConfig(overrides)
		e.mu.RUnlock()
		if err := CheckTopicConfigs(next, t.Config(), e.remote != nil); err != nil {
			return fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
		}
	}
	if validateOnly {
		return nil
	}

	e.metaMu.Lock()
	defer e.metaMu.Unlock()
	next := e.meta.clone()
	for i := range next.Topics {
		if next.Topics[i].Name == name {
			next.Topics[i].Configs = overrides
		}
	}
	if err := saveMeta(e.cfg.DataDir, e.cfg.Perm, next); err != nil {
		return fmt.Errorf("%w: write metadata: %w", kerr.KafkaStorageError, err)
	}
	cfg := e.topicConfig(overrides)
	e.mu.Lock()
	e.meta = next
	e.mu.Unlock()
	// Under metaMu, so that a concurrent change of the broker defaults
	// cannot be overtaken by this older view.
	t.config.Store(cfg)
	t.applyConfig(cfg)
	e.logger.Info("altered topic config", "topic", name, "overrides", overrides)
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
			if err := validateBrokerDefault(k, *v); err != nil {
				return fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
			}
		}
	}
	if validateOnly {
		e.metaMu.Lock()
		defer e.metaMu.Unlock()
		return e.checkTieredUnder(set)
	}
	if err := e.beginAdmin(); err != nil {
		return err
	}
	defer e.admin.Done()
	e.metaMu.Lock()
	defer e.metaMu.Unlock()
	if err := e.checkTieredUnder(set); err != nil {
		return err
	}
	var topics []*Topic
	err := e.writeMetaLocked(func(next *brokerMeta) error {
		next.BrokerConfigs = ApplyConfigSet(next.BrokerConfigs, set)
		return nil
	}, func() {
		e.defaultsGen++
		topics = make([]*Topic, 0, len(e.topics))
		for _, t := range e.topics {
			topics = append(topics, t)
		}
	})
	if err != nil {
		return err
	}
	// Topics being created see defaultsGen move; partitions being added
	// see their topic's config change (both checked under metaMu).
	for _, t := range topics {
		cfg := e.topicConfig(t.Config().overrides)
		t.config.Store(cfg)
		t.applyConfig(cfg)
	}
	return nil
}

// checkTieredUnder refuses new broker defaults under which a tiered
// topic's configuration would no longer be valid (compacted, local
// retention past retention), as its own change would be (metaMu held).
func (e *Engine) checkTieredUnder(set map[string]*string) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	defaults := ApplyConfigSet(e.meta.BrokerConfigs, set)
	for _, t := range e.topics {
		cur := t.Config()
		if !cur.RemoteStorage() {
			continue
		}
		if err := CheckTopicConfigs(e.topicConfigOver(cur.overrides, defaults), cur, true); err != nil {
			return fmt.Errorf("%w: topic %q is tiered: %w", kerr.InvalidConfig, t.Name, err)
		}
	}
	return nil
}

// writeMetaLocked writes a changed copy of the metadata durably and swaps
// it in (Engine.metaMu held): change edits the copy (its maps are still
// the old ones: replace them, never write them), swapped, when set, runs
// under Engine.mu right after the swap.
func (e *Engine) writeMetaLocked(change func(next *brokerMeta) error, swapped func()) error {
	next := e.meta.clone()
	if err := change(next); err != nil {
		return err
	}
	if err := saveMeta(e.cfg.DataDir, e.cfg.Perm, next); err != nil {
		return fmt.Errorf("%w: write metadata: %w", kerr.KafkaStorageError, err)
	}
	e.mu.Lock()
	e.meta = next
	if swapped != nil {
		swapped()
	}
	e.mu.Unlock()
	return nil
}

// ApplyConfigSet returns a copy of m with set applied: a key with a
// value set, one with nil removed; nil when empty.
func ApplyConfigSet(m map[string]string, set map[string]*string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range set {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = *v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// producerIDBlock is how many producer ids are reserved in the metadata
// file at once, so InitProducerId rarely writes it.
const producerIDBlock = 1000

// AllocateProducerID returns a fresh producer id; ids never repeat across
// restarts. Reserving a new block writes the metadata file, outside e.mu.
func (e *Engine) AllocateProducerID() (int64, error) {
	e.pidMu.Lock()
	defer e.pidMu.Unlock()
	if h := e.clusterHooks(); h != nil && h.AllocateProducerIDs != nil && e.nextPID >= e.pidLimit {
		first, count, err := h.AllocateProducerIDs()
		if err != nil {
			return 0, err
		}
		e.nextPID, e.pidLimit = first, first+int64(count)
	}
	if e.nextPID >= e.pidLimit {
		if err := e.beginAdmin(); err != nil {
			return 0, err
		}
		defer e.admin.Done()
		if err := e.saveNextProducerID(e.nextPID + producerIDBlock); err != nil {
			return 0, fmt.Errorf("%w: reserve producer ids: %w", kerr.KafkaStorageError, err)
		}
		e.pidLimit = e.nextPID + producerIDBlock
	}
	id := e.nextPID
	e.nextPID++
	return id, nil
}

// saveNextProducerID writes id into the metadata file as the first
// producer id a restart may hand out. The caller holds pidMu.
func (e *Engine) saveNextProducerID(id int64) error {
	e.metaMu.Lock()
	defer e.metaMu.Unlock()
	next := e.meta.clone()
	next.NextProducerID = id
	if err := saveMeta(e.cfg.DataDir, e.cfg.Perm, next); err != nil {
		return err
	}
	e.mu.Lock()
	e.meta = next
	e.mu.Unlock()
	return nil
}

// ParseTopicID decodes a topic id from its base64 or hex form.
func ParseTopicID(s string) (TopicID, error) {
	var id TopicID
	if err := id.UnmarshalText([]byte(s)); err == nil {
		return id, nil
	}
	return id, fmt.Errorf("bad topic id %q", s)
}
