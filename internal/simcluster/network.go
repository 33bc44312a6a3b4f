package simcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// Client is the node id the Network gives the test's clients: links
// between Client and a broker carry client traffic.
const Client = 0

// Network is the links between the brokers of a Cluster and its
// clients. Every connection a broker or a test client opens goes through
// Dial, which knows, by address, which node it reaches; the link from
// one node to another (one direction) is up, cut, or slowed by a delay.
//
// A cut direction carries nothing: what is sent that way stalls until the
// link heals (or the sender's deadline passes), as TCP holds back bytes
// a dead switch does not acknowledge; the connection stays open. Dial
// fails while either direction of the link is cut, as a TCP handshake
// would.
type Network struct {
	mu    sync.Mutex
	addrs map[string]int32       // a listener's address → its node
	cut   map[link]bool          // directions that carry nothing
	delay map[link]time.Duration // directions that are slow
}

// link is one direction between two nodes.
type link struct{ from, to int32 }

// NewNetwork is a network with every link up.
func NewNetwork() *Network {
	return &Network{addrs: map[string]int32{}, cut: map[link]bool{}, delay: map[link]time.Duration{}}
}

// Register says that addr is a listener of node id.
func (n *Network) Register(id int32, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addrs[addr] = id
}

// Cut makes the direction from → to lose everything.
func (n *Network) Cut(from, to int32) { n.set(func() { n.cut[link{from, to}] = true }) }

// Partition cuts both directions between a and b.
func (n *Network) Partition(a, b int32) {
	n.set(func() { n.cut[link{a, b}], n.cut[link{b, a}] = true, true })
}

// Delay slows the direction from → to by d per write (0: no delay).
func (n *Network) Delay(from, to int32, d time.Duration) {
	n.set(func() {
		if d <= 0 {
			delete(n.delay, link{from, to})
		} else {
			n.delay[link{from, to}] = d
		}
	})
}

// Heal puts every link back up, with no delay.
func (n *Network) Heal() {
	n.set(func() { clear(n.cut); clear(n.delay) })
}

func (n *Network) set(change func()) {
	n.mu.Lock()
	change()
	n.mu.Unlock()
}

// state is the direction's cut and delay now.
func (n *Network) state(l link) (bool, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[l], n.delay[l]
}

// Dialer is the dial function of node from (a broker's cluster.Config.Dial
// or, with Client, a test client's kgo.Dialer).
func (n *Network) Dialer(from int32) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.mu.Lock()
		to, known := n.addrs[addr]
		n.mu.Unlock()
		if !known {
			return nil, fmt.Errorf("simcluster: node %d dials %s, which no node listens on", from, addr)
		}
		if cut, _ := n.state(link{from, to}); cut {
			return nil, fmt.Errorf("simcluster: dial %s: link %d→%d is cut: %w", addr, from, to, errUnreachable)
		}
		if cut, _ := n.state(link{to, from}); cut {
			return nil, fmt.Errorf("simcluster: dial %s: link %d→%d is cut: %w", addr, to, from, errUnreachable)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &faultConn{Conn: c, net: n, out: link{from, to}, in: link{to, from}, closed: make(chan struct{})}, nil
	}
}

var errUnreachable = errors.New("host unreachable")

// faultConn is a dialed connection whose directions follow the links'
// state: while a direction is cut, what travels that way stalls (held
// back, as TCP holds unacknowledged bytes) until the link heals, the
// connection closes, or the caller's deadline passes.
type faultConn struct {
	net.Conn
	net     *Network
	out, in link

	mu            sync.Mutex
	readDeadline  time.Time
	writeDeadline time.Time
	held          []byte // read from the socket while the way in was cut
	closed        chan struct{}
	once          sync.Once
}

// stallPoll is how often a stalled direction looks at its link again.
const stallPoll = 5 * time.Millisecond

// wait blocks while l is cut; false when the connection closed or the
// deadline passed first.
func (c *faultConn) wait(l link, deadline func() time.Time) bool {
	for {
		if cut, _ := c.net.state(l); !cut {
			return true
		}
		if dl := deadline(); !dl.IsZero() && time.Now().After(dl) {
			return false
		}
		select {
		case <-c.closed:
			return false
		case <-time.After(stallPoll):
		}
	}
}

func (c *faultConn) deadlines() (time.Time, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readDeadline, c.writeDeadline
}

func (c *faultConn) Write(b []byte) (int, error) {
	if _, d := c.net.state(c.out); d > 0 {
		time.Sleep(d)
	}
	if !c.wait(c.out, func() time.Time { _, w := c.deadlines(); return w }) {
		return 0, c.stalled()
	}
	return c.Conn.Write(b)
}

func (c *faultConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	held := c.held
	c.mu.Unlock()
	if len(held) == 0 {
		n, err := c.Conn.Read(b)
		if n == 0 {
			return n, err
		}
		held = append([]byte(nil), b[:n]...)
	}
	if !c.wait(c.in, func() time.Time { r, _ := c.deadlines(); return r }) {
		c.mu.Lock()
		c.held = held
		c.mu.Unlock()
		return 0, c.stalled()
	}
	n := copy(b, held)
	c.mu.Lock()
	c.held = held[n:]
	c.mu.Unlock()
	return n, nil
}

// stalled is the error of a stalled read or write: closed, or timed out.
func (c *faultConn) stalled() error {
	select {
	case <-c.closed:
		return net.ErrClosed
	default:
		return os.ErrDeadlineExceeded
	}
}

func (c *faultConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline, c.writeDeadline = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *faultConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *faultConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeDeadline = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *faultConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
