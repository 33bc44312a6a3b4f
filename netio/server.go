package netio

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/fetchsession"
	"github.com/ringlog/ringlog/internal/ratelog"
	"github.com/ringlog/ringlog/metrics"
)

// Config configures the Kafka listener; DefaultConfig is what ships.
type Config struct {
	// Addr is host:port to listen on; port 0 picks a free port.
	Addr string
	// AdvertisedAddr is the host:port clients are told to connect to;
	// empty: the bound address.
	AdvertisedAddr string
	// MaxRequestBytes rejects (closing the connection) any frame larger
	// than this before reading it. Default 100 MiB, as Kafka's
	// socket.request.max.bytes.
	MaxRequestBytes int
	// MaxConnections refuses connections beyond this many, per listener:
	// the one over the limit is closed at accept, counted in
	// ringlog_connections_closed_by_broker_total{reason="max_connections"}
	// and logged (at most once a second, with the count refused since).
	// Default 10000.
	MaxConnections int
	// IdleTimeout closes a connection that sent nothing and had nothing
	// in flight for this long (Kafka's connections.max.idle.ms). Default
	// 10 minutes.
	IdleTimeout time.Duration
	// RequestReadTimeout closes a connection whose request frame, once
	// its first byte arrived, is not complete this much later (a slow or
	// stalled sender: slowloris). Default 30 s.
	RequestReadTimeout time.Duration
	// MaxInflightPerConn stops reading a connection while this many of its
	// requests are unanswered. Default 100.
	MaxInflightPerConn int
	// MaxPausedBytes bounds the bytes gnet holds, over all of this
	// listener's connections, that clients sent while their connection
	// was not read (paused by backpressure, or the server draining): gnet
	// keeps reading a socket whatever the handler does. A connection that
	// would push the total past it, or hold more than MaxRequestBytes
	// itself, is closed. Default 256 MiB.
	MaxPausedBytes int64
	// EventLoops is the number of gnet event loops. Default GOMAXPROCS.
	EventLoops int
	// FetchCopyBelow: a fetched partition's records shorter than this
	// many bytes are read into the response (pread) and sent with its
	// headers in one sendmsg; longer ones go with sendfile. For the small
	// fetches of consumers at the tail of a log this saves a system call
	// and a TCP segment per partition, where sendfile's zero copy is worth
	// less than its setup. 0: always sendfile. DefaultConfig: 16 KiB.
	FetchCopyBelow int
	// FollowerFetching, in cluster mode, lets consumers that name their
	// rack read from an in-sync replica in it (KIP-392; Kafka's
	// RackAwareReplicaSelector): the leader names it as their preferred
	// read replica, and followers serve them.
	FollowerFetching bool
	// FetchSessions is how many fetch sessions (KIP-227) the listener
	// keeps (Kafka's max.incremental.fetch.session.cache.slots): a
	// consumer in a session sends only the partitions whose position
	// changed, and is answered only with those that have something new.
	// When all are taken, a new one evicts the least recently used if it
	// went unused for 2 minutes, else the client fetches without one.
	// Negative: no sessions. DefaultConfig: 1000.
	FetchSessions int
	// ShareSessions is how many share sessions (KIP-932 share consumers,
	// one per member) the listener keeps; a new one past it is refused
	// SHARE_SESSION_LIMIT_REACHED. 0: the default.
	ShareSessions int
	// MaxUncompressedBatchBytes bounds what a produced compressed batch's
	// records may decompress to (the broker looks inside every batch, as
	// Kafka's log validator does, streaming, never the whole batch in
	// memory): a larger one is refused MESSAGE_TOO_LARGE after at most
	// this much decompression, so a small "bomb" costs little. Native
	// fetches decompress within the same bound. DefaultConfig: 64 MiB.
	MaxUncompressedBatchBytes int64
	// Native serves the MyKafka native protocol (native.go) instead of
	// Kafka's.
	Native bool
	// NativePrincipal is who every connection of a native listener acts
	// as: the protocol authenticates nobody, so Security.Authorizer
	// checks its requests against this principal's ACLs (READ for FETCH,
	// WRITE for PRODUCE, CREATE for CREATE_TOPIC, the group's READ for
	// COMMIT_OFFSET and DESCRIBE for FETCH_OFFSET). Empty: User:ANONYMOUS.
	NativePrincipal string
	// Protocol is the listener's security protocol (Kafka's names):
	// PLAINTEXT (the zero value), SSL, SASL_PLAINTEXT or SASL_SSL. SSL
	// and SASL_SSL need TLS; the SASL ones need Security.Source.
	Protocol SecurityProtocol
	// TLS is the server side of SSL and SASL_SSL listeners (certificate,
	// client authentication). Build it with GetConfigForClient or
	// GetCertificate to reload certificates without a restart.
	TLS *tls.Config
	// Security holds authentication and authorization: the SASL
	// credentials, the ACL authorizer and the limits before a client is
	// authenticated. The zero value: nobody authenticates, everything
	// is allowed.
	Security Security
	// Logger receives the listener's logs. Default: slog.Default().
	Logger *slog.Logger
	// Cluster is cluster mode (cluster.go); nil: a single broker.
	Cluster Cluster
	// Peers forwards requests to the controller in cluster mode
	// (admin.go).
	Peers Peers
	// Metrics are the instruments the server counts in; build them with
	// metrics.New(APIs()...) so every API's are there before a request
	// arrives. Default: a fresh set nobody reads.
	Metrics *metrics.Metrics
}

