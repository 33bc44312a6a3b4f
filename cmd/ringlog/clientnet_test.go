package main

// The network as the clients see it. Every client of a cluster test
// belongs to a side (the producers' "main", a zombie's), and dials each
// broker through a proxy of that side's own, so a test can cut one side
// off from some brokers (a client-side partition) while the brokers
// still reach each other, and the other sides still reach everyone.

import (
	"context"
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// clientNet is one proxy per (side, broker) pair.
type clientNet struct {
	// proxies[side][broker address] forwards that side's connections to
	// the broker.
	proxies map[string]map[string]*linkProxy
	brokers []string // the brokers' Kafka addresses, node id - 1
}

// newClientNet proxies every broker of c for each side.
func newClientNet(t *testing.T, c *testCluster, sides ...string) *clientNet {
	n := &clientNet{proxies: map[string]map[string]*linkProxy{}, brokers: c.kafka}
	for _, side := range sides {
		n.proxies[side] = map[string]*linkProxy{}
		for i, addr := range c.kafka {
			n.proxies[side][addr] = newLinkProxy(t, 0, int32(i+1), addr)
		}
	}
	return n
}

// dialer is the kgo option that sends a side's connections through its
// proxies (an address that is not a broker's is dialed directly).
func (n *clientNet) dialer(side string) kgo.Opt {
	proxies := n.proxies[side]
	var d net.Dialer
	return kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		if p, ok := proxies[host]; ok {
			host = p.addr()
		}
		return d.DialContext(ctx, network, host)
	})
}

// cut sets side's links to broker id to s (linkBlackhole: the side's
// packets to it and from it are lost; linkDown: its connections are reset
// and refused).
func (n *clientNet) cut(side string, id int32, s linkState) {
	n.proxies[side][n.brokers[id-1]].set(s)
}

// onlyTo leaves side able to reach broker id alone: every other broker's
// link is set to s.
func (n *clientNet) onlyTo(side string, id int32, s linkState) {
	for i, addr := range n.brokers {
		if int32(i+1) != id {
			n.proxies[side][addr].set(s)
		}
	}
}

// heal brings every side's links up.
func (n *clientNet) heal() {
	for _, ps := range n.proxies {
		for _, p := range ps {
			p.set(linkUp)
		}
	}
}
