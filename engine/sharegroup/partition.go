// Package sharegroup is the state of KIP-932 share groups (Kafka's
// queues), with no I/O, lock or clock:
//
//   - Partition is one share-partition's delivery state: for one group and
//     one topic partition, which records are in flight (acquired by a
//     member until a lock deadline, available again, acknowledged or
//     archived), how many times each was delivered, and the share-partition
//     start offset (SPSO) below which every record is done.
//   - Group is a share group's membership: member epochs, subscriptions and
//     the assignment the coordinator computes (every subscribed partition
//     gets at least one member; unlike a consumer group, a partition may
//     have several).
//
// The caller (the engine) serializes the calls, passes the time, reads the
// log and persists what State returns before it answers an
// acknowledgement, so that an acknowledged record is never delivered again.
package sharegroup

import (
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
)

// RecordState is a record's delivery state, numbered as Kafka persists it.
type RecordState int8

// The delivery states of an in-flight record.
const (
	// Available records can be acquired by the next fetch.
	Available RecordState = 0
	// Acquired records are locked to one member until their deadline.
	Acquired RecordState = 1
	// Acknowledged records were processed; they are never delivered again.
	Acknowledged RecordState = 2
	// Archived records were rejected, hit the delivery-count limit, or are
	// not records at all (control batches, offsets compacted away); they
	// are never delivered again.
	Archived RecordState = 4
)

// AckType is an acknowledgement's type, numbered as on the wire.
type AckType int8

// The acknowledgement types of ShareFetch and ShareAcknowledge.
const (
	// AckGap marks offsets with no record (compacted away).
	AckGap AckType = 0
	// AckAccept acknowledges processed records.
	AckAccept AckType = 1
	// AckRelease gives records back for another delivery.
	AckRelease AckType = 2
	// AckReject archives records that cannot be processed.
	AckReject AckType = 3
	// AckRenew extends the acquisition lock (ShareFetch/ShareAcknowledge v2).
	AckRenew AckType = 4
)

// Limits are a share-partition's settings.
type Limits struct {
	// LockMillis is how long an acquisition lasts before the records are
	// available again (share.record.lock.duration.ms).
	LockMillis int64
	// DeliveryLimit is how many times a record is delivered before it is
	// archived instead of made available again
	// (group.share.delivery.count.limit).
	DeliveryLimit int16
	// MaxInFlight bounds the records between the start offset and the end
	// of what was acquired (group.share.partition.max.record.locks): a
	// fetch acquires no new record past it. A batch is acquired whole, so
	// the window can exceed it by the last batch's size.
	MaxInFlight int
}

type record struct {
	state    RecordState
	count    int16
	owner    string
	deadline int64 // unix ms, while Acquired
}

// Partition is one share-partition's delivery state. Offsets below Start
// are done; offsets in [Start, End) are in flight; End is the next offset
// to acquire from the log.
type Partition struct {
	start   int64
	recs    []record // recs[i] is offset start+i
	lim     Limits
	changes uint64
}

// NewPartition returns a share-partition whose first record to deliver is
// start (from share.auto.offset.reset, or a restored state's start).
func NewPartition(start int64, lim Limits) *Partition {
	return &Partition{start: start, lim: lim}
}

// Start is the share-partition start offset (SPSO).
func (p *Partition) Start() int64 { return p.start }

// End is the share-partition end offset (SPEO): the next offset to
// acquire from the log.
func (p *Partition) End() int64 { return p.start + int64(len(p.recs)) }

// Changes counts the changes worth persisting (acknowledgements, releases,
// archiving, a moved start); the caller persists State when it moved.
func (p *Partition) Changes() uint64 { return p.changes }

// SetLimits changes the settings (a group config was altered); they apply
// from the next acquisition.
func (p *Partition) SetLimits(lim Limits) { p.lim = lim }

// Span is one batch of the log, as a fetch read it.
type Span struct {
	First, Last int64
	// Control batches (transaction markers) are never delivered.
	Control bool
}

// Acquisition is a range of offsets acquired by one fetch, with the
// delivery count of each (Kafka's AcquiredRecords).
type Acquisition struct {
	First, Last   int64
	DeliveryCount int16
}

