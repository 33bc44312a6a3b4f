package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareConfig is one run of the share-group benchmark: Records records
// of ValueBytes on a topic of one partition, consumed by a share group
// (KIP-932) of each of Consumers in turn, every record accepted.
type ShareConfig struct {
	Brokers    []string
	Consumers  []int
	Records    int
	ValueBytes int
	// Work is each record's processing time in its consumer (a sleep per
	// polled batch of that many records' worth): what a queue spreads.
	Work time.Duration
	// MaxRecords is what each consumer's fetch asks for (kgo's
	// ShareMaxRecords; its default is 500).
	MaxRecords int
	Rounds     int
}

// ShareResult is one round with one consumer count.
type ShareResult struct {
	Consumers int     `json:"consumers"`
	Round     int     `json:"round"`
	Records   int     `json:"records"`
	WorkUs    float64 `json:"work_us"`
	MaxRecs   int     `json:"max_records"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"records_per_sec"`
	// Redelivered counts deliveries beyond the first (none expected: no
	// lock expires and no consumer fails here).
	Redelivered int `json:"redelivered"`
	// Busiest is the largest share of the records one consumer took.
	Busiest float64 `json:"busiest_share"`
}

// JSON is the result as one JSON line.
func (r ShareResult) JSON() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// RunShare runs every consumer count for every round, reporting each.
func RunShare(ctx context.Context, c ShareConfig, report func(ShareResult)) error {
	for _, n := range c.Consumers {
		for round := 1; round <= c.Rounds; round++ {
			r, err := shareRound(ctx, c, n, round)
			if err != nil {
				return fmt.Errorf("%d consumers round %d: %w", n, round, err)
			}
			report(r)
		}
	}
	return nil
}

func shareRound(ctx context.Context, c ShareConfig, consumers, round int) (ShareResult, error) {
	res := ShareResult{Consumers: consumers, Round: round, Records: c.Records, WorkUs: float64(c.Work.Microseconds()), MaxRecs: c.MaxRecords}
	suffix := fmt.Sprintf("%d-%d-%d", consumers, round, time.Now().UnixNano())
	topic, group := "ringlog-perf-share-"+suffix, "ringlog-perf-share-"+suffix
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...))
	if err != nil {
		return res, err
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	if r, err := adm.CreateTopic(ctx, 1, -1, nil, topic); err != nil || r.Err != nil {
		return res, fmt.Errorf("create %s: %v %v", topic, err, r.Err)
	}
	defer adm.DeleteTopics(context.Background(), topic) //nolint:errcheck // best-effort cleanup
	defer adm.DeleteGroup(context.Background(), group)  //nolint:errcheck // best-effort cleanup
	if err := setShareReset(ctx, admin, group); err != nil {
		return res, err
	}
	// The records are there before the consumers start: the run measures
	// consuming, not producing.
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return res, err
	}
	value := make([]byte, c.ValueBytes)
	for i := 0; i < c.Records; i++ {
		prod.Produce(ctx, &kgo.Record{Value: value}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		prod.Close()
		return res, err
	}
	prod.Close()

	var seen sync.Map // offset -> struct{}
	var got, dup atomic.Int64
	per := make([]atomic.Int64, consumers)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	done := make(chan struct{})
	var once sync.Once
	for i := range consumers {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.ShareMaxRecords(int32(max(c.MaxRecords, 1))))
		if err != nil {
			return res, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			for rctx.Err() == nil {
				fs := cl.PollFetches(rctx)
				n := 0
				fs.EachRecord(func(r *kgo.Record) {
					n++
					if _, loaded := seen.LoadOrStore(r.Offset, struct{}{}); loaded {
						dup.Add(1)
					} else if got.Add(1) == int64(c.Records) {
						once.Do(func() { close(done) })
					}
					r.Ack(kgo.AckAccept)
				})
				per[i].Add(int64(n))
				if c.Work > 0 && n > 0 {
					time.Sleep(time.Duration(n) * c.Work)
				}
				if n > 0 {
					if err := cl.FlushAcks(rctx); err != nil && rctx.Err() == nil {
						return
					}
				}
			}
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
		cancel()
		wg.Wait()
		return res, ctx.Err()
	case <-time.After(10 * time.Minute):
		cancel()
		wg.Wait()
		return res, fmt.Errorf("only %d of %d records consumed in 10 minutes", got.Load(), c.Records)
	}
	res.Seconds = time.Since(start).Seconds()
	cancel()
	wg.Wait()
	res.PerSecond = float64(c.Records) / res.Seconds
	res.Redelivered = int(dup.Load())
	for i := range per {
		res.Busiest = max(res.Busiest, float64(per[i].Load())/float64(c.Records))
	}
	return res, nil
}

// setShareReset makes the group start at the partition's beginning
// (share.auto.offset.reset=earliest, a GROUP config).
func setShareReset(ctx context.Context, cl *kgo.Client, group string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	v := "earliest"
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Value = "share.auto.offset.reset", &v
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if len(resp.Resources) != 1 {
		return fmt.Errorf("set share.auto.offset.reset: %d resources answered", len(resp.Resources))
	}
	return kerr.ErrorForCode(resp.Resources[0].ErrorCode)
}
