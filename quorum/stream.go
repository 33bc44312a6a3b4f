package quorum

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/raft"
)

// DialFunc opens a connection to a peer's Raft address. The default is a
// net.Dialer; tests route each link through a proxy with their own.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// The handshake. Before Raft's own bytes, each side of a new connection
// sends a hello — the dialer first, the acceptor in reply:
//
//	+--------+-----+---------+-------+-----+-----------+-----+--------+-----+--------+
//	| "RLQR" | ver | node id | flags | len | clusterID | len | voters | len | reason |
//	| 4      | u8  | i32 BE  | u8    | u8  |           | u16 |        | u16 |        |
//	+--------+-----+---------+-------+-----+-----------+-----+--------+-----+--------+
//
// ver is 1; flags bit 0 set means "refused" (only in a reply, with the
// reason); clusterID is empty while the node does not know it yet; voters
// is the canonical --voters spec. Each side checks the other's hello
// (same voters, the id --voters gives the dialed address, and equal
// cluster ids when both are known) and drops the connection on a
// mismatch, so nodes of different clusters or with different voter sets
// never exchange a Raft message. A node whose id is not in the voters is
// a broker-only node: a Raft non-voter, which receives the log and never
// votes.
//
// Flags bit 1 is a join request (bit 2 with it: the node has no Raft
// log yet; the answer to such a request sets bit 3 when the answering
// node's log goes past the bootstrap entry), sent by a broker-only node (or a voter
// whose directory was empty while the cluster ran) to the voters on a
// connection of its own: its hello ends with the address the leader
// reaches it at (u16 length, then the host:port). The leader adds it as a
// non-voter (or updates its address) and replies; the others refuse
// ("not the metadata leader; the leader is at host:port" when they know
// it); either way the connection then closes. Nodes before broker-only
// nodes refuse the flag: a broker-only node joins a cluster whose voters
// all run this version.
//
// A node that has not been taken in yet (an empty directory, joining)
// closes Raft connections without a reply, as if it were not listening:
// it must not vote or take entries before the leader knows it.
// maxJoinAddr bounds a join request's address (a DNS name, a colon and a
// port).
const maxJoinAddr = 262

const (
	helloMagic      = "RLQR"
	helloVersion    = 1
	helloFixed      = 4 + 1 + 4 + 1 + 1
	flagRefused     = 1
	flagJoin        = 2
	flagEmpty       = 4
	flagEstablished = 8
)

type hello struct {
	NodeID    int32
	Refused   bool
	ClusterID string
	Voters    string
	Reason    string
	// Join, when set, asks to be added as a non-voter reached at this
	// address.
	Join string
	// Empty, in a join request, says the node has no Raft log: a voter
	// that says so after it registered lost its metadata.
	Empty bool
	// Established, in the answer to such a request, says the answering
	// node's Raft log goes past the bootstrap entry: a leader was elected
	// once, so the cluster exists.
	Established bool
}

func (h hello) encode() []byte {
	clip := func(s string, n int) string {
		if len(s) > n {
			return s[:n]
		}
		return s
	}
	cid, voters, reason := clip(h.ClusterID, 255), clip(h.Voters, 65535), clip(h.Reason, 65535)
	b := make([]byte, 0, helloFixed+len(cid)+4+len(voters)+len(reason))
	b = append(b, helloMagic...)
	b = append(b, helloVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(h.NodeID))
	var flags byte
	if h.Refused {
		flags |= flagRefused
	}
	join := clip(h.Join, 65535)
	if join != "" {
		flags |= flagJoin
		if h.Empty {
			flags |= flagEmpty
		}
	}
	if h.Established {
		flags |= flagEstablished
	}
	b = append(b, flags, byte(len(cid)))
	b = append(b, cid...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(voters)))
	b = append(b, voters...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(reason)))
	b = append(b, reason...)
	if join != "" {
		b = binary.BigEndian.AppendUint16(b, uint16(len(join)))
		b = append(b, join...)
	}
	return b
}

var errNotPeer = errors.New("not a ringlog Raft peer")