// InFlight counts the in-flight records by state.
func (p *Partition) InFlight() (available, acquired, done int) {
	for _, r := range p.recs {
		switch r.state {
		case Available:
			available++
		case Acquired:
			acquired++
		default:
			done++
		}
	}
	return available, acquired, done
}

// Expire makes the records whose lock passed available again (archived
// once they reached the delivery limit).
func (p *Partition) Expire(now int64) {
	for i := range p.recs {
		r := &p.recs[i]
		if r.state == Acquired && r.deadline <= now {
			p.free(r)
		}
	}
	p.advance()
}

// Holds reports whether any record is acquired.
func (p *Partition) Holds() bool {
	for _, r := range p.recs {
		if r.state == Acquired {
			return true
		}
	}
	return false
}

// NextDeadline is the earliest lock deadline, 0 when nothing is acquired.
func (p *Partition) NextDeadline() int64 {
	var d int64
	for _, r := range p.recs {
		if r.state == Acquired && (d == 0 || r.deadline < d) {
			d = r.deadline
		}
	}
	return d
}

// free ends an acquisition without an acknowledgement.
func (p *Partition) free(r *record) {
	r.owner, r.deadline = "", 0
	if p.lim.DeliveryLimit > 0 && r.count >= p.lim.DeliveryLimit {
		r.state = Archived
	} else {
		r.state = Available
	}
	p.changes++
}

// FetchFrom is where a fetch reads the log: the lowest available in-flight
// record, or End when none is and the window has room. ok is false when
// there is nothing to acquire.
func (p *Partition) FetchFrom() (offset int64, ok bool) {
	for i, r := range p.recs {
		if r.state == Available {
			return p.start + int64(i), true
		}
	}
	if p.lim.MaxInFlight > 0 && len(p.recs) >= p.lim.MaxInFlight {
		return 0, false
	}
	return p.End(), true
}

// Acquire locks for member the available records of batches, read from
// the log in order starting at from (what FetchFrom said), until
// maxRecords are acquired (0: no limit) or the window is full, and
// returns what it acquired and which batches hold any of it (the ones to
// send).
//
// Batches are acquired whole where they fit: maxRecords may be exceeded
// to the end of a batch, by at most maxRecords more (a huge batch is
// shared out between members rather than locked to one), and never
// with strict (ShareAcquireMode 1: exactly maxRecords at most). The
// window (MaxInFlight offsets from the start) bounds new offsets inside
// a batch too. Offsets from from on that no batch holds (compacted away,
// or never written) and the offsets of control batches are archived:
// there is nothing to deliver.
func (p *Partition) Acquire(member string, now int64, from int64, batches []Span, maxRecords int, strict bool) (acq []Acquisition, send []bool) {
	send = make([]bool, len(batches))
	n := 0
	limit := func() bool {
		if maxRecords <= 0 || n < maxRecords {
			return false
		}
		return strict || n >= 2*maxRecords
	}
	full := func() bool { return p.lim.MaxInFlight > 0 && len(p.recs) >= p.lim.MaxInFlight }
	next := max(from, p.start) // the first offset the read could show
batches:
	for bi, b := range batches {
		if maxRecords > 0 && n >= maxRecords {
			break
		}
		if b.Last < b.First || b.Last < next {
			continue
		}
		// Offsets between the last batch (or the read's start) and this
		// one hold no record: archive the in-flight ones that wait for a
		// delivery, and step over the rest.
		for off := max(next, p.start); off < b.First && off < p.End(); off++ {
			if r := &p.recs[off-p.start]; r.state == Available {
				r.state = Archived
				p.changes++
			}
		}
		p.advance() // what became done leaves the window first
		if b.First > p.End() {
			if len(p.recs) == 0 {
				p.start = b.First // nothing in flight: jump the gap
				p.changes++
			} else if b.First-p.start > int64(p.lim.MaxInFlight) && p.lim.MaxInFlight > 0 {
				break // the gap alone would overflow the window
			} else {
				for p.End() < b.First {
					p.recs = append(p.recs, record{state: Archived}) // no record there
				}
			}
		}
		next = b.Last + 1
		for off := max(b.First, p.start); off <= b.Last; off++ {
			if limit() {
				break batches
			}
			i := int(off - p.start)
			if i == len(p.recs) {
				if full() {
					break batches // nothing new past the window
				}
				st := Available
				if b.Control {
					st = Archived
				}
				p.recs = append(p.recs, record{state: st})
			}
			r := &p.recs[i]
			if r.state != Available || b.Control {
				continue
			}
			r.state, r.owner, r.deadline = Acquired, member, now+p.lim.LockMillis
			r.count++
			n++
			send[bi] = true
			if k := len(acq) - 1; k >= 0 && acq[k].Last == off-1 && acq[k].DeliveryCount == r.count {
				acq[k].Last = off
			} else {
				acq = append(acq, Acquisition{First: off, Last: off, DeliveryCount: r.count})
			}
		}
	}
	p.advance()
	return acq, send
}

