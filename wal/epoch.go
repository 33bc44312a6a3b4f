package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ringlog/ringlog/wal/batch"
)

// Leader epochs (KIP-101, KIP-279).
//
// Every batch carries the leader epoch of the leader that first appended
// it (partitionLeaderEpoch). Along a log the epochs never decrease, so the
// log is described by a short list of (epoch, start offset) entries: the
// epoch cache. A follower uses it to find where its log diverges from the
// leader's (EndOffsetForEpoch), and it is persisted next to the segments
// as Kafka's leader-epoch-checkpoint file (see doc.go for the format).
//
// The committed list is immutable and published through an atomic
// pointer, so any goroutine can answer OffsetForLeaderEpoch; the owner
// replaces it when a commit starts a new epoch, on truncation, reset, a
// new leader epoch and retention. pEpochs is the owner's projection
// including staged, not yet committed, batches.
//
// Persistence is lazy for changes that the batch headers can reproduce
// (appends, retention): the file is written before the recovery point
// advances past them (background flush of a rolled segment, Close), so
// after a crash the entries below the recovery point come from the file
// and those above it from the headers that recovery rescans anyway.
// Changes the headers cannot reproduce (StartLeaderEpoch, TruncateTo,
// ResetTo) are written synchronously before they take effect.

// EpochEntry says that leader epoch Epoch starts at StartOffset: the
// batches from StartOffset up to the next entry's StartOffset (or the log
// end) carry Epoch.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// UndefinedEpoch and UndefinedEpochOffset are Kafka's answers for an epoch
// the log cannot place (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
const (
	UndefinedEpoch       int32 = -1
	UndefinedEpochOffset int64 = -1
)

// ErrEpochOrder is returned for an append that would put a batch of a
// lower leader epoch after data of a higher one, and for a
// StartLeaderEpoch below the log's latest epoch.
var ErrEpochOrder = errors.New("wal: leader epochs would go backwards")

const epochCheckpointFile = "leader-epoch-checkpoint"

// assignEpoch returns entries with epoch e starting at offset s, for a
// log whose data ends at end (end <= s): s is the base of the first batch
// of e, or end itself for a leader that has not appended yet. Entries
// starting at or after end cover no data (a leader's entry before its
// first batch) and are superseded. Data of a higher epoch is an error.
// So the cache is always the epochs of the batches themselves plus at most
// one data-less entry at the log end, which is what recovery rebuilds.
// A negative e (a batch without an epoch, old formats) adds nothing but
// still supersedes a data-less entry. The input is never modified; a
// changed result is a fresh slice.
func assignEpoch(entries []EpochEntry, e int32, s, end int64) ([]EpochEntry, bool, error) {
	n := len(entries)
	if n > 0 && entries[n-1] == (EpochEntry{Epoch: e, StartOffset: s}) {
		return entries, false, nil
	}
	k := n
	for k > 0 && entries[k-1].StartOffset >= end {
		k--
	}
	if e < 0 {
		if k == n {
			return entries, false, nil
		}
		return slices.Clone(entries[:k]), true, nil
	}
	if k > 0 && entries[k-1].Epoch > e {
		return entries, false, fmt.Errorf("%w: epoch %d at offset %d after epoch %d, which starts at %d",
			ErrEpochOrder, e, s, entries[k-1].Epoch, entries[k-1].StartOffset)
	}
	if k == n && k > 0 && entries[k-1].Epoch == e {
		return entries, false, nil
	}
	out := make([]EpochEntry, k, k+1)
	copy(out, entries[:k])
	if k == 0 || out[k-1].Epoch != e {
		out = append(out, EpochEntry{Epoch: e, StartOffset: s})
	}
	return out, true, nil
}

// truncateEpochsFromEnd drops the entries starting at or after off.
func truncateEpochsFromEnd(entries []EpochEntry, off int64) ([]EpochEntry, bool) {
	k := len(entries)
	for k > 0 && entries[k-1].StartOffset >= off {
		k--
	}
	if k == len(entries) {
		return entries, false
	}
	return slices.Clone(entries[:k]), true
}

