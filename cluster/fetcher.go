package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/peer"
	"github.com/ringlog/ringlog/wal/batch"
)

// Replica fetchers (CLUSTER.md b): a follower copies each partition's log
// from its leader with the Kafka Fetch API, one goroutine per source
// leader multiplexing that leader's partitions over one connection. A
// fetch names the follower's log end, which is durable: the fetcher sends
// the next fetch only after the replica append of the last response was
// synced. Before its first fetch at a leader epoch, a partition asks the
// leader where its own last epoch ends (OffsetForLeaderEpoch, KIP-101/279)
// and truncates a divergent tail.

// Fetch sizes and timing of the replica fetchers.
const (
	replicaFetchMaxWait   = 500 * time.Millisecond
	replicaFetchMaxBytes  = 16 << 20
	replicaPartitionBytes = 1 << 20
	replicaBackoff        = 100 * time.Millisecond
)

// followed is one partition this broker follows.
type followed struct {
	p           *engine.Partition
	topic       string
	leader      int32
	leaderEpoch int32
	// throttled: this broker is a replica being added (a reassignment's
	// catch-up), paced by the replication throttle.
	throttled bool
}

// fetchers owns the replica fetchers: one per leader this broker follows
// partitions of. update (from the publisher) hands each its partitions.
type fetchers struct {
	c *Cluster
	// throttle paces the throttled partitions' fetches (nil: none).
	throttle *byteBucket
	mu       sync.Mutex
	by       map[int32]*fetcher // by leader id
	wg       sync.WaitGroup
}

// fetcher fetches the partitions one leader leads.
type fetcher struct {
	fs     *fetchers
	leader int32
	log    *slog.Logger

	mu      sync.Mutex
	parts   map[*engine.Partition]followed
	changed chan struct{} // signalled when parts change
	stop    chan struct{}

	// Owned by the goroutine.
	conn      peer.ReplicaConn
	truncated map[*engine.Partition]int32  // leader epoch each partition truncated at
	refused   map[*engine.Partition]string // last refusal logged per partition
}

// noteRefusal logs why the leader refused a partition's request, once per
// change of reason; ok clears it.
func (f *fetcher) noteRefusal(p *engine.Partition, what string, err error) {
	if err == nil {
		delete(f.refused, p)
		return
	}
	msg := what + ": " + err.Error()
	if f.refused[p] == msg {
		return
	}
	f.refused[p] = msg
	f.log.Info("the leader refused a replica request", "partition", p.String(), "request", what, "err", err)
}

