package main

// Links between brokers through in-test TCP proxies: every connection a
// broker opens to another broker (Raft, replica fetches, requests to the
// controller) goes, by --peer-dial-map, through a proxy of its own for
// that directed link and address, which the test can cut (connections
// reset, new ones refused) or black-hole (connections accepted, bytes
// held until the link heals, as a network that drops every packet would
// hold them in TCP's retransmissions). Clients reach the brokers
// directly, so a broker cut off from the others still serves them.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// linkState is what a proxied link does with traffic.
type linkState int

const (
	linkUp        linkState = iota // bytes flow
	linkDown                       // connections reset, new ones closed at once
	linkBlackhole                  // bytes held until the link is up again
)

// linkProxy forwards one directed link (from one broker to one address
// of another).
type linkProxy struct {
	from, to int32
	target   string
	raft     bool // target is a Raft (controller) address
	ln       net.Listener

	mu    sync.Mutex
	cond  *sync.Cond
	state linkState
	// fwdHeld and backHeld hold the bytes of one direction only (a
	// one-way cut): fwd is what from sends to, back what it answers.
	fwdHeld, backHeld bool
	// delay holds every chunk, both ways, this long before passing it on
	// (a slow link).
	delay time.Duration
	conns map[net.Conn]struct{}
}

func newLinkProxy(t *testing.T, from, to int32, target string) *linkProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{from: from, to: to, target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *linkProxy) addr() string { return p.ln.Addr().String() }

func (p *linkProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *linkProxy) handle(c net.Conn) {
	p.mu.Lock()
	if p.state == linkDown {
		p.mu.Unlock()
		reset(c)
		return
	}
	p.mu.Unlock()
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		// The broker refused (killed, not yet listening): the client
		// sees a reset, as it would see a refusal without the proxy,
		// rather than a clean close that clients take for a TLS mistake.
		reset(c)
		return
	}
	p.mu.Lock()
	if p.conns == nil { // closed meanwhile
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go p.pipe(up, c, true)
	go p.pipe(c, up, false)
}

// pipe copies src to dst, holding each chunk while the link is black-holed
// (or, forward or back, while that direction is held).
func (p *linkProxy) pipe(dst, src net.Conn, forward bool) {
	buf := make([]byte, 64<<10)
	var readErr error
	defer func() {
		src.Close()
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			reset(dst) // pass a reset on as a reset
		} else {
			dst.Close()
		}
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.state == linkBlackhole || (forward && p.fwdHeld) || (!forward && p.backHeld) {
				p.cond.Wait()
			}
			down := p.state == linkDown || p.conns == nil
			delay := p.delay
			p.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay)
			}
			if down {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			readErr = err
			return
		}
	}
}

// reset closes c with an RST rather than a FIN, as a dead peer or a
// refused connection would end it.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// hold holds (or lets go) the bytes of one direction of the link's
// connections: forward, what from sends; else what it is answered.
func (p *linkProxy) hold(forward, held bool) {
	p.mu.Lock()
	if forward {
		p.fwdHeld = held
	} else {
		p.backHeld = held
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// slow delays every chunk of the link by d (0: no delay).
func (p *linkProxy) slow(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// set changes the link's state, letting go of held directions and of a
// delay; going down resets its connections.
func (p *linkProxy) set(s linkState) {
	p.mu.Lock()
	p.state = s
	p.fwdHeld, p.backHeld, p.delay = false, false, 0
	var toReset []net.Conn
	if s == linkDown {
		for c := range p.conns {
			toReset = append(toReset, c)
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range toReset {
		reset(c)
	}
}

func (p *linkProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.state = linkDown
	p.cond.Broadcast()
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// linkNet is every directed link between the brokers of a testCluster:
// one proxy per (from, to, address of to), for its Raft and Kafka
// addresses.
type linkNet struct {
	proxies []*linkProxy
}

// newLinkNet proxies every link between c's brokers; c's brokers started
// afterwards dial each other through them (peerDialMap).
func newLinkNet(t *testing.T, c *testCluster) *linkNet {
	n := &linkNet{}
	for from := range c.kafka {
		for to := range c.kafka {
			if from == to {
				continue
			}
			for _, target := range []string{c.kafka[to], c.ctrl[to]} {
				p := newLinkProxy(t, int32(from+1), int32(to+1), target)
				p.raft = target == c.ctrl[to]
				n.proxies = append(n.proxies, p)
			}
		}
	}
	c.links = n
	return n
}

// peerDialMap is broker id's --peer-dial-map: each other broker's address
// → the proxy of the link from id to it.
func (n *linkNet) peerDialMap(id int32) string {
	var kv []string
	for _, p := range n.proxies {
		if p.from == id {
			kv = append(kv, fmt.Sprintf("%s=%s", p.target, p.addr()))
		}
	}
	return strings.Join(kv, ",")
}

// isolate sets every link from or to broker id to s (linkBlackhole: cut
// it off from the other brokers, while clients still reach it).
func (n *linkNet) isolate(id int32, s linkState) {
	for _, p := range n.proxies {
		if p.from == id || p.to == id {
			p.set(s)
		}
	}
}

// mute holds every byte broker id sends to the other brokers, on the
// connections it opened and on those they opened to it, while it still
// receives theirs: a one-way cut (its packets are lost, theirs arrive).
func (n *linkNet) mute(id int32) {
	for _, p := range n.proxies {
		switch {
		case p.from == id:
			p.hold(true, true)
		case p.to == id:
			p.hold(false, true)
		}
	}
}

// deafen holds every byte the other brokers send to broker id, on the
// connections they opened to it and on those it opened to them (their
// answers), while what it sends still arrives: the other one-way cut.
func (n *linkNet) deafen(id int32) {
	for _, p := range n.proxies {
		switch {
		case p.to == id:
			p.hold(true, true)
		case p.from == id:
			p.hold(false, true)
		}
	}
}

// healSlowRaft brings every link of broker id up, its Raft links slowed
// by d: the broker hears the controller's quorum again, and its Kafka
// requests (heartbeats) get through, long before its metadata has caught
// up.
func (n *linkNet) healSlowRaft(id int32, d time.Duration) {
	for _, p := range n.proxies {
		p.set(linkUp)
		if p.raft && (p.from == id || p.to == id) {
			p.slow(d)
		}
	}
}

// holdRaft black-holes broker id's Raft links (its metadata stops
// moving) while its Kafka links (heartbeats, replica fetches) still flow.
func (n *linkNet) holdRaft(id int32) {
	for _, p := range n.proxies {
		if p.raft && (p.from == id || p.to == id) {
			p.set(linkBlackhole)
		}
	}
}

// heal brings every link up.
func (n *linkNet) heal() {
	for _, p := range n.proxies {
		p.set(linkUp)
	}
}
