package netio

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/security"
)

// The TLS front end (SSL and SASL_SSL listeners). gnet's event loops read
// and write raw descriptors, so they cannot speak TLS themselves. Here a
// Go listener accepts, crypto/tls runs the handshake on the connection's
// own goroutine, and the decrypted stream is handed to gnet through a
// socket pair: one end is enrolled in a gnet client engine (the same
// event handler as a plaintext listener, so framing, backpressure,
// responses in order and limits are shared), the other is pumped to and
// from the TLS connection by two goroutines, each with one reusable
// buffer. Fetch responses still leave the log with sendfile, into the
// socket pair; the pump copies them once through its buffer into TLS
// records: TLS costs the zero copy (the MyKafka seed says as much), and
// this is the one copy it costs.
//
// Lifetime: a bridge ends when either side ends. The pump that stops
// first closes both the TLS connection and its end of the pair; gnet
// then sees EOF and closes the connection through OnClose like any
// other. Stop closes the listener, then every bridge.
//
// Limits: a connection in its handshake has not authenticated, so it
// holds a place in both MaxConnections (handshaking) and the listener's
// Security.MaxUnauthenticatedConns (Server.unauthed, the count SASL
// connections use), and its handshake has Security.AuthTimeout (or
// RequestReadTimeout, when shorter) to finish. A connection accepted at
// either limit takes the place of the oldest handshake still running,
// which is closed (admit): silent connections cannot lock clients out
// for longer than it takes a real client to finish a handshake. Once
// handshaken, an SSL connection is authenticated (by its certificate,
// or anonymous) and its unauthenticated place is freed; a SASL_SSL one
// keeps it (peerInfo.unauthSlot) until SASL authenticates it or it
// closes, and its --auth-timeout counts from accept.

// peerInfo is what the front end knows of a client before gnet sees the
// connection (gnet sees only its end of the socket pair): handed to
// OnOpen as the gnet connection's context.
type peerInfo struct {
	remote    string
	principal string // from the client certificate (mTLS); "" without one
	// accepted is when the TCP connection was accepted: a SASL_SSL
	// connection's --auth-timeout counts from there.
	accepted time.Time
	// unauthSlot: the connection holds a place in Server.unauthed,
	// taken at accept. Whoever clears it (OnOpen, which hands it to the
	// connection or releases it when refusing; or the front end, when
	// the enrollment failed before OnOpen) owns it.
	unauthSlot atomic.Bool
}

// tlsFront is an SSL listener's accept loop and its bridges.
type tlsFront struct {
	srv     *Server
	ln      net.Listener
	cfg     *tls.Config
	cli     *gnet.Client
	timeout time.Duration // the handshake's

	// ctx ends every handshake when the front end stops.
	ctx    context.Context
	cancel context.CancelFunc

	// handshaking counts connections accepted and not yet enrolled; with
	// the enrolled ones they stay within MaxConnections.
	handshaking atomic.Int64

	wg      sync.WaitGroup
	mu      sync.Mutex
	bridges map[*bridge]struct{}
	closed  bool
	// pending are the handshakes in progress, oldest first (under mu):
	// the one at the front is displaced when a new connection finds the
	// listener at a limit.
	pending list.List
}

// handshake is one accepted connection until its handshake ends.
type handshake struct {
	nc       net.Conn
	accepted time.Time
	elem     *list.Element // in tlsFront.pending (under mu)
	// displaced: a newer connection took this one's places (under mu);
	// it was closed and must not release them.
	displaced bool
}

// bridgeBufSize is each pump's buffer: one TLS record's worth of
// plaintext (16 KiB) times four, so a large fetch goes in few writes.
const bridgeBufSize = 64 << 10

// startTLS binds the SSL listener, starts the gnet client engine the
// decrypted connections are enrolled in, and accepts in the background.
func (s *Server) startTLS() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	cli, err := gnet.NewClient(s,
		gnet.WithMulticore(true),
		gnet.WithNumEventLoop(s.cfg.EventLoops),
		gnet.WithLogger(gnetLogger{s.logger}),
		gnet.WithReadBufferCap(readBufferCap),
	)
	if err != nil {
		ln.Close()
		return fmt.Errorf("gnet client engine: %w", err)
	}
	f := &tlsFront{srv: s, ln: ln, cfg: s.cfg.TLS, cli: cli,
		timeout: min(s.cfg.Security.AuthTimeout, s.cfg.RequestReadTimeout), bridges: map[*bridge]struct{}{}}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	s.tls = f
	tcpAddr := ln.Addr().(*net.TCPAddr)
	s.addr.Store(tcpAddr)
	if err := s.setAdvertised(tcpAddr); err != nil {
		ln.Close()
		return err
	}
	if err := cli.Start(); err != nil {
		ln.Close()
		return fmt.Errorf("gnet client engine: %w", err)
	}
	f.wg.Add(1)
	go f.accept()
	return nil
}

