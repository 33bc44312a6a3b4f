package quorum

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ringlog/ringlog/metadata"
)

// BrokerOnly reports whether this node's id is not one of --voters (the
// founding voters): it joins the quorum through them as a Raft
// non-voter, and votes only once promoted (AddVoter).
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

// joinLoop runs on every node: until the Raft configuration the node has
// lists it at its address, it asks the voters in turn to add it (only the
// leader does; see admit), following a follower's hint at the leader. It
// asks again whenever the configuration loses it or has an old address (a
// restart on another port). That is how a broker-only node, or a voter
// whose directory was empty while the cluster ran, comes in, and how a
// voter removed while it was down comes back as a non-voter. A voter of
// the configuration it has waits voterPatience out of touch first: Raft
// brings it back itself after an election or a short cut.
func (n *Node) joinLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(n.cfg.HeartbeatTimeout)
	defer tick.Stop()
	asked, refused := false, "" // logged once each until the node is a member
	var outSince, lastAsk time.Time
	for {
		member := n.member()
		switch {
		case member:
			outSince = time.Time{}
		case outSince.IsZero():
			outSince = time.Now()
		}
		voter := !member && n.voterHere()
		switch {
		case member:
			asked, refused = false, ""
			n.admitted.Store(true)
		case n.deciding.Load():
			// foundLoop asks the voters itself
		case voter && (time.Since(outSince) < voterPatience*n.cfg.ElectionTimeout || time.Since(lastAsk) < voterPatience*n.cfg.ElectionTimeout/4):
			// Raft brings a voter back itself after an election or a
			// short cut; asking is for one removed while it was down.
		default:
			lastAsk = time.Now()
			var err error
			for _, addr := range n.contacts() {
				select {
				case <-n.stop:
					return
				default:
				}
				empty := n.raft.LastIndex() == 0
				err = n.stream.join(addr, n.advertise, empty, n.cfg.HandshakeTimeout)
				var mm *MismatchError
				if errors.As(err, &mm) {
					if hint := leaderHint(mm.Reason); hint != "" && hint != addr && hint != n.advertise {
						addr = hint
						err = n.stream.join(addr, n.advertise, empty, n.cfg.HandshakeTimeout)
					}
				}
				if err == nil {
					n.admitted.Store(true)
					n.joined.Store(true)
					if !asked {
						n.log.Info("asked the metadata leader to add this node", "leader_addr", addr, "addr", n.advertise)
						asked = true
					}
					break
				}
			}
			kind := "other"
			if err != nil && strings.Contains(err.Error(), awaitingRemovalReason) {
				kind = "lost"
			}
			if err != nil && kind != refused {
				if kind == "lost" {
					n.log.Error("this node is a voter of the running cluster, but its metadata directory was empty: it lost its metadata, "+
						"and must not vote until it is added back. Run `ringlog cluster quorum remove-voter "+strconv.Itoa(int(n.cfg.NodeID))+
						"`; it then joins as an observer, and `ringlog cluster quorum add-voter "+strconv.Itoa(int(n.cfg.NodeID))+"` makes it a voter again",
						"dir", n.cfg.Dir)
				} else {
					n.log.Info("no voter took this node in yet; retrying", "last_err", err)
				}
				refused = kind
			}
		}
		select {
		case <-n.stop:
			return
		case <-tick.C:
		}
	}
}

// voterPatience, in election timeouts, is how long a node the
// configuration it has lists as a voter stays out of touch before it asks
// to join.
const voterPatience = 20

// voterHere reports whether the configuration this node has lists it as
// a voter.
func (n *Node) voterHere() bool {
	m, ok, err := n.lookupMember(n.cfg.NodeID)
	return err == nil && ok && m.Voter
}

// contacts are the addresses a joining node asks: the founding voters
// (--voters), then the voters of the configuration it has (a voter added
// since, when the node ran before).
func (n *Node) contacts() []string {
	var addrs []string
	seen := map[string]bool{n.advertise: true}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	for _, v := range n.cfg.Voters {
		add(v.Addr)
	}
	ms, _ := n.Configuration() // none yet: the founding voters alone
	for _, m := range ms {
		if m.Voter {
			add(m.Addr)
		}
	}
	return addrs
}

// leaderHint is the leader's address a follower's refusal names, or "".
func leaderHint(reason string) string {
	_, after, ok := strings.Cut(reason, leaderIsAt)
	if !ok {
		return ""
	}
	if checkHostPort(after) != nil {
		return ""
	}
	return after
}

