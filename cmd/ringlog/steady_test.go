package main

// A long fault-free run of a replicated cluster at half its measured
// throughput, counting false failovers: with no fault injected, every
// leader change, fencing or step-down is one the session timeout and
// heartbeats caused under load (make steady).

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/cluster"
)

// steadyLoad produces 1 KiB acks=all records, uncompressed, to a topic
// from a few clients, as fast as they can (perSec 0) or paced at perSec
// in all.
type steadyLoad struct {
	acked, failed atomic.Int64
	stop          chan struct{}
	wg            sync.WaitGroup
}

func startSteadyLoad(t *testing.T, ctx context.Context, seeds []string, topic string, clients, perSec int) *steadyLoad {
	l := &steadyLoad{stop: make(chan struct{})}
	value := []byte(strings.Repeat("x", 1024))
	const tick = 10 * time.Millisecond
	for i := 0; i < clients; i++ {
		// Uncompressed: franz-go would snappy-compress by default, and
		// a repeated value would then cost the brokers next to nothing.
		cl := procClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.MaxBufferedRecords(4096), kgo.ProducerBatchCompression(kgo.NoCompression()))
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			done := func(_ *kgo.Record, err error) {
				if err != nil {
					l.failed.Add(1)
				} else {
					l.acked.Add(1)
				}
			}
			ticker := time.NewTicker(tick)
			defer ticker.Stop()
			// Paced: per tick, this client's share of perSec, carrying
			// the fraction over so the total rate is exact.
			var owed float64
			for {
				select {
				case <-l.stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				n := 64
				if perSec > 0 {
					select {
					case <-ticker.C:
					case <-l.stop:
						return
					}
					owed += float64(perSec) / float64(clients) * tick.Seconds()
					n = int(owed)
					owed -= float64(n)
				}
				for k := 0; k < n; k++ {
					cl.Produce(ctx, &kgo.Record{Value: value}, done)
				}
			}
		}()
	}
	t.Cleanup(l.halt)
	return l
}

