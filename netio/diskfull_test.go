package netio_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/testenv"
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
