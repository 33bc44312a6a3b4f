package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/cluster"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/cli"
	"github.com/ringlog/ringlog/internal/kwire"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/quorum"
	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/tiered"
)

const serveExamples = `
Examples:
  ringlog serve                                   # data in ./data, Kafka on 127.0.0.1:9092
  ringlog serve --kafka-addr 127.0.0.1:0 --native-addr 127.0.0.1:0 --http-addr 127.0.0.1:0   # free ports
  ringlog serve --topic-default retention.ms=3600000 --default-partitions 8
  ringlog serve --config ringlog.conf             # flags as "name = value" lines

Cluster mode (a Raft metadata quorum, ISR replication), three nodes on one
host:
  ringlog serve --node-id 1 --data-dir d1 --kafka-addr 127.0.0.1:9092 --controller-addr 127.0.0.1:9192 \
      --native-addr '' --http-addr '' --voters 1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194
  (nodes 2 and 3 alike, with their own ids, directories and ports; every
  node gets the same --voters)

Once listening it prints one line:
  ringlog ready kafka=HOST:PORT native=HOST:PORT http=HOST:PORT
SIGTERM or SIGINT stops it cleanly: requests in flight are answered, logs
flushed, and the data directory marked clean.
`

// kvList is a repeatable key=value flag.
type kvList map[string]string

func (k kvList) String() string { return "" }
func (k kvList) Set(v string) error {
	key, val, ok := strings.Cut(v, "=")
	if !ok || key == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	key, val = strings.TrimSpace(key), strings.TrimSpace(val)
	// Checked here, not after parsing, so that an error in a config
	// file names its file and line.
	if err := engine.ValidateTopicConfig(key, val); err != nil {
		return err
	}
	k[key] = val
	return nil
}

// serveFlags are the serve flags: most bind straight to a field of the
// broker's Config, the rest are converted after parsing.
type serveFlags struct {
	cfg                 broker.Config
	configFile          string
	nodeID              int
	defaultPartitions   int
	ioBackend           string
	ioBackendSource     string // where the backend choice came from: flag, config, env or default
	logLevel, logFormat string
	topicDefaults       kvList
	// The share-group settings engine.ShareConfig keeps in other units.
	shareLock, shareSession, shareHeartbeat time.Duration
	migration                               string
	shareDeliveryLimit                      int
	voters                                  string
	controllerAddr                          string
	sessionTimeout                          time.Duration
	heartbeatInterval                       time.Duration
	replicaLagMax                           time.Duration
	autoRebalance                           bool
	metadataAddr                            string
	replThrottle                            int64
	rack                                    string
	imbalanceInterval                       time.Duration
	imbalancePercent                        int
	replicationFactor                       int
	peerDialMap                             string
	listeners                               string
	advertisedListeners                     string
	kafkaProtocol                           string
	saslMechanisms                          string
	superUsers                              string
	// Tiered storage's object store (the credentials come from the
	// environment).
	remoteEndpoint, remoteBucket, remoteRegion, remotePrefix string
}

