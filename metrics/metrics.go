// Package metrics owns the broker's Prometheus instruments: request counts
// and latencies per Kafka API, connections, zero-copy versus copied fetch
// bytes, fsync latency, and a collector that reads per-partition counters
// and offsets, and each consumer group's committed offsets and lag, from
// the engine at scrape time (so the produce and fetch paths only bump
// atomics).
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ringlog/ringlog/engine"
)

// Metrics is the set of instruments of one broker.
type Metrics struct {
	Registry *prometheus.Registry

	requests  *prometheus.CounterVec
	errors    *prometheus.CounterVec
	latencies *prometheus.HistogramVec
	byKey     [128]apiInstruments

	Connections     prometheus.Gauge
	ConnectionsOpen prometheus.Counter
	// ConnectionsClosed counts connections the broker closed on its own
	// initiative, by reason: "max_connections" (refused at accept),
	// "idle" (--connections-max-idle), "request_timeout"
	// (--request-read-timeout).
	ConnectionsClosed *prometheus.CounterVec
	SendfileBytes     prometheus.Counter
	CopiedBytes       prometheus.Counter
	// DirectReadBytes counts request bytes read from a socket straight
	// into their frame's buffer, past gnet's read buffer.
	DirectReadBytes prometheus.Counter
	// FetchesParked is the long-poll fetches waiting for data now.
	FetchesParked prometheus.Gauge
	// WritersStarted counts connections whose responses needed a writer
	// goroutine of their own: one over 1 MiB, or a socket that was full.
	WritersStarted prometheus.Counter
	// ResponseWrites counts the writes that sent responses to clients;
	// one write sends every ready response at a connection's head, so
	// pipelined requests read together are answered with fewer writes
	// than responses.
	ResponseWrites prometheus.Counter
	SyncSeconds    prometheus.Histogram
	// FetchSessions is the fetch sessions (KIP-227) held now, over all
	// listeners; FetchSessionEvictions counts those a new one evicted.
	FetchSessions         prometheus.Gauge
	FetchSessionEvictions prometheus.Counter
	// NativeDenied counts native-protocol requests the ACLs refused
	// (the listener's --native-principal lacked the operation).
	NativeDenied prometheus.Counter
}

type apiInstruments struct {
	requests prometheus.Counter
	errors   prometheus.Counter
	latency  prometheus.Observer
}

// API names one Kafka API whose requests are counted: its key, and its
// name (the "api" label).
type API struct {
	Key  int16
	Name string
}

// New builds the instruments, those of every API in apis included, and
// registers them (with the Go runtime and process collectors) in a fresh
// registry. The per-API set is fixed here, before any request can be
// counted: Request only reads it. Requests of other keys are not counted.
func New(apis ...API) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlog_requests_total", Help: "Kafka requests handled, by API.",
	}, []string{"api"})
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlog_request_errors_total", Help: "Kafka requests answered with at least one error code, by API.",
	}, []string{"api"})
	m.latencies = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ringlog_request_duration_seconds", Help: "Time from a request's arrival to its response being queued, by API.",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 18),
	}, []string{"api"})
	m.Connections = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ringlog_connections", Help: "Open client connections.",
	})
	m.ConnectionsOpen = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlog_connections_opened_total", Help: "Client connections accepted.",
	})
	m.ConnectionsClosed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlog_connections_closed_by_broker_total", Help: "Client connections the broker refused or closed itself, by reason (max_connections, idle, request_timeout).",
	}, []string{"reason"})
	for _, r := range []string{"max_connections", "idle", "request_timeout"} {
		m.ConnectionsClosed.WithLabelValues(r)
	}
	m.SendfileBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlog_fetch_sendfile_bytes_total", Help: "Record bytes sent to consumers with sendfile, straight from segment files (zero-copy).",
	})
	m.CopiedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlog_fetch_copied_bytes_total", Help: "Record bytes sent to consumers through a user-space copy.",
	})
	m.DirectReadBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlog_request_direct_read_bytes_total", Help: "Request bytes read from the socket straight into the request's buffer (the rest is copied there from the event loop's read buffer).",
	})
	m.FetchesParked = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ringlog_fetches_parked", Help: "Long-poll fetches waiting for data (MinBytes) or MaxWaitMs now.",
	})
	m.WritersStarted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlog_connection_writers_started_total", Help: "Connections that needed a writer goroutine: a response over 1 MiB, or a full socket (a slow reader). Smaller responses leave from the goroutine that completes them.",
	})
	m.ResponseWrites = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlog_response_writes_total", Help: "Socket writes of responses (a sendmsg, with sendfile calls for fetched file ranges). Responses to requests read together leave in one write.",
	})
	m.SyncSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ringlog_fsync_duration_seconds", Help: "Duration of writer-shard submissions that included fdatasync (group commit).",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
	})
	m.FetchSessions = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ringlog_fetch_sessions", Help: "Fetch sessions (KIP-227) held: consumers that send only the partitions whose position changed.",
	})
	m.FetchSessionEvictions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlog_fetch_session_evictions_total", Help: "Fetch sessions evicted for a new one (all --fetch-sessions slots taken, this one unused for 2 minutes).",
	})
	m.NativeDenied = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlog_native_requests_denied_total", Help: "Native-protocol requests refused by the ACLs (the listener's --native-principal lacks the operation).",
	})
	m.Registry.MustRegister(m.requests, m.errors, m.latencies, m.Connections, m.ConnectionsOpen, m.ConnectionsClosed,
		m.SendfileBytes, m.CopiedBytes, m.DirectReadBytes, m.FetchesParked, m.WritersStarted, m.ResponseWrites, m.SyncSeconds,
		m.FetchSessions, m.FetchSessionEvictions, m.NativeDenied,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Each API's instruments are resolved once, so the request path does
	// no label lookups.
	for _, a := range apis {
		if a.Key < 0 || int(a.Key) >= len(m.byKey) {
			continue
		}
		m.byKey[a.Key] = apiInstruments{
			requests: m.requests.WithLabelValues(a.Name),
			errors:   m.errors.WithLabelValues(a.Name),
			latency:  m.latencies.WithLabelValues(a.Name),
		}
	}
	return m
}

