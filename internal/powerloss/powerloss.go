// Package powerloss is a test-only emulation of a power cut for the
// broker's log files. A Journal wraps the ring.Backend of every writer
// shard (engine.Config.WrapBackend) and records, in a journal file, how
// much of each file it writes is known to be on stable storage: the size
// a file had when this process first wrote it (what survived the last
// cut is on disk), then, at every successful fdatasync, the end of the
// writes that sync covers (those before it in its batch and in earlier
// batches). After the process is killed, Apply reads the journal and
// does to each file what a power cut may do to bytes written but not
// synced: drop them all, keep a prefix of them (a torn tail), or keep the
// file's length with some of its 4 KiB pages never written (zeros).
//
// The journal is plain appends without fsync: a SIGKILL keeps the page
// cache, which is all the emulation needs. What it does not model: files
// written outside the ring (metadata, snapshots and checkpoints, written
// and synced by the engine itself; mmapped indexes, which recovery checks
// and rebuilds), and directory entries (a new file whose directory was
// not synced could vanish in a real cut; the wal syncs the directory when
// it creates a segment).
package powerloss

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/ringlog/ringlog/ring"
)

// Journal records what the wrapped backends made durable. Its methods are
// safe for concurrent use by the shards.
type Journal struct {
	mu   sync.Mutex
	f    *os.File
	seen map[fileID]*fileState
	// known: the durable lengths earlier processes recorded (a kill
	// without a cut keeps their unsynced bytes in the page cache only).
	known map[string]int64
	err   error // the first journal write error, reported by Close
}

type fileID struct{ dev, ino uint64 }

type fileState struct {
	path    string
	written int64 // end of the furthest successful write
}

// Open appends to the journal at path (created if missing): one journal
// spans the processes killed on a data directory until a cut is applied.
func Open(path string) (*Journal, error) {
	known, _, err := read(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("powerloss journal: %w", err)
	}
	return &Journal{f: f, seen: map[fileID]*fileState{}, known: known}, nil
}

// Close closes the journal file and reports the first write error.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.f.Close(); err != nil && j.err == nil {
		j.err = err
	}
	return j.err
}

// Wrap has the signature of engine.Config.WrapBackend.
func (j *Journal) Wrap(_ int, b ring.Backend) ring.Backend { return &backend{j: j, inner: b} }

type backend struct {
	j     *Journal
	inner ring.Backend
}

func (b *backend) Name() string { return "powerloss(" + b.inner.Name() + ")" }
func (b *backend) Close() error { return b.inner.Close() }
func (b *backend) Run(ops []ring.Op) error {
	// Files first written by this process: their size now is durable
	// (a cut before now was applied before this process started).
	for i := range ops {
		if ops[i].Kind == ring.OpWritev {
			b.j.first(ops[i].Fd)
		}
	}
	if err := b.inner.Run(ops); err != nil {
		return err
	}
	// A shard's batches run one at a time and complete before Run
	// returns, so the writes before a sync in the batch (its link chain)
	// and in earlier batches are the ones it made durable.
	for i := range ops {
		op := &ops[i]
		if op.Err != nil {
			continue
		}
		switch op.Kind {
		case ring.OpWritev:
			b.j.wrote(op.Fd, op.Offset+op.Res)
		case ring.OpFdatasync:
			b.j.synced(op.Fd)
		}
	}
	return nil
}

// state returns the journal's entry for the file open as fd, creating it
// the first time (j.mu held). A new file's durable length is 0, a file an
// earlier process of this journal wrote keeps the length it recorded, any
// other file's present size is durable.
func (j *Journal) state(fd int) *fileState {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		j.fail(err)
		return nil
	}
	id := fileID{uint64(st.Dev), st.Ino}
	if s, ok := j.seen[id]; ok {
		return s
	}
	path, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		j.fail(err)
		return nil
	}
	s := &fileState{path: path, written: st.Size}
	j.seen[id] = s
	if _, ok := j.known[path]; !ok || st.Size == 0 {
		j.record(path, st.Size)
	}
	return s
}

// SyncFile has the signature of engine.Config.SyncFile: it syncs f and
// records its whole length as durable.
func (j *Journal) SyncFile(f *os.File) error {
	if err := f.Sync(); err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	j.mu.Lock()
	if s := j.state(int(f.Fd())); s != nil {
		s.written = max(s.written, fi.Size())
		j.record(s.path, fi.Size())
	}
	j.mu.Unlock()
	return nil
}

