package netio

import (
	"time"
)

// reap is the listener's reaper goroutine (started by Start, ended when
// the listener stops): every tick it closes the connections that have
// been idle longer than IdleTimeout, or that started a request frame and
// did not finish it within RequestReadTimeout. gnet's Conn.Close is safe
// from any goroutine; OnClose then runs on the connection's event loop as
// for any other close.
func (s *Server) reap() {
	tick := time.NewTicker(reapInterval(s.cfg.IdleTimeout, min(s.cfg.RequestReadTimeout, s.cfg.Security.AuthTimeout)))
	defer tick.Stop()
	for {
		select {
		case <-s.stopped:
			return
		case t := <-tick.C:
			s.reapOnce(t)
		}
	}
}

// reapInterval checks often enough that a connection lives at most about
// a quarter past its timeout, and at most once every 10 ms, at least once
// a second.
func reapInterval(idle, request time.Duration) time.Duration {
	return min(max(min(idle, request)/4, 10*time.Millisecond), time.Second)
}

func (s *Server) reapOnce(now time.Time) {
	ns := now.UnixNano()
	idle, slow := int64(s.cfg.IdleTimeout), int64(s.cfg.RequestReadTimeout)
	s.live.Range(func(k, _ any) bool {
		c := k.(*conn)
		reason, limit := "", time.Duration(0)
		if start := c.frameStart.Load(); start != 0 && ns-start > slow {
			reason, limit = "request_timeout", s.cfg.RequestReadTimeout
		} else if start == 0 && c.inflight.Load() == 0 && !c.paused.Load() && ns-c.lastRead.Load() > idle {
			reason, limit = "idle", s.cfg.IdleTimeout
		} else if !c.auth.done.Load() && ns-c.auth.opened > int64(s.cfg.Security.AuthTimeout) {
			reason, limit = "auth_timeout", s.cfg.Security.AuthTimeout
		}
		if reason == "" {
			return true
		}
		// Closed once: the entry leaves live in OnClose, a tick or more
		// later.
		if !c.reaped.CompareAndSwap(false, true) {
			return true
		}
		s.metrics.ConnectionsClosed.WithLabelValues(reason).Inc()
		if n, ok := s.reaped.Allow(now); ok {
			msg := "closing idle connection (--connections-max-idle)"
			switch reason {
			case "request_timeout":
				msg = "closing connection: request not received in time (--request-read-timeout)"
			case "auth_timeout":
				msg = "closing connection: not authenticated in time (--auth-timeout)"
			}
			s.logger.Warn(msg, "remote", c.remote, "timeout", limit, "closed_since_last_log", n)
		}
		c.gc.Close()
		return true
	})
}
