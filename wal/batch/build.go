package batch

import "encoding/binary"

// Builder assembles a v2 record batch from records, for the broker's own
// writes (committed offsets, the native protocol's produce) and for tests.
type Builder struct {
	recs          []byte
	count         int32
	baseTimestamp int64
	maxTimestamp  int64
	ProducerID    int64 // -1 unless idempotent
	ProducerEpoch int16
	BaseSequence  int32
	// Transactional marks the batch as part of a transaction (it needs
	// a producer id).
	Transactional bool
	// attrs are attribute bits beyond the codec (control batches).
	attrs   int16
	scratch []byte
}

// NewBuilder returns an empty builder for a non-idempotent batch.
func NewBuilder() *Builder {
	b := &Builder{}
	b.Reset()
	return b
}

// Reset empties the builder for a new batch (and clears the producer fields).
func (b *Builder) Reset() {
	b.recs = b.recs[:0]
	b.count = 0
	b.ProducerID = -1
	b.ProducerEpoch = -1
	b.BaseSequence = -1
	b.attrs = 0
	b.Transactional = false
}

// Len is the number of records added since Reset.
func (b *Builder) Len() int { return int(b.count) }

// Bytes is the size of the encoded records so far (before compression).
func (b *Builder) Bytes() int { return len(b.recs) }

// Add appends a record with timestamp ts (Unix milliseconds).
func (b *Builder) Add(ts int64, key, value []byte, headers []RecordHeader) {
	if b.count == 0 {
		b.baseTimestamp = ts
		b.maxTimestamp = ts
	}
	if ts > b.maxTimestamp {
		b.maxTimestamp = ts
	}
	b.recs = AppendRecord(b.recs, ts-b.baseTimestamp, b.count, key, value, headers)
	b.count++
}

// Build appends the finished batch (baseOffset 0, records compressed with
// codec, CRC set) to dst. The builder keeps its records until Reset.
func (b *Builder) Build(dst []byte, codec Codec) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	var err error
	if codec == CodecNone {
		dst = append(dst, b.recs...)
	} else {
		b.scratch, err = Compress(codec, b.scratch[:0], b.recs)
		if err != nil {
			return dst[:start], err
		}
		dst = append(dst, b.scratch...)
	}
	h := dst[start:]
	be := binary.BigEndian
	be.PutUint64(h[offBaseOffset:], 0)
	be.PutUint32(h[offBatchLength:], uint32(len(h)-LogOverhead))
	be.PutUint32(h[offLeaderEpoch:], 0)
	h[offMagic] = Magic
	attrs := uint16(codec)&AttrCodecMask | uint16(b.attrs)
	if b.Transactional {
		attrs |= AttrTransactional
	}
	be.PutUint16(h[offAttributes:], attrs)
	be.PutUint32(h[offLastOffsetDelta:], uint32(b.count-1))
	be.PutUint64(h[offBaseTimestamp:], uint64(b.baseTimestamp))
	be.PutUint64(h[offMaxTimestamp:], uint64(b.maxTimestamp))
	be.PutUint64(h[offProducerID:], uint64(b.ProducerID))
	be.PutUint16(h[offProducerEpoch:], uint16(b.ProducerEpoch))
	be.PutUint32(h[offBaseSequence:], uint32(b.BaseSequence))
	be.PutUint32(h[offRecordCount:], uint32(b.count))
	be.PutUint32(h[offCRC:], Checksum(h))
	return dst, nil
}

// Records returns an iterator over the records of batch b (header h),
// decompressing into scratch when the batch is compressed. The returned
// scratch must be kept while the iterator's records are in use.
func Records(b []byte, h *Header, scratch []byte) (Iter, []byte, error) {
	var it Iter
	recs := b[HeaderSize:]
	if c := h.Codec(); c != CodecNone {
		var err error
		scratch, err = Decompress(c, scratch[:0], recs)
		if err != nil {
			return it, scratch, err
		}
		recs = scratch
	}
	it.Reset(recs, h.RecordCount)
	return it, scratch, nil
}

// HasNullKey reports whether any record of batch b (header h) has a null
// key (compacted topics refuse those), decompressing into scratch if
// needed.
func HasNullKey(b []byte, h *Header, scratch []byte) (bool, []byte, error) {
	it, scratch, err := Records(b, h, scratch)
	if err != nil {
		return false, scratch, err
	}
	for {
		r, ok := it.Next()
		if !ok {
			return false, scratch, it.Err()
		}
		if r.Key == nil {
			return true, scratch, nil
		}
	}
}