// CheckAcknowledge reports whether Acknowledge would accept the batch:
// INVALID_REQUEST for a malformed one, INVALID_RECORD_STATE when an
// offset is not acquired by member (gap offsets too: they were acquired
// with their batch).
func (p *Partition) CheckAcknowledge(member string, first, last int64, types []int8) error {
	if first > last || first < 0 {
		return fmt.Errorf("%w: acknowledgement batch %d-%d", kerr.InvalidRequest, first, last)
	}
	n := last - first + 1
	if len(types) != 1 && int64(len(types)) != n {
		return fmt.Errorf("%w: %d acknowledge types for %d offsets", kerr.InvalidRequest, len(types), n)
	}
	for _, t := range types {
		if t < int8(AckGap) || t > int8(AckRenew) {
			return fmt.Errorf("%w: acknowledge type %d", kerr.InvalidRequest, t)
		}
	}
	if first < p.start || last >= p.End() {
		return fmt.Errorf("%w: offsets %d-%d are not in flight (%d-%d)", kerr.InvalidRecordState, first, last, p.start, p.End())
	}
	for off := first; off <= last; off++ {
		r := p.recs[off-p.start]
		if r.state != Acquired || r.owner != member {
			return fmt.Errorf("%w: offset %d is not acquired by this member", kerr.InvalidRecordState, off)
		}
	}
	return nil
}

// Acknowledge applies one acknowledgement batch of member (types: one
// type for the whole range or one per offset) once CheckAcknowledge
// accepts it; otherwise nothing is applied and its error is returned.
func (p *Partition) Acknowledge(member string, now int64, first, last int64, types []int8) error {
	if err := p.CheckAcknowledge(member, first, last, types); err != nil {
		return err
	}
	for off := first; off <= last; off++ {
		t := AckType(types[0])
		if len(types) > 1 {
			t = AckType(types[off-first])
		}
		r := &p.recs[off-p.start]
		switch t {
		case AckAccept:
			r.state, r.owner, r.deadline = Acknowledged, "", 0
			p.changes++
		case AckGap, AckReject:
			r.state, r.owner, r.deadline = Archived, "", 0
			p.changes++
		case AckRelease:
			p.free(r)
		case AckRenew:
			r.deadline = now + p.lim.LockMillis
		}
	}
	p.advance()
	return nil
}

// Release makes every record held by an owner that match accepts
// available again (a share session closed, its member left the group).
func (p *Partition) Release(match func(owner string) bool) {
	for i := range p.recs {
		if r := &p.recs[i]; r.state == Acquired && match(r.owner) {
			p.free(r)
		}
	}
	p.advance()
}

// SkipTo moves the start offset forward to offset (the log start moved
// past it: retention deleted the records), archiving what is skipped.
func (p *Partition) SkipTo(offset int64) {
	if offset <= p.start {
		return
	}
	if k := offset - p.start; k >= int64(len(p.recs)) {
		p.recs = p.recs[:0]
	} else {
		p.recs = p.recs[k:]
	}
	p.start = offset
	p.changes++
	p.advance()
}

// Reset moves the start offset to offset, forward or back, and drops the
// in-flight state (AlterShareGroupOffsets on a group with no members).
func (p *Partition) Reset(offset int64) {
	p.recs, p.start = nil, offset
	p.changes++
}

