package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// recLoc is where a record is (or was acknowledged to be).
type recLoc struct {
	Partition int32
	Offset    int64
}

func (l recLoc) String() string { return fmt.Sprintf("%d/%d", l.Partition, l.Offset) }

// logContents is everything a topic holds, read back through Kafka.
type logContents struct {
	byValue map[string]recLoc
	ends    []int64 // high watermark per partition
}

// readBackTopic lists the topic's start and end offsets, then reads every
// record of every partition from offset 0 to the high watermark with a
// fresh consumer. It fails the test when a partition does not start at 0,
// when offsets are not dense (each record's offset is the previous one
// plus one) or when a value appears twice anywhere in the topic.
func readBackTopic(t testing.TB, ctx context.Context, addr, topic string, parts int) logContents {
	t.Helper()
	adm := kadm.NewClient(procClient(t, addr))
	defer adm.Close()
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		t.Fatalf("list start offsets of %s: %v", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	c := logContents{byValue: map[string]recLoc{}, ends: make([]int64, parts)}
	nEnds := 0
	ends.Each(func(o kadm.ListedOffset) {
		if int(o.Partition) >= parts {
			t.Fatalf("%s: end offset listed for partition %d, the topic should have %d", topic, o.Partition, parts)
		}
		c.ends[o.Partition] = o.Offset
		nEnds++
	})
	if nEnds != parts {
		t.Fatalf("%s: %d partitions listed, want %d", topic, nEnds, parts)
	}
	starts.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Errorf("%s-%d: log start offset %d, want 0 (nothing was deleted)", topic, o.Partition, o.Offset)
		}
	})
	from := map[int32]kgo.Offset{}
	for p := 0; p < parts; p++ {
		from[int32(p)] = kgo.NewOffset().At(0)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	next := make([]int64, parts)
	caughtUp := func() bool {
		for p := range next {
			if next[p] < c.ends[p] {
				return false
			}
		}
		return true
	}
	gaps, dups := 0, 0
	for !caughtUp() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: reading back timed out at offsets %v, high watermarks %v", topic, next, c.ends)
		}
		fs.EachError(func(tp string, p int32, err error) {
			t.Fatalf("fetch %s-%d: %v", tp, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			p := r.Partition
			if r.Offset != next[p] {
				if gaps < 10 {
					t.Errorf("%s-%d: record at offset %d follows offset %d: offsets are not dense", topic, p, r.Offset, next[p]-1)
				}
				gaps++
			}
			next[p] = r.Offset + 1
			v := string(r.Value)
			if prev, ok := c.byValue[v]; ok {
				if dups < 10 {
					t.Errorf("%s: value %q stored twice: at %v and at %d/%d", topic, v, prev, p, r.Offset)
				}
				dups++
				return
			}
			c.byValue[v] = recLoc{p, r.Offset}
		})
	}
	for p := range next {
		if next[p] != c.ends[p] {
			t.Errorf("%s-%d: read up to offset %d, past the high watermark %d", topic, p, next[p], c.ends[p])
		}
	}
	if gaps > 0 || dups > 0 {
		t.Errorf("%s: %d offset gaps, %d duplicated values", topic, gaps, dups)
	}
	return c
}

// checkAcked fails the test for every acknowledged value that is missing
// or is somewhere other than where its acknowledgement said.
func checkAcked(t testing.TB, topic string, c logContents, acked map[string]recLoc) {
	t.Helper()
	var missing, moved []string
	for v, at := range acked {
		got, ok := c.byValue[v]
		switch {
		case !ok:
			missing = append(missing, v+"@"+at.String())
		case got != at:
			moved = append(moved, fmt.Sprintf("%s acked at %v, stored at %v", v, at, got))
		}
	}
	sort.Strings(missing)
	sort.Strings(moved)
	if len(missing) > 0 {
		t.Errorf("%s: %d of %d acknowledged records are missing, e.g. %s", topic, len(missing), len(acked), strings.Join(missing[:min(10, len(missing))], ", "))
	}
	if len(moved) > 0 {
		t.Errorf("%s: %d acknowledged records are not at their acknowledged offsets, e.g. %s", topic, len(moved), strings.Join(moved[:min(10, len(moved))], "; "))
	}
}

// checkTopicSurvived fails the test unless the topic still has parts
// partitions and the given config overrides.
func checkTopicSurvived(t testing.TB, ctx context.Context, addr, topic string, parts int, configs map[string]string) {
	t.Helper()
	adm := kadm.NewClient(procClient(t, addr))
	defer adm.Close()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil {
		t.Fatalf("topic %s after restart: present %v, err %v", topic, ok, d.Err)
	}
	if len(d.Partitions) != parts {
		t.Errorf("topic %s has %d partitions after restart, want %d", topic, len(d.Partitions), parts)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("describe configs: %v", err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe configs of %s: %v %v", topic, err, rc.Err)
	}
	for k, want := range configs {
		found := false
		for _, cfg := range rc.Configs {
			if cfg.Key != k {
				continue
			}
			found = true
			if cfg.MaybeValue() != want || cfg.Source != kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("topic %s config %s = %q (source %v), want %q set on the topic", topic, k, cfg.MaybeValue(), cfg.Source, want)
			}
		}
		if !found {
			t.Errorf("topic %s: config %s not described", topic, k)
		}
	}
}

func cfgStr(s string) *string { return &s }
