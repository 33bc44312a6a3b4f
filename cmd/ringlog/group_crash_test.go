package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestGroupResumesAfterKillNine: a group member consumes and commits, the
// broker is killed with SIGKILL, and a new member of the same group on the
// restarted broker resumes exactly from the committed offsets: every
// record is consumed, none twice.
func TestGroupResumesAfterKillNine(t *testing.T) {
	dir := t.TempDir()
	ctx := deadlineCtx(t, 60*time.Second)
	b := startServe(t, dir, "--group-initial-rebalance-delay", "0s", "--group-min-session-timeout", "500ms")
	adm := kadm.NewClient(procClient(t, b.Kafka))
	if r, err := adm.CreateTopic(ctx, 3, 1, nil, "gk"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	prod := procClient(t, b.Kafka, kgo.DefaultProduceTopic("gk"))
	const n = 600
	for i := 0; i < n; i++ {
		prod.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("v%d", i))}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	group := func(addr string) *kgo.Client {
		return procClient(t, addr, kgo.ConsumerGroup("gk-group"), kgo.ConsumeTopics("gk"),
			kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(200*time.Millisecond),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	}
	seen := map[string]int{}
	c1 := group(b.Kafka)
	for len(seen) < n/2 && ctx.Err() == nil {
		fs := c1.PollRecords(ctx, 40)
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		if err := c1.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	committed := len(seen)
	b.kill() // SIGKILL: no clean shutdown, no leave
	c1.Close()

	b2 := startServe(t, dir, "--group-initial-rebalance-delay", "0s", "--group-min-session-timeout", "500ms")
	c2 := group(b2.Kafka)
	for len(seen) < n && ctx.Err() == nil {
		c2.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	if len(seen) != n {
		t.Fatalf("consumed %d of %d distinct records across the crash", len(seen), n)
	}
	for v, c := range seen {
		if c != 1 {
			t.Fatalf("%s consumed %d times: the restarted group did not resume from its %d committed records", v, c, committed)
		}
	}
}
