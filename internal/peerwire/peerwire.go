// Package peerwire is the one client of a broker's Kafka-protocol calls to
// the other brokers in cluster mode: the typed requests of package peer
// (to the controller) as Kafka's BrokerRegistration, BrokerHeartbeat,
// AllocateProducerIds, AlterPartition and CreateTopics; admin requests
// forwarded to the controller; the transaction calls; and the dedicated
// connections of the replica fetchers. Every connection goes through one
// dial function (cluster.Config.Dial, the seam of the tests' link
// faults), then TLS when the inter-broker listener is SSL, and names
// itself kwire.ForwardClientID. Idle connections are kept per address
// (a few each, for a minute at most), so a call costs no TCP or TLS
// handshake.
package peerwire

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/bytopic"
	"github.com/ringlog/ringlog/internal/kwire"
	"github.com/ringlog/ringlog/internal/peer"
	"github.com/ringlog/ringlog/quorum"
)

// maxIdle is how many idle connections to one broker a Client keeps;
// a kept connection idle for maxIdleAge, or open for maxConnAge, is
// closed instead of reused (the brokers close connections idle for ten
// minutes, and a reloaded TLS certificate applies to new connections).
const (
	maxIdle    = 4
	maxIdleAge = time.Minute
	maxConnAge = 10 * time.Minute
)

// Client makes a broker's calls to the other brokers. It is safe for
// concurrent use; a connection carries one call at a time.
type Client struct {
	dial      kwire.DialFunc
	tlsConfig func() *tls.Config

	mu     sync.Mutex
	idle   map[string][]kept
	closed bool
}

// kept is an idle connection: when it was opened and last put back.
type kept struct {
	conn         *kwire.Conn
	opened, idle time.Time
}

var _ peer.Transport = (*Client)(nil)

// New is a client dialing through dial (nil: a net.Dialer), then TLS
// with tlsConfig when it is set (called for each connection, so a
// reloaded certificate applies to the next; an empty ServerName is set to
// the peer's host).
func New(dial kwire.DialFunc, tlsConfig func() *tls.Config) *Client {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return &Client{dial: dial, tlsConfig: tlsConfig}
}

// DialFunc is the client's dial: Config.Dial, then TLS.
func (c *Client) DialFunc(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := c.dial(ctx, network, addr)
	if err != nil || c.tlsConfig == nil {
		return conn, err
	}
	return (&quorum.TLS{Client: c.tlsConfig}).Dialed(ctx, conn, addr)
}

// Dial opens a connection of the caller's own to the broker at addr (a
// replica fetcher's); the caller closes it.
func (c *Client) Dial(ctx context.Context, addr string) (*kwire.Conn, error) {
	return kwire.DialWith(ctx, c.DialFunc, addr)
}

// Call sends req to the broker at addr on a kept connection (a new one
// when none is idle, or when a kept one turns out dead: then every idle
// connection to addr is dropped, as the broker restarted or closed them)
// and returns the response, which is the caller's alone.
func (c *Client) Call(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	k, ok := c.take(addr)
	if !ok {
		conn, err := c.Dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		k = kept{conn: conn, opened: time.Now()}
	}
	resp, err := k.conn.Call(ctx, req)
	if err != nil && ok && ctx.Err() == nil {
		k.conn.Close()
		c.drop(addr)
		conn, derr := c.Dial(ctx, addr)
		if derr != nil {
			return nil, derr
		}
		k = kept{conn: conn, opened: time.Now()}
		resp, err = k.conn.Call(ctx, req)
	}
	if err != nil {
		k.conn.Close()
		return nil, err
	}
	// The response keeps the buffer it was read into; a context that
	// ended may have set a past deadline on the connection as the call
	// returned: such a connection is not reused.
	k.conn.ReleaseBuffer()
	if ctx.Err() != nil {
		k.conn.Close()
	} else {
		c.put(addr, k)
	}
	return resp, nil
}

// take is an idle connection to addr young enough to reuse.
func (c *Client) take(addr string) (kept, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for {
		ks := c.idle[addr]
		if len(ks) == 0 {
			return kept{}, false
		}
		k := ks[len(ks)-1]
		c.idle[addr] = ks[:len(ks)-1]
		if now.Sub(k.idle) < maxIdleAge && now.Sub(k.opened) < maxConnAge {
			return k, true
		}
		k.conn.Close()
	}
}

