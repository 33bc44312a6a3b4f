package netio_test

// The tests that need a whole broker are in package netio_test, because
// they start it with internal/brokertest, which imports netio through
// package broker. What they need of netio's internals, export_test.go
// exports.

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/netio"
)

// testBroker is a real broker (brokertest: engine, Kafka and native
// listeners on 127.0.0.1:0) in the test process, with the e2e helpers as
// methods.
type testBroker struct {
	*brokertest.Broker
	t   testing.TB
	dir string
}

// withEngine changes the engine's configuration.
func withEngine(f func(*engine.Config)) brokertest.Option {
	return func(c *broker.Config) { f(&c.Engine) }
}

// withServer changes the listeners' configuration (the native listener
// shares the Kafka listener's limits).
func withServer(f func(*netio.Config)) brokertest.Option {
	return func(c *broker.Config) { f(&c.Kafka) }
}

// startBroker starts a broker on a fresh data directory, with short group
// timeouts (brokertest.FastGroups), stopped at cleanup.
func startBroker(t testing.TB, opts ...brokertest.Option) *testBroker {
	t.Helper()
	b := brokertest.Start(t, append([]brokertest.Option{brokertest.FastGroups()}, opts...)...)
	return &testBroker{Broker: b, t: t, dir: b.Dir}
}

// restart stops the broker cleanly and starts it again on the same data
// directory; the listener gets a new port.
func (b *testBroker) restart() { b.Restart() }

// client returns a franz-go client for the broker, closed at cleanup.
func (b *testBroker) client(opts ...kgo.Opt) *kgo.Client { return b.Client(opts...) }

// apiRow is a row of netio's apiTable (export_test.go).
type apiRow struct {
	key, min, max, advMin int16
	name                  string
}

// netio internals the tests use, exported by export_test.go.
var (
	apiTable = func() []apiRow {
		var rows []apiRow
		for _, r := range netio.APITable() {
			rows = append(rows, apiRow{key: r.Key, min: r.Min, max: r.Max, advMin: r.AdvMin, name: r.Name})
		}
		return rows
	}()
	skipTags        = netio.SkipTags
	validateRecords = netio.ValidateRecords
	errCode         = netio.ErrCode
)

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
