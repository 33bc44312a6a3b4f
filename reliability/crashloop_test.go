package reliability

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/powerloss"
	"github.com/ringlog/ringlog/internal/testenv"
)

// The crash loop's topics and group.
const (
	denseTopic    = "dense"     // 3 partitions, nothing deleted: offsets dense from 0
	compactTopic  = "compacted" // cleanup.policy=compact, 32 keys
	retainedTopic = "retained"  // retention.bytes: old segments deleted
	unsyncedTopic = "unsynced"  // acks=1 and acks=all producers in one partition
	loopGroup     = "crash-group"
	denseParts    = 3
	compactKeys   = 32
)

// TestCrashLoop kills one broker with SIGKILL RINGLOG_CRASH_CYCLES times
// (8 by default; `make crash-long`: 1,000) on one data directory while a
// mixed load runs: idempotent acks=all producers to a plain topic, a
// compacted topic (the cleaner running every 100 ms) and a topic whose
// old segments retention deletes every 200 ms; topics created and
// deleted; group offsets committed. A fraction RINGLOG_CRASH_POWER
// (default 0.5) of the kills is also a power cut: what the broker wrote
// but did not fdatasync is dropped, torn or left with holes
// (internal/powerloss) before the restart. After each restart, once the
// load paused and the producers' retries settled, it checks:
//   - plain topic: every acknowledged record is at the offset its ack
//     gave, offsets are dense, no value is stored twice;
//   - compacted topic: for every key, a record at or after its last
//     acknowledged one is kept; offsets increase;
//   - retained topic: the log start never goes back, records from it on
//     are dense and every acknowledged one there is at its offset;
//   - topics: a creation acknowledged (and not deleted since) is there
//     with its partitions, a deletion acknowledged is gone;
//   - group offsets: never below the last acknowledged commit.
//
// The records acknowledged since the previous check are checked every
// cycle, the whole plain topic every 25 cycles and at the end.
func TestCrashLoop(t *testing.T) {
	cycles := envInt(t, "RINGLOG_CRASH_CYCLES", 8)
	powerFrac := 0.5
	if v := os.Getenv("RINGLOG_CRASH_POWER"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1 {
			t.Fatalf("RINGLOG_CRASH_POWER=%q: want a fraction in [0, 1]", v)
		}
		powerFrac = f
	}
	figure := "not run"
	defer func() { result(t, fmt.Sprintf("crash loop: %d SIGKILL cycles", cycles), figure) }()

	dir := t.TempDir()
	journal := filepath.Join(t.TempDir(), "power-journal")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	flags := []string{"--power-journal", journal, "--retention-check-interval", "200ms",
		"--compaction-interval", "100ms", "--shards", "2", "--repair-corrupt-logs"}
	b := startBrokerIn(t, dir, append([]string{"--kafka-addr", "127.0.0.1:0"}, flags...)...)
	addr := b.addr
	restart := func() *brokerProc {
		var nb *brokerProc
		var err error
		testenv.Eventually(15*time.Second, func() bool {
			nb, err = tryStartBrokerIn(t, dir, append([]string{"--kafka-addr", addr}, flags...)...)
			return err == nil || !strings.Contains(err.Error(), "address already in use")
		})
		if err != nil {
			t.Fatalf("restart: %v", err)
		}
		return nb
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admCl := newClient(t, addr)
	adm := kadm.NewClient(admCl)
	create := func(topic string, parts int32, cfg map[string]string) {
		t.Helper()
		set := map[string]*string{}
		for k, v := range cfg {
			set[k] = &v
		}
		r, err := adm.CreateTopic(ctx, parts, 1, set, topic)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
	}
	create(denseTopic, denseParts, map[string]string{"segment.bytes": "32768", "retention.ms": "-1"})
	create(compactTopic, 1, map[string]string{"segment.bytes": "8192", "cleanup.policy": "compact",
		"min.cleanable.dirty.ratio": "0.01", "retention.ms": "-1"})
	create(retainedTopic, 1, map[string]string{"segment.bytes": "8192", "retention.bytes": "32768"})
	create(unsyncedTopic, 1, map[string]string{"segment.bytes": "16384", "retention.bytes": "131072"})

	l := newCrashLoad(t, addr, adm)
	l.dir = dir
	l.start(ctx)
	defer l.stop()

	var (
		powerCuts, damagedFiles, repairs int
		lostBytes                        int64
		modes                            = map[powerloss.Mode]int{}
		start                            = time.Now()
		tRestart, tSettle, tCheck        time.Duration
		cycle                            int
	)
	for cycle = 1; cycle <= cycles; cycle++ {
		l.resume(cycle)
		time.Sleep(150*time.Millisecond + rand.N(550*time.Millisecond))
		b.kill()
		l.killed()
		cut := rng.Float64() < powerFrac
		var lastJournal []byte
		var lastDamage []powerloss.Damage
		if cut {
			lastJournal, _ = os.ReadFile(journal)
			dmg, err := powerloss.Apply(journal, rng)
			lastDamage = dmg
			if err != nil {
				t.Fatalf("cycle %d: power cut: %v", cycle, err)
			}
			powerCuts++
			damagedFiles += len(dmg)
			for _, d := range dmg {
				lostBytes += d.Lost
				modes[d.Mode]++
			}
		}
		t0 := time.Now()
		b = restart()
		tRestart += time.Since(t0)
		if !strings.Contains(b.log(), "unclean shutdown") {
			t.Errorf("cycle %d: the restart after SIGKILL did not log an unclean shutdown:\n%s", cycle, lastChars(b.log(), 2000))
		}
		// Damage in the middle of a log can only be where nothing was
		// synced: the acks=1 topic's, after a power cut.
		for _, line := range strings.Split(b.log(), "\n") {
			if strings.Contains(line, "corrupt") || strings.Contains(line, "damaged") {
				if !cut || !strings.Contains(line, unsyncedTopic+"-0") {
					t.Errorf("cycle %d (power cut %v): %s", cycle, cut, line)
				} else {
					repairs++
				}
			}
		}
		l.pause()
		l.cut = cut
		t0 = time.Now()
		err := l.settle(ctx)
		tSettle += time.Since(t0)
		if err != nil {
			t.Fatalf("cycle %d (power cut %v): the load did not settle after the restart: %v\nbroker log:\n%s", cycle, cut, err, lastChars(b.log(), 3000))
		}
		t0 = time.Now()
		l.check(ctx, cycle, cycle%25 == 0 || cycle == cycles)
		tCheck += time.Since(t0)
		if t.Failed() {
			meta, _ := os.ReadFile(filepath.Join(dir, "ringlog-meta.json"))
			ents, _ := os.ReadDir(dir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Logf("data directory: %v\nmetadata file:\n%s", names, meta)
			for _, d := range lastDamage {
				t.Logf("power cut: %s: %v, %d bytes lost past the durable %d of %d", d.Path, d.Mode, d.Lost, d.Durable, d.Size)
			}
			if cut {
				var lines []string
				for _, line := range strings.Split(string(lastJournal), "\n") {
					if strings.Contains(line, unsyncedTopic+"-0") {
						lines = append(lines, line)
					}
				}
				t.Logf("the journal's last %d lines on %s:\n%s", min(len(lines), 60), unsyncedTopic, strings.Join(lines[max(0, len(lines)-60):], "\n"))
			}
			files, _ := os.ReadDir(filepath.Join(dir, unsyncedTopic+"-0"))
			for _, f := range files {
				if fi, err := f.Info(); err == nil {
					t.Logf("%s-0/%s: %d bytes", unsyncedTopic, f.Name(), fi.Size())
				}
			}
			t.Logf("acks=all acknowledgements on %s, last 10: %v", unsyncedTopic, l.unsAllAcks[max(0, len(l.unsAllAcks)-10):])
			t.Fatalf("cycle %d (power cut %v, seed %d) failed; broker log:\n%s", cycle, cut, seed, lastChars(b.log(), 4000))
		}
		if cycle%50 == 0 || (testing.Verbose() && cycle%10 == 0) {
			t.Logf("cycle %d: %s; time in restarts %v, settling %v, checks %v", cycle, l.summary(),
				tRestart.Round(time.Millisecond), tSettle.Round(time.Millisecond), tCheck.Round(time.Millisecond))
		}
	}
	figure = fmt.Sprintf("%d cycles in %v, %d with a power cut (%d files damaged, %d KiB unsynced lost; drop/torn/holes %d/%d/%d; %d acks=1 logs repaired); %s",
		cycles, time.Since(start).Round(time.Second), powerCuts, damagedFiles, lostBytes>>10,
		modes[powerloss.Drop], modes[powerloss.Torn], modes[powerloss.Holes], repairs, l.summary())
	t.Log(figure)
	if l.inFlightAtKills.Load() == 0 {
		t.Error("no record was in flight at any kill: the loop did not crash the broker under load")
	}
}

// crashLoad is the crash loop's clients and what they were told.
type crashLoad struct {
	t    *testing.T
	addr string
	dir  string // the broker's data directory
	adm  *kadm.Client

	dense, compact, retained, unsynced, unsyncedAll *kgo.Client

	gate    sync.Mutex // held while a burst is issued
	paused  atomic.Bool
	wg      sync.WaitGroup
	churnWG sync.WaitGroup // this cycle's topic churn
	quit    chan struct{}

	mu          sync.Mutex
	denseAcked  map[string]loc // value -> where its ack put it
	denseRecent map[string]loc // the same, acknowledged since the last check
	denseSent   int
	failed      []error
	keyAcked    [compactKeys]loc // last acknowledged offset per key (-1: none)
	retAcked    map[int64]string // offset -> value
	retStart    int64            // log start at the last check
	unsAcked    map[int64]string // acks=1 records acknowledged since the last check
	unsAllLast  int64            // highest offset an acks=all record there was acknowledged at
	unsAllAcks  []string         // offset@time of each (for a failure's report)
	unsAllKill  int64            // unsAllLast when the broker was last killed
	unsGaps     map[int64]int64  // offsets a repair removed (first -> next kept): unsynced bytes
	unsSent     map[string]bool  // every acks=1 value sent
	unsSeq      int
	unsLost     int  // acks=1 records acknowledged and lost in power cuts
	cut         bool // the last kill was also a power cut
	committed   [denseParts]int64
	commitNext  int64
	topicsMade  map[string]bool // acknowledged creations not deleted since
	topicsGone  map[string]bool // acknowledged deletions
	toDelete    []string
	denseFrom   [denseParts]int64 // the plain topic is checked from here
	denseSeq    int
	compactSeq  int
	retSeq      int
	creates     int
	deletes     int
	commits     int
	checkedRecs int

	inFlightAtKills atomic.Int64
}

type loc struct {
	p   int32
	off int64
}

func newClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	// A broker killed every second: reload metadata and retry at once
	// rather than after kgo's 5 s minimum metadata age.
	opts = append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
		kgo.MetadataMinAge(50 * time.Millisecond)}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func newCrashLoad(t *testing.T, addr string, adm *kadm.Client) *crashLoad {
	producer := func(topic string) *kgo.Client {
		var extra []kgo.Opt
		if os.Getenv("RINGLOG_CRASH_KGO_LOG") != "" && topic == denseTopic {
			extra = append(extra, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string { return time.Now().Format("15:04:05.000 ") })))
		}
		return newClient(t, addr, append(extra, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.ProducerLinger(2*time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()))...)
	}
	l := &crashLoad{t: t, addr: addr, adm: adm, quit: make(chan struct{}),
		dense: producer(denseTopic), compact: producer(compactTopic), retained: producer(retainedTopic),
		unsynced: newClient(t, addr, kgo.DefaultProduceTopic(unsyncedTopic), kgo.RequiredAcks(kgo.LeaderAck()),
			kgo.DisableIdempotentWrite(), kgo.ProducerLinger(2*time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression())),
		unsyncedAll: producer(unsyncedTopic),
		unsAcked:    map[int64]string{}, unsSent: map[string]bool{}, unsGaps: map[int64]int64{},
		denseAcked: map[string]loc{}, denseRecent: map[string]loc{}, retAcked: map[int64]string{},
		topicsMade: map[string]bool{}, topicsGone: map[string]bool{}}
	for k := range l.keyAcked {
		l.keyAcked[k] = loc{0, -1}
	}
	l.paused.Store(true)
	return l
}

