package netio

import (
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/security"
)

// SaslAuthenticate (key 36, versions 0-2), served on SASL listeners only,
// on its own goroutine (a SCRAM step derives keys: milliseconds of CPU).
// Each request carries one message of the mechanism chosen by
// SaslHandshake; the last step marks the connection authenticated.
// Session lifetime is 0: no re-authentication is asked for (KIP-368 is
// optional and not implemented). A failed step is answered with
// SASL_AUTHENTICATION_FAILED after Security.FailedAuthDelay, and the
// connection closes once the answer is written, as Kafka does.
func handleSaslAuthenticate(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrSASLAuthenticateRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	c := r.conn
	c.auth.mu.Lock()
	ex, mech := c.auth.exchange, c.auth.mechanism
	c.auth.mu.Unlock()
	if c.auth.done.Load() || ex == nil {
		msg := "SaslAuthenticate without a SaslHandshake first, or after authentication"
		resp.ErrorCode, resp.ErrorMessage = kerr.IllegalSaslState.Code, &msg
		s.failAuth(r, resp, false)
		return frameDone
	}
	out, done, err := ex.Step(req.SASLAuthBytes)
	if err != nil {
		msg := "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mech
		if errors.Is(err, security.ErrMalformedSASL) {
			msg = "Authentication failed: malformed " + mech + " message"
		}
		resp.ErrorCode, resp.ErrorMessage = kerr.SaslAuthenticationFailed.Code, &msg
		s.metrics.ConnectionsClosed.WithLabelValues("authentication_failed").Inc()
		if n, ok := s.authFails.Allow(time.Now()); ok {
			s.logger.Warn("authentication failed", "remote", c.remote, "mechanism", mech, "err", err, "failed_since_last_log", n)
		}
		s.failAuth(r, resp, true)
		return frameDone
	}
	resp.SASLAuthBytes = out
	if done {
		c.authenticated(ex.Principal())
		s.logger.Debug("authenticated", "remote", c.remote, "mechanism", mech, "principal", ex.Principal())
	}
	r.respond(resp)
	return frameDone
}

// failAuth answers a failed SaslAuthenticate (after the failed
// authentication delay when delay is set, cut short if the connection
// closes) and closes the connection once the answer is out.
func (s *Server) failAuth(r *request, resp *kmsg.SASLAuthenticateResponse, delay bool) {
	r.conn.auth.failed.Store(true)
	if delay {
		s.sleepFailedAuth(r.conn)
	}
	r.failed = true
	r.resp.closeAfter = true
	r.respond(resp)
}

// sleepFailedAuth waits Security.FailedAuthDelay, or until c closes.
func (s *Server) sleepFailedAuth(c *conn) {
	d := s.cfg.Security.FailedAuthDelay
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.done:
	}
}
