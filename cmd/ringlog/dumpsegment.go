package main

// ringlog dump-segment: print and verify segment (.log) files and their
// offset (.index) and time (.timeindex) indexes, offline. The formats are
// in wal/doc.go; batches are checked with wal/batch.

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ringlog/ringlog/internal/cli"
	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

const dumpSegmentUsage = `
Usage: ringlog dump-segment FILE... [flags]

Prints every record batch of a segment file (<data-dir>/<topic>-<partition>/
<base offset>.log) and verifies it: framing, magic, CRC32C, the records
inside, and that offsets increase. With --records it also prints each
record. It reads the files only, so it works without (and beside) a
running broker.

An offset index (.index) or time index (.timeindex) is printed entry by
entry and checked for order; when its .log is beside it, every entry is
also checked against the batch it names.

Batch fields: base and last offset, record count, size in bytes, position
in the file, compression codec, timestamp type, first and max timestamps
(Unix ms), producer id / epoch / base sequence (-1: not idempotent), leader
epoch, and the CRC check (ok or BAD).
`

const dumpSegmentExamples = `
Examples:
  ringlog dump-segment data/orders-0/00000000000000000000.log
  ringlog dump-segment --records data/orders-0/00000000000000000000.log
  ringlog dump-segment data/orders-0/*.index data/orders-0/*.timeindex

Exit status: 0 when every file is sound, 1 when a batch is corrupt, the
file ends in a torn batch, an index is inconsistent, or a file cannot be
read (each problem is reported with its position), 2 usage.
`

func runDumpSegment(args []string, stdout, stderr io.Writer) error {
	var records bool
	fs := cli.NewFlagSet("dump-segment", dumpSegmentUsage, dumpSegmentExamples, stdout)
	fs.BoolVar(&records, "records", false, "also print every record (offset, timestamp, key, value, headers)")
	files, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return cli.Usagef("dump-segment: give one or more .log, .index or .timeindex files")
	}
	var errs []error
	for i, path := range files {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		d := &dumper{w: stdout, path: path, records: records}
		var err error
		switch {
		case strings.HasSuffix(path, ".timeindex"):
			err = d.timeIndex()
		case strings.HasSuffix(path, ".index"):
			err = d.offsetIndex()
		default:
			err = d.segment()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		if len(d.problems) > 0 {
			shown := d.problems[:min(len(d.problems), 3)]
			more := ""
			if n := len(d.problems) - len(shown); n > 0 {
				more = fmt.Sprintf("; and %d more (see above)", n)
			}
			errs = append(errs, fmt.Errorf("%s: %s: %s%s", path, plural(len(d.problems), "problem", "problems"), strings.Join(shown, "; "), more))
		}
	}
	return errors.Join(errs...)
}

type dumper struct {
	w        io.Writer
	path     string
	records  bool
	problems []string
}

func (d *dumper) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.problems = append(d.problems, msg)
	fmt.Fprintf(d.w, "PROBLEM: %s\n", msg)
}

// nameBase is the base offset in a file name such as
// 00000000000000000042.log, ok false if the name is not one.
func nameBase(path string) (int64, bool) {
	name := filepath.Base(path)
	if i := strings.IndexByte(name, '.'); i >= 0 {
		name = name[:i]
	}
	if len(name) != 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(name, 10, 64)
	return v, err == nil
}

