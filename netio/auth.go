package netio

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/security"
)

// SecurityProtocol is a listener's security protocol, with Kafka's names.
type SecurityProtocol string

// The four protocols of Kafka's security.protocol.
const (
	Plaintext     SecurityProtocol = "PLAINTEXT"
	SSL           SecurityProtocol = "SSL"
	SASLPlaintext SecurityProtocol = "SASL_PLAINTEXT"
	SASLSSL       SecurityProtocol = "SASL_SSL"
)

// ParseSecurityProtocol reads a protocol name (case-insensitive).
func ParseSecurityProtocol(name string) (SecurityProtocol, error) {
	p := SecurityProtocol(strings.ToUpper(name))
	switch p {
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
		return p, nil
	}
	return "", fmt.Errorf("unknown security protocol %q (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)", name)
}

func (p SecurityProtocol) usesTLS() bool  { return p == SSL || p == SASLSSL }
func (p SecurityProtocol) usesSASL() bool { return p == SASLPlaintext || p == SASLSSL }

func (p SecurityProtocol) String() string {
	if p == "" {
		return string(Plaintext)
	}
	return string(p)
}

// Security is authentication and authorization, shared by a broker's
// listeners.
type Security struct {
	// Source holds the SCRAM credentials and the ACLs: a single
	// broker's Store, or in cluster mode the replicated image. SASL
	// listeners need it; with it, the credential and ACL APIs are served.
	Source security.Source
	// Writer changes them: the Store, or in cluster mode the
	// controller's proposals (a broker that is not the controller
	// forwards the request to it first). Needed with Source.
	Writer security.Writer
	// Authorizer checks every request against the ACLs; nil: every
	// principal may do everything.
	Authorizer *security.Authorizer
	// Mechanisms are the SASL mechanisms offered; empty: all of
	// security.SupportedMechanisms.
	Mechanisms []string
	// MaxUnauthenticatedConns bounds, per listener, the connections that
	// have not authenticated yet: on a SASL listener those before SASL
	// authentication, on SSL and SASL_SSL ones also those still in their
	// TLS handshake. One more is closed at accept, except that on a TLS
	// listener it displaces the oldest connection still in its handshake
	// (tlsfront.go). Default 1000.
	MaxUnauthenticatedConns int
	// MaxUnauthenticatedBytes is the largest request a connection may
	// send before it authenticated (Kafka's sasl.server.max.receive.size),
	// and the most of its bytes the listener holds for it meanwhile (the
	// request in flight, the next one, what it pipelined behind them):
	// past it the connection is closed. Default 512 KiB.
	MaxUnauthenticatedBytes int
	// AuthTimeout closes a connection of a SASL listener that did not
	// authenticate this long after it was accepted, and bounds a TLS
	// handshake (with RequestReadTimeout, when shorter). Default 10 s.
	AuthTimeout time.Duration
	// FailedAuthDelay delays the answer to a failed authentication
	// (Kafka's connection.failed.authentication.delay.ms), after which
	// the connection closes. Default 100 ms.
	FailedAuthDelay time.Duration
}

// DefaultSecurity are the limits that ship.
func DefaultSecurity() Security {
	return Security{
		MaxUnauthenticatedConns: 1000,
		MaxUnauthenticatedBytes: 512 << 10,
		AuthTimeout:             10 * time.Second,
		FailedAuthDelay:         100 * time.Millisecond,
	}
}

// anonymous is the principal of a connection nobody authenticated, as in
// Kafka.
const anonymous = "User:ANONYMOUS"

// connAuth is a connection's SASL state. The event loop reads done on
// every frame; the SASL handlers (the handshake on the loop, the
// authenticate steps on their own goroutine) change the rest under mu.
type connAuth struct {
	done    atomic.Bool // authenticated (or the listener has no SASL)
	failed  atomic.Bool // failed: every further frame closes
	counted atomic.Bool // counted in Server.unauthed
	// rawTokens: SaslHandshake v0 chose the mechanism, so the frames
	// until authentication are bare SASL tokens (handleRawSASL).
	rawTokens atomic.Bool
	opened    int64 // when the connection opened, Unix ns
	mu        sync.Mutex
	mechanism string // chosen by SaslHandshake
	exchange  security.Exchange
	principal string
}

// principal is who the connection acts as: the SASL identity, else the
// client certificate's, else ANONYMOUS; on a native listener, always
// Config.NativePrincipal.
func (c *conn) principal() string {
	if c.srv.cfg.Native {
		if p := c.srv.cfg.NativePrincipal; p != "" {
			return p
		}
		return anonymous
	}
	if c.srv.cfg.Protocol.usesSASL() && c.auth.done.Load() {
		return c.auth.principal
	}
	if c.certPrincipal != "" {
		return c.certPrincipal
	}
	return anonymous
}

