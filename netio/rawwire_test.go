package netio_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/wal/batch"
)

// Raw Kafka wire helpers for tests that must send what no client library
// would: hand-built frames over a plain TCP connection.

// rawHeader appends a request frame: int32 size, int16 api key, int16
// version, int32 correlation id, nullable string client id, and (flexible
// request header v2) an empty tagged-field section, then body.
func rawHeader(dst []byte, key, version int16, corr int32, clientID *string, flexible bool, body []byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, 0)
	dst = binary.BigEndian.AppendUint16(dst, uint16(key))
	dst = binary.BigEndian.AppendUint16(dst, uint16(version))
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if clientID == nil {
		dst = binary.BigEndian.AppendUint16(dst, 0xffff)
	} else {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(*clientID)))
		dst = append(dst, *clientID...)
	}
	if flexible {
		dst = append(dst, 0)
	}
	dst = append(dst, body...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

var testClientID = "ringlog-raw-test"

// reqFrame encodes req at version as one whole frame.
func reqFrame(req kmsg.Request, version int16, corr int32) []byte {
	req.SetVersion(version)
	return rawHeader(nil, req.Key(), version, corr, &testClientID, req.IsFlexible(), req.AppendTo(nil))
}

// wireConn is a plain TCP connection to the broker.
type wireConn struct {
	t testing.TB
	c net.Conn
}

func dialWire(t testing.TB, addr string) *wireConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &wireConn{t: t, c: c}
}

func (rc *wireConn) write(b []byte) {
	rc.t.Helper()
	rc.c.SetWriteDeadline(time.Now().Add(3 * time.Second))
	if _, err := rc.c.Write(b); err != nil {
		rc.t.Fatalf("write: %v", err)
	}
}

// readFrame reads one response frame: its correlation id and the rest.
func (rc *wireConn) readFrame(timeout time.Duration) (int32, []byte, error) {
	rc.c.SetReadDeadline(time.Now().Add(timeout))
	var hdr [4]byte
	if _, err := io.ReadFull(rc.c, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 4 || n > 64<<20 {
		return 0, nil, fmt.Errorf("response frame size %d", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(rc.c, b); err != nil {
		return 0, nil, err
	}
	return int32(binary.BigEndian.Uint32(b)), b[4:], nil
}

// decodeResp decodes a response body (after the correlation id) for req at
// version, skipping the response header's tagged fields when flexible
// (never for ApiVersions).
func decodeResp(t testing.TB, req kmsg.Request, version int16, body []byte) kmsg.Response {
	t.Helper()
	req.SetVersion(version)
	if req.IsFlexible() && req.Key() != 18 {
		if len(body) == 0 || body[0] != 0 {
			t.Fatalf("key %d v%d: response header tagged fields: % x", req.Key(), version, body[:min(len(body), 8)])
		}
		body = body[1:]
	}
	resp := req.ResponseKind()
	resp.SetVersion(version)
	if err := resp.ReadFrom(body); err != nil {
		t.Fatalf("key %d v%d: decode response: %v", req.Key(), version, err)
	}
	return resp
}

// roundTrip sends req and decodes the answer, which must carry corr.
func (rc *wireConn) roundTrip(req kmsg.Request, version int16, corr int32) kmsg.Response {
	rc.t.Helper()
	rc.write(reqFrame(req, version, corr))
	return rc.readResp(req, version, corr)
}

// readResp reads the next response and checks it answers corr.
func (rc *wireConn) readResp(req kmsg.Request, version int16, corr int32) kmsg.Response {
	rc.t.Helper()
	got, body, err := rc.readFrame(3 * time.Second)
	if err != nil {
		rc.t.Fatalf("key %d v%d corr %d: read response: %v", req.Key(), version, corr, err)
	}
	if got != corr {
		rc.t.Fatalf("key %d v%d: response has correlation id %d, want %d", req.Key(), version, got, corr)
	}
	return decodeResp(rc.t, req, version, body)
}

// expectClosed asserts the broker closes the connection without answering:
// a read ends in EOF or a reset, not a response and not a timeout.
func (rc *wireConn) expectClosed(what string) {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	var buf [256]byte
	n, err := rc.c.Read(buf[:])
	if n > 0 {
		rc.t.Fatalf("%s: got %d bytes (% x) where the connection should have been closed", what, n, buf[:min(n, 32)])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		rc.t.Fatalf("%s: the connection is still open after 3s, want it closed", what)
	}
	if err == nil {
		rc.t.Fatalf("%s: read returned nothing and no error", what)
	}
	if !errors.Is(err, io.EOF) && !isReset(err) {
		rc.t.Fatalf("%s: read error %v, want EOF or a reset", what, err)
	}
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// expectQuiet asserts nothing arrives and the connection stays open for d.
func (rc *wireConn) expectQuiet(what string, d time.Duration) {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(d))
	var buf [64]byte
	n, err := rc.c.Read(buf[:])
	var ne net.Error
	if n > 0 || !errors.As(err, &ne) || !ne.Timeout() {
		rc.t.Fatalf("%s: want silence on an open connection, got %d bytes, err %v", what, n, err)
	}
}

// apiVersionsOK checks an ApiVersions round trip on rc.
func apiVersionsOK(t testing.TB, rc *wireConn, corr int32) {
	t.Helper()
	resp := rc.roundTrip(kmsg.NewPtrApiVersionsRequest(), 3, corr).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 || len(resp.ApiKeys) != len(apiTable) {
		t.Fatalf("ApiVersions: error %d, %d keys (want 0, %d)", resp.ErrorCode, len(resp.ApiKeys), len(apiTable))
	}
}

// healthCheck asserts the broker still answers on a fresh connection and
// on an existing one.
type healthCheck struct {
	addr string
	old  *wireConn
	corr int32
}

func newHealthCheck(t testing.TB, addr string) *healthCheck {
	h := &healthCheck{addr: addr, old: dialWire(t, addr), corr: 1000}
	h.check(t, "initial")
	return h
}

// check runs the two round trips, failing t (the current test or
// subtest) if either fails; after names the input for the log.
func (h *healthCheck) check(t testing.TB, after string) {
	t.Helper()
	t.Logf("health check after %s", after)
	fresh := dialWire(t, h.addr)
	h.corr++
	apiVersionsOK(t, fresh, h.corr)
	fresh.c.Close()
	h.corr++
	old := h.old.t
	h.old.t = t
	defer func() { h.old.t = old }()
	apiVersionsOK(t, h.old, h.corr)
}

// testBatch builds a valid v2 record batch of n records.
func testBatch(t testing.TB, n int, codec batch.Codec, prefix string) []byte {
	t.Helper()
	bl := batch.NewBuilder()
	ts := time.Now().UnixMilli()
	for i := 0; i < n; i++ {
		bl.Add(ts+int64(i), []byte(fmt.Sprintf("%s-k%d", prefix, i)), []byte(fmt.Sprintf("%s-v%d", prefix, i)), nil)
	}
	b, err := bl.Build(nil, codec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// produceReq is a Produce request with one topic and the given records per
// partition (partition i gets records[i]).
func produceReq(topic string, acks int16, records ...[]byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = acks
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for i, r := range records {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = int32(i)
		rp.Records = r
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}