// foundLoop runs on a founding voter started on an empty directory,
// whose Raft runs without a configuration and takes no connection yet:
// it founds the cluster (BootstrapCluster with --voters) only on evidence
// that there is none, and otherwise leaves the node to joinLoop. A
// voter whose directory was lost must not found the cluster again: its
// empty log would vote while the others still count it, and a leader
// lacking a committed entry could be elected. Evidence of a cluster (any
// one answer): a founding voter took this node in, names a leader, says
// this node lost its metadata, or has a log past the bootstrap entry. No
// cluster: a majority of the founding voters, this one included,
// answered without such evidence (a peer still loading its log answers
// nothing yet: it may have one). Otherwise it asks again (every node of
// a new cluster starting at once bootstraps once enough of them are up;
// a founding voter alone with dead peers waits, and says so).
func (n *Node) foundLoop() {
	defer n.wg.Done()
	defer n.deciding.Store(false)
	waiting := false
	for {
		exists, admitted, answered := n.findCluster()
		switch {
		case exists:
			n.joined.Store(true)
			if admitted {
				n.admitted.Store(true)
			}
			n.log.Warn("this voter's metadata directory is empty but the cluster is running: joining it rather than bootstrapping", "dir", n.cfg.Dir)
			return
		case 2*(answered+1) > len(n.cfg.Voters):
			if err := n.raft.BootstrapCluster(n.cfg.Voters.configuration()).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
				if !n.isStopped() {
					n.stopItself(fmt.Errorf("quorum: bootstrap: %w", err))
				}
				return
			}
			n.admitted.Store(true)
			n.log.Info("founded the metadata quorum", "voters", n.cfg.Voters.String())
			return
		case !waiting:
			n.log.Warn("this voter's metadata directory is empty and too few of the other voters answer to tell a new cluster from a running one: "+
				"waiting for them (a new cluster starts once a majority of --voters is up)", "answered", answered, "voters", len(n.cfg.Voters))
			waiting = true
		}
		select {
		case <-n.stop:
			return
		case <-time.After(n.cfg.ElectionTimeout):
		}
	}
}

// findCluster sends a join request to every other founding voter at once
// and reports whether one gave evidence of a running cluster (see
// foundLoop), whether one took this node in, and how many answered
// without evidence. Each is given min(HandshakeTimeout, 2 election
// timeouts).
func (n *Node) findCluster() (exists, admitted bool, answered int) {
	timeout := min(n.cfg.HandshakeTimeout, 2*n.cfg.ElectionTimeout)
	type answer struct{ exists, admitted, answered bool }
	answers := make(chan answer, len(n.cfg.Voters))
	asked := 0
	for _, v := range n.cfg.Voters {
		if v.ID == n.cfg.NodeID {
			continue
		}
		asked++
		go func(addr string) {
			h := n.stream.hs.hello()
			h.Join, h.Empty = n.advertise, true
			c, peer, err := n.stream.dialHello(addr, timeout, h, false)
			if err == nil {
				c.Close()
				answers <- answer{exists: true, admitted: true}
				return
			}
			var mm *MismatchError
			switch {
			case !errors.As(err, &mm) || !peer.Refused:
				answers <- answer{} // no answer, or one of another cluster
			case peer.Established || leaderHint(mm.Reason) != "" || strings.Contains(mm.Reason, awaitingRemovalReason):
				answers <- answer{exists: true}
			default:
				// A peer still starting may have the log: no answer.
				answers <- answer{answered: strings.Contains(mm.Reason, notLeaderReason) && !strings.Contains(mm.Reason, startingReason)}
			}
		}(v.Addr)
	}
	for range asked {
		a := <-answers
		exists, admitted = exists || a.exists, admitted || a.admitted
		if a.answered {
			answered++
		}
	}
	return exists, admitted, answered
}

