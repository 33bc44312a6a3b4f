package main

// What a leader that lost its leadership could do wrong, watched from
// outside: acknowledge acks=1 records it then loses (acks1Producer,
// lostAcks1), and name itself leader at an epoch another broker has
// already led at (leaderWatcher).

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// acks1Ack is one acknowledged acks=1 record.
type acks1Ack struct {
	value     string
	partition int32
	offset    int64
	at        time.Time // when the acknowledgement arrived
}

// acks1Producer produces acks=1 records (no idempotence, no retries of
// its own beyond the client's) with the values <prefix>-<seq>, round
// robin over the partitions, and keeps every acknowledgement with the
// time it arrived.
type acks1Producer struct {
	t    *testing.T
	cl   *kgo.Client
	mu   sync.Mutex
	acks []acks1Ack
	sent int
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// startAcks1 starts producing one record every every to topic through a
// client seeded with seeds (opts added: a side's dialer).
func startAcks1(t *testing.T, ctx context.Context, seeds []string, topic, prefix string, every time.Duration, opts ...kgo.Opt) *acks1Producer {
	t.Helper()
	a := &acks1Producer{t: t, stop: make(chan struct{})}
	a.cl = procClient(t, seeds[0], append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.RecordDeliveryTimeout(20 * time.Second),
		kgo.MaxBufferedRecords(2000)}, append(fastFailoverOpts(), opts...)...)...)
	pctx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() {
		cancel()
		a.halt()
	})
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-a.stop:
				return
			case <-pctx.Done():
				return
			case <-tick.C:
			}
			v := fmt.Sprintf("%s-%d", prefix, i)
			a.mu.Lock()
			a.sent++
			a.mu.Unlock()
			a.cl.Produce(pctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err == nil {
					a.mu.Lock()
					a.acks = append(a.acks, acks1Ack{v, r.Partition, r.Offset, time.Now()})
					a.mu.Unlock()
				}
			})
		}
	}()
	return a
}

// halt stops producing (idempotent).
func (a *acks1Producer) halt() {
	a.once.Do(func() { close(a.stop) })
	a.wg.Wait()
}

// finish stops producing, waits up to 30 s for the records still
// buffered (those that fail are simply not acknowledged), and returns
// every acknowledgement and how many records were handed over.
func (a *acks1Producer) finish(ctx context.Context) ([]acks1Ack, int) {
	a.halt()
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = a.cl.Flush(fctx) // an unflushed record is one never acknowledged
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.acks), a.sent
}

// lostAcks1 reads topic from its start (through seeds, for up to d) and
// returns the acknowledged records that are not there, split by mayLose:
// those acknowledged when a fault allows an acks=1 record to be lost
// (explained), and the others (lost). It reads to the end offsets again
// while a record that must be there is missing: the high watermark
// passes the last acks=1 records only once the followers fetched them.
func lostAcks1(t *testing.T, ctx context.Context, seeds []string, topic string, acks []acks1Ack, mayLose func(time.Time) bool, d time.Duration) (lost, explained []acks1Ack) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	adm := kadm.NewClient(procClient(t, seeds[0], kgo.SeedBrokers(seeds...)))
	rd := procClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	have := map[string]bool{}
	next := map[int32]int64{} // partition → the offset after the last record read
	for {
		ends, err := adm.ListEndOffsets(rctx, topic)
		if err != nil || ends.Error() != nil {
			t.Fatalf("end offsets of %s: %v %v", topic, err, ends.Error())
		}
		behind := func() bool {
			b := false
			ends.Each(func(o kadm.ListedOffset) {
				if next[o.Partition] < o.Offset {
					b = true
				}
			})
			return b
		}
		for behind() && rctx.Err() == nil {
			rd.PollFetches(rctx).EachRecord(func(r *kgo.Record) {
				have[string(r.Value)] = true
				next[r.Partition] = max(next[r.Partition], r.Offset+1)
			})
		}
		lost, explained = nil, nil
		for _, a := range acks {
			switch {
			case have[a.value]:
			case mayLose(a.at):
				explained = append(explained, a)
			default:
				lost = append(lost, a)
			}
		}
		if len(lost) == 0 || rctx.Err() != nil {
			return lost, explained
		}
		select {
		case <-rctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// leaderClaim is the highest leader epoch of a partition a broker has
// named itself leader at, and when that answer arrived.
type leaderClaim struct {
	broker int32
	epoch  int32
	at     time.Time
}

// leaderWatcher asks every broker of a cluster directly, every 100 ms,
// which partitions it names itself leader of and at which epoch. A broker
// that names itself leader at an epoch lower than one another broker (or
// it) named before the question was sent is a stale claim: a client
// asking it would produce to a leader that has already been replaced.
type leaderWatcher struct {
	mu      sync.Mutex
	highest map[string]leaderClaim // "topic-partition" → highest claim seen
	asked   int                    // answers read
	stale   []staleClaim
	stop    chan struct{}
	wg      sync.WaitGroup
}

// staleClaim is one stale leadership claim the watcher saw.
type staleClaim struct {
	topic     string
	partition int32
	at        time.Time // when the question was sent
	text      string
}

// watchLeaders starts a watcher of the brokers at addrs (node id - 1),
// asked over clients of their own, not through any test proxy.
func watchLeaders(t *testing.T, ctx context.Context, addrs []string) *leaderWatcher {
	w := &leaderWatcher{highest: map[string]leaderClaim{}, stop: make(chan struct{})}
	for i, addr := range addrs {
		id := int32(i + 1)
		cl := procClient(t, addr, kgo.RequestRetries(0))
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for {
				select {
				case <-w.stop:
					return
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
				w.ask(ctx, cl, id)
			}
		}()
	}
	t.Cleanup(w.halt)
	return w
}

// ask asks broker id for its metadata and checks its claims.
func (w *leaderWatcher) ask(ctx context.Context, cl *kgo.Client, id int32) {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	sent := time.Now()
	m, err := kmsg.NewPtrMetadataRequest().RequestWith(qctx, cl.Broker(-2147483648))
	if err != nil {
		return // killed, paused, restarting: no claim
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked++
	for _, mt := range m.Topics {
		if mt.Topic == nil {
			continue
		}
		for _, mp := range mt.Partitions {
			if mp.Leader != id {
				continue
			}
			key := fmt.Sprintf("%s-%d", *mt.Topic, mp.Partition)
			h, seen := w.highest[key]
			if seen && h.epoch > mp.LeaderEpoch && h.at.Before(sent) && len(w.stale) < 1000 {
				w.stale = append(w.stale, staleClaim{topic: *mt.Topic, partition: mp.Partition, at: sent,
					text: fmt.Sprintf("broker %d named itself leader of %s at epoch %d at %s, after broker %d had at epoch %d at %s",
						id, key, mp.LeaderEpoch, sent.Format("15:04:05.000"), h.broker, h.epoch, h.at.Format("15:04:05.000"))})
			}
			if !seen || mp.LeaderEpoch > h.epoch {
				w.highest[key] = leaderClaim{broker: id, epoch: mp.LeaderEpoch, at: now}
			}
		}
	}
}

// halt stops the watcher (idempotent).
func (w *leaderWatcher) halt() {
	w.mu.Lock()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// result stops the watcher and returns how many answers it read and the
// stale claims among them.
func (w *leaderWatcher) result() (asked int, stale []staleClaim) {
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.asked, slices.Clone(w.stale)
}