func (j *Journal) first(fd int) {
	j.mu.Lock()
	j.state(fd)
	j.mu.Unlock()
}

func (j *Journal) wrote(fd int, end int64) {
	j.mu.Lock()
	if s := j.state(fd); s != nil && end > s.written {
		s.written = end
	}
	j.mu.Unlock()
}

func (j *Journal) synced(fd int) {
	j.mu.Lock()
	if s := j.state(fd); s != nil {
		j.record(s.path, s.written)
	}
	j.mu.Unlock()
}

// record appends "durable LENGTH PATH" (j.mu held).
func (j *Journal) record(path string, n int64) {
	if _, err := fmt.Fprintf(j.f, "durable %d %s\n", n, path); err != nil {
		j.fail(err)
	}
}

func (j *Journal) fail(err error) {
	if j.err == nil {
		j.err = fmt.Errorf("powerloss journal: %w", err)
	}
}

// Mode is what a cut does to one file's bytes past its durable length.
type Mode int

const (
	// Drop loses every byte written since the last sync.
	Drop Mode = iota
	// Torn keeps a random prefix of them.
	Torn
	// Holes keeps the file's length, with random 4 KiB pages of the
	// unsynced range read back as zeros (written back or not, page by
	// page, as the kernel's writeback left them).
	Holes
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Drop:
		return "drop"
	case Torn:
		return "torn"
	case Holes:
		return "holes"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Damage is what Apply did to one file.
type Damage struct {
	Path    string
	Durable int64 // the journal's durable length
	Size    int64 // the file's length before the cut
	Mode    Mode
	Lost    int64 // bytes past Durable removed or zeroed
}

// Apply cuts the power on the files the journal at path names: each file
// longer than its last durable length gets a mode picked by rng. Files
// gone since (deleted segments) are skipped. It returns what it did to
// each damaged file.
func Apply(path string, rng *rand.Rand) ([]Damage, error) {
	durable, order, err := read(path)
	if os.IsNotExist(err) {
		return nil, nil // nothing was written through the ring
	}
	if err != nil {
		return nil, err
	}
	var out []Damage
	for _, file := range order {
		d, err := cut(file, durable[file], rng)
		if err != nil {
			return out, err
		}
		if d != nil {
			out = append(out, *d)
		}
	}
	// What is on disk now survived the cut: the next process starts
	// from it.
	if err := os.Truncate(path, 0); err != nil {
		return out, fmt.Errorf("powerloss journal: %w", err)
	}
	return out, nil
}

// read returns the last durable length the journal at path records for
// each file, and the files in the order they first appear.
func read(path string) (map[string]int64, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	durable := map[string]int64{}
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "durable ")
		if !ok {
			continue
		}
		num, file, ok := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || n < 0 || file == "" {
			return nil, nil, fmt.Errorf("powerloss journal %s: bad line %q", path, sc.Text())
		}
		if _, ok := durable[file]; !ok {
			order = append(order, file)
		}
		durable[file] = n
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("powerloss journal %s: %w", path, err)
	}
	return durable, order, nil
}

// pageSize is the unit of the Holes mode.
const pageSize = 4096

func cut(file string, durable int64, rng *rand.Rand) (_ *Damage, err error) {
	fi, err := os.Stat(file)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	if size <= durable {
		return nil, nil // nothing unsynced (or truncated since)
	}
	d := &Damage{Path: file, Durable: durable, Size: size, Mode: Mode(rng.IntN(3))}
	switch d.Mode {
	case Drop:
		d.Lost = size - durable
		return d, os.Truncate(file, durable)
	case Torn:
		keep := rng.Int64N(size - durable)
		d.Lost = size - durable - keep
		return d, os.Truncate(file, durable+keep)
	}
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", file, cerr)
		}
	}()
	zeros := make([]byte, pageSize)
	for page := durable / pageSize * pageSize; page < size; page += pageSize {
		if rng.IntN(2) == 0 {
			continue
		}
		from, to := max(page, durable), min(page+pageSize, size)
		if _, err := f.WriteAt(zeros[:to-from], from); err != nil {
			return nil, err
		}
		d.Lost += to - from
	}
	return d, nil
}