// serveFlagSet defines the serve flags on f. Every default is
// broker.DefaultConfig's, so the binary and the in-process test brokers
// cannot drift apart.
func serveFlagSet(f *serveFlags, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stdout) // --help
	def := broker.DefaultConfig()
	f.cfg = def
	c, e := &f.cfg, &f.cfg.Engine
	f.topicDefaults = kvList{}
	fs.StringVar(&f.configFile, "config", "", "read flags from `FILE` (lines of name = value; flags on the command line win)")
	fs.StringVar(&e.DataDir, "data-dir", def.Engine.DataDir, "directory for the metadata and the partition logs")
	fs.BoolVar(&e.Perm.GroupRead, "data-dir-group-access", def.Engine.Perm.GroupRead, "create what the broker writes under --data-dir group-readable (files 0640, directories 0750) instead of owner-only (0600, 0700); security.json and the cluster's metadata/ stay owner-only")
	fs.StringVar(&c.Kafka.Addr, "kafka-addr", def.Kafka.Addr, "Kafka protocol listener (port 0 picks a free port)")
	fs.StringVar(&c.Kafka.AdvertisedAddr, "advertised-kafka-addr", def.Kafka.AdvertisedAddr, "host:port given to clients in metadata (default: the bound address)")
	fs.StringVar(&c.NativeAddr, "native-addr", def.NativeAddr, "native (MyKafka) protocol listener (port 0 picks a free port; empty: off)")
	fs.StringVar(&c.HTTPAddr, "http-addr", def.HTTPAddr, "HTTP listener for /metrics, /healthz and /debug/pprof (empty: off); loopback only unless --http-insecure, /debug/pprof loopback only")
	fs.BoolVar(&c.Security.HTTPInsecure, "http-insecure", def.Security.HTTPInsecure, "allow --http-addr on an address that is not loopback (/metrics and /healthz have no authentication; /debug/pprof is still not served there)")
	fs.StringVar(&f.kafkaProtocol, "kafka-security-protocol", "PLAINTEXT", "security protocol of --kafka-addr: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (in cluster mode the inter-broker listener: PLAINTEXT or SSL)")
	fs.StringVar(&f.listeners, "listeners", "", "more Kafka listeners, `PROTOCOL://HOST:PORT,...` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), e.g. SASL_SSL://0.0.0.0:9095")
	fs.StringVar(&f.advertisedListeners, "advertised-listeners", "", "what clients of each --listeners entry are told to connect to, `PROTOCOL://HOST:PORT,...` (Kafka's advertised.listeners; default: the bound address)")
	fs.StringVar(&c.Security.TLS.CertFile, "tls-cert", def.Security.TLS.CertFile, "PEM certificate (chain) of SSL and SASL_SSL listeners; SIGHUP reloads it, with --tls-key and --tls-client-ca")
	fs.StringVar(&c.Security.TLS.KeyFile, "tls-key", def.Security.TLS.KeyFile, "PEM private key of --tls-cert")
	fs.StringVar(&c.Security.TLS.ClientCAFile, "tls-client-ca", def.Security.TLS.ClientCAFile, "PEM CAs that client certificates are checked against (mTLS; the principal is User:<certificate subject>)")
	fs.StringVar(&c.Security.TLS.ClientAuth, "tls-client-auth", def.Security.TLS.ClientAuth, "client certificates on SSL listeners: none, requested or required (ssl.client.auth; SASL_SSL listeners never ask)")
	fs.StringVar(&f.saslMechanisms, "sasl-mechanisms", "", "SASL mechanisms offered, comma-separated (default: PLAIN,SCRAM-SHA-256,SCRAM-SHA-512); PLAIN checks passwords against the SCRAM credentials")
	fs.BoolVar(&c.Security.Authorizer, "authorizer", def.Security.Authorizer, "check every request against the ACLs: deny unless an ACL allows (super users excepted)")
	fs.StringVar(&f.superUsers, "super-users", "", "principals allowed everything, separated by ';' (Kafka's super.users) or by ',' before each User:, e.g. 'User:admin;User:CN=broker-1,O=example'")
	fs.BoolVar(&c.Security.NativeInsecure, "native-insecure", def.Security.NativeInsecure, "accept a native listener anyone can use: --native-addr off loopback (the native protocol has no TLS or SASL), or without --authorizer beside SSL/SASL listeners")
	fs.StringVar(&c.Security.NativePrincipal, "native-principal", def.Security.NativePrincipal, "with --authorizer, the principal every native-protocol request acts as, checked against its ACLs (FETCH: READ, PRODUCE: WRITE, CREATE_TOPIC: CREATE, COMMIT_OFFSET: group READ, FETCH_OFFSET: group DESCRIBE); never a super user")
	fs.IntVar(&c.Kafka.Security.MaxUnauthenticatedConns, "max-unauthenticated-connections", def.Kafka.Security.MaxUnauthenticatedConns, "per SASL, SSL or SASL_SSL listener, connections not authenticated yet, TLS handshakes included; more are closed at accept (on a TLS listener a new one displaces the oldest handshake)")
	fs.IntVar(&c.Kafka.Security.MaxUnauthenticatedBytes, "max-unauthenticated-request-bytes", def.Kafka.Security.MaxUnauthenticatedBytes, "largest request accepted before authentication (sasl.server.max.receive.size), and the most of a connection's bytes held before it authenticated")
	fs.DurationVar(&c.Kafka.Security.AuthTimeout, "auth-timeout", def.Kafka.Security.AuthTimeout, "close a SASL connection not authenticated this long after it was accepted, and a TLS handshake not finished by then")
	fs.DurationVar(&c.Kafka.Security.FailedAuthDelay, "failed-auth-delay", def.Kafka.Security.FailedAuthDelay, "delay before answering a failed authentication (connection.failed.authentication.delay.ms)")
	fs.IntVar(&f.nodeID, "node-id", int(def.Engine.NodeID), "this broker's node id (in cluster mode, its id in --voters)")
	fs.StringVar(&f.voters, "voters", "", "cluster mode: the founding controllers as `ID@HOST:PORT,...` (the same list on every node for the cluster's life, also after `ringlog cluster quorum add-voter/remove-voter` changed the voters; a voter is a broker and a controller, a --node-id not listed is a broker-only node); empty: a single broker, no Raft")
	fs.StringVar(&f.metadataAddr, "metadata-addr", "", "cluster mode, a broker-only node (--node-id not in --voters): where the controller sends it the metadata log, host:port (default: the --kafka-addr host, a free port; open it to the voters; give a fixed port to a node that may become a voter)")
	fs.StringVar(&f.controllerAddr, "controller-addr", "", "cluster mode: the metadata quorum (Raft) listener, host:port (default: this node's address in --voters)")
	fs.DurationVar(&f.sessionTimeout, "broker-session-timeout", cluster.DefaultSessionTimeout, "cluster mode: the controller fences a broker it has not heard from for this long and elects new leaders for its partitions (broker.session.timeout.ms)")
	fs.DurationVar(&f.heartbeatInterval, "broker-heartbeat-interval", cluster.DefaultHeartbeatInterval, "cluster mode: how often a broker heartbeats the controller (broker.heartbeat.interval.ms)")
	fs.DurationVar(&f.replicaLagMax, "replica-lag-time-max", cluster.DefaultReplicaLagMax, "cluster mode: a follower not caught up with its leader for this long leaves the ISR (replica.lag.time.max.ms)")
	fs.BoolVar(&c.Kafka.FollowerFetching, "follower-fetching", false, "cluster mode: consumers that name their rack (client.rack) read from an in-sync replica in it, not from a leader in another rack (KIP-392; Kafka's RackAwareReplicaSelector)")
	fs.StringVar(&f.rack, "rack", "", "cluster mode: this broker's rack (broker.rack): new topics and generated reassignment plans spread each partition's replicas over racks")
	fs.Int64Var(&f.replThrottle, "replication-throttle-bytes", 0, "cluster mode: at most this many bytes a second fetched for the replicas being moved onto this broker (reassignment), so a move does not starve producers; in-sync replication is never throttled (0: no throttle)")
	fs.BoolVar(&f.autoRebalance, "auto-leader-rebalance", true, "cluster mode: the controller gives partitions back to their preferred replica when a broker leads too few of the ones it prefers (auto.leader.rebalance.enable)")
	fs.DurationVar(&f.imbalanceInterval, "leader-imbalance-check-interval", cluster.DefaultLeaderImbalanceCheckInterval, "cluster mode: how often the controller checks the leader balance (leader.imbalance.check.interval.seconds)")
	fs.IntVar(&f.imbalancePercent, "leader-imbalance-per-broker-percentage", cluster.DefaultLeaderImbalancePercent, "cluster mode: the share of a broker's preferred partitions led elsewhere above which the balance check moves them back (leader.imbalance.per.broker.percentage)")
	fs.IntVar(&f.replicationFactor, "default-replication-factor", 0, "cluster mode: replication factor of auto-created topics and of CreateTopics with -1 (0: min(3, voters))")
	fs.StringVar(&f.peerDialMap, "peer-dial-map", "", "cluster mode, for tests: connect to another broker's address through a different one, `FROM=TO,...` (host:port pairs; fault-injection proxies between brokers)")
	fs.StringVar(&f.remoteEndpoint, "remote-storage-endpoint", "", "tiered storage: the S3-compatible object store's `URL` (path-style; credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); topics with remote.storage.enable=true copy their closed segments there and read them back (in cluster mode, give every broker the same store)")
	fs.StringVar(&f.remoteBucket, "remote-storage-bucket", "", "tiered storage: the bucket (it must exist)")
	fs.StringVar(&f.remoteRegion, "remote-storage-region", "us-east-1", "tiered storage: the region requests are signed for")
	fs.StringVar(&f.remotePrefix, "remote-storage-prefix", "", "tiered storage: a prefix of every object key (to share a bucket)")
	fs.DurationVar(&e.Tier.RequestTimeout, "remote-storage-request-timeout", def.Engine.Tier.RequestTimeout, "tiered storage: the bound on one request to the object store (an interrupted copy's objects are deleted again twice this long after)")
	fs.DurationVar(&e.Tier.Interval, "remote-log-manager-interval", def.Engine.Tier.Interval, "tiered storage: how often closed segments are looked for to copy, and remote ones to expire")
	fs.Int64Var(&e.Tier.CacheBytes, "remote-fetch-cache-bytes", def.Engine.Tier.CacheBytes, "tiered storage: memory for the chunks of remote segments that fetches read (at least 16 MiB; a remote batch may be up to an eighth of it, 64 MiB at most)")
	fs.BoolVar(&e.AutoCreateTopics, "auto-create-topics", def.Engine.AutoCreateTopics, "create unknown topics on metadata requests and produce")
	fs.Float64Var(&e.AutoCreateRate, "auto-create-topics-rate", def.Engine.AutoCreateRate, "topics a second clients may auto-create (bursts of --auto-create-topics-burst); past it a name is answered UNKNOWN_TOPIC_OR_PARTITION (retriable) and logged")
	fs.IntVar(&e.AutoCreateBurst, "auto-create-topics-burst", def.Engine.AutoCreateBurst, "auto-creations allowed at once before --auto-create-topics-rate paces them")
	fs.Int64Var(&e.ScrubBytesPerSec, "scrub-bytes-per-sec", def.Engine.ScrubBytesPerSec, "the scrubber re-reads sealed segments at most this fast, checking every batch's CRC32C; damage is logged, counted and never served, and a follower refetches it (negative: no scrubber)")
	fs.DurationVar(&e.ScrubInterval, "scrub-interval", def.Engine.ScrubInterval, "how often the scrubber checks each sealed segment")
	fs.DurationVar(&e.DiskFullRetry, "disk-full-retry", def.Engine.DiskFullRetry, "how often a partition a full disk took offline checks whether the disk has room again (then it accepts appends without a restart)")
	fs.Int64Var(&e.DiskFullResumeBytes, "disk-full-resume-bytes", def.Engine.DiskFullResumeBytes, "free bytes on the data directory's file system that bring a partition a full disk took offline back")
	fs.IntVar(&e.MaxHostedPartitions, "max-partitions", def.Engine.MaxHostedPartitions, "partitions this broker hosts at most (every topic, internal ones too); a creation past it, or one needing more file descriptors than the process may open, is refused POLICY_VIOLATION")
	fs.IntVar(&f.defaultPartitions, "default-partitions", int(def.Engine.DefaultPartitions), "partitions of auto-created topics and of CreateTopics with -1")
	fs.IntVar(&e.Shards, "shards", def.Engine.Shards, "writer shards (0: one per CPU)")
	fs.IntVar(&c.Kafka.EventLoops, "event-loops", def.Kafka.EventLoops, "event loops reading the Kafka connections (0: one per CPU)")
	fs.Int64Var(&e.PassBytes, "shard-pass-bytes", def.Engine.PassBytes, "bytes of produce requests a writer shard writes (and syncs) in one group commit at most; bounds how long the first request of a busy shard's pass waits for its answer")
	fs.Int64Var(&e.ShardQueueBytes, "shard-queue-bytes", def.Engine.ShardQueueBytes, "bytes of produce requests queued per writer shard before the broker stops reading from the connections that feed it")
	fs.IntVar(&c.Kafka.MaxRequestBytes, "max-request-bytes", def.Kafka.MaxRequestBytes, "largest request frame accepted; larger ones close the connection before being read")
	fs.Int64Var(&c.Kafka.MaxUncompressedBatchBytes, "max-uncompressed-batch-bytes", def.Kafka.MaxUncompressedBatchBytes, "most a produced compressed batch's records may decompress to (each is validated as a stream); larger ones are refused MESSAGE_TOO_LARGE, a small decompression bomb costs at most this much work")
	fs.IntVar(&c.Kafka.MaxConnections, "max-connections", def.Kafka.MaxConnections, "client connections accepted at once")
	fs.DurationVar(&c.Kafka.IdleTimeout, "connections-max-idle", def.Kafka.IdleTimeout, "close a connection that sent nothing and awaits no response for this long (connections.max.idle.ms)")
	fs.DurationVar(&c.Kafka.RequestReadTimeout, "request-read-timeout", def.Kafka.RequestReadTimeout, "close a connection whose request frame, once started, is not complete within this (slow senders)")
	fs.IntVar(&c.Kafka.FetchCopyBelow, "fetch-copy-below", def.Kafka.FetchCopyBelow, "a fetched partition's records shorter than this many `bytes` are copied into the response and sent with its headers in one system call; longer ones go with sendfile (0: always sendfile)")
	fs.IntVar(&c.Kafka.FetchSessions, "fetch-sessions", def.Kafka.FetchSessions, "fetch sessions (KIP-227) kept per listener: a consumer in one sends only the partitions whose position changed and gets only those with something new; when all are taken, one unused for 2 minutes is evicted, else the client fetches without one (0: no sessions)")
	fs.IntVar(&c.Kafka.MaxInflightPerConn, "max-inflight-per-conn", def.Kafka.MaxInflightPerConn, "unanswered requests per connection before the broker stops reading it")
	fs.Int64Var(&c.Kafka.MaxPausedBytes, "max-paused-bytes", def.Kafka.MaxPausedBytes, "bytes, per listener, that clients may send to connections the broker is not reading (backpressure); the connection that would pass this, or send more than --max-request-bytes, is closed")
	fs.StringVar(&f.ioBackend, "io-backend", string(def.Engine.Backend), "auto (hybrid), hybrid, io_uring or pwritev; without the flag, env "+ring.EnvBackend+" when set")
	fs.Int64Var(&e.WritebackBytes, "writeback-bytes", def.Engine.WritebackBytes, "start the kernel's writeback of each partition's new data every this many bytes, so dirty page cache stays small and appends are not throttled in bursts (0: leave writeback to the kernel)")
	fs.Int64Var(&e.PageCacheTailBytes, "page-cache-tail-bytes", def.Engine.PageCacheTailBytes, "drop each partition's written-back data from the page cache once it lies this many bytes behind the tail, so appends reuse those pages instead of taking fresh ones; consumers further behind read the disk (0: leave the page cache to the kernel; needs --writeback-bytes)")
	fs.BoolVar(&e.DirectWrites, "direct-writes", def.Engine.DirectWrites, "write appends with O_DIRECT, past the page cache: no page-cache pages are allocated and filled for them (less CPU per produced byte), consumers read the disk; --writeback-bytes and --page-cache-tail-bytes then do nothing (Linux; the data directory's file system must support O_DIRECT, tmpfs does not)")
	fs.BoolVar(&e.WriteCaching, "write-caching", def.Engine.WriteCaching, "acknowledge acks=all from the page cache (no fdatasync) for every topic")
	fs.BoolVar(&e.RepairCorruptLogs, "repair-corrupt-logs", def.Engine.RepairCorruptLogs, "at start, move damaged bytes in the middle of a log aside and keep every valid batch (default: keep such a partition offline)")
	fs.DurationVar(&e.RetentionCheckInterval, "retention-check-interval", def.Engine.RetentionCheckInterval, "how often retention runs")
	fs.DurationVar(&e.HighWatermarkCheckpointInterval, "replica-high-watermark-checkpoint-interval", def.Engine.HighWatermarkCheckpointInterval,
		"cluster mode: how often the partitions' high watermarks are written to the data directory's replication-offset-checkpoint, where a broker killed with -9 restarts from (replica.high.watermark.checkpoint.interval.ms)")
	fs.DurationVar(&e.Groups.MinSessionTimeout, "group-min-session-timeout", def.Engine.Groups.MinSessionTimeout, "smallest session timeout a group member may ask for (group.min.session.timeout.ms)")
	fs.DurationVar(&e.Transactions.MaxTimeout, "transaction-max-timeout", def.Engine.Transactions.MaxTimeout, "largest transaction.timeout.ms a transactional producer may ask for (transaction.max.timeout.ms)")
	fs.DurationVar(&e.Transactions.IDExpiration, "transactional-id-expiration", def.Engine.Transactions.IDExpiration, "forget a transactional id idle this long (transactional.id.expiration.ms)")
	fs.DurationVar(&e.ProducerIDExpiration, "producer-id-expiration", def.Engine.ProducerIDExpiration, "forget a partition's producer whose last batch there is this old and that has no open transaction (producer.id.expiration.ms); checked with retention")
	fs.DurationVar(&e.Groups.MaxSessionTimeout, "group-max-session-timeout", def.Engine.Groups.MaxSessionTimeout, "largest session timeout a group member may ask for (group.max.session.timeout.ms)")
	fs.IntVar(&e.Groups.MaxMetadataBytes, "group-max-metadata-bytes", def.Engine.Groups.MaxMetadataBytes, "protocol metadata (subscriptions) all members of one group may hold; a JoinGroup or ConsumerGroupHeartbeat past it is refused GROUP_MAX_SIZE_REACHED")
	fs.DurationVar(&e.Groups.Consumer.SessionTimeout, "group-consumer-session-timeout", def.Engine.Groups.Consumer.SessionTimeout, "KIP-848 consumer-protocol groups: how long a member may go without a heartbeat before it is removed (group.consumer.session.timeout.ms)")
	fs.DurationVar(&e.Groups.Consumer.HeartbeatInterval, "group-consumer-heartbeat-interval", def.Engine.Groups.Consumer.HeartbeatInterval, "KIP-848 consumer-protocol groups: the heartbeat interval members are told; a new assignment reaches a member at its next heartbeat (group.consumer.heartbeat.interval.ms)")
	fs.IntVar(&e.Groups.Consumer.MaxSize, "group-consumer-max-size", def.Engine.Groups.Consumer.MaxSize, "KIP-848 consumer-protocol groups: the most members one group may have, 0 for no limit; a join past it gets GROUP_MAX_SIZE_REACHED (group.consumer.max.size)")
	fs.StringVar(&f.migration, "group-consumer-migration-policy", string(def.Engine.Groups.MigrationPolicy), "which live groups may switch between the classic protocol (JoinGroup) and the KIP-848 consumer protocol with their members: bidirectional, upgrade (classic to consumer only), downgrade or disabled (only an empty group switches); a group that may not gets GROUP_ID_NOT_FOUND or INCONSISTENT_GROUP_PROTOCOL (group.consumer.migration.policy)")
	fs.IntVar(&e.Groups.Share.MaxGroups, "group-share-max-groups", def.Engine.Groups.Share.MaxGroups, "KIP-932 share groups: the most share groups the broker holds; a join of one more gets GROUP_MAX_SIZE_REACHED (group.share.max.groups; Kafka's default is 10)")
	fs.IntVar(&e.Groups.Share.Group.MaxSize, "group-share-max-size", def.Engine.Groups.Share.Group.MaxSize, "share groups: the most members one share group may have (group.share.max.size)")
	fs.IntVar(&e.Groups.Share.MaxInFlight, "group-share-max-record-locks", def.Engine.Groups.Share.MaxInFlight, "share groups: the most records in flight (from the start offset to the last acquired) per share-partition, 100 to 100000; fetches acquire nothing new past it (group.share.partition.max.record.locks)")
	fs.DurationVar(&f.shareLock, "group-share-record-lock-duration", def.Engine.Groups.Share.LockDuration, "share groups: how long a fetched record stays locked to its member before it is delivered again; the group config share.record.lock.duration.ms overrides it (group.share.record.lock.duration.ms)")
	fs.IntVar(&f.shareDeliveryLimit, "group-share-delivery-count-limit", int(def.Engine.Groups.Share.DeliveryLimit), "share groups: deliveries of a record before it is archived instead of delivered again, 2 to 10; the group config share.delivery.count.limit overrides it")
	fs.DurationVar(&f.shareSession, "group-share-session-timeout", time.Duration(def.Engine.Groups.Share.Group.SessionMillis)*time.Millisecond, "share groups: a member silent this long is removed and its records released (group.share.session.timeout.ms)")
	fs.DurationVar(&f.shareHeartbeat, "group-share-heartbeat-interval", time.Duration(def.Engine.Groups.Share.Group.HeartbeatMillis)*time.Millisecond, "share groups: the heartbeat interval members are told (group.share.heartbeat.interval.ms)")
	fs.IntVar(&c.Kafka.ShareSessions, "share-sessions", def.Kafka.ShareSessions, "share sessions (KIP-932 share consumers, one per member and broker) kept per listener; a new one past it gets SHARE_SESSION_LIMIT_REACHED")
	fs.DurationVar(&e.Groups.InitialRebalanceDelay, "group-initial-rebalance-delay", def.Engine.Groups.InitialRebalanceDelay, "how long a new group waits for more members before its first generation (group.initial.rebalance.delay.ms)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", def.ShutdownTimeout, "how long SIGTERM waits for requests in flight")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.Var(f.topicDefaults, "topic-default", "broker default of a topic config, `key=value` (repeatable), e.g. retention.ms=3600000")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: ringlog serve [flags]\n\nRuns the broker.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), serveExamples)
	}
	return fs
}

