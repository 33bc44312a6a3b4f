// Package client is the Go SDK for ringlog's native protocol (the MyKafka
// wire format, see netio/native.go): a Conn that speaks the five requests,
// a batching Producer with a partitioner, retries, backpressure and an
// optional dead-letter topic, and a Consumer that polls assigned partitions
// and commits after handling.
//
// It depends on nothing of the broker but the key hash and the wire
// constants (internal/keyhash, internal/nativeproto), so a service that
// embeds it pulls in no server code.
//
// # Usage
//
//	p, err := client.NewProducer("127.0.0.1:9093",
//		client.WithTopicPartitions("orders", 3),   // see Partitioning
//		client.WithDeadLetterTopic("orders.dlq"))
//	...
//	p.Send(ctx, client.Record{Topic: "orders", Key: []byte(orderID), Value: event},
//		func(r client.Result) {
//			if r.Err != nil && (r.DeadLetter == nil || r.DeadLetter.Err != nil) {
//				log.Printf("order event lost: %v", r.Err)
//			}
//		})
//	...
//	p.Close(ctx) // drains
//
//	c, err := client.NewConsumer("127.0.0.1:9093", "billing",
//		[]client.TopicPartition{{Topic: "orders", Partition: 0}})
//	...
//	err = c.Run(ctx, func(ctx context.Context, r client.Record) error {
//		return bill(ctx, r) // an error: not committed, received again
//	})
//	c.Close(context.Background()) // commits what was handled
//
// # Partitioning
//
// The native protocol has no metadata request, so the Producer does not
// know a topic's partition count unless told with WithTopicPartitions.
// Known count: a keyed record goes to keyhash.Partition(key, n), Kafka's
// default partitioner (murmur2), so Kafka clients and the native side
// agree; null keys go strictly round-robin, record by record. Unknown
// count: the producer sends with partition -1 and the broker picks by the
// same murmur2 of the request's first key, or round-robin per request for
// null keys. Because the broker places a whole request by its first key,
// such a topic's batches are split into one request per distinct key
// (the null keys together): correct, but fewer records per request, so
// declare the count for busy keyed topics. ToPartition pins a record.
//
// # Delivery
//
// A PRODUCE is all-or-none and one batch per partition is in flight at a
// time, so records of a partition (of a key) stay in send order. A batch
// that fails with a network error, a timeout, a retriable code or
// CodeUnknownTopic is retried with doubling backoff (WithRetries,
// WithRetryBackoff); a retry after a lost answer can append the batch
// twice, so delivery is at-least-once. Send's buffer is bounded
// (WithBufferBytes): Send blocks for room, or with WithBlockWhenFull(false)
// returns ErrBufferFull.
//
// # Dead letters
//
// With WithDeadLetterTopic, a record that failed for good is written to
// the dead-letter topic under its original key, with a value that is a
// JSON envelope (the native protocol has no headers), see DeadLetter and
// ParseDeadLetter:
//
//	{"format":"ringlog-dlq/1","topic":"orders","partition":5,
//	 "key":"<base64 or null>","value":"<base64 or null>",
//	 "error":"ringlog produce: unknown topic or partition (code 1)",
//	 "error_code":1,"attempts":6,"failed_at":"2026-05-01T10:00:01.5Z"}
//
// # Consuming
//
// A Consumer reads the partitions it is given (there is no group
// membership on the native side) and resumes from the group's committed
// offsets, shared with the Kafka protocol. Without one it starts at
// offset 0 (StartEarliest) or at the end (StartLatest), which it finds by
// probing FETCH since the protocol cannot ask for offsets; for the same
// reason a log whose oldest records retention deleted cannot be read from
// "earliest" (Poll returns CodeOffsetOutOfRange). FETCH answers at once,
// so an idle Consumer sleeps with a doubling backoff (1 ms to 200 ms by
// default) between rounds. Commits are after handling: Run commits a
// record only after its handler returned nil; with Poll, call MarkHandled
// then Commit.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/ringlog/ringlog/internal/nativeproto"
)

// API keys of the native protocol.
const (
	apiProduce      = nativeproto.KeyProduce
	apiFetch        = nativeproto.KeyFetch
	apiCreateTopic  = nativeproto.KeyCreateTopic
	apiCommitOffset = nativeproto.KeyCommitOffset
	apiFetchOffset  = nativeproto.KeyFetchOffset
)