// readHello reads one hello. It never reads more than the hello and never
// allocates more than its length fields allow (≤ 128 KiB and a join
// address of maxJoinAddr).
func readHello(r io.Reader) (hello, error) {
	var fixed [helloFixed]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return hello{}, fmt.Errorf("read hello: %w", err)
	}
	if string(fixed[:4]) != helloMagic {
		return hello{}, fmt.Errorf("%w: bad magic %q", errNotPeer, fixed[:4])
	}
	if fixed[4] != helloVersion {
		return hello{}, fmt.Errorf("%w: hello version %d, this node speaks %d", errNotPeer, fixed[4], helloVersion)
	}
	if fixed[9]&^(flagRefused|flagJoin|flagEmpty|flagEstablished) != 0 || fixed[9]&(flagJoin|flagEmpty) == flagEmpty {
		return hello{}, fmt.Errorf("%w: unknown flags %#x", errNotPeer, fixed[9])
	}
	h := hello{NodeID: int32(binary.BigEndian.Uint32(fixed[5:9])), Refused: fixed[9]&flagRefused != 0}
	str := func(n int) (string, error) {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", fmt.Errorf("read hello: %w", err)
		}
		if !utf8.Valid(b) {
			return "", fmt.Errorf("%w: hello string is not UTF-8", errNotPeer)
		}
		return string(b), nil
	}
	u16 := func() (int, error) {
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, fmt.Errorf("read hello: %w", err)
		}
		return int(binary.BigEndian.Uint16(b[:])), nil
	}
	var err error
	if h.ClusterID, err = str(int(fixed[10])); err != nil {
		return hello{}, err
	}
	n, err := u16()
	if err != nil {
		return hello{}, err
	}
	if h.Voters, err = str(n); err != nil {
		return hello{}, err
	}
	if n, err = u16(); err != nil {
		return hello{}, err
	}
	if h.Reason, err = str(n); err != nil {
		return hello{}, err
	}
	h.Empty = fixed[9]&flagEmpty != 0
	h.Established = fixed[9]&flagEstablished != 0
	if fixed[9]&flagJoin != 0 {
		if n, err = u16(); err != nil {
			return hello{}, err
		}
		if n > maxJoinAddr {
			return hello{}, fmt.Errorf("%w: a join address of %d bytes", errNotPeer, n)
		}
		if h.Join, err = str(n); err != nil {
			return hello{}, err
		}
		if h.Join == "" {
			return hello{}, fmt.Errorf("%w: a join request without an address", errNotPeer)
		}
	}
	return h, nil
}

// MismatchError is a peer this node refuses to talk Raft with, or that
// refused this node: different voter sets, different cluster ids, or an
// address that --voters gives to another node. It is a configuration
// error that retrying does not fix.
type MismatchError struct {
	// Peer is the other node's id, -1 if it did not say.
	Peer int32
	// Addr is the address dialed, or the remote address of an accepted
	// connection.
	Addr   string
	Reason string
}

// Error names the peer and the reason.
func (e *MismatchError) Error() string {
	return fmt.Sprintf("quorum: peer node %d at %s: %s", e.Peer, e.Addr, e.Reason)
}

// handshaker holds what this node says and checks in handshakes.
type handshaker struct {
	nodeID    int32
	voters    Voters
	clusterID func() string
	// report is called after each handshake: err is nil for a good one,
	// a *MismatchError otherwise.
	report func(peer int32, addr string, err *MismatchError)
	// join answers a join request: "" once the node is (being) added,
	// else why not.
	join func(peer int32, addr string, empty bool) string
	// open reports whether Raft connections are taken: false on a node
	// with an empty directory until the leader took it in.
	open func() bool
	// established reports whether this node knows a cluster runs (see
	// Node.established).
	established func() bool
}

func (h *handshaker) hello() hello {
	return hello{NodeID: h.nodeID, ClusterID: h.clusterID(), Voters: h.voters.String()}
}

