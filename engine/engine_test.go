package engine

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ringlog/ringlog/wal/batch"
)

func openTestEngine(t testing.TB, dir string, mod func(*Config)) *Engine {
	t.Helper()
	cfg := Config{DataDir: dir, AutoCreateTopics: true, DefaultPartitions: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), CompactionInterval: time.Hour}
	if mod != nil {
		mod(&cfg)
	}
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// appendSync appends one batch through the partition's shard and waits.
func appendSync(t *testing.T, p *Partition, data []byte, acks int16) AppendResult {
	t.Helper()
	h, err := batch.Validate(data, batch.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan AppendResult, 1)
	p.Shard().Append(&AppendRequest{Partition: p, Batches: [][]byte{data}, Headers: []batch.Header{h}, Acks: acks, Bytes: len(data),
		Done: func(r AppendResult) { done <- r }})
	return <-done
}

func TestOffsetsTopicStaysSmallUnder100kCommits(t *testing.T) {
	e := openTestEngine(t, t.TempDir(), func(c *Config) { c.WriteCaching = true })
	defer e.Close()
	co := e.Coordinator()
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "t", Partitions: 4, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	const commits = 100_000
	start := time.Now()
	for i := 0; i < commits; i++ {
		g := fmt.Sprintf("g%d", i%5)
		_, err := co.CommitOffsets(g, "", nil, -1, []OffsetCommit{{Topic: "t", Partition: int32(i % 4), Offset: int64(i)}})
		if err != nil {
			t.Fatal(err)
		}
		if i%20000 == 19999 {
			e.CompactNow()
		}
	}
	e.CompactNow()
	l, _ := co.topic.Partition(0).Log()
	size := l.Size()
	t.Logf("%d commits in %v; %s holds %d bytes in %d segments", commits, time.Since(start).Round(time.Millisecond), OffsetsTopic, size, l.SegmentCount())
	// 100k commits are ~10 MB of records; compaction keeps 20 keys plus
	// the active segment (at most segment.bytes of it).
	if size > 9<<20 {
		t.Fatalf("%s grew to %d bytes", OffsetsTopic, size)
	}
	// The newest commit of every key survives, also across a restart.
	check := func(co *Coordinator) {
		for g := 0; g < 5; g++ {
			got, err := co.FetchOffsets(fmt.Sprintf("g%d", g), map[string][]int32{"t": {0, 1, 2, 3}})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range got {
				// The last i with i%5==g and i%4==p.
				want := int64(-1)
				for i := commits - 1; i >= 0; i-- {
					if i%5 == g && int32(i%4) == f.Partition {
						want = int64(i)
						break
					}
				}
				if !f.Found || f.Offset != want {
					t.Fatalf("g%d partition %d: offset %d found=%v, want %d", g, f.Partition, f.Offset, f.Found, want)
				}
			}
		}
	}
	check(co)
	dir := e.cfg.DataDir
	e.Close()
	e2 := openTestEngine(t, dir, nil)
	defer e2.Close()
	check(e2.Coordinator())
}

func TestCompactedTopicShrinksAndKeepsNewest(t *testing.T) {
	e := openTestEngine(t, t.TempDir(), nil)
	defer e.Close()
	top, err := e.CreateTopic(CreateTopicRequest{Name: "compacted", Partitions: 1, ReplicationFactor: 1,
		Configs: map[string]string{"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}})
	if err != nil {
		t.Fatal(err)
	}
	p := top.Partition(0)
	for i := 0; i < 2000; i++ {
		b := batch.NewBuilder()
		b.Add(time.Now().UnixMilli(), []byte(fmt.Sprintf("key-%d", i%10)), []byte(fmt.Sprintf("value-%d", i)), nil)
		data, _ := b.Build(nil, batch.CodecNone)
		if r := appendSync(t, p, data, 1); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	l, _ := p.Log()
	before := l.Size()
	st := e.CompactNow()
	if st.RecordsPruned == 0 || l.Size() >= before/4 {
		t.Fatalf("compaction %+v: %d -> %d bytes", st, before, l.Size())
	}
}