// config is the broker configuration the parsed flags describe; the
// settings the broker refuses are usage errors.
func (f *serveFlags) config() (broker.Config, error) {
	cfg := f.cfg
	cfg.Engine.NodeID = int32(f.nodeID)
	cfg.Engine.DefaultPartitions = int32(f.defaultPartitions)
	if cfg.Kafka.FetchSessions == 0 {
		cfg.Kafka.FetchSessions = -1 // netio's zero is its default
	}
	if len(f.topicDefaults) > 0 {
		cfg.Engine.TopicDefaults = f.topicDefaults
	}
	var err error
	if cfg.Engine.Backend, err = ring.ParseKind(f.ioBackend); err != nil {
		if f.ioBackendSource == "env" {
			return cfg, cli.Usagef("%s: %v", ring.EnvBackend, err)
		}
		return cfg, cli.Usagef("--io-backend: %v", err)
	}
	if cfg.Kafka.Protocol, err = netio.ParseSecurityProtocol(f.kafkaProtocol); err != nil {
		return cfg, cli.Usagef("--kafka-security-protocol: %v", err)
	}
	if cfg.Listeners, err = broker.ParseListeners(f.listeners); err != nil {
		return cfg, cli.Usagef("--listeners: %v", err)
	}
	if err := broker.SetAdvertised(cfg.Listeners, f.advertisedListeners); err != nil {
		return cfg, cli.Usagef("--advertised-listeners: %v", err)
	}
	cfg.Security.SASLMechanisms = splitList(f.saslMechanisms)
	cfg.Security.SuperUsers = splitPrincipals(f.superUsers)
	for _, u := range cfg.Security.SuperUsers {
		if !strings.HasPrefix(u, "User:") || len(u) == len("User:") {
			return cfg, cli.Usagef("--super-users: %q is not a principal of the form User:NAME", u)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, cli.Usagef("--%v", err)
	}
	if c := cfg.Engine.Groups.Consumer; c.HeartbeatInterval <= 0 || c.SessionTimeout <= c.HeartbeatInterval || c.MaxSize < 0 {
		return cfg, cli.Usagef("--group-consumer-heartbeat-interval (%v) must be positive and shorter than --group-consumer-session-timeout (%v), and --group-consumer-max-size (%d) at least 0", c.HeartbeatInterval, c.SessionTimeout, c.MaxSize)
	}
	policy, err := engine.ParseMigrationPolicy(f.migration)
	if err != nil {
		return cfg, cli.Usagef("--group-consumer-migration-policy: %v", err)
	}
	cfg.Engine.Groups.MigrationPolicy = policy
	sh := &cfg.Engine.Groups.Share
	if f.shareLock < time.Second || f.shareDeliveryLimit < 2 || f.shareDeliveryLimit > 10 || f.shareHeartbeat <= 0 || f.shareSession <= f.shareHeartbeat ||
		sh.MaxGroups < 1 || sh.Group.MaxSize < 1 || sh.MaxInFlight < 100 || sh.MaxInFlight > 100000 || cfg.Kafka.ShareSessions < 1 {
		return cfg, cli.Usagef("share groups: --group-share-record-lock-duration (%v) must be at least 1s, --group-share-delivery-count-limit (%d) 2 to 10, --group-share-heartbeat-interval (%v) positive and shorter than --group-share-session-timeout (%v), --group-share-max-record-locks 100 to 100000, and --group-share-max-groups, --group-share-max-size and --share-sessions at least 1",
			f.shareLock, f.shareDeliveryLimit, f.shareHeartbeat, f.shareSession)
	}
	sh.LockDuration, sh.DeliveryLimit = f.shareLock, int16(f.shareDeliveryLimit)
	sh.Group.SessionMillis, sh.Group.HeartbeatMillis = f.shareSession.Milliseconds(), int32(f.shareHeartbeat.Milliseconds())
	if f.remoteEndpoint != "" || f.remoteBucket != "" {
		if cfg.Engine.Tier.Interval <= 0 || cfg.Engine.Tier.RequestTimeout <= 0 || cfg.Engine.Tier.CacheBytes < 16<<20 {
			return cfg, cli.Usagef("--remote-log-manager-interval and --remote-storage-request-timeout must be positive and --remote-fetch-cache-bytes at least 16 MiB (a remote batch may take up to an eighth of it)")
		}
		store, err := tiered.NewS3(tiered.S3Config{
			Endpoint: f.remoteEndpoint, Bucket: f.remoteBucket, Region: f.remoteRegion,
			AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
			Timeout: cfg.Engine.Tier.RequestTimeout,
		})
		if err != nil {
			return cfg, cli.Usagef("--remote-storage-endpoint: %v", err)
		}
		cfg.Engine.Tier.Store, cfg.Engine.Tier.Prefix = store, f.remotePrefix
	}
	if f.voters == "" {
		if f.controllerAddr != "" {
			return cfg, cli.Usagef("--controller-addr needs --voters (cluster mode)")
		}
		if f.metadataAddr != "" {
			return cfg, cli.Usagef("--metadata-addr needs --voters (cluster mode, a broker-only node)")
		}
		if f.rack != "" {
			return cfg, cli.Usagef("--rack needs --voters (cluster mode: racks spread replicas over brokers)")
		}
		if cfg.Kafka.FollowerFetching {
			return cfg, cli.Usagef("--follower-fetching needs --voters (cluster mode: a single broker has no followers)")
		}
		return cfg, nil
	}
	voters, err := quorum.ParseVoters(f.voters)
	if err != nil {
		return cfg, cli.Usagef("--voters: %v", err)
	}
	bindMeta, advertiseHost := f.controllerAddr, ""
	if _, voter := voters.Lookup(cfg.Engine.NodeID); voter {
		if f.metadataAddr != "" {
			return cfg, cli.Usagef("--metadata-addr is for broker-only nodes; node %d is a voter (its Raft listener is --controller-addr)", cfg.Engine.NodeID)
		}
	} else {
		if f.controllerAddr != "" {
			return cfg, cli.Usagef("node %d is not in --voters, so it is a broker-only node: it has no --controller-addr (use --metadata-addr, or add it to --voters on every node)", cfg.Engine.NodeID)
		}
		if bindMeta, advertiseHost, err = brokerOnlyMetadataAddr(f.metadataAddr, cfg.Kafka.Addr, cfg.Kafka.AdvertisedAddr); err != nil {
			return cfg, err
		}
	}
	if f.sessionTimeout <= 0 || f.heartbeatInterval <= 0 || f.replicaLagMax <= 0 {
		return cfg, cli.Usagef("--broker-session-timeout, --broker-heartbeat-interval and --replica-lag-time-max must be positive")
	}
	if f.imbalanceInterval <= 0 || f.imbalancePercent < 1 || f.imbalancePercent > 100 {
		return cfg, cli.Usagef("--leader-imbalance-check-interval must be positive and --leader-imbalance-per-broker-percentage 1 to 100")
	}
	if len(f.rack) > 255 {
		return cfg, cli.Usagef("--rack: %d bytes; use at most 255", len(f.rack))
	}
	if f.replThrottle < 0 {
		return cfg, cli.Usagef("--replication-throttle-bytes %d: use 0 (no throttle) or a rate in bytes a second", f.replThrottle)
	}
	if f.heartbeatInterval >= f.sessionTimeout {
		return cfg, cli.Usagef("--broker-heartbeat-interval %v must be shorter than --broker-session-timeout %v (several heartbeats a session)", f.heartbeatInterval, f.sessionTimeout)
	}
	if f.replicationFactor < 0 || f.replicationFactor > len(voters) {
		return cfg, cli.Usagef("--default-replication-factor %d: use 1 to %d (the number of --voters), or 0 for min(3, voters)", f.replicationFactor, len(voters))
	}
	dial, err := peerDialer(f.peerDialMap)
	if err != nil {
		return cfg, cli.Usagef("--peer-dial-map: %v", err)
	}
	cfg.Cluster = &cluster.Config{NodeID: cfg.Engine.NodeID, Voters: voters, ControllerAddr: bindMeta, AdvertiseHost: advertiseHost, Dial: dial,
		SessionTimeout: f.sessionTimeout, HeartbeatInterval: f.heartbeatInterval, ReplicaLagMax: f.replicaLagMax,
		DefaultReplicationFactor: int16(f.replicationFactor), AutoLeaderRebalance: f.autoRebalance,
		LeaderImbalanceCheckInterval: f.imbalanceInterval, LeaderImbalancePercent: f.imbalancePercent,
		ReplicationThrottle: f.replThrottle, Rack: f.rack}
	cfg.Engine.Replicated = true
	return cfg, nil
}

// brokerOnlyMetadataAddr is where a broker-only node's metadata listener
// binds (--metadata-addr, else the Kafka listener's host on a free port)
// and the host it is reached at (the bind host unless a wildcard, then
// the advertised Kafka host).
func brokerOnlyMetadataAddr(flag, kafkaAddr, advertisedKafka string) (bind, host string, err error) {
	bind = flag
	if bind == "" {
		h, _, err := net.SplitHostPort(kafkaAddr)
		if err != nil {
			return "", "", cli.Usagef("--kafka-addr %q: %v", kafkaAddr, err)
		}
		bind = net.JoinHostPort(h, "0")
	}
	h, _, err := net.SplitHostPort(bind)
	if err != nil {
		return "", "", cli.Usagef("--metadata-addr %q: %v", bind, err)
	}
	if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
		return bind, "", nil
	}
	if advertisedKafka != "" {
		if ah, _, err := net.SplitHostPort(advertisedKafka); err == nil && ah != "" {
			return bind, ah, nil
		}
	}
	return "", "", cli.Usagef("this broker-only node's metadata listener binds %s, which the controller cannot dial: give --advertised-kafka-addr (its host is used) or --metadata-addr HOST:PORT", bind)
}