// member reports whether this node is a live member: the leader, or the
// Raft configuration it has lists it at its address and a leader has been
// in touch lately (the configuration it has may be old: it was removed,
// or moved, while down).
func (n *Node) member() bool {
	if n.raft.State() == raft.Leader {
		return true
	}
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

// admit answers a join request (the handshake's): the leader adds the
// node as a non-voter at addr, or moves it there; anyone else refuses,
// naming the leader when it knows one. A node the configuration has as a
// voter is not demoted: one with a Raft log, or that never registered (a
// late first start), is told to come in; one that registered and has no
// log is refused until removed (it lost its metadata: see findCluster).
// It returns why not, or "".
func (n *Node) admit(id int32, addr string, empty bool) string {
	if err := checkHostPort(addr); err != nil {
		return fmt.Sprintf("join address: %v", err)
	}
	if host, _, _ := net.SplitHostPort(addr); net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
		return fmt.Sprintf("join address %s: a wildcard address cannot be dialed", addr)
	}
	if v, ok := n.cfg.Voters.Lookup(id); ok && v.Addr != addr {
		return fmt.Sprintf("node %d is a founding voter at %s (--voters), not at %s", id, v.Addr, addr)
	}
	if !n.ready.Load() {
		return startingReason
	}
	if !n.IsLeader() {
		if lid, laddr := n.Leader(); lid >= 0 && laddr != "" {
			return fmt.Sprintf("%s%s%s", notLeaderReason, leaderIsAt, laddr)
		}
		// Not even an empty voter that seems never to have registered:
		// this node's log may lack committed entries (it was behind),
		// its registration among them, and that voter's vote could then
		// elect this node without them. Only the leader, which has every
		// committed entry, can tell a first start from a lost log.
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
		case s.ID == serverID(id) && s.Suffrage == raft.Voter:
			if string(s.Address) != addr {
				return fmt.Sprintf("node %d is a voter at %s, not at %s", id, s.Address, addr)
			}
			if empty {
				// The image must hold every registration committed:
				// a new leader applies its predecessor's last ones
				// only after its own first commit.
				if err := n.raft.Barrier(n.cfg.HandshakeTimeout / 2).Error(); err != nil {
					return notLeaderReason
				}
				if !n.firstStartVoter(id, addr) {
					return fmt.Sprintf("node %d %s: remove it from the voters first (ringlog cluster quorum remove-voter %d)", id, awaitingRemovalReason, id)
				}
			}
			return "" // a voter with its log (cut off a while), or starting for the first time after the others
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
			n.log.Warn("adding a node to the metadata quorum as a non-voter failed; it asks again", "node", id, "addr", addr, "err", err)
			return
		}
		n.log.Info("added a node to the metadata quorum (non-voter)", "node", id, "addr", addr)
	}()
	return ""
}

// firstStartVoter reports whether id is a voter of this node's
// configuration at addr whose broker never registered in this node's
// image: one starting for the first time, which the leader (after a
// Barrier: its image then holds every committed registration) may let
// in with an empty log. Any registration of id in the log, committed or
// not, counts too.
func (n *Node) firstStartVoter(id int32, addr string) bool {
	m, ok, err := n.lookupMember(id)
	if err != nil || !ok || !m.Voter || m.Addr != addr {
		return false
	}
	if _, registered := n.fsm.Image().Broker(id); registered {
		return false
	}
	first, err := n.store.FirstIndex()
	if err != nil {
		return false
	}
	last, err := n.store.LastIndex()
	if err != nil {
		return false
	}
	var entry raft.Log
	for i := max(first, 1); i <= last; i++ {
		if err := n.store.GetLog(i, &entry); err != nil {
			return false // a gap or a read error: do not guess
		}
		if entry.Type != raft.LogCommand {
			continue
		}
		rec, err := metadata.DecodeRecord(entry.Data)
		if err != nil {
			continue
		}
		recs := []metadata.Record{rec}
		if b, ok := rec.(metadata.Batch); ok {
			recs = b.Records
		}
		for _, rec := range recs {
			if r, ok := rec.(metadata.RegisterBroker); ok && r.ID == id {
				return false
			}
		}
	}
	return true
}

// awaitingRemovalReason is the leader's refusal of a join by a voter that
// lost its metadata.
const awaitingRemovalReason = "is a voter that lost its metadata"

// leaderIsAt precedes the leader's address in a follower's refusal.
const leaderIsAt = "; the leader is at "

// Member is one server of the Raft configuration.
type Member struct {
	ID    int32
	Addr  string
	Voter bool
}

// Configuration is the Raft configuration this node has, sorted by id.
func (n *Node) Configuration() ([]Member, error) {
	ms, _, err := n.configuration()
	return ms, err
}

