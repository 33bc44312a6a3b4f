package quorum

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
)

// BrokerOnly reports whether this node is a broker-only node (a Raft
// non-voter: it never leads, votes or proposes).
func (n *Node) BrokerOnly() bool { return n.nonVoter }

// Addr is the address the leader reaches this node at.
func (n *Node) Addr() string { return n.advertise }

// advertised is a broker-only node's address: host (or the listener's
// own host) with the listener's port.
func advertised(ln net.Addr, host string) (string, error) {
	lhost, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return "", fmt.Errorf("listener address %s: %w", ln, err)
	}
	if host == "" {
		if ip := net.ParseIP(lhost); ip != nil && ip.IsUnspecified() {
			return "", fmt.Errorf("the metadata listener is bound to %s, which the leader cannot dial: name the host to advertise", ln)
		}
		host = lhost
	}
	return net.JoinHostPort(host, port), nil
}

// joinLoop runs on a broker-only node: until the Raft configuration the
// node has lists it at its address, it asks the voters in turn to add it
// (only the leader does; see admitNonVoter). It asks again whenever the
// configuration loses it or has an old address (a restart on another
// port).
func (n *Node) joinLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(n.cfg.HeartbeatTimeout)
	defer tick.Stop()
	asked, refused := false, false // logged once each until the node is a member
	for {
		if n.member() {
			asked, refused = false, false
		} else {
			var err error
			for _, v := range n.cfg.Voters {
				select {
				case <-n.stop:
					return
				default:
				}
				if err = n.stream.join(v.Addr, n.advertise, n.cfg.HandshakeTimeout); err == nil {
					if !asked {
						n.log.Info("asked the metadata leader to add this broker-only node", "leader_addr", v.Addr, "addr", n.advertise)
						asked = true
					}
					break
				}
			}
			if err != nil && !refused {
				n.log.Info("no voter took this broker-only node in yet; retrying", "last_err", err)
				refused = true
			}
		}
		select {
		case <-n.stop:
			return
		case <-tick.C:
		}
	}
}

// member reports whether this node is a live member: the Raft
// configuration it has lists it at its address, and a leader has been in
// touch lately (the configuration it has may be old: it was removed, or
// moved, while down).
func (n *Node) member() bool {
	if time.Since(n.raft.LastContact()) > 3*n.cfg.HeartbeatTimeout {
		return false
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == serverID(n.cfg.NodeID) {
			return string(s.Address) == n.advertise
		}
	}
	return false
}

// MaxBrokerOnlyNodes bounds the non-voters the leader admits (each costs
// it a replication stream).
const MaxBrokerOnlyNodes = 1024

// admitNonVoter answers a broker-only node's join request (the
// handshake's): the leader adds it as a non-voter at addr, or moves it
// there; anyone else refuses. It returns why not, or "".
func (n *Node) admitNonVoter(id int32, addr string) string {
	if _, ok := n.cfg.Voters.Lookup(id); ok {
		return fmt.Sprintf("node %d is a voter; it cannot join as a broker-only node", id)
	}
	if err := checkHostPort(addr); err != nil {
		return fmt.Sprintf("join address: %v", err)
	}
	if host, _, _ := net.SplitHostPort(addr); net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
		return fmt.Sprintf("join address %s: a wildcard address cannot be dialed", addr)
	}
	if !n.IsLeader() {
		return notLeaderReason
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err.Error()
	}
	nonVoters := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			nonVoters++
		}
		switch {
		case s.ID == serverID(id) && string(s.Address) == addr:
			return "" // already there
		case s.ID != serverID(id) && string(s.Address) == addr:
			return fmt.Sprintf("address %s belongs to node %s", addr, s.ID)
		case s.ID == serverID(id):
			// The node moved (a restart on another port), or another
			// node claims its id: the one still answering at the old
			// address as that id keeps it.
			if peer, err := n.stream.probe(string(s.Address), n.cfg.HandshakeTimeout); err == nil && peer == id {
				return fmt.Sprintf("node %d is alive at %s: two broker-only nodes with one id?", id, s.Address)
			}
		}
	}
	if nonVoters >= MaxBrokerOnlyNodes {
		return fmt.Sprintf("the metadata quorum has %d broker-only nodes, the most it takes", nonVoters)
	}
	add := n.raft.AddNonvoter(serverID(id), raft.ServerAddress(addr), 0, 10*time.Second)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := add.Error(); err != nil {
			n.log.Warn("adding a broker-only node to the metadata quorum failed; it asks again", "node", id, "addr", addr, "err", err)
			return
		}
		n.log.Info("added a broker-only node to the metadata quorum (non-voter)", "node", id, "addr", addr)
	}()
	return ""
}

// Members are the voters and the non-voters (broker-only nodes) of the
// Raft configuration this node has, by id.
func (n *Node) Members() (voters, nonVoters []int32, err error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, nil, fmt.Errorf("quorum: %w", err)
	}
	for _, s := range f.Configuration().Servers {
		id, err := strconv.ParseInt(string(s.ID), 10, 32)
		if err != nil {
			continue
		}
		if s.Suffrage == raft.Voter {
			voters = append(voters, int32(id))
		} else {
			nonVoters = append(nonVoters, int32(id))
		}
	}
	slices.Sort(voters)
	slices.Sort(nonVoters)
	return voters, nonVoters, nil
}

// LastIndex is the index of the last entry in this node's Raft log.
func (n *Node) LastIndex() uint64 { return n.raft.LastIndex() }

// CommitIndex is the last Raft index this node knows committed.
func (n *Node) CommitIndex() uint64 { return n.raft.CommitIndex() }

// RemoveNonVoter takes broker-only node id out of the Raft configuration
// (the leader stops sending it the log); it refuses a voter. On the
// leader only. The node joins again if it comes back.
func (n *Node) RemoveNonVoter(ctx context.Context, id int32) error {
	if _, ok := n.cfg.Voters.Lookup(id); ok {
		return fmt.Errorf("quorum: node %d is a voter", id)
	}
	if !n.IsLeader() {
		return n.notLeader()
	}
	return n.wait(ctx, n.raft.RemoveServer(serverID(id), 0, timeoutOf(ctx)))
}
