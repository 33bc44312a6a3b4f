package batch

import (
	"encoding/binary"
	"fmt"
	"iter"
)

// A record inside a batch (all integers zigzag varints unless noted):
//
//	length          varint   bytes after this field
//	attributes      int8     unused
//	timestampDelta  varlong  from the batch's baseTimestamp
//	offsetDelta     varint   from the batch's baseOffset
//	keyLength       varint   -1 for a null key
//	key             bytes
//	valueLength     varint   -1 for a null value (a tombstone)
//	value           bytes
//	headerCount     varint
//	headers         keyLength varint, key, valueLength varint, value

// Record is one record of a batch, its slices aliasing the batch's bytes.
type Record struct {
	Attributes     int8
	TimestampDelta int64
	OffsetDelta    int32
	Key            []byte // nil for a null key
	Value          []byte // nil for a null value
	HeaderCount    int32
	// RawHeaders holds the encoded headers; walk them with Headers.
	RawHeaders []byte
	// nullHeaderKey: a header's key is null, which Kafka refuses at
	// produce (stored records are read as they are).
	nullHeaderKey bool
}

// RecordHeader is one record header.
type RecordHeader struct {
	Key   string
	Value []byte
}

// Headers decodes the record's headers (allocating).
func (r *Record) Headers() ([]RecordHeader, error) {
	if r.HeaderCount == 0 {
		return nil, nil
	}
	out := make([]RecordHeader, 0, r.HeaderCount)
	b := r.RawHeaders
	for i := int32(0); i < r.HeaderCount; i++ {
		k, rest, err := readVarBytes(b)
		if err != nil {
			return nil, err
		}
		v, rest2, err := readVarBytes(rest)
		if err != nil {
			return nil, err
		}
		out = append(out, RecordHeader{Key: string(k), Value: v})
		b = rest2
	}
	return out, nil
}

// Iter walks the records of an uncompressed records region. It does not
// allocate.
type Iter struct {
	b     []byte
	left  int32
	err   error
	index int32
}

// Reset starts a walk over recs, expecting count records.
func (it *Iter) Reset(recs []byte, count int32) {
	*it = Iter{b: recs, left: count}
}

// Err is the reason the walk stopped early, or nil.
func (it *Iter) Err() error { return it.err }

// Next returns the next record, or false when the records (or the bytes)
// run out or a record is malformed (then Err says why). Bytes left over
// after the declared count are an error.
func (it *Iter) Next() (Record, bool) {
	var r Record
	if !it.next(&r) {
		return Record{}, false // not the half-parsed record
	}
	return r, true
}

// All yields the records Next returns, in order, for a range loop; Err
// says afterwards whether the walk stopped early.
func (it *Iter) All() iter.Seq[Record] {
	return func(yield func(Record) bool) {
		for {
			r, ok := it.Next()
			if !ok || !yield(r) {
				return
			}
		}
	}
}

// next is Next filling r in place, which spares the validation of every
// produced batch (validateRecords) a copy of each record.
func (it *Iter) next(r *Record) bool {
	if it.err != nil {
		return false
	}
	if it.left <= 0 {
		if len(it.b) != 0 {
			it.err = errorf(ClassCorrupt, "%d bytes follow the last record", len(it.b))
		}
		return false
	}
	if len(it.b) == 0 {
		it.err = errorf(ClassCorrupt, "records end after %d of the declared records", it.index)
		return false
	}
	length, n := binary.Varint(it.b)
	if n <= 0 || length < 0 || length > int64(len(it.b)-n) {
		it.err = errorf(ClassCorrupt, "record %d: bad length", it.index)
		return false
	}
	body := it.b[n : n+int(length)]
	it.b = it.b[n+int(length):]
	if err := parseRecord(body, r); err != nil {
		it.err = fmt.Errorf("record %d: %w", it.index, err)
		return false
	}
	it.left--
	it.index++
	return true
}

// parseRecord decodes one record's body into r (every field set).
func parseRecord(b []byte, r *Record) error {
	*r = Record{}
	if len(b) < 1 {
		return errorf(ClassCorrupt, "empty record")
	}
	r.Attributes = int8(b[0])
	b = b[1:]
	var n int
	r.TimestampDelta, n = binary.Varint(b)
	if n <= 0 {
		return errorf(ClassCorrupt, "bad timestamp delta")
	}
	b = b[n:]
	od, n := binary.Varint(b)
	if n <= 0 || od < 0 || od > 1<<31-1 {
		return errorf(ClassCorrupt, "bad offset delta")
	}
	r.OffsetDelta = int32(od)
	b = b[n:]
	var err error
	if r.Key, b, err = readVarBytes(b); err != nil {
		return err
	}
	if r.Value, b, err = readVarBytes(b); err != nil {
		return err
	}
	hc, n := binary.Varint(b)
	if n <= 0 || hc < 0 || hc > int64(len(b)) {
		return errorf(ClassCorrupt, "bad header count")
	}
	r.HeaderCount = int32(hc)
	b = b[n:]
	r.RawHeaders = b
	// Check the headers fit exactly, without allocating.
	for i := int64(0); i < hc; i++ {
		var k []byte
		if k, b, err = readVarBytes(b); err != nil {
			return err
		}
		if k == nil {
			r.nullHeaderKey = true
		}
		if _, b, err = readVarBytes(b); err != nil {
			return err
		}
	}
	if len(b) != 0 {
		return errorf(ClassCorrupt, "%d bytes after the record's headers", len(b))
	}
	return nil
}

// readVarBytes reads a varint length and that many bytes; length -1 is nil.
func readVarBytes(b []byte) ([]byte, []byte, error) {
	l, n := binary.Varint(b)
	if n <= 0 || l < -1 || l > int64(len(b)-n) {
		return nil, b, errorf(ClassCorrupt, "bad length-prefixed field")
	}
	b = b[n:]
	if l < 0 {
		return nil, b, nil
	}
	return b[:l:l], b[l:], nil
}

// appendVarBytes appends a varint length and v; a nil v is length -1.
func appendVarBytes(dst, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(v)))
	return append(dst, v...)
}

// AppendRecord encodes one record (with its length prefix) onto dst.
func AppendRecord(dst []byte, tsDelta int64, offsetDelta int32, key, value []byte, headers []RecordHeader) []byte {
	// Compute the body length first so the length prefix can be written
	// without a second buffer.
	n := 1 + varintLen(tsDelta) + varintLen(int64(offsetDelta)) + varBytesLen(key) + varBytesLen(value) + varintLen(int64(len(headers)))
	for i := range headers {
		n += varintLen(int64(len(headers[i].Key))) + len(headers[i].Key) + varBytesLen(headers[i].Value)
	}
	dst = binary.AppendVarint(dst, int64(n))
	dst = append(dst, 0) // attributes
	dst = binary.AppendVarint(dst, tsDelta)
	dst = binary.AppendVarint(dst, int64(offsetDelta))
	dst = appendVarBytes(dst, key)
	dst = appendVarBytes(dst, value)
	dst = binary.AppendVarint(dst, int64(len(headers)))
	for i := range headers {
		dst = binary.AppendVarint(dst, int64(len(headers[i].Key)))
		dst = append(dst, headers[i].Key...)
		dst = appendVarBytes(dst, headers[i].Value)
	}
	return dst
}

func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

func varBytesLen(v []byte) int {
	if v == nil {
		return varintLen(-1)
	}
	return varintLen(int64(len(v))) + len(v)
}
