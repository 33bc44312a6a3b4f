package reliability

import (
	"context"
	"crypto/rand"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Overload limits: small enough that the bound is tight, as any
// operator's would be. The memory bound (README, "Memory") is
//
//	base + connections × connMemoryBound
//	     + 2 × ( shards × shard-queue-bytes
//	           + connections × max-request-bytes    (a paused frame each)
//	           + 2.5 × max-paused-bytes )           (gnet's inbound buffers)
//
// the 2 being the Go heap's headroom between collections (GOGC=100); one
// listener (the native one is off here).
const (
	ovlShards      = 2
	ovlQueue       = 8 << 20
	ovlMaxRequest  = 4 << 20
	ovlMaxPaused   = 16 << 20
	ovlProducers   = 4 // clients, half acks=1, half acks=all
	ovlRecordBytes = 64 << 10
	ovlBase        = 96 << 20
)

// ovlBound is the documented bound for these flags.
func ovlBound(conns int) int64 {
	live := int64(ovlShards*ovlQueue) + int64(conns)*ovlMaxRequest + ovlMaxPaused*5/2
	return ovlBase + int64(conns)*connMemoryBound + 2*live
}

// phase is one timed stretch of producing.
type phase struct {
	bytes atomic.Int64
	errs  atomic.Int64
	mu    sync.Mutex
	lat   []time.Duration
}

func (p *phase) add(d time.Duration, err error) {
	if err != nil {
		p.errs.Add(1)
		return
	}
	p.bytes.Add(ovlRecordBytes)
	p.mu.Lock()
	p.lat = append(p.lat, d)
	p.mu.Unlock()
}

func (p *phase) quantile(q float64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lat) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), p.lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// produceFor runs every client flat out for d, recording into ph.
func produceFor(ctx context.Context, clients []*kgo.Client, d time.Duration, ph *phase) {
	// Random bytes, and no compression (the clients are told): the same
	// value in every record of a batch would shrink to nothing.
	value := make([]byte, ovlRecordBytes-64)
	rand.Read(value)
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				start := time.Now()
				cl.Produce(ctx, &kgo.Record{Topic: "overload", Value: value}, func(_ *kgo.Record, err error) {
					ph.add(time.Since(start), err)
				})
			}
		}()
	}
	wg.Wait()
	for _, cl := range clients {
		cl.Flush(ctx)
	}
}

// TestOverload: producers at ten times the disk's speed, 64 KiB records,
// acks=1 and acks=all, for RINGLOG_OVERLOAD_SECONDS (10 by default; 60 in
// `make overload`). The broker's RSS stays under the bound derived from
// its flags, no produce fails, backpressure reaches the clients as delay
// (the broker does not set throttle_time_ms), and throughput recovers
// once the disk is fast again.
func TestOverload(t *testing.T) {
	secs := envInt(t, "RINGLOG_OVERLOAD_SECONDS", 10)
	figure := "not run"
	defer func() { result(t, fmt.Sprintf("overload %ds", secs), figure) }()
	b := startBroker(t,
		"--shards", fmt.Sprint(ovlShards),
		"--shard-queue-bytes", fmt.Sprint(ovlQueue),
		"--max-request-bytes", fmt.Sprint(ovlMaxRequest),
		"--max-paused-bytes", fmt.Sprint(ovlMaxPaused))
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second+3*time.Minute)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(b.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 4, 1, nil, "overload"); err != nil {
		t.Fatal(err)
	}
	var clients []*kgo.Client
	for i := range ovlProducers {
		opts := []kgo.Opt{kgo.SeedBrokers(b.addr), kgo.ProducerBatchMaxBytes(1 << 20),
			kgo.MaxBufferedRecords(64), kgo.ProducerLinger(0),
			kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}
		if i%2 == 0 {
			opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients = append(clients, cl)
	}
	idle, _ := b.rss()

	// Unthrottled: what the producers can do.
	var fast phase
	produceFor(ctx, clients, 3*time.Second, &fast)
	fastRate := fast.bytes.Load() / 3
	diskRate := max(fastRate/10, 1<<20)
	b.setRate(diskRate)

	// Overload: the disk takes a tenth of that.
	var slow phase
	var maxRSS atomic.Int64
	sampleDone := make(chan struct{})
	stopSample := make(chan struct{})
	go func() {
		defer close(sampleDone)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSample:
				return
			case <-tick.C:
				if r, _ := b.rss(); r > maxRSS.Load() {
					maxRSS.Store(r)
				}
			}
		}
	}()
	start := time.Now()
	produceFor(ctx, clients, time.Duration(secs)*time.Second, &slow)
	slowRate := slow.bytes.Load() * int64(time.Second) / int64(time.Since(start))
	close(stopSample)
	<-sampleDone
	_, hwm := b.rss()
	peak := max(maxRSS.Load(), hwm)

	// Recovery: a fast disk again.
	b.setRate(0)
	var after phase
	produceFor(ctx, clients, 3*time.Second, &after)
	afterRate := after.bytes.Load() / 3

	// franz-go keeps a produce connection and another for the rest per
	// client; one more client created the topic.
	bound := ovlBound(2*ovlProducers + 2)
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	figure = fmt.Sprintf("peak RSS %.0f MiB (bound %.0f, idle %.0f); MiB/s fast %.1f, disk %.1f, overloaded %.1f, after %.1f; p50/p99 fast %v/%v overloaded %v/%v",
		mib(peak), mib(bound), mib(idle), mib(fastRate), mib(diskRate), mib(slowRate), mib(afterRate),
		fast.quantile(0.5).Round(time.Millisecond), fast.quantile(0.99).Round(time.Millisecond),
		slow.quantile(0.5).Round(time.Millisecond), slow.quantile(0.99).Round(time.Millisecond))
	t.Log(figure)
	if peak > bound {
		t.Errorf("peak RSS %.0f MiB above the bound %.0f MiB", mib(peak), mib(bound))
	}
	if n := fast.errs.Load() + slow.errs.Load() + after.errs.Load(); n > 0 {
		t.Errorf("%d produces failed (overload must delay, not fail)", n)
	}
	// Backpressure: the clients were held to about the disk's rate, and
	// waited for it.
	if slowRate > 2*diskRate+ovlShards*ovlQueue/int64(secs) {
		t.Errorf("overloaded producers got %.1f MiB/s through a %.1f MiB/s disk", mib(slowRate), mib(diskRate))
	}
	if slow.quantile(0.5) < 2*fast.quantile(0.5) {
		t.Errorf("no backpressure delay: median latency %v overloaded, %v unthrottled", slow.quantile(0.5), fast.quantile(0.5))
	}
	// Recovered: well above the slowed disk's pace once the disk is fast
	// again (the real disk's speed on a shared machine varies too much
	// to ask for the first phase's rate exactly).
	if afterRate < 2*diskRate {
		t.Errorf("throughput did not recover: %.1f MiB/s after, %.1f before, %.1f while the disk was slowed", mib(afterRate), mib(fastRate), mib(slowRate))
	}
}
