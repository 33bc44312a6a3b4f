package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// mmapFile is a file mapped read-write into memory at a fixed capacity, with
// a count of valid fixed-size entries at its start. The owner appends entries
// and then publishes the new count; readers load the count and read only
// entries below it, so they never see a half-written entry.
//
// The file is sparse: its pages get disk blocks when first written. On a
// full disk a write through the mapping that needs a block cannot fail
// with ENOSPC like write(2); the kernel sends SIGBUS and the process dies.
// So blocks are reserved with fallocate before entries go into them
// (reserve), in reserveChunk steps, and an entry that cannot get one is
// not written (the indexes are sparse: a missing entry costs a longer
// scan, never a wrong answer).
//
// The mapping keeps its capacity for the file's whole life: sealing a
// segment only truncates the file (readers never touch bytes past the last
// entry, so the pages past the new end are never faulted in), and the
// mapping is removed only when the segment is closed.
//
// No descriptor is kept: a mapping stays valid after its file is closed,
// and the file is opened again (by path, never created) only for what
// needs one, reserving blocks (every reserveChunk of entries) and the
// truncation at seal. A partition then holds one descriptor, its log's,
// instead of three: 10,000 partitions fit a 20,000-descriptor limit.
type mmapFile struct {
	path      string
	data      []byte
	entrySize int
	entries   atomic.Int64
	// reserved is how many bytes from the file's start have disk blocks
	// reserved by reserve (owner only).
	reserved int64
}

// reserveChunk is how much of an index file reserve allocates at a time.
const reserveChunk = 64 << 10

// open maps the file at path (creating it with mode), with room for
// capacity bytes of entries, and returns the file's size before it was
// extended.
func (m *mmapFile) open(path string, mode os.FileMode, entrySize, capacity int) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, mode)
	if err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close() // failing already: the error returned says more
		return 0, err
	}
	onDisk := st.Size()
	capacity -= capacity % entrySize
	if capacity < entrySize {
		capacity = entrySize
	}
	if int64(capacity) < onDisk {
		capacity = int(onDisk - onDisk%int64(entrySize))
	}
	if err := f.Truncate(int64(capacity)); err != nil {
		_ = f.Close() // failing already: the error returned says more
		return 0, fmt.Errorf("preallocate %s: %w", path, err)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, capacity, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = f.Close() // failing already: the error returned says more
		return 0, fmt.Errorf("mmap %s: %w", path, err)
	}
	// Entries are written and read a few at a time. Without this the
	// first fault in the (sparse, preallocated) file makes the kernel read
	// ahead and zero-fill megabytes of page cache around it: with a
	// thousand partitions, gigabytes, and seconds of stalled appends.
	if err := unix.Madvise(data, unix.MADV_RANDOM); err != nil {
		_ = unix.Munmap(data)
		_ = f.Close() // failing already: the error returned says more
		return 0, fmt.Errorf("madvise %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		_ = unix.Munmap(data)
		return 0, fmt.Errorf("close %s: %w", path, err)
	}
	m.path, m.data, m.entrySize = path, data, entrySize
	return onDisk, nil
}

// errIndexGone: the index file was removed while mapped (a segment whose
// index was found wrong, distrustIndex, or a reader of an older segment
// of the same name did it). The mapping still serves lookups; nothing is
// left to trim, grow or reserve blocks in, and the next open rebuilds
// the index, as it does for any missing index.
var errIndexGone = errors.New("index file removed")

// withFile runs fn on the file opened again; errIndexGone when it no
// longer exists (it is never created again here).
func (m *mmapFile) withFile(fn func(f *os.File) error) error {
	f, err := os.OpenFile(m.path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return errIndexGone
	}
	if err != nil {
		return err
	}
	err = fn(f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", m.path, cerr)
	}
	return err
}

// full reports whether another entry would not fit.
func (m *mmapFile) full() bool {
	return (m.entries.Load()+1)*int64(m.entrySize) > int64(len(m.data))
}

// reserve makes sure the next entry's bytes have disk blocks, so that
// writing it through the mapping cannot fault; false: the disk is full,
// do not write the entry.
func (m *mmapFile) reserve() bool {
	end := (m.entries.Load() + 1) * int64(m.entrySize)
	if end <= m.reserved {
		return true
	}
	upto := min((end+reserveChunk-1)/reserveChunk*reserveChunk, int64(len(m.data)))
	// Gone (errIndexGone): no block can be reserved, so no entry is
	// written through the mapping (past the removed file's end it would
	// fault); a missing entry only costs a longer walk.
	if err := m.withFile(func(f *os.File) error { return allocate(f, m.reserved, upto-m.reserved) }); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			// A file system without fallocate: nothing to do better.
			m.reserved = int64(len(m.data))
			return true
		}
		return false
	}
	m.reserved = upto
	return true
}

