package netio

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/metrics"
)

// testBroker is a real broker (engine + Kafka listener on 127.0.0.1:0) in
// the test process.
type testBroker struct {
	t    testing.TB
	dir  string
	Addr string
	Eng  *engine.Engine
	Srv  *Server
	// NativeAddr and Native are the native-protocol listener.
	NativeAddr string
	Native     *Server
	Metrics    *metrics.Metrics
	ecfg       engine.Config
	scfg       Config
}

type brokerOption func(*engine.Config, *Config)

func withEngine(f func(*engine.Config)) brokerOption {
	return func(e *engine.Config, _ *Config) { f(e) }
}

func withServer(f func(*Config)) brokerOption {
	return func(_ *engine.Config, s *Config) { f(s) }
}

func testLogger() *slog.Logger {
	if os.Getenv("RINGLOG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startBroker starts a broker on a fresh data directory.
func startBroker(t testing.TB, opts ...brokerOption) *testBroker {
	t.Helper()
	b := &testBroker{t: t, dir: t.TempDir()}
	b.ecfg = engine.Config{DataDir: b.dir, AutoCreateTopics: true, DefaultPartitions: 1, Logger: testLogger(),
		Groups: engine.GroupConfig{MinSessionTimeout: 100 * time.Millisecond, InitialRebalanceDelay: 50 * time.Millisecond}}
	b.scfg = Config{Addr: "127.0.0.1:0", Logger: testLogger()}
	for _, o := range opts {
		o(&b.ecfg, &b.scfg)
	}
	b.start()
	t.Cleanup(b.stop)
	return b
}

func (b *testBroker) start() {
	b.t.Helper()
	b.Metrics = metrics.New()
	b.ecfg.ObserveSync = func(d time.Duration) { b.Metrics.SyncSeconds.Observe(d.Seconds()) }
	eng, err := engine.Open(b.ecfg)
	if err != nil {
		b.t.Fatal(err)
	}
	b.Metrics.RegisterEngine(eng)
	cfg := b.scfg
	cfg.Metrics = b.Metrics
	// Both servers are built before either starts, as in serve.go:
	// NewServer registers the API metrics the running one reads.
	srv := NewServer(eng, cfg)
	ncfg := cfg
	ncfg.Native = true
	ncfg.Addr = "127.0.0.1:0"
	nsrv := NewServer(eng, ncfg)
	if err := srv.Start(); err != nil {
		eng.Close()
		b.t.Fatal(err)
	}
	if err := nsrv.Start(); err != nil {
		srv.Stop(context.Background())
		eng.Close()
		b.t.Fatal(err)
	}
	b.Eng, b.Srv, b.Addr = eng, srv, srv.Addr().String()
	b.Native, b.NativeAddr = nsrv, nsrv.Addr().String()
}

// stop shuts the broker down cleanly (idempotent).
func (b *testBroker) stop() {
	if b.Srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.Srv.Drain(ctx)
	b.Native.Drain(ctx)
	b.Srv.Stop(ctx)
	b.Native.Stop(ctx)
	b.Eng.Close()
	b.Srv, b.Eng, b.Native = nil, nil, nil
}

// restart stops the broker cleanly and starts it again on the same data
// directory; the listener gets a new port.
func (b *testBroker) restart() {
	b.stop()
	b.scfg.Addr = "127.0.0.1:0"
	b.start()
}

// client returns a franz-go client for the broker, closed at cleanup.
func (b *testBroker) client(opts ...kgo.Opt) *kgo.Client {
	b.t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(b.Addr), kgo.AllowAutoTopicCreation()}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(cl.Close)
	return cl
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