// SetBuildInfo exports ringlog_build_info{version,goversion,revision} 1,
// the binary's identity (call it once).
func (m *Metrics) SetBuildInfo(version, goVersion, revision string) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ringlog_build_info", Help: "Always 1; the labels say which binary runs: its version, Go toolchain and source revision.",
	}, []string{"version", "goversion", "revision"})
	g.WithLabelValues(version, goVersion, revision).Set(1)
	m.Registry.MustRegister(g)
}

// Request records one handled request.
func (m *Metrics) Request(key int16, d time.Duration, failed bool) {
	if m == nil || key < 0 || int(key) >= len(m.byKey) || m.byKey[key].requests == nil {
		return
	}
	in := &m.byKey[key]
	in.requests.Inc()
	in.latency.Observe(d.Seconds())
	if failed {
		in.errors.Inc()
	}
}

// RegisterController exports ringlog_cluster_controller: 1 while this
// broker is the cluster's controller (cluster mode).
func (m *Metrics) RegisterController(isController func() bool) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ringlog_cluster_controller", Help: "1 while this broker is the cluster's controller (the metadata quorum's Raft leader).",
	}, func() float64 {
		if isController() {
			return 1
		}
		return 0
	}))
}

// RegisterEngine adds the collector of per-partition and per-shard state.
func (m *Metrics) RegisterEngine(e *engine.Engine) {
	m.Registry.MustRegister(&engineCollector{e: e})
}

