package netio

import (
	"encoding/binary"
	"slices"

	"github.com/twmb/franz-go/pkg/kbin"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/wal"
)

// The Fetch response is encoded here by hand, because its record bytes do
// not pass through user space: the header fields are built in a buffer,
// and each partition's records are file ranges that the connection writer
// sends with sendfile. The layout follows the protocol for versions 4-17
// (kmsg's FetchResponse is the reference; fetchwire_test.go decodes what
// this writes with kmsg for every version).

type fetchPartResult struct {
	partition int32
	errCode   int16
	hw        int64
	lso       int64
	logStart  int64
	chunk     wal.Chunk
	// remote holds records read from tiered storage instead of chunk
	// (slices of the read cache's chunks, sent as they are).
	remote engine.RemoteRead
	// readCommitted: the fetch asked for read_committed, so the response
	// carries aborted (possibly empty) instead of a null list.
	readCommitted bool
	aborted       []wal.AbortedTxn
	// omit leaves the partition out of the response: an incremental
	// fetch session's partition with nothing new (fetch.respond).
	omit bool
	// redirect is 1 + the id of the replica the consumer should read
	// from instead (KIP-392); 0 (the zero value): none.
	redirect int32
}

// records is how many bytes of records the partition's answer carries,
// and the offsets of their first batch and after their last.
func (p *fetchPartResult) records() (n, first, next int64) {
	if p.remote.Bytes > 0 {
		return p.remote.Bytes, p.remote.FirstOffset, p.remote.NextOffset
	}
	return p.chunk.Bytes, p.chunk.FirstOffset, p.chunk.NextOffset
}

type fetchTopicResult struct {
	name  string
	id    [16]byte
	parts []fetchPartResult
}

