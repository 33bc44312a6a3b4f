package netio_test

// Connection limits: --max-connections refuses at accept with a
// rate-limited log line and a metric; --connections-max-idle reaps idle
// connections; --request-read-timeout reaps a connection whose frame
// does not complete in time (slowloris).

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/netio"
)

// withLogTo sends the broker's logs (warnings and up) to w.
func withLogTo(w io.Writer) brokertest.Option {
	return func(c *broker.Config) {
		c.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
}

// waitClosed reads from c until the broker closes it (EOF or reset), and
// fails the test if that takes longer than d. It returns how long it took.
func waitClosed(t *testing.T, c net.Conn, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	var buf [512]byte
	for {
		_, err := c.Read(buf[:])
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("connection still open after %v", d)
		}
		return time.Since(start)
	}
}

// dialAPIVersions does one ApiVersions round trip on a fresh raw connection.
func dialAPIVersions(b *testBroker) *e2eConn {
	rc := b.e2eRaw()
	if resp := rc.do(kmsg.NewPtrApiVersionsRequest(), 3).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		b.t.Fatalf("ApiVersions: error %d", resp.ErrorCode)
	}
	return rc
}

func TestMaxConnectionsEnforced(t *testing.T) {
	var logs testenv.SyncBuffer
	b := startBroker(t, withLogTo(&logs), withServer(func(c *netio.Config) { c.MaxConnections = 3 }))
	var held []*e2eConn
	for range 3 {
		held = append(held, dialAPIVersions(b))
	}
	// Over the limit: accepted by the kernel, closed by the broker at
	// once, before any request is read.
	for range 5 {
		c, err := net.DialTimeout("tcp", b.Addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		waitClosed(t, c, 10*time.Second)
		c.Close()
	}
	if got := e2eMetric(t, b, "ringlog_connections_closed_by_broker_total", "max_connections"); got != 5 {
		t.Errorf("max_connections refusals counted %v, want 5", got)
	}
	// One line for the burst (rate-limited), naming the flag.
	if n := strings.Count(logs.String(), "max connections reached"); n != 1 {
		t.Errorf("%d log lines for a burst of 5 refusals, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "--max-connections") {
		t.Errorf("the refusal log does not name the flag:\n%s", logs.String())
	}
	// The held connections still work; closing one makes room.
	apiVersionsOKOn(t, held[0])
	held[1].c.Close()
	e2eWaitFor(t, 10*time.Second, "the closed connection to be forgotten", func() bool { return b.Kafka.OpenConns() == 2 })
	dialAPIVersions(b)
}

func apiVersionsOKOn(t *testing.T, rc *e2eConn) {
	t.Helper()
	if resp := rc.do(kmsg.NewPtrApiVersionsRequest(), 3).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions: error %d", resp.ErrorCode)
	}
}

func TestIdleConnectionsReaped(t *testing.T) {
	const idle = 400 * time.Millisecond
	b := startBroker(t, withServer(func(c *netio.Config) { c.IdleTimeout = idle }))
	quiet := dialAPIVersions(b)
	busy := dialAPIVersions(b)
	// busy sends a request every idle/4 for 3 idle periods: never reaped.
	stop := time.Now().Add(3 * idle)
	for time.Now().Before(stop) {
		time.Sleep(idle / 4)
		apiVersionsOKOn(t, busy)
	}
	// quiet, silent all along, is gone by now (or very soon).
	if took := waitClosed(t, quiet.c, 10*time.Second); took > 5*time.Second {
		t.Errorf("idle connection reaped %v after the test looked", took)
	}
	apiVersionsOKOn(t, busy)
	if got := e2eMetric(t, b, "ringlog_connections_closed_by_broker_total", "idle"); got != 1 {
		t.Errorf("idle reaps counted %v, want 1", got)
	}
}

func TestSlowlorisReaped(t *testing.T) {
	const timeout = 500 * time.Millisecond
	b := startBroker(t, withServer(func(c *netio.Config) { c.RequestReadTimeout = timeout }))
	normal := dialAPIVersions(b)
	slow, err := net.DialTimeout("tcp", b.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	// A 100-byte frame, one byte every 50 ms: 5 s to finish, if allowed.
	frame := append([]byte{0, 0, 0, 100}, make([]byte, 100)...)
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for _, by := range frame {
			if _, err := slow.Write([]byte{by}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	waitClosed(t, slow, 10*time.Second)
	if took := time.Since(start); took < timeout || took > 4*time.Second {
		t.Errorf("slow connection closed after %v, want between %v and 4s", took, timeout)
	}
	<-closed
	apiVersionsOKOn(t, normal)
	if got := e2eMetric(t, b, "ringlog_connections_closed_by_broker_total", "request_timeout"); got != 1 {
		t.Errorf("request timeouts counted %v, want 1", got)
	}
	if got := e2eMetric(t, b, "ringlog_connections_closed_by_broker_total", "idle"); got != 0 {
		t.Errorf("idle reaps counted %v, want 0", got)
	}
}
