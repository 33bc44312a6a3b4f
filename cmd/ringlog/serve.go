package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/cli"
	"github.com/ringlog/ringlog/metrics"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/ring"
)

const serveExamples = `
Examples:
  ringlog serve                                   # data in ./data, Kafka on 127.0.0.1:9092
  ringlog serve --kafka-addr 127.0.0.1:0 --native-addr 127.0.0.1:0 --http-addr 127.0.0.1:0   # free ports
  ringlog serve --topic-default retention.ms=3600000 --default-partitions 8
  ringlog serve --config ringlog.conf             # flags as "name = value" lines

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

type serveFlags struct {
	dataDir, kafkaAddr, advertised, httpAddr string
	nativeAddr                               string
	configFile                               string
	nodeID                                   int
	autoCreate                               bool
	defaultPartitions                        int
	shards                                   int
	shardQueueBytes                          int64
	maxRequestBytes, maxConns, maxInflight   int
	ioBackend                                string
	writeCaching, repair                     bool
	writebackBytes                           int64
	retentionCheck, shutdownTimeout          time.Duration
	groupMinSession, groupMaxSession         time.Duration
	groupInitialDelay                        time.Duration
	logLevel, logFormat                      string
	topicDefaults                            kvList
}

func serveFlagSet(f *serveFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.topicDefaults = kvList{}
	fs.StringVar(&f.configFile, "config", "", "read flags from `FILE` (lines of name = value; flags on the command line win)")
	fs.StringVar(&f.dataDir, "data-dir", "./data", "directory for the metadata and the partition logs")
	fs.StringVar(&f.kafkaAddr, "kafka-addr", "127.0.0.1:9092", "Kafka protocol listener (port 0 picks a free port)")
	fs.StringVar(&f.advertised, "advertised-kafka-addr", "", "host:port given to clients in metadata (default: the bound address)")
	fs.StringVar(&f.nativeAddr, "native-addr", "127.0.0.1:9093", "native (MyKafka) protocol listener (port 0 picks a free port; empty: off)")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:9094", "HTTP listener for /metrics, /healthz and /debug/pprof (empty: off)")
	fs.IntVar(&f.nodeID, "node-id", 0, "this broker's node id")
	fs.BoolVar(&f.autoCreate, "auto-create-topics", true, "create unknown topics on metadata requests and produce")
	fs.IntVar(&f.defaultPartitions, "default-partitions", 1, "partitions of auto-created topics and of CreateTopics with -1")
	fs.IntVar(&f.shards, "shards", 0, "writer shards (0: one per CPU)")
	fs.Int64Var(&f.shardQueueBytes, "shard-queue-bytes", 64<<20, "bytes of produce requests queued per writer shard before the broker stops reading from the connections that feed it")
	fs.IntVar(&f.maxRequestBytes, "max-request-bytes", 100<<20, "largest request frame accepted; larger ones close the connection before being read")
	fs.IntVar(&f.maxConns, "max-connections", 10000, "client connections accepted at once")
	fs.IntVar(&f.maxInflight, "max-inflight-per-conn", 100, "unanswered requests per connection before the broker stops reading it")
	fs.StringVar(&f.ioBackend, "io-backend", "auto", "auto (hybrid), hybrid, io_uring or pwritev")
	fs.Int64Var(&f.writebackBytes, "writeback-bytes", 1<<20, "start the kernel's writeback of each partition's new data every this many bytes, so dirty page cache stays small and appends are not throttled in bursts (0: leave writeback to the kernel)")
	fs.BoolVar(&f.writeCaching, "write-caching", false, "acknowledge acks=all from the page cache (no fdatasync) for every topic")
	fs.BoolVar(&f.repair, "repair-corrupt-logs", false, "at start, move damaged bytes in the middle of a log aside and keep every valid batch (default: keep such a partition offline)")
	fs.DurationVar(&f.retentionCheck, "retention-check-interval", 5*time.Minute, "how often retention runs")
	fs.DurationVar(&f.groupMinSession, "group-min-session-timeout", 6*time.Second, "smallest session timeout a group member may ask for (group.min.session.timeout.ms)")
	fs.DurationVar(&f.groupMaxSession, "group-max-session-timeout", 30*time.Minute, "largest session timeout a group member may ask for (group.max.session.timeout.ms)")
	fs.DurationVar(&f.groupInitialDelay, "group-initial-rebalance-delay", 3*time.Second, "how long a new group waits for more members before its first generation (group.initial.rebalance.delay.ms)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long SIGTERM waits for requests in flight")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.Var(f.topicDefaults, "topic-default", "broker default of a topic config, `key=value` (repeatable), e.g. retention.ms=3600000")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ringlog serve [flags]\n\nRuns the broker.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprint(stderr, serveExamples)
	}
	return fs
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
	fs := serveFlagSet(&f, stderr)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("serve takes no arguments, got %q", fs.Args())
	}
	if f.configFile != "" {
		if err := applyConfigFile(fs, f.configFile); err != nil {
			return err
		}
	}
	logger, err := newLogger(f.logLevel, f.logFormat, stderr)
	if err != nil {
		return err
	}
	kind, err := ring.ParseKind(f.ioBackend)
	if err != nil {
		return cli.Usagef("--io-backend: %v", err)
	}
	if f.writebackBytes < 0 {
		return cli.Usagef("--writeback-bytes must be 0 (off) or a positive byte count, got %d", f.writebackBytes)
	}
	if f.defaultPartitions < 1 {
		return cli.Usagef("--default-partitions must be at least 1")
	}
	m := metrics.New()
	logger.Info("starting ringlog", "data_dir", f.dataDir, "kafka_addr", f.kafkaAddr, "http_addr", f.httpAddr,
		"io_backend", f.ioBackend, "shards", f.shards, "write_caching", f.writeCaching, "writeback_bytes", f.writebackBytes, "topic_defaults", map[string]string(f.topicDefaults))
	eng, err := engine.Open(engine.Config{
		DataDir: f.dataDir, NodeID: int32(f.nodeID), Shards: f.shards, ShardQueueBytes: f.shardQueueBytes,
		AutoCreateTopics: f.autoCreate, DefaultPartitions: int32(f.defaultPartitions), TopicDefaults: f.topicDefaults,
		WriteCaching: f.writeCaching, WritebackBytes: f.writebackBytes, Backend: kind, RetentionCheckInterval: f.retentionCheck,
		RepairCorruptLogs: f.repair, Logger: logger,
		Groups:      engine.GroupConfig{MinSessionTimeout: f.groupMinSession, MaxSessionTimeout: f.groupMaxSession, InitialRebalanceDelay: f.groupInitialDelay},
		ObserveSync: func(d time.Duration) { m.SyncSeconds.Observe(d.Seconds()) },
	})
	if err != nil {
		return err
	}
	m.RegisterEngine(eng)
	// Both servers are built before either starts: NewServer registers
	// the per-API instruments in m, which a started server's requests
	// read without a lock.
	srv := netio.NewServer(eng, netio.Config{
		Addr: f.kafkaAddr, AdvertisedAddr: f.advertised, MaxRequestBytes: f.maxRequestBytes,
		MaxConnections: f.maxConns, MaxInflightPerConn: f.maxInflight, Logger: logger, Metrics: m,
	})
	var nsrv *netio.Server
	if f.nativeAddr != "" {
		nsrv = netio.NewServer(eng, netio.Config{
			Addr: f.nativeAddr, Native: true, MaxRequestBytes: f.maxRequestBytes,
			MaxConnections: f.maxConns, MaxInflightPerConn: f.maxInflight, Logger: logger, Metrics: m,
		})
	}
	if err := srv.Start(); err != nil {
		eng.Close()
		return err
	}
	nativeAddr := "off"
	if nsrv != nil {
		if err := nsrv.Start(); err != nil {
			srv.Stop(context.Background())
			eng.Close()
			return err
		}
		nativeAddr = nsrv.Addr().String()
	}
	httpAddr := "off"
	var hs *http.Server
	if f.httpAddr != "" {
		ln, err := net.Listen("tcp", f.httpAddr)
		if err != nil {
			srv.Stop(context.Background())
			if nsrv != nil {
				nsrv.Stop(context.Background())
			}
			eng.Close()
			return fmt.Errorf("http listener %s: %w", f.httpAddr, err)
		}
		httpAddr = ln.Addr().String()
		hs = &http.Server{Handler: httpMux(m, eng), ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(ln)
	}
	kafkaAddr := srv.Addr().String()
	// The ready line promises a clean stop on SIGTERM: catch the signals
	// before printing it, or a supervisor that signals as soon as it
	// reads the line kills the process uncleanly.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	logger.Info("listening", "kafka", kafkaAddr, "native", nativeAddr, "http", httpAddr, "backend", eng.BackendName())
	fmt.Fprintf(stdout, "ringlog ready kafka=%s native=%s http=%s\n", kafkaAddr, nativeAddr, httpAddr)

	got := <-sig
	signal.Stop(sig)
	logger.Info("shutting down", "signal", got.String())
	ctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	servers := []*netio.Server{srv}
	if nsrv != nil {
		servers = append(servers, nsrv)
	}
	for _, sv := range servers {
		if err := sv.Drain(ctx); err != nil {
			logger.Warn("shutdown: not every request was answered", "err", err)
		}
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer stopCancel()
	var wg sync.WaitGroup
	for _, sv := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); sv.Stop(stopCtx) }()
	}
	wg.Wait()
	if hs != nil {
		hs.Shutdown(stopCtx)
	}
	if err := eng.Close(); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

func httpMux(m *metrics.Metrics, eng *engine.Engine) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		offline := 0
		for _, t := range eng.Topics() {
			for _, p := range t.Partitions() {
				if p.Offline() != nil {
					offline++
				}
			}
		}
		if offline > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "degraded: %d partitions offline\n", offline)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
