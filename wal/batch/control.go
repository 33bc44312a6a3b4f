package batch

import (
	"encoding/binary"
	"fmt"
)

// Control batches end transactions. The transaction coordinator writes one
// into every partition of a transaction when it commits or aborts: a batch
// with the transactional and control attributes, the producer's id and
// epoch, no sequence, and one record whose key is
//
//	version int16 (0)  type int16 (0 abort, 1 commit)
//
// and whose value is
//
//	version int16 (0)  coordinatorEpoch int32
//
// as Kafka writes them. Consumers skip control batches; read_committed
// consumers use them, with the aborted-transaction list of a fetch, to
// drop the records of aborted transactions.

// ControlType is what a control record says.
type ControlType int16

// The control record types Kafka defines.
const (
	ControlAbort  ControlType = 0
	ControlCommit ControlType = 1
)

func (t ControlType) String() string {
	switch t {
	case ControlAbort:
		return "abort"
	case ControlCommit:
		return "commit"
	}
	return fmt.Sprintf("control(%d)", int16(t))
}

// AppendControl appends a control batch (base offset 0, CRC set) ending a
// transaction of producer id/epoch to dst.
func AppendControl(dst []byte, producerID int64, epoch int16, t ControlType, coordinatorEpoch int32, ts int64) []byte {
	var key [4]byte
	binary.BigEndian.PutUint16(key[2:], uint16(t))
	var val [6]byte
	binary.BigEndian.PutUint32(val[2:], uint32(coordinatorEpoch))
	b := Builder{ProducerID: producerID, ProducerEpoch: epoch, BaseSequence: -1, attrs: AttrTransactional | AttrControl}
	b.Add(ts, key[:], val[:], nil)
	out, _ := b.Build(dst, CodecNone) // uncompressed: Build cannot fail
	return out
}

// ControlRecordType returns the type of control batch b (header h): the
// key of its first record. Errors for a batch that is not a control batch
// or whose record is not a control record.
func ControlRecordType(b []byte, h *Header) (ControlType, error) {
	t, _, err := ParseControl(b, h)
	return t, err
}

// ParseControl returns the type of control batch b (header h) and the
// coordinator epoch of its marker (-1 when the record has no readable
// value). Errors as ControlRecordType.
func ParseControl(b []byte, h *Header) (ControlType, int32, error) {
	if !h.Control() {
		return 0, -1, errorf(ClassInvalid, "batch at offset %d is not a control batch", h.BaseOffset)
	}
	if h.Codec() != CodecNone {
		return 0, -1, errorf(ClassInvalid, "control batch at offset %d is compressed", h.BaseOffset)
	}
	var it Iter
	if len(b) < HeaderSize {
		return 0, -1, errorf(ClassCorrupt, "control batch of %d bytes", len(b))
	}
	it.Reset(b[HeaderSize:], h.RecordCount)
	r, ok := it.Next()
	if !ok {
		if err := it.Err(); err != nil {
			return 0, -1, err
		}
		return 0, -1, errorf(ClassInvalid, "control batch at offset %d has no record", h.BaseOffset)
	}
	if len(r.Key) < 4 {
		return 0, -1, errorf(ClassInvalid, "control record key of %d bytes", len(r.Key))
	}
	if v := int16(binary.BigEndian.Uint16(r.Key)); v != 0 {
		return 0, -1, errorf(ClassInvalid, "control record key version %d", v)
	}
	t := ControlType(binary.BigEndian.Uint16(r.Key[2:]))
	if t != ControlAbort && t != ControlCommit {
		return 0, -1, errorf(ClassInvalid, "control record type %d", int16(t))
	}
	ce := int32(-1)
	if len(r.Value) >= 6 && binary.BigEndian.Uint16(r.Value) == 0 {
		ce = int32(binary.BigEndian.Uint32(r.Value[2:]))
	}
	return t, ce, nil
}
