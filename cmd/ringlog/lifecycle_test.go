package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
)

// cleanMarker is the file engine.Close leaves in a data directory it
// closed cleanly (engine.cleanShutdownFile).
const cleanMarker = ".ringlog-clean-shutdown"

// TestGracefulShutdown sends SIGTERM while a producer is producing, one
// consumer tails the topic being produced to and another consumer's fetch
// is parked in a long poll on an idle topic (both with a 1 s MaxWait, as
// TestGracefulShutdownAnswersParkedFetch covers long ones). The process
// must exit 0 within a few seconds with every request answered, leave the
// clean-shutdown marker, and a restart must start clean with every
// acknowledged record readable exactly once; the records the producer
// still had in flight are delivered to the restarted broker.
func TestGracefulShutdown(t *testing.T) {
	const topic, idle, parts = "graceful", "idle", 2
	dir := t.TempDir()
	ctx := deadlineCtx(t, 60*time.Second)
	b := startServe(t, dir, "--default-partitions", "2")
	addr := b.Kafka

	adm := kadm.NewClient(procClient(t, addr))
	if _, err := adm.CreateTopic(ctx, parts, 1, nil, idle); err != nil {
		t.Fatalf("create %s: %v", idle, err)
	}

	acks := newAckTracker()
	prod := procClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	var first []*kgo.Record
	for i := 0; i < 200; i++ {
		first = append(first, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("before-%04d", i))})
	}
	for _, r := range prod.ProduceSync(ctx, first...) {
		acks.promise(r.Record, r.Err)
		if r.Err != nil {
			t.Fatalf("produce before shutdown: %v", r.Err)
		}
	}

	// A consumer tailing the topic, and one parked on an idle topic with
	// a long MaxWait.
	tailer := procClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(time.Second))
	parked := procClient(t, addr, kgo.ConsumeTopics(idle), kgo.FetchMaxWait(time.Second))
	var wg sync.WaitGroup
	stopConsumers := make(chan struct{})
	var tailed sync.Map
	for _, c := range []*kgo.Client{tailer, parked} {
		wg.Add(1)
		go func(c *kgo.Client) {
			defer wg.Done()
			for {
				pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				fs := c.PollFetches(pctx)
				cancel()
				fs.EachRecord(func(r *kgo.Record) { tailed.Store(string(r.Value), true) })
				select {
				case <-stopConsumers:
					return
				default:
				}
			}
		}(c)
	}

	// A producer that keeps going through the shutdown.
	stopProd := make(chan struct{})
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for i := 0; ; i++ {
			select {
			case <-stopProd:
				return
			default:
			}
			prod.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("during-%06d", i))}, acks.promise)
			time.Sleep(500 * time.Microsecond)
		}
	}()

	// Let the tailer catch up and the parked fetch park.
	testenv.WaitFor(t, 10*time.Second, "the tailing consumer to read the first records", func() bool {
		_, ok := tailed.Load("before-0199")
		return ok
	})
	waitParkedFetch(t, b)

	code, took, err := b.signal(syscall.SIGTERM, 15*time.Second)
	_, markerErr := os.Stat(filepath.Join(dir, cleanMarker))
	close(stopProd)
	<-prodDone
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGTERM: exit %d after %v", code, took.Round(time.Millisecond))
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, lastChars(b.stderr.String(), 3000))
	}
	if markerErr != nil {
		t.Errorf("no clean-shutdown marker right after exit: %v", markerErr)
	}
	stderr := b.stderr.String()
	if !strings.Contains(stderr, "engine stopped") || !strings.Contains(stderr, "clean=true") {
		t.Errorf("the log does not say the engine stopped clean:\n%s", lastChars(stderr, 3000))
	}
	// The fetches wait at most 1 s; --shutdown-timeout is 10 s.
	if took > 8*time.Second {
		t.Errorf("SIGTERM took %v to stop the broker, want a few seconds", took.Round(time.Millisecond))
	}
	if strings.Contains(stderr, "not every request was answered") {
		t.Errorf("shutdown gave up on requests in flight:\n%s", lastChars(stderr, 3000))
	}

	// Restart on the same port: the producer delivers what it still holds.
	b = restartOn(t, dir, addr, "--default-partitions", "2")
	if !strings.Contains(b.stderr.String(), "start=clean") {
		t.Errorf("restart after SIGTERM did not log start=clean:\n%s", lastChars(b.stderr.String(), 3000))
	}
	if _, err := os.Stat(filepath.Join(dir, cleanMarker)); err == nil {
		t.Errorf("the clean-shutdown marker is still there while the broker runs")
	}
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err = prod.Flush(fctx)
	cancel()
	if err != nil {
		t.Fatalf("producer did not settle after the restart: %v", err)
	}
	close(stopConsumers)
	wg.Wait()
	acked, failed := acks.snapshot()
	if len(failed) > 0 {
		t.Errorf("%d records failed", len(failed))
	}
	got := readBackTopic(t, ctx, addr, topic, parts)
	checkAcked(t, topic, got, acked)
	t.Logf("%d records acknowledged, %d stored", len(acked), len(got.byValue))
}

