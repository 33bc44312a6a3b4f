package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// RebalanceConfig is one run of the rebalance benchmark: a group of
// Members consumers of a topic under a steady load absorbs one more
// member, with each group protocol in turn.
type RebalanceConfig struct {
	Brokers    []string
	Members    int
	Partitions int
	Rate       int // records per second over all partitions
	Rounds     int
	// Protocols: "consumer" (KIP-848, server-side uniform assignor),
	// "cooperative" (classic, cooperative-sticky), "eager" (classic,
	// range), "upgrade" (cooperative members, the newcomer KIP-848: the
	// live group switches protocols as it absorbs it).
	Protocols []string
}

// RebalanceResult is one round of one protocol.
type RebalanceResult struct {
	Protocol string `json:"protocol"`
	Round    int    `json:"round"`
	Members  int    `json:"members"`
	// AbsorbMs: from the new member's start until it consumed from its
	// fair share of the partitions (floor(partitions/(members+1))).
	AbsorbMs float64 `json:"absorb_ms"`
	// KeptPauseMs: the longest time a partition that kept its consumer
	// went without a delivery between the new member's start and one
	// second after it was absorbed (a stop-the-world rebalance pauses
	// these too); MovedPauseMs the same for the partitions that moved;
	// PausedPartitions: how many partitions went over 1 s.
	KeptPauseMs      float64 `json:"kept_pause_ms"`
	MovedPauseMs     float64 `json:"moved_pause_ms"`
	PausedPartitions int     `json:"paused_partitions"`
}

// JSON is the result as one JSON line.
func (r RebalanceResult) JSON() string {
	b, _ := json.Marshal(r)
	return string(b)
}

type rebalanceWatch struct {
	mu    sync.Mutex
	last  map[int32]time.Time
	owner map[int32]string
	from  time.Time
	gap   map[int32]time.Duration
	was   map[int32]string          // the owners when from was set
	seen  map[string]map[int32]bool // member -> partitions it received from
}

func (w *rebalanceWatch) add(member string, p int32) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.from.IsZero() {
		prev := w.last[p]
		if prev.Before(w.from) {
			prev = w.from
		}
		if g := now.Sub(prev); g > w.gap[p] {
			w.gap[p] = g
		}
	}
	w.last[p], w.owner[p] = now, member
	if w.seen[member] == nil {
		w.seen[member] = map[int32]bool{}
	}
	w.seen[member][p] = true
}

// settled: every partition delivered within the last second, by as many
// members as want.
func (w *rebalanceWatch) settled(partitions, want int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	owners := map[string]bool{}
	for p := 0; p < partitions; p++ {
		if time.Since(w.last[int32(p)]) > time.Second {
			return false
		}
		owners[w.owner[int32(p)]] = true
	}
	return len(owners) == want
}

// RunRebalance runs every protocol's rounds, calling report with each
// result.
func RunRebalance(ctx context.Context, c RebalanceConfig, report func(RebalanceResult)) error {
	for _, proto := range c.Protocols {
		for round := 1; round <= c.Rounds; round++ {
			r, err := rebalanceRound(ctx, c, proto, round)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", proto, round, err)
			}
			report(r)
		}
	}
	return nil
}

