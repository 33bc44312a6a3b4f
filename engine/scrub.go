package engine

import (
	"errors"
	"slices"
	"time"

	"github.com/ringlog/ringlog/wal"
)

// The scrubber re-reads every sealed segment of every hosted partition,
// each at most once per ScrubInterval, at ScrubBytesPerSec at most, and
// checks every batch's CRC32C (wal.Log.ScrubSegment): damage the disk
// did after the write is found before a consumer meets it. What it finds
// is counted (Stats.ScrubDamaged) and logged, and reads stop before it
// (the damaged bytes are never served; fetches there get
// KAFKA_STORAGE_ERROR). A follower in cluster mode heals itself: it
// truncates its log at the damage and fetches the rest again from its
// leader. A single broker's or a leader's damaged range stays unreadable
// until retention removes it.

// scrubKey names a segment for the scrubber's memory.
type scrubKey struct {
	p    *Partition
	base int64
}

// runScrubber is the scrubber's goroutine; it owns its memory of when
// each segment was last checked.
func (e *Engine) runScrubber(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	if e.cfg.ScrubBytesPerSec <= 0 {
		return
	}
	checked := map[scrubKey]time.Time{}
	var buf []byte
	for {
		did := e.scrubPass(stop, checked, &buf)
		wait := time.Second
		if did {
			wait = 0
		}
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
	}
}

// scrubPass checks the segments due (not checked within ScrubInterval),
// oldest partition order first, and forgets segments that are gone; it
// reports whether it checked any.
func (e *Engine) scrubPass(stop <-chan struct{}, checked map[scrubKey]time.Time, buf *[]byte) bool {
	rate := float64(e.cfg.ScrubBytesPerSec)
	pace := func(n int) {
		select {
		case <-stop:
		case <-time.After(time.Duration(float64(n) / rate * float64(time.Second))):
		}
	}
	live := map[scrubKey]bool{}
	did := false
	for _, t := range e.Topics() {
		for _, p := range t.Partitions() {
			if !p.Hosted() || p.log == nil || p.removed.Load() {
				continue
			}
			for _, base := range p.log.SealedSegments() {
				k := scrubKey{p, base}
				live[k] = true
				if last, ok := checked[k]; ok && e.now().Sub(last) < e.cfg.ScrubInterval {
					continue
				}
				select {
				case <-stop:
					return did
				default:
				}
				n, b, err := p.log.ScrubSegment(base, *buf, pace)
				*buf = b
				did = true
				checked[k] = e.now()
				e.stats.ScrubbedBytes.Add(n)
				var d *wal.Damage
				switch {
				case errors.As(err, &d):
					e.stats.ScrubDamaged.Add(1)
					e.logger.Error("scrubber: a sealed segment is damaged; its damaged range is not served", "partition", p.String(),
						"segment", d.Segment, "position", d.Pos, "offset", d.Offset, "reason", d.Reason)
					e.healDamage(p, d)
				case errors.Is(err, wal.ErrSegmentGone):
				case err != nil:
					e.logger.Warn("scrubber: cannot read a segment", "partition", p.String(), "segment", base, "err", err)
				}
			}
		}
	}
	for k := range checked {
		if !live[k] {
			delete(checked, k)
		}
	}
	return did
}

// healDamage lets a follower truncate its log at the damage, so that its
// fetcher gets the rest again from the leader (cluster mode). A leader
// or a single broker has no other copy to heal from.
func (e *Engine) healDamage(p *Partition, d *wal.Damage) {
	if p.rep == nil || p.Role() != RoleFollower {
		return
	}
	err := p.shard.Call(func() error {
		if p.Role() != RoleFollower {
			return nil
		}
		before := p.log.EndOffset()
		end, err := p.log.TruncateAtDamage(d)
		if err != nil {
			return err
		}
		if hw := p.hw.Load(); end < hw {
			p.hw.Store(end)
		}
		p.reloadProducerState()
		e.logger.Warn("scrubber: truncated a follower at the damage to fetch it again from the leader", "partition", p.String(), "from", before, "to", end)
		e.stats.ScrubHealed.Add(1)
		return nil
	})
	if err != nil && !errors.Is(err, wal.ErrSegmentGone) {
		e.logger.Error("scrubber: cannot truncate a damaged follower", "partition", p.String(), "err", err)
	}
}

// ScrubSegmentsOf checks every sealed segment of p now, whatever the rate
// (tests, admin): the first damage found, if any.
func (e *Engine) ScrubSegmentsOf(p *Partition) (*wal.Damage, error) {
	if p.log == nil {
		return nil, p.Offline()
	}
	var buf []byte
	for _, base := range slices.Clone(p.log.SealedSegments()) {
		_, b, err := p.log.ScrubSegment(base, buf, nil)
		buf = b
		var d *wal.Damage
		if errors.As(err, &d) {
			return d, nil
		}
		if err != nil && !errors.Is(err, wal.ErrSegmentGone) {
			return nil, err
		}
	}
	return nil, nil
}