// waitParkedFetch waits until the broker holds a fetch parked in a long
// poll: its ringlog_fetches_parked gauge (the /metrics endpoint of
// --http-addr) is above zero. A parked fetch holds no goroutine, so the
// gauge is the only outside view of it.
func waitParkedFetch(t *testing.T, b *serveProc) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, "a fetch parked in the broker (ringlog_fetches_parked above 0)", func() bool {
		for _, line := range strings.Split(httpGet(t, "http://"+b.HTTP+"/metrics"), "\n") {
			if v, ok := strings.CutPrefix(line, "ringlog_fetches_parked "); ok && v != "0" {
				return true
			}
		}
		return false
	})
}

// TestGracefulShutdownAnswersParkedFetch parks a fetch in a long poll
// (MaxWait 20 s, longer than --shutdown-timeout) and sends SIGTERM: the
// broker must answer the parked fetch (with no records) and exit within a
// few seconds, instead of holding the shutdown until the drain times out
// and then cutting the connection.
func TestGracefulShutdownAnswersParkedFetch(t *testing.T) {
	const idle = "idle"
	dir := t.TempDir()
	ctx := deadlineCtx(t, 60*time.Second)
	b := startServe(t, dir, "--shutdown-timeout", "8s")
	adm := kadm.NewClient(procClient(t, b.Kafka))
	cr, err := adm.CreateTopic(ctx, 1, 1, nil, idle)
	if err == nil {
		err = cr.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", idle, err)
	}
	cl := procClient(t, b.Kafka, kgo.RequestRetries(0))
	type result struct {
		resp *kmsg.FetchResponse
		err  error
		at   time.Time
	}
	fetched := make(chan result, 1)
	go func() {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 20000
		req.MinBytes = 1
		req.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = idle
		rt.TopicID = cr.ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = 0
		rp.FetchOffset = 0
		rp.PartitionMaxBytes = 1 << 20
		rp.LogStartOffset = -1
		rp.CurrentLeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		fetched <- result{resp, err, time.Now()}
	}()
	waitParkedFetch(t, b)
	select {
	case r := <-fetched:
		t.Fatalf("the fetch on an empty partition returned before its MaxWait: %+v %v", r.resp, r.err)
	default:
	}
	sent := time.Now()
	code, took, err := b.signal(syscall.SIGTERM, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if took > 3*time.Second {
		t.Errorf("SIGTERM took %v with a fetch parked: the parked fetch must be answered at once, not waited for", took.Round(time.Millisecond))
	}
	if s := b.stderr.String(); strings.Contains(s, "not every request was answered") {
		t.Errorf("shutdown gave up on requests in flight:\n%s", lastChars(s, 3000))
	}
	r := <-fetched
	if r.err != nil {
		t.Errorf("the parked fetch got no answer (%v after SIGTERM): %v", r.at.Sub(sent).Round(time.Millisecond), r.err)
	} else if err := kerr.ErrorForCode(r.resp.ErrorCode); err != nil {
		t.Errorf("the parked fetch was answered with %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, cleanMarker)); err != nil {
		t.Errorf("no clean-shutdown marker after exit: %v", err)
	}
}

// TestSignalRightAfterReady signals the broker (SIGTERM, then SIGINT, in
// turns) the moment its ready line arrives, as a supervisor may: the line
// promises a clean stop on these signals, so the process must already
// handle them (exit 0, data directory marked clean), not die of them.
func TestSignalRightAfterReady(t *testing.T) {
	// The window this guards is a few microseconds wide: several runs
	// give a regression a fair chance to show.
	runs := 5
	if raceEnabled {
		runs = 2
	}
	for i := 0; i < runs; i++ {
		dir := t.TempDir()
		var cmd *exec.Cmd
		w := &readyWatcher{ready: make(chan string, 1)}
		sig := []syscall.Signal{syscall.SIGTERM, syscall.SIGINT}[i%2]
		w.onReady = func() { cmd.Process.Signal(sig) }
		var stderr testenv.SyncBuffer
		cmd = exec.Command(ringlogBinary(t), serveArgs(t, dir)...)
		cmd.Stdout, cmd.Stderr = w, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("run %d: no exit within 30 s of %v; stderr:\n%s", i, sig, lastChars(stderr.String(), 3000))
		}
		select {
		case <-w.ready:
		default:
			t.Fatalf("run %d: exited without a ready line; stderr:\n%s", i, lastChars(stderr.String(), 3000))
		}
		if strings.Contains(stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("run %d: the race detector found a data race:\n%s", i, lastChars(stderr.String(), 6000))
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("run %d: %v after %v right after the ready line, want exit 0; stderr:\n%s", i, cmd.ProcessState, sig, lastChars(stderr.String(), 3000))
		}
		if _, err := os.Stat(filepath.Join(dir, cleanMarker)); err != nil {
			t.Fatalf("run %d: no clean-shutdown marker: %v", i, err)
		}
	}
}