// DefaultConfig is the listener configuration that ships, less the
// address (package broker's DefaultConfig adds it). NewServer fills a zero
// limit from it.
func DefaultConfig() Config {
	return Config{
		MaxRequestBytes:           100 << 20,
		MaxConnections:            10000,
		IdleTimeout:               10 * time.Minute,
		RequestReadTimeout:        30 * time.Second,
		MaxInflightPerConn:        100,
		MaxPausedBytes:            256 << 20,
		FetchCopyBelow:            16 << 10,
		FetchSessions:             1000,
		ShareSessions:             1000,
		Protocol:                  Plaintext,
		MaxUncompressedBatchBytes: 64 << 20,
		Security:                  DefaultSecurity(),
	}
}

// APIs lists the Kafka APIs the server counts requests of, for
// metrics.New.
func APIs() []metrics.API {
	var all []apiHandler
	for _, t := range [][]apiHandler{apiTable, txnAPITable, shareAPITable, saslAPITable, credentialAPITable, aclAPITable, clusterAPITable, clusterAdminAPITable, shareStateAPITable} {
		all = append(all, t...)
	}
	apis := make([]metrics.API, 0, len(all))
	for _, h := range all {
		apis = append(apis, metrics.API{Key: h.key, Name: h.name})
	}
	return apis
}

// Server serves the Kafka protocol (or, with Config.Native, the native
// protocol) for an engine.
type Server struct {
	gnet.BuiltinEventEngine

	cfg     Config
	eng     *engine.Engine
	admin   admin.Service // cfg.Cluster, or the engine's (admin.go)
	logger  *slog.Logger
	metrics *metrics.Metrics
	pool    bufPool

	gnetEng   gnet.Engine
	addr      atomic.Pointer[net.TCPAddr]
	adv       atomic.Pointer[advertised]
	booted    chan error
	stopped   chan struct{}
	runErr    error
	conns     atomic.Int64
	unauthed  atomic.Int64 // connections not authenticated yet: before SASL, or in a TLS handshake
	unread    atomic.Int64 // bytes gnet holds for connections not read (holdUnread)
	nextID    atomic.Uint64
	closeOnce sync.Once
	handlers  [maxAPIKey + 1]*apiHandler
	// flexibleFrom holds, per served API key, the first version whose
	// request header has tagged fields (flexibleFrom); -1 for the rest.
	flexibleFrom [maxAPIKey + 1]int16
	draining     atomic.Bool
	drained      chan struct{} // closed by Drain: parked fetches answer at once
	// parkedFetches counts long-poll fetches waiting now (fetch.park).
	parkedFetches atomic.Int64
	drainOnce     sync.Once
	live          sync.Map // *conn -> struct{}: open connections, for Drain and the reaper
	refusals      ratelog.Limiter
	reaped        ratelog.Limiter
	// tls is the TLS front end of SSL and SASL_SSL listeners; nil for
	// plaintext ones (gnet listens itself).
	tls         *tlsFront
	tlsFailures ratelog.Limiter
	authFails   ratelog.Limiter
	rr          sync.Map // topic -> *atomic.Uint32: native round-robin
	// fetchSessions holds the listener's fetch sessions (k01_fetch.go).
	fetchSessions *fetchsession.Cache
	// shareSessions holds the listener's share sessions (k78_share_fetch.go).
	shareSessions *shareSessions
}

