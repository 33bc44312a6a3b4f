package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/wal/batch"
)

// Idempotent producers: a producer id with an epoch numbers its batches
// per partition with sequences. The partition remembers, per producer, the
// last producerWindow batches it appended, so that
//
//   - a retry of one of those batches (same first and last sequence) is
//     acknowledged with the offsets it got the first time, not appended
//     again (no duplicates);
//   - a batch that does not start right after the last one is refused with
//     OUT_OF_ORDER_SEQUENCE_NUMBER (no gaps);
//   - a batch from an older epoch is refused with INVALID_PRODUCER_EPOCH,
//     and a new epoch must start at sequence 0.
//
// The state is rebuilt at open from a snapshot written at clean shutdown
// plus the batch headers after it (or from all batch headers), so it
// survives restarts and kill -9.
const producerWindow = 5

type seqEntry struct {
	FirstSeq    int32 `json:"first_seq"`
	LastSeq     int32 `json:"last_seq"`
	FirstOffset int64 `json:"first_offset"`
	LastOffset  int64 `json:"last_offset"`
	Timestamp   int64 `json:"timestamp"` // log append time, or -1
	// MaxTimestamp is the batch's largest timestamp (DescribeProducers'
	// last timestamp); 0 in snapshots written before it existed.
	MaxTimestamp int64 `json:"max_timestamp,omitempty"`
}

type producerState struct {
	Epoch   int16      `json:"epoch"`
	Batches []seqEntry `json:"batches"` // oldest first, at most producerWindow
	// CoordinatorEpoch is the newest transaction coordinator epoch (the
	// leader epoch of its __transaction_state partition) of the markers
	// here: an older coordinator's marker is refused.
	CoordinatorEpoch int32 `json:"coordinator_epoch,omitempty"`
	// Touched is when, by the broker's clock, the partition last took a
	// batch or marker of the producer, or loaded its state at open (unix
	// ms; 0: never). Not the batches' own timestamps, which are the
	// client's and may be old (a replay of old events).
	Touched int64 `json:"touched,omitempty"`
}

// expireProducers forgets the producers last seen ProducerIDExpiration
// before now that have no open transaction here (shard, with retention),
// and returns how many: a later batch of one is taken as a new
// producer's, as in Kafka.
func (p *Partition) expireProducers(now time.Time) int {
	cutoff := now.Add(-p.topic.eng.cfg.ProducerIDExpiration).UnixMilli()
	n := 0
	for pid, st := range p.producers {
		if _, open := p.openTxns[pid]; open || st.Touched >= cutoff {
			continue
		}
		delete(p.producers, pid)
		n++
	}
	return n
}

func (s *producerState) last() *seqEntry {
	if len(s.Batches) == 0 {
		return nil
	}
	return &s.Batches[len(s.Batches)-1]
}

func (s *producerState) push(e seqEntry) {
	if len(s.Batches) == producerWindow {
		copy(s.Batches, s.Batches[1:])
		s.Batches = s.Batches[:producerWindow-1]
	}
	s.Batches = append(s.Batches, e)
}

// seqCheck is the outcome of checking one batch against producer state.
type seqCheck struct {
	dup *seqEntry // a retry of this earlier batch
	err error
}

func nextSeq(s int32) int32 {
	if s == math.MaxInt32 {
		return 0
	}
	return s + 1
}

// checkSequence decides what to do with an idempotent batch (shard only).
func (p *Partition) checkSequence(h *batch.Header) seqCheck {
	st := p.producers[h.ProducerID]
	if st == nil {
		// Unknown producer (new, or its state aged out with the log):
		// accept any sequence, as Kafka does.
		return seqCheck{}
	}
	switch {
	case h.ProducerEpoch < st.Epoch:
		return seqCheck{err: fmt.Errorf("%w: producer %d epoch %d is older than the current %d", kerr.InvalidProducerEpoch, h.ProducerID, h.ProducerEpoch, st.Epoch)}
	case h.ProducerEpoch > st.Epoch:
		if h.BaseSequence != 0 {
			return seqCheck{err: fmt.Errorf("%w: producer %d new epoch %d must start at sequence 0, not %d", kerr.OutOfOrderSequenceNumber, h.ProducerID, h.ProducerEpoch, h.BaseSequence)}
		}
		return seqCheck{}
	}
	for i := range st.Batches {
		e := &st.Batches[i]
		if e.FirstSeq == h.BaseSequence && e.LastSeq == h.LastSequence() {
			return seqCheck{dup: e}
		}
	}
	if last := st.last(); last != nil && h.BaseSequence != nextSeq(last.LastSeq) {
		return seqCheck{err: fmt.Errorf("%w: producer %d epoch %d sent sequence %d, expected %d", kerr.OutOfOrderSequenceNumber, h.ProducerID, h.ProducerEpoch, h.BaseSequence, nextSeq(last.LastSeq))}
	}
	return seqCheck{}
}

// recordSequence remembers an appended idempotent batch (shard only).
func (p *Partition) recordSequence(h *batch.Header, first, last, ts int64) {
	st := p.producers[h.ProducerID]
	if st == nil || h.ProducerEpoch > st.Epoch {
		st = &producerState{Epoch: h.ProducerEpoch}
		p.producers[h.ProducerID] = st
	}
	st.push(seqEntry{FirstSeq: h.BaseSequence, LastSeq: h.LastSequence(), FirstOffset: first, LastOffset: last, Timestamp: ts, MaxTimestamp: h.MaxTimestamp})
	st.Touched = p.topic.eng.now().UnixMilli()
}

const producerSnapshotFile = "producer-state.json"

