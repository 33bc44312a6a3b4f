// Package nativeproto is the wire format of ringlog's native protocol (the
// MyKafka design, seed 000 §3.1-3.3): frame layout, API keys, error codes
// and the encoding of a fetched record. The broker (netio) and the Go SDK
// (client) both use it, so the two sides cannot drift apart; it holds no
// behaviour of either.
//
// Every frame, request and response:
//
//	+-----------+-----------+---------------------------+
//	| len:4     | apiKey:1  | payload (len-1 bytes)     |   big-endian;
//	+-----------+-----------+---------------------------+   len counts apiKey+payload
//
// A response carries its request's apiKey. Strings are [len:2][bytes],
// byte arrays [len:4][bytes] with -1 for null.
//
//	PRODUCE (0)       req  [topic:str][partition:4][recordCount:4]
//	                       recordCount × [keyLen:4][key][valLen:4][value]
//	                  resp [errCode:1][partition:4][baseOffset:8][count:4]
//	FETCH (1)         req  [topic:str][partition:4][offset:8][maxBytes:4]
//	                  resp [errCode:1][recordCount:4] recordCount × record
//	CREATE_TOPIC (2)  req  [topic:str][partitionCount:4]
//	                  resp [status:1]  0 OK, 1 ALREADY_EXISTS, 2 INVALID, 3 NOT_AUTHORIZED
//	COMMIT_OFFSET (3) req  [group:str][topic:str][partition:4][offset:8]
//	                  resp [errCode:1]
//	FETCH_OFFSET (4)  req  [group:str][topic:str][partition:4]
//	                  resp [errCode:1][offset:8]   -1: nothing committed
//
// A fetched record, self-delimiting, CRC32 (IEEE) over offset..value:
//
//	[offset:8][timestamp:8][keyLen:4][key][valueLen:4][value][crc:4]
package nativeproto

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
)

// HeaderLen is the bytes of a frame before its payload: [len:4][apiKey:1].
const HeaderLen = 5

// API keys.
const (
	KeyProduce      byte = 0
	KeyFetch        byte = 1
	KeyCreateTopic  byte = 2
	KeyCommitOffset byte = 3
	KeyFetchOffset  byte = 4
)

// Error codes (errCode:1). The seed defines only CREATE_TOPIC's status;
// these are ringlog's, documented in the README.
const (
	CodeOK               byte = 0
	CodeUnknownTopic     byte = 1  // topic or partition does not exist
	CodeInvalidRequest   byte = 2  // the payload does not parse
	CodeOffsetOutOfRange byte = 3  // fetch offset below the log start or past the end
	CodeMessageTooLarge  byte = 4  // the batch exceeds max.message.bytes
	CodeStorageError     byte = 5  // the partition's log is offline
	CodeInvalidTopic     byte = 6  // the topic name breaks the rules
	CodeUnknownAPI       byte = 7  // apiKey is not 0-4
	CodeInvalidRecord    byte = 8  // e.g. a null key on a compacted topic
	CodeGroupBusy        byte = 9  // the group has active Kafka members; commit through them
	CodeNotAvailable     byte = 10 // shutting down, or failed otherwise
	CodeNotAuthorized    byte = 11 // the listener's principal lacks the ACL (--native-principal)
)

// CREATE_TOPIC's status byte.
const (
	CreateOK      byte = 0
	CreateExists  byte = 1
	CreateInvalid byte = 2
	// CreateNotAuthorized is ringlog's: the listener's principal may not
	// create the topic (CREATE on the cluster or the topic).
	CreateNotAuthorized byte = 3
)

// Payload sizes of the fixed-size responses.
const (
	ProduceResponseLen     = 17 // [errCode:1][partition:4][baseOffset:8][count:4]
	FetchResponseHeaderLen = 5  // [errCode:1][recordCount:4], then the records
)

// RecordOverhead is what a fetched record takes besides its key and
// value: offset, timestamp, the two lengths and the CRC.
const RecordOverhead = 8 + 8 + 4 + 4 + 4

// ErrRecordCRC is ReadRecord's error for a record whose CRC32 does not
// match its bytes.
var ErrRecordCRC = errors.New("native record: CRC mismatch")

var ieee = crc32.MakeTable(crc32.IEEE)

// AppendRecord appends one fetched record to dst: nil key or value are
// encoded as length -1.
func AppendRecord(dst []byte, offset, ts int64, key, value []byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, uint64(offset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	dst = appendNullable(dst, key)
	dst = appendNullable(dst, value)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], ieee))
}

func appendNullable(dst, b []byte) []byte {
	if b == nil {
		return binary.BigEndian.AppendUint32(dst, 0xffffffff)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// Record is one decoded fetched record. Key and Value alias the decoded
// buffer; nil means null, an empty non-nil slice an empty one.
type Record struct {
	Offset    int64
	Timestamp int64
	Key       []byte
	Value     []byte
}

// ReadRecord decodes the record at the start of b and returns it with the
// bytes after it. A record cut short is io.ErrUnexpectedEOF; one whose
// CRC32 does not match, ErrRecordCRC (the record is returned as decoded,
// for its offset).
func ReadRecord(b []byte) (Record, []byte, error) {
	var r Record
	start := b
	if len(b) < 16 {
		return r, b, io.ErrUnexpectedEOF
	}
	r.Offset = int64(binary.BigEndian.Uint64(b))
	r.Timestamp = int64(binary.BigEndian.Uint64(b[8:]))
	b = b[16:]
	var ok bool
	if r.Key, b, ok = readNullable(b); !ok {
		return r, b, io.ErrUnexpectedEOF
	}
	if r.Value, b, ok = readNullable(b); !ok {
		return r, b, io.ErrUnexpectedEOF
	}
	if len(b) < 4 {
		return r, b, io.ErrUnexpectedEOF
	}
	body := start[:len(start)-len(b)]
	if crc32.Checksum(body, ieee) != binary.BigEndian.Uint32(b) {
		return r, b[4:], ErrRecordCRC
	}
	return r, b[4:], nil
}

func readNullable(b []byte) ([]byte, []byte, bool) {
	if len(b) < 4 {
		return nil, b, false
	}
	n := int32(binary.BigEndian.Uint32(b))
	b = b[4:]
	if n == -1 {
		return nil, b, true
	}
	if n < 0 || int(n) > len(b) {
		return nil, b, false
	}
	return b[:n:n], b[n:], true
}