var (
	descBytesIn      = prometheus.NewDesc("ringlog_partition_bytes_in_total", "Record batch bytes appended.", []string{"topic", "partition"}, nil)
	descRecordsIn    = prometheus.NewDesc("ringlog_partition_records_in_total", "Records appended.", []string{"topic", "partition"}, nil)
	descBytesOut     = prometheus.NewDesc("ringlog_partition_bytes_out_total", "Record batch bytes sent to consumers.", []string{"topic", "partition"}, nil)
	descRecordsOut   = prometheus.NewDesc("ringlog_partition_records_out_total", "Records sent to consumers (by offset span of the batches sent).", []string{"topic", "partition"}, nil)
	descEnd          = prometheus.NewDesc("ringlog_partition_log_end_offset", "Offset the next record will get in this broker's copy of the log.", []string{"topic", "partition"}, nil)
	descHW           = prometheus.NewDesc("ringlog_partition_high_watermark", "End of what consumers may read: the log end on a single node, the smallest log end over the ISR in cluster mode.", []string{"topic", "partition"}, nil)
	descLeader       = prometheus.NewDesc("ringlog_partition_leader", "1 when this broker leads the partition (cluster mode; always 1 on a single node).", []string{"topic", "partition"}, nil)
	descISR          = prometheus.NewDesc("ringlog_partition_isr_size", "In-sync replicas of the partition, as this broker's metadata says (cluster mode).", []string{"topic", "partition"}, nil)
	descUnderRep     = prometheus.NewDesc("ringlog_partition_under_replicated", "1 when this broker leads the partition and its ISR is smaller than its replica set (cluster mode).", []string{"topic", "partition"}, nil)
	descFollowLag    = prometheus.NewDesc("ringlog_partition_follower_lag_records", "On the leader: its log end minus each follower's last fetch offset (-1 before the follower's first fetch).", []string{"topic", "partition", "follower"}, nil)
	descShrinks      = prometheus.NewDesc("ringlog_replication_isr_shrinks_total", "ISR shrinks the controller granted to this broker's leaders.", nil, nil)
	descExpands      = prometheus.NewDesc("ringlog_replication_isr_expands_total", "ISR expansions the controller granted to this broker's leaders.", nil, nil)
	descScrubBytes   = prometheus.NewDesc("ringlog_scrub_bytes_total", "Bytes of sealed segments the scrubber re-read and checked (CRC32C of every batch).", nil, nil)
	descScrubBad     = prometheus.NewDesc("ringlog_scrub_damaged_segments_total", "Damaged batches the scrubber found in sealed segments (each one's range is no longer served).", nil, nil)
	descScrubHeal    = prometheus.NewDesc("ringlog_scrub_healed_total", "Damaged follower logs truncated at the damage to be fetched again from the leader (cluster mode).", nil, nil)
	descTruncHW      = prometheus.NewDesc("ringlog_replication_truncated_below_hw_total", "Follower truncations that cut below the high watermark (acknowledged data dropped: should stay 0).", nil, nil)
	descStart        = prometheus.NewDesc("ringlog_partition_log_start_offset", "First offset still in the log.", []string{"topic", "partition"}, nil)
	descSize         = prometheus.NewDesc("ringlog_partition_log_bytes", "Bytes in the partition's segments.", []string{"topic", "partition"}, nil)
	descOffline      = prometheus.NewDesc("ringlog_partition_offline", "1 when the partition's log is out of service.", []string{"topic", "partition"}, nil)
	descQueue        = prometheus.NewDesc("ringlog_shard_queue_bytes", "Bytes of produce requests queued for a writer shard.", []string{"shard"}, nil)
	descWritten      = prometheus.NewDesc("ringlog_engine_bytes_written_total", "Record batch bytes written by the writer shards.", nil, nil)
	descSubmits      = prometheus.NewDesc("ringlog_engine_submissions_total", "I/O submissions by the writer shards (each one a group commit).", nil, nil)
	descInline       = prometheus.NewDesc("ringlog_engine_inline_appends_total", "Appends written on the appender's goroutine by the direct-write fast path (an idle shard, no fdatasync); each is one of the submissions.", nil, nil)
	descCommitted    = prometheus.NewDesc("ringlog_group_committed_offset", "A consumer group's committed offset.", []string{"group", "topic", "partition"}, nil)
	descLSO          = prometheus.NewDesc("ringlog_partition_last_stable_offset", "End of what read_committed consumers may read: the first offset of the oldest open transaction, else the high watermark.", []string{"topic", "partition"}, nil)
	descTxnCommits   = prometheus.NewDesc("ringlog_transactions_committed_total", "Transactions the coordinator committed.", nil, nil)
	descTxnAborts    = prometheus.NewDesc("ringlog_transactions_aborted_total", "Transactions the coordinator aborted (by EndTxn, a timeout or a fencing InitProducerId).", nil, nil)
	descTxnTimeout   = prometheus.NewDesc("ringlog_transactions_timed_out_total", "Transactions aborted because they ran past transaction.timeout.ms.", nil, nil)
	descTxnFenced    = prometheus.NewDesc("ringlog_transactions_producers_fenced_total", "Requests refused or transactions aborted because a newer producer epoch fenced the caller.", nil, nil)
	descTxnOpen      = prometheus.NewDesc("ringlog_transactions_open", "Transactional ids with a transaction open now.", nil, nil)
	descRemoteBytes  = prometheus.NewDesc("ringlog_partition_remote_bytes", "Bytes of the partition's segments in the object store (tiered topics).", []string{"topic", "partition"}, nil)
	descRemoteStart  = prometheus.NewDesc("ringlog_partition_remote_log_start_offset", "First offset in the object store (-1: none; tiered topics).", []string{"topic", "partition"}, nil)
	descRemoteEnd    = prometheus.NewDesc("ringlog_partition_remote_log_end_offset", "Offset after the last one in the object store (tiered topics).", []string{"topic", "partition"}, nil)
	descRemoteLag    = prometheus.NewDesc("ringlog_partition_remote_copy_lag_bytes", "Local bytes not yet copied to the object store, the active segment included (tiered topics).", []string{"topic", "partition"}, nil)
	descCopiedBytes  = prometheus.NewDesc("ringlog_remote_copied_bytes_total", "Segment bytes copied to the object store.", nil, nil)
	descCopiedSegs   = prometheus.NewDesc("ringlog_remote_copied_segments_total", "Segments copied to the object store.", nil, nil)
	descCopyErrors   = prometheus.NewDesc("ringlog_remote_copy_errors_total", "Failed passes of the uploader over a partition (retried with backoff).", nil, nil)
	descRemoteDel    = prometheus.NewDesc("ringlog_remote_deleted_segments_total", "Remote segments deleted by retention.", nil, nil)
	descRemoteServed = prometheus.NewDesc("ringlog_remote_fetch_bytes_total", "Record bytes fetches got from remote segments.", nil, nil)
	descStoreRead    = prometheus.NewDesc("ringlog_remote_store_read_bytes_total", "Bytes read from the object store into the remote read cache.", nil, nil)
	descStoreErrors  = prometheus.NewDesc("ringlog_remote_store_read_errors_total", "Failed reads from the object store.", nil, nil)
	descCacheHits    = prometheus.NewDesc("ringlog_remote_cache_hits_total", "Remote reads served from the chunk cache.", nil, nil)
	descCacheMisses  = prometheus.NewDesc("ringlog_remote_cache_misses_total", "Remote reads that had to load a chunk from the object store.", nil, nil)
	descCacheBytes   = prometheus.NewDesc("ringlog_remote_cache_bytes", "Bytes held by the remote read cache.", nil, nil)
	descLag          = prometheus.NewDesc("ringlog_group_lag", "Records a group has still to consume in a partition: the high watermark minus the committed offset or, without a commit, minus the log start offset. Every partition of every topic the group has a commit in or is subscribed to (as ringlog group describe).", []string{"group", "topic", "partition"}, nil)
)

