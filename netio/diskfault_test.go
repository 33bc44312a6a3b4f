package netio_test

// Disk faults injected through the file layer (internal/faultring wraps
// every writer shard's I/O backend): a write or an fdatasync failing with
// EIO or ENOSPC. The produce gets KAFKA_STORAGE_ERROR, the partition goes
// offline until restart (a failed fdatasync is never retried into an
// acknowledgement: the fsyncgate lesson), the broker keeps serving its
// other partitions and metadata, and a restart recovers every
// acknowledged record.

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/faultring"
)

// produceAcks sends one batch of values to topic/partition with acks and
// returns the partition's answer (acks=0 is not used here).
func (r *e2eConn) produceAcks(topic string, partition int32, acks int16, values ...string) kmsg.ProduceResponseTopicPartition {
	r.t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = acks
	req.TimeoutMillis = 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = e2eBatch(r.t, 0, time.Now().UnixMilli(), -1, -1, -1, values...)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := r.do(req, 9).(*kmsg.ProduceResponse)
	return resp.Topics[0].Partitions[0]
}

// faultBroker starts a one-shard broker whose backend the injector wraps,
// with topics "f" (the one that fails) and "ok" (another partition on the
// same shard).
func faultBroker(t *testing.T) (*testBroker, *faultring.Injector) {
	t.Helper()
	inj := faultring.New()
	b := startBroker(t, withEngine(func(c *engine.Config) {
		c.Shards = 1
		c.WrapBackend = inj.Wrap
	}))
	ctx := testCtx(t, 30*time.Second)
	b.e2eCreate(ctx, "f", 1, nil)
	b.e2eCreate(ctx, "ok", 1, nil)
	return b, inj
}

// stopUnclean shuts the broker down expecting an error (a failed log
// does not close cleanly) and returns it.
func stopUnclean(t *testing.T, b *testBroker) error {
	t.Helper()
	err := b.B.Shutdown()
	b.B = nil
	return err
}

// checkRecovered restarts the broker with a healthy disk and checks that
// topic f holds exactly the acknowledged values first, in order.
func checkRecovered(t *testing.T, b *testBroker, acked []string) {
	t.Helper()
	b.Config.Engine.WrapBackend = nil
	b.Start()
	ctx := testCtx(t, 30*time.Second)
	rc := b.e2eRaw()
	// The partition is back online and takes appends again.
	if pr := rc.produceAcks("f", 0, -1, "after-restart"); pr.ErrorCode != 0 {
		t.Fatalf("produce after restart: %v", kerr.ErrorForCode(pr.ErrorCode))
	}
	want := append(append([]string{}, acked...), "after-restart")
	got := b.e2eConsume(ctx, "f", len(want), kgo.FetchMaxWait(100*time.Millisecond))
	for i, w := range want {
		if g := string(got[i].Value); g != w || got[i].Offset != int64(i) {
			t.Fatalf("record %d after restart: %q at offset %d, want %q at %d", i, g, got[i].Offset, w, i)
		}
	}
}