func rebalanceRound(ctx context.Context, c RebalanceConfig, proto string, round int) (RebalanceResult, error) {
	res := RebalanceResult{Protocol: proto, Round: round, Members: c.Members}
	var groupOpts, newcomerOpts []kgo.Opt
	switch proto {
	case "consumer":
		groupOpts = []kgo.Opt{kgo.ServerSideBalancer()}
	case "cooperative":
		groupOpts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer())}
	case "eager":
		groupOpts = []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}
	case "upgrade":
		groupOpts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer())}
		newcomerOpts = []kgo.Opt{kgo.ServerSideBalancer()}
	default:
		return res, fmt.Errorf("protocol %q: consumer, cooperative, eager or upgrade", proto)
	}
	if newcomerOpts == nil {
		newcomerOpts = groupOpts
	}
	suffix := fmt.Sprintf("%s-%d-%d", proto, round, time.Now().UnixNano())
	topic, group := "ringlog-perf-rebalance-"+suffix, "ringlog-perf-rebalance-"+suffix
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...))
	if err != nil {
		return res, err
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	if r, err := adm.CreateTopic(ctx, int32(c.Partitions), -1, nil, topic); err != nil || r.Err != nil {
		return res, fmt.Errorf("create %s: %v %v", topic, err, r.Err)
	}
	defer adm.DeleteTopics(context.Background(), topic) //nolint:errcheck // best-effort cleanup
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()

	prod, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		return res, err
	}
	defer prod.Close()
	go func() {
		every := time.Second / time.Duration(max(c.Rate, 1))
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; rctx.Err() == nil; i++ {
			prod.Produce(rctx, &kgo.Record{Partition: int32(i % c.Partitions), Value: []byte("r")}, nil)
			select {
			case <-tick.C:
			case <-rctx.Done():
			}
		}
	}()

	w := &rebalanceWatch{last: map[int32]time.Time{}, owner: map[int32]string{}, gap: map[int32]time.Duration{}, seen: map[string]map[int32]bool{}, was: map[int32]string{}}
	var wg sync.WaitGroup
	var members []*kgo.Client
	defer func() {
		for _, m := range members {
			m.Close()
		}
		cancel()
		wg.Wait()
	}()
	start := func(name string, protoOpts []kgo.Opt) error {
		opts := append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ClientID(name),
			kgo.FetchMaxWait(100 * time.Millisecond), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd())}, protoOpts...)
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return err
		}
		members = append(members, cl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil {
				fs := cl.PollFetches(rctx)
				if fs.IsClientClosed() {
					return
				}
				fs.EachRecord(func(r *kgo.Record) { w.add(name, r.Partition) })
			}
		}()
		return nil
	}
	// The members start 500 ms apart, so that the consumer protocol's
	// heartbeats (every 5 s by default) are not all in phase, as they
	// are not in a real fleet; the classic protocol puts them in phase
	// at every rebalance anyway.
	for i := 0; i < c.Members; i++ {
		if i > 0 {
			select {
			case <-time.After(500 * time.Millisecond):
			case <-rctx.Done():
				return res, rctx.Err()
			}
		}
		if err := start(fmt.Sprintf("m%d", i), groupOpts); err != nil {
			return res, err
		}
	}
	if err := waitFor(rctx, 2*time.Minute, func() bool { return w.settled(c.Partitions, c.Members) }); err != nil {
		return res, fmt.Errorf("the first %d members did not settle: %w", c.Members, err)
	}
	// The new member comes at a random point of the heartbeat cycles
	// (up to 5 s after the group settled): the classic protocol's
	// members heartbeat in phase after a rebalance, and when the next
	// beat comes decides how soon they hear of the newcomer.
	select {
	case <-time.After(time.Duration(rand.Int64N(int64(5 * time.Second)))):
	case <-rctx.Done():
		return res, rctx.Err()
	}
	w.mu.Lock()
	w.from = time.Now()
	for p, o := range w.owner {
		w.was[p] = o
	}
	w.mu.Unlock()
	t0 := time.Now()
	newcomer := "new"
	if err := start(newcomer, newcomerOpts); err != nil {
		return res, err
	}
	share := c.Partitions / (c.Members + 1)
	if err := waitFor(rctx, 2*time.Minute, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.seen[newcomer]) >= share
	}); err != nil {
		return res, fmt.Errorf("the new member was not absorbed: %w", err)
	}
	res.AbsorbMs = float64(time.Since(t0).Microseconds()) / 1000
	select {
	case <-time.After(time.Second):
	case <-rctx.Done():
		return res, rctx.Err()
	}
	w.mu.Lock()
	end := time.Now()
	for p := 0; p < c.Partitions; p++ {
		g := w.gap[int32(p)]
		if last := w.last[int32(p)]; end.Sub(last) > g {
			g = end.Sub(last) // still waiting for its next delivery
		}
		if g > time.Second {
			res.PausedPartitions++
		}
		ms := float64(g.Microseconds()) / 1000
		if w.owner[int32(p)] == w.was[int32(p)] {
			res.KeptPauseMs = max(res.KeptPauseMs, ms)
		} else {
			res.MovedPauseMs = max(res.MovedPauseMs, ms)
		}
	}
	w.mu.Unlock()
	return res, nil
}

func waitFor(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