// resolveBackend decides which --io-backend wins: the flag on the command
// line, then the config file, then the environment variable
// RINGLOG_BACKEND, then the default. It records where the choice came
// from in ioBackendSource.
func (f *serveFlags) resolveBackend(fs *flag.FlagSet, fromCommandLine map[string]bool, env string) {
	set := false
	fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "io-backend" })
	switch {
	case fromCommandLine["io-backend"]:
		f.ioBackendSource = "flag"
	case set:
		f.ioBackendSource = "config"
	case env != "":
		f.ioBackend, f.ioBackendSource = env, "env"
	default:
		f.ioBackendSource = "default"
	}
}

// applyConfigFile sets every flag named in the file that was not given on
// the command line.
func applyConfigFile(fs *flag.FlagSet, path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return cli.Usagef("--config: %v", err)
	}
	defer fh.Close()
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return cli.Usagef("%s:%d: want name = value", path, n)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "config" {
			return cli.Usagef("%s:%d: config files do not nest", path, n)
		}
		if fs.Lookup(k) == nil {
			return cli.Usagef("%s:%d: unknown setting %q (settings are the serve flags without dashes)", path, n, k)
		}
		if given[k] && k != "topic-default" {
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return cli.Usagef("%s:%d: %s: %v", path, n, k, err)
		}
	}
	return sc.Err()
}

