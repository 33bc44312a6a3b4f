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
	"fmt"
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
	ln       net.Listener

	mu    sync.Mutex
	cond  *sync.Cond
	state linkState
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
		c.Close()
		return
	}
	p.mu.Unlock()
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.Close()
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
	go p.pipe(up, c)
	go p.pipe(c, up)
}

// pipe copies src to dst, holding each chunk while the link is black-holed.
func (p *linkProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	defer func() {
		src.Close()
		dst.Close()
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.state == linkBlackhole {
				p.cond.Wait()
			}
			down := p.state == linkDown || p.conns == nil
			p.mu.Unlock()
			if down {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// set changes the link's state; going down resets its connections.
func (p *linkProxy) set(s linkState) {
	p.mu.Lock()
	p.state = s
	var reset []net.Conn
	if s == linkDown {
		for c := range p.conns {
			reset = append(reset, c)
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range reset {
		c.Close()
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
				n.proxies = append(n.proxies, newLinkProxy(t, int32(from+1), int32(to+1), target))
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

// heal brings every link up.
func (n *linkNet) heal() {
	for _, p := range n.proxies {
		p.set(linkUp)
	}
}
