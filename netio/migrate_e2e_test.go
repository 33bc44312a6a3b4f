package netio_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestLiveProtocolMigration: a live classic group (two franz-go
// consumers, cooperative-sticky) takes a KIP-848 member without stopping:
// the group switches to the consumer protocol with its classic members,
// the newcomer gets its share once they let go, and when it leaves the
// group is classic again and the two share everything. Throughout, no
// record is lost or delivered twice (every hand-over waits for the
// previous owner's commit).
func TestLiveProtocolMigration(t *testing.T) {
	b := startBroker(t)
	const topic, group = "mig", "gmig"
	createTopic(t, b, topic, 6)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var produced atomic.Int64
	prodCtx, stopProducing := context.WithCancel(ctx)
	prod := b.client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		for i := 0; prodCtx.Err() == nil; i++ {
			for p := int32(0); p < 6; p++ {
				if err := prod.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte(fmt.Sprint(i))}).FirstErr(); err == nil {
					produced.Add(1)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	d := newDeliveries()
	var wg sync.WaitGroup
	consume := func(name string, opts ...kgo.Opt) *kgo.Client {
		opts = append(opts, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ClientID(name), kgo.FetchMaxWait(50*time.Millisecond),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(200*time.Millisecond), kgo.HeartbeatInterval(500*time.Millisecond))
		cl := b.client(opts...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				if fs.IsClientClosed() {
					return
				}
				fs.EachRecord(func(r *kgo.Record) { d.add(name, r) })
			}
		}()
		return cl
	}
	adm := kadm.NewClient(b.client())
	describe := func() kmsg.ConsumerGroupDescribeResponseGroup {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{group}
		resp, err := req.RequestWith(ctx, b.client())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Groups[0]
	}

	a, bb := consume("a"), consume("b")
	e2eWaitFor(t, 30*time.Second, "two classic members sharing six partitions", func() bool {
		o := d.owners()
		return o["a"] == 3 && o["b"] == 3
	})
	if l, err := adm.ListGroups(ctx); err != nil || l[group].GroupType != "classic" {
		t.Fatalf("before: ListGroups %+v %v", l[group], err)
	}

	joined := time.Now()
	c := consume("c", kgo.ServerSideBalancer())
	e2eWaitFor(t, 40*time.Second, "the KIP-848 member taking its two partitions", func() bool {
		o := d.owners()
		return o["a"] == 2 && o["b"] == 2 && o["c"] == 2
	})
	t.Logf("the consumer-protocol member was absorbed by the classic group in %v", time.Since(joined))
	g := describe()
	classic := 0
	for _, m := range g.Members {
		if m.MemberType == 0 {
			classic++
		}
	}
	if g.ErrorCode != 0 || len(g.Members) != 3 || classic != 2 {
		t.Fatalf("ConsumerGroupDescribe during the migration: %+v (%d classic members)", g, classic)
	}
	if l, err := adm.ListGroups(ctx); err != nil || l[group].GroupType != "consumer" {
		t.Fatalf("during: ListGroups %+v %v", l[group], err)
	}

	c.Close() // the last consumer-protocol member leaves: back to classic
	e2eWaitFor(t, 40*time.Second, "the classic members sharing everything again", func() bool {
		l, err := adm.ListGroups(ctx)
		o := d.owners()
		return err == nil && l[group].GroupType == "classic" && l[group].State == "Stable" && o["a"] == 3 && o["b"] == 3
	})

	stopProducing()
	pwg.Wait()
	total := produced.Load()
	e2eWaitFor(t, 30*time.Second, "every produced record consumed", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return int64(len(d.seen)) >= total
	})
	a.Close()
	bb.Close()
	cancel()
	wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	twice := 0
	for _, n := range d.seen {
		if n > 1 {
			twice++
		}
	}
	if int64(len(d.seen)) != total || twice != 0 {
		t.Fatalf("%d records produced, %d consumed, %d of them more than once", total, len(d.seen), twice)
	}
}
