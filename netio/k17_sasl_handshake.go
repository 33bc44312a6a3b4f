package netio

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/security"
)

// SaslHandshake (key 17, versions 0-1), served on SASL listeners only.
// After version 1 the mechanism's messages travel in SaslAuthenticate
// requests; after version 0 they are bare SASL tokens, each in a frame of
// its own with no Kafka header, answered the same way (handleRawSASL),
// until the exchange ends. librdkafka needs 0 advertised to use SASL at
// all, though it then uses 1. A mechanism not offered gets
// UNSUPPORTED_SASL_MECHANISM with the list; a second handshake,
// ILLEGAL_SASL_STATE.
func handleSaslHandshake(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrSASLHandshakeRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = s.mechanisms()
	c := r.conn
	c.auth.mu.Lock()
	switch {
	case c.auth.done.Load() || c.auth.mechanism != "":
		resp.ErrorCode = kerr.IllegalSaslState.Code
	case !slices.Contains(resp.SupportedMechanisms, req.Mechanism):
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
	default:
		ex, err := security.NewExchange(s.cfg.Security.Source, req.Mechanism)
		if err != nil {
			resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
			break
		}
		c.auth.mechanism, c.auth.exchange = req.Mechanism, ex
		// Set before the answer is queued: the loop parses the next
		// frame only after this handler returns.
		c.auth.rawTokens.Store(r.version == 0)
	}
	c.auth.mu.Unlock()
	r.failed = resp.ErrorCode != 0
	r.respond(resp)
	return frameDone
}

// handleRawSASL handles one bare SASL token after SaslHandshake v0 (event
// loop frames, the step on its own goroutine as SaslAuthenticate's). The
// answer is the server's token in a frame of its own; a failure closes
// the connection after the failed-authentication delay, with no answer
// (v0 has no way to say why).
func (s *Server) handleRawSASL(c *conn, frame []byte) frameOutcome {
	token := frame
	slot := c.slot()
	go func() {
		defer s.pool.put(token)
		c.auth.mu.Lock()
		ex, mech := c.auth.exchange, c.auth.mechanism
		c.auth.mu.Unlock()
		out, done, err := ex.Step(token)
		if err != nil {
			c.auth.failed.Store(true)
			if n, ok := s.authFails.Allow(time.Now()); ok {
				s.logger.Warn("authentication failed", "remote", c.remote, "mechanism", mech, "handshake", 0, "err", err, "failed_since_last_log", n)
			}
			s.metrics.ConnectionsClosed.WithLabelValues("authentication_failed").Inc()
			s.sleepFailedAuth(c)
			c.skip(slot, nil)
			c.gc.Close()
			return
		}
		if done {
			c.auth.rawTokens.Store(false)
			c.authenticated(ex.Principal())
		}
		resp := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(out)), uint32(len(out)))
		c.completeBytes(slot, append(resp, out...))
	}()
	return frameDone
}
