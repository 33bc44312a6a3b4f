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
// decoded response. The connection is closed after the one call: the
// internal calls are rare (registrations, admin changes). ctx bounds the
// whole call.
func Call(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("kwire: dial %s: %w", addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	const corr = 1
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID(ForwardClientID))
	if _, err := conn.Write(f.AppendRequest(nil, req, corr)); err != nil {
		return nil, fmt.Errorf("kwire: send %s to %s: %w", kmsg.NameForKey(req.Key()), addr, err)
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, fmt.Errorf("kwire: read %s response from %s: %w", kmsg.NameForKey(req.Key()), addr, err)
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > MaxResponseBytes {
		return nil, fmt.Errorf("kwire: %s response from %s is %d bytes, over %d", kmsg.NameForKey(req.Key()), addr, n, MaxResponseBytes)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, fmt.Errorf("kwire: read %s response from %s: %w", kmsg.NameForKey(req.Key()), addr, err)
	}
	resp, err := ParseResponse(body, req, corr)
	if err != nil {
		return nil, fmt.Errorf("kwire: %s response from %s: %w", kmsg.NameForKey(req.Key()), addr, err)
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
