package netio

import (
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Share sessions (KIP-932): a share consumer's ShareFetch and
// ShareAcknowledge requests to one broker form a session, keyed by group
// and member, whose epoch the client counts up from 0 (open) with every
// answered request; -1 closes it. The session remembers the partitions
// the member fetches, so a later request names only what changed
// (Topics adds, ForgottenTopicsData removes). A session belongs to the
// connection that opened it: when the connection closes, or the session
// does, the member's acquired records here are released for others.

type shareSessionKey struct{ group, member string }

type sharePartKey struct {
	topic     [16]byte
	partition int32
}

type shareSession struct {
	// id tells this session's acquisitions from those of the member's
	// other sessions (engine.Owner).
	id    uint64
	epoch int32
	conn  *conn
	// busy: a request of the session is being answered (set by begin,
	// cleared by done, under shareSessions.mu); only that request
	// touches parts and order, and a second one meanwhile is refused.
	busy  bool
	parts map[sharePartKey]struct{}
	order []sharePartKey // the partitions in the order they were added
}

func (ss *shareSession) add(k sharePartKey) {
	if _, ok := ss.parts[k]; !ok {
		ss.parts[k] = struct{}{}
		ss.order = append(ss.order, k)
	}
}

func (ss *shareSession) forget(k sharePartKey) {
	if _, ok := ss.parts[k]; !ok {
		return
	}
	delete(ss.parts, k)
	for i, o := range ss.order {
		if o == k {
			ss.order = append(ss.order[:i], ss.order[i+1:]...)
			break
		}
	}
}

// shareSessions is a listener's share sessions, at most max of them,
// at most maxSharePerConn of one connection.
type shareSessions struct {
	mu       sync.Mutex
	max      int
	sessions map[shareSessionKey]*shareSession
	nextID   uint64
}

// maxSharePerConn bounds the share sessions one connection opens (a
// client has one member, so one session per broker): one connection
// cannot take the listener's whole budget.
const maxSharePerConn = 16

func newShareSessions(max int) *shareSessions {
	return &shareSessions{max: max, sessions: map[shareSessionKey]*shareSession{}}
}

// begin checks a request's session epoch and returns its session: a new
// one for epoch 0 (replacing the member's old one), the stored one for a
// positive epoch that matches, the stored one for -1 (closing). The
// session's epoch moves on in done.
func (s *shareSessions) begin(c *conn, k shareSessionKey, epoch int32) (*shareSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[k]
	switch {
	case epoch == 0:
		if ss == nil && len(s.sessions) >= s.max {
			return nil, fmt.Errorf("%w: this broker holds %d share sessions (--share-sessions)", kerr.ShareSessionLimitReached, s.max)
		}
		if ss != nil && ss.busy && ss.conn != c {
			return nil, fmt.Errorf("%w: member %q has a share session in use on another connection", kerr.InvalidShareSessionEpoch, k.member)
		}
		if (ss == nil || ss.conn != c) && c.shareSessions >= maxSharePerConn {
			return nil, fmt.Errorf("%w: this connection holds %d share sessions", kerr.ShareSessionLimitReached, c.shareSessions)
		}
		if ss != nil {
			ss.conn.shareSessions-- // replaced
		}
		s.nextID++
		ss = &shareSession{id: s.nextID, conn: c, parts: map[sharePartKey]struct{}{}, busy: true}
		s.sessions[k] = ss
		c.shareSessions++
		return ss, nil
	case ss == nil:
		return nil, fmt.Errorf("%w: no share session of member %q in group %q", kerr.ShareSessionNotFound, k.member, k.group)
	case ss.busy:
		return nil, fmt.Errorf("%w: a request of this share session is still being answered", kerr.InvalidShareSessionEpoch)
	case ss.conn != c:
		return nil, fmt.Errorf("%w: the share session was opened on another connection", kerr.ShareSessionNotFound)
	case epoch != -1 && epoch != ss.epoch:
		return nil, fmt.Errorf("%w: share session epoch %d, expected %d", kerr.InvalidShareSessionEpoch, epoch, ss.epoch)
	}
	ss.busy = true
	return ss, nil
}

// done ends a request of session ss: its epoch moves on (ok), or, for a
// closing request, the session is removed; a failed request leaves the
// epoch where it was.
func (s *shareSessions) done(k shareSessionKey, ss *shareSession, ok, closing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss.busy = false
	if closing {
		if s.sessions[k] == ss {
			delete(s.sessions, k)
			ss.conn.shareSessions--
		}
		return
	}
	if ok {
		ss.epoch = max(1, ss.epoch+1)
	}
}

// closedSession is a session a closed connection held.
type closedSession struct {
	key shareSessionKey
	id  uint64
}

// closeConn removes the sessions of c and returns them (their records
// are then released).
func (s *shareSessions) closeConn(c *conn) []closedSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.shareSessions == 0 {
		return nil // the common case: not a share consumer's connection
	}
	c.shareSessions = 0
	var out []closedSession
	for k, ss := range s.sessions {
		if ss.conn == c {
			delete(s.sessions, k)
			out = append(out, closedSession{k, ss.id})
		}
	}
	return out
}

// live reports whether ss is still k's session (its connection did not
// close, no epoch 0 replaced it).
func (s *shareSessions) live(k shareSessionKey, ss *shareSession) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[k] == ss
}
