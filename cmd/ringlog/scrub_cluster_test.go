package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/wal/batch"
)

// TestScrubberHealsAFollower: three brokers, a topic of replication
// factor 3 in small segments; a byte flipped on disk in a follower's
// sealed segment is found by its scrubber, which truncates the follower
// at the damage; the follower fetches the rest again from its leader, and
// its log ends up with every record, every batch sound (read back from
// its files after it stops); consumers read every record meanwhile.
func TestScrubberHealsAFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of processes")
	}
	ringlogBinary(t)
	c := newTestCluster(t, 3)
	for id := 1; id <= 3; id++ {
		args := append(c.replicatedArgs(id), "--scrub-bytes-per-sec", "67108864", "--scrub-interval", "300ms")
		c.procs[id-1] = startServe(t, c.dirs[id-1], args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c.converge(ctx, 3)
	const topic, n = "healme", 400
	cl := procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	res, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 3, map[string]*string{"segment.bytes": kadm.StringPtr("4096"), "min.insync.replicas": kadm.StringPtr("2")}, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	view := c.waitFullISR(ctx, topic, 1, 3, 30*time.Second)
	value := func(i int) string { return fmt.Sprintf("v%04d-%s", i, strings.Repeat("x", 80)) }
	for i := 0; i < n; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	leader := view.Parts[0].Leader
	follower := int32(1)
	for follower == leader {
		follower++
	}
	dir := filepath.Join(c.dirs[follower-1], topic+"-0")
	// Wait for the follower to have every record, then damage a sealed
	// segment of its copy.
	waitFor(t, ctx, "the follower's copy to hold every record", func() bool {
		segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		return len(segs) >= 4 && logRecords(t, dir, false) >= n
	})
	segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	slices.Sort(segs)
	victim := segs[1]
	f, err := os.OpenFile(victim, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	f.ReadAt(b, 30) // the first batch's base timestamp: its CRC no longer matches
	b[0] ^= 0x08
	if _, err := f.WriteAt(b, 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p := c.procs[follower-1]
	waitFor(t, ctx, "the follower's scrubber to truncate at the damage", func() bool {
		return strings.Contains(p.stderr.String(), "truncated a follower at the damage")
	})
	if !strings.Contains(p.stderr.String(), "scrubber: a sealed segment is damaged") {
		t.Fatal("the heal was not preceded by the damage's log line")
	}
	// Healed: the follower fetches again up to the end.
	waitFor(t, ctx, "the follower to fetch the truncated records again", func() bool {
		return logRecords(t, dir, false) >= n
	})
	// Consumers read every record.
	rd := procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for i := 0; i < n; {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", i, n, ctx.Err())
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) != value(i) {
				t.Fatalf("record %d is %.8q", i, r.Value)
			}
			i++
		})
	}
	// The follower's files, after a clean stop: every batch sound, every
	// record there once, in order.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.done
	if got := logRecords(t, dir, true); got != n {
		t.Fatalf("the healed follower's files hold %d records, want %d", got, n)
	}
}

// logRecords reads a partition directory's segments from disk, in order,
// and returns how many records they hold up to the first batch that does
// not check; with strict, any damage or gap fails the test.
func logRecords(t *testing.T, dir string, strict bool) int {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	slices.Sort(segs)
	count, next := 0, int64(0)
	for _, path := range segs {
		data, err := os.ReadFile(path)
		if err != nil {
			if strict {
				t.Fatal(err)
			}
			return count
		}
		for len(data) >= batch.HeaderSize {
			size := int(batch.BatchLength(data)) + batch.LogOverhead
			if size > len(data) {
				break
			}
			h, err := batch.CheckStored(data[:size])
			if err != nil || h.BaseOffset != next {
				if strict {
					t.Fatalf("%s: batch at offset %d: %v (base %d, want %d)", path, next, err, h.BaseOffset, next)
				}
				return count
			}
			count += int(h.RecordCount)
			next = h.NextOffset()
			data = data[size:]
		}
	}
	return count
}
