package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/wal/batch"
)

// Stale leadership after a one-way cut (DESIGN invariant 7): a leader
// that cannot send to the other brokers (it still receives) steps down
// when no heartbeat reaches the controller, which elects another leader at
// a new epoch. When the cut heals, the old leader's metadata may still
// name it leader at the epoch it gave up; it used to lead at that epoch
// again for a few hundred milliseconds, acknowledge acks=1 records there
// and truncate them once the new metadata arrived.

// leadLine and leftLine are the engine's log lines of a partition's
// leadership starting and ending (pausing, while the metadata still names
// the broker, is neither).
var (
	leadLine = regexp.MustCompile(`^time=(\S+) .*msg="leading partition" partition=(\S+) leader_epoch=(\d+)`)
	leftLine = regexp.MustCompile(`msg="no longer leading partition" partition=(\S+)`)
)

// leadership is one broker taking a partition's leadership.
type leadership struct {
	broker    int
	at        time.Time
	partition string
	epoch     int
}

// staleLeadership reads the brokers' logs (logs[i] is broker i+1's) and
// returns every time one took a partition's leadership at an epoch it had
// already given up (led, then stopped leading: another leader or a newer
// epoch), or at an epoch below one another broker had led the partition
// at before: what a stale image makes a broker do.
func staleLeadership(logs []string) []string {
	var out []string
	var all []leadership
	for i, log := range logs {
		leading := map[string]int{}  // partition -> epoch it leads at now
		resigned := map[string]int{} // partition -> highest epoch it gave up
		sc := bufio.NewScanner(strings.NewReader(log))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := leadLine.FindStringSubmatch(line); m != nil {
				at, _ := time.Parse(time.RFC3339Nano, m[1])
				e, _ := strconv.Atoi(m[3])
				if r, ok := resigned[m[2]]; ok && e <= r {
					out = append(out, fmt.Sprintf("broker %d led %s at epoch %d, having given up epoch %d", i+1, m[2], e, r))
				}
				leading[m[2]] = e
				all = append(all, leadership{i + 1, at, m[2], e})
				continue
			}
			if m := leftLine.FindStringSubmatch(line); m != nil {
				if e, ok := leading[m[1]]; ok {
					resigned[m[1]] = max(resigned[m[1]], e)
					delete(leading, m[1])
				}
			}
		}
	}
	slices.SortFunc(all, func(a, b leadership) int { return a.at.Compare(b.at) })
	highest := map[string]leadership{}
	for _, l := range all {
		if h, ok := highest[l.partition]; ok && l.epoch < h.epoch {
			out = append(out, fmt.Sprintf("broker %d led %s at epoch %d at %s, after broker %d had led it at epoch %d at %s",
				l.broker, l.partition, l.epoch, l.at.Format("15:04:05.000"), h.broker, h.epoch, h.at.Format("15:04:05.000")))
			continue
		}
		highest[l.partition] = l
	}
	return out
}

func TestStaleLeadershipParser(t *testing.T) {
	one := `time=2026-01-01T00:00:01Z level=INFO msg="leading partition" partition=t-0 leader_epoch=3 log_end=5
time=2026-01-01T00:00:02Z level=INFO msg="pausing leadership of partition: this broker stepped down, the metadata still names it" partition=t-0 leader_epoch=3
time=2026-01-01T00:00:03Z level=INFO msg="leading partition" partition=t-0 leader_epoch=3 log_end=7
time=2026-01-01T00:00:04Z level=INFO msg="no longer leading partition" partition=t-0 leader=2 leader_epoch=4
time=2026-01-01T00:00:06Z level=INFO msg="leading partition" partition=t-0 leader_epoch=4 log_end=9`
	two := `time=2026-01-01T00:00:05Z level=INFO msg="leading partition" partition=t-0 leader_epoch=5 log_end=9`
	got := staleLeadership([]string{one, two})
	if len(got) != 1 || !strings.Contains(got[0], "broker 1 led t-0 at epoch 4 at 00:00:06.000, after broker 2 had led it at epoch 5") {
		t.Fatalf("staleLeadership: %q, want broker 1's lead at epoch 4 after broker 2's at 5 only", got)
	}
	three := one + "\n" + `time=2026-01-01T00:00:07Z level=INFO msg="no longer leading partition" partition=t-0 leader=2 leader_epoch=5
time=2026-01-01T00:00:08Z level=INFO msg="leading partition" partition=t-0 leader_epoch=4 log_end=9`
	if got := staleLeadership([]string{three}); len(got) != 1 || !strings.Contains(got[0], "having given up epoch 4") {
		t.Fatalf("staleLeadership: %q, want the lead at a given-up epoch", got)
	}
}

