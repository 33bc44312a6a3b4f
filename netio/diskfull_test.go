//go:build linux

package netio_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/wal/batch"
)

// TestDiskFull fills a real (tmpfs) data directory with 64 KiB records,
// acks=all and acks=1: the produce that finds no room gets
// KAFKA_STORAGE_ERROR (never a hang), the broker keeps serving metadata
// and the other partitions' reads, and after the disk grows and the broker
// restarts, every acknowledged record is there, in order.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	const size = 32 << 20
	testenv.MountTmpfs(t, dir, size, false)
	b := startBroker(t, func(c *broker.Config) { c.Engine.DataDir = dir; c.Engine.Shards = 2 })
	ctx := testCtx(t, 5*time.Minute)
	b.e2eCreate(ctx, "full", 2, nil)
	b.e2eCreate(ctx, "other", 1, nil)
	rc := b.e2eRaw()
	if pr := rc.produceAcks("other", 0, -1, "kept"); pr.ErrorCode != 0 {
		t.Fatalf("produce: %v", kerr.ErrorForCode(pr.ErrorCode))
	}
	value := string(make([]byte, 64<<10))
	acked := map[int32][]int64{} // partition -> acked batches' base offsets
	var firstErr [2]int16
	start := time.Now()
	for i := 0; time.Since(start) < 3*time.Minute; i++ {
		p := int32(i % 2)
		if firstErr[p] != 0 {
			if firstErr[0] != 0 && firstErr[1] != 0 {
				break
			}
			continue
		}
		acks := int16(-1)
		if i%4 >= 2 {
			acks = 1
		}
		done := make(chan kmsg.ProduceResponseTopicPartition, 1)
		// Four 64 KiB records a request.
		go func() { done <- rc.produceAcks("full", p, acks, strconv.Itoa(i)+value, value, value, value) }()
		var pr kmsg.ProduceResponseTopicPartition
		select {
		case pr = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("produce %d hung on a full disk", i)
		}
		if pr.ErrorCode != 0 {
			if pr.ErrorCode != kerr.KafkaStorageError.Code {
				t.Fatalf("produce %d on a full disk: %v, want KAFKA_STORAGE_ERROR", i, kerr.ErrorForCode(pr.ErrorCode))
			}
			firstErr[p] = pr.ErrorCode
			continue
		}
		acked[p] = append(acked[p], pr.BaseOffset)
	}
	if firstErr[0] == 0 || firstErr[1] == 0 {
		t.Fatalf("%d and %d records acknowledged in a %d MiB file system without an error", len(acked[0]), len(acked[1]), size>>20)
	}
	t.Logf("acknowledged %d + %d batches of 4 × 64 KiB before the disk was full", len(acked[0]), len(acked[1]))
	// Still up: metadata answers, and the partition that did not fail
	// serves its records from the full disk.
	meta := rc.do(kmsg.NewPtrMetadataRequest(), 9).(*kmsg.MetadataResponse)
	if len(meta.Topics) == 0 {
		t.Fatal("no metadata on a full disk")
	}
	if fp := rc.rawFetch(12, "other", [16]byte{}, 0, 0); fp.ErrorCode != 0 || len(fp.RecordBatches) == 0 {
		t.Fatalf("fetch from a healthy partition on a full disk: %v, %d bytes", kerr.ErrorForCode(fp.ErrorCode), len(fp.RecordBatches))
	}
	apiVersionsOKOn(t, rc)

	// Grow the disk, restart: everything acknowledged is there.
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	b.B.Shutdown()
	b.B = nil
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, fmt.Sprintf("size=%d", 4*size)); err != nil {
		t.Fatalf("grow tmpfs: %v", err)
	}
	b.Start()
	rc = b.e2eRaw()
	for p := int32(0); p < 2; p++ {
		if pr := rc.produceAcks("full", p, -1, "after"); pr.ErrorCode != 0 {
			t.Fatalf("partition %d after restart: %v", p, kerr.ErrorForCode(pr.ErrorCode))
		}
		for _, off := range acked[p] {
			fp := rc.rawFetch(12, "full", [16]byte{}, p, off)
			if fp.ErrorCode != 0 {
				t.Fatalf("fetch %d-%d: %v", p, off, kerr.ErrorForCode(fp.ErrorCode))
			}
			if len(fp.RecordBatches) == 0 {
				t.Fatalf("acknowledged record %d-%d is gone after restart", p, off)
			}
		}
	}
}

