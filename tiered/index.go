package tiered

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"

	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// Index is the object uploaded next to a segment: a sparse map from
// offsets to byte positions (with the largest timestamp of each stretch,
// for lookups by time) and the aborted transactions whose marker the
// segment holds. Remote reads find a batch with it in one range read.
//
// Encoding (big endian), ending in a CRC32C of everything before it:
//
//	"RLRX" version uint8(1)  base end size int64
//	entries uint32  { offset position maxTimestamp int64 }...
//	aborted uint32  { producerId firstOffset lastOffset lastStableOffset int64 }...
//	crc uint32
type Index struct {
	Base, End, Size int64
	Entries         []IndexEntry
	Aborted         []wal.AbortedTxn
	// MaxBatch is the largest batch's size (BuildIndex only; not
	// encoded).
	MaxBatch int64
}

// IndexEntry says that the batch at Pos starts at Offset, and that no
// batch from it to the next entry has a timestamp above MaxTimestamp.
type IndexEntry struct {
	Offset, Pos, MaxTimestamp int64
}

const (
	indexMagic   = "RLRX"
	indexVersion = 1
	indexHead    = 4 + 1 + 24
	entrySize    = 24
	abortedSize  = 32
	// IndexInterval is the most segment bytes between two entries.
	IndexInterval = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BuildIndex walks the batch headers of a segment of size bytes holding
// offsets [base, end) and returns its index. A header that does not fit
// the segment (length, offsets out of order or out of range, magic) is an
// error: such a segment is not copied.
func BuildIndex(r io.ReaderAt, base, end, size int64, aborted []wal.AbortedTxn) (*Index, error) {
	ix := &Index{Base: base, End: end, Size: size, Aborted: aborted}
	var hdr [batch.HeaderSize]byte
	next := base
	lastEntry := int64(-IndexInterval)
	for pos := int64(0); pos < size; {
		if _, err := r.ReadAt(hdr[:], pos); err != nil {
			return nil, fmt.Errorf("tiered: index of segment %d: header at %d: %w", base, pos, err)
		}
		h, err := CheckHeader(hdr[:], pos, size, next, end)
		if err != nil {
			return nil, fmt.Errorf("tiered: index of segment %d: %w", base, err)
		}
		if pos-lastEntry >= IndexInterval {
			ix.Entries = append(ix.Entries, IndexEntry{Offset: h.BaseOffset, Pos: pos, MaxTimestamp: h.MaxTimestamp})
			lastEntry = pos
		} else if e := &ix.Entries[len(ix.Entries)-1]; h.MaxTimestamp > e.MaxTimestamp {
			e.MaxTimestamp = h.MaxTimestamp
		}
		next = h.LastOffset() + 1
		pos += int64(h.Size())
		ix.MaxBatch = max(ix.MaxBatch, int64(h.Size()))
	}
	return ix, nil
}

// CheckHeader parses the batch header at pos of a segment of size bytes
// and checks it against the segment: a v2 batch inside it whose offsets
// start at or after next and end before end.
func CheckHeader(b []byte, pos, size, next, end int64) (batch.Header, error) {
	h, err := batch.ParseHeader(b)
	if err != nil {
		return h, err
	}
	switch {
	case h.Magic != 2:
		return h, fmt.Errorf("batch at %d: magic %d", pos, h.Magic)
	case int64(h.Length) < batch.HeaderSize-12 || pos+12+int64(h.Length) > size:
		return h, fmt.Errorf("batch at %d: length %d does not fit the segment's %d bytes", pos, h.Length, size)
	case h.BaseOffset < next || h.LastOffsetDelta < 0 || h.LastOffset() >= end:
		return h, fmt.Errorf("batch at %d: offsets %d..%d outside [%d, %d)", pos, h.BaseOffset, h.LastOffset(), next, end)
	}
	return h, nil
}

// Lookup returns the entry to start from for offset: the last one at or
// below it (the first when offset precedes them all).
func (ix *Index) Lookup(offset int64) IndexEntry {
	i := sort.Search(len(ix.Entries), func(i int) bool { return ix.Entries[i].Offset > offset })
	if i > 0 {
		i--
	}
	return ix.Entries[i]
}

// LookupTime returns the first entry whose stretch holds a timestamp at
// or after ts, and false when none does.
func (ix *Index) LookupTime(ts int64) (IndexEntry, bool) {
	for _, e := range ix.Entries {
		if e.MaxTimestamp >= ts {
			return e, true
		}
	}
	return IndexEntry{}, false
}

// Encode returns the index's bytes.
func (ix *Index) Encode() []byte {
	be := binary.BigEndian
	b := make([]byte, 0, indexHead+8+len(ix.Entries)*entrySize+len(ix.Aborted)*abortedSize+4)
	b = append(b, indexMagic...)
	b = append(b, indexVersion)
	b = be.AppendUint64(b, uint64(ix.Base))
	b = be.AppendUint64(b, uint64(ix.End))
	b = be.AppendUint64(b, uint64(ix.Size))
	b = be.AppendUint32(b, uint32(len(ix.Entries)))
	for _, e := range ix.Entries {
		b = be.AppendUint64(b, uint64(e.Offset))
		b = be.AppendUint64(b, uint64(e.Pos))
		b = be.AppendUint64(b, uint64(e.MaxTimestamp))
	}
	b = be.AppendUint32(b, uint32(len(ix.Aborted)))
	for _, a := range ix.Aborted {
		b = be.AppendUint64(b, uint64(a.ProducerID))
		b = be.AppendUint64(b, uint64(a.FirstOffset))
		b = be.AppendUint64(b, uint64(a.LastOffset))
		b = be.AppendUint64(b, uint64(a.LastStableOffset))
	}
	return be.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// ErrBadIndex wraps every reason DecodeIndex refuses bytes.
var ErrBadIndex = errors.New("tiered: bad segment index")

// DecodeIndex parses an index object (bytes from the store: hostile).
// It checks the checksum, the counts against the length, and that the
// entries increase inside the segment they describe.
func DecodeIndex(b []byte) (*Index, error) {
	be := binary.BigEndian
	if len(b) < indexHead+8+4 || string(b[:4]) != indexMagic {
		return nil, fmt.Errorf("%w: no header", ErrBadIndex)
	}
	if b[4] != indexVersion {
		return nil, fmt.Errorf("%w: version %d", ErrBadIndex, b[4])
	}
	body, sum := b[:len(b)-4], be.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum", ErrBadIndex)
	}
	ix := &Index{Base: int64(be.Uint64(b[5:])), End: int64(be.Uint64(b[13:])), Size: int64(be.Uint64(b[21:]))}
	if ix.Base < 0 || ix.End <= ix.Base || ix.Size <= 0 {
		return nil, fmt.Errorf("%w: segment [%d, %d) of %d bytes", ErrBadIndex, ix.Base, ix.End, ix.Size)
	}
	rest := body[indexHead:]
	n := int64(be.Uint32(rest))
	rest = rest[4:]
	if n == 0 || n > int64(len(rest))/entrySize {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", ErrBadIndex, n, len(rest))
	}
	ix.Entries = make([]IndexEntry, n)
	for i := range ix.Entries {
		e := IndexEntry{Offset: int64(be.Uint64(rest)), Pos: int64(be.Uint64(rest[8:])), MaxTimestamp: int64(be.Uint64(rest[16:]))}
		rest = rest[entrySize:]
		if e.Offset < ix.Base || e.Offset >= ix.End || e.Pos < 0 || e.Pos >= ix.Size {
			return nil, fmt.Errorf("%w: entry %d outside the segment", ErrBadIndex, i)
		}
		if i == 0 && e.Pos != 0 || i > 0 && (e.Offset <= ix.Entries[i-1].Offset || e.Pos <= ix.Entries[i-1].Pos) {
			return nil, fmt.Errorf("%w: entry %d out of order", ErrBadIndex, i)
		}
		ix.Entries[i] = e
	}
	if len(rest) < 4 {
		return nil, fmt.Errorf("%w: no aborted transactions count", ErrBadIndex)
	}
	n = int64(be.Uint32(rest))
	rest = rest[4:]
	if n != int64(len(rest))/abortedSize || int64(len(rest))%abortedSize != 0 {
		return nil, fmt.Errorf("%w: %d aborted transactions in %d bytes", ErrBadIndex, n, len(rest))
	}
	for range n {
		ix.Aborted = append(ix.Aborted, wal.AbortedTxn{
			ProducerID: int64(be.Uint64(rest)), FirstOffset: int64(be.Uint64(rest[8:])),
			LastOffset: int64(be.Uint64(rest[16:])), LastStableOffset: int64(be.Uint64(rest[24:])),
		})
		rest = rest[abortedSize:]
	}
	return ix, nil
}
