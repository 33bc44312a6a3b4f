// Package batch owns the Kafka record batch format (magic v2): reading and
// validating batch headers, patching the fields the broker assigns, walking
// the records inside, building batches, and the compression codecs.
//
// It is a leaf: it knows bytes, not files, logs or sockets.
//
// A record batch, as a producer sends it and as ringlog stores it on disk:
//
//	offset  size  field
//	     0     8  baseOffset            assigned by the broker (patched in place)
//	     8     4  batchLength           bytes after this field
//	    12     4  partitionLeaderEpoch  set by the broker (patched in place)
//	    16     1  magic                 2
//	    17     4  crc                   CRC32C (Castagnoli) of bytes 21..end
//	    21     2  attributes            bits 0-2 codec, 3 timestamp type,
//	                                    4 transactional, 5 control,
//	                                    6 has delete horizon
//	    23     4  lastOffsetDelta
//	    27     8  baseTimestamp
//	    35     8  maxTimestamp
//	    43     8  producerId
//	    51     2  producerEpoch
//	    53     4  baseSequence
//	    57     4  recordCount
//	    61     …  records (compressed as a whole when codec != 0)
//
// Because the CRC starts at attributes, the broker can assign baseOffset and
// partitionLeaderEpoch without recomputing it; that is what lets a fetch send
// the stored bytes to the socket untouched (sendfile). Setting LogAppendTime
// changes attributes and maxTimestamp, which the CRC covers, so that path
// recomputes the CRC (cheap: CRC32C is done in hardware).
package batch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
)

// Field offsets inside a batch.
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57

	// HeaderSize is the size of the fixed batch header before the records.
	HeaderSize = 61
	// LogOverhead is the part of a batch not counted by batchLength
	// (baseOffset and batchLength themselves).
	LogOverhead = 12
	// Magic is the only batch format version ringlog stores.
	Magic = 2
)

// Attribute bits.
const (
	AttrCodecMask      = 0x07
	AttrLogAppendTime  = 0x08
	AttrTransactional  = 0x10
	AttrControl        = 0x20
	AttrDeleteHorizon  = 0x40
	timestampTypeShift = 3
)

// Codec is a batch compression codec, as numbered by Kafka.
type Codec uint8

// The codecs Kafka defines.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLZ4    Codec = 3
	CodecZstd   Codec = 4
)

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// castagnoli is the CRC32C table, built once; hash/crc32 uses the SSE4.2
// instruction for it on amd64.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C a batch's crc field must hold.
func Checksum(b []byte) uint32 { return crc32.Checksum(b[offAttributes:], castagnoli) }

// ChecksumParts is Checksum of a batch held in pieces, in order (the
// slices of a cache's chunks).
func ChecksumParts(parts [][]byte) uint32 {
	var crc uint32
	skip := offAttributes
	for _, b := range parts {
		if skip >= len(b) {
			skip -= len(b)
			continue
		}
		crc = crc32.Update(crc, castagnoli, b[skip:])
		skip = 0
	}
	return crc
}

// Header is the decoded fixed part of a batch.
type Header struct {
	BaseOffset      int64
	Length          int32 // batchLength: bytes after the length field
	LeaderEpoch     int32
	Magic           int8
	CRC             uint32
	Attributes      int16
	LastOffsetDelta int32
	BaseTimestamp   int64
	MaxTimestamp    int64
	ProducerID      int64
	ProducerEpoch   int16
	BaseSequence    int32
	RecordCount     int32
}

// Size is the whole batch's size in bytes.
func (h *Header) Size() int { return int(h.Length) + LogOverhead }