// update sets the partitions followed: want maps each to its leader.
// Fetchers of leaders no longer followed stop.
func (fs *fetchers) update(want map[*engine.Partition]followed) {
	byLeader := map[int32]map[*engine.Partition]followed{}
	for p, f := range want {
		if byLeader[f.leader] == nil {
			byLeader[f.leader] = map[*engine.Partition]followed{}
		}
		byLeader[f.leader][p] = f
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.by == nil {
		fs.by = map[int32]*fetcher{}
	}
	for id, f := range fs.by {
		if _, ok := byLeader[id]; !ok {
			close(f.stop)
			delete(fs.by, id)
		}
	}
	for id, parts := range byLeader {
		f := fs.by[id]
		if f == nil {
			f = &fetcher{fs: fs, leader: id, log: fs.c.log.With("fetch_from", id), changed: make(chan struct{}, 1),
				stop: make(chan struct{}), truncated: map[*engine.Partition]int32{}, refused: map[*engine.Partition]string{}}
			fs.by[id] = f
			fs.wg.Add(1)
			go f.run()
		}
		f.mu.Lock()
		f.parts = parts
		f.mu.Unlock()
		select {
		case f.changed <- struct{}{}:
		default:
		}
	}
}

// close stops every fetcher and waits for them.
func (fs *fetchers) close() {
	fs.mu.Lock()
	for id, f := range fs.by {
		close(f.stop)
		delete(fs.by, id)
	}
	fs.mu.Unlock()
	fs.wg.Wait()
}

func (f *fetcher) snapshot() map[*engine.Partition]followed {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parts
}

func (f *fetcher) run() {
	defer f.fs.wg.Done()
	defer func() {
		if f.conn != nil {
			f.conn.Close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-f.stop:
		case <-f.fs.c.stop:
		}
		cancel()
	}()
	var lastErr string
	for ctx.Err() == nil {
		err := f.round(ctx)
		if err == nil {
			lastErr = ""
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if f.conn != nil {
			f.conn.Close()
			f.conn = nil
		}
		if err.Error() != lastErr {
			f.log.Info("replica fetch failed; retrying", "err", err)
			lastErr = err.Error()
		}
		select {
		case <-ctx.Done():
			return
		case <-f.changed:
		case <-time.After(replicaBackoff):
		}
	}
}

// errNothingToFetch: every partition is waiting (for metadata).
var errNothingToFetch = errors.New("no partition to fetch")

// round truncates the partitions that need it, then fetches once and
// appends what came.
func (f *fetcher) round(ctx context.Context) error {
	parts := f.snapshot()
	// Partitions no longer followed here (moved, deleted, led elsewhere)
	// leave the goroutine's own maps.
	for p := range f.truncated {
		if _, ok := parts[p]; !ok {
			delete(f.truncated, p)
		}
	}
	for p := range f.refused {
		if _, ok := parts[p]; !ok {
			delete(f.refused, p)
		}
	}
	if len(parts) == 0 {
		select {
		case <-ctx.Done():
		case <-f.changed:
		}
		return nil
	}
	if f.conn == nil {
		b, ok := f.fs.c.Image().Broker(f.leader)
		if !ok {
			return errors.New("leader not registered")
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := f.fs.c.replicas.DialReplica(dctx, b.KafkaAddr)
		cancel()
		if err != nil {
			return err
		}
		f.conn = conn
	}
	if err := f.truncate(ctx, parts); err != nil {
		return err
	}
	req := peer.ReplicaFetch{ReplicaID: f.fs.c.cfg.NodeID, MaxWait: replicaFetchMaxWait,
		MaxBytes: replicaFetchMaxBytes, PartitionMaxBytes: replicaPartitionBytes}
	var asked []followed
	throttle := f.fs.throttle
	held := false // a throttled partition waits for the bucket
	// charged: the throttled partitions asked for this round, each
	// charged a whole partition's fetch up front (so the fetchers of
	// other leaders see the bucket spent at once), refunded what did not
	// come.
	var charged int
	for p, fl := range parts {
		if ep, ok := f.truncated[p]; !ok || ep != fl.leaderEpoch {
			continue // its truncation failed: retried next round
		}
		if fl.throttled && throttle != nil {
			if !throttle.charge(replicaPartitionBytes) {
				held = true
				continue
			}
			charged++
		}
		l, err := p.ReplicaLog()
		if err != nil {
			continue
		}
		req.Partitions = append(req.Partitions, peer.FetchPartition{Topic: fl.topic, Partition: p.Index,
			LeaderEpoch: fl.leaderEpoch, Offset: l.EndOffset()})
		asked = append(asked, fl)
	}
	if len(asked) == 0 {
		if held {
			select {
			case <-ctx.Done():
			case <-f.changed:
			case <-time.After(throttle.wait()):
			}
			return nil
		}
		return errNothingToFetch
	}
	cctx, cancel := context.WithTimeout(ctx, replicaFetchMaxWait+10*time.Second)
	answers, err := f.conn.Fetch(cctx, req)
	cancel()
	find := lookupOf(asked)
	if charged > 0 {
		// Refund what the charge assumed and the answer did not bring
		// (all of it when the fetch failed).
		got := 0
		if err == nil {
			for _, rp := range answers {
				if fl, ok := find[rp.Topic][rp.Partition]; ok && fl.throttled {
					got += len(rp.Records)
				}
			}
		}
		throttle.take(got - charged*replicaPartitionBytes)
	}
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var pending []func()
	retry := false
	for _, rp := range answers {
		fl, ok := find[rp.Topic][rp.Partition]
		if !ok {
			continue
		}
		p := fl.p
		switch err := rp.Err; {
		case err == nil:
		case errors.Is(err, kerr.OffsetOutOfRange):
			l, lerr := p.ReplicaLog()
			switch {
			case lerr != nil:
			case rp.LogStart >= 0 && l.EndOffset() < rp.LogStart:
				if err := p.ResetTo(rp.LogStart); err != nil {
					f.log.Warn("cannot reset a replica to the leader's log start", "partition", p.String(), "err", err)
				}
			case rp.HighWatermark >= 0 && rp.HighWatermark < l.EndOffset():
				// Past the leader's end, with no epoch to compare:
				// keep what the leader has committed.
				if _, err := p.TruncateTo(max(rp.HighWatermark, l.StartOffset())); err != nil {
					f.log.Warn("cannot truncate a replica past the leader's end", "partition", p.String(), "err", err)
				}
			}
			retry = true
			continue
		default:
			// Not the leader (yet, or any more), or an epoch this leader
			// does not share: wait for the metadata to say who leads.
			f.noteRefusal(p, "Fetch", err)
			retry = true
			continue
		}
		f.noteRefusal(p, "Fetch", nil)
		if len(rp.Records) > 0 {
			batches, err := batch.Split(rp.Records, nil)
			if err != nil && len(batches) == 0 {
				f.log.Warn("leader sent batches that do not parse", "partition", p.String(), "err", err)
				retry = true
				continue
			}
			wg.Add(1)
			hw := rp.HighWatermark
			p.AppendReplica(batches, func(err error) {
				if err != nil {
					f.log.Warn("replica append failed", "partition", p.String(), "err", err)
				}
				wg.Done()
			})
			pending = append(pending, func() { p.SetFollowerHighWatermark(hw) })
			continue
		}
		p.SetFollowerHighWatermark(rp.HighWatermark)
	}
	// The next fetch names the new log ends, which must be durable: wait
	// for the appends (one group commit per shard) before sending it.
	wg.Wait()
	for _, fn := range pending {
		fn()
	}
	if retry {
		select {
		case <-ctx.Done():
		case <-f.changed:
		case <-time.After(replicaBackoff):
		}
	}
	return nil
}

// truncate asks the leader where each partition's latest local epoch ends
// (once per leader epoch) and cuts what diverges (KIP-279: to the smaller
// of the leader's end of that epoch and this replica's).
func (f *fetcher) truncate(ctx context.Context, parts map[*engine.Partition]followed) error {
	var qs []peer.EpochQuery
	var asked []followed
	for p, fl := range parts {
		if ep, ok := f.truncated[p]; ok && ep == fl.leaderEpoch {
			continue
		}
		l, err := p.ReplicaLog()
		if err != nil {
			continue
		}
		latest := l.LatestEpoch()
		if latest < 0 {
			f.truncated[p] = fl.leaderEpoch // empty: nothing can diverge
			continue
		}
		qs = append(qs, peer.EpochQuery{Topic: fl.topic, Partition: p.Index, CurrentLeaderEpoch: fl.leaderEpoch, LeaderEpoch: latest})
		asked = append(asked, fl)
	}
	if len(asked) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ends, err := f.conn.EpochEnds(cctx, f.fs.c.cfg.NodeID, qs)
	cancel()
	if err != nil {
		return err
	}
	find := lookupOf(asked)
	for _, rp := range ends {
		fl, ok := find[rp.Topic][rp.Partition]
		if !ok {
			continue
		}
		p := fl.p
		if rp.Err != nil {
			f.noteRefusal(p, "OffsetForLeaderEpoch", rp.Err)
			continue
		}
		l, err := p.ReplicaLog()
		if err != nil {
			continue
		}
		to := rp.EndOffset
		if rp.LeaderEpoch < 0 || rp.EndOffset < 0 {
			// The leader knows no epoch at or below ours (its log
			// starts later, or is empty): the fetch tells, with
			// OFFSET_OUT_OF_RANGE and the leader's bounds.
			f.truncated[p] = fl.leaderEpoch
			continue
		}
		if _, own := l.EndOffsetForEpoch(rp.LeaderEpoch); own >= 0 {
			to = min(to, own)
		}
		if to < l.EndOffset() {
			if _, err := p.TruncateTo(max(to, l.StartOffset())); err != nil {
				f.log.Warn("cannot truncate a divergent replica", "partition", p.String(), "to", to, "err", err)
				continue
			}
		}
		f.truncated[p] = fl.leaderEpoch
	}
	return nil
}

// lookupOf indexes the partitions a request asked for by topic and
// partition, to match the response's.
func lookupOf(asked []followed) map[string]map[int32]followed {
	out := map[string]map[int32]followed{}
	for _, fl := range asked {
		if out[fl.topic] == nil {
			out[fl.topic] = map[int32]followed{}
		}
		out[fl.topic][fl.p.Index] = fl
	}
	return out
}