// NewServer prepares a server; Start binds and serves. It registers
// nothing: cfg.Metrics comes complete.
func NewServer(eng *engine.Engine, cfg Config) *Server {
	def := DefaultConfig()
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = def.MaxRequestBytes
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = def.MaxConnections
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = def.IdleTimeout
	}
	if cfg.RequestReadTimeout <= 0 {
		cfg.RequestReadTimeout = def.RequestReadTimeout
	}
	if cfg.MaxInflightPerConn <= 0 {
		cfg.MaxInflightPerConn = def.MaxInflightPerConn
	}
	if cfg.MaxPausedBytes <= 0 {
		cfg.MaxPausedBytes = def.MaxPausedBytes
	}
	if cfg.EventLoops <= 0 {
		cfg.EventLoops = runtime.GOMAXPROCS(0)
	}
	if cfg.ShareSessions <= 0 {
		cfg.ShareSessions = def.ShareSessions
	}
	if cfg.FetchSessions == 0 {
		cfg.FetchSessions = def.FetchSessions
	}
	if cfg.MaxUncompressedBatchBytes <= 0 {
		cfg.MaxUncompressedBatchBytes = def.MaxUncompressedBatchBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(APIs()...)
	}
	if cfg.Protocol == "" {
		cfg.Protocol = Plaintext
	}
	defSec := DefaultSecurity()
	if cfg.Security.MaxUnauthenticatedConns <= 0 {
		cfg.Security.MaxUnauthenticatedConns = defSec.MaxUnauthenticatedConns
	}
	if cfg.Security.MaxUnauthenticatedBytes <= 0 {
		cfg.Security.MaxUnauthenticatedBytes = defSec.MaxUnauthenticatedBytes
	}
	if cfg.Security.AuthTimeout <= 0 {
		cfg.Security.AuthTimeout = defSec.AuthTimeout
	}
	if cfg.Security.FailedAuthDelay < 0 {
		cfg.Security.FailedAuthDelay = 0
	}
	s := &Server{cfg: cfg, eng: eng, logger: cfg.Logger, metrics: cfg.Metrics,
		booted: make(chan error, 1), stopped: make(chan struct{}), drained: make(chan struct{})}
	s.admin = admin.ForEngine(eng)
	if cfg.Cluster != nil {
		s.admin = cfg.Cluster
	}
	s.fetchSessions = fetchsession.NewCache(cfg.FetchSessions, 0, fetchsession.Observer{
		Sessions: cfg.Metrics.FetchSessions, Evictions: cfg.Metrics.FetchSessionEvictions,
	})
	s.shareSessions = newShareSessions(cfg.ShareSessions)
	for i := range apiTable {
		h := &apiTable[i]
		s.handlers[h.key] = h
	}
	var extra []apiHandler
	if !cfg.Native {
		extra = append(extra, shareAPITable...)
	}
	if !cfg.Native {
		extra = append(extra, txnAPITable...)
	}
	if cfg.Protocol.usesSASL() {
		extra = append(extra, saslAPITable...)
	}
	if cfg.Security.Source != nil && !cfg.Native {
		extra = append(extra, credentialAPITable...)
	}
	if cfg.Security.Authorizer != nil && !cfg.Native {
		extra = append(extra, aclAPITable...)
	}
	for i := range extra {
		h := &extra[i]
		s.handlers[h.key] = h
	}
	if cfg.Cluster != nil {
		for _, t := range [][]apiHandler{clusterAPITable, clusterAdminAPITable, shareStateAPITable} {
			for i := range t {
				s.handlers[t[i].key] = &t[i]
			}
		}
	}
	for k, h := range s.handlers {
		s.flexibleFrom[k] = -1
		if h != nil {
			s.flexibleFrom[k] = flexibleFrom(int16(k))
		}
	}
	return s
}