// LastOffset is the offset of the batch's last record.
func (h *Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// NextOffset is the offset after the batch.
func (h *Header) NextOffset() int64 { return h.LastOffset() + 1 }

// Codec is the batch's compression codec.
func (h *Header) Codec() Codec { return Codec(h.Attributes & AttrCodecMask) }

// LogAppendTime reports whether the batch's timestamps were set by the broker.
func (h *Header) LogAppendTime() bool { return h.Attributes&AttrLogAppendTime != 0 }

// Transactional reports the transactional attribute.
func (h *Header) Transactional() bool { return h.Attributes&AttrTransactional != 0 }

// Control reports the control-batch attribute.
func (h *Header) Control() bool { return h.Attributes&AttrControl != 0 }

// Idempotent reports whether the batch carries a producer id and sequence.
func (h *Header) Idempotent() bool { return h.ProducerID >= 0 }

// LastSequence is the sequence number of the batch's last record, wrapping
// at the int32 maximum as Kafka's does.
func (h *Header) LastSequence() int32 {
	if h.BaseSequence < 0 {
		return -1
	}
	return int32((int64(h.BaseSequence) + int64(h.LastOffsetDelta)) % (1 << 31))
}

// ParseHeader decodes the fixed header of b without any check beyond its
// length. b must hold at least HeaderSize bytes.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, &Error{Class: ClassCorrupt, Msg: fmt.Sprintf("batch of %d bytes is shorter than the %d-byte header", len(b), HeaderSize)}
	}
	be := binary.BigEndian
	return Header{
		BaseOffset:      int64(be.Uint64(b[offBaseOffset:])),
		Length:          int32(be.Uint32(b[offBatchLength:])),
		LeaderEpoch:     int32(be.Uint32(b[offLeaderEpoch:])),
		Magic:           int8(b[offMagic]),
		CRC:             be.Uint32(b[offCRC:]),
		Attributes:      int16(be.Uint16(b[offAttributes:])),
		LastOffsetDelta: int32(be.Uint32(b[offLastOffsetDelta:])),
		BaseTimestamp:   int64(be.Uint64(b[offBaseTimestamp:])),
		MaxTimestamp:    int64(be.Uint64(b[offMaxTimestamp:])),
		ProducerID:      int64(be.Uint64(b[offProducerID:])),
		ProducerEpoch:   int16(be.Uint16(b[offProducerEpoch:])),
		BaseSequence:    int32(be.Uint32(b[offBaseSequence:])),
		RecordCount:     int32(be.Uint32(b[offRecordCount:])),
	}, nil
}

// Class tells kinds of bad batches apart; the broker maps each to a Kafka
// error code.
type Class uint8

const (
	// ClassCorrupt: the bytes are damaged (bad length, bad CRC, records
	// that do not parse): CORRUPT_MESSAGE.
	ClassCorrupt Class = iota + 1
	// ClassInvalid: well-formed but not acceptable (magic, counts, control
	// batches from a producer): INVALID_RECORD.
	ClassInvalid
	// ClassTooLarge: over the size limit: MESSAGE_TOO_LARGE.
	ClassTooLarge
	// ClassUnsupported: a feature ringlog does not implement (transactions,
	// old message formats): UNSUPPORTED_FOR_MESSAGE_FORMAT.
	ClassUnsupported
)

func (c Class) String() string {
	switch c {
	case ClassCorrupt:
		return "corrupt"
	case ClassInvalid:
		return "invalid"
	case ClassTooLarge:
		return "too large"
	case ClassUnsupported:
		return "unsupported"
	}
	return "unknown"
}

// Error is a batch rejected by Validate.
type Error struct {
	Class Class
	Msg   string
}

func (e *Error) Error() string { return "record batch " + e.Class.String() + ": " + e.Msg }

// ClassOf returns the class of err if it is (or wraps) an *Error, else 0.
func ClassOf(err error) Class {
	var be *Error
	if errors.As(err, &be) {
		return be.Class
	}
	return 0
}

func errorf(c Class, format string, args ...any) error {
	return &Error{Class: c, Msg: fmt.Sprintf(format, args...)}
}

// Limits bound what Validate accepts.
type Limits struct {
	// MaxBatchBytes is the largest batch accepted (max.message.bytes);
	// 0 means no limit.
	MaxBatchBytes int
	// MaxUncompressedBytes is the most a compressed batch's records may
	// decompress to; 0: MaxDecompressedBytes. Past it the batch is
	// ClassTooLarge, found after decompressing at most this much.
	MaxUncompressedBytes int64
	// RequireKeys refuses a record with a null key (compacted topics).
	RequireKeys bool
}

