package engine

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// A partition's side of transactions. A transactional batch opens its
// producer's transaction here (beginTxn: the first offset is remembered);
// the coordinator's marker ends it (endTxn). The last stable offset (LSO)
// is the first offset of the oldest open transaction, or the high
// watermark when none is open: read_committed consumers read up to it.
// An aborted transaction becomes an entry of the log's aborted index
// (wal .txnindex), which read_committed fetches return.

// TxnMarker asks a shard to end a producer's transaction in a partition
// with a control batch (AppendRequest.Marker).
type TxnMarker struct {
	ProducerID       int64
	ProducerEpoch    int16
	Commit           bool
	CoordinatorEpoch int32
}

// LastStableOffset is the offset below which every transaction is
// decided (committed or aborted): what read_committed consumers may read.
// It never falls below the log start: when retention deleted the start of
// an open transaction, what is left of it is still held back, but not
// offsets that no longer exist (as Kafka clamps it).
func (p *Partition) LastStableOffset() int64 {
	hw := p.HighWatermark()
	if u := p.unstable.Load(); u > 0 && u-1 < hw {
		lso := u - 1
		if p.log != nil {
			lso = max(lso, p.log.StartOffset())
		}
		return min(lso, hw)
	}
	return hw
}

// ProducerInfo is one producer a partition remembers (DescribeProducers).
type ProducerInfo struct {
	ProducerID int64
	Epoch      int16
	// LastSequence is the last sequence of its last batch here, -1 when
	// only a marker is known (the epoch a coordinator fenced).
	LastSequence int32
	// LastTimestamp is the largest timestamp of its last batch, -1 when
	// unknown.
	LastTimestamp int64
	// TxnStartOffset is the first offset of its open transaction here,
	// -1 when none is open.
	TxnStartOffset int64
}

// Producers lists the producers the partition remembers, by producer id
// (DescribeProducers, to find a hanging transaction). Only the leader (or
// a single node) answers; it reads the state on the partition's shard.
func (p *Partition) Producers() ([]ProducerInfo, error) {
	if _, err := p.Log(); err != nil {
		return nil, err
	}
	var out []ProducerInfo
	err := p.shard.Call(func() error {
		for pid, st := range p.producers {
			in := ProducerInfo{ProducerID: pid, Epoch: st.Epoch, LastSequence: -1, LastTimestamp: -1, TxnStartOffset: -1}
			if e := st.last(); e != nil {
				in.LastSequence = e.LastSeq
				if e.MaxTimestamp > 0 {
					in.LastTimestamp = e.MaxTimestamp
				}
			}
			if first, ok := p.openTxns[pid]; ok {
				in.TxnStartOffset = first
			}
			out = append(out, in)
		}
		return nil
	})
	slices.SortFunc(out, func(a, b ProducerInfo) int { return cmp.Compare(a.ProducerID, b.ProducerID) })
	return out, err
}

// AbortedTxns returns the aborted transactions whose data may lie in
// [from, upTo) (any goroutine), for read_committed fetches.
func (p *Partition) AbortedTxns(dst []wal.AbortedTxn, from, upTo int64) []wal.AbortedTxn {
	return p.AbortedTxnsFor(dst, from, upTo, nil)
}

// AbortedTxnsFor is AbortedTxns for a fetch whose records came from
// tiered storage (remote, nil when they did not): the aborted
// transactions of the segment read count even if retention expired it
// since.
func (p *Partition) AbortedTxnsFor(dst []wal.AbortedTxn, from, upTo int64, remote *RemoteRead) []wal.AbortedTxn {
	if p.log == nil {
		return dst
	}
	if p.tier.Load() == nil {
		return p.log.AbortedTxns(dst, from, upTo)
	}
	// Remote and local lists overlap where a copied segment is still
	// local. The local one first: a segment that local retention
	// deletes after it was read was published remote before, so the
	// remote view read next has it.
	n := len(dst)
	dst = p.log.AbortedTxns(dst, from, upTo)
	dst = p.remoteAborted(dst, from, upTo)
	if remote != nil {
		dst = appendAborted(dst, remote.Aborted, from, upTo)
	}
	return append(dst[:n], dedupAborted(dst[n:])...)
}