// check returns why this node must not talk to peer (nil if it may);
// dialed is the address this node dialed ("" on the accepting side).
func (h *handshaker) check(peer hello, dialed string) string {
	if mine := h.voters.String(); peer.Voters != mine {
		return fmt.Sprintf("voters differ: node %d has %q, node %d has %q; start every node with the same --voters", peer.NodeID, peer.Voters, h.nodeID, mine)
	}
	if peer.NodeID < 0 {
		return fmt.Sprintf("node id %d is negative", peer.NodeID)
	}
	if peer.NodeID == h.nodeID {
		// An address that leads back here (a join request's address
		// spelled differently from this node's): talking Raft to
		// itself would make a leader step down.
		return fmt.Sprintf("node %d answered as this node itself", peer.NodeID)
	}
	if dialed != "" {
		if v, ok := h.voters.byAddr(dialed); ok && v.ID != peer.NodeID {
			return fmt.Sprintf("dialed %s, which --voters gives to node %d, but node %d answered", dialed, v.ID, peer.NodeID)
		}
		if _, voterAddr := h.voters.byAddr(dialed); !voterAddr {
			// A broker-only node's address: a voter must not answer
			// there (a join aimed at a voter under another spelling).
			if _, voter := h.voters.Lookup(peer.NodeID); voter {
				return fmt.Sprintf("dialed %s, a broker-only node's address, but voter %d answered", dialed, peer.NodeID)
			}
		}
	}
	if mine := h.clusterID(); mine != "" && peer.ClusterID != "" && peer.ClusterID != mine {
		return fmt.Sprintf("cluster ids differ: node %d belongs to cluster %s, node %d to cluster %s; a data directory from another cluster?", peer.NodeID, peer.ClusterID, h.nodeID, mine)
	}
	return ""
}

// streamLayer is the raft.StreamLayer under the NetworkTransport: a
// listener whose accepted connections pass the handshake before Raft sees
// them, and a Dial that goes through the configured DialFunc and the
// handshake.
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr
	dial      DialFunc
	timeout   time.Duration // handshake deadline
	hs        *handshaker
	tls       *TLS // nil: plain TCP

	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	mu        sync.Mutex
	pending   map[net.Conn]struct{} // accepted, handshake not finished
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// advertisedAddr is the voter address of this node, what raft reports as
// its own address (the listener may be bound to another one).
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

func newStreamLayer(ln net.Listener, advertise string, dial DialFunc, tlsCfg *TLS, timeout time.Duration, hs *handshaker) *streamLayer {
	s := &streamLayer{ln: ln, advertise: advertisedAddr(advertise), dial: dial, tls: tlsCfg, timeout: timeout, hs: hs,
		conns: make(chan net.Conn), done: make(chan struct{}), pending: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

func (s *streamLayer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient error (EMFILE...): back off a little.
			select {
			case <-s.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		s.mu.Lock()
		select {
		case <-s.done:
			s.mu.Unlock()
			c.Close()
			return
		default:
		}
		s.pending[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handshakeIn(c)
	}
}

func (s *streamLayer) handshakeIn(raw net.Conn) {
	defer s.wg.Done()
	handed := false
	c := raw
	defer func() {
		s.mu.Lock()
		delete(s.pending, raw)
		s.mu.Unlock()
		if !handed {
			c.Close()
		}
	}()
	remote := c.RemoteAddr().String()
	c.SetDeadline(time.Now().Add(s.timeout))
	if s.tls != nil {
		tc := tls.Server(raw, s.tls.Server())
		c = tc
		if err := s.tls.handshake(context.Background(), tc); err != nil {
			return // not a peer with a certificate this node accepts; its dialer sees why
		}
	}
	peer, err := readHello(c)
	if err != nil {
		return // a port scanner, a half-open dial, or a non-ringlog client
	}
	me := s.hs.hello()
	if reason := s.hs.check(peer, ""); reason != "" {
		me.Refused, me.Reason = true, reason
		c.Write(me.encode())
		s.hs.report(peer.NodeID, remote, &MismatchError{Peer: peer.NodeID, Addr: remote, Reason: reason})
		return
	}
	if peer.Join != "" {
		if reason := s.hs.join(peer.NodeID, peer.Join, peer.Empty); reason != "" {
			me.Refused, me.Reason = true, reason
		}
		// Only a node of this version asks with Empty, and only it
		// reads the flag.
		me.Established = peer.Empty && s.hs.established()
		c.Write(me.encode())
		return // a join request's connection carries nothing else
	}
	if !s.hs.open() {
		return // not taken into the quorum yet: as if not listening (see findCluster)
	}
	if _, err := c.Write(me.encode()); err != nil {
		return
	}
	c.SetDeadline(time.Time{})
	s.hs.report(peer.NodeID, remote, nil)
	select {
	case s.conns <- c:
		handed = true
	case <-s.done:
	}
}

// Accept returns the next connection that passed the handshake.
func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes connections still in their handshake.
func (s *streamLayer) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		close(s.done)
		for c := range s.pending {
			c.Close()
		}
		s.mu.Unlock()
		err = s.ln.Close()
		s.wg.Wait()
	})
	return err
}