type producerSnapshot struct {
	Offset    int64                    `json:"offset"` // state covers batches below this offset
	Producers map[int64]*producerState `json:"producers"`
	// OpenTxns: producer id -> first offset of its open transaction.
	OpenTxns map[int64]int64 `json:"open_txns,omitempty"`
}

// decodeProducerSnapshot parses a producer-state snapshot and checks that
// it is one the broker could have written: every producer with at most
// producerWindow batches, in offset order, below the snapshot's offset.
func decodeProducerSnapshot(b []byte) (producerSnapshot, error) {
	var snap producerSnapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return producerSnapshot{}, fmt.Errorf("parse: %w", err)
	}
	if snap.Offset < 0 {
		return producerSnapshot{}, fmt.Errorf("negative offset %d", snap.Offset)
	}
	for pid, st := range snap.Producers {
		if st == nil || len(st.Batches) > producerWindow {
			return producerSnapshot{}, fmt.Errorf("producer %d: bad state %+v", pid, st)
		}
		prev := int64(-1)
		for _, e := range st.Batches {
			if e.FirstOffset <= prev || e.LastOffset < e.FirstOffset || e.LastOffset >= snap.Offset {
				return producerSnapshot{}, fmt.Errorf("producer %d: batch at offsets %d..%d out of order or past %d", pid, e.FirstOffset, e.LastOffset, snap.Offset)
			}
			prev = e.LastOffset
		}
	}
	for pid, first := range snap.OpenTxns {
		if pid < 0 || first < 0 || first >= snap.Offset {
			return producerSnapshot{}, fmt.Errorf("producer %d: open transaction at %d outside the snapshot's offsets below %d", pid, first, snap.Offset)
		}
	}
	return snap, nil
}

// loadProducerState rebuilds the state from the snapshot (if it still
// fits the log) and the batch headers after it: the idempotent producers'
// windows, the open transactions, and the aborted-transaction index
// entries after the snapshot (the wal's .txnindex files are not synced as
// they are written).
func (p *Partition) loadProducerState() error {
	p.openTxns = map[int64]int64{}
	from := p.log.StartOffset()
	path := filepath.Join(p.dir, producerSnapshotFile)
	if b, err := os.ReadFile(path); err == nil {
		p.producerStateOnDisk = b
		snap, err := decodeProducerSnapshot(b)
		switch {
		case err != nil:
			p.topic.eng.logger.Warn("ignoring unreadable producer-state snapshot; rebuilding it from the log", "partition", p.String(), "file", path, "err", err)
		case snap.Offset <= p.log.EndOffset() && snap.Offset >= p.log.StartOffset():
			if snap.Producers != nil {
				p.producers = snap.Producers
			}
			for pid, first := range snap.OpenTxns {
				if first >= p.log.StartOffset() {
					p.openTxns[pid] = first
				}
			}
			from = snap.Offset
		}
	}
	if err := p.log.DropAbortedTxnsFrom(from); err != nil {
		return err
	}
	var scratch []byte
	err := p.log.ScanHeaders(from, func(h *batch.Header) error {
		if h.BaseOffset < from || !h.Idempotent() {
			return nil
		}
		if h.Control() {
			buf, err := p.log.ReadBytes(scratch[:0], h.BaseOffset, h.Size(), h.NextOffset())
			scratch = buf
			if err != nil {
				return fmt.Errorf("read the control batch at %d: %w", h.BaseOffset, err)
			}
			typ, ce, err := batch.ParseControl(buf, h)
			if err != nil {
				p.topic.eng.logger.Warn("skipping an unreadable control batch", "partition", p.String(), "offset", h.BaseOffset, "err", err)
				return nil
			}
			return p.endTxn(h.ProducerID, h.ProducerEpoch, typ == batch.ControlCommit, ce, h.BaseOffset)
		}
		if h.Transactional() {
			p.beginTxn(h.ProducerID, h.BaseOffset)
		}
		st := p.producers[h.ProducerID]
		if st == nil || h.ProducerEpoch > st.Epoch {
			st = &producerState{Epoch: h.ProducerEpoch}
			p.producers[h.ProducerID] = st
		}
		if h.ProducerEpoch < st.Epoch {
			return nil
		}
		ts := int64(-1)
		if h.LogAppendTime() {
			ts = h.MaxTimestamp
		}
		st.push(seqEntry{FirstSeq: h.BaseSequence, LastSeq: h.LastSequence(), FirstOffset: h.BaseOffset, LastOffset: h.LastOffset(), Timestamp: ts, MaxTimestamp: h.MaxTimestamp})
		return nil
	})
	// What the log and snapshot hold counts as seen now: the broker's
	// clock of their appends is not kept, and a restart must not expire
	// producers that were active just before it.
	now := p.topic.eng.now().UnixMilli()
	for _, st := range p.producers {
		st.Touched = max(st.Touched, now)
	}
	p.updateUnstable()
	return err
}

// saveProducerState writes the snapshot (shard only, at shutdown).
func (p *Partition) saveProducerState() error {
	if p.log == nil {
		return nil
	}
	snap := producerSnapshot{Offset: p.log.EndOffset(), Producers: p.producers, OpenTxns: p.openTxns}
	b, err := json.Marshal(&snap)
	if err != nil {
		return err
	}
	if bytes.Equal(b, p.producerStateOnDisk) {
		return nil // an idle partition: the file already says so
	}
	path := filepath.Join(p.dir, producerSnapshotFile)
	if err := fsutil.WriteFileAtomic(path, b, p.topic.eng.cfg.Perm.File()); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	p.producerStateOnDisk = b
	return nil
}