// configuration is Configuration and its log index: a change asked for
// at that index fails if another change came first.
func (n *Node) configuration() ([]Member, uint64, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, 0, fmt.Errorf("quorum: %w", err)
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		id, err := strconv.ParseInt(string(s.ID), 10, 32)
		if err != nil {
			continue
		}
		out = append(out, Member{ID: int32(id), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	slices.SortFunc(out, func(a, b Member) int { return int(a.ID) - int(b.ID) })
	return out, f.Index(), nil
}

// member finds id in ms.
func member(ms []Member, id int32) (Member, bool) {
	if i := slices.IndexFunc(ms, func(m Member) bool { return m.ID == id }); i >= 0 {
		return ms[i], true
	}
	return Member{}, false
}

// Members are the voters and the non-voters (broker-only nodes) of the
// Raft configuration this node has, by id.
func (n *Node) Members() (voters, nonVoters []int32, err error) {
	ms, err := n.Configuration()
	if err != nil {
		return nil, nil, err
	}
	for _, m := range ms {
		if m.Voter {
			voters = append(voters, m.ID)
		} else {
			nonVoters = append(nonVoters, m.ID)
		}
	}
	return voters, nonVoters, nil
}

func (n *Node) lookupMember(id int32) (Member, bool, error) {
	ms, err := n.Configuration()
	if err != nil {
		return Member{}, false, err
	}
	m, ok := member(ms, id)
	return m, ok, nil
}

// LastIndex is the index of the last entry in this node's Raft log.
func (n *Node) LastIndex() uint64 { return n.raft.LastIndex() }

// CommitIndex is the last Raft index this node knows committed.
func (n *Node) CommitIndex() uint64 { return n.raft.CommitIndex() }

// RemoveNonVoter takes non-voter id out of the Raft configuration (the
// leader stops sending it the log); it refuses a voter. On the leader
// only. The node joins again if it comes back.
func (n *Node) RemoveNonVoter(ctx context.Context, id int32) error {
	m, ok, index, err := n.leaderMember(id)
	if err != nil || !ok {
		return err
	}
	if m.Voter {
		return fmt.Errorf("quorum: node %d is a voter", id)
	}
	// At the configuration read: a promotion since fails it.
	return n.wait(ctx, n.raft.RemoveServer(serverID(id), index, timeoutOf(ctx)))
}

// leaderMember is member id of the Raft configuration (ok false when it
// has none) and the configuration's index, read on the leader only.
func (n *Node) leaderMember(id int32) (m Member, ok bool, index uint64, err error) {
	if !n.IsLeader() {
		return m, false, 0, n.notLeader()
	}
	ms, index, err := n.configuration()
	if err != nil {
		return m, false, 0, err
	}
	m, ok = member(ms, id)
	return m, ok, index, nil
}

// ErrNotMember is returned by AddVoter for a node the configuration does
// not have: it must be running and have joined (as a non-voter) first.
var ErrNotMember = errors.New("quorum: not a member of the metadata quorum")

// AddVoter makes non-voter id a voter (hashicorp/raft AddVoter, at the
// address it joined with); a voter already is one. On the leader only.
// The caller makes sure the node has caught up: a voter far behind slows
// every commit until it is.
func (n *Node) AddVoter(ctx context.Context, id int32) error {
	m, ok, index, err := n.leaderMember(id)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: node %d (start it; it joins as an observer)", ErrNotMember, id)
	case m.Voter:
		return nil
	}
	// At the configuration read: a change committed since fails it.
	return n.wait(ctx, n.raft.AddVoter(serverID(id), raft.ServerAddress(m.Addr), index, timeoutOf(ctx)))
}

// RemoveVoter takes voter id out of the Raft configuration; the last
// voter cannot go. On the leader only; removing the leader itself hands
// leadership to another voter once the change commits. The caller makes
// sure the voters left can still form a majority.
func (n *Node) RemoveVoter(ctx context.Context, id int32) error {
	if !n.IsLeader() {
		return n.notLeader()
	}
	ms, index, err := n.configuration()
	if err != nil {
		return err
	}
	var voters []int32
	for _, m := range ms {
		if m.Voter {
			voters = append(voters, m.ID)
		}
	}
	if !slices.Contains(voters, id) {
		return fmt.Errorf("quorum: node %d is not a voter (voters: %v)", id, voters)
	}
	if len(voters) == 1 {
		return fmt.Errorf("quorum: node %d is the last voter", id)
	}
	return n.wait(ctx, n.raft.RemoveServer(serverID(id), index, timeoutOf(ctx)))
}
