package netio_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/netio"
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

// TestUnauthenticatedPipelineBounded: a client that sends a SaslHandshake
// and then pipelines megabytes of requests without reading the answers or
// authenticating is closed once the broker would hold more than
// --max-unauthenticated-request-bytes of its bytes, on SASL_PLAINTEXT and
// SASL_SSL alike: the unread bytes gnet keeps for it never pass that
// limit (where they could reach --max-request-bytes before), however
// much it sends.
func TestUnauthenticatedPipelineBounded(t *testing.T) {
	const (
		maxUnauth = 64 << 10
		flood     = 16 << 20
	)
	sb := startSecureBroker(t, func(c *broker.Config) {
		c.Kafka.Security.MaxUnauthenticatedBytes = maxUnauth
		c.Kafka.Security.AuthTimeout = time.Minute
	})
	for _, tc := range []struct {
		name string
		srv  *netio.Server
		dial func() net.Conn
	}{
		{"SASL_PLAINTEXT", sb.B.Listeners()[2], func() net.Conn { return dialWire(t, sb.saslTxt).c }},
		{"SASL_SSL", sb.B.Listeners()[0], func() net.Conn {
			c, err := tls.Dial("tcp", sb.saslSSL, sb.tlsConfig())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The largest unread count seen, sampled until the end.
			var peak atomic.Int64
			stop, sampled := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					if n := tc.srv.UnreadBytes(); n > peak.Load() {
						peak.Store(n)
					}
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Microsecond):
					}
				}
			}()
			defer func() { close(stop); <-sampled }()

			nc := tc.dial()
			rc := &wireConn{t: t, c: nc}
			hs := rc.roundTrip(&kmsg.SASLHandshakeRequest{Mechanism: "PLAIN"}, 1, 1).(*kmsg.SASLHandshakeResponse)
			if hs.ErrorCode != 0 {
				t.Fatalf("SaslHandshake: error %d", hs.ErrorCode)
			}
			// ApiVersions, allowed before authentication and answered
			// with ~30 times its size, pipelined and never read.
			var chunk []byte
			for corr := int32(2); len(chunk) < 64<<10; corr++ {
				chunk = append(chunk, reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, corr)...)
			}
			start := time.Now()
			sent := 0
			var werr error
			for sent < flood {
				nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
				var n int
				n, werr = nc.Write(chunk)
				sent += n
				if werr != nil {
					break
				}
			}
			if werr == nil {
				t.Fatalf("sent %d MiB before authenticating and the broker still reads on", sent>>20)
			}
			var ne net.Error
			if errors.As(werr, &ne) && ne.Timeout() {
				t.Fatalf("writes stalled after %d KiB (%v), want the connection closed", sent>>10, werr)
			}
			t.Logf("closed after %d KiB sent in %v: %v", sent>>10, time.Since(start).Round(time.Millisecond), werr)
			e2eWaitFor(t, 2*time.Second, "the closed connection's unread bytes to be released", func() bool {
				return tc.srv.UnreadBytes() == 0
			})
			if p := peak.Load(); p > maxUnauth {
				t.Fatalf("the broker held %d unread bytes of an unauthenticated connection, more than --max-unauthenticated-request-bytes %d", p, maxUnauth)
			}
		})
	}
}