// TestDiskFullComesBackWithoutRestart: a partition a full disk took
// offline used to answer errors until the broker restarted, long after
// space was freed. Now, once the disk has room again, it accepts appends
// by itself within the retry interval. An idempotent producer that ran
// into the full disk (its batch failed midway and is retried: the broker
// must not take the retry for a duplicate of the batch it could not
// write) gets every record written exactly once, after every record
// acknowledged before, at dense offsets.
func TestDiskFullComesBackWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	const size = 16 << 20
	testenv.MountTmpfs(t, dir, size, false)
	b := startBroker(t, func(c *broker.Config) {
		c.Engine.DataDir, c.Engine.Shards = dir, 1
		c.Engine.DiskFullRetry, c.Engine.DiskFullResumeBytes = 100*time.Millisecond, 1<<20
	})
	ctx := testCtx(t, 3*time.Minute)
	b.e2eCreate(ctx, "full", 1, nil)
	cl := b.client(kgo.DefaultProduceTopic("full"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }), kgo.ProducerLinger(0))
	// 24 MiB of 64 KiB records into a 16 MiB file system, one at a time
	// in flight so the one that meets the full disk is retried alone.
	const n = 384
	var wg sync.WaitGroup
	var prodErr atomic.Value
	value := make([]byte, 64<<10)
	rand.Read(value) // incompressible
	p := b.Eng.Topic("full").Partition(0)
	sent := 0
	for ; sent < n && p.Offline() == nil; sent++ {
		wg.Add(1)
		v := append([]byte(fmt.Sprintf("idem-%04d-", sent)), value...)
		cl.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				prodErr.Store(err)
			}
			wg.Done()
		})
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := cl.Flush(fctx)
		cancel()
		if err != nil && p.Offline() == nil {
			t.Fatal(err)
		}
	}
	if p.Offline() == nil {
		t.Fatalf("%d records of 64 KiB fit a %d MiB file system", n, size>>20)
	}
	t.Logf("the disk was full at record %d: %v", sent-1, p.Offline())
	// Still full: the partition stays offline while the producer retries.
	testenv.Holds(t, 300*time.Millisecond, "the partition offline on a disk still full", func() bool { return p.Offline() != nil })
	// Room again, no restart.
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, fmt.Sprintf("size=%d", 4*size)); err != nil {
		t.Fatalf("grow tmpfs: %v", err)
	}
	wg.Wait()
	if err := prodErr.Load(); err != nil {
		t.Fatalf("an idempotent produce across the full disk failed: %v", err)
	}
	rc := b.e2eRaw()
	next, i := int64(0), 0
	for i < sent {
		fp := rc.rawFetch(12, "full", [16]byte{}, 0, next)
		if fp.ErrorCode != 0 {
			t.Fatalf("fetch at %d: %v", next, kerr.ErrorForCode(fp.ErrorCode))
		}
		recs := fetchedRecords(t, fp.RecordBatches)
		if len(recs) == 0 {
			t.Fatalf("the log ends at %d; %d records were acknowledged", next, sent)
		}
		for _, r := range recs {
			if r.Offset != next {
				t.Fatalf("record at %d, want %d: offsets are not dense", r.Offset, next)
			}
			if want := fmt.Sprintf("idem-%04d-", i); string(r.Value[:len(want)]) != want {
				t.Fatalf("offset %d holds %q, want %q: a record lost or written twice", r.Offset, r.Value[:len(want)], want)
			}
			next++
			i++
		}
	}
	if end := p.HighWatermark(); end != int64(sent) {
		t.Fatalf("the log ends at %d, want %d records exactly once", end, sent)
	}
}

// fetchedRecord is one record of a fetch response's batches.
type fetchedRecord struct {
	Offset int64
	Value  []byte
}

// fetchedRecords decodes the records of a fetch response's record batches.
func fetchedRecords(t *testing.T, raw []byte) []fetchedRecord {
	t.Helper()
	var out []fetchedRecord
	for len(raw) >= batch.LogOverhead {
		n := int(batch.BatchLength(raw)) + batch.LogOverhead
		if n > len(raw) {
			break // a partial batch at the end of the response
		}
		h, err := batch.CheckStored(raw[:n])
		if err != nil {
			t.Fatal(err)
		}
		it, _, err := batch.Records(raw[:n], &h, nil)
		if err != nil {
			t.Fatal(err)
		}
		for r := range it.All() {
			out = append(out, fetchedRecord{h.BaseOffset + int64(r.OffsetDelta), r.Value})
		}
		raw = raw[n:]
	}
	return out
}