// advance moves the start offset past the records that are done.
func (p *Partition) advance() {
	k := 0
	for k < len(p.recs) && (p.recs[k].state == Acknowledged || p.recs[k].state == Archived) {
		k++
	}
	if k == 0 {
		return
	}
	p.start += int64(k)
	p.changes++
	if k == len(p.recs) {
		p.recs = p.recs[:0]
		return
	}
	if k > cap(p.recs)/2 { // do not keep a large array alive for a short tail
		p.recs = append(make([]record, 0, len(p.recs)-k), p.recs[k:]...)
		return
	}
	p.recs = p.recs[k:]
}

// StateBatch is a run of in-flight offsets with the same state and
// delivery count, as persisted (acquired records are persisted as
// available: a lock does not outlive the broker).
type StateBatch struct {
	First, Last   int64
	State         RecordState
	DeliveryCount int16
}

// State is what is persisted of a share-partition: its start offset and
// its in-flight runs that matter (available records delivered before,
// acknowledged and archived ones).
type State struct {
	Start   int64
	Batches []StateBatch
}

// State returns the persistent state.
func (p *Partition) State() State {
	s := State{Start: p.start}
	for i, r := range p.recs {
		st := r.state
		if st == Acquired {
			st = Available
		}
		if st == Available && r.count == 0 {
			continue
		}
		off := p.start + int64(i)
		if k := len(s.Batches) - 1; k >= 0 && s.Batches[k].Last == off-1 && s.Batches[k].State == st && s.Batches[k].DeliveryCount == r.count {
			s.Batches[k].Last = off
			continue
		}
		s.Batches = append(s.Batches, StateBatch{First: off, Last: off, State: st, DeliveryCount: r.count})
	}
	return s
}

// CheckState reports whether Restore would accept s, allocating nothing:
// the batches sorted, not overlapping, at or after the start, in a
// persisted state, and spanning at most maxSpan offsets from the start.
func CheckState(s State, maxSpan int64) error {
	if s.Start < 0 || s.Start > math.MaxInt64-maxSpan {
		return fmt.Errorf("share-partition state: start offset %d", s.Start)
	}
	end := s.Start
	for _, b := range s.Batches {
		if b.First < end || b.Last < b.First {
			return fmt.Errorf("share-partition state: batch %d-%d out of order (from %d)", b.First, b.Last, end)
		}
		if b.Last-s.Start >= maxSpan {
			return fmt.Errorf("share-partition state: batch %d-%d beyond %d offsets from the start %d", b.First, b.Last, maxSpan, s.Start)
		}
		switch b.State {
		case Available, Acknowledged, Archived:
		default:
			return fmt.Errorf("share-partition state: batch %d-%d in state %d", b.First, b.Last, b.State)
		}
		if b.DeliveryCount < 0 {
			return fmt.Errorf("share-partition state: batch %d-%d delivery count %d", b.First, b.Last, b.DeliveryCount)
		}
		end = b.Last + 1
	}
	return nil
}

// Restore returns the share-partition a persisted state describes. The
// batches must be sorted, not overlapping, at or after the start, and
// span at most maxSpan offsets in all (a hostile or corrupt state would
// otherwise size the window).
func Restore(s State, lim Limits, maxSpan int64) (*Partition, error) {
	if err := CheckState(s, maxSpan); err != nil {
		return nil, err
	}
	p := NewPartition(s.Start, lim)
	end := s.Start
	for _, b := range s.Batches {
		for ; end < b.First; end++ {
			p.recs = append(p.recs, record{})
		}
		for ; end <= b.Last; end++ {
			r := record{state: b.State, count: b.DeliveryCount}
			if r.state == Available && lim.DeliveryLimit > 0 && r.count >= lim.DeliveryLimit {
				r.state = Archived
			}
			p.recs = append(p.recs, r)
		}
	}
	// Trailing available records with no delivery are not in flight.
	for len(p.recs) > 0 && p.recs[len(p.recs)-1].state == Available && p.recs[len(p.recs)-1].count == 0 {
		p.recs = p.recs[:len(p.recs)-1]
	}
	p.advance()
	p.changes = 0
	return p, nil
}
