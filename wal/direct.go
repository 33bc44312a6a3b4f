package wal

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"unsafe"

	"github.com/ringlog/ringlog/ring"
)

// directBlock is the unit of an O_DIRECT write (Options.DirectWrites): its
// file offset, length and buffer address are multiples of it. 4 KiB is the
// logical block size of every disk ringlog is meant for, and a multiple of
// the 512 bytes older ones need.
const directBlock = 4096

// directRun is one O_DIRECT write of a stage: seg's bytes [from, end)
// padded to a whole block in buf, which starts at from (block-aligned).
type directRun struct {
	seg       *segment
	from, end int64
	buf       []byte
}

// directBytes is how much aligned buffer the direct stages of b need:
// every run of batches into one segment, from the start of the block it
// begins in to the end of the block it ends in.
func (b *Batch) directBytes() int {
	n := 0
	for _, st := range b.stages {
		if !st.log.opts.DirectWrites {
			continue
		}
		for i := 0; i < len(st.metas); {
			j := st.runEnd(i)
			from := st.metas[i].pos &^ (directBlock - 1)
			last := &st.metas[j-1]
			n += int(roundBlock(last.pos + int64(len(last.data)) - from))
			i = j
		}
	}
	return n
}

// runEnd is the end of the run of st.metas from i that go to one segment.
func (st *Stage) runEnd(i int) int {
	j := i
	for j < len(st.metas) && st.metas[j].seg == st.metas[i].seg {
		j++
	}
	return j
}

// roundBlock rounds n up to a whole number of direct blocks.
func roundBlock(n int64) int64 { return (n + directBlock - 1) &^ (directBlock - 1) }

// growArena makes b.arena hold at least n bytes, aligned to a block, and
// empty; what it held before may be dropped (buildOps calls it once,
// before any op points into it).
func (b *Batch) growArena(n int) {
	b.arenaUsed = 0
	if cap(b.arena) >= n {
		b.arena = b.arena[:cap(b.arena)]
		return
	}
	n = max(n, 2*cap(b.arena))
	raw := make([]byte, n+directBlock)
	skip := int(-uintptr(unsafe.Pointer(&raw[0])) & (directBlock - 1))
	b.arena = raw[skip : skip+n : skip+n]
}

// directWrite builds the O_DIRECT write of metas, a run of st's batches
// into seg: the bytes of the partial block before them, the batches, and
// zeros to the end of the block, in one aligned buffer from b.arena. The
// run is remembered in st.direct, so commit keeps the new partial block.
func (b *Batch) directWrite(st *Stage, seg *segment, metas []stagedBatch) (ring.Op, error) {
	p0 := metas[0].pos
	last := &metas[len(metas)-1]
	p1 := last.pos + int64(len(last.data))
	from := p0 &^ (directBlock - 1)
	n := int(roundBlock(p1 - from))
	buf := b.arena[b.arenaUsed : b.arenaUsed+n : b.arenaUsed+n]
	b.arenaUsed += n
	head := buf[:p0-from]
	switch {
	case len(head) == 0:
	case seg.dtailEnd == p0:
		copy(head, seg.dtail)
	default:
		// Not the bytes this segment's last write left (a restart, a
		// truncation, a failed write): read them back.
		if _, err := seg.f.ReadAt(head, from); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return ring.Op{}, fmt.Errorf("wal: %s: read back the block at %d for a direct write: %w", st.log.dir, from, err)
		}
	}
	w := len(head)
	for i := range metas {
		w += copy(buf[w:], metas[i].data)
	}
	clear(buf[w:])
	if seg.df == nil {
		df, err := openDirect(seg.f)
		if err != nil {
			return ring.Op{}, fmt.Errorf("wal: %s: %w", seg.path(logSuffix), err)
		}
		seg.df = df
	}
	st.direct = append(st.direct, directRun{seg: seg, from: from, end: p1, buf: buf})
	first := len(b.bufs)
	b.bufs = append(b.bufs, buf)
	return ring.Op{Kind: ring.OpWritev, Fd: int(seg.df.Fd()), Offset: from, Bufs: b.bufs[first : first+1 : first+1], Link: true}, nil
}

// commitDirect keeps, for each segment st wrote directly, the partial block
// its write ended in (the head of the next write) and notes the padding
// (owner only, after the writes succeeded).
func (st *Stage) commitDirect() {
	for _, r := range st.direct {
		s := r.seg
		if s.dtail == nil {
			s.dtail = make([]byte, directBlock)
		}
		tb := r.end &^ (directBlock - 1)
		copy(s.dtail, r.buf[tb-r.from:r.end-r.from])
		s.dtailEnd = r.end
		s.padded = s.padded || r.end != tb
	}
}

// trimPadding cuts a segment written with DirectWrites back to its data,
// dropping the zero padding of its last write (owner only).
func (s *segment) trimPadding() error {
	if !s.padded {
		return nil
	}
	if err := s.f.Truncate(s.size.Load()); err != nil {
		return fmt.Errorf("segment %d: cut the direct write's padding: %w", s.base, err)
	}
	s.padded = false
	return nil
}

// IsDirectPadding reports whether [pos, size) of a segment file f is what
// a direct write (Options.DirectWrites) leaves after the data until the
// segment is cut back: zeros, less than a block, to a block-aligned end
// of file. Recovery drops it; dump-segment names it.
func IsDirectPadding(f io.ReaderAt, pos, size int64) bool {
	if size%directBlock != 0 || size-pos >= directBlock || pos >= size {
		return false
	}
	var buf [directBlock]byte
	n := size - pos
	if _, err := f.ReadAt(buf[:n], pos); err != nil {
		return false
	}
	return bytes.Count(buf[:n], []byte{0}) == int(n)
}

// CheckDirectWrites tells whether logs in dir can be written with
// DirectWrites: it writes one block to a scratch file there with O_DIRECT
// and removes it. The error says what failed (tmpfs, for one, refuses
// O_DIRECT).
func CheckDirectWrites(dir string) (err error) {
	f, err := os.CreateTemp(dir, ".direct-probe-*")
	if err != nil {
		return fmt.Errorf("wal: direct writes: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("wal: direct writes: close the probe: %w", cerr)
		}
		if rerr := os.Remove(f.Name()); rerr != nil && err == nil {
			err = fmt.Errorf("wal: direct writes: remove the probe: %w", rerr)
		}
	}()
	df, err := openDirect(f)
	if err != nil {
		return fmt.Errorf("wal: direct writes in %s: %w", dir, err)
	}
	var a Batch
	a.growArena(directBlock)
	_, werr := df.WriteAt(a.arena[:directBlock], 0)
	if cerr := df.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("wal: direct writes in %s: an aligned O_DIRECT write: %w", dir, werr)
	}
	return nil
}