func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, cli.Usagef("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, cli.Usagef("--log-format %q: use text or json", format)
}

func runServe(args []string, stdout, stderr io.Writer) error {
	var f serveFlags
	fs := serveFlagSet(&f, stdout)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("serve takes no arguments, got %q", fs.Args())
	}
	fromCommandLine := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { fromCommandLine[fl.Name] = true })
	if f.configFile != "" {
		if err := applyConfigFile(fs, f.configFile); err != nil {
			return err
		}
	}
	logger, err := newLogger(f.logLevel, f.logFormat, stderr)
	if err != nil {
		return err
	}
	envBackend := strings.TrimSpace(os.Getenv(ring.EnvBackend))
	f.resolveBackend(fs, fromCommandLine, envBackend)
	cfg, err := f.config()
	if err != nil {
		return err
	}
	if envBackend != "" && f.ioBackendSource != "env" {
		logger.Warn(ring.EnvBackend+" ignored: --io-backend was given", "env", envBackend, "io_backend", f.ioBackend, "from", f.ioBackendSource)
	}
	// The engine's ring.New lets the variable override the kind it is
	// given; the choice made above is final, so the variable goes.
	os.Unsetenv(ring.EnvBackend)
	cfg.Logger = logger
	cfg.Build = buildVersion()
	e := cfg.Engine
	if cfg.Cluster != nil {
		logger.Info("cluster mode", "node_id", cfg.Cluster.NodeID, "voters", cfg.Cluster.Voters.String(), "controller_addr", f.controllerAddr,
			"metadata_addr", f.metadataAddr)
	}
	logger.Info("starting ringlog", "version", cfg.Build.Version, "data_dir", e.DataDir, "kafka_addr", cfg.Kafka.Addr, "http_addr", cfg.HTTPAddr,
		"io_backend", cfg.Engine.Backend, "io_backend_from", f.ioBackendSource, "shards", e.Shards, "write_caching", e.WriteCaching, "writeback_bytes", e.WritebackBytes, "page_cache_tail_bytes", e.PageCacheTailBytes, "direct_writes", e.DirectWrites, "topic_defaults", e.TopicDefaults)
	if e.PageCacheTailBytes > 0 && e.WritebackBytes == 0 {
		logger.Warn("--page-cache-tail-bytes drops only data whose writeback was started: with --writeback-bytes 0 nothing is dropped (set both, or --page-cache-tail-bytes 0 to say so)")
	}
	b, err := broker.New(cfg)
	if err != nil {
		return err
	}
	nativeAddr, httpAddr := orOff(b.NativeAddr()), orOff(b.HTTPAddr())
	// The ready line promises a clean stop on SIGTERM: catch the signals
	// before printing it, or a supervisor that signals as soon as it
	// reads the line kills the process uncleanly.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	extra := ""
	for i, l := range b.Listeners() {
		extra += fmt.Sprintf(" %s=%s", strings.ToLower(cfg.Listeners[i].Protocol.String()), l.Addr())
	}
	logger.Info("listening", "kafka", b.KafkaAddr(), "kafka_protocol", cfg.Kafka.Protocol.String(), "listeners", strings.TrimSpace(extra), "native", nativeAddr, "http", httpAddr, "backend", b.Engine().BackendName(), "backend_from", f.ioBackendSource)
	fmt.Fprintf(stdout, "ringlog ready kafka=%s native=%s http=%s%s\n", b.KafkaAddr(), nativeAddr, httpAddr, extra)

	for stop := false; !stop; {
		select {
		case <-hup:
			if err := b.ReloadTLS(); err != nil {
				logger.Error("SIGHUP: TLS reload failed; the previous certificate stays in use", "err", err)
			}
		case got := <-sig:
			signal.Stop(sig)
			logger.Info("shutting down", "signal", got.String())
			stop = true
		case <-b.Failed():
			signal.Stop(sig)
			err := b.Cluster().Err()
			logger.Error("stopping: cluster mode failed", "err", err)
			if cerr := b.Close(); cerr != nil {
				logger.Warn("close", "err", cerr)
			}
			return err
		}
	}
	if err := b.Shutdown(); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string { return splitOn(v, ",") }