// encodeFetch builds the response frame as parts: byte runs around the
// file ranges of the records. The first part starts with the frame length.
// The byte runs are slices of one buffer, cut once it is complete (an
// append may move it), so a response costs two allocations whatever its
// partition count. A partition's records shorter than copyBelow bytes
// are read into the buffer instead of being a file range (when they
// cannot be read whole, they stay a range, whose sendfile then reports
// the failure); it returns how many bytes it copied. Partitions marked
// omit, and topics with no other, are left out. With sc, the buffer
// and the parts reuse (and keep) its memory: sc must then stay untouched
// until the response is written.
func encodeFetch(r *request, errCode int16, sessionID int32, topics []fetchTopicResult, copyBelow int64, sc *fetchScratch) ([]part, int64) {
	v := r.version
	flex := v >= 12
	// An upper bound of the buffer, so that it never grows (and is never
	// copied) while the records are read into it: every field of every
	// topic and partition, whether its records are copied or not.
	nparts, size := 1, int64(64)
	for i := range topics {
		size += int64(len(topics[i].name)) + 32
		for j := range topics[i].parts {
			p := &topics[i].parts[j]
			size += 64 + 24*int64(len(p.aborted))
			if len(p.remote.Parts) > 0 {
				nparts += 1 + len(p.remote.Parts)
			}
			if c := &p.chunk; c.Bytes > 0 && c.Bytes < copyBelow {
				size += c.Bytes
			} else if c.Bytes > 0 {
				nparts += 1 + len(c.Ranges)
			}
		}
	}
	if sc == nil {
		sc = new(fetchScratch)
	}
	if cap(sc.out) < nparts {
		sc.out = make([]part, 0, nparts)
	}
	if int64(cap(sc.buf)) < size {
		sc.buf = make([]byte, 0, size)
	}
	parts := sc.out[:0]
	buf := append(sc.buf[:0], 0, 0, 0, 0)
	var copied int64
	buf = r.header(buf)
	total := int64(0)
	start := 0 // of the byte run being built
	// endRun closes the byte run at the end of buf; its part's b is set
	// at the end, from the buffer's final place.
	endRun := func() {
		parts = append(parts, part{f: wal.FileRange{Pos: int64(start), Len: int64(len(buf) - start)}})
		total += int64(len(buf) - start)
		start = len(buf)
	}
	buf = kbin.AppendInt32(buf, 0) // throttle
	if v >= 7 {
		buf = kbin.AppendInt16(buf, errCode)
		buf = kbin.AppendInt32(buf, sessionID)
	}
	// A topic is left out when every partition it has is; one the
	// request named with no partitions stays, as before sessions.
	ntopics := 0
	for i := range topics {
		if len(topics[i].parts) == 0 || sent(topics[i].parts) > 0 {
			ntopics++
		}
	}
	buf = appendArrayLen(buf, ntopics, flex)
	for i := range topics {
		t := &topics[i]
		nparts := sent(t.parts)
		if nparts == 0 && len(t.parts) > 0 {
			continue
		}
		if v <= 12 {
			buf = appendString(buf, t.name, flex)
		} else {
			buf = kbin.AppendUuid(buf, t.id)
		}
		buf = appendArrayLen(buf, nparts, flex)
		for j := range t.parts {
			p := &t.parts[j]
			if p.omit {
				continue
			}
			buf = kbin.AppendInt32(buf, p.partition)
			buf = kbin.AppendInt16(buf, p.errCode)
			buf = kbin.AppendInt64(buf, p.hw)
			buf = kbin.AppendInt64(buf, p.lso)
			if v >= 5 {
				buf = kbin.AppendInt64(buf, p.logStart)
			}
			switch {
			case !p.readCommitted && flex:
				buf = kbin.AppendUvarint(buf, 0) // null
			case !p.readCommitted:
				buf = kbin.AppendInt32(buf, -1)
			default:
				buf = appendArrayLen(buf, len(p.aborted), flex)
				for _, a := range p.aborted {
					buf = kbin.AppendInt64(buf, a.ProducerID)
					buf = kbin.AppendInt64(buf, a.FirstOffset)
					if flex {
						buf = append(buf, 0) // tagged fields
					}
				}
			}
			if v >= 11 {
				buf = kbin.AppendInt32(buf, p.redirect-1) // preferred read replica (-1: none)
			}
			n := p.chunk.Bytes
			if p.remote.Bytes > 0 {
				n = p.remote.Bytes
			}
			if flex {
				buf = kbin.AppendUvarint(buf, uint32(n+1))
			} else {
				buf = kbin.AppendInt32(buf, int32(n))
			}
			if p.remote.Bytes > 0 {
				// Slices of the remote read cache's chunks, sent as
				// they are.
				endRun()
				for _, b := range p.remote.Parts {
					parts = append(parts, part{b: b})
					total += int64(len(b))
				}
				n = 0
			}
			if n > 0 && n < copyBelow {
				if b, ok := readRanges(buf, p.chunk.Ranges); ok {
					buf = b
					copied += n
					n = 0 // sent with the bytes around it
				}
			}
			if n > 0 {
				endRun()
				for _, fr := range p.chunk.Ranges {
					parts = append(parts, part{f: fr})
					total += fr.Len
				}
			}
			if flex {
				buf = append(buf, 0) // partition tagged fields
			}
		}
		if flex {
			buf = append(buf, 0) // topic tagged fields
		}
	}
	if flex {
		buf = append(buf, 0) // response tagged fields
	}
	endRun()
	for i := range parts {
		if p := &parts[i]; p.f.File == nil && p.b == nil {
			s, e := int(p.f.Pos), int(p.f.Pos+p.f.Len)
			*p = part{b: buf[s:e:e]}
		}
	}
	binary.BigEndian.PutUint32(parts[0].b, uint32(total-4))
	sc.out = parts
	return parts, copied
}

// sent counts the partitions a response carries (not omitted).
func sent(parts []fetchPartResult) int {
	n := 0
	for i := range parts {
		if !parts[i].omit {
			n++
		}
	}
	return n
}

// readRanges appends the bytes of ranges to buf (pread), or returns
// false when a range cannot be read whole (the caller then sends the
// ranges with sendfile, which reports the failure).
func readRanges(buf []byte, ranges []wal.FileRange) ([]byte, bool) {
	at := len(buf)
	for _, fr := range ranges {
		from := len(buf)
		buf = slices.Grow(buf, int(fr.Len))[:from+int(fr.Len)]
		if _, err := fr.File.ReadAt(buf[from:], fr.Pos); err != nil {
			return buf[:at], false
		}
	}
	return buf, true
}

func appendArrayLen(dst []byte, n int, flex bool) []byte {
	if flex {
		return kbin.AppendCompactArrayLen(dst, n)
	}
	return kbin.AppendArrayLen(dst, n)
}

func appendString(dst []byte, s string, flex bool) []byte {
	if flex {
		return kbin.AppendCompactString(dst, s)
	}
	return kbin.AppendString(dst, s)
}