func TestDiskFaultWriteEIO(t *testing.T) {
	for _, tear := range []bool{false, true} {
		t.Run(fmt.Sprintf("torn=%v", tear), func(t *testing.T) {
			b, inj := faultBroker(t)
			rc := b.e2eRaw()
			var acked []string
			for i := range 5 {
				v := fmt.Sprintf("v%d", i)
				if pr := rc.produceAcks("f", 0, -1, v); pr.ErrorCode != 0 {
					t.Fatalf("produce %s: %v", v, kerr.ErrorForCode(pr.ErrorCode))
				}
				acked = append(acked, v)
			}
			inj.FailWrite(1, syscall.EIO, tear)
			if pr := rc.produceAcks("f", 0, 1, "lost"); pr.ErrorCode != kerr.KafkaStorageError.Code {
				t.Fatalf("produce on a failing disk: %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(pr.ErrorCode))
			}
			// Sticky: the disk works again, the partition still refuses.
			if pr := rc.produceAcks("f", 0, 1, "refused"); pr.ErrorCode != kerr.KafkaStorageError.Code {
				t.Fatalf("produce after a failed write: %v, want KAFKA_STORAGE_ERROR until restart", kerr.ErrorForCode(pr.ErrorCode))
			}
			// The broker stays up: other partitions take appends, metadata
			// answers and shows the failed one without a leader.
			if pr := rc.produceAcks("ok", 0, -1, "fine"); pr.ErrorCode != 0 {
				t.Fatalf("produce to a healthy partition: %v", kerr.ErrorForCode(pr.ErrorCode))
			}
			meta := rc.do(kmsg.NewPtrMetadataRequest(), 9).(*kmsg.MetadataResponse)
			leaderless := 0
			for _, mt := range meta.Topics {
				if mt.Topic != nil && *mt.Topic == "f" && mt.Partitions[0].ErrorCode == kerr.LeaderNotAvailable.Code {
					leaderless++
				}
			}
			if leaderless != 1 {
				t.Fatalf("metadata does not show f-0 offline: %+v", meta.Topics)
			}
			if err := stopUnclean(t, b); err == nil {
				t.Fatal("shutdown after a failed write reported a clean close")
			}
			checkRecovered(t, b, acked)
		})
	}
}

func TestDiskFaultSyncEIOIsSticky(t *testing.T) {
	b, inj := faultBroker(t)
	rc := b.e2eRaw()
	var acked []string
	for i := range 3 {
		v := fmt.Sprintf("v%d", i)
		if pr := rc.produceAcks("f", 0, -1, v); pr.ErrorCode != 0 {
			t.Fatalf("produce %s: %v", v, kerr.ErrorForCode(pr.ErrorCode))
		}
		acked = append(acked, v)
	}
	inj.FailSync(1, syscall.EIO)
	if pr := rc.produceAcks("f", 0, -1, "unsynced"); pr.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("acks=all produce whose fdatasync failed: %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(pr.ErrorCode))
	}
	syncs := inj.Syncs()
	// No later write on that log is acknowledged, durable or not, and
	// none is retried into a sync that would "succeed" on pages the
	// kernel already dropped.
	for _, acks := range []int16{-1, 1} {
		if pr := rc.produceAcks("f", 0, acks, "after"); pr.ErrorCode != kerr.KafkaStorageError.Code {
			t.Fatalf("acks=%d produce after a failed fdatasync: %v, want KAFKA_STORAGE_ERROR until restart", acks, kerr.ErrorForCode(pr.ErrorCode))
		}
	}
	if inj.Syncs() != syncs {
		t.Fatalf("the failed log was fdatasync'ed again (%d syncs, had %d)", inj.Syncs(), syncs)
	}
	if err := stopUnclean(t, b); err == nil {
		t.Fatal("shutdown after a failed fdatasync reported a clean close")
	}
	checkRecovered(t, b, acked)
}

func TestDiskFaultFullDiskInjected(t *testing.T) {
	b, inj := faultBroker(t)
	rc := b.e2eRaw()
	if pr := rc.produceAcks("f", 0, -1, "v0"); pr.ErrorCode != 0 {
		t.Fatalf("produce: %v", kerr.ErrorForCode(pr.ErrorCode))
	}
	inj.FailAllWrites(syscall.ENOSPC)
	done := make(chan int16, 1)
	go func() { done <- rc.produceAcks("f", 0, -1, "no-room").ErrorCode }()
	select {
	case code := <-done:
		if code != kerr.KafkaStorageError.Code {
			t.Fatalf("produce on a full disk: %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(code))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("produce on a full disk hung")
	}
	inj.Heal()
	stopUnclean(t, b)
	checkRecovered(t, b, []string{"v0"})
}

// TestDiskFaultFlushIntervalSync: the fdatasync that flush.ms runs in the
// background fails; the partition goes offline as after a failed append,
// and no later produce to it is acknowledged.
func TestDiskFaultFlushIntervalSync(t *testing.T) {
	b, inj := faultBroker(t)
	ms := "50"
	b.e2eCreate(testCtx(t, 30*time.Second), "fl", 1, map[string]*string{"flush.ms": &ms})
	rc := b.e2eRaw()
	inj.FailSync(1, syscall.EIO)
	if pr := rc.produceAcks("fl", 0, 1, "v0"); pr.ErrorCode != 0 {
		t.Fatalf("produce: %v", kerr.ErrorForCode(pr.ErrorCode))
	}
	p := b.e2ePart("fl", 0)
	e2eWaitFor(t, 10*time.Second, "the failed flush.ms sync to take fl-0 offline", func() bool { return p.Offline() != nil })
	if pr := rc.produceAcks("fl", 0, 1, "after"); pr.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("produce after a failed background sync: %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(pr.ErrorCode))
	}
	if pr := rc.produceAcks("ok", 0, -1, "fine"); pr.ErrorCode != 0 {
		t.Fatalf("produce to a healthy partition: %v", kerr.ErrorForCode(pr.ErrorCode))
	}
	stopUnclean(t, b)
}
