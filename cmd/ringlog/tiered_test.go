package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/s3test"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/tiered"
)

// tieredFlags are serve's flags for tiered storage on s3, copying and
// expiring often.
func tieredFlags(s3 *s3test.Server) []string {
	return []string{"--remote-storage-endpoint", s3.URL, "--remote-storage-bucket", s3test.Bucket,
		"--remote-log-manager-interval", "20ms", "--retention-check-interval", "50ms", "--remote-storage-request-timeout", "2s"}
}

// kill -9 while segments are being copied, again and again: every
// acknowledged record is read back from offset 0 (most of them from the
// store), offsets dense, and the store ends up holding each segment the
// manifest names exactly once (the interrupted copies' orphans are
// deleted).
func TestTieredKillNine(t *testing.T) {
	s3 := s3test.Start(t)
	// A slow store: each copy takes a while, so the kills land in them.
	s3.SetPutDelay(60 * time.Millisecond)
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	dir := t.TempDir()
	ctx := deadlineCtx(t, 300*time.Second)
	b := startServe(t, dir, tieredFlags(s3)...)
	addr := b.Kafka
	adm := kadm.NewClient(procClient(t, addr))
	cr, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{
		"remote.storage.enable": cfgStr("true"), "segment.bytes": cfgStr("32768"), "local.retention.bytes": cfgStr("65536"),
	}, "tiered")
	if err == nil {
		err = cr.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}

	prod := procClient(t, addr, kgo.DefaultProduceTopic("tiered"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(time.Millisecond))
	// A backlog the uploader can catch up with under -race on a loaded
	// machine (each copy: two puts, four fsyncs).
	load := startTieredLoad(ctx, prod, "t", 20*time.Millisecond)
	interrupted := 0 // starts that cleaned a copy the kill interrupted
	for cycle := range 4 {
		time.Sleep(time.Duration(400+150*cycle) * time.Millisecond)
		b.kill()
		b = restartOn(t, dir, addr, tieredFlags(s3)...)
		testenv.WaitFor(t, 10*time.Second, "the restarted broker's first copies", func() bool {
			return strings.Contains(b.stderr.String(), "tiered storage: copied segment")
		})
		if strings.Contains(b.stderr.String(), "removed an unfinished segment") {
			interrupted++
		}
	}
	if interrupted == 0 {
		t.Fatal("no kill interrupted a copy: the test did not test that")
	}
	waitMoreAcked(t, 500, "after the last restart", load.count)
	acked := load.halt(t, ctx, prod)
	n := len(acked)
	t.Logf("%d records acknowledged; %d of 4 kills interrupted a copy", n, interrupted)
	if n < 1000 {
		t.Fatalf("only %d records acknowledged", n)
	}

	// The copies catch up: the local log starts past 0.
	partDir := filepath.Join(dir, "tiered-0")
	testenv.WaitFor(t, 30*time.Second, "the local log start to pass 0", func() bool {
		o, err := adm.ListStartOffsets(ctx, "tiered")
		lo, lerr := localStart(ctx, adm)
		return err == nil && lerr == nil && lo > 0 && o["tiered"][0].Offset == 0
	})

	cons := procClient(t, addr, kgo.ConsumeTopics("tiered"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxPartitionBytes(64<<10))
	readDense(t, ctx, cons, func(_ int64, seen map[string]bool) bool { return len(seen) >= n && allSeen(acked, seen) })

	// The uploader catches up with everything produced.
	ends, err := adm.ListEndOffsets(ctx, "tiered")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("tiered", 0)
	waitCopiedUpTo(t, ctx, adm, prod, load, end.Offset)
	// No segment twice, no orphan: the store holds what the manifest
	// names (the last start's first pass cleans what a kill interrupted,
	// and again once a put sent before the kill can no longer land).
	testenv.WaitFor(t, 30*time.Second, "the store to hold exactly the manifest's segments", func() bool {
		m, err := tiered.LoadManifest(partDir)
		if err != nil {
			return false
		}
		want := map[string]bool{}
		for _, s := range m.Segments {
			if s.State != tiered.CopyFinished {
				return false
			}
			want[s.ID] = true
		}
		keys := s3.Keys(t)
		if len(keys) != 2*len(want) {
			return false
		}
		for _, k := range keys {
			id := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(k), ".log"), ".rix")
			if _, id, _ = strings.Cut(id, "-"); !want[id] {
				return false
			}
		}
		return true
	})
	// topic describe shows both starts and the tiered end.
	code, out, stderr := runBinary(t, 30*time.Second, "topic", "describe", "tiered", "--brokers", addr, "--output", "json")
	var desc []struct {
		Tiered     bool `json:"tiered"`
		Partitions []struct {
			Start       int64  `json:"start_offset"`
			LocalStart  *int64 `json:"local_start_offset"`
			TieredEnd   *int64 `json:"tiered_end_offset"`
			LocalBytes  *int64 `json:"local_bytes"`
			RemoteBytes *int64 `json:"remote_bytes"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(out), &desc); code != 0 || err != nil || len(desc) != 1 || !desc[0].Tiered {
		t.Fatalf("topic describe: exit %d, %v: %s %s", code, err, out, stderr)
	}
	if p := desc[0].Partitions[0]; p.Start != 0 || p.LocalStart == nil || *p.LocalStart <= 0 || p.TieredEnd == nil || *p.TieredEnd < *p.LocalStart ||
		p.LocalBytes == nil || *p.LocalBytes <= 0 || p.RemoteBytes == nil || *p.RemoteBytes <= 0 {
		t.Fatalf("topic describe: %s", out)
	}
	if _, err := os.Stat(filepath.Join(partDir, "00000000000000000000.log")); err == nil {
		t.Fatal("the first local segment is still there: nothing was deleted after its copy")
	}
}

func allSeen(acked, seen map[string]bool) bool {
	for v := range acked {
		if !seen[v] {
			return false
		}
	}
	return true
}

// localStart is partition 0's earliest local offset (ListOffsets -4).
func localStart(ctx context.Context, adm *kadm.Client) (int64, error) {
	o, err := adm.ListOffsetsAfterMilli(ctx, -4, "tiered")
	if err != nil {
		return 0, err
	}
	lo, ok := o.Lookup("tiered", 0)
	if !ok || lo.Err != nil {
		return 0, fmt.Errorf("no earliest local offset: %v", lo.Err)
	}
	return lo.Offset, nil
}

// tieredLoad produces numbered values padded to about 160 bytes, without
// waiting for their acknowledgements, and keeps those acknowledged.
type tieredLoad struct {
	mu    sync.Mutex
	acked map[string]bool
	stop  chan struct{}
	done  chan struct{}
}

// startTieredLoad starts producing with prod, padding values with fill
// and pausing for pause after every 50 records.
func startTieredLoad(ctx context.Context, prod *kgo.Client, fill string, pause time.Duration) *tieredLoad {
	l := &tieredLoad{acked: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		pad := strings.Repeat(fill, 150)
		for seq := 0; ; seq++ {
			select {
			case <-l.stop:
				return
			default:
			}
			v := fmt.Sprintf("%07d-%s", seq, pad)
			prod.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(_ *kgo.Record, err error) {
				if err == nil {
					l.add(v)
				}
			})
			if seq%50 == 49 {
				time.Sleep(pause)
			}
		}
	}()
	return l
}

// count is how many records were acknowledged so far.
func (l *tieredLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// add counts v as acknowledged.
func (l *tieredLoad) add(v string) {
	l.mu.Lock()
	l.acked[v] = true
	l.mu.Unlock()
}

// halt stops producing, flushes what is in flight and returns the
// values acknowledged so far (later add calls show in it too).
func (l *tieredLoad) halt(t *testing.T, ctx context.Context, prod *kgo.Client) map[string]bool {
	close(l.stop)
	<-l.done
	if err := prod.Flush(ctx); err != nil {
		t.Logf("flush: %v", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked
}

// waitCopiedUpTo waits until the store holds every offset of partition 0
// of "tiered" below end. Meanwhile it produces a 16 KiB record every
// 200 ms (those acknowledged go to load): the batches a client held back
// during an outage can fill the active segment, which is never copied,
// and a record more rolls it.
func waitCopiedUpTo(t *testing.T, ctx context.Context, adm *kadm.Client, prod *kgo.Client, load *tieredLoad, end int64) {
	t.Helper()
	var last string
	pad := strings.Repeat("p", 16<<10)
	for i := 0; ; i++ {
		o, err := adm.ListOffsetsAfterMilli(ctx, -5, "tiered")
		if err == nil {
			tiered, _ := o.Lookup("tiered", 0)
			last = fmt.Sprintf("latest tiered %d (%v), want %d", tiered.Offset, tiered.Err, end-1)
			if tiered.Err == nil && tiered.Offset+1 >= end {
				return
			}
		}
		if i == 900 || ctx.Err() != nil {
			t.Fatalf("the copies did not catch up: %s", last)
		}
		v := fmt.Sprintf("pad-%d-%s", i, pad)
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err == nil {
			load.add(v)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readDense polls cons from offset 0 of one partition until done says
// enough was read (the next offset, the values seen), failing the test on
// a fetch error or a gap in the offsets.
func readDense(t *testing.T, ctx context.Context, cons *kgo.Client, done func(next int64, seen map[string]bool) bool) {
	t.Helper()
	seen := map[string]bool{}
	next := int64(0)
	for !done(next, seen) {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records (up to offset %d): %v", len(seen), next, ctx.Err())
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("fetch: %v", fe.Err)
		}
		for _, r := range fs.Records() {
			if r.Offset != next {
				t.Fatalf("offset %d after %d: a gap", r.Offset, next-1)
			}
			next++
			seen[string(r.Value)] = true
		}
	}
}