// Start binds the listener and serves in the background. It returns once
// the listener is accepting (or failed to bind).
func (s *Server) Start() error {
	if _, _, err := net.SplitHostPort(s.cfg.Addr); err != nil {
		return fmt.Errorf("%s listener %q: %w", s.protoName(), s.cfg.Addr, err)
	}
	if s.cfg.AdvertisedAddr != "" {
		if _, _, err := net.SplitHostPort(s.cfg.AdvertisedAddr); err != nil {
			return fmt.Errorf("advertised address %q: %w", s.cfg.AdvertisedAddr, err)
		}
	}
	if err := s.checkSecurity(); err != nil {
		return fmt.Errorf("%s listener %s: %w", s.protoName(), s.cfg.Addr, err)
	}
	if s.cfg.Protocol.usesTLS() {
		if err := s.startTLS(); err != nil {
			return fmt.Errorf("%s listener %s: %w", s.protoName(), s.cfg.Addr, err)
		}
		go s.reap()
		return nil
	}
	go func() {
		err := gnet.Run(s, "tcp://"+s.cfg.Addr,
			gnet.WithMulticore(true),
			gnet.WithNumEventLoop(s.cfg.EventLoops),
			gnet.WithReuseAddr(true),
			gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			gnet.WithLogger(gnetLogger{s.logger}),
			gnet.WithReadBufferCap(readBufferCap),
		)
		s.runErr = err
		select {
		case s.booted <- err:
		default:
		}
		close(s.stopped)
	}()
	if err := <-s.booted; err != nil {
		return fmt.Errorf("%s listener %s: %w", s.protoName(), s.cfg.Addr, err)
	}
	go s.reap()
	return nil
}

// heldRunBytes bounds a run of frames whose responses leave in one write
// (conn.holdWrites): after this many request bytes the responses so far
// are sent, so that a response waits for at most one request of this size
// (or a few smaller ones) to be handled behind it.
const heldRunBytes = 64 << 10

// readBufferCap is the most gnet reads from a socket per readable event,
// into its event loop's buffer, before OnTraffic sees it.
const readBufferCap = 256 << 10

// setAdvertised works out the address given to clients: the configured
// one, or the bound one (0.0.0.0 or :: become 127.0.0.1). OnBoot calls it
// before the event loops serve anything.
func (s *Server) setAdvertised(bound *net.TCPAddr) error {
	adv := s.cfg.AdvertisedAddr
	if adv == "" {
		host, _, _ := net.SplitHostPort(s.cfg.Addr)
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		adv = net.JoinHostPort(host, strconv.Itoa(bound.Port))
	}
	ah, ap, err := net.SplitHostPort(adv)
	if err != nil {
		return fmt.Errorf("advertised address %q: %w", adv, err)
	}
	p, err := strconv.Atoi(ap)
	if err != nil {
		return fmt.Errorf("advertised address %q: bad port", adv)
	}
	s.adv.Store(&advertised{ah, int32(p)})
	return nil
}

type advertised struct {
	host string
	port int32
}

func (s *Server) protoName() string {
	if s.cfg.Native {
		return "native"
	}
	return "kafka"
}

// Addr is the bound address.
func (s *Server) Addr() *net.TCPAddr { return s.addr.Load() }

// Protocol is the listener's security protocol, which is also its
// listener name in cluster mode.
func (s *Server) Protocol() SecurityProtocol { return s.cfg.Protocol }

// Advertised is the host and port given to clients in Metadata.
func (s *Server) Advertised() (string, int32) {
	if a := s.adv.Load(); a != nil {
		return a.host, a.port
	}
	return "", 0
}

// Drain stops parsing new requests on every connection and waits until
// the requests already parsed are answered (or ctx ends).
func (s *Server) Drain(ctx context.Context) error {
	s.draining.Store(true)
	s.drainOnce.Do(func() { close(s.drained) })
	// Parked fetches answer with what they have (a fetch parking now
	// sees drained itself).
	s.live.Range(func(k, _ any) bool {
		k.(*conn).expireParked()
		return true
	})
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		busy := 0
		s.live.Range(func(k, _ any) bool {
			if k.(*conn).inflight.Load() > 0 {
				busy++
			}
			return true
		})
		if busy == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain: %d connections still have requests in flight: %w", busy, ctx.Err())
		case <-tick.C:
		}
	}
}

// Stop closes the listener and every connection.
func (s *Server) Stop(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		if s.tls != nil {
			err = s.tls.stop()
			close(s.stopped)
			return
		}
		err = s.gnetEng.Stop(ctx)
		select {
		case <-s.stopped:
		case <-ctx.Done():
		}
	})
	return err
}

