package wal

import (
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// Batch stages appends to any number of logs and submits all their writes,
// and the syncs they need, to a ring.Backend as one batch: with io_uring
// that is one io_uring_enter for every partition of a writer shard. This is
// group commit: every append staged before Submit shares the submission,
// and all appends to one log share one fdatasync.
//
// Durability contract: when Submit returns, each Stage that asked for a
// sync (or reached its log's flush.messages) has its bytes on stable
// storage (fdatasync completed); the others are in the page cache. Readers
// see a batch only after Submit committed it.
//
// A Batch is used by one goroutine, the owner of every log it touches:
//
//	tk, err := b.Append(log, batches, sync) // assigns offsets now
//	...                                      // more logs, more appends
//	err = b.Submit(backend)                  // write, sync, commit
//	tk.Err(), tk.Results()
//	b.Reset()
//
// All appends to one log in a Batch form one stage, and the stage's writes
// (and its sync) are one linked chain: the kernel runs them in file order,
// so a crash in the middle of a submission leaves each log a prefix of
// what was staged, never a hole with data after it.
type Batch struct {
	stages []*Stage
	ops    []ring.Op
	pool   []*Stage
	bufs   [][]byte
	// arena holds the aligned buffers of the direct writes (direct.go),
	// arenaUsed of it by this submission.
	arena     []byte
	arenaUsed int
}

// Appended is the outcome of one appended record batch.
type Appended struct {
	BaseOffset int64
	LastOffset int64
	// AppendTime is the broker timestamp for LogAppendTime logs, else -1.
	AppendTime int64
}

// Ticket is one Append call's share of a stage.
type Ticket struct {
	st       *Stage
	first, n int
}

// Err is the outcome after Submit: nil when every batch of the call is
// written (and synced if asked).
func (t Ticket) Err() error { return t.st.err }

// Results has one entry per batch of the call, in order; the offsets are
// assigned at Append and valid once Err is nil after Submit.
func (t Ticket) Results() []Appended { return t.st.Results[t.first : t.first+t.n] }

// Synced reports whether the batches were fdatasync'ed before completing.
func (t Ticket) Synced() bool { return t.st.sync }

// Stage is one log's part of a Batch.
type Stage struct {
	log *Log
	// Results has one entry per appended batch, in order.
	Results []Appended
	metas   []stagedBatch
	epochs  []EpochEntry // the epoch cache to publish when the stage commits, if it changes
	sync    bool
	records int64
	opFirst int
	opEnd   int
	err     error
	batch   *Batch
	// flush: earlier segments of the log not yet known durable, synced
	// ahead of a syncing stage (referenced until Submit returns).
	flush []*segment
	// direct: the O_DIRECT writes built for the stage (DirectWrites);
	// buildErr: why its writes could not be built (it then has no ops).
	direct   []directRun
	buildErr error
}

type stagedBatch struct {
	seg   *segment
	data  []byte
	pos   int64
	base  int64
	next  int64
	maxTs int64
}

// Len is the number of stages in the batch.
func (b *Batch) Len() int { return len(b.stages) }

// Reset empties the batch for reuse, keeping its memory.
func (b *Batch) Reset() {
	for _, st := range b.stages {
		if st.log.staged == st {
			st.log.staged = nil
		}
		clear(st.metas)
		clear(st.flush)
		clear(st.direct)
		*st = Stage{Results: st.Results[:0], metas: st.metas[:0], flush: st.flush[:0], direct: st.direct[:0]}
		b.pool = append(b.pool, st)
	}
	clear(b.stages)
	b.stages = b.stages[:0]
	clear(b.ops)
	b.ops = b.ops[:0]
	clear(b.bufs)
	b.bufs = b.bufs[:0]
}

// stageFor returns l's stage in this batch, creating it.
func (b *Batch) stageFor(l *Log, sync bool) *Stage {
	if st := l.staged; st != nil && st.batch == b {
		st.sync = st.sync || sync
		return st
	}
	var st *Stage
	if n := len(b.pool); n > 0 {
		st = b.pool[n-1]
		b.pool = b.pool[:n-1]
	} else {
		st = &Stage{}
	}
	st.log, st.sync, st.batch = l, sync, b
	l.staged = st
	b.stages = append(b.stages, st)
	return st
}

// Append stages record batches for log l: it assigns their offsets
// (patching baseOffset and the leader epoch, Options.LeaderEpoch, in
// place, and the timestamp for LogAppendTime logs), rolls segments as
// needed, and queues the writes. The batches must have passed
// batch.Validate and must stay untouched until Submit returns. sync asks
// for fdatasync before the batches complete (the acks=all / fsync=always
// path); it makes the log's whole stage sync. An epoch below the epoch of
// data already in the log is refused with ErrEpochOrder.
func (b *Batch) Append(l *Log, batches [][]byte, sync bool) (Ticket, error) {
	if l.closed {
		return Ticket{}, ErrClosed
	}
	if l.failed != nil {
		return Ticket{}, l.failed
	}
	for _, data := range batches {
		if len(data) < batch.HeaderSize {
			return Ticket{}, fmt.Errorf("wal: append of a %d-byte batch", len(data))
		}
	}
	// The first batch of a new epoch starts an epoch cache entry.
	epoch := l.opts.LeaderEpoch
	var projected []EpochEntry
	newEpoch := false
	if n := len(l.pEpochs); len(batches) > 0 && (n == 0 || l.pEpochs[n-1].Epoch != epoch) {
		var err error
		if projected, newEpoch, err = assignEpoch(l.pEpochs, epoch, l.next, l.next); err != nil {
			return Ticket{}, fmt.Errorf("wal: %s: %w", l.dir, err)
		}
	}
	now := int64(-1)
	st := b.stageFor(l, sync)
	tk := Ticket{st: st, first: len(st.Results), n: len(batches)}
	if newEpoch {
		st.epochs, l.pEpochs = projected, projected
	}
	for _, data := range batches {
		h, _ := batch.ParseHeader(data)
		last := l.next + int64(h.LastOffsetDelta)
		if l.needsRoll(len(data), last) {
			if err := l.roll(); err != nil {
				l.failed, l.failedNoSpace = fmt.Errorf("wal: %s: roll: %w", l.dir, err), isNoSpace(err)
				return Ticket{}, l.failed
			}
		}
		s := l.active()
		if now < 0 && (s.firstAppendMs < 0 || l.opts.LogAppendTime) {
			now = l.opts.Now().UnixMilli()
		}
		if s.firstAppendMs < 0 {
			s.firstAppendMs = now
		}
		batch.SetBaseOffset(data, l.next)
		batch.SetLeaderEpoch(data, epoch)
		res := Appended{BaseOffset: l.next, LastOffset: last, AppendTime: -1}
		maxTs := h.MaxTimestamp
		if l.opts.LogAppendTime {
			batch.SetLogAppendTime(data, now)
			res.AppendTime, maxTs = now, now
		}
		st.push(l, s, data, res, maxTs, int64(h.LastOffsetDelta)+1)
	}
	st.syncIfFlushDue(l)
	return tk, nil
}

// push stages data (holding records records, res its result) at s's write
// position, the end of l: the segment's write position and l's next
// offset move past it.
func (st *Stage) push(l *Log, s *segment, data []byte, res Appended, maxTs, records int64) {
	st.metas = append(st.metas, stagedBatch{seg: s, data: data, pos: s.wpos, base: res.BaseOffset, next: res.LastOffset + 1, maxTs: maxTs})
	st.Results = append(st.Results, res)
	st.records += records
	s.wpos += int64(len(data))
	l.next = res.LastOffset + 1
	s.wnext = l.next
}

// syncIfFlushDue asks for an fdatasync when the records staged reach the
// log's flush.messages.
func (st *Stage) syncIfFlushDue(l *Log) {
	if !st.sync && l.opts.FlushMessages > 0 && l.unflushed+st.records >= l.opts.FlushMessages {
		st.sync = true
	}
}

// Sync stages an fdatasync of l's active segment with nothing to write (the
// flush.ms path).
func (b *Batch) Sync(l *Log) (Ticket, error) {
	if l.closed {
		return Ticket{}, ErrClosed
	}
	if l.failed != nil {
		return Ticket{}, l.failed
	}
	st := b.stageFor(l, true)
	return Ticket{st: st, first: len(st.Results)}, nil
}

// buildOps turns the stages into ring operations: per log, one writev per
// run of batches in the same segment (split at ring.MaxIovecs; with
// DirectWrites one aligned O_DIRECT write, directWrite), an fdatasync of
// each segment written when the stage syncs, all linked in one chain.
//
// A syncing stage first syncs the log's earlier segments that are not
// known durable (rolled away from with bytes no sync covered, their
// background flush not done): a sync at an offset then makes everything
// before it durable too. Without that, a power cut could keep an
// acknowledged acks=all batch in the new segment and lose the unsynced
// tail of the one before, damaging the log in the middle.
func (b *Batch) buildOps() {
	if n := b.directBytes(); n > 0 {
		b.growArena(n)
	}
	for _, st := range b.stages {
		st.opFirst = len(b.ops)
		if st.sync {
			st.flush = st.log.unflushedBefore(st, st.flush[:0])
			for _, seg := range st.flush {
				b.ops = append(b.ops, ring.Op{Kind: ring.OpFdatasync, Fd: int(seg.f.Fd()), Link: true})
			}
		}
		if len(st.metas) == 0 && st.sync {
			b.ops = append(b.ops, ring.Op{Kind: ring.OpFdatasync, Fd: int(st.log.active().f.Fd())})
		}
		for i := 0; i < len(st.metas); {
			seg := st.metas[i].seg
			j := st.runEnd(i)
			if st.log.opts.DirectWrites {
				op, err := b.directWrite(st, seg, st.metas[i:j])
				if err != nil {
					st.buildErr = err
					b.ops = b.ops[:st.opFirst]
					break
				}
				b.ops = append(b.ops, op)
			} else {
				for k := i; k < j; k += ring.MaxIovecs {
					e := min(k+ring.MaxIovecs, j)
					first := len(b.bufs)
					for _, m := range st.metas[k:e] {
						b.bufs = append(b.bufs, m.data)
					}
					b.ops = append(b.ops, ring.Op{
						Kind: ring.OpWritev, Fd: int(seg.f.Fd()), Offset: st.metas[k].pos,
						Bufs: b.bufs[first:len(b.bufs):len(b.bufs)], Link: true,
					})
				}
			}
			if st.sync {
				b.ops = append(b.ops, ring.Op{Kind: ring.OpFdatasync, Fd: int(seg.f.Fd()), Link: true})
			}
			i = j
		}
		st.opEnd = len(b.ops)
		if st.opEnd > st.opFirst {
			b.ops[st.opEnd-1].Link = false
		}
	}
}

// Submit runs every staged write and sync as one backend batch, then
// commits each stage (indexes, sizes, end offsets: readers see the batches
// from now on) or fails it. A failed write makes its log refuse further
// appends (Log.Err) until it is reopened; other logs are unaffected. The
// returned error is for a failure of the submission itself, which fails
// every stage.
func (b *Batch) Submit(backend ring.Backend) error {
	if len(b.stages) == 0 {
		return nil
	}
	b.buildOps()
	err := backend.Run(b.ops)
	defer func() {
		for _, st := range b.stages {
			for _, seg := range st.flush {
				seg.release()
			}
		}
	}()
	if err != nil {
		for _, st := range b.stages {
			st.log.fail(st, fmt.Errorf("wal: submit: %w", err), false)
		}
		return err
	}
	for _, st := range b.stages {
		err := st.buildErr
		noSpace := false
		for i := st.opFirst; i < st.opEnd; i++ {
			if op := &b.ops[i]; op.Err != nil {
				err = fmt.Errorf("wal: %s: %s at %d: %w", st.log.dir, op.Kind, op.Offset, op.Err)
				// A write the disk had no room for wrote nothing the
				// log counts: cut back, the log can go on once there
				// is room. A failed fdatasync is never that: what it
				// should have made durable may be gone.
				noSpace = op.Kind == ring.OpWritev && isNoSpace(op.Err)
				break
			}
		}
		if err == nil && st.log.failed != nil {
			err = st.log.failed // an earlier stage of this log failed
			noSpace = st.log.failedNoSpace
		}
		if err != nil {
			st.log.fail(st, err, noSpace)
			continue
		}
		if st.sync {
			// Synced whole: the segments synced ahead, and the sealed
			// ones this stage wrote and synced.
			for _, seg := range st.flush {
				seg.flushed.Store(true)
			}
			for i := range st.metas {
				if seg := st.metas[i].seg; seg != st.log.active() {
					seg.flushed.Store(true)
				}
			}
		}
		st.log.commit(st, backend)
	}
	return nil
}

// writes reports whether the stage has batches for seg (nil: none).
func (st *Stage) writes(seg *segment) bool {
	if st == nil {
		return false
	}
	for i := range st.metas {
		if st.metas[i].seg == seg {
			return true
		}
	}
	return false
}

// unflushedBefore appends to dst, referenced, the log's sealed segments
// not known durable that st does not write itself (owner only), oldest
// first, and forgets the ones that became durable or were deleted.
func (l *Log) unflushedBefore(st *Stage, dst []*segment) []*segment {
	l.prunePendingFlush()
	for _, seg := range l.pendingFlush {
		// One the stage writes is synced after its writes, in place.
		if !st.writes(seg) && seg.acquire() {
			dst = append(dst, seg)
		}
	}
	return dst
}

// prunePendingFlush drops the durable and deleted segments from
// l.pendingFlush (owner only).
func (l *Log) prunePendingFlush() {
	act := l.active()
	l.pendingFlush = slices.DeleteFunc(l.pendingFlush, func(seg *segment) bool {
		// The active one (unsealed after an interrupted roll) is
		// synced by the stages that write it.
		return seg.flushed.Load() || seg.deleted.Load() || seg == act
	})
}

// commit publishes a written stage to readers (owner only); b, the
// backend that wrote it, also starts its writeback.
func (l *Log) commit(st *Stage, b ring.Backend) {
	st.commitDirect()
	interval := l.opts.IndexIntervalBytes
	for i := range st.metas {
		m := &st.metas[i]
		m.seg.indexBatch(m.base, m.pos, len(m.data), m.maxTs, interval)
		m.seg.size.Store(m.pos + int64(len(m.data)))
		m.seg.end.Store(m.next)
		m.seg.noteBatch(m.base, m.pos)
		if chunk := l.opts.WritebackBytes; chunk > 0 {
			l.startWriteback(b, m.seg, m.pos+int64(len(m.data)), chunk, st.sync)
		}
	}
	if st.epochs != nil {
		l.publishEpochs(st.epochs) // before the end moves past them
	}
	if n := len(st.metas); n > 0 {
		l.end.Store(st.metas[n-1].next)
	}
	if st.sync {
		l.unflushed = 0
		l.tailDirty = false
	} else if st.records > 0 {
		l.tailDirty = true
		if l.unflushed == 0 {
			l.dirtySince = l.opts.Now()
		}
		l.unflushed += st.records
	}
	if len(l.toSeal) > 0 {
		l.sealPending()
	}
	if len(l.undropped) > 0 {
		l.dropSealed(b, l.opts.WritebackBytes)
	}
}

// fail records a failed stage: the log refuses appends from now on, and
// what the stage may have half-written is cut off (best effort; recovery
// at the next open cuts it in any case). noSpace: the failure was only a
// write the disk had no room for (Revive can end it).
func (l *Log) fail(st *Stage, err error, noSpace bool) {
	st.err = err
	if l.failed == nil {
		l.failed, l.failedNoSpace = err, noSpace
		if noSpace {
			l.logger.Error("log write failed: the disk is full; refusing appends until there is room again", "err", err)
		} else {
			l.logger.Error("log write failed; refusing appends until reopened", "err", err)
		}
	} else if !noSpace {
		l.failedNoSpace = false
	}
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	for _, s := range segs {
		// A failed direct write may have rewritten the partial block
		// before it: read it back for the next one.
		s.dtailEnd = -1
		if s.wpos != s.size.Load() || s.padded {
			if terr := s.f.Truncate(s.size.Load()); terr != nil && !errors.Is(terr, ErrClosed) {
				l.logger.Warn("cut back failed write", "segment", s.base, "err", terr)
			} else {
				s.padded = false
			}
			s.wpos = s.size.Load()
			s.wnext = s.end.Load()
		}
	}
	l.next = l.end.Load()
	l.pEpochs = l.epochList()
}

// isNoSpace reports whether err is the disk (or the user's quota) being
// full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// FailedForSpace reports whether the log refuses appends only because a
// write found the disk full (Revive can end that); owner only.
func (l *Log) FailedForSpace() bool { return l.failed != nil && l.failedNoSpace }

// Revive ends a failure that was only the disk being full (FailedForSpace):
// the failed writes were cut back when they failed (and are cut again
// here), nothing they carried was acknowledged, and everything before them
// is as it was, so appends can go on once the disk has room. Any other
// failure is kept (a failed fdatasync may have lost what it covered: only
// a restart's recovery may trust the log again) and returned. Owner only;
// the caller checks that the disk has room.
func (l *Log) Revive() error {
	switch {
	case l.failed == nil:
		return nil
	case l.closed || !l.failedNoSpace:
		return l.failed
	}
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	for _, s := range segs {
		fi, err := s.f.Stat()
		if err != nil {
			return fmt.Errorf("wal: %s: revive: %w", l.dir, err)
		}
		if size := s.size.Load(); fi.Size() > size || s.wpos != size {
			if err := s.f.Truncate(size); err != nil {
				return fmt.Errorf("wal: %s: revive: cut back segment %d: %w", l.dir, s.base, err)
			}
			s.wpos, s.wnext = size, s.end.Load()
		}
	}
	l.next = l.end.Load()
	l.pEpochs = l.epochList()
	l.logger.Info("log accepts appends again: the disk has room", "was", l.failed)
	l.failed, l.failedNoSpace = nil, false
	return nil
}

// Append is the one-log convenience: stage batches, submit them with
// backend, and return the results.
func (l *Log) Append(backend ring.Backend, batches [][]byte, sync bool) ([]Appended, error) {
	return submitOne(backend, func(b *Batch) (Ticket, error) { return b.Append(l, batches, sync) })
}

// submitOne stages one log's appends with stage in a batch of their own,
// submits it with backend and returns the results.
func submitOne(backend ring.Backend, stage func(*Batch) (Ticket, error)) ([]Appended, error) {
	var b Batch
	defer b.Reset()
	tk, err := stage(&b)
	if err != nil {
		return nil, err
	}
	if err := b.Submit(backend); err != nil {
		return nil, err
	}
	return slices.Clone(tk.Results()), tk.Err()
}