// TestOneWayCutNoStaleLeadership: three brokers, 3 partitions of
// replication factor 3 under idempotent acks=all producers and an acks=1
// producer; three times, partition 0's leader is cut off one way (every
// byte it sends to the other brokers is held, what they send arrives)
// past the session timeout, then healed. No broker ever leads a partition
// at an epoch it gave up, no acks=1 record acknowledged after a heal is
// lost, and the acks=all producers' records are all there
// (checkReplicatedLog).
func TestOneWayCutNoStaleLeadership(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of processes")
	}
	const topic, parts = "oneway", 3
	h := newReplHarness(t, topic, parts, 180*time.Second, 30*time.Second, 90*time.Second)

	// acks=1, to a topic of its own (the harness checks every record of
	// its topic against its producers): what a stale leader could
	// acknowledge and then lose.
	const topic1 = "oneway-acks1"
	adm := kadm.NewClient(procClient(t, h.c.kafka[0], kgo.SeedBrokers(h.c.kafka...)))
	if res, err := adm.CreateTopic(h.ctx, parts, 3, nil, topic1); err != nil || res.Err != nil {
		t.Fatalf("create %s: %v %v", topic1, err, res.Err)
	}
	h.c.waitFullISR(h.ctx, topic1, parts, 3, 30*time.Second)
	type ack struct {
		value     string
		partition int32
		offset    int64
		at        time.Time
	}
	var mu sync.Mutex
	var acks1 []ack
	acked1 := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acks1)
	}
	cl := procClient(t, h.c.kafka[0], kgo.SeedBrokers(h.c.kafka...), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
		kgo.DefaultProduceTopic(topic1), kgo.RecordDeliveryTimeout(20*time.Second))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			v := fmt.Sprintf("a1-%d", i)
			cl.Produce(h.ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err == nil {
					mu.Lock()
					acks1 = append(acks1, ack{v, r.Partition, r.Offset, time.Now()})
					mu.Unlock()
				}
			})
		}
	}()
	waitMoreAcked(t, 100, "with acks=1 before the first cut", acked1)
	// The windows from each heal to a second before the next cut: a
	// record acknowledged by a leader just before it was cut off, or
	// while it was and had not stepped down, may be lost (acks=1 promises
	// one copy until the followers fetched it; Kafka's the same), one
	// acknowledged in these windows never.
	var mutes, heals []time.Time
	for round := 1; round <= 3; round++ {
		id := h.view.Parts[0].Leader
		// The heal leaves the broker's Raft links slow for a while:
		// its heartbeats get through as soon as it hears the quorum
		// again, while its metadata is still what it was when it was
		// cut off (a catch-up takes several slow round trips).
		h.holdFault(fmt.Sprintf("(%d) cut partition 0's leader %d off one way", round, id), id, "muted", "the heal", true,
			func() { mutes = append(mutes, time.Now()); h.c.links.mute(id) },
			func() {
				// Cut off and stepped down, it sends its clients
				// elsewhere: it names itself leader of nothing, and
				// lists the other brokers.
				if m, err := metadataFrom(h.ctx, h.c.kafka[id-1]); err != nil {
					t.Errorf("metadata from the cut-off broker %d: %v", id, err)
				} else {
					for _, mt := range m.Topics {
						for _, mp := range mt.Partitions {
							if mp.Leader == id {
								t.Errorf("the cut-off broker %d still names itself leader of %s-%d at epoch %d", id, *mt.Topic, mp.Partition, mp.LeaderEpoch)
							}
						}
					}
					if len(m.Brokers) < 3 {
						t.Errorf("the cut-off broker %d lists %d brokers, want the other brokers too", id, len(m.Brokers))
					}
				}
				h.c.links.healSlowRaft(id, 300*time.Millisecond)
				heals = append(heals, time.Now())
				time.Sleep(3 * time.Second)
				h.c.links.heal()
			})
	}
	afterHeal := func(at time.Time) bool {
		for i, hl := range heals {
			if at.After(hl) && (i+1 == len(mutes) || at.Before(mutes[i+1].Add(-time.Second))) {
				return true
			}
		}
		return false
	}
	waitMoreAcked(t, 100, "with acks=1 after the last heal", acked1)
	close(stop)
	wg.Wait()
	cl.Flush(h.ctx)
	// Every acks=1 record acknowledged after a heal is in the log.
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	have := map[string]bool{}
	rd := procClient(t, h.c.kafka[0], kgo.SeedBrokers(h.c.kafka...), kgo.ConsumeTopics(topic1), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	mu.Lock()
	want := 0
	for _, a := range acks1 {
		if afterHeal(a.at) {
			want++
		}
	}
	mu.Unlock()
	// Read until every record that must survive is seen, or 15 s.
	mustHave := map[string]bool{}
	mu.Lock()
	for _, a := range acks1 {
		if afterHeal(a.at) {
			mustHave[a.value] = true
		}
	}
	mu.Unlock()
	seen := 0
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	for seen < len(mustHave) && rctx.Err() == nil {
		rd.PollFetches(rctx).EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if !have[v] && mustHave[v] {
				seen++
			}
			have[v] = true
		})
	}
	lost := 0
	mu.Lock()
	for _, a := range acks1 {
		if afterHeal(a.at) && !have[a.value] {
			if lost < 5 {
				t.Errorf("acks=1 record %s acknowledged at %s-%d offset %d after a heal is lost", a.value, topic1, a.partition, a.offset)
			}
			lost++
		}
	}
	mu.Unlock()
	if lost > 0 {
		t.Errorf("%d of %d acks=1 records acknowledged after a heal (before the next cut) are lost", lost, want)
	} else {
		t.Logf("%d acks=1 records acknowledged after a heal (before the next cut), all in the log", want)
	}
	acked, failed := h.prods.finish(h.ctx)
	if len(failed) > 0 {
		t.Errorf("%d acks=all records failed, e.g. %s", len(failed), someFailures(failed))
	}
	checkReplicatedLog(t, h.ctx, h.c, topic, parts, h.view, acked, h.prods.sentCounts())

	var logs []string
	for _, p := range h.c.procs {
		logs = append(logs, p.stderr.String())
	}
	if claims := staleLeadership(logs); len(claims) > 0 {
		t.Errorf("stale leadership: %s", strings.Join(claims, "; "))
	}

}