func fmtTime(ms int64) string {
	if ms < 0 {
		return strconv.FormatInt(ms, 10)
	}
	return fmt.Sprintf("%d (%s)", ms, time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z"))
}

// printable renders bytes for a person: quoted when printable text, hex
// otherwise, null for nil.
func printable(b []byte) string {
	if b == nil {
		return "null"
	}
	if utf8.Valid(b) {
		ok := true
		for _, r := range string(b) {
			if !unicode.IsPrint(r) && r != ' ' && r != '\t' {
				ok = false
				break
			}
		}
		if ok {
			return strconv.Quote(string(b))
		}
	}
	return "hex:" + hex.EncodeToString(b)
}

// magicPos is where a stored batch keeps its magic (format version) byte:
// after base offset (8), length (4) and leader epoch (4).
const magicPos = 16

// notSegment says why a file whose first bytes are head cannot be a
// segment, or "" when it may be one (a file of zeros, such as a
// preallocated or torn one, is reported by the batch walk).
func notSegment(f *os.File, head []byte, size int64) string {
	if zero, err := allZero(f, 0, size); err == nil && zero {
		return ""
	}
	if len(head) <= magicPos {
		return ""
	}
	if m := int8(head[magicPos]); m != batch.Magic {
		return fmt.Sprintf("its first batch would have magic (format version) %d, and every batch of a segment has magic %d", m, batch.Magic)
	}
	if l := batch.BatchLength(head); l < batch.HeaderSize-batch.LogOverhead {
		return fmt.Sprintf("its first batch would be %d bytes long, less than a batch header", l)
	}
	return ""
}

// batchInfo is a batch found by a header walk, for checking indexes.
type batchInfo struct {
	base, maxTs int64
	pos         int64
}

// segment dumps and verifies a .log file.
func (d *dumper) segment() error {
	f, err := os.Open(d.path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("is a directory: give the segment files in it (e.g. %s)", filepath.Join(d.path, "*.log"))
	}
	size := st.Size()
	base, named := nameBase(d.path)
	fmt.Fprintf(d.w, "Segment %s: %s", d.path, plural(int(size), "byte", "bytes"))
	if named {
		fmt.Fprintf(d.w, ", base offset %d (from the name)", base)
	}
	fmt.Fprintln(d.w)

	var (
		pos                     int64
		buf, scratch            []byte
		batches, records, bad   int
		first, last, nextOffset int64 = -1, -1, -1
	)
	for pos < size {
		left := size - pos
		if wal.IsDirectPadding(f, pos, size) {
			fmt.Fprintf(d.w, "padding at position %d: the last %s are zeros to the end of a 4 KiB block, as a broker writing with --direct-writes leaves after the data of its active segment (and a crash leaves; recovery drops it)\n",
				pos, plural(int(left), "byte", "bytes"))
			break
		}
		if left < batch.LogOverhead {
			d.problem("torn batch at position %d: the file ends %s into a batch (fewer than the %d bytes of its offset and length)",
				pos, plural(int(left), "byte", "bytes"), batch.LogOverhead)
			break
		}
		var head [batch.HeaderSize]byte
		n := min(left, int64(len(head)))
		if _, err := f.ReadAt(head[:n], pos); err != nil {
			return fmt.Errorf("read at %d: %w", pos, err)
		}
		length := int64(batch.BatchLength(head[:]))
		total := length + batch.LogOverhead
		if pos == 0 {
			if why := notSegment(f, head[:n], size); why != "" {
				hint := ""
				if !named {
					hint = " (segment files are named <20-digit base offset>.log)"
				}
				return fmt.Errorf("not a segment file: %s%s", why, hint)
			}
		}
		if length < batch.HeaderSize-batch.LogOverhead {
			if zero, err := allZero(f, pos, size); err == nil && zero {
				d.problem("torn write at position %d: the last %s of the file are zeros, not batches", pos, plural(int(left), "byte", "bytes"))
			} else {
				d.problem("corrupt batch at position %d: batch length %d is too small for a batch header; nothing after it can be framed", pos, length)
			}
			break
		}
		if total > left {
			what := "batch"
			if n == batch.HeaderSize {
				if h, err := batch.ParseHeader(head[:]); err == nil && h.Magic == batch.Magic {
					what = fmt.Sprintf("batch (offsets %d-%d)", h.BaseOffset, h.LastOffset())
				}
			}
			d.problem("torn %s at position %d: it needs %d bytes but the file ends after %d (a write cut short, or a damaged length field)",
				what, pos, total, left)
			break
		}
		if int64(cap(buf)) < total {
			buf = make([]byte, total)
		}
		buf = buf[:total]
		if _, err := f.ReadAt(buf, pos); err != nil {
			return fmt.Errorf("read at %d: %w", pos, err)
		}
		h, cerr := batch.CheckStored(buf)
		batches++
		crc := "ok"
		if cerr != nil {
			crc = "BAD"
		}
		tsType := "create"
		if h.LogAppendTime() {
			tsType = "log-append"
		}
		fmt.Fprintf(d.w, "batch base=%d last=%d count=%d size=%d position=%d codec=%s ts_type=%s first_ts=%s max_ts=%s producer_id=%d producer_epoch=%d base_seq=%d leader_epoch=%d",
			h.BaseOffset, h.LastOffset(), h.RecordCount, total, pos, h.Codec(), tsType, fmtTime(h.BaseTimestamp), fmtTime(h.MaxTimestamp),
			h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.LeaderEpoch)
		if h.Transactional() {
			fmt.Fprint(d.w, " transactional")
		}
		if h.Control() {
			fmt.Fprint(d.w, " control")
		}
		fmt.Fprintf(d.w, " crc=%s\n", crc)
		if cerr != nil {
			bad++
			d.problem("corrupt batch at position %d (offsets %d-%d, %d bytes): %v", pos, h.BaseOffset, h.LastOffset(), total, cerr)
			pos += total
			continue
		}
		if nextOffset >= 0 && h.BaseOffset < nextOffset {
			d.problem("batch at position %d starts at offset %d, before the end of the previous batch (%d): offsets must increase", pos, h.BaseOffset, nextOffset)
		}
		if batches == 1 && named && h.BaseOffset < base {
			d.problem("first batch starts at offset %d, below the segment's base offset %d", h.BaseOffset, base)
		}
		if first < 0 {
			first = h.BaseOffset
		}
		last, nextOffset = h.LastOffset(), h.NextOffset()
		var it batch.Iter
		it, scratch, err = batch.Records(buf, &h, scratch)
		if err != nil {
			d.problem("batch at position %d (offsets %d-%d): cannot read its records: %v", pos, h.BaseOffset, h.LastOffset(), err)
			pos += total
			continue
		}
		got := 0
		for r := range it.All() {
			got++
			if d.records {
				d.printRecord(&h, &r)
			}
		}
		if err := it.Err(); err != nil {
			d.problem("batch at position %d (offsets %d-%d): record %d: %v", pos, h.BaseOffset, h.LastOffset(), got, err)
		}
		records += got
		pos += total
	}
	fmt.Fprintf(d.w, "Summary: %s, %s", plural(batches, "batch", "batches"), plural(records, "record", "records"))
	if first >= 0 {
		fmt.Fprintf(d.w, ", offsets %d-%d", first, last)
	}
	if bad > 0 {
		fmt.Fprintf(d.w, ", %d with a BAD CRC", bad)
	}
	if len(d.problems) == 0 {
		fmt.Fprint(d.w, ", every CRC ok")
	}
	fmt.Fprintln(d.w)
	return nil
}

func (d *dumper) printRecord(h *batch.Header, r *batch.Record) {
	fmt.Fprintf(d.w, "  record offset=%d timestamp=%s key=%s value=%s", h.BaseOffset+int64(r.OffsetDelta),
		fmtTime(h.BaseTimestamp+r.TimestampDelta), printable(r.Key), printable(r.Value))
	hs, err := r.Headers()
	if err != nil {
		fmt.Fprintf(d.w, " headers=(unreadable: %v)\n", err)
		return
	}
	if len(hs) > 0 {
		parts := make([]string, len(hs))
		for i, hh := range hs {
			parts[i] = printable([]byte(hh.Key)) + "=" + printable(hh.Value)
		}
		fmt.Fprintf(d.w, " headers=[%s]", strings.Join(parts, " "))
	}
	fmt.Fprintln(d.w)
}

// allZero reports whether f holds only zero bytes from pos to size.
func allZero(f *os.File, pos, size int64) (bool, error) {
	buf := make([]byte, 64<<10)
	for pos < size {
		n := min(int64(len(buf)), size-pos)
		if _, err := f.ReadAt(buf[:n], pos); err != nil {
			return false, err
		}
		for _, c := range buf[:n] {
			if c != 0 {
				return false, nil
			}
		}
		pos += n
	}
	return true, nil
}

// logBatches walks the batch headers of the .log beside an index, for
// checking the index against it. ok false when there is no such log.
func logBatches(indexPath string) (map[int64]batchInfo, map[int64]batchInfo, string, bool) {
	logPath := strings.TrimSuffix(strings.TrimSuffix(indexPath, ".timeindex"), ".index") + ".log"
	f, err := os.Open(logPath)
	if err != nil {
		return nil, nil, "", false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, "", false
	}
	byBase, byPos := map[int64]batchInfo{}, map[int64]batchInfo{}
	var head [batch.HeaderSize]byte
	for pos := int64(0); pos+batch.HeaderSize <= st.Size(); {
		if _, err := f.ReadAt(head[:], pos); err != nil {
			break
		}
		h, err := batch.ParseHeader(head[:])
		if err != nil || h.Magic != batch.Magic || h.Length < batch.HeaderSize-batch.LogOverhead || pos+int64(h.Size()) > st.Size() {
			break
		}
		bi := batchInfo{base: h.BaseOffset, maxTs: h.MaxTimestamp, pos: pos}
		byBase[h.BaseOffset], byPos[pos] = bi, bi
		pos += int64(h.Size())
	}
	return byBase, byPos, logPath, true
}

// readEntries reads an index file whole and reports a partial last entry.
func (d *dumper) readEntries(entrySize int) ([]byte, int64, bool, error) {
	data, err := os.ReadFile(d.path)
	if err != nil {
		return nil, 0, false, err
	}
	base, named := nameBase(d.path)
	if rem := len(data) % entrySize; rem != 0 {
		d.problem("the file's %d bytes are not a whole number of %d-byte entries: %d bytes left over at the end", len(data), entrySize, rem)
		data = data[:len(data)-rem]
	}
	return data, base, named, nil
}

// offsetIndex dumps and checks a .index file.
func (d *dumper) offsetIndex() error {
	const entrySize = 8
	data, base, err := d.indexEntries("Offset index", ".index", entrySize)
	if err != nil {
		return err
	}
	_, byPos, logPath, haveLog := logBatches(d.path)
	n := len(data) / entrySize
	used := n
	prevRel, prevPos := int64(-1), int64(-1)
	for i := 0; i < n; i++ {
		e := data[i*entrySize:]
		rel, pos := int64(binary.BigEndian.Uint32(e)), int64(binary.BigEndian.Uint32(e[4:]))
		if i > 0 && rel == 0 && pos == 0 {
			used = i
			break
		}
		fmt.Fprintf(d.w, "entry %d: offset=%d (+%d) position=%d\n", i, base+rel, rel, pos)
		if i > 0 && (rel <= prevRel || pos <= prevPos) {
			d.problem("entry %d (+%d at %d) does not follow entry %d (+%d at %d): offsets and positions must increase", i, rel, pos, i-1, prevRel, prevPos)
		}
		if haveLog {
			if bi, ok := byPos[pos]; !ok {
				d.problem("entry %d: no batch starts at position %d of %s", i, pos, logPath)
			} else if bi.base != base+rel {
				d.problem("entry %d: the batch at position %d starts at offset %d, not %d", i, pos, bi.base, base+rel)
			}
		}
		prevRel, prevPos = rel, pos
	}
	d.indexSummary(data[used*entrySize:], entrySize, used, haveLog, logPath)
	return nil
}

// timeIndex dumps and checks a .timeindex file.
func (d *dumper) timeIndex() error {
	const entrySize = 12
	data, base, err := d.indexEntries("Time index", ".timeindex", entrySize)
	if err != nil {
		return err
	}
	byBase, _, logPath, haveLog := logBatches(d.path)
	n := len(data) / entrySize
	used := n
	prevTs, prevRel := int64(0), int64(-1)
	for i := 0; i < n; i++ {
		e := data[i*entrySize:]
		ts, rel := int64(binary.BigEndian.Uint64(e)), int64(binary.BigEndian.Uint32(e[8:]))
		if i > 0 && ts == 0 && rel == 0 {
			used = i
			break
		}
		fmt.Fprintf(d.w, "entry %d: timestamp=%s offset=%d (+%d)\n", i, fmtTime(ts), base+rel, rel)
		if i > 0 && (ts <= prevTs || rel < prevRel) {
			d.problem("entry %d (%d, +%d) does not follow entry %d (%d, +%d): timestamps must increase", i, ts, rel, i-1, prevTs, prevRel)
		}
		if haveLog {
			if bi, ok := byBase[base+rel]; !ok {
				d.problem("entry %d: no batch of %s starts at offset %d", i, logPath, base+rel)
			} else if bi.maxTs != ts {
				d.problem("entry %d: the batch at offset %d has max timestamp %d, not %d", i, base+rel, bi.maxTs, ts)
			}
		}
		prevTs, prevRel = ts, rel
	}
	d.indexSummary(data[used*entrySize:], entrySize, used, haveLog, logPath)
	return nil
}

// indexEntries prints the heading of an index file's dump (kind, its
// file name ending in ext) and reads its entries.
func (d *dumper) indexEntries(kind, ext string, entrySize int) (data []byte, base int64, err error) {
	fmt.Fprintf(d.w, "%s %s\n", kind, d.path)
	data, base, named, err := d.readEntries(entrySize)
	if err != nil {
		return nil, 0, err
	}
	if !named {
		fmt.Fprintf(d.w, "(the name is not <20-digit base offset>%s: offsets shown relative to 0)\n", ext)
	}
	return data, base, nil
}

// indexSummary ends an index file's dump: the entries past the used
// ones (rest), and how many were in use, checked against logPath when
// haveLog.
func (d *dumper) indexSummary(rest []byte, entrySize, used int, haveLog bool, logPath string) {
	d.unused(rest, entrySize, used)
	fmt.Fprintf(d.w, "Summary: %s", plural(used, "entry", "entries"))
	if haveLog {
		fmt.Fprintf(d.w, ", checked against %s", logPath)
	}
	fmt.Fprintln(d.w)
}

// unused reports the zero entries after the last one in use (an active
// segment's index is preallocated) and any data hiding among them.
func (d *dumper) unused(rest []byte, entrySize, used int) {
	if len(rest) == 0 {
		return
	}
	for i, c := range rest {
		if c != 0 {
			d.problem("entry %d is not in use (zero) but entry %d after it is", used, used+i/entrySize)
			return
		}
	}
	fmt.Fprintf(d.w, "(%s preallocated and unused)\n", plural(len(rest)/entrySize, "more entry", "more entries"))
}