// Error is a native protocol error code returned by the broker.
type Error struct {
	Code byte   // one of the Code constants
	Op   string // the request: "produce", "fetch", "commit", "fetch offset"
}

// Native error codes (the broker's README lists them).
const (
	CodeUnknownTopic     = nativeproto.CodeUnknownTopic
	CodeInvalidRequest   = nativeproto.CodeInvalidRequest
	CodeOffsetOutOfRange = nativeproto.CodeOffsetOutOfRange
	CodeMessageTooLarge  = nativeproto.CodeMessageTooLarge
	CodeStorageError     = nativeproto.CodeStorageError
	CodeInvalidTopic     = nativeproto.CodeInvalidTopic
	CodeUnknownAPI       = nativeproto.CodeUnknownAPI
	CodeInvalidRecord    = nativeproto.CodeInvalidRecord
	CodeGroupBusy        = nativeproto.CodeGroupBusy
	CodeNotAvailable     = nativeproto.CodeNotAvailable
	CodeNotAuthorized    = nativeproto.CodeNotAuthorized
)

var codeNames = map[byte]string{
	CodeUnknownTopic: "unknown topic or partition", CodeInvalidRequest: "invalid request",
	CodeOffsetOutOfRange: "offset out of range", CodeMessageTooLarge: "message too large",
	CodeStorageError: "storage error", CodeInvalidTopic: "invalid topic name", CodeUnknownAPI: "unknown api",
	CodeInvalidRecord: "invalid record", CodeGroupBusy: "group has active members", CodeNotAvailable: "not available",
	CodeNotAuthorized: "not authorized (the native listener's --native-principal lacks the ACL)",
}

// Error names the request and the code.
func (e *Error) Error() string {
	name := codeNames[e.Code]
	if name == "" {
		name = fmt.Sprintf("error %d", e.Code)
	}
	return fmt.Sprintf("ringlog %s: %s (code %d)", e.Op, name, e.Code)
}

// Retriable reports whether retrying may succeed.
func (e *Error) Retriable() bool {
	return e.Code == CodeNotAvailable || e.Code == CodeStorageError
}

// ErrTopicExists is CreateTopic's answer for a topic that exists.
var ErrTopicExists = errors.New("ringlog create topic: topic already exists")

// ErrInvalidTopic is CreateTopic's answer for a bad name or count.
var ErrInvalidTopic = errors.New("ringlog create topic: invalid topic name or partition count")

// ErrCreateNotAuthorized is CreateTopic's answer when the native
// listener's principal may not create the topic (CREATE on the cluster or
// the topic).
var ErrCreateNotAuthorized = errors.New("ringlog create topic: not authorized (the native listener's --native-principal needs CREATE)")

// ErrCorruptRecord is returned when a fetched record fails its CRC32.
var ErrCorruptRecord = errors.New("ringlog fetch: record CRC mismatch")

// Record is a record to produce, or one fetched. Producer.Send uses
// Topic, Key and Value only (ToPartition chooses a partition).
type Record struct {
	Key       []byte // nil: null key
	Value     []byte // nil: null value
	Offset    int64  // set by Fetch
	Timestamp int64  // set by Fetch (Unix milliseconds)
	Partition int32  // set by Fetch
	Topic     string // set by Fetch and by Producer results
}

// Conn is one connection to the broker's native listener. Its methods are
// safe for concurrent use; requests are pipelined and answered in order.
type Conn struct {
	nc net.Conn
	bw *bufio.Writer
	br *bufio.Reader

	wmu     sync.Mutex // serializes writes and the order of pending
	pending chan *call
	closed  chan struct{}
	err     error
	once    sync.Once
}

type call struct {
	key  byte
	resp []byte
	err  error
	done chan struct{}
}

// MaxFrame bounds a response frame the Conn will read (protects the client
// from a bad length).
const MaxFrame = 256 << 20

// Dial connects to a broker's native listener.
func Dial(ctx context.Context, addr string) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ringlog: dial %s: %w", addr, err)
	}
	return newConn(nc), nil
}

// newConn starts a Conn over an established connection.
func newConn(nc net.Conn) *Conn {
	c := &Conn{nc: nc, bw: bufio.NewWriterSize(nc, 64<<10), br: bufio.NewReaderSize(nc, 64<<10),
		pending: make(chan *call, 1024), closed: make(chan struct{})}
	go c.readLoop()
	return c
}