// OnBoot learns the bound address (port 0 picks one).
func (s *Server) OnBoot(eng gnet.Engine) gnet.Action {
	s.gnetEng = eng
	if s.cfg.Protocol.usesTLS() {
		// The TLS front end's client engine: no listener of its own
		// (startTLS learnt the address).
		return gnet.None
	}
	fd, err := eng.Dup()
	if err != nil {
		s.booted <- fmt.Errorf("dup listener: %w", err)
		return gnet.Shutdown
	}
	sa, err := unix.Getsockname(fd)
	unix.Close(fd)
	if err != nil {
		s.booted <- fmt.Errorf("getsockname: %w", err)
		return gnet.Shutdown
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		s.addr.Store(&net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port})
	case *unix.SockaddrInet6:
		s.addr.Store(&net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port})
	default:
		s.booted <- errors.New("listener is not TCP")
		return gnet.Shutdown
	}
	if err := s.setAdvertised(s.addr.Load()); err != nil {
		s.booted <- err
		return gnet.Shutdown
	}
	s.booted <- nil
	return gnet.None
}

// OnOpen accepts a connection unless the limit is reached.
func (s *Server) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	// Counted before anything is allocated, so that event loops
	// accepting at once cannot overshoot the limit together.
	peer, _ := gc.Context().(*peerInfo)
	if s.conns.Add(1) > int64(s.cfg.MaxConnections) {
		s.conns.Add(-1)
		if peer != nil && peer.unauthSlot.CompareAndSwap(true, false) {
			s.unauthed.Add(-1)
		}
		s.metrics.ConnectionsClosed.WithLabelValues("max_connections").Inc()
		if n, ok := s.refusals.Allow(time.Now()); ok {
			s.logger.Warn("refusing connections: max connections reached (--max-connections)",
				"remote", gc.RemoteAddr(), "max", s.cfg.MaxConnections, "refused_since_last_log", n)
		}
		return nil, gnet.Close
	}
	c := newConn(s, gc, s.nextID.Add(1), peer)
	if !s.openAuth(c, peer) {
		s.conns.Add(-1)
		s.metrics.ConnectionsClosed.WithLabelValues("max_unauthenticated").Inc()
		if n, ok := s.refusals.Allow(time.Now()); ok {
			s.logger.Warn("refusing connections: too many connections not authenticated yet",
				"remote", c.remote, "max", s.cfg.Security.MaxUnauthenticatedConns, "refused_since_last_log", n)
		}
		return nil, gnet.Close
	}
	c.lastRead.Store(time.Now().UnixNano())
	s.live.Store(c, struct{}{})
	s.metrics.Connections.Inc()
	s.metrics.ConnectionsOpen.Inc()
	gc.SetContext(c)
	return nil, gnet.None
}

// OnClose stops the connection's writer.
func (s *Server) OnClose(gc gnet.Conn, err error) gnet.Action {
	if c, ok := gc.Context().(*conn); ok && c != nil {
		if c.frame != nil {
			s.pool.put(c.frame)
			c.frame = nil
		}
		s.releaseUnread(c)
		s.uncountAuth(c)
		s.releaseShareSessions(c)
		c.close(true)
		s.live.Delete(c)
		s.conns.Add(-1)
		s.metrics.Connections.Dec()
		if err != nil {
			s.logger.Debug("connection closed", "remote", c.remote, "err", err)
		}
	}
	return gnet.None
}

// OnTraffic assembles request frames and dispatches each whole one,
// unless the connection is paused or the server draining.
//
// Bytes are consumed from gnet as they arrive and copied once, into the
// frame's pooled buffer: gnet then never has to keep (and copy) a partial
// frame in its own inbound buffer, and the frame needs no further copy to
// outlive the read. Frames above MaxRequestBytes are refused on their
// length prefix, before anything is allocated.
func (s *Server) OnTraffic(gc gnet.Conn) gnet.Action {
	c, ok := gc.Context().(*conn)
	if !ok || c == nil {
		return gnet.Close
	}
	c.holdWrites()
	action := s.traffic(gc, c)
	c.flushHeld()
	return action
}