// start runs the load's goroutines (paused until resume).
func (l *crashLoad) start(ctx context.Context) {
	l.loop(func() { l.produceBurst(ctx) }, time.Millisecond)
	l.loop(func() { l.commit(ctx) }, 20*time.Millisecond)
}

func (l *crashLoad) loop(fn func(), every time.Duration) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			select {
			case <-l.quit:
				return
			case <-time.After(every):
			}
			l.gate.Lock()
			if !l.paused.Load() {
				fn()
			}
			l.gate.Unlock()
		}
	}()
}

func (l *crashLoad) stop() {
	close(l.quit)
	l.wg.Wait()
	l.churnWG.Wait()
}

// resume restarts the load; the topic churn of this cycle runs at a
// random moment of it.
func (l *crashLoad) resume(cycle int) {
	l.paused.Store(false)
	l.churnWG.Add(1)
	go func() {
		defer l.churnWG.Done()
		time.Sleep(rand.N(300 * time.Millisecond))
		l.churn(cycle)
	}()
}

// killed counts the plain topic's records sent and not yet acknowledged
// when the broker was killed.
func (l *crashLoad) killed() {
	l.mu.Lock()
	l.inFlightAtKills.Add(int64(l.denseSent - len(l.denseAcked) - len(l.failed)))
	l.unsAllKill = l.unsAllLast
	l.mu.Unlock()
}