func (c *Client) put(addr string, k kept) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle[addr]) >= maxIdle || time.Since(k.opened) >= maxConnAge {
		k.conn.Close()
		return
	}
	if c.idle == nil {
		c.idle = map[string][]kept{}
	}
	k.idle = time.Now()
	c.idle[addr] = append(c.idle[addr], k)
}

// drop closes every idle connection to addr.
func (c *Client) drop(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.idle[addr] {
		k.conn.Close()
	}
	delete(c.idle, addr)
}

// Close closes the idle connections; those in use are closed when their
// call ends.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, ks := range c.idle {
		for _, k := range ks {
			k.conn.Close()
		}
	}
	c.idle = nil
}

// codeErr is the error of a Kafka error code, nil for 0.
func codeErr(code int16, msg *string) error {
	if code == 0 {
		return nil
	}
	err := kerr.ErrorForCode(code)
	if msg != nil && *msg != "" {
		return fmt.Errorf("%w: %s", err, *msg)
	}
	return err
}

// Register sends a BrokerRegistration (v0).
func (c *Client) Register(ctx context.Context, addr string, r peer.Registration) (int64, error) {
	req := kmsg.NewPtrBrokerRegistrationRequest()
	req.Version = 0
	req.BrokerID, req.ClusterID, req.IncarnationID = r.BrokerID, r.ClusterID, r.Incarnation
	for _, ln := range r.Listeners {
		host, p, err := net.SplitHostPort(ln.Addr)
		if err != nil {
			return -1, fmt.Errorf("listener %s address %q: %w", ln.Name, ln.Addr, err)
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return -1, fmt.Errorf("listener %s address %q: bad port", ln.Name, ln.Addr)
		}
		l := kmsg.NewBrokerRegistrationRequestListener()
		l.Name, l.Host, l.Port, l.SecurityProtocol = ln.Name, host, uint16(port), securityProtocolCode(ln.Name)
		req.Listeners = append(req.Listeners, l)
	}
	if r.Rack != "" {
		req.Rack = kmsg.StringPtr(r.Rack)
	}
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return -1, err
	}
	resp := raw.(*kmsg.BrokerRegistrationResponse)
	if err := codeErr(resp.ErrorCode, nil); err != nil {
		return -1, err
	}
	return resp.BrokerEpoch, nil
}

// Heartbeat sends a BrokerHeartbeat (v0).
func (c *Client) Heartbeat(ctx context.Context, addr string, h peer.Heartbeat) (peer.HeartbeatAnswer, error) {
	req := kmsg.NewPtrBrokerHeartbeatRequest()
	req.Version = 0
	req.BrokerID, req.BrokerEpoch, req.CurrentMetadataOffset, req.WantFence = h.BrokerID, h.BrokerEpoch, h.MetadataOffset, h.WantFence
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return peer.HeartbeatAnswer{Fenced: true}, err
	}
	resp := raw.(*kmsg.BrokerHeartbeatResponse)
	ans := peer.HeartbeatAnswer{Fenced: resp.IsFenced, CaughtUp: resp.IsCaughtUp}
	resp.UnknownTags.Each(func(tag uint32, b []byte) {
		if tag == peer.MetadataIndexTag {
			ans.MetadataIndex = peer.DecodeMetadataIndex(b)
		}
	})
	return ans, codeErr(resp.ErrorCode, nil)
}

// AllocateProducerIDs sends an AllocateProducerIds.
func (c *Client) AllocateProducerIDs(ctx context.Context, addr string, broker int32, epoch int64) (peer.ProducerIDs, error) {
	req := kmsg.NewPtrAllocateProducerIDsRequest()
	req.BrokerID, req.BrokerEpoch = broker, epoch
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return peer.ProducerIDs{}, err
	}
	resp := raw.(*kmsg.AllocateProducerIDsResponse)
	if err := codeErr(resp.ErrorCode, nil); err != nil {
		return peer.ProducerIDs{}, err
	}
	return peer.ProducerIDs{First: resp.ProducerIDStart, Count: resp.ProducerIDLen}, nil
}