// truncateEpochsFromStart drops the entries that only cover offsets below
// start and moves the one covering start to start.
func truncateEpochsFromStart(entries []EpochEntry, start int64) ([]EpochEntry, bool) {
	k := 0
	for k+1 < len(entries) && entries[k+1].StartOffset <= start {
		k++
	}
	if len(entries) == 0 || k == 0 && entries[0].StartOffset >= start {
		return entries, false
	}
	out := slices.Clone(entries[k:])
	out[0].StartOffset = max(out[0].StartOffset, start)
	return out, true
}

// endOffsetForEpoch answers OffsetForLeaderEpoch (KIP-101/279) from
// entries and the log end leo.
func endOffsetForEpoch(entries []EpochEntry, req int32, leo int64) (int32, int64) {
	n := len(entries)
	if req < 0 || n == 0 || req > entries[n-1].Epoch {
		return UndefinedEpoch, UndefinedEpochOffset
	}
	if req == entries[n-1].Epoch {
		return req, leo
	}
	i := sort.Search(n, func(i int) bool { return entries[i].Epoch > req })
	if i == 0 {
		// Older than anything the log still holds: the data of req, if
		// any, is gone; the follower truncates to where the log's first
		// known epoch starts.
		return req, entries[0].StartOffset
	}
	return entries[i-1].Epoch, entries[i].StartOffset
}

// encodeEpochCheckpoint renders entries in Kafka's checkpoint format.
func encodeEpochCheckpoint(entries []EpochEntry) []byte {
	b := make([]byte, 0, 8+len(entries)*16)
	b = append(b, "0\n"...)
	b = strconv.AppendInt(b, int64(len(entries)), 10)
	b = append(b, '\n')
	for _, e := range entries {
		b = strconv.AppendInt(b, int64(e.Epoch), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, e.StartOffset, 10)
		b = append(b, '\n')
	}
	return b
}

// maxCheckpointBytes bounds what parseEpochCheckpoint reads.
const maxCheckpointBytes = 16 << 20

// parseEpochCheckpoint decodes a leader-epoch-checkpoint file: version 0,
// the entry count, then one "epoch startOffset" line per entry, epochs and
// offsets non-negative and strictly increasing.
func parseEpochCheckpoint(b []byte) ([]EpochEntry, error) {
	if len(b) > maxCheckpointBytes {
		return nil, fmt.Errorf("%d bytes is too large", len(b))
	}
	text, ok := strings.CutSuffix(string(b), "\n")
	if !ok {
		return nil, errors.New("does not end with a newline")
	}
	lines := strings.Split(text, "\n")
	if len(lines) < 2 {
		return nil, errors.New("lacks the version and count lines")
	}
	if strings.TrimSpace(lines[0]) != "0" {
		return nil, fmt.Errorf("unsupported version %q", lines[0])
	}
	count, err := strconv.Atoi(strings.TrimSpace(lines[1]))
	if err != nil || count < 0 {
		return nil, fmt.Errorf("bad entry count %q", lines[1])
	}
	if count != len(lines)-2 {
		return nil, fmt.Errorf("entry count %d, but %d entry lines", count, len(lines)-2)
	}
	entries := make([]EpochEntry, 0, count)
	for i, line := range lines[2:] {
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("entry %d: %q is not \"epoch offset\"", i, line)
		}
		e, err1 := strconv.ParseInt(f[0], 10, 32)
		s, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || e < 0 || s < 0 {
			return nil, fmt.Errorf("entry %d: bad epoch or offset in %q", i, line)
		}
		if n := len(entries); n > 0 && (int32(e) <= entries[n-1].Epoch || s <= entries[n-1].StartOffset) {
			return nil, fmt.Errorf("entry %d: %q does not follow epoch %d at %d", i, line, entries[n-1].Epoch, entries[n-1].StartOffset)
		}
		entries = append(entries, EpochEntry{Epoch: int32(e), StartOffset: s})
	}
	return entries, nil
}

// readEpochCheckpoint reads dir's checkpoint: (nil, nil) when there is
// none.
func readEpochCheckpoint(dir string) ([]EpochEntry, error) {
	f, err := os.Open(filepath.Join(dir, epochCheckpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCheckpointBytes+1))
	if err != nil {
		return nil, err
	}
	e, err := parseEpochCheckpoint(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", epochCheckpointFile, err)
	}
	return e, nil
}