// traffic is OnTraffic's work on c, the responses of what it dispatches
// held until it returns.
func (s *Server) traffic(gc gnet.Conn, c *conn) gnet.Action {
	now := time.Now().UnixNano()
	c.lastRead.Store(now)
	run := 0 // bytes of the frames dispatched since the last flush
	for {
		if s.draining.Load() || c.paused.Load() {
			return s.holdUnread(c, gc)
		}
		if c.frame != nil && c.filled == len(c.frame) {
			n := len(c.frame)
			switch s.dispatch(c) {
			case frameDone:
				if run += n; run >= heldRunBytes {
					// Enough to answer: the first response of the
					// run waits no longer for those behind it.
					c.flushHeld()
					c.holdWrites()
					run = 0
				}
				continue
			case framePaused:
				return s.holdUnread(c, gc)
			default:
				return gnet.Close
			}
		}
		avail := c.inbound(gc)
		if avail == 0 {
			if c.frame == nil || !s.readDirect(c, gc) {
				return gnet.None
			}
			continue
		}
		if c.frame == nil {
			if c.nhdr == 0 {
				c.frameStart.Store(now)
			}
			k, err := s.readIn(c, gc, c.hdr[c.nhdr:4])
			if err != nil {
				return gnet.None
			}
			c.nhdr += k
			if c.nhdr < 4 {
				continue
			}
			c.nhdr = 0
			size := int32(binary.BigEndian.Uint32(c.hdr[:]))
			minSize := int32(8) // Kafka: api key, version, correlation id
			if s.cfg.Native {
				minSize = 1 // native: the api key
			}
			if c.auth.rawTokens.Load() {
				minSize = 0 // a SASL token after SaslHandshake v0 (auth.go)
			}
			if size < minSize || int(size) > s.cfg.MaxRequestBytes {
				s.logger.Warn("closing connection: invalid request size", "remote", c.remote, "size", size, "max", s.cfg.MaxRequestBytes)
				return gnet.Close
			}
			if !c.auth.done.Load() && int(size)+c.preAuthHeld()+c.over.n > s.cfg.Security.MaxUnauthenticatedBytes {
				s.logger.Warn("closing connection: request too large before authentication (--max-unauthenticated-request-bytes)", "remote", c.remote,
					"size", size, "held_bytes", c.preAuthHeld()+c.over.n, "max", s.cfg.Security.MaxUnauthenticatedBytes)
				return gnet.Close
			}
			c.frame, c.filled = s.pool.get(int(size)), 0
			continue
		}
		k, err := s.readIn(c, gc, c.frame[c.filled:])
		if err != nil {
			return gnet.None
		}
		c.filled += k
		if c.filled == len(c.frame) {
			// Whole: from now on waiting is the broker's doing.
			c.frameStart.Store(0)
		}
	}
}

// holdUnread is OnTraffic's return while c is not read (paused, or the
// server draining). gnet cannot be told to stop reading a socket: on
// every readable event it reads up to readBufferCap bytes into the
// connection's inbound buffer, which grows without limit (and, growing,
// keeps several times its size in garbage). So what a client sends while
// its connection is not read is moved here into the connection's
// overflow chunks, whose memory is exactly what is counted, and the
// connection is closed (dropping it) when its bytes would pass
// MaxRequestBytes or the chunks holding them, over the listener,
// MaxPausedBytes. Before
// authentication the connection's limit is
// Security.MaxUnauthenticatedBytes for everything it makes the broker
// hold: these bytes, the frame waiting in c.frame and the one in flight
// (preAuthHeld).
func (s *Server) holdUnread(c *conn, gc gnet.Conn) gnet.Action {
	n := gc.InboundBuffered()
	if n == 0 {
		return gnet.None
	}
	charge := c.over.chargeWith(n)
	if !c.auth.done.Load() {
		if held := c.preAuthHeld(); c.over.n+n+held > s.cfg.Security.MaxUnauthenticatedBytes {
			s.logger.Warn("closing connection: it kept sending before authenticating (--max-unauthenticated-request-bytes)",
				"remote", c.remote, "unread_bytes", c.over.n+n, "held_bytes", held, "max", s.cfg.Security.MaxUnauthenticatedBytes)
			return gnet.Close
		}
	} else if c.over.n+n > s.cfg.MaxRequestBytes {
		s.logger.Warn("closing connection: it kept sending while not read (backpressure)",
			"remote", c.remote, "unread_bytes", c.over.n+n, "max", s.cfg.MaxRequestBytes)
		return gnet.Close
	}
	if d := int64(charge - c.unread); d > 0 {
		if total := s.unread.Add(d); total > s.cfg.MaxPausedBytes {
			s.unread.Add(-d)
			s.logger.Warn("closing connection: the listener's connections hold too many unread bytes (backpressure)",
				"remote", c.remote, "unread_bytes", c.over.n+n, "listener_unread_bytes", total-d, "max", s.cfg.MaxPausedBytes)
			return gnet.Close
		}
		c.unread = charge
	}
	b, err := gc.Next(n)
	if err != nil {
		return gnet.Close
	}
	c.over.write(b, &s.pool)
	return gnet.None
}

