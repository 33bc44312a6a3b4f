// Package kwire sends one Kafka request to one broker and reads its
// response: the internal calls of cluster mode (a broker registering with
// the controller, admin requests forwarded to it). It speaks to ringlog
// brokers only, so it sends the request at the version the caller set and
// skips the ApiVersions exchange a general client needs.
package kwire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ForwardClientID is the client id of every request kwire sends. A broker
// that receives an admin request with it and is not the controller
// answers NOT_CONTROLLER instead of forwarding it again, so a request
// never travels in circles while the controller moves.
const ForwardClientID = "ringlog-internal"

// MaxResponseBytes bounds a response kwire reads.
const MaxResponseBytes = 64 << 20

// Call dials addr, sends req (at req.GetVersion()) and returns the
// decoded response. The connection is closed after the one call: for the
// rare internal calls (registrations, admin changes); replica fetchers
// keep a Conn. ctx bounds the whole call.
func Call(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	return CallWith(ctx, nil, addr, req)
}

// DialFunc opens a connection (net.Dialer.DialContext's shape); cluster
// tests route links between brokers through proxies with their own.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// CallWith is Call over a connection from dial (nil: a net.Dialer).
func CallWith(ctx context.Context, dial DialFunc, addr string, req kmsg.Request) (kmsg.Response, error) {
	c, err := DialWith(ctx, dial, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Call(ctx, req)
}

// Conn is a connection to one broker for a sequence of calls, one at a
// time (a replica fetcher's). After a failed call the connection is in an
// unknown state: close it and dial again.
type Conn struct {
	addr string
	nc   net.Conn
	corr int32
	f    *kmsg.RequestFormatter
	out  []byte
	body []byte
}

// Dial connects to addr.
func Dial(ctx context.Context, addr string) (*Conn, error) { return DialWith(ctx, nil, addr) }

// DialWith connects to addr through dial (nil: a net.Dialer).
func DialWith(ctx context.Context, dial DialFunc, addr string) (*Conn, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("kwire: dial %s: %w", addr, err)
	}
	return &Conn{addr: addr, nc: nc, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID(ForwardClientID))}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// ReleaseBuffer leaves the buffer the last response was read into to that
// response: the next call reads into a new one (a connection shared
// between callers, whose responses must not change under them).
func (c *Conn) ReleaseBuffer() { c.body = nil }

// Call sends req (at req.GetVersion()) and returns the decoded response;
// ctx bounds it (30 s without a deadline). The response may alias the
// connection's buffer until the next call.
func (c *Conn) Call(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetDeadline(dl)
	} else {
		c.nc.SetDeadline(time.Now().Add(30 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	c.corr++
	corr := c.corr
	c.out = c.f.AppendRequest(c.out[:0], req, corr)
	if _, err := c.nc.Write(c.out); err != nil {
		return nil, fmt.Errorf("kwire: send %s to %s: %w", kmsg.NameForKey(req.Key()), c.addr, err)
	}
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		return nil, fmt.Errorf("kwire: read %s response from %s: %w", kmsg.NameForKey(req.Key()), c.addr, err)
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > MaxResponseBytes {
		return nil, fmt.Errorf("kwire: %s response from %s is %d bytes, over %d", kmsg.NameForKey(req.Key()), c.addr, n, MaxResponseBytes)
	}
	if cap(c.body) < int(n) {
		c.body = make([]byte, n)
	}
	body := c.body[:n]
	if _, err := io.ReadFull(c.nc, body); err != nil {
		return nil, fmt.Errorf("kwire: read %s response from %s: %w", kmsg.NameForKey(req.Key()), c.addr, err)
	}
	resp, err := ParseResponse(body, req, corr)
	if err != nil {
		return nil, fmt.Errorf("kwire: %s response from %s: %w", kmsg.NameForKey(req.Key()), c.addr, err)
	}
	return resp, nil
}

// ParseResponse decodes a response frame's body (after the size): the
// correlation id, the header's tagged fields for flexible versions (not
// for ApiVersions, whose header is always v0), then req's response type
// at req's version.
func ParseResponse(body []byte, req kmsg.Request, corr int32) (kmsg.Response, error) {
	if len(body) < 4 {
		return nil, errors.New("short response header")
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corr {
		return nil, fmt.Errorf("correlation id %d, want %d", got, corr)
	}
	body = body[4:]
	if req.IsFlexible() && req.Key() != 18 {
		var err error
		if body, err = skipTags(body); err != nil {
			return nil, err
		}
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return resp, nil
}

// skipTags skips a tagged-fields section.
func skipTags(b []byte) ([]byte, error) {
	n, used := binary.Uvarint(b)
	if used <= 0 {
		return nil, errors.New("bad header tagged fields")
	}
	b = b[used:]
	for i := uint64(0); i < n; i++ {
		if _, used = binary.Uvarint(b); used <= 0 {
			return nil, errors.New("bad header tag")
		}
		b = b[used:]
		size, used := binary.Uvarint(b)
		if used <= 0 || size > uint64(len(b)-used) {
			return nil, errors.New("bad header tag size")
		}
		b = b[used+int(size):]
	}
	return b, nil
}
