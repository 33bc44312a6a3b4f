package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
)

// The aborted-transaction index (.txnindex, Kafka's layout): per segment,
// the transactions aborted by a marker in that segment, as 34-byte
// entries
//
//	version int16 (0)  producerId int64  firstOffset int64
//	lastOffset int64 (the abort marker)  lastStableOffset int64
//
// appended when the marker is written. A read_committed fetch lists the
// aborted transactions overlapping the offsets it returns, so the consumer
// can drop their records. The log keeps every entry in memory (aborts are
// rare; a segment's file is read when the segment is opened) and writes
// the files without syncing them: the engine rebuilds the entries after
// its producer-state snapshot from the control batches at every open
// (DropAbortedTxnsFrom, then AddAbortedTxn), and Close syncs them.
// Retention and truncation delete a segment's file with it; compaction
// carries the entries of the segments it merges into the merged one.

const (
	txnIndexSuffix = ".txnindex"
	txnEntrySize   = 34
)

// AbortedTxn is one aborted transaction of a partition.
type AbortedTxn struct {
	ProducerID int64
	// FirstOffset is the first offset of the transaction's data here.
	FirstOffset int64
	// LastOffset is the offset of its abort marker.
	LastOffset int64
	// LastStableOffset is the partition's last stable offset once the
	// abort was written.
	LastStableOffset int64
}

func encodeAbortedTxn(dst []byte, a AbortedTxn) []byte {
	dst = binary.BigEndian.AppendUint16(dst, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.ProducerID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.FirstOffset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.LastOffset))
	return binary.BigEndian.AppendUint64(dst, uint64(a.LastStableOffset))
}

// decodeTxnIndex parses a .txnindex file of segment base: whole entries
// in marker order inside the segment; a torn last entry (a crash while it
// was written) is dropped, anything else wrong is an error.
func decodeTxnIndex(b []byte, base int64) ([]AbortedTxn, error) {
	var out []AbortedTxn
	prev := int64(-1)
	for len(b) >= txnEntrySize {
		if v := int16(binary.BigEndian.Uint16(b)); v != 0 {
			return nil, fmt.Errorf("entry %d: version %d", len(out), v)
		}
		a := AbortedTxn{
			ProducerID:       int64(binary.BigEndian.Uint64(b[2:])),
			FirstOffset:      int64(binary.BigEndian.Uint64(b[10:])),
			LastOffset:       int64(binary.BigEndian.Uint64(b[18:])),
			LastStableOffset: int64(binary.BigEndian.Uint64(b[26:])),
		}
		if a.ProducerID < 0 || a.FirstOffset < 0 || a.FirstOffset > a.LastOffset || a.LastOffset < base || a.LastOffset <= prev {
			return nil, fmt.Errorf("entry %d: %+v out of order or outside the segment", len(out), a)
		}
		prev = a.LastOffset
		out = append(out, a)
		b = b[txnEntrySize:]
	}
	return out, nil
}

// loadTxnIndex reads the segment's .txnindex, if it has one. A damaged one
// is removed (logged): the engine's rebuild covers what it can, as Kafka
// rebuilds a missing index.
func (s *segment) loadTxnIndex() {
	b, err := os.ReadFile(s.path(txnIndexSuffix))
	if err != nil {
		return
	}
	entries, err := decodeTxnIndex(b, s.base)
	if err != nil {
		s.logger.Warn("removing a damaged aborted-transaction index", "file", s.path(txnIndexSuffix), "err", err)
		os.Remove(s.path(txnIndexSuffix))
		return
	}
	s.aborted = entries
	if len(b)%txnEntrySize != 0 {
		s.txnDirty = true
		// A failed rewrite leaves the torn file: the next load drops
		// its torn tail again, and the entries are in memory.
		if err := s.rewriteTxnIndex(); err != nil {
			s.logger.Warn("rewriting a torn aborted-transaction index", "file", s.path(txnIndexSuffix), "err", err)
		}
	}
}

// rewriteTxnIndex replaces the file with the segment's entries (owner).
func (s *segment) rewriteTxnIndex() error {
	path := s.path(txnIndexSuffix)
	if len(s.aborted) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	var b []byte
	for _, a := range s.aborted {
		b = encodeAbortedTxn(b, a)
	}
	s.txnDirty = true
	return os.WriteFile(path, b, s.perm.File())
}

// AddAbortedTxn records an aborted transaction whose marker is at
// a.LastOffset, which must be past every entry already recorded (owner
// goroutine; the marker is the last thing appended).
func (l *Log) AddAbortedTxn(a AbortedTxn) error {
	if l.closed {
		return ErrClosed
	}
	l.mu.Lock()
	i := l.segmentForLocked(a.LastOffset)
	if i < 0 {
		i = 0
	}
	s := l.segs[i]
	if n := len(s.aborted); n > 0 && s.aborted[n-1].LastOffset >= a.LastOffset {
		l.mu.Unlock()
		return fmt.Errorf("wal: %s: aborted transaction at %d is not past the last one at %d", l.dir, a.LastOffset, s.aborted[n-1].LastOffset)
	}
	s.aborted = append(s.aborted, a)
	s.txnDirty = true
	l.mu.Unlock()
	f, err := os.OpenFile(s.path(txnIndexSuffix), os.O_WRONLY|os.O_CREATE|os.O_APPEND, s.perm.File())
	if err != nil {
		return fmt.Errorf("wal: %s: aborted-transaction index: %w", l.dir, err)
	}
	_, err = f.Write(encodeAbortedTxn(nil, a))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("wal: %s: aborted-transaction index: %w", l.dir, err)
	}
	return nil
}

// AbortedTxns appends to dst the aborted transactions whose data may lie
// in [from, upTo): marker at or after from, first offset before upTo
// (any goroutine). This is Fetch's aborted-transaction list.
func (l *Log) AbortedTxns(dst []AbortedTxn, from, upTo int64) []AbortedTxn {
	l.mu.RLock()
	defer l.mu.RUnlock()
	i := l.segmentForLocked(from)
	if i < 0 {
		i = 0
	}
	// Every segment from the one holding from on: a marker far past upTo
	// may still end a transaction that started before it.
	for _, s := range l.segs[i:] {
		for _, a := range s.aborted {
			if a.LastOffset >= from && a.FirstOffset < upTo {
				dst = append(dst, a)
			}
		}
	}
	return dst
}

// DropAbortedTxnsFrom forgets the entries whose marker is at or after off
// (owner goroutine): what the engine is about to rebuild from the control
// batches, or what a truncation cut.
func (l *Log) DropAbortedTxnsFrom(off int64) error {
	var errs []error
	l.mu.Lock()
	var changed []*segment
	for _, s := range l.segs {
		n := len(s.aborted)
		k := n
		for k > 0 && s.aborted[k-1].LastOffset >= off {
			k--
		}
		if k < n {
			s.aborted = slices.Clip(s.aborted[:k])
			changed = append(changed, s)
		}
	}
	l.mu.Unlock()
	for _, s := range changed {
		if err := s.rewriteTxnIndex(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("wal: %s: aborted-transaction index: %w", l.dir, err)
	}
	return nil
}

// syncTxnIndex makes a segment's written entries durable (Close).
func (s *segment) syncTxnIndex() error {
	if !s.txnDirty {
		return nil
	}
	f, err := os.Open(s.path(txnIndexSuffix))
	if errors.Is(err, os.ErrNotExist) {
		s.txnDirty = false
		return nil
	}
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err == nil {
		s.txnDirty = false
	}
	return err
}
