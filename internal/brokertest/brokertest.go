// Package brokertest starts real brokers inside a test process: the one
// harness of every package whose tests need a whole broker (netio, client,
// cmd/ringlog's tool tests, perf).
//
// A test broker is package broker's, from broker.DefaultConfig, on a
// temporary data directory with its Kafka, native and HTTP listeners on
// 127.0.0.1:0: the broker that ships. What a test needs changed (short
// group timeouts, a small queue bound) it says with an Option. The broker
// stops cleanly at the test's cleanup, and can be restarted on the same
// directory meanwhile. Logs are discarded unless RINGLOG_TEST_LOG is set.
package brokertest

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/metrics"
	"github.com/ringlog/ringlog/netio"
)

// Logger discards everything, unless the environment sets
// RINGLOG_TEST_LOG: then it writes every level to stderr.
func Logger() *slog.Logger {
	if os.Getenv("RINGLOG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Config is a test broker's configuration before options:
// broker.DefaultConfig on dir, every listener on 127.0.0.1:0, Logger().
// For callers without a testing.TB (examples), to give to broker.New.
func Config(dir string) broker.Config {
	c := broker.DefaultConfig()
	c.Engine.DataDir = dir
	c.Kafka.Addr = "127.0.0.1:0"
	c.NativeAddr = "127.0.0.1:0"
	c.HTTPAddr = "127.0.0.1:0"
	c.Logger = Logger()
	return c
}

// Option is a test-only change to the configuration.
type Option func(*broker.Config)

// FastGroups makes group tests quick: members may ask for session
// timeouts down to 100 ms, a new group waits 50 ms (not 3 s) for more
// members before its first generation, and consumer-protocol (KIP-848)
// members heartbeat every 200 ms (not 5 s) with a 5 s session.
func FastGroups() Option {
	return func(c *broker.Config) {
		c.Engine.Groups.MinSessionTimeout = 100 * time.Millisecond
		c.Engine.Groups.InitialRebalanceDelay = 50 * time.Millisecond
		c.Engine.Groups.Consumer.HeartbeatInterval = 200 * time.Millisecond
		c.Engine.Groups.Consumer.SessionTimeout = 5 * time.Second
	}
}

// Broker is a running test broker. Its fields describe the running
// instance and change on Start and Restart.
type Broker struct {
	// Config is what Start starts; a test may change it between Stop and
	// Start (to restart on the same port, say).
	Config broker.Config
	// Dir is the data directory.
	Dir string
	// Addr, NativeAddr and HTTPAddr are the bound listener addresses
	// (Kafka, native, HTTP); empty for a listener that is off.
	Addr, NativeAddr, HTTPAddr string
	// B is the broker itself; Eng, Kafka, Native and Metrics are its
	// parts.
	B       *broker.Broker
	Eng     *engine.Engine
	Kafka   *netio.Server
	Native  *netio.Server
	Metrics *metrics.Metrics

	t testing.TB
}

// Start starts a broker on a fresh temporary directory, with opts applied
// to Config(dir) in order, and stops it at the test's cleanup.
func Start(t testing.TB, opts ...Option) *Broker {
	t.Helper()
	dir := t.TempDir()
	b := &Broker{t: t, Dir: dir, Config: Config(dir)}
	for _, o := range opts {
		o(&b.Config)
	}
	b.Start()
	t.Cleanup(b.Stop)
	return b
}

// Start starts the broker on its directory with its Config (after Stop).
func (b *Broker) Start() {
	b.t.Helper()
	bk, err := broker.New(b.Config)
	if err != nil {
		b.t.Fatalf("start broker: %v", err)
	}
	b.B, b.Eng, b.Kafka, b.Native, b.Metrics = bk, bk.Engine(), bk.Kafka(), bk.Native(), bk.Metrics()
	b.Addr, b.NativeAddr, b.HTTPAddr = bk.KafkaAddr(), bk.NativeAddr(), bk.HTTPAddr()
}

// Stop shuts the broker down cleanly (broker.Shutdown: requests in flight
// answered, logs flushed, directory marked clean). It does nothing when
// the broker is not running.
func (b *Broker) Stop() {
	if b.B == nil {
		return
	}
	err := b.B.Shutdown()
	b.B, b.Eng, b.Kafka, b.Native, b.Metrics = nil, nil, nil, nil, nil
	if err != nil {
		b.t.Errorf("stop broker: %v", err)
	}
}

// Restart stops the broker cleanly and starts it again on the same data
// directory (with the listener addresses of Config: new ports, unless
// the test set fixed ones).
func (b *Broker) Restart() {
	b.t.Helper()
	b.Stop()
	b.Start()
}

// Client returns a franz-go client of the Kafka listener (topics
// auto-created), closed at the test's cleanup. opts come after the
// defaults, so they can override them.
func (b *Broker) Client(opts ...kgo.Opt) *kgo.Client {
	b.t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(b.Addr), kgo.AllowAutoTopicCreation()}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(cl.Close)
	return cl
}