func (l *steadyLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// failoverCounter polls one broker's Metadata (another when that one
// does not answer) and counts every leader epoch change and every ISR
// smaller than the replica set, across all topics (the internal ones
// too).
type failoverCounter struct {
	mu      sync.Mutex
	epochs  map[string]int32
	changes []string
	shrunk  map[string]bool // partitions seen with an incomplete ISR
	polls   int
}

func (f *failoverCounter) poll(ctx context.Context, clients []*kgo.Client) {
	for _, cl := range clients {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		m, err := kmsg.NewPtrMetadataRequest().RequestWith(qctx, cl.Broker(-2147483648))
		cancel()
		if err != nil {
			continue
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.polls++
		for _, mt := range m.Topics {
			if mt.Topic == nil {
				continue
			}
			for _, mp := range mt.Partitions {
				key := fmt.Sprintf("%s-%d", *mt.Topic, mp.Partition)
				if e, seen := f.epochs[key]; seen && e != mp.LeaderEpoch {
					f.changes = append(f.changes, fmt.Sprintf("%s %s: leader epoch %d -> %d (leader %d)",
						time.Now().Format("15:04:05.000"), key, e, mp.LeaderEpoch, mp.Leader))
				}
				f.epochs[key] = mp.LeaderEpoch
				if len(mp.ISR) < len(mp.Replicas) {
					f.shrunk[key] = true
				}
			}
		}
		return
	}
}

// TestReplicationSteady (RINGLOG_STEADY_DURATION=30m, make steady) runs
// three brokers with the default cluster timings, measures the highest
// acks=all rate three producers reach on a 6-partition RF 3 topic, then
// produces at half of it for the duration and fails on any leader change,
// fencing or step-down. RINGLOG_STEADY_REPORT names a file for the
// summary.
func TestReplicationSteady(t *testing.T) {
	d, _ := time.ParseDuration(os.Getenv("RINGLOG_STEADY_DURATION"))
	if d <= 0 {
		t.Skip("set RINGLOG_STEADY_DURATION (make steady) to run the false-failover check")
	}
	const topic, parts, producers = "steady", 6, 3
	ringlogBinary(t)
	c := newTestCluster(t, 3)
	for id := 1; id <= 3; id++ {
		// Default cluster timings; retention checked often, so that the
		// topic's retention.bytes keeps the disk from filling up.
		c.procs[id-1] = startServe(t, c.dirs[id-1], append(c.args(id, c.voters), "--retention-check-interval", "5s")...)
	}
	ctx := deadlineCtx(t, d+10*time.Minute)
	c.converge(ctx, 3)
	adm := kadm.NewClient(procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...)))
	// 50k records/s of 1 KiB is 9 TB a day on three replicas: keep
	// 256 MiB a partition.
	res, err := adm.CreateTopic(ctx, parts, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2"),
		"retention.bytes": kadm.StringPtr("268435456"), "segment.bytes": kadm.StringPtr("67108864")}, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	c.waitFullISR(ctx, topic, parts, 3, 30*time.Second)

	// The highest rate: 5 s to warm up, 20 s measured.
	maxLoad := startSteadyLoad(t, ctx, c.kafka, topic, producers, 0)
	time.Sleep(5 * time.Second)
	a0 := maxLoad.acked.Load()
	time.Sleep(20 * time.Second)
	maxRate := float64(maxLoad.acked.Load()-a0) / 20
	maxLoad.halt()
	rate := int(maxRate / 2)
	t.Logf("max acks=all rate %.0f records/s (1 KiB); running at %d records/s for %v", maxRate, rate, d)
	time.Sleep(2 * time.Second) // let the buffered records drain

	counter := &failoverCounter{epochs: map[string]int32{}, shrunk: map[string]bool{}}
	var pollers []*kgo.Client
	for _, addr := range c.kafka {
		pollers = append(pollers, procClient(t, addr, kgo.RequestRetries(0)))
	}
	counter.poll(ctx, pollers) // the epochs before the run
	start := time.Now()
	load := startSteadyLoad(t, ctx, c.kafka, topic, producers, rate)
	ticker := time.NewTicker(250 * time.Millisecond)
	for time.Since(start) < d {
		<-ticker.C
		counter.poll(ctx, pollers)
	}
	ticker.Stop()
	load.halt()
	elapsed := time.Since(start)

	logged := map[string]int{}
	for _, p := range c.procs {
		for _, line := range strings.Split(p.stderr.String(), "\n") {
			for _, what := range []string{"fencing a broker that missed its heartbeats", "stepping down from partition leadership", "heartbeat not accepted", "asking the controller to change an ISR"} {
				if strings.Contains(line, what) {
					logged[what]++
				}
			}
		}
	}
	counter.mu.Lock()
	changes, polls, shrunk := counter.changes, counter.polls, len(counter.shrunk)
	counter.mu.Unlock()
	report := fmt.Sprintf("steady run: %v at %d records/s of 1 KiB acks=all, uncompressed (half of the measured max %.0f/s), 3 brokers, session timeout %v, heartbeat %v\n"+
		"acknowledged %d (%.0f/s), failed %d\n"+
		"metadata polls %d, leader changes %d, partitions seen with a shrunk ISR %d\n"+
		"broker logs: fencings %d, step-downs %d, heartbeats not accepted %d, ISR change requests %d\n",
		elapsed.Round(time.Second), rate, maxRate, cluster.DefaultSessionTimeout, cluster.DefaultHeartbeatInterval,
		load.acked.Load(), float64(load.acked.Load())/elapsed.Seconds(), load.failed.Load(),
		polls, len(changes), shrunk,
		logged["fencing a broker that missed its heartbeats"], logged["stepping down from partition leadership"],
		logged["heartbeat not accepted"], logged["asking the controller to change an ISR"])
	for _, ch := range changes {
		report += "  " + ch + "\n"
	}
	t.Log(report)
	if path := os.Getenv("RINGLOG_STEADY_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
	if len(changes) > 0 || logged["fencing a broker that missed its heartbeats"] > 0 || logged["stepping down from partition leadership"] > 0 {
		t.Errorf("false failovers in a fault-free run: %d leader changes, %d fencings, %d step-downs",
			len(changes), logged["fencing a broker that missed its heartbeats"], logged["stepping down from partition leadership"])
	}
	if load.failed.Load() > 0 {
		t.Errorf("%d records failed in a fault-free run", load.failed.Load())
	}
}
