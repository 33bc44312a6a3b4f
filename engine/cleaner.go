package engine

import (
	"time"

	"github.com/ringlog/ringlog/wal"
)

// The cleaner compacts partitions of topics with cleanup.policy=compact in
// the background, on every replica (a replicated partition's only up to
// its high watermark): every CompactionInterval it asks each such partition's
// shard for a plan (cheap), builds the cleaned segments on its own
// goroutine (the slow part: reading and rewriting sealed segments, while
// the shard keeps appending and fetches keep reading), and asks the shard
// to install the result.

func (e *Engine) runCleaner(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(e.cfg.CompactionInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			e.CompactNow()
		}
	}
}

// CompactNow runs one compaction pass over every compacted partition and
// returns what it did.
func (e *Engine) CompactNow() wal.CompactionStats {
	var total wal.CompactionStats
	for _, t := range e.Topics() {
		cfg := t.Config()
		if !cfg.Compact() || cfg.RemoteStorage() {
			// (Tiered topics are never compacted: refused by config,
			// and never done here, whatever defaults say.)
			continue
		}
		opts := wal.CompactOptions{DeleteRetention: cfg.DeleteRetention(), MinLag: cfg.MinCompactionLag(), MinDirtyRatio: cfg.MinCleanableRatio()}
		for _, p := range t.Partitions() {
			st, err := e.compactPartition(p, opts)
			if err != nil {
				e.logger.Warn("compaction failed", "partition", p.String(), "err", err)
				continue
			}
			if st.Segments > 0 {
				e.logger.Info("compacted", "partition", p.String(), "segments", st.Segments, "bytes_before", st.BytesBefore,
					"bytes_after", st.BytesAfter, "records_kept", st.RecordsKept, "records_removed", st.RecordsPruned)
			}
			total.Segments += st.Segments
			total.BytesBefore += st.BytesBefore
			total.BytesAfter += st.BytesAfter
			total.RecordsKept += st.RecordsKept
			total.RecordsPruned += st.RecordsPruned
		}
	}
	return total
}

func (e *Engine) compactPartition(p *Partition, opts wal.CompactOptions) (wal.CompactionStats, error) {
	var plan *wal.CompactionPlan
	err := p.shard.Call(func() error {
		o := opts
		switch u := p.unstable.Load(); {
		case u == 1:
			return nil // a transaction open at offset 0 holds every segment
		case u > 1:
			o.Unstable = u - 1 // segments reaching an open transaction wait
		}
		// Leaders and followers alike: each replica compacts its own
		// log (the offsets stay, the bytes differ).
		l, err := p.ReplicaLog()
		if err != nil {
			return nil
		}
		if p.rep != nil {
			hw := p.hw.Load()
			if hw <= l.StartOffset() {
				return nil // nothing committed yet
			}
			o.Committed = hw
		}
		plan = l.PlanCompaction(o)
		return nil
	})
	if err != nil || plan == nil {
		return wal.CompactionStats{}, err
	}
	if err := plan.Build(); err != nil {
		plan.Abort()
		return wal.CompactionStats{}, err
	}
	var st wal.CompactionStats
	err = p.shard.Call(func() error {
		l, err := p.ReplicaLog()
		if err != nil {
			plan.Abort()
			return err
		}
		// A log truncated or replaced since the plan keeps its segments
		// (InstallCompaction checks).
		st, err = l.InstallCompaction(plan)
		return err
	})
	return st, err
}