// recharge brings c's share of the unread count down to what its
// overflow still holds (event loop, after reading from it).
func (s *Server) recharge(c *conn) {
	if d := c.over.charge - c.unread; d < 0 {
		s.unread.Add(int64(d))
		c.unread += d
	}
}

// releaseUnread drops c's share of the unread count and its overflow
// (it closes).
func (s *Server) releaseUnread(c *conn) {
	c.over.release(&s.pool)
	if c.unread != 0 {
		s.unread.Add(-int64(c.unread))
		c.unread = 0
	}
}

// inbound is what c has to read: its overflow, then gnet's buffer.
func (c *conn) inbound(gc gnet.Conn) int { return c.over.n + gc.InboundBuffered() }

// readDirect reads the rest of c's frame, once everything gnet read is
// consumed, from the socket straight into the frame's buffer (at most
// what the frame still lacks), and reports whether it read anything. It
// saves the copy through gnet's read buffer (7 % of the broker's CPU at
// max-rate produce of 1 KiB records) and the readable events of a large
// request. It is safe because gnet polls level-triggered: whatever it
// leaves in the socket wakes the loop again; an empty socket, EOF or an
// error read nothing here, and gnet's own next read sees them.
func (s *Server) readDirect(c *conn, gc gnet.Conn) bool {
	dst := c.frame[c.filled:]
	if len(dst) == 0 {
		return false
	}
	n, err := readSocket(gc.Fd(), dst)
	if err != nil || n <= 0 {
		return false
	}
	c.filled += n
	s.metrics.DirectReadBytes.Add(float64(n))
	if c.filled == len(c.frame) {
		c.frameStart.Store(0) // whole: from now on waiting is the broker's doing
	}
	return true
}

// readSocket is one read(2) of fd into b, retrying EINTR.
func readSocket(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// readIn copies the next bytes c has to read into dst (its overflow
// first, then gnet's buffer) and returns how many.
func (s *Server) readIn(c *conn, gc gnet.Conn, dst []byte) (int, error) {
	if c.over.n > 0 {
		k := c.over.read(dst, &s.pool)
		s.recharge(c)
		return k, nil
	}
	b, err := gc.Next(min(len(dst), gc.InboundBuffered()))
	if err != nil {
		return 0, err
	}
	return copy(dst, b), nil
}

// dispatch hands a whole frame to its handler (event loop), unless the
// connection has too many requests in flight.
func (s *Server) dispatch(c *conn) frameOutcome {
	limit := c.inflightLimit()
	if int(c.inflight.Load()) >= limit {
		c.pausedInflght.Store(true)
		c.paused.Store(true)
		// The writer may have drained everything in between.
		if int(c.inflight.Load()) >= limit {
			return framePaused
		}
		c.pausedInflght.Store(false)
		c.paused.Store(false)
	}
	if !c.auth.done.Load() {
		c.preAuthFrame = len(c.frame)
	}
	handle := s.handleFrame
	switch {
	case s.cfg.Native:
		handle = s.handleNativeFrame
	case c.auth.rawTokens.Load():
		handle = s.handleRawSASL
	}
	out := handle(c, c.frame)
	switch out {
	case frameDone:
		// The handler owns the buffer now.
		c.frame, c.filled = nil, 0
	case frameClose:
		s.pool.put(c.frame)
		c.frame, c.filled = nil, 0
	}
	// framePaused: the whole frame stays, dispatched again on resume.
	return out
}

type frameOutcome int

const (
	frameDone   frameOutcome = iota // dispatched; the handler owns the buffer
	framePaused                     // not dispatched; the conn is paused
	frameClose                      // close the connection
)

// gnetLogger sends gnet's own logs to slog.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(f string, a ...any) { g.l.Debug("gnet: " + fmt.Sprintf(f, a...)) }
func (g gnetLogger) Infof(f string, a ...any)  { g.l.Debug("gnet: " + fmt.Sprintf(f, a...)) }
func (g gnetLogger) Warnf(f string, a ...any)  { g.l.Warn("gnet: " + fmt.Sprintf(f, a...)) }
func (g gnetLogger) Errorf(f string, a ...any) { g.l.Error("gnet: " + fmt.Sprintf(f, a...)) }
func (g gnetLogger) Fatalf(f string, a ...any) { g.l.Error("gnet: " + fmt.Sprintf(f, a...)) }