// splitPrincipals splits a list of principals. A certificate principal
// holds commas ("User:CN=b1,O=example"), so ';' separates them, as in
// Kafka's super.users; without any ';', a ',' separates them only where
// the next principal starts ("User:a,User:b").
func splitPrincipals(v string) []string {
	if strings.Contains(v, ";") {
		return splitOn(v, ";")
	}
	var out []string
	for _, item := range strings.Split(v, ",") {
		if n := len(out); n > 0 && !strings.HasPrefix(strings.TrimSpace(item), "User:") {
			out[n-1] += "," + item
			continue
		}
		out = append(out, item)
	}
	return splitOn(strings.Join(out, ";"), ";")
}

// splitOn splits v on sep, trimming spaces and dropping empty items.
func splitOn(v, sep string) []string {
	var out []string
	for _, item := range strings.Split(v, sep) {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// orOff is the ready line's word for a listener: its address, or "off".
func orOff(addr string) string {
	if addr == "" {
		return "off"
	}
	return addr
}

// peerDialer parses --peer-dial-map (FROM=TO host:port pairs) into a dialer
// that connects to TO whenever a broker connection names FROM; nil when
// the map is empty.
func peerDialer(spec string) (kwire.DialFunc, error) {
	if spec == "" {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(spec, ",") {
		from, to, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not FROM=TO", kv)
		}
		for _, a := range []string{from, to} {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("%q: %v", a, err)
			}
		}
		m[from] = to
	}
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if to, ok := m[addr]; ok {
			addr = to
		}
		return d.DialContext(ctx, network, addr)
	}, nil
}