// Validate checks one whole batch as a producer sent it, as Kafka's log
// validator does: exact length, magic, CRC32C, a positive record count
// that matches lastOffsetDelta, and, inside the batch (decompressed as a
// stream for a compressed one, never whole: see Stream), records that
// parse and fill it exactly, with offset deltas 0..n-1, no null header
// key, and with lim.RequireKeys no null key. It writes nothing; it
// allocates nothing for an uncompressed batch.
//
// Everything a broker stores passes here once; what is read back later
// is only checked against its CRC (CheckStored), never validated again.
func Validate(b []byte, lim Limits) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if int(h.Length) != len(b)-LogOverhead || h.Length < HeaderSize-LogOverhead {
		return h, errorf(ClassCorrupt, "batchLength %d does not match the %d bytes received", h.Length, len(b))
	}
	if lim.MaxBatchBytes > 0 && len(b) > lim.MaxBatchBytes {
		return h, errorf(ClassTooLarge, "batch of %d bytes exceeds max.message.bytes %d", len(b), lim.MaxBatchBytes)
	}
	if h.Magic != Magic {
		return h, errorf(ClassUnsupported, "magic %d: only record batch format v2 (magic 2) is accepted", h.Magic)
	}
	if sum := Checksum(b); sum != h.CRC {
		return h, errorf(ClassCorrupt, "CRC32C %08x does not match the stored %08x", sum, h.CRC)
	}
	if h.Control() {
		return h, errorf(ClassInvalid, "control batches cannot be produced")
	}
	if h.Transactional() && !h.Idempotent() {
		return h, errorf(ClassInvalid, "a transactional batch needs a producer id")
	}
	if h.RecordCount <= 0 {
		return h, errorf(ClassInvalid, "record count %d: a produced batch holds at least one record", h.RecordCount)
	}
	if h.LastOffsetDelta != h.RecordCount-1 {
		return h, errorf(ClassInvalid, "record count %d does not match lastOffsetDelta %d", h.RecordCount, h.LastOffsetDelta)
	}
	if h.Codec() > CodecZstd {
		return h, errorf(ClassCorrupt, "unknown compression codec %d", h.Codec())
	}
	// The CRC matched, so these are the bytes the producer built:
	// records that do not parse or do not match the count make an
	// invalid batch, not a corrupt one (Kafka: INVALID_RECORD, which
	// clients do not retry).
	if h.Codec() == CodecNone {
		err = validateRecords(b[HeaderSize:], h.RecordCount, lim.RequireKeys)
	} else {
		err = validateCompressed(b, &h, lim)
	}
	if err != nil {
		if ClassOf(err) == ClassCorrupt {
			err = &Error{Class: ClassInvalid, Msg: err.Error()}
		}
		return h, err
	}
	return h, nil
}

// streams are the Streams Validate walks compressed batches with.
var streams = sync.Pool{New: func() any { return new(Stream) }}

// validateCompressed walks a compressed batch's records as a stream,
// keeping none of them: the checks of validateRecords, within
// lim.MaxUncompressedBytes of decompression.
func validateCompressed(b []byte, h *Header, lim Limits) error {
	st := streams.Get().(*Stream)
	defer func() {
		st.Close()
		streams.Put(st)
	}()
	if err := st.Reset(b, h, lim.MaxUncompressedBytes); err != nil {
		return err
	}
	var i int32
	for {
		in, ok := st.Skip()
		if !ok {
			break
		}
		if in.OffsetDelta != i {
			return errorf(ClassInvalid, "record %d has offset delta %d (offset deltas must be 0..%d)", i, in.OffsetDelta, h.RecordCount-1)
		}
		if lim.RequireKeys && in.NullKey {
			return errorf(ClassInvalid, "record %d has a null key, which a compacted topic cannot keep", i)
		}
		i++
	}
	if err := st.Err(); err != nil {
		return err
	}
	if i != h.RecordCount {
		return errorf(ClassInvalid, "batch declares %d records but holds %d", h.RecordCount, i)
	}
	return nil
}