// pause stops issuing new work; what was issued completes in settle.
func (l *crashLoad) pause() {
	l.paused.Store(true)
	l.gate.Lock()
	//lint:ignore SA2001 an empty critical section is the barrier: the burst in progress is over
	l.gate.Unlock()
}

// settle waits for every produce to be answered and the churn to end.
func (l *crashLoad) settle(ctx context.Context) error {
	t0 := time.Now()
	l.churnWG.Wait()
	if d := time.Since(t0); d > time.Second && testing.Verbose() {
		l.t.Logf("topic churn took %v to end", d)
	}
	fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for i, cl := range []*kgo.Client{l.dense, l.compact, l.retained, l.unsynced, l.unsyncedAll} {
		t0 := time.Now()
		if err := cl.Flush(fctx); err != nil {
			return err
		}
		if d := time.Since(t0); d > time.Second && testing.Verbose() {
			l.t.Logf("producer %d took %v to settle", i, d)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failed) > 0 {
		return fmt.Errorf("%d produces failed although the producers retry without limit, e.g. %v", len(l.failed), l.failed[0])
	}
	return nil
}

func (l *crashLoad) produceBurst(ctx context.Context) {
	for range 4 {
		l.mu.Lock()
		v := fmt.Sprintf("d-%09d-%s", l.denseSeq, strings.Repeat("x", 60))
		l.denseSeq++
		l.denseSent++
		k := l.compactSeq % compactKeys
		kv := fmt.Sprintf("k%02d-%09d", k, l.compactSeq)
		l.compactSeq++
		rv := fmt.Sprintf("r-%09d-%s", l.retSeq, strings.Repeat("y", 100))
		l.retSeq++
		uv := fmt.Sprintf("u-%09d-%s", l.unsSeq, strings.Repeat("z", 200))
		l.unsSeq++
		l.unsSent[uv] = true
		av := fmt.Sprintf("a-%09d", l.unsSeq)
		l.unsSent[av] = true
		l.mu.Unlock()
		if l.unsSeq%4 == 0 {
			l.produce(ctx, l.unsyncedAll, unsyncedTopic+" acks=all", &kgo.Record{Value: []byte(av)}, func(r *kgo.Record) {
				l.unsAllLast = max(l.unsAllLast, r.Offset)
				l.unsAllAcks = append(l.unsAllAcks, fmt.Sprintf("%d@%s", r.Offset, time.Now().Format("15:04:05.000")))
			})
		}
		l.produce(ctx, l.unsynced, unsyncedTopic, &kgo.Record{Value: []byte(uv)}, func(r *kgo.Record) {
			l.unsAcked[r.Offset] = string(r.Value)
		})
		l.produce(ctx, l.dense, denseTopic, &kgo.Record{Key: []byte(v[:11]), Value: []byte(v)}, func(r *kgo.Record) {
			l.denseAcked[string(r.Value)] = loc{r.Partition, r.Offset}
			l.denseRecent[string(r.Value)] = loc{r.Partition, r.Offset}
		})
		l.produce(ctx, l.compact, compactTopic, &kgo.Record{Key: []byte(fmt.Sprintf("k%02d", k)), Value: []byte(kv)}, func(r *kgo.Record) {
			if r.Offset > l.keyAcked[k].off {
				l.keyAcked[k] = loc{0, r.Offset}
			}
		})
		l.produce(ctx, l.retained, retainedTopic, &kgo.Record{Value: []byte(rv)}, func(r *kgo.Record) {
			l.retAcked[r.Offset] = string(r.Value)
		})
	}
}

// produce sends rec with cl; its acknowledgement runs acked under l.mu, a
// failure (the producers retry without limit, so none should come) is
// kept for settle to report.
func (l *crashLoad) produce(ctx context.Context, cl *kgo.Client, what string, rec *kgo.Record, acked func(*kgo.Record)) {
	cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil {
			l.failed = append(l.failed, fmt.Errorf("%s: %w", what, err))
			return
		}
		acked(r)
	})
}