type engineCollector struct{ e *engine.Engine }

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBytesIn, descRecordsIn, descBytesOut, descRecordsOut, descEnd, descHW, descStart, descSize, descOffline,
		descLeader, descISR, descUnderRep, descFollowLag, descShrinks, descExpands, descTruncHW, descScrubBytes, descScrubBad, descScrubHeal,
		descQueue, descWritten, descSubmits, descInline, descCommitted, descLag,
		descLSO, descTxnCommits, descTxnAborts, descTxnTimeout, descTxnFenced, descTxnOpen,
		descRemoteBytes, descRemoteStart, descRemoteEnd, descRemoteLag, descCopiedBytes, descCopiedSegs, descCopyErrors,
		descRemoteDel, descRemoteServed, descStoreRead, descStoreErrors, descCacheHits, descCacheMisses, descCacheBytes} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.e.Topics() {
		for _, p := range t.Partitions() {
			labels := []string{t.Name, strconv.Itoa(int(p.Index))}
			ch <- prometheus.MustNewConstMetric(descBytesIn, prometheus.CounterValue, float64(p.BytesIn.Load()), labels...)
			ch <- prometheus.MustNewConstMetric(descRecordsIn, prometheus.CounterValue, float64(p.RecordsIn.Load()), labels...)
			ch <- prometheus.MustNewConstMetric(descBytesOut, prometheus.CounterValue, float64(p.BytesOut.Load()), labels...)
			ch <- prometheus.MustNewConstMetric(descRecordsOut, prometheus.CounterValue, float64(p.RecordsOut.Load()), labels...)
			if !p.Hosted() {
				continue
			}
			offline := 0.0
			l, err := p.ReplicaLog()
			if err == nil {
				ch <- prometheus.MustNewConstMetric(descEnd, prometheus.GaugeValue, float64(l.EndOffset()), labels...)
				ch <- prometheus.MustNewConstMetric(descHW, prometheus.GaugeValue, float64(p.HighWatermark()), labels...)
				ch <- prometheus.MustNewConstMetric(descLSO, prometheus.GaugeValue, float64(p.LastStableOffset()), labels...)
				ch <- prometheus.MustNewConstMetric(descStart, prometheus.GaugeValue, float64(l.StartOffset()), labels...)
				ch <- prometheus.MustNewConstMetric(descSize, prometheus.GaugeValue, float64(l.Size()), labels...)
			} else {
				offline = 1
			}
			ch <- prometheus.MustNewConstMetric(descOffline, prometheus.GaugeValue, offline, labels...)
			if rs, ok := p.RemoteStatus(); ok {
				ch <- prometheus.MustNewConstMetric(descRemoteBytes, prometheus.GaugeValue, float64(rs.Bytes), labels...)
				ch <- prometheus.MustNewConstMetric(descRemoteStart, prometheus.GaugeValue, float64(rs.Start), labels...)
				ch <- prometheus.MustNewConstMetric(descRemoteEnd, prometheus.GaugeValue, float64(rs.End), labels...)
				ch <- prometheus.MustNewConstMetric(descRemoteLag, prometheus.GaugeValue, float64(rs.CopyLag), labels...)
			}
			if !p.Replicated() {
				continue
			}
			st := p.ReplicaState()
			leader, under := 0.0, 0.0
			if st.Role == engine.RoleLeader {
				leader = 1
				if len(st.ISR) < len(st.Replicas) {
					under = 1
				}
			}
			ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader, labels...)
			ch <- prometheus.MustNewConstMetric(descISR, prometheus.GaugeValue, float64(len(st.ISR)), labels...)
			ch <- prometheus.MustNewConstMetric(descUnderRep, prometheus.GaugeValue, under, labels...)
			if err == nil {
				for id, off := range p.FollowerLag() {
					lag := float64(-1)
					if off >= 0 {
						lag = float64(l.EndOffset() - off)
					}
					ch <- prometheus.MustNewConstMetric(descFollowLag, prometheus.GaugeValue, lag, t.Name, labels[1], strconv.Itoa(int(id)))
				}
			}
		}
	}
	for _, s := range c.e.Shards() {
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(s.QueuedBytes()), strconv.Itoa(s.ID()))
	}
	if co := c.e.Coordinator(); co != nil {
		for _, l := range co.Lags() {
			labels := []string{l.Group, l.Topic, strconv.Itoa(int(l.Partition))}
			if l.Committed >= 0 {
				ch <- prometheus.MustNewConstMetric(descCommitted, prometheus.GaugeValue, float64(l.Committed), labels...)
			}
			if l.Lag >= 0 {
				ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(l.Lag), labels...)
			}
		}
	}
	st := c.e.EngineStats()
	ch <- prometheus.MustNewConstMetric(descWritten, prometheus.CounterValue, float64(st.BytesWritten.Load()))
	ch <- prometheus.MustNewConstMetric(descSubmits, prometheus.CounterValue, float64(st.Submissions.Load()))
	ch <- prometheus.MustNewConstMetric(descInline, prometheus.CounterValue, float64(st.InlineAppends.Load()))
	if tx := c.e.Transactions(); tx != nil {
		ch <- prometheus.MustNewConstMetric(descTxnCommits, prometheus.CounterValue, float64(tx.Commits.Load()))
		ch <- prometheus.MustNewConstMetric(descTxnAborts, prometheus.CounterValue, float64(tx.Aborts.Load()))
		ch <- prometheus.MustNewConstMetric(descTxnTimeout, prometheus.CounterValue, float64(tx.Timeouts.Load()))
		ch <- prometheus.MustNewConstMetric(descTxnFenced, prometheus.CounterValue, float64(tx.Fenced.Load()))
		ch <- prometheus.MustNewConstMetric(descTxnOpen, prometheus.GaugeValue, float64(tx.Open()))
	}
	ch <- prometheus.MustNewConstMetric(descShrinks, prometheus.CounterValue, float64(st.ISRShrinks.Load()))
	ch <- prometheus.MustNewConstMetric(descExpands, prometheus.CounterValue, float64(st.ISRExpands.Load()))
	ch <- prometheus.MustNewConstMetric(descTruncHW, prometheus.CounterValue, float64(st.TruncatedBelowHW.Load()))
	ch <- prometheus.MustNewConstMetric(descScrubBytes, prometheus.CounterValue, float64(st.ScrubbedBytes.Load()))
	ch <- prometheus.MustNewConstMetric(descScrubBad, prometheus.CounterValue, float64(st.ScrubDamaged.Load()))
	ch <- prometheus.MustNewConstMetric(descScrubHeal, prometheus.CounterValue, float64(st.ScrubHealed.Load()))
	if ts, ok := c.e.TierStats(); ok {
		for _, m := range []struct {
			d *prometheus.Desc
			v int64
		}{{descCopiedBytes, ts.CopiedBytes}, {descCopiedSegs, ts.CopiedSegments}, {descCopyErrors, ts.CopyErrors},
			{descRemoteDel, ts.DeletedSegments}, {descRemoteServed, ts.FetchedBytes}, {descStoreRead, ts.Cache.BytesRead},
			{descStoreErrors, ts.Cache.LoadErrors}, {descCacheHits, ts.Cache.Hits}, {descCacheMisses, ts.Cache.Misses}} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v))
		}
		ch <- prometheus.MustNewConstMetric(descCacheBytes, prometheus.GaugeValue, float64(ts.Cache.CachedBytes))
	}
}