// trim truncates the file to its valid entries (the mapping stays).
func (m *mmapFile) trim() error {
	n := m.entries.Load() * int64(m.entrySize)
	m.reserved = min(m.reserved, n)
	return ignoreGone(m.withFile(func(f *os.File) error { return f.Truncate(n) }))
}

// ignoreGone: a removed index has nothing to trim or grow back.
func ignoreGone(err error) error {
	if errors.Is(err, errIndexGone) {
		return nil
	}
	return err
}

// extend grows the file back to the mapping's size (after trim).
func (m *mmapFile) extend() error {
	return ignoreGone(m.withFile(func(f *os.File) error { return f.Truncate(int64(len(m.data))) }))
}

// reset forgets every entry (for a rebuild) and zeroes the region.
func (m *mmapFile) reset() {
	n := m.entries.Load() * int64(m.entrySize)
	clear(m.data[:n])
	m.entries.Store(0)
}

// truncateEntries forgets the entries from n on and zeroes them; readers
// that loaded the old count may still read them, which only costs them a
// longer walk (see Log.TruncateTo).
func (m *mmapFile) truncateEntries(n int64) {
	old := m.entries.Load()
	if n >= old {
		return
	}
	m.entries.Store(n)
	clear(m.data[n*int64(m.entrySize) : old*int64(m.entrySize)])
}

func (m *mmapFile) sync() error {
	return unix.Msync(m.data, unix.MS_SYNC)
}

func (m *mmapFile) close() error {
	err := unix.Munmap(m.data)
	m.data = nil
	return err
}

// offsetIndex is a segment's sparse offset index: entries of
//
//	[relativeOffset:4][position:4]   big-endian, 8 bytes
//
// mapping the first offset of a batch (relative to the segment's base
// offset) to that batch's byte position in the segment's .log file. An entry
// is added at most every Options.IndexIntervalBytes of log, so the index
// stays small enough to live in memory; a lookup finds the last entry at or
// before the target and the reader walks batch headers from there.
type offsetIndex struct{ mmapFile }

const offsetEntrySize = 8

func (x *offsetIndex) entry(i int64) (rel uint32, pos uint32) {
	b := x.data[i*offsetEntrySize:]
	return binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
}

// append adds an entry; the caller checks monotonicity and fullness.
func (x *offsetIndex) append(rel, pos uint32) {
	n := x.entries.Load()
	b := x.data[n*offsetEntrySize:]
	binary.BigEndian.PutUint32(b, rel)
	binary.BigEndian.PutUint32(b[4:], pos)
	x.entries.Store(n + 1)
}

// lookupEntry returns the last entry whose relative offset is at most rel,
// as (relative offset, position), or (0, 0) (the segment start) when there
// is none.
func (x *offsetIndex) lookupEntry(rel uint32) (uint32, int64) {
	lo, hi := int64(0), x.entries.Load()-1
	var bestRel uint32
	bestPos := int64(0)
	for lo <= hi {
		mid := (lo + hi) / 2
		r, p := x.entry(mid)
		if r <= rel {
			bestRel, bestPos = r, int64(p)
			lo = mid + 1
		} else {
			hi = mid - 1
		}
	}
	return bestRel, bestPos
}

// countRelBelow is the number of entries whose relative offset is below
// rel.
func (x *offsetIndex) countRelBelow(rel uint32) int64 {
	return int64(sort.Search(int(x.entries.Load()), func(i int) bool {
		r, _ := x.entry(int64(i))
		return r >= rel
	}))
}

// countPosAtMost is the number of entries whose position is at most pos.
func (x *offsetIndex) countPosAtMost(pos int64) int64 {
	return int64(sort.Search(int(x.entries.Load()), func(i int) bool {
		_, p := x.entry(int64(i))
		return int64(p) > pos
	}))
}