// epochList is the committed epoch cache (immutable).
func (l *Log) epochList() []EpochEntry {
	if p := l.epochs.Load(); p != nil {
		return *p
	}
	return nil
}

// LatestEpoch is the highest leader epoch in the epoch cache, or
// UndefinedEpoch when it is empty (any goroutine). A follower sends it as
// LastFetchedEpoch.
func (l *Log) LatestEpoch() int32 {
	e := l.epochList()
	if len(e) == 0 {
		return UndefinedEpoch
	}
	return e[len(e)-1].Epoch
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch and Fetch's divergence
// check for epoch (any goroutine), with Kafka's semantics (KIP-101/279):
//
//   - epoch is the latest epoch: (epoch, log end offset);
//   - an older epoch: the largest epoch at most epoch that the cache
//     holds, and the start offset of the next higher epoch in the cache
//     (where the data of the requested epoch ends);
//   - older than every cached epoch: (epoch, start of the first cached
//     epoch);
//   - newer than the latest, negative, or an empty cache:
//     (UndefinedEpoch, UndefinedEpochOffset).
func (l *Log) EndOffsetForEpoch(epoch int32) (int32, int64) {
	leo := l.end.Load() // before the list: an entry is published before the end moves past it
	return endOffsetForEpoch(l.epochList(), epoch, leo)
}

// EpochEntries returns a copy of the epoch cache, oldest first (tests,
// debugging).
func (l *Log) EpochEntries() []EpochEntry { return slices.Clone(l.epochList()) }

// StartLeaderEpoch makes this log's replica the leader of epoch (owner
// only, nothing staged): the cache records that epoch starts at the log
// end, durably, before the call returns (so a later leader of a higher
// epoch can tell where this one began, apache/kafka#5678), and appends
// stamp epoch into their batches from now on. epoch must not be below the
// latest cached epoch; the same epoch again only sets the stamp.
func (l *Log) StartLeaderEpoch(epoch int32) error {
	if err := l.checkQuiet("start leader epoch"); err != nil {
		return err
	}
	if epoch < 0 {
		return fmt.Errorf("wal: %s: leader epoch %d is negative", l.dir, epoch)
	}
	cur := l.epochList()
	if n := len(cur); n > 0 && cur[n-1].Epoch >= epoch {
		if cur[n-1].Epoch > epoch {
			return fmt.Errorf("%w: leader epoch %d is below the log's latest epoch %d", ErrEpochOrder, epoch, cur[n-1].Epoch)
		}
		l.opts.LeaderEpoch = epoch
		return nil
	}
	end := l.end.Load()
	next, _, err := assignEpoch(cur, epoch, end, end)
	if err != nil {
		return err
	}
	if err := l.replaceEpochsDurably(next); err != nil {
		return err
	}
	l.opts.LeaderEpoch = epoch
	return nil
}

// checkQuiet refuses an owner operation on a closed or failed log, or one
// with appends staged but not submitted.
func (l *Log) checkQuiet(what string) error {
	switch {
	case l.closed:
		return ErrClosed
	case l.failed != nil:
		return l.failed
	case l.next != l.end.Load():
		return fmt.Errorf("wal: %s: %s with appends staged but not submitted", l.dir, what)
	}
	return nil
}

// publishEpochs makes entries the committed cache (owner only); the file
// follows lazily.
func (l *Log) publishEpochs(entries []EpochEntry) {
	l.epochs.Store(&entries)
	l.epochVer++
}

// replaceEpochsDurably writes entries to the checkpoint and then makes
// them the committed and projected cache (owner only, nothing staged).
func (l *Log) replaceEpochsDurably(entries []EpochEntry) error {
	ver := l.epochVer + 1
	if err := l.persistEpochs(entries, ver); err != nil {
		return err
	}
	l.epochs.Store(&entries)
	l.epochVer = ver
	l.pEpochs = entries
	return nil
}

// persistEpochs writes version ver of the cache unless the file already
// holds that version or a newer one (any goroutine).
func (l *Log) persistEpochs(entries []EpochEntry, ver uint64) error {
	l.ckMu.Lock()
	defer l.ckMu.Unlock()
	if ver <= l.ckVer {
		return nil
	}
	if err := writeFileDurable(filepath.Join(l.dir, epochCheckpointFile), encodeEpochCheckpoint(entries), l.perm); err != nil {
		return fmt.Errorf("wal: %s: leader epoch checkpoint: %w", l.dir, err)
	}
	l.ckVer = ver
	return nil
}

// trimEpochsFromStart follows a log start that moved forward (owner only).
func (l *Log) trimEpochsFromStart(start int64) {
	if next, ok := truncateEpochsFromStart(l.epochList(), start); ok {
		l.publishEpochs(next)
	}
	l.pEpochs, _ = truncateEpochsFromStart(l.pEpochs, start)
}

// loadEpochs builds the epoch cache at open, once the segments are loaded
// (see the package doc). Entries of the checkpoint below trustedEnd (the
// first offset recovery rescanned, or the log end after a clean shutdown)
// are kept once they agree with the batches they name; the rest comes from
// the batch headers, found by bisecting the sparse index (epochs never
// decrease along the log), so a rebuild reads a few headers per segment
// plus a short walk per epoch change. A checkpoint entry starting exactly
// at the log end (a leader that had not appended yet) is kept.
func (l *Log) loadEpochs(trustedEnd int64) error {
	start, leo := l.start.Load(), l.end.Load()
	ck, err := readEpochCheckpoint(l.dir)
	reason := ""
	switch {
	case err != nil:
		reason = err.Error()
	case ck == nil:
		reason = "no checkpoint"
	}
	from := min(trustedEnd, leo)
	var pre []EpochEntry
	if reason == "" {
		for _, e := range ck {
			if e.StartOffset < from {
				pre = append(pre, e)
			}
		}
		pre, _ = truncateEpochsFromStart(pre, start)
		if reason, err = l.checkEpochs(pre, from); err != nil {
			return err
		}
	}
	if reason != "" && from > start {
		l.logger.Info("rebuilding the leader epoch cache from batch headers", "reason", reason)
		pre, from = nil, start
	}
	entries, err := l.epochsFrom(pre, from)
	if errors.Is(err, ErrEpochOrder) && from > start {
		l.logger.Warn("leader epoch checkpoint disagrees with the log; rebuilding from batch headers", "err", err)
		entries, err = l.epochsFrom(nil, start)
	}
	if err != nil {
		return err
	}
	for i := len(ck) - 1; i >= 0; i-- {
		if e := ck[i]; e.StartOffset == leo {
			if n := len(entries); n == 0 || entries[n-1].Epoch < e.Epoch {
				entries = append(slices.Clone(entries), e)
			}
			break
		}
	}
	l.epochs.Store(&entries)
	l.pEpochs = entries
	l.epochVer, l.ckVer = 0, 0
	if !slices.Equal(entries, ck) {
		l.epochVer = 1 // written lazily, like any other change
	}
	return nil
}

// epochsFrom extends pre with the epoch starts found in the batch headers
// from offset from to the log end. Non-monotonic epochs in the log itself
// (which ringlog never writes) are accepted the way Kafka's cache does:
// a lower epoch replaces the entries of higher ones.
func (l *Log) epochsFrom(pre []EpochEntry, from int64) ([]EpochEntry, error) {
	runs, err := l.scanEpochStarts(from)
	if err != nil {
		return nil, err
	}
	entries := pre
	for _, r := range runs {
		next, _, err := assignEpoch(entries, r.Epoch, r.StartOffset, r.StartOffset)
		if err != nil {
			if len(pre) > 0 {
				return nil, err
			}
			l.logger.Warn("leader epochs decrease in the log", "err", err)
			k := len(entries)
			for k > 0 && entries[k-1].Epoch >= r.Epoch {
				k--
			}
			next = append(slices.Clone(entries[:k]), r)
		}
		entries = next
	}
	return entries, nil
}

// checkEpochs returns why entries (from the checkpoint, all starting below
// from) cannot describe the log below from, or "". It reads a few headers:
// the log's first batch (some entry covers it), for each entry its first
// batch (it carries the entry's epoch and starts at or after the entry)
// and the batch before that (a lower epoch), and the last batch below from
// (its epoch is the one the entries give it).
func (l *Log) checkEpochs(entries []EpochEntry, from int64) (string, error) {
	for i := 1; i < len(entries); i++ {
		if entries[i].Epoch <= entries[i-1].Epoch || entries[i].StartOffset <= entries[i-1].StartOffset {
			return "entries do not increase", nil
		}
	}
	h, ok, err := l.batchAtOrAfter(l.start.Load())
	if err != nil {
		return "", err
	}
	if ok && h.BaseOffset < from && h.LeaderEpoch >= 0 && (len(entries) == 0 || entries[0].StartOffset > h.BaseOffset) {
		return fmt.Sprintf("no entry covers the first batch at %d", h.BaseOffset), nil
	}
	for i, e := range entries {
		limit := from
		if i+1 < len(entries) {
			limit = entries[i+1].StartOffset
		}
		// The epoch's first batch (the first at or after its start; none
		// when compaction removed them all) carries it, starts at or
		// after the entry, and follows a batch of a lower epoch.
		h, ok, err := l.batchAtOrAfter(e.StartOffset)
		if err != nil {
			return "", err
		}
		if !ok || h.BaseOffset >= limit || h.LeaderEpoch < 0 {
			continue
		}
		if h.LeaderEpoch != e.Epoch || h.BaseOffset < e.StartOffset {
			return fmt.Sprintf("entry (%d, %d) but the batch at %d has epoch %d", e.Epoch, e.StartOffset, h.BaseOffset, h.LeaderEpoch), nil
		}
		p, ok, err := l.lastBatchBefore(h.BaseOffset)
		if err != nil {
			return "", err
		}
		if ok && p.LeaderEpoch >= e.Epoch {
			return fmt.Sprintf("entry (%d, %d) but the batch at %d before it has epoch %d", e.Epoch, e.StartOffset, p.BaseOffset, p.LeaderEpoch), nil
		}
	}
	h, ok, err = l.lastBatchBefore(from)
	if err != nil {
		return "", err
	}
	if ok && h.LeaderEpoch >= 0 {
		i := sort.Search(len(entries), func(i int) bool { return entries[i].StartOffset > h.BaseOffset })
		if i == 0 || entries[i-1].Epoch != h.LeaderEpoch {
			return fmt.Sprintf("the batch at %d has epoch %d, not in the checkpoint", h.BaseOffset, h.LeaderEpoch), nil
		}
	}
	return "", nil
}

// batchAtOrAfter returns the header of the first batch holding an offset
// at or after off (owner, or at open).
func (l *Log) batchAtOrAfter(off int64) (batch.Header, bool, error) {
	i := max(l.segmentForLocked(off), 0)
	for _, s := range l.segs[i:] {
		size := s.size.Load()
		if size == 0 || s.end.Load() <= off {
			continue
		}
		_, h, err := s.findBatch(off, size)
		if errors.Is(err, io.EOF) {
			continue
		}
		return h, err == nil, err
	}
	return batch.Header{}, false, nil
}

// lastBatchBefore returns the header of the last batch whose base offset
// is below off, walking only the tail of one segment (owner, or at open).
func (l *Log) lastBatchBefore(off int64) (batch.Header, bool, error) {
	for i := len(l.segs) - 1; i >= 0; i-- {
		s := l.segs[i]
		size := s.size.Load()
		if size == 0 || s.base >= off {
			continue
		}
		var hdr [batch.HeaderSize]byte
		pos, h := int64(0), batch.Header{BaseOffset: -1}
		if off <= s.end.Load() {
			pos, h = s.seek(s.relOffset(off-1), size, &hdr)
		} else if r, _, ok := s.idx.last(); ok {
			pos, h = s.seek(r, size, &hdr)
		}
		have := h.BaseOffset >= 0 // seek read the header at pos
		var last batch.Header
		found := false
		for pos < size {
			if !have {
				var err error
				if h, err = s.readHeader(pos, &hdr); err != nil {
					return h, false, err
				}
			}
			have = false
			if h.BaseOffset >= off {
				break
			}
			last, found = h, true
			pos += int64(h.Size())
		}
		if found {
			return last, true, nil
		}
	}
	return batch.Header{}, false, nil
}

// scanEpochStarts returns the first batch of each run of equal epochs from
// offset from to the log end (owner, or at open). Per segment it reads the
// first and last batch headers; where they differ it bisects over the
// sparse index entries in between (epochs never decrease), walking headers
// only between two adjacent entries around each change.
func (l *Log) scanEpochStarts(from int64) ([]EpochEntry, error) {
	sc := epochScan{last: UndefinedEpoch}
	for _, s := range l.segs {
		size := s.size.Load()
		if size == 0 || s.end.Load() <= from {
			continue
		}
		sc.s = s
		var (
			p0  int64
			h0  batch.Header
			err error
		)
		if from > s.base {
			p0, h0, err = s.findBatch(from, size)
			if errors.Is(err, io.EOF) {
				continue
			}
		} else {
			h0, err = s.readHeader(0, &sc.hdr)
		}
		if err != nil {
			return nil, err
		}
		pl, hl, err := sc.lastBatch(p0, h0, size)
		if err != nil {
			return nil, err
		}
		sc.emit(&h0)
		if pl != p0 {
			// Index entries strictly between the first and last batch.
			sc.p0, sc.pl = p0, pl
			sc.k0 = s.idx.countPosAtMost(p0)
			sc.n = max(s.idx.countPosAtMost(pl-1)-sc.k0, 0)
			if err := sc.span(0, sc.n+1, h0, hl); err != nil {
				return nil, err
			}
			sc.emit(&hl)
		}
	}
	return sc.out, nil
}

// epochScan is scanEpochStarts' state for one segment. Bisection works on
// virtual positions 0..n+1: 0 is the first batch, n+1 the last, and i in
// 1..n the index entry k0+i-1.
type epochScan struct {
	s      *segment
	hdr    [batch.HeaderSize]byte
	out    []EpochEntry
	last   int32
	p0, pl int64
	k0, n  int64
}

func (sc *epochScan) emit(h *batch.Header) {
	if h.LeaderEpoch >= 0 && h.LeaderEpoch != sc.last {
		sc.out = append(sc.out, EpochEntry{Epoch: h.LeaderEpoch, StartOffset: h.BaseOffset})
		sc.last = h.LeaderEpoch
	}
}

func (sc *epochScan) pos(i int64) int64 {
	switch {
	case i == 0:
		return sc.p0
	case i > sc.n:
		return sc.pl
	}
	_, p := sc.s.idx.entry(sc.k0 + i - 1)
	return int64(p)
}

// span emits the epoch starts strictly after virtual position i (header
// hi) and before j (header hj).
func (sc *epochScan) span(i, j int64, hi, hj batch.Header) error {
	if hi.LeaderEpoch == hj.LeaderEpoch {
		return nil
	}
	if j-i > 1 {
		m := (i + j) / 2
		hm, err := sc.s.readHeader(sc.pos(m), &sc.hdr)
		if err != nil {
			return err
		}
		if err := sc.span(i, m, hi, hm); err != nil {
			return err
		}
		sc.emit(&hm)
		return sc.span(m, j, hm, hj)
	}
	end := sc.pos(j)
	for p := sc.pos(i) + int64(hi.Size()); p < end; {
		h, err := sc.s.readHeader(p, &sc.hdr)
		if err != nil {
			return err
		}
		sc.emit(&h)
		p += int64(h.Size())
	}
	return nil
}

// lastBatch finds the last batch of the segment, walking from the later of
// p0 and the last index entry.
func (sc *epochScan) lastBatch(p0 int64, h0 batch.Header, size int64) (int64, batch.Header, error) {
	pos, h := p0, h0
	if _, p, ok := sc.s.idx.last(); ok && int64(p) > p0 {
		var err error
		pos = int64(p)
		if h, err = sc.s.readHeader(pos, &sc.hdr); err != nil {
			return 0, h, err
		}
	}
	for pos+int64(h.Size()) < size {
		next := pos + int64(h.Size())
		nh, err := sc.s.readHeader(next, &sc.hdr)
		if err != nil {
			return 0, nh, err
		}
		pos, h = next, nh
	}
	return pos, h, nil
}