// commit commits the next group offsets for the plain topic's partitions
// (a simple commit, no member, as an offset store client does).
func (l *crashLoad) commit(ctx context.Context) {
	l.mu.Lock()
	l.commitNext++
	off := l.commitNext
	l.mu.Unlock()
	var os kadm.Offsets
	for p := range int32(denseParts) {
		os.Add(kadm.Offset{Topic: denseTopic, Partition: p, At: off, LeaderEpoch: -1})
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := l.adm.CommitOffsets(cctx, loopGroup, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return // not acknowledged: may or may not be stored
	}
	l.mu.Lock()
	for p := range denseParts {
		l.committed[p] = max(l.committed[p], off)
	}
	l.commits++
	l.mu.Unlock()
}

// churn creates this cycle's topic and deletes the earlier ones.
func (l *crashLoad) churn(cycle int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	name := fmt.Sprintf("churn-%d", cycle)
	r, err := l.adm.CreateTopic(ctx, 2, 1, nil, name)
	if err == nil {
		err = r.Err
	}
	l.mu.Lock()
	// Whatever happened, a later cycle deletes it.
	l.toDelete = append(l.toDelete, name)
	if err == nil {
		l.topicsMade[name] = true
		l.creates++
	}
	victims := l.toDelete[:max(0, len(l.toDelete)-1)] // all but this one
	l.mu.Unlock()
	for _, v := range victims {
		// Until the deletion is acknowledged, the topic may or may not
		// be there.
		l.mu.Lock()
		delete(l.topicsMade, v)
		l.mu.Unlock()
		resp, err := l.adm.DeleteTopics(ctx, v)
		if err != nil {
			return
		}
		dr, ok := resp[v]
		if !ok || (dr.Err != nil && !errors.Is(dr.Err, kerr.UnknownTopicOrPartition)) {
			continue
		}
		l.mu.Lock()
		l.topicsGone[v] = true
		l.deletes++
		for i, n := range l.toDelete {
			if n == v {
				l.toDelete = append(l.toDelete[:i], l.toDelete[i+1:]...)
				break
			}
		}
		l.mu.Unlock()
	}
}

// check verifies every promise after a restart (load paused, settled).
func (l *crashLoad) check(ctx context.Context, cycle int, full bool) {
	t := l.t
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()

	// The plain topic: dense, every ack where it said, no duplicates.
	from := l.denseFrom
	if full {
		from = [denseParts]int64{}
	}
	recs, ends := l.read(cctx, denseTopic, from[:])
	seen := map[string]loc{}
	for p := range denseParts {
		next := from[p]
		for _, r := range recs[p] {
			if r.Offset != next {
				t.Errorf("cycle %d: %s-%d: offset %d follows %d: offsets are not dense", cycle, denseTopic, p, r.Offset, next-1)
			}
			next = r.Offset + 1
			v := string(r.Value)
			if at, dup := seen[v]; dup {
				t.Errorf("cycle %d: %s stored twice, at %s-%d/%d and %d/%d", cycle, v[:11], denseTopic, at.p, at.off, p, r.Offset)
			}
			seen[v] = loc{int32(p), r.Offset}
		}
		if next != ends[p] {
			t.Errorf("cycle %d: %s-%d: read up to %d, high watermark %d", cycle, denseTopic, p, next, ends[p])
		}
	}
	lost := 0
	acked := l.denseRecent
	if full {
		acked = l.denseAcked
	}
	for v, at := range acked {
		got, ok := seen[v]
		if !ok || got != at {
			lost++
			if lost <= 5 {
				t.Errorf("cycle %d: %s acknowledged at %s-%d/%d, stored at %v (found %v)", cycle, v[:11], denseTopic, at.p, at.off, got, ok)
			}
		}
	}
	if lost > 0 {
		t.Errorf("cycle %d: %d acknowledged records of %s lost or moved", cycle, lost, denseTopic)
	}
	l.checkedRecs += len(seen)
	l.denseRecent = map[string]loc{}
	for p := range denseParts {
		l.denseFrom[p] = ends[p]
	}

	// The compacted topic: the last acknowledged record of each key, or a
	// later one of the key, is kept.
	crecs, _ := l.read(cctx, compactTopic, []int64{0})
	lastOf := map[string]int64{}
	prev := int64(-1)
	for _, r := range crecs[0] {
		if r.Offset <= prev {
			t.Errorf("cycle %d: %s: offset %d after %d", cycle, compactTopic, r.Offset, prev)
		}
		prev = r.Offset
		lastOf[string(r.Key)] = r.Offset
	}
	for k := range compactKeys {
		want := l.keyAcked[k].off
		if want < 0 {
			continue
		}
		key := fmt.Sprintf("k%02d", k)
		if got, ok := lastOf[key]; !ok || got < want {
			t.Errorf("cycle %d: %s key %s: last record kept at %d (found %v), its record acknowledged at %d is gone", cycle, compactTopic, key, got, ok, want)
		}
	}

	// The retained topic: the log start never goes back; dense from it.
	start := l.startOffset(cctx, retainedTopic)
	if start < l.retStart {
		t.Errorf("cycle %d: %s log start went back from %d to %d", cycle, retainedTopic, l.retStart, start)
	}
	l.retStart = start
	rrecs, rends := l.read(cctx, retainedTopic, []int64{-1})
	if len(rrecs[0]) > 0 {
		next := rrecs[0][0].Offset
		if next < start {
			t.Errorf("cycle %d: %s served offset %d below its log start %d", cycle, retainedTopic, next, start)
		}
		got := map[int64]string{}
		for _, r := range rrecs[0] {
			if r.Offset != next {
				t.Errorf("cycle %d: %s: offset %d follows %d: not dense", cycle, retainedTopic, r.Offset, next-1)
			}
			next = r.Offset + 1
			got[r.Offset] = string(r.Value)
		}
		first := rrecs[0][0].Offset
		for off, v := range l.retAcked {
			if off < first {
				delete(l.retAcked, off) // deleted by retention: nothing more to check
				continue
			}
			if got[off] != v {
				t.Errorf("cycle %d: %s: record acknowledged at %d is %q, want %q", cycle, retainedTopic, off, got[off][:min(len(got[off]), 11)], v[:11])
			}
		}
	} else if rends[0] > start {
		t.Errorf("cycle %d: %s: nothing read between log start %d and high watermark %d", cycle, retainedTopic, start, rends[0])
	}

	// The mixed topic: what is served is only records that were sent
	// (no bytes a cut left behind, no zeroed page, is served as a
	// record), at increasing offsets, dense up to the last acks=all
	// record acknowledged before the kill (its sync made everything
	// before it durable). A cut may leave unsynced bytes after that
	// damaged with valid batches behind them; the repair then removes
	// the damaged ones (a gap the records appended after the restart
	// follow), which later checks accept. Acknowledged acks=1 records
	// survive a kill that was not a power cut.
	urecs, _ := l.read(cctx, unsyncedTopic, []int64{-1})
	if len(urecs[0]) > 0 {
		next := urecs[0][0].Offset
		got := map[int64]string{}
		for _, r := range urecs[0] {
			switch {
			case r.Offset < next:
				t.Errorf("cycle %d: %s: offset %d follows %d", cycle, unsyncedTopic, r.Offset, next-1)
			case r.Offset > next && l.unsGaps[next] == r.Offset:
				// removed by an earlier repair
			case r.Offset > next && next > l.unsAllKill && l.cut:
				l.unsGaps[next] = r.Offset
			case r.Offset > next:
				t.Errorf("cycle %d: %s: offset %d follows %d, below %d, where an acks=all record was acknowledged before the kill", cycle, unsyncedTopic, r.Offset, next-1, l.unsAllKill)
			}
			next = r.Offset + 1
			if !l.unsSent[string(r.Value)] {
				t.Errorf("cycle %d: %s served %q at %d, which no producer sent", cycle, unsyncedTopic, r.Value[:min(len(r.Value), 20)], r.Offset)
			}
			got[r.Offset] = string(r.Value)
		}
		if next <= l.unsAllLast {
			t.Errorf("cycle %d: %s: served up to %d, an acks=all record was acknowledged at %d", cycle, unsyncedTopic, next-1, l.unsAllLast)
		}
		for off, v := range l.unsAcked {
			if off < urecs[0][0].Offset {
				continue // removed by retention
			}
			if got[off] != v {
				if l.cut {
					l.unsLost++ // acks=1 promises the page cache, not the disk
					continue
				}
				t.Errorf("cycle %d: %s: record acknowledged at %d lost by a kill without a power cut", cycle, unsyncedTopic, off)
			}
		}
	}
	l.unsAcked = map[int64]string{}

	// Topics, asked of a new client: a client's cached metadata may
	// predate the crash.
	fresh := kadm.NewClient(newClient(t, l.addr))
	defer fresh.Close()
	topics, err := fresh.ListTopics(cctx)
	if err != nil {
		t.Fatalf("cycle %d: list topics: %v", cycle, err)
	}
	for name := range l.topicsMade {
		td, ok := topics[name]
		if !ok {
			t.Errorf("cycle %d: topic %s was created (acknowledged) and is gone", cycle, name)
		} else if len(td.Partitions) != 2 {
			t.Errorf("cycle %d: topic %s has %d partitions, created with 2", cycle, name, len(td.Partitions))
		}
	}
	for name := range l.topicsGone {
		if topics.Has(name) {
			t.Errorf("cycle %d: topic %s was deleted (acknowledged) and is back", cycle, name)
		}
	}
	// No partition directory outlives its topic (a deletion or creation
	// interrupted by the kill is finished or undone at start).
	ents, _ := os.ReadDir(l.dir)
	for _, ent := range ents {
		name := ent.Name()
		if i := strings.LastIndexByte(name, '-'); ent.IsDir() && strings.HasPrefix(name, "churn-") && i > 0 && !strings.Contains(name, ".") {
			if td, ok := topics[name[:i]]; !ok || len(td.Partitions) == 0 {
				t.Errorf("cycle %d: partition directory %s of no topic", cycle, name)
			}
		}
	}

	// Group offsets.
	offs, err := l.adm.FetchOffsets(cctx, loopGroup)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		t.Fatalf("cycle %d: fetch offsets: %v", cycle, err)
	}
	for p := range int32(denseParts) {
		o, ok := offs.Lookup(denseTopic, p)
		if l.committed[p] > 0 && (!ok || o.At < l.committed[p]) {
			t.Errorf("cycle %d: group offset of %s-%d is %d (found %v), below the last acknowledged commit %d", cycle, denseTopic, p, o.At, ok, l.committed[p])
		}
	}
}