// validateRecords walks uncompressed records without copying them: each
// length must be sane, offset deltas must be 0..n-1, header keys not
// null (nor, with requireKeys, record keys), and the records must fill
// the region exactly.
func validateRecords(recs []byte, count int32, requireKeys bool) error {
	var it Iter
	it.Reset(recs, count)
	var i int32
	var r Record
	for it.next(&r) {
		if r.OffsetDelta != i {
			return errorf(ClassInvalid, "record %d has offset delta %d (offset deltas must be 0..%d)", i, r.OffsetDelta, count-1)
		}
		if r.nullHeaderKey {
			return errorf(ClassInvalid, "record %d has a header with a null key", i)
		}
		if requireKeys && r.Key == nil {
			return errorf(ClassInvalid, "record %d has a null key, which a compacted topic cannot keep", i)
		}
		i++
	}
	if err := it.Err(); err != nil {
		return err
	}
	if i != count {
		return errorf(ClassInvalid, "batch declares %d records but holds %d", count, i)
	}
	return nil
}

// SetBaseOffset patches the batch's baseOffset in place.
func SetBaseOffset(b []byte, base int64) {
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(base))
}

// SetLeaderEpoch patches the partitionLeaderEpoch in place.
func SetLeaderEpoch(b []byte, epoch int32) {
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(epoch))
}

// SetLogAppendTime marks the batch's timestamps as set by the broker, sets
// maxTimestamp to ts and recomputes the CRC (both fields are covered by it).
func SetLogAppendTime(b []byte, ts int64) {
	be := binary.BigEndian
	attrs := be.Uint16(b[offAttributes:]) | AttrLogAppendTime
	be.PutUint16(b[offAttributes:], attrs)
	be.PutUint64(b[offMaxTimestamp:], uint64(ts))
	be.PutUint32(b[offCRC:], Checksum(b))
}

// BatchLength reads the batchLength field of a batch starting at b[0]; b
// must hold at least 12 bytes.
func BatchLength(b []byte) int32 { return int32(binary.BigEndian.Uint32(b[offBatchLength:])) }

// BaseOffsetOf reads the baseOffset field.
func BaseOffsetOf(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[offBaseOffset:])) }

// Split cuts a produce request's records field, which may hold several
// batches back to back, into whole batches. It checks framing only; each
// batch still needs Validate.
func Split(records []byte, dst [][]byte) ([][]byte, error) {
	for len(records) > 0 {
		if len(records) < LogOverhead {
			return dst, errorf(ClassCorrupt, "%d trailing bytes are not a batch", len(records))
		}
		n := int64(BatchLength(records)) + LogOverhead
		if n < HeaderSize || n > int64(len(records)) {
			return dst, errorf(ClassCorrupt, "batchLength %d runs past the %d bytes received", n-LogOverhead, len(records))
		}
		dst = append(dst, records[:n:n])
		records = records[n:]
	}
	return dst, nil
}

// CheckStored verifies a batch read back from a log: exact length, magic 2
// and CRC32C. Unlike Validate it accepts what compaction and the broker may
// legitimately produce (fewer records than the offset span, any offsets).
func CheckStored(b []byte) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if int(h.Length) != len(b)-LogOverhead || h.Length < HeaderSize-LogOverhead {
		return h, errorf(ClassCorrupt, "batchLength %d does not match %d bytes", h.Length, len(b))
	}
	if h.Magic != Magic {
		return h, errorf(ClassCorrupt, "magic %d", h.Magic)
	}
	if sum := Checksum(b); sum != h.CRC {
		return h, errorf(ClassCorrupt, "CRC32C %08x does not match the stored %08x", sum, h.CRC)
	}
	if h.LastOffsetDelta < 0 {
		return h, errorf(ClassCorrupt, "last offset delta %d", h.LastOffsetDelta)
	}
	return h, nil
}