// lookupPos returns the last entry whose position is at most pos, as
// (relative offset, position), or (0, 0).
func (x *offsetIndex) lookupPos(pos int64) (uint32, int64) {
	lo, hi := int64(0), x.entries.Load()-1
	var bestRel uint32
	var bestPos int64
	for lo <= hi {
		mid := (lo + hi) / 2
		r, p := x.entry(mid)
		if int64(p) <= pos {
			bestRel, bestPos = r, int64(p)
			lo = mid + 1
		} else {
			hi = mid - 1
		}
	}
	return bestRel, bestPos
}

// last returns the last entry, ok false when empty.
func (x *offsetIndex) last() (rel uint32, pos uint32, ok bool) {
	n := x.entries.Load()
	if n == 0 {
		return 0, 0, false
	}
	rel, pos = x.entry(n - 1)
	return rel, pos, true
}

// sane checks entries loaded from disk: strictly increasing offsets and
// positions, every position inside the log, every offset below limitRel.
func (x *offsetIndex) sane(logSize int64, limitRel int64) error {
	n := x.entries.Load()
	var prevRel, prevPos int64 = -1, -1
	for i := int64(0); i < n; i++ {
		r, p := x.entry(i)
		if int64(r) <= prevRel || int64(p) <= prevPos && i > 0 {
			return fmt.Errorf("entry %d (%d,%d) does not increase", i, r, p)
		}
		if int64(p) >= logSize && !(logSize == 0 && p == 0) {
			return fmt.Errorf("entry %d points at byte %d past the log's %d", i, p, logSize)
		}
		if limitRel >= 0 && int64(r) >= limitRel {
			return fmt.Errorf("entry %d offset +%d is past the segment's end +%d", i, r, limitRel)
		}
		prevRel, prevPos = int64(r), int64(p)
	}
	return nil
}

// timeIndex is a segment's time index: entries of
//
//	[timestamp:8][relativeOffset:4]   big-endian, 12 bytes
//
// each saying "the largest timestamp in the segment up to here is
// timestamp, first reached at the batch starting at relativeOffset".
// Timestamps strictly increase from entry to entry. An entry is added when
// an offset-index entry is added and the segment's largest timestamp grew,
// and once more when the segment is sealed.
type timeIndex struct{ mmapFile }

const timeEntrySize = 12

func (x *timeIndex) entry(i int64) (ts int64, rel uint32) {
	b := x.data[i*timeEntrySize:]
	return int64(binary.BigEndian.Uint64(b)), binary.BigEndian.Uint32(b[8:])
}

func (x *timeIndex) append(ts int64, rel uint32) {
	n := x.entries.Load()
	b := x.data[n*timeEntrySize:]
	binary.BigEndian.PutUint64(b, uint64(ts))
	binary.BigEndian.PutUint32(b[8:], rel)
	x.entries.Store(n + 1)
}

func (x *timeIndex) last() (ts int64, rel uint32, ok bool) {
	n := x.entries.Load()
	if n == 0 {
		return 0, 0, false
	}
	ts, rel = x.entry(n - 1)
	return ts, rel, true
}

// lookup returns the relative offset of the last entry whose timestamp is
// at most ts, or 0. Every batch before that entry's batch has only
// timestamps below the entry's, so a scan for the first record at or after
// ts can start there.
func (x *timeIndex) lookup(ts int64) uint32 {
	lo, hi := int64(0), x.entries.Load()-1
	var best uint32
	for lo <= hi {
		mid := (lo + hi) / 2
		t, r := x.entry(mid)
		if t <= ts {
			best = r
			lo = mid + 1
		} else {
			hi = mid - 1
		}
	}
	return best
}

// countRelBelow is the number of entries whose relative offset is below
// rel (relative offsets never decrease along the time index).
func (x *timeIndex) countRelBelow(rel int64) int64 {
	return int64(sort.Search(int(x.entries.Load()), func(i int) bool {
		_, r := x.entry(int64(i))
		return int64(r) >= rel
	}))
}

func (x *timeIndex) sane(limitRel int64) error {
	n := x.entries.Load()
	var prevTs int64 = -1 << 63
	var prevRel int64 = -1
	for i := int64(0); i < n; i++ {
		t, r := x.entry(i)
		if t <= prevTs || int64(r) < prevRel {
			return fmt.Errorf("entry %d (%d,%d) does not increase", i, t, r)
		}
		if limitRel >= 0 && int64(r) >= limitRel {
			return fmt.Errorf("entry %d offset +%d is past the segment's end +%d", i, r, limitRel)
		}
		prevTs, prevRel = t, int64(r)
	}
	return nil
}