// read returns the records of topic's partitions from the given offsets
// (-1: the log start) up to their high watermarks, and the watermarks.
func (l *crashLoad) read(ctx context.Context, topic string, from []int64) ([][]*kgo.Record, []int64) {
	t := l.t
	t.Helper()
	ends, err := l.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	hw := make([]int64, len(from))
	ends.Each(func(o kadm.ListedOffset) {
		if int(o.Partition) < len(hw) {
			hw[o.Partition] = o.Offset
		}
	})
	out := make([][]*kgo.Record, len(from))
	offsets := map[int32]kgo.Offset{}
	next := make([]int64, len(from))
	for p, f := range from {
		if f < 0 {
			offsets[int32(p)] = kgo.NewOffset().AtStart()
		} else {
			offsets[int32(p)] = kgo.NewOffset().At(f)
		}
		next[p] = f
	}
	done := func() bool {
		for p := range next {
			if next[p] < hw[p] {
				return false
			}
		}
		return true
	}
	if done() {
		return out, hw
	}
	cl := newClient(t, l.addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchMaxWait(100*time.Millisecond))
	defer cl.Close()
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v (at %v of %v)", topic, ctx.Err(), next, hw)
		}
		fs.EachError(func(_ string, p int32, err error) {
			if !errors.Is(err, kerr.OffsetOutOfRange) {
				t.Logf("reading %s-%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= hw[r.Partition] {
				return // produced after the watermarks were read: none should be
			}
			out[r.Partition] = append(out[r.Partition], r)
			next[r.Partition] = r.Offset + 1
		})
	}
	for p := range out {
		sort.Slice(out[p], func(i, j int) bool { return out[p][i].Offset < out[p][j].Offset })
	}
	return out, hw
}

func (l *crashLoad) startOffset(ctx context.Context, topic string) int64 {
	starts, err := l.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		l.t.Fatalf("list start offsets of %s: %v", topic, err)
	}
	o, _ := starts.Lookup(topic, 0)
	return o.Offset
}

func (l *crashLoad) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d records acknowledged on %s (%d checked), %d in flight at the kills; %d compacted and %d retained records; %d acks=1 records, %d acknowledged ones lost in power cuts; %d topics created, %d deleted; %d group commits",
		len(l.denseAcked), denseTopic, l.checkedRecs, l.inFlightAtKills.Load(), l.compactSeq, l.retSeq, l.unsSeq, l.unsLost, l.creates, l.deletes, l.commits)
}

func lastChars(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