// accept runs until the listener closes.
func (f *tlsFront) accept() {
	defer f.wg.Done()
	for {
		nc, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: back off a little, as net/http does.
			f.srv.logger.Warn("tls listener: accept failed", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		h := f.admit(nc)
		if h == nil {
			nc.Close()
			continue
		}
		f.wg.Add(1)
		go f.serve(h)
	}
}

// admit reserves nc's places (accept goroutine): one among MaxConnections
// (handshaking) and one among the unauthenticated connections
// (Server.unauthed). At either limit nc takes over the places of the
// oldest handshake still in progress, which is closed; with no handshake
// to displace (the limit is held by enrolled connections), nc is refused
// (nil). Only this goroutine raises handshaking and, on a TLS listener,
// unauthed (OnOpen takes over the place a SASL_SSL connection reserved
// here rather than counting it again), so a check here cannot be
// overtaken by another admission.
func (f *tlsFront) admit(nc net.Conn) *handshake {
	s := f.srv
	now := time.Now()
	h := &handshake{nc: nc, accepted: now}
	atConns := s.conns.Load()+f.handshaking.Load() >= int64(s.cfg.MaxConnections)
	atUnauth := s.unauthed.Load() >= int64(s.cfg.Security.MaxUnauthenticatedConns)
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	var victim *handshake
	if atConns || atUnauth {
		front := f.pending.Front()
		if front == nil {
			f.mu.Unlock()
			reason, flag, limit := "max_connections", "--max-connections", s.cfg.MaxConnections
			if !atConns {
				reason, flag, limit = "max_unauthenticated", "--max-unauthenticated-connections", s.cfg.Security.MaxUnauthenticatedConns
			}
			s.metrics.ConnectionsClosed.WithLabelValues(reason).Inc()
			if n, ok := s.refusals.Allow(now); ok {
				s.logger.Warn("refusing connections: limit reached ("+flag+")",
					"remote", nc.RemoteAddr(), "max", limit, "refused_since_last_log", n)
			}
			return nil
		}
		victim = f.pending.Remove(front).(*handshake)
		victim.displaced, victim.elem = true, nil
	} else {
		f.handshaking.Add(1)
		s.unauthed.Add(1)
	}
	h.elem = f.pending.PushBack(h)
	f.mu.Unlock()
	if victim != nil {
		// Its places are h's now; closing it ends its handshake.
		victim.nc.Close()
		s.metrics.ConnectionsClosed.WithLabelValues("tls_handshake_displaced").Inc()
		if n, ok := s.refusals.Allow(now); ok {
			s.logger.Warn("closing the oldest connection still in its TLS handshake to admit a new one (--max-connections or --max-unauthenticated-connections reached)",
				"remote", victim.nc.RemoteAddr(), "handshaking_for", now.Sub(victim.accepted), "closed_since_last_log", n)
		}
	}
	return h
}

// settle takes h off the pending handshakes once its handshake ended. It
// reports false when h was displaced (and closed): its places belong to
// the connection that displaced it.
func (f *tlsFront) settle(h *handshake) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h.displaced {
		return false
	}
	f.pending.Remove(h.elem)
	h.elem = nil
	return true
}