// AlterPartition sends an AlterPartition (v2: the ISR by broker id).
func (c *Client) AlterPartition(ctx context.Context, addr string, a peer.AlterPartition) ([]peer.ISRChangeAnswer, error) {
	req := kmsg.NewPtrAlterPartitionRequest()
	req.Version = 2
	req.BrokerID, req.BrokerEpoch = a.BrokerID, a.BrokerEpoch
	byTopic := map[[16]byte]int{}
	for _, ch := range a.Changes {
		i := bytopic.Index(byTopic, &req.Topics, ch.TopicID, func(id [16]byte) kmsg.AlterPartitionRequestTopic {
			t := kmsg.NewAlterPartitionRequestTopic()
			t.TopicID = id
			return t
		})
		p := kmsg.NewAlterPartitionRequestTopicPartition()
		p.Partition, p.LeaderEpoch, p.PartitionEpoch, p.NewISR = ch.Partition, ch.LeaderEpoch, ch.PartitionEpoch, ch.ISR
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
	}
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return nil, err
	}
	resp := raw.(*kmsg.AlterPartitionResponse)
	if err := codeErr(resp.ErrorCode, nil); err != nil {
		return nil, err
	}
	type key struct {
		topic     [16]byte
		partition int32
	}
	got := map[key]peer.ISRChangeAnswer{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			got[key{t.TopidID, p.Partition}] = peer.ISRChangeAnswer{TopicID: t.TopidID, Partition: p.Partition, Err: codeErr(p.ErrorCode, nil),
				Leader: p.LeaderID, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: p.ISR}
		}
	}
	out := make([]peer.ISRChangeAnswer, len(a.Changes))
	for i, ch := range a.Changes {
		ans, ok := got[key{ch.TopicID, ch.Partition}]
		if !ok {
			ans = peer.ISRChangeAnswer{TopicID: ch.TopicID, Partition: ch.Partition, Leader: -1,
				Err: fmt.Errorf("%w: the controller did not answer this partition", kerr.UnknownServerError)}
		}
		out[i] = ans
	}
	return out, nil
}

// SetRemoteLog sends a partition's remote log manifest as an
// AlterPartition (v2) whose one partition entry carries it in the
// peer.RemoteLogTag tagged field (see peer.RemoteLog).
func (c *Client) SetRemoteLog(ctx context.Context, addr string, r peer.RemoteLog) error {
	req := kmsg.NewPtrAlterPartitionRequest()
	req.Version = 2
	req.BrokerID, req.BrokerEpoch = r.BrokerID, r.BrokerEpoch
	t := kmsg.NewAlterPartitionRequestTopic()
	t.TopicID = r.TopicID
	p := kmsg.NewAlterPartitionRequestTopicPartition()
	p.Partition, p.LeaderEpoch, p.PartitionEpoch = r.Partition, r.LeaderEpoch, -1
	p.UnknownTags.Set(peer.RemoteLogTag, peer.EncodeRemoteLog(r.Version, r.Manifest))
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return err
	}
	resp := raw.(*kmsg.AlterPartitionResponse)
	if err := codeErr(resp.ErrorCode, nil); err != nil {
		return err
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rt.TopidID == r.TopicID && rp.Partition == r.Partition {
				return codeErr(rp.ErrorCode, nil)
			}
		}
	}
	return fmt.Errorf("%w: the controller did not answer the partition", kerr.UnknownServerError)
}

// CreateTopic sends a CreateTopics (v4) of one topic with the defaults.
func (c *Client) CreateTopic(ctx context.Context, addr string, name string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 4
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, -1, -1
	req.Topics = append(req.Topics, rt)
	raw, err := c.Call(ctx, addr, req)
	if err != nil {
		return err
	}
	resp := raw.(*kmsg.CreateTopicsResponse)
	if len(resp.Topics) != 1 {
		return fmt.Errorf("%w: the controller answered %d topics for one", kerr.UnknownServerError, len(resp.Topics))
	}
	return codeErr(resp.Topics[0].ErrorCode, resp.Topics[0].ErrorMessage)
}

// securityProtocolCode is Kafka's number of the security protocol a
// listener is named after (BrokerRegistration's listeners carry it).
func securityProtocolCode(name string) int16 {
	switch name {
	case "SSL":
		return 1
	case "SASL_PLAINTEXT":
		return 2
	case "SASL_SSL":
		return 3
	}
	return 0
}