// beginTxn opens pid's transaction at first unless one is open (shard).
func (p *Partition) beginTxn(pid, first int64) {
	if _, ok := p.openTxns[pid]; ok {
		return
	}
	p.openTxns[pid] = first
	p.updateUnstable()
}

// endTxn ends pid's transaction with the marker at markerOffset (shard,
// or the loader): an abort becomes an aborted-index entry. A marker for a
// producer with no open transaction here (the coordinator writes markers
// to every partition it added, data or not, and again after a restart)
// changes nothing but the producer's epoch.
func (p *Partition) endTxn(pid int64, epoch int16, commit bool, coordinatorEpoch int32, markerOffset int64) error {
	st := p.producers[pid]
	if st == nil || epoch > st.Epoch {
		// The marker's epoch fences older ones (a timed-out or zombie
		// producer's batches after it are INVALID_PRODUCER_EPOCH).
		st = &producerState{Epoch: epoch}
		p.producers[pid] = st
	}
	st.Touched = p.topic.eng.now().UnixMilli()
	st.CoordinatorEpoch = max(st.CoordinatorEpoch, coordinatorEpoch)
	p.guards.drop(pid)
	first, ok := p.openTxns[pid]
	if !ok {
		return nil
	}
	delete(p.openTxns, pid)
	p.updateUnstable()
	if commit {
		return nil
	}
	lso := markerOffset + 1
	if u := p.unstable.Load(); u > 0 {
		lso = u - 1
	}
	return p.log.AddAbortedTxn(wal.AbortedTxn{ProducerID: pid, FirstOffset: first, LastOffset: markerOffset, LastStableOffset: lso})
}

// updateUnstable publishes the smallest open transaction start (shard).
func (p *Partition) updateUnstable() {
	u := int64(0)
	for _, first := range p.openTxns {
		if u == 0 || first+1 < u {
			u = first + 1
		}
	}
	p.unstable.Store(u)
}

// stageMarker stages a transaction marker: a control batch, synced (the
// coordinator's decision must survive), fencing older producer epochs.
func (s *Shard) stageMarker(sa *stagedAppend, l *wal.Log) {
	req := sa.req
	p := req.Partition
	m := req.Marker
	if st := p.producers[m.ProducerID]; st != nil && m.ProducerEpoch < st.Epoch {
		sa.res.Err = fmt.Errorf("%w: marker of producer %d at epoch %d, older than the partition's %d", kerr.InvalidProducerEpoch, m.ProducerID, m.ProducerEpoch, st.Epoch)
		return
	} else if st != nil && m.CoordinatorEpoch < st.CoordinatorEpoch {
		// A deposed coordinator's late marker (cluster mode): the
		// coordinator after it has ended this transaction already,
		// and its marker must not end the producer's next one.
		sa.res.Err = fmt.Errorf("%w: marker of producer %d from coordinator epoch %d, older than the partition's %d", kerr.TransactionCoordinatorFenced, m.ProducerID, m.CoordinatorEpoch, st.CoordinatorEpoch)
		return
	}
	typ := batch.ControlAbort
	if m.Commit {
		typ = batch.ControlCommit
	}
	req.Batches = [][]byte{batch.AppendControl(nil, m.ProducerID, m.ProducerEpoch, typ, m.CoordinatorEpoch, s.eng.now().UnixMilli())}
	tk, err := s.batch.Append(l, req.Batches, s.syncs(req, p.topic.Config()))
	if err != nil {
		sa.res.Err = fmt.Errorf("%w: %s: %w", kerr.KafkaStorageError, p, err)
		if l.Err() != nil {
			p.setOffline(err)
		}
		return
	}
	sa.ticket = tk
	sa.staged = true
	if err := p.endTxn(m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch, tk.Results()[0].BaseOffset); err != nil {
		// The marker is in the log; the index entry is rebuilt from
		// it at the next start.
		p.topic.eng.logger.Error("aborted-transaction index", "partition", p.String(), "err", err)
	}
}