// Addr is this node's voter address.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to a peer and runs the handshake.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, _, err := s.dialHello(string(address), timeout, s.hs.hello(), true)
	return c, err
}

// join asks the voter at addr to add this node as a non-voter reached at
// advertise (empty: it has no Raft log); it returns nil once the voter (the leader) accepted.
func (s *streamLayer) join(addr, advertise string, empty bool, timeout time.Duration) error {
	h := s.hs.hello()
	h.Join, h.Empty = advertise, empty
	c, _, err := s.dialHello(addr, timeout, h, false)
	var mm *MismatchError
	if errors.As(err, &mm) && !strings.Contains(mm.Reason, notLeaderReason) && !strings.Contains(mm.Reason, awaitingRemovalReason) {
		s.hs.report(mm.Peer, addr, mm) // another cluster, other voters: the operator's to fix
	}
	if err != nil {
		return err
	}
	return c.Close()
}

// probe runs a handshake with the node at addr and returns its id: a
// broker-only node still alive at its address answers with its own.
func (s *streamLayer) probe(addr string, timeout time.Duration) (int32, error) {
	c, peer, err := s.dialHello(addr, timeout, s.hs.hello(), false)
	if err != nil {
		return -1, err
	}
	return peer.NodeID, c.Close()
}

// notLeaderReason is a voter's answer to a join request when it is not
// the leader (the joining node asks the next one).
const notLeaderReason = "not the metadata leader"

// startingReason is the answer of a node that has not loaded its Raft
// log yet: it cannot tell whether it has one, so a voter deciding whether
// to found the cluster must not count it as a node of a new cluster (see
// findCluster). It contains notLeaderReason: to a joining node, and to a
// node of an older version, it is one more "ask the next one".
const startingReason = notLeaderReason + ": still starting"

// dialHello connects to the peer at addr and runs the handshake, sending
// mine; with report, the outcome is reported as a Raft connection's (a
// join's refusal by a voter that is not the leader is no mismatch).
func (s *streamLayer) dialHello(addr string, timeout time.Duration, mine hello, report bool) (net.Conn, hello, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := s.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, hello{}, err
	}
	c.SetDeadline(time.Now().Add(s.timeout))
	if s.tls != nil {
		if c, err = s.tls.Dialed(ctx, c, addr); err != nil {
			return nil, hello{}, fmt.Errorf("quorum: %w", err)
		}
	}
	if _, err := c.Write(mine.encode()); err != nil {
		c.Close()
		return nil, hello{}, fmt.Errorf("quorum: handshake with %s: %w", addr, err)
	}
	peer, err := readHello(c)
	if err != nil {
		c.Close()
		return nil, hello{}, fmt.Errorf("quorum: handshake with %s: %w", addr, err)
	}
	reason := peer.Reason
	if peer.Refused {
		reason = "refused this node: " + reason
	} else {
		reason = s.hs.check(peer, addr)
	}
	if reason != "" {
		c.Close()
		mm := &MismatchError{Peer: peer.NodeID, Addr: addr, Reason: reason}
		if report {
			s.hs.report(peer.NodeID, addr, mm)
		}
		return nil, peer, mm
	}
	c.SetDeadline(time.Time{})
	if report {
		s.hs.report(peer.NodeID, addr, nil)
	}
	return c, peer, nil
}