// TestResumedLeaderRefusesAtOnce: a leader paused past the session
// timeout has had its leadership moved by the time it resumes, but its
// metadata does not say so yet. A produce that waited in its socket
// during the pause is the first thing it handles on resuming; its
// leadership lease (a session from the last heartbeat the controller
// accepted) has lapsed, so it must refuse it, not acknowledge it at the
// epoch it no longer holds; and its Metadata must not name it leader.
func TestResumedLeaderRefusesAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of processes")
	}
	// The harness's acks=all producers write to their topic through it
	// all; the raw acks=1 produces go to a topic of their own.
	h := newReplHarness(t, "resume", 1, 120*time.Second, 30*time.Second, 60*time.Second)
	const topic = "resume-acks1"
	adm := kadm.NewClient(procClient(t, h.c.kafka[0], kgo.SeedBrokers(h.c.kafka...)))
	if res, err := adm.CreateTopic(h.ctx, 1, 3, nil, topic); err != nil || res.Err != nil {
		t.Fatalf("create %s: %v %v", topic, err, res.Err)
	}
	view := h.c.waitFullISR(h.ctx, topic, 1, 3, 30*time.Second)
	id := view.Parts[0].Leader
	p := h.c.procs[id-1]
	cl := procClient(t, h.c.kafka[id-1])
	seed := cl.Broker(-2147483648) // the seed: the leader itself
	acks1 := func(ctx context.Context, v string) (kmsg.ProduceResponseTopicPartition, error) {
		b := batch.NewBuilder()
		b.Add(time.Now().UnixMilli(), nil, []byte(v), nil)
		raw, err := b.Build(nil, batch.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = 1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = raw
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, seed)
		if err != nil {
			return kmsg.ProduceResponseTopicPartition{}, err
		}
		return resp.Topics[0].Partitions[0], nil
	}
	// Warm the connections a produce and a metadata request use.
	var warm kmsg.ProduceResponseTopicPartition
	var warmErr error
	if !testenv.Eventually(10*time.Second, func() bool {
		warm, warmErr = acks1(h.ctx, "before") // the new topic's leader may not have applied it yet
		return warmErr == nil && warm.ErrorCode == 0
	}) {
		t.Fatalf("produce to the leader %d before the pause: %v %v", id, warmErr, kerr.ErrorForCode(warm.ErrorCode))
	}
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(h.ctx, seed); err != nil {
		t.Fatal(err)
	}
	// Its Raft links held from the pause until well after it resumes:
	// the metadata that moves its leadership reaches it late (as after
	// a long pause over a busy network), while its heartbeats get
	// through at once.
	h.c.links.holdRaft(id)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			p.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	type answer struct {
		r   kmsg.ProduceResponseTopicPartition
		err error
	}
	prod := make(chan answer, 1)
	go func() {
		r, err := acks1(h.ctx, "during-the-pause")
		prod <- answer{r, err}
	}()
	meta := make(chan *kmsg.MetadataResponse, 1)
	go func() {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		m, err := req.RequestWith(h.ctx, seed)
		if err != nil {
			t.Errorf("metadata from the resumed broker: %v", err)
		}
		meta <- m
	}()
	// The other brokers fence it and elect a new leader.
	moved := h.c.waitLeadersMoved(h.ctx, topic, view, id, h.others(id), 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	resumedAt := time.Now()
	a := <-prod
	t.Logf("the produce queued during the pause: %v, offset %d (resumed %v ago)", kerr.ErrorForCode(a.r.ErrorCode), a.r.BaseOffset, time.Since(resumedAt))
	if a.err != nil {
		t.Fatalf("the produce queued during the pause: %v", a.err)
	}
	if a.r.ErrorCode == 0 {
		t.Errorf("broker %d, paused past the session timeout while broker %d took over at epoch %d, acknowledged an acks=1 produce at offset %d on resuming",
			id, moved.Parts[0].Leader, moved.Parts[0].Epoch, a.r.BaseOffset)
	} else if err := kerr.ErrorForCode(a.r.ErrorCode); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Errorf("the produce queued during the pause: %v, want NOT_LEADER_OR_FOLLOWER", err)
	}
	if m := <-meta; m != nil {
		for _, mt := range m.Topics {
			for _, mp := range mt.Partitions {
				if mp.Leader == id {
					t.Errorf("the resumed broker %d names itself leader of %s-%d at epoch %d", id, topic, mp.Partition, mp.LeaderEpoch)
				}
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	h.c.links.heal()
	h.view = h.c.waitFullISR(h.ctx, h.topic, 1, 3, 30*time.Second)
	acked, failed := h.prods.finish(h.ctx)
	if len(failed) > 0 {
		t.Errorf("%d acks=all records failed, e.g. %s", len(failed), someFailures(failed))
	}
	checkReplicatedLog(t, h.ctx, h.c, h.topic, 1, h.view, acked, h.prods.sentCounts())
}
