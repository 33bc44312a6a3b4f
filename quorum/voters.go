package quorum

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
)

// Voter is one member of the founding voter set: a node id and the host:port
// of its Raft listener.
type Voter struct {
	ID   int32
	Addr string
}

// Voters is the voter set, sorted by id.
type Voters []Voter

// ParseVoters parses a --voters spec, "1@host:port,2@host:port,...": node
// ids are distinct non-negative integers, addresses distinct host:port
// pairs with a non-empty host and a port from 1 to 65535. Whitespace
// around entries is ignored. The result is sorted by id, so two specs
// listing the same voters in another order are equal (String).
func ParseVoters(spec string) (Voters, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("voters: empty list; want id@host:port[,id@host:port]")
	}
	var vs Voters
	ids := map[int32]bool{}
	addrs := map[string]int32{}
	for _, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		idStr, addr, ok := strings.Cut(entry, "@")
		if !ok {
			return nil, fmt.Errorf("voters: %q is not id@host:port", entry)
		}
		id, err := strconv.ParseInt(idStr, 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("voters: %q: the node id must be a non-negative integer", entry)
		}
		if err := checkHostPort(addr); err != nil {
			return nil, fmt.Errorf("voters: %q: %w", entry, err)
		}
		if ids[int32(id)] {
			return nil, fmt.Errorf("voters: node id %d appears twice", id)
		}
		if other, dup := addrs[addr]; dup {
			return nil, fmt.Errorf("voters: nodes %d and %d have the same address %s", other, id, addr)
		}
		ids[int32(id)], addrs[addr] = true, int32(id)
		vs = append(vs, Voter{ID: int32(id), Addr: addr})
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].ID < vs[j].ID })
	return vs, nil
}

func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: the port must be 1 to 65535", addr)
	}
	return nil
}

// String is the canonical spec: entries sorted by id.
func (vs Voters) String() string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%d@%s", v.ID, v.Addr)
	}
	return strings.Join(parts, ",")
}

// Lookup returns voter id.
func (vs Voters) Lookup(id int32) (Voter, bool) {
	for _, v := range vs {
		if v.ID == id {
			return v, true
		}
	}
	return Voter{}, false
}

func (vs Voters) byAddr(addr string) (Voter, bool) {
	for _, v := range vs {
		if v.Addr == addr {
			return v, true
		}
	}
	return Voter{}, false
}

// configuration is the Raft configuration: every voter a Voter.
func (vs Voters) configuration() raft.Configuration {
	var c raft.Configuration
	for _, v := range vs {
		c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: serverID(v.ID), Address: raft.ServerAddress(v.Addr)})
	}
	return c
}

// votersOf converts a Raft configuration's voters back, for comparison
// (non-voters, the broker-only nodes, are left out); ids that are not
// node ids make it fail.
func votersOf(c raft.Configuration) (Voters, error) {
	var vs Voters
	for _, s := range c.Servers {
		id, err := strconv.ParseInt(string(s.ID), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("raft server id %q is not a node id", s.ID)
		}
		if s.Suffrage != raft.Voter {
			continue
		}
		vs = append(vs, Voter{ID: int32(id), Addr: string(s.Address)})
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].ID < vs[j].ID })
	return vs, nil
}

func serverID(id int32) raft.ServerID { return raft.ServerID(strconv.Itoa(int(id))) }