// Close closes the connection; calls in flight fail.
func (c *Conn) Close() error {
	c.fail(net.ErrClosed)
	return nil
}

func (c *Conn) fail(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.closed)
		c.nc.Close()
	})
}

func (c *Conn) readLoop() {
	var hdr [nativeproto.HeaderLen]byte
	for {
		var cl *call
		select {
		case cl = <-c.pending:
		case <-c.closed:
			return
		}
		_, err := io.ReadFull(c.br, hdr[:])
		if err == nil {
			n := binary.BigEndian.Uint32(hdr[:4])
			switch {
			case n < 1 || n > MaxFrame:
				err = fmt.Errorf("ringlog: bad response length %d", n)
			case hdr[4] != cl.key:
				err = fmt.Errorf("ringlog: response api key %d for request %d", hdr[4], cl.key)
			default:
				cl.resp, err = readFull(c.br, int(n-1))
			}
		}
		if err != nil {
			cl.err = fmt.Errorf("ringlog: read response: %w", err)
			close(cl.done)
			c.fail(err)
			// Fail everything still pending.
			for {
				select {
				case p := <-c.pending:
					p.err = cl.err
					close(p.done)
				default:
					return
				}
			}
		}
		close(cl.done)
	}
}

// readFull reads n bytes, growing the buffer as they arrive (doubling
// from at most 64 KiB), so that a damaged or hostile length prefix costs
// memory only for the bytes the peer really sent, not MaxFrame up front.
func readFull(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, 0, min(n, 64<<10))
	for len(b) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(n-len(b), cap(b)))
		}
		k, err := io.ReadFull(r, b[len(b):min(cap(b), n)])
		b = b[:len(b)+k]
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// roundTrip sends one request and waits for its answer.
func (c *Conn) roundTrip(ctx context.Context, key byte, payload []byte) ([]byte, error) {
	cl := &call{key: key, done: make(chan struct{})}
	c.wmu.Lock()
	select {
	case <-c.closed:
		c.wmu.Unlock()
		return nil, fmt.Errorf("ringlog: connection closed: %w", c.err)
	default:
	}
	var hdr [nativeproto.HeaderLen]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(payload)+1))
	hdr[4] = key
	c.bw.Write(hdr[:])
	c.bw.Write(payload)
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetWriteDeadline(dl)
	} else {
		c.nc.SetWriteDeadline(time.Time{})
	}
	err := c.bw.Flush()
	if err == nil {
		select {
		case c.pending <- cl:
		case <-c.closed:
			err = c.err
		}
	}
	c.wmu.Unlock()
	if err != nil {
		c.fail(err)
		return nil, fmt.Errorf("ringlog: send: %w", err)
	}
	select {
	case <-cl.done:
		return cl.resp, cl.err
	case <-ctx.Done():
		// The answer will still come and be discarded; the stream
		// stays in sync.
		return nil, ctx.Err()
	}
}

func appendStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendBytes(b, v []byte) []byte {
	if v == nil {
		return binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// Produce appends records to one partition as one batch (all or none).
// partition -1 lets the broker choose (the first record's key, or
// round-robin). It returns the partition and the first record's offset;
// record i got offset base+i.
func (c *Conn) Produce(ctx context.Context, topic string, partition int32, recs []Record) (int32, int64, error) {
	size := 10 + len(topic)
	for _, r := range recs {
		size += 8 + len(r.Key) + len(r.Value)
	}
	b := make([]byte, 0, size)
	b = appendStr(b, topic)
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	b = binary.BigEndian.AppendUint32(b, uint32(len(recs)))
	for _, r := range recs {
		b = appendBytes(b, r.Key)
		b = appendBytes(b, r.Value)
	}
	resp, err := c.roundTrip(ctx, apiProduce, b)
	if err != nil {
		return partition, -1, err
	}
	if len(resp) != nativeproto.ProduceResponseLen {
		return partition, -1, fmt.Errorf("ringlog produce: response of %d bytes", len(resp))
	}
	p := int32(binary.BigEndian.Uint32(resp[1:]))
	base := int64(binary.BigEndian.Uint64(resp[5:]))
	if resp[0] != 0 {
		return p, -1, &Error{Code: resp[0], Op: "produce"}
	}
	return p, base, nil
}

// Fetch reads records of a partition from offset: at least one when there
// is one, then more up to maxBytes. It checks every record's CRC32.
func (c *Conn) Fetch(ctx context.Context, topic string, partition int32, offset int64, maxBytes int32) ([]Record, error) {
	b := make([]byte, 0, 18+len(topic))
	b = appendStr(b, topic)
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	b = binary.BigEndian.AppendUint64(b, uint64(offset))
	b = binary.BigEndian.AppendUint32(b, uint32(maxBytes))
	resp, err := c.roundTrip(ctx, apiFetch, b)
	if err != nil {
		return nil, err
	}
	if len(resp) < nativeproto.FetchResponseHeaderLen {
		return nil, fmt.Errorf("ringlog fetch: response of %d bytes", len(resp))
	}
	if resp[0] != 0 {
		return nil, &Error{Code: resp[0], Op: "fetch"}
	}
	return DecodeRecords(resp[nativeproto.FetchResponseHeaderLen:], int(binary.BigEndian.Uint32(resp[1:])), topic, partition)
}

// DecodeRecords decodes count records in the native record format,
// verifying each CRC32 (IEEE over offset..value).
func DecodeRecords(b []byte, count int, topic string, partition int32) ([]Record, error) {
	if count < 0 || count > len(b)/nativeproto.RecordOverhead {
		return nil, fmt.Errorf("ringlog fetch: %d records cannot fit in %d bytes", count, len(b))
	}
	out := make([]Record, 0, count)
	for i := 0; i < count; i++ {
		nr, rest, err := nativeproto.ReadRecord(b)
		if errors.Is(err, nativeproto.ErrRecordCRC) {
			return nil, fmt.Errorf("%w at offset %d", ErrCorruptRecord, nr.Offset)
		}
		if err != nil {
			return nil, err
		}
		b = rest
		// Copies: the records outlive the response buffer.
		out = append(out, Record{Key: bytes.Clone(nr.Key), Value: bytes.Clone(nr.Value),
			Offset: nr.Offset, Timestamp: nr.Timestamp, Partition: partition, Topic: topic})
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("ringlog fetch: %d bytes after the last record", len(b))
	}
	return out, nil
}

// CreateTopic creates a topic with partitions partitions.
func (c *Conn) CreateTopic(ctx context.Context, topic string, partitions int32) error {
	b := appendStr(nil, topic)
	b = binary.BigEndian.AppendUint32(b, uint32(partitions))
	resp, err := c.roundTrip(ctx, apiCreateTopic, b)
	if err != nil {
		return err
	}
	if len(resp) != 1 {
		return fmt.Errorf("ringlog create topic: response of %d bytes", len(resp))
	}
	switch resp[0] {
	case nativeproto.CreateOK:
		return nil
	case nativeproto.CreateExists:
		return ErrTopicExists
	case nativeproto.CreateNotAuthorized:
		return ErrCreateNotAuthorized
	}
	return ErrInvalidTopic
}

// CommitOffset stores a group's committed offset of a partition (the same
// store the Kafka protocol uses).
func (c *Conn) CommitOffset(ctx context.Context, group, topic string, partition int32, offset int64) error {
	b := appendStr(nil, group)
	b = appendStr(b, topic)
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	b = binary.BigEndian.AppendUint64(b, uint64(offset))
	resp, err := c.roundTrip(ctx, apiCommitOffset, b)
	if err != nil {
		return err
	}
	if len(resp) != 1 {
		return fmt.Errorf("ringlog commit: response of %d bytes", len(resp))
	}
	if resp[0] != 0 {
		return &Error{Code: resp[0], Op: "commit"}
	}
	return nil
}

// FetchOffset returns a group's committed offset of a partition, -1 when
// nothing is committed.
func (c *Conn) FetchOffset(ctx context.Context, group, topic string, partition int32) (int64, error) {
	b := appendStr(nil, group)
	b = appendStr(b, topic)
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	resp, err := c.roundTrip(ctx, apiFetchOffset, b)
	if err != nil {
		return -1, err
	}
	if len(resp) != 9 {
		return -1, fmt.Errorf("ringlog fetch offset: response of %d bytes", len(resp))
	}
	if resp[0] != 0 {
		return -1, &Error{Code: resp[0], Op: "fetch offset"}
	}
	return int64(binary.BigEndian.Uint64(resp[1:])), nil
}
