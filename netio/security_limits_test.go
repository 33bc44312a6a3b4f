package netio_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
)

// silentConn is a TCP connection that never sends a byte, and the time
// the broker closed it (zero while open).
type silentConn struct {
	c      net.Conn
	opened time.Time
	mu     sync.Mutex
	closed time.Time
}

// dialSilent opens a connection to addr that sends nothing and watches
// for the broker to close it.
func dialSilent(t *testing.T, addr string) *silentConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	sc := &silentConn{c: c, opened: time.Now()}
	go func() {
		var buf [64]byte
		for {
			if _, err := c.Read(buf[:]); err != nil {
				sc.mu.Lock()
				sc.closed = time.Now()
				sc.mu.Unlock()
				return
			}
		}
	}()
	return sc
}

func (sc *silentConn) closedAt() time.Time {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.closed
}

func countClosed(cs []*silentConn) int {
	n := 0
	for _, c := range cs {
		if !c.closedAt().IsZero() {
			n++
		}
	}
	return n
}

// TestTLSHalfOpenHandshakesCannotLockOutClients: connections that never
// send a ClientHello count as unauthenticated (at most
// --max-unauthenticated-connections of them), a new connection at that
// limit (or at --max-connections) displaces the oldest of them, so a real
// client gets in while an attacker holds all it may, and they are closed
// at --auth-timeout, not --request-read-timeout.
func TestTLSHalfOpenHandshakesCannotLockOutClients(t *testing.T) {
	const (
		maxConns    = 8
		maxUnauth   = 4
		silent      = 10 // more than both limits
		authTimeout = 4 * time.Second
	)
	sb := startSecureBroker(t, func(c *broker.Config) {
		c.Kafka.MaxConnections = maxConns
		c.Kafka.Security.MaxUnauthenticatedConns = maxUnauth
		c.Kafka.Security.AuthTimeout = authTimeout
		c.Kafka.RequestReadTimeout = 30 * time.Second
	})
	srv := sb.B.Listeners()[1] // SSL
	var conns []*silentConn
	for i := 0; i < silent; i++ {
		conns = append(conns, dialSilent(t, sb.ssl))
	}
	// Each one past the limit displaced the oldest: maxUnauth are held.
	e2eWaitFor(t, 3*time.Second, "the silent connections past the limit to be closed", func() bool {
		return countClosed(conns) == silent-maxUnauth
	})
	if h, u := srv.HandshakingConns(), srv.UnauthenticatedConns(); h != maxUnauth || u != maxUnauth {
		t.Fatalf("%d connections handshaking, %d unauthenticated; want %d of each", h, u, maxUnauth)
	}
	for i, c := range conns[:silent-maxUnauth] {
		if c.closedAt().IsZero() {
			t.Fatalf("silent connection %d, among the oldest, is still open", i)
		}
	}

	// A real client gets in while they are held.
	ctx, cancel := context.WithTimeout(context.Background(), authTimeout/2)
	defer cancel()
	cl := sb.client(t, sb.ssl, kgo.DialTLSConfig(sb.tlsConfig()))
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("a TLS client while %d silent connections handshake: %v", maxUnauth, err)
	}
	if h := srv.HandshakingConns(); h != maxUnauth-1 {
		t.Fatalf("after the client got in, %d silent connections handshake; want %d (one displaced, the rest held)", h, maxUnauth-1)
	}

	// The rest are closed at the auth timeout.
	e2eWaitFor(t, authTimeout+3*time.Second, "every silent connection to be closed", func() bool {
		return countClosed(conns) == silent
	})
	for i, c := range conns[silent-maxUnauth+1:] {
		if held := c.closedAt().Sub(c.opened); held < authTimeout-200*time.Millisecond {
			t.Fatalf("silent connection %d closed after %v, before the auth timeout %v", i, held, authTimeout)
		}
	}
	e2eWaitFor(t, time.Second, "no connection left handshaking or unauthenticated", func() bool {
		return srv.HandshakingConns() == 0 && srv.UnauthenticatedConns() == 0
	})
	// The client, authenticated by its handshake, is still served.
	if err := cl.Ping(testCtx(t, 5*time.Second)); err != nil {
		t.Fatalf("the client after the silent connections closed: %v", err)
	}
}