// host is the client's IP, as ACLs name hosts.
func (c *conn) host() string {
	if i := strings.LastIndexByte(c.remote, ':'); i > 0 {
		return strings.Trim(c.remote[:i], "[]")
	}
	return c.remote
}

// checkSecurity refuses a listener configuration that cannot work.
func (s *Server) checkSecurity() error {
	p := s.cfg.Protocol
	if _, err := ParseSecurityProtocol(string(p)); err != nil {
		return err
	}
	if s.cfg.Native && p != Plaintext {
		return errors.New("the native protocol has no TLS or SASL: it listens in PLAINTEXT only")
	}
	if p.usesTLS() && s.cfg.TLS == nil {
		return fmt.Errorf("%s needs a TLS certificate and key", p)
	}
	if p.usesSASL() && s.cfg.Security.Source == nil {
		return fmt.Errorf("%s needs the credential store", p)
	}
	for _, m := range s.cfg.Security.Mechanisms {
		if !slices.Contains(security.SupportedMechanisms(), m) {
			return fmt.Errorf("SASL mechanism %q is not supported (%s)", m, strings.Join(security.SupportedMechanisms(), ", "))
		}
	}
	return nil
}

// mechanisms are the SASL mechanisms this listener offers.
func (s *Server) mechanisms() []string {
	if len(s.cfg.Security.Mechanisms) > 0 {
		return s.cfg.Security.Mechanisms
	}
	return security.SupportedMechanisms()
}

// openAuth sets up a new connection's authentication state (OnOpen). It
// reports false when the listener already holds its limit of
// unauthenticated connections. A connection from the TLS front end
// (peer) took its place among them at accept, and its --auth-timeout
// counts from there (tlsfront.go).
func (s *Server) openAuth(c *conn, peer *peerInfo) bool {
	c.auth.opened = time.Now().UnixNano()
	if peer != nil && !peer.accepted.IsZero() {
		c.auth.opened = peer.accepted.UnixNano()
	}
	if !s.cfg.Protocol.usesSASL() {
		c.auth.done.Store(true)
		return true
	}
	if peer != nil && peer.unauthSlot.CompareAndSwap(true, false) {
		c.auth.counted.Store(true)
		return true
	}
	if s.unauthed.Add(1) > int64(s.cfg.Security.MaxUnauthenticatedConns) {
		s.unauthed.Add(-1)
		return false
	}
	c.auth.counted.Store(true)
	return true
}

// authenticated marks c authenticated as principal (SaslAuthenticate's
// goroutine). The principal is written before done, so whoever sees done
// reads it without the lock.
func (c *conn) authenticated(principal string) {
	c.auth.mu.Lock()
	c.auth.principal = principal
	c.auth.exchange = nil
	c.auth.mu.Unlock()
	c.auth.done.Store(true)
	c.srv.uncountAuth(c)
}

// uncountAuth drops c from the unauthenticated count, once: when it
// authenticates or closes.
func (s *Server) uncountAuth(c *conn) {
	if c.auth.counted.CompareAndSwap(true, false) {
		s.unauthed.Add(-1)
	}
}

// inflightLimit is how many of c's requests may be unanswered before the
// event loop stops parsing it: MaxInflightPerConn, but one before
// authentication. A client that has not authenticated has no reason to
// pipeline (its SASL steps wait for each other's answers), and each frame
// in flight holds up to MaxUnauthenticatedBytes; with one, the bytes it
// makes the broker hold stay within that limit (preAuthHeld, holdUnread),
// and its SASL steps never run concurrently.
func (c *conn) inflightLimit() int {
	if !c.auth.done.Load() {
		return 1
	}
	return c.srv.cfg.MaxInflightPerConn
}

// preAuthHeld is what the broker holds of an unauthenticated c's bytes
// besides gnet's unread ones (event loop): the frame being assembled or
// waiting in c.frame, and the frame of its request in flight, if any (at
// most one: inflightLimit). A request whose handler is done but whose
// answer is not yet written still counts: an overestimate only while its
// answer is on its way.
func (c *conn) preAuthHeld() int {
	n := len(c.frame)
	if c.inflight.Load() > 0 {
		n += c.preAuthFrame
	}
	return n
}

// preAuthAllowed is what a SASL listener serves before authentication:
// ApiVersions, SaslHandshake, SaslAuthenticate.
func preAuthAllowed(key int16) bool { return key == 18 || key == 17 || key == 36 }