// serve runs one connection's handshake and, if it succeeds, its bridge.
func (f *tlsFront) serve(h *handshake) {
	defer f.wg.Done()
	s := f.srv
	nc := h.nc
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	tc := tls.Server(nc, f.cfg)
	ctx, cancel := context.WithTimeout(f.ctx, f.timeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if !f.settle(h) {
		nc.Close()
		return
	}
	if err != nil {
		f.handshaking.Add(-1)
		s.unauthed.Add(-1)
		s.metrics.ConnectionsClosed.WithLabelValues("tls_handshake").Inc()
		if n, ok := s.tlsFailures.Allow(time.Now()); ok {
			s.logger.Warn("closing connection: TLS handshake failed", "remote", nc.RemoteAddr(), "err", err, "failed_since_last_log", n)
		}
		nc.Close()
		return
	}
	peer := &peerInfo{remote: nc.RemoteAddr().String(), accepted: h.accepted}
	if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
		peer.principal = security.CertPrincipal(certs[0])
	}
	if s.cfg.Protocol.usesSASL() {
		// Not authenticated yet: the connection keeps its place.
		peer.unauthSlot.Store(true)
	} else {
		// SSL: the handshake authenticated it (mTLS or anonymous).
		s.unauthed.Add(-1)
	}
	b, err := f.enroll(tc, peer)
	// Enrolled (OnOpen has counted it, or refused it) or failed.
	f.handshaking.Add(-1)
	if peer.unauthSlot.CompareAndSwap(true, false) {
		// OnOpen never saw it.
		s.unauthed.Add(-1)
	}
	if err != nil {
		s.logger.Warn("closing connection: cannot hand it to an event loop", "remote", peer.remote, "err", err)
		tc.Close()
		return
	}
	b.run()
	f.mu.Lock()
	delete(f.bridges, b)
	f.mu.Unlock()
}

// bridge is one TLS connection and its end of the socket pair.
type bridge struct {
	tc    *tls.Conn
	inner net.Conn // the pump's end; gnet holds the other
	once  sync.Once
}

// enroll makes the socket pair, enrolls one end in gnet with peer as its
// context, and registers the bridge (refused once the front end stops).
func (f *tlsFront) enroll(tc *tls.Conn, peer *peerInfo) (*bridge, error) {
	fds, err := socketPair()
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	gnetEnd, err := fileConn(fds[0], "tls-gnet")
	if err != nil {
		unix.Close(fds[1])
		return nil, err
	}
	inner, err := fileConn(fds[1], "tls-pump")
	if err != nil {
		gnetEnd.Close()
		return nil, err
	}
	b := &bridge{tc: tc, inner: inner}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		gnetEnd.Close()
		inner.Close()
		return nil, net.ErrClosed
	}
	f.bridges[b] = struct{}{}
	f.mu.Unlock()
	// gnet dups the descriptor and closes gnetEnd itself.
	if _, err := f.cli.EnrollContext(gnetEnd, peer); err != nil {
		b.close()
		f.mu.Lock()
		delete(f.bridges, b)
		f.mu.Unlock()
		return nil, fmt.Errorf("enroll: %w", err)
	}
	return b, nil
}

// fileConn wraps a descriptor as a net.Conn (the runtime's poller waits
// on it); the descriptor is closed on failure.
func fileConn(fd int, name string) (net.Conn, error) {
	file := os.NewFile(uintptr(fd), name)
	c, err := net.FileConn(file)
	file.Close()
	if err != nil {
		return nil, fmt.Errorf("wrap %s: %w", name, err)
	}
	return c, nil
}

// run pumps both ways until either ends, then closes both sides.
func (b *bridge) run() {
	done := make(chan struct{})
	go func() {
		pump(b.inner, b.tc) // requests: client → gnet
		b.close()
		close(done)
	}()
	pump(b.tc, b.inner) // responses: gnet → client
	b.close()
	<-done
}

// pump copies src to dst through one buffer until either fails.
func pump(dst io.Writer, src io.Reader) {
	buf := make([]byte, bridgeBufSize)
	io.CopyBuffer(onlyWriter{dst}, onlyReader{src}, buf)
}

// onlyWriter and onlyReader hide ReadFrom/WriteTo, so io.CopyBuffer uses
// the buffer given instead of a path that allocates its own.
type onlyWriter struct{ io.Writer }
type onlyReader struct{ io.Reader }

func (b *bridge) close() {
	b.once.Do(func() {
		b.tc.Close()
		b.inner.Close()
	})
}

// stop closes the listener and every bridge, waits for their goroutines,
// then stops the gnet client engine.
func (f *tlsFront) stop() error {
	err := f.ln.Close()
	f.cancel()
	f.mu.Lock()
	f.closed = true
	for b := range f.bridges {
		b.close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	if cerr := f.cli.Stop(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
