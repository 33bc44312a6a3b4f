// Command slowbroker is a broker process for the reliability tests
// (package reliability): the broker `ringlog serve` runs (broker.New from
// broker.DefaultConfig, no native or HTTP listener), with the listener and
// queue limits the overload and connection tests set, and a disk slowed
// to a fixed bandwidth through the test-only file-layer seam
// (internal/faultring via engine.Config.WrapBackend). With
// --power-journal it also records what its writes made durable, for the
// crash loop's power cuts (internal/powerloss). It prints "ready ADDR"
// once listening, takes "rate BYTES_PER_SECOND" lines on stdin to change
// the disk's speed (0: unlimited), and shuts down cleanly when stdin
// closes or on SIGTERM.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/faultring"
	"github.com/ringlog/ringlog/internal/powerloss"
	"github.com/ringlog/ringlog/ring"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "slowbroker:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := broker.DefaultConfig()
	cfg.NativeAddr, cfg.HTTPAddr = "", ""
	cfg.Kafka.Addr = "127.0.0.1:0"
	var (
		rate    int64
		journal string
	)
	flag.StringVar(&cfg.Engine.DataDir, "data-dir", "", "data directory")
	flag.StringVar(&cfg.Kafka.Addr, "kafka-addr", cfg.Kafka.Addr, "Kafka listener")
	flag.StringVar(&journal, "power-journal", "", "record durable lengths in this journal (internal/powerloss)")
	flag.BoolVar(&cfg.Engine.RepairCorruptLogs, "repair-corrupt-logs", false, "move damaged bytes in the middle of a log aside")
	parts := flag.Int("default-partitions", int(cfg.Engine.DefaultPartitions), "partitions of auto-created topics")
	flag.DurationVar(&cfg.Engine.RetentionCheckInterval, "retention-check-interval", cfg.Engine.RetentionCheckInterval, "how often retention runs")
	flag.DurationVar(&cfg.Engine.CompactionInterval, "compaction-interval", cfg.Engine.CompactionInterval, "how often the cleaner runs")
	flag.DurationVar(&cfg.Engine.Groups.InitialRebalanceDelay, "group-initial-rebalance-delay", cfg.Engine.Groups.InitialRebalanceDelay, "first rebalance delay")
	flag.IntVar(&cfg.Engine.Shards, "shards", cfg.Engine.Shards, "writer shards")
	flag.Int64Var(&cfg.Engine.ShardQueueBytes, "shard-queue-bytes", cfg.Engine.ShardQueueBytes, "queue bound per shard")
	flag.IntVar(&cfg.Kafka.MaxRequestBytes, "max-request-bytes", cfg.Kafka.MaxRequestBytes, "largest request frame")
	flag.Int64Var(&cfg.Kafka.MaxPausedBytes, "max-paused-bytes", cfg.Kafka.MaxPausedBytes, "unread bytes of paused connections per listener")
	flag.IntVar(&cfg.Kafka.MaxConnections, "max-connections", cfg.Kafka.MaxConnections, "connections per listener")
	flag.DurationVar(&cfg.Kafka.RequestReadTimeout, "request-read-timeout", cfg.Kafka.RequestReadTimeout, "slowloris timeout")
	flag.DurationVar(&cfg.Kafka.IdleTimeout, "connections-max-idle", cfg.Kafka.IdleTimeout, "idle timeout")
	flag.Int64Var(&rate, "write-rate", 0, "disk bandwidth in bytes/s (0: unlimited)")
	flag.Parse()
	cfg.Engine.DefaultPartitions = int32(*parts)
	if cfg.Engine.DataDir == "" {
		return fmt.Errorf("--data-dir is required")
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	inj := faultring.New()
	inj.SetWriteRate(rate)
	cfg.Engine.WrapBackend = inj.Wrap
	if journal != "" {
		j, err := powerloss.Open(journal)
		if err != nil {
			return err
		}
		defer j.Close()
		cfg.Engine.WrapBackend = func(shard int, b ring.Backend) ring.Backend {
			return inj.Wrap(shard, j.Wrap(shard, b))
		}
		cfg.Engine.SyncFile = j.SyncFile
	}
	b, err := broker.New(cfg)
	if err != nil {
		return err
	}
	fmt.Printf("ready %s\n", b.KafkaAddr())
	stop := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "rate "); ok {
				if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					inj.SetWriteRate(n)
				}
			}
		}
		close(stop)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-stop:
	case <-sig:
	}
	done := make(chan error, 1)
	go func() { done <- b.Shutdown() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		return fmt.Errorf("shutdown took more than a minute")
	}
}
