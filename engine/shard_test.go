package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// Partitions are spread over the shards by shardFor, every partition of
// a topic keeps dense offsets under concurrent appends from many
// producers, and what was acknowledged reads back unchanged.
func TestShardRoutingAndDenseOffsets(t *testing.T) {
	e := openEngine(t, t.TempDir(), func(c *Config) { c.Shards = 4 })
	top, err := e.CreateTopic(CreateTopicRequest{Name: "routed", Partitions: 12, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	used := map[*Shard]bool{}
	for _, p := range top.Partitions() {
		want := e.Shards()[shardFor("routed", p.Index, 4)]
		if p.Shard() != want || want.ID() != shardFor("routed", p.Index, 4) {
			t.Fatalf("%s on shard %d, want %d", p, p.Shard().ID(), want.ID())
		}
		used[p.Shard()] = true
	}
	if len(used) != 4 {
		t.Fatalf("12 partitions use %d of 4 shards", len(used))
	}

	// Per partition, 3 producers take turns; each batch is one request.
	const producers, batches = 3, 20
	type sent struct {
		base, n int64
		tag     string
	}
	var mu sync.Mutex
	got := map[int32][]sent{}
	var wg sync.WaitGroup
	for _, p := range top.Partitions() {
		for w := 0; w < producers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < batches; i++ {
					n := 1 + (i+w)%5
					tag := fmt.Sprintf("p%d-w%d-b%d", p.Index, w, i)
					acks := int16(1)
					if i%2 == 0 {
						acks = -1
					}
					r := <-submit(t, p, acks, buildBatch(t, 1000, -1, 0, 0, values(tag, n)...))
					if r.Err != nil {
						t.Error(r.Err)
						return
					}
					mu.Lock()
					got[p.Index] = append(got[p.Index], sent{r.BaseOffset, int64(n), tag})
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, p := range top.Partitions() {
		// The acknowledged ranges tile [0, end) without gaps or overlaps.
		byBase := map[int64]sent{}
		var total int64
		for _, s := range got[p.Index] {
			byBase[s.base] = s
			total += s.n
		}
		var want []string
		for off := int64(0); off < total; {
			s, ok := byBase[off]
			if !ok {
				t.Fatalf("%s: no batch acknowledged at offset %d", p, off)
			}
			for i := 0; i < int(s.n); i++ {
				want = append(want, fmt.Sprintf("%s-%d", s.tag, i))
			}
			off += s.n
		}
		if hw := p.HighWatermark(); hw != total {
			t.Fatalf("%s: high watermark %d, acknowledged %d records", p, hw, total)
		}
		recs := readLog(t, p)
		if len(recs) != len(want) {
			t.Fatalf("%s: %d records read, %d acknowledged", p, len(recs), len(want))
		}
		for i, r := range recs {
			if r.Offset != int64(i) || string(r.Value) != want[i] {
				t.Fatalf("%s: record %d is %q at %d, want %q at %d", p, i, r.Value, r.Offset, want[i], i)
			}
		}
		if p.RecordsIn.Load() != total {
			t.Fatalf("%s: RecordsIn %d, want %d", p, p.RecordsIn.Load(), total)
		}
	}
}

// Every request queued while the shard is busy goes out in one submission
// (group commit), with one fdatasync for all of them when any asked for
// it, and the requests complete in queue order.
func TestShardGroupCommit(t *testing.T) {
	e, top := oneShardTopic(t, "gc", 4, nil)
	s := e.Shards()[0]
	st := e.EngineStats()
	for round, acks := range []int16{-1, 1} {
		release := holdShard(t, s)
		subs, syncs := st.Submissions.Load(), st.Syncs.Load()
		var dones []<-chan AppendResult
		var bytes int64
		for i := 0; i < 12; i++ {
			p := top.Partition(int32(i % 4))
			data := buildBatch(t, 1000, -1, 0, 0, values(fmt.Sprintf("r%d-%d", round, i), 2)...)
			bytes += int64(len(data))
			dones = append(dones, submit(t, p, acks, data))
		}
		for i, c := range dones {
			select {
			case r := <-c:
				t.Fatalf("request %d answered (%+v) while the shard was held", i, r)
			default:
			}
		}
		if q := s.QueuedBytes(); q != bytes {
			t.Fatalf("queued %d bytes, want %d", q, bytes)
		}
		release()
		for i, c := range dones {
			r := result(t, c)
			// Each partition got 3 requests of 2 records, in order.
			if want := int64(round*6 + i/4*2); r.Err != nil || r.BaseOffset != want {
				t.Fatalf("round %d request %d: offset %d %v, want %d", round, i, r.BaseOffset, r.Err, want)
			}
		}
		if d := st.Submissions.Load() - subs; d != 1 {
			t.Fatalf("acks=%d: 12 queued requests took %d submissions, want 1", acks, d)
		}
		wantSyncs := int64(0)
		if acks == -1 {
			wantSyncs = 1
		}
		if d := st.Syncs.Load() - syncs; d != wantSyncs {
			t.Fatalf("acks=%d: %d fdatasync-bearing submissions, want %d", acks, d, wantSyncs)
		}
		// The queue's bytes are released after the answers of the drain.
		waitUntil(t, "the shard's queue is empty", func() bool { return s.QueuedBytes() == 0 })
	}
}

// A shard past its queue bound says so (HasRoom), and calls the OnRoom
// waiters once it has drained below the bound, from its goroutine.
func TestShardBackpressure(t *testing.T) {
	e := openEngine(t, t.TempDir(), func(c *Config) { c.Shards = 1; c.ShardQueueBytes = 1000 })
	top, err := e.CreateTopic(CreateTopicRequest{Name: "bp", Partitions: 1, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := top.Partition(0)
	s := p.Shard()

	// With room, OnRoom calls at once.
	called := false
	s.OnRoom(func() { called = true })
	if !called {
		t.Fatal("OnRoom with room did not call at once")
	}

	release := holdShard(t, s)
	const n = 35
	data := buildBatch(t, 1000, -1, 0, 0, values("bp", n)...)
	if len(data) <= 500 || len(data) >= 1000 {
		t.Fatalf("test batch is %d bytes; want 500-1000", len(data))
	}
	first := submit(t, p, 1, data)
	if !s.HasRoom() {
		t.Fatalf("full after %d of 1000 bytes", s.QueuedBytes())
	}
	second := submit(t, p, 1, data)
	if s.HasRoom() || s.QueuedBytes() != int64(2*len(data)) {
		t.Fatalf("HasRoom %v with %d bytes queued (bound 1000)", s.HasRoom(), s.QueuedBytes())
	}
	type wake struct{ room bool }
	woken := make(chan wake, 2)
	for i := 0; i < 2; i++ {
		s.OnRoom(func() { woken <- wake{s.HasRoom()} })
	}
	select {
	case <-woken:
		t.Fatal("OnRoom fired while the shard was full and held")
	default:
	}
	release()
	for i := 0; i < 2; i++ {
		if w := <-woken; !w.room {
			t.Fatal("an OnRoom waiter ran while the shard was still full")
		}
	}
	if r := result(t, first); r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("first: %+v", r)
	}
	if r := result(t, second); r.Err != nil || r.BaseOffset != n {
		t.Fatalf("second: %+v", r)
	}
}

// Do and Call run functions on the shard goroutine, in the order they
// were queued, serialized with the appends.
func TestShardDoAndCall(t *testing.T) {
	_, top := oneShardTopic(t, "ctl", 1, nil)
	p := top.Partition(0)
	s := p.Shard()
	release := holdShard(t, s)
	var seen []int // touched on the shard goroutine only
	for i := 0; i < 50; i++ {
		s.Do(func() { seen = append(seen, i) })
	}
	appended := submit(t, p, 1, buildBatch(t, 1000, -1, 0, 0, values("ctl", 3)...))
	errSentinel := errors.New("sentinel")
	called := make(chan error, 1)
	var endInCall int64
	go func() {
		called <- s.Call(func() error {
			// Queued after the 50 Do functions and after the append's
			// drain: it sees both.
			if len(seen) != 50 {
				return fmt.Errorf("Call ran after %d of 50 Do functions", len(seen))
			}
			l, err := p.Log()
			if err != nil {
				return err
			}
			endInCall = l.EndOffset()
			return errSentinel
		})
	}()
	// The Call is queued (it cannot run: the shard is held) before the
	// shard is let go.
	waitUntil(t, "the Call is queued", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.ctl) == 51
	})
	release()
	if err := <-called; !errors.Is(err, errSentinel) {
		t.Fatalf("Call returned %v, want the function's error", err)
	}
	for i, v := range seen {
		if v != i {
			t.Fatalf("Do functions ran in order %v", seen)
		}
	}
	if r := result(t, appended); r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("append: %+v", r)
	}
	// The Call saw the log before or after the append, never in between.
	if endInCall != 0 && endInCall != 3 {
		t.Fatalf("Call saw end offset %d, want 0 or 3", endInCall)
	}
}

// Stopping a shard answers everything queued before the stop (appended,
// durable), refuses what comes after, and runs no more control functions.
func TestShardStopAnswersQueued(t *testing.T) {
	dir := t.TempDir()
	e := openTestEngine(t, dir, func(c *Config) { c.Shards = 1 })
	top, err := e.CreateTopic(CreateTopicRequest{Name: "stop", Partitions: 2, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := e.Shards()[0]
	release := holdShard(t, s)
	var queued []<-chan AppendResult
	for i := 0; i < 6; i++ {
		queued = append(queued, submit(t, top.Partition(int32(i%2)), 1, buildBatch(t, 1000, -1, 0, 0, values(fmt.Sprintf("q%d", i), 2)...)))
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	waitUntil(t, "the shard is stopping", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.stopping
	})

	// After the stop: appends are refused at once, Call fails, Do is
	// dropped, OnRoom does not wait.
	late := submit(t, top.Partition(0), 1, buildBatch(t, 1000, -1, 0, 0, pair("k", "late")))
	if r := result(t, late); !errors.Is(r.Err, kerr.NotLeaderForPartition) {
		t.Fatalf("append after stop: %v, want NOT_LEADER_FOR_PARTITION", r.Err)
	}
	if err := s.Call(func() error { return nil }); err == nil {
		t.Fatal("Call on a stopping shard succeeded")
	}
	var ranLate atomic.Bool
	s.Do(func() { ranLate.Store(true) })
	room := false
	s.OnRoom(func() { room = true })
	if !room {
		t.Fatal("OnRoom on a stopping shard waited")
	}

	release()
	for i, c := range queued {
		if r := result(t, c); r.Err != nil || r.BaseOffset != int64(i/2*2) {
			t.Fatalf("queued request %d: %+v", i, r)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if ranLate.Load() {
		t.Fatal("a Do queued after the stop ran")
	}
	e2 := openEngine(t, dir, nil)
	for i := int32(0); i < 2; i++ {
		p := e2.Topic("stop").Partition(i)
		recs := readLog(t, p)
		if len(recs) != 6 {
			t.Fatalf("%s: %d records after restart, want 6", p, len(recs))
		}
		for j, r := range recs {
			if want := fmt.Sprintf("q%d-%d", int(i)+j/2*2, j%2); string(r.Value) != want {
				t.Fatalf("%s: record %d is %q, want %q", p, j, r.Value, want)
			}
		}
	}
}

// submitInline is submit with Inline set: the direct-write fast path.
func submitInline(t testing.TB, p *Partition, acks int16, batches ...[]byte) (<-chan AppendResult, bool) {
	t.Helper()
	req := &AppendRequest{Partition: p, Batches: batches, Acks: acks, Inline: true}
	for _, b := range batches {
		h, err := batch.Validate(b, batch.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		req.Headers = append(req.Headers, h)
		req.Bytes += len(b)
	}
	done := make(chan AppendResult, 1)
	req.Done = func(r AppendResult) { done <- r }
	p.Shard().Append(req)
	return done, len(done) == 1 // answered before Append returned
}

// The direct-write fast path: an Inline acks=1 append to an idle shard is
// written and answered before Append returns (one submission, fetches
// woken), an acks=all one is not (it would wait for the disk on the
// caller's goroutine), and behind a busy shard an Inline append queues and
// keeps its place after what was queued before it.
func TestShardInlineAppend(t *testing.T) {
	e, top := oneShardTopic(t, "inline", 2, nil)
	p := top.Partition(0)
	s := p.Shard()
	st := e.EngineStats()
	// The shard adopts the partitions with Do: let that pass run first.
	if err := s.Call(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	waitShardIdle(t, s)

	w := NewWaiter()
	p.Watch(w)
	defer p.Unwatch(w)
	inl, subs := st.InlineAppends.Load(), st.Submissions.Load()
	c, sync := submitInline(t, p, 1, buildBatch(t, 1000, -1, 0, 0, values("a", 3)...))
	if !sync {
		t.Fatal("an acks=1 inline append to an idle shard was not answered before Append returned")
	}
	if r := result(t, c); r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("inline append: offset %d %v, want 0", r.BaseOffset, r.Err)
	}
	if d := st.InlineAppends.Load() - inl; d != 1 {
		t.Fatalf("InlineAppends moved by %d, want 1", d)
	}
	if d := st.Submissions.Load() - subs; d != 1 {
		t.Fatalf("Submissions moved by %d, want 1", d)
	}
	select {
	case <-w.C:
	default:
		t.Fatal("the inline append did not wake the partition's fetch waiter")
	}
	if hw := p.HighWatermark(); hw != 3 {
		t.Fatalf("high watermark %d after the inline append, want 3", hw)
	}

	// acks=all asks for an fdatasync: never on the caller's goroutine.
	inl = st.InlineAppends.Load()
	c, _ = submitInline(t, p, -1, buildBatch(t, 1000, -1, 0, 0, values("b", 1)...))
	if r := result(t, c); r.Err != nil || r.BaseOffset != 3 {
		t.Fatalf("acks=all append: offset %d %v, want 3", r.BaseOffset, r.Err)
	}
	if st.InlineAppends.Load() != inl {
		t.Fatal("an acks=all append took the inline path")
	}

	// A busy shard: the inline append queues behind what is queued.
	release := holdShard(t, s)
	first := submit(t, p, 1, buildBatch(t, 1000, -1, 0, 0, values("c", 2)...))
	second, sync := submitInline(t, p, 1, buildBatch(t, 1000, -1, 0, 0, values("d", 2)...))
	if sync {
		t.Fatal("an inline append was answered while the shard was held")
	}
	other, sync := submitInline(t, top.Partition(1), 1, buildBatch(t, 1000, -1, 0, 0, values("e", 1)...))
	if sync {
		t.Fatal("an inline append behind queued work was answered before it")
	}
	release()
	if r := result(t, first); r.Err != nil || r.BaseOffset != 4 {
		t.Fatalf("queued append: offset %d %v, want 4", r.BaseOffset, r.Err)
	}
	if r := result(t, second); r.Err != nil || r.BaseOffset != 6 {
		t.Fatalf("inline append behind it: offset %d %v, want 6", r.BaseOffset, r.Err)
	}
	if r := result(t, other); r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("inline append to another partition: offset %d %v, want 0", r.BaseOffset, r.Err)
	}
	recs := readLog(t, p)
	want := []string{"a-0", "a-1", "a-2", "b-0", "c-0", "c-1", "d-0", "d-1"}
	if len(recs) != len(want) {
		t.Fatalf("%d records read, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		if string(r.Value) != want[i] || r.Offset != int64(i) {
			t.Fatalf("record %d: %q at %d, want %q", i, r.Value, r.Offset, want[i])
		}
	}
}

// Inline and queued appends, acks=1 and acks=all, and control functions
// from many goroutines at once on one partition: the log has one writer at
// a time (the race detector watches), offsets stay dense, and each
// goroutine's appends land in the order it made them.
func TestShardInlineConcurrent(t *testing.T) {
	e, top := oneShardTopic(t, "mixed", 1, nil)
	p := top.Partition(0)
	const writers, appends = 4, 150
	var wg sync.WaitGroup
	bases := make([][]int64, writers)
	var calls atomic.Int64
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < appends; i++ {
				data := buildBatch(t, 1000, -1, 0, 0, values(fmt.Sprintf("w%d-%d", w, i), 1+i%3)...)
				var c <-chan AppendResult
				switch i % 4 {
				case 0, 1:
					c, _ = submitInline(t, p, 1, data)
				case 2:
					c = submit(t, p, -1, data)
				default:
					c = submit(t, p, 1, data)
					p.Shard().Do(func() { calls.Add(1) })
				}
				r := result(t, c)
				if r.Err != nil {
					t.Error(r.Err)
					return
				}
				bases[w] = append(bases[w], r.BaseOffset)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var total int64
	for w := range bases {
		for i := 1; i < len(bases[w]); i++ {
			if bases[w][i] <= bases[w][i-1] {
				t.Fatalf("writer %d: append %d at offset %d, after %d", w, i, bases[w][i], bases[w][i-1])
			}
		}
		for i := 0; i < appends; i++ {
			total += int64(1 + i%3)
		}
	}
	if hw := p.HighWatermark(); hw != total {
		t.Fatalf("high watermark %d, want %d", hw, total)
	}
	recs := readLog(t, p)
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("record %d at offset %d", i, r.Offset)
		}
	}
	if int64(len(recs)) != total {
		t.Fatalf("%d records read, want %d", len(recs), total)
	}
	if e.EngineStats().InlineAppends.Load() == 0 {
		t.Fatal("no append took the inline path")
	}
}

// An acks=1 produce queued in the same pass as another partition's
// acks=all produce is written and answered while that one's fdatasync is
// still running (no head-of-line blocking across partitions); on the
// syncing partition itself, a later acks=1 produce keeps its place behind
// the acks=all one (FIFO per partition).
func TestShardAcks1NotBehindAnotherPartitionsSync(t *testing.T) {
	gate := make(chan struct{})
	var opened atomic.Bool
	open := func() {
		if opened.CompareAndSwap(false, true) {
			close(gate)
		}
	}
	e, top := oneShardTopic(t, "hol", 2, func(c *Config) {
		// Submissions that carry an fdatasync wait for the gate.
		c.WrapBackend = func(_ int, b ring.Backend) ring.Backend {
			return observed{func(ops []ring.Op) {
				for _, op := range ops {
					if op.Kind == ring.OpFdatasync {
						<-gate
						return
					}
				}
			}, b}
		}
	})
	t.Cleanup(open) // before the engine's close (cleanups run last first)
	s := e.Shards()[0]
	release := holdShard(t, s)
	synced := submit(t, top.Partition(0), -1, buildBatch(t, 1000, -1, 0, 0, values("all", 1)...))
	behind := submit(t, top.Partition(0), 1, buildBatch(t, 1000, -1, 0, 0, values("one-behind", 1)...))
	other := submit(t, top.Partition(1), 1, buildBatch(t, 1000, -1, 0, 0, values("one", 1)...))
	release()
	if r := result(t, other); r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("acks=1 to the other partition: offset %d %v, want 0", r.BaseOffset, r.Err)
	}
	if hw := top.Partition(1).HighWatermark(); hw != 1 {
		t.Fatalf("the other partition's high watermark is %d while the sync runs, want 1", hw)
	}
	select {
	case r := <-synced:
		t.Fatalf("the acks=all produce was answered (%+v) before its fdatasync", r)
	case r := <-behind:
		t.Fatalf("the acks=1 produce behind an acks=all one on its partition was answered (%+v) before it", r)
	case <-time.After(50 * time.Millisecond):
	}
	open()
	if r := result(t, synced); r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("acks=all: offset %d %v, want 0", r.BaseOffset, r.Err)
	}
	if r := result(t, behind); r.Err != nil || r.BaseOffset != 1 {
		t.Fatalf("acks=1 behind it: offset %d %v, want 1", r.BaseOffset, r.Err)
	}
}

// A deep queue is written pass by pass, each at most PassBytes (the bound
// on a group commit's latency): the requests of a pass are answered
// before the next pass is submitted, and offsets stay dense and in order.
func TestShardPassBytesBoundsAGroupCommit(t *testing.T) {
	var answered atomic.Int64
	var seen []int64                                         // answers before each submission (shard goroutine only)
	one := buildBatch(t, 1000, -1, 0, 0, values("r0", 4)...) // as large as each request below
	e, top := oneShardTopic(t, "passes", 3, func(c *Config) {
		c.PassBytes = int64(2 * len(one)) // two requests a pass
		c.WrapBackend = func(_ int, b ring.Backend) ring.Backend {
			return observed{func([]ring.Op) { seen = append(seen, answered.Load()) }, b}
		}
	})
	s := e.Shards()[0]
	if err := s.Call(func() error { seen = seen[:0]; return nil }); err != nil {
		t.Fatal(err)
	}
	release := holdShard(t, s)
	const n = 9
	var dones []<-chan AppendResult
	for i := 0; i < n; i++ {
		req := buildBatch(t, 1000, -1, 0, 0, values(fmt.Sprintf("r%d", i), 4)...)
		c := make(chan AppendResult, 1)
		p := top.Partition(int32(i % 3))
		r := &AppendRequest{Partition: p, Batches: [][]byte{req}, Acks: 1, Bytes: len(req)}
		h, err := batch.Validate(req, batch.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		r.Headers = []batch.Header{h}
		r.Done = func(res AppendResult) { answered.Add(1); c <- res }
		p.Shard().Append(r)
		dones = append(dones, c)
	}
	release()
	for i, c := range dones {
		if r := result(t, c); r.Err != nil || r.BaseOffset != int64(i/3*4) {
			t.Fatalf("request %d: offset %d %v, want %d", i, r.BaseOffset, r.Err, i/3*4)
		}
	}
	var got []int64
	if err := s.Call(func() error { got = append(got, seen...); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []int64{0, 2, 4, 6, 8}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers before each submission %v, want %v (passes of 2 requests, each answered before the next)", got, want)
	}
}

// observed is a backend that calls before with each submission's ops
// ahead of running them (a test's hook: count, wait, record).
type observed struct {
	before func(ops []ring.Op)
	inner  ring.Backend
}

func (o observed) Name() string { return o.inner.Name() }
func (o observed) Close() error { return o.inner.Close() }
func (o observed) Run(ops []ring.Op) error {
	o.before(ops)
	return o.inner.Run(ops)
}

// A large append (over InlineMaxBytes) is handed to the shard goroutine
// even when the shard is idle, so its page-cache copy does not hold the
// caller's event loop.
func TestShardLargeAppendNotInline(t *testing.T) {
	e, top := oneShardTopic(t, "large", 1, nil)
	p := top.Partition(0)
	if err := p.Shard().Call(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	st := e.EngineStats()
	inl := st.InlineAppends.Load()
	big := make([]rec, 0, 1100)
	for i := 0; i < cap(big); i++ {
		big = append(big, pair(fmt.Sprint(i), fmt.Sprintf("%01024d", i)))
	}
	b := buildBatch(t, 1000, -1, 0, 0, big...)
	if len(b) <= InlineMaxBytes {
		t.Fatalf("test batch of %d bytes is not over InlineMaxBytes", len(b))
	}
	c, _ := submitInline(t, p, 1, b)
	if r := result(t, c); r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("large append: offset %d %v, want 0", r.BaseOffset, r.Err)
	}
	if st.InlineAppends.Load() != inl {
		t.Fatal("an append over InlineMaxBytes took the inline path")
	}
	// The goroutine may still be ending the large append's pass.
	waitShardIdle(t, p.Shard())
	c, sync := submitInline(t, p, 1, buildBatch(t, 1000, -1, 0, 0, values("small", 1)...))
	if r := result(t, c); !sync || r.Err != nil || r.BaseOffset != int64(len(big)) {
		t.Fatalf("small append after it: inline %v, offset %d %v, want inline at %d", sync, r.BaseOffset, r.Err, len(big))
	}
}

// waitShardIdle waits until no pass holds s's work (its goroutine may
// still be finishing one after the answers it gave), so that an inline
// append finds the shard idle.
func waitShardIdle(t *testing.T, s *Shard) {
	t.Helper()
	waitUntil(t, "the shard is idle", func() bool {
		if s.work.TryLock() {
			s.work.Unlock()
			return true
		}
		return false
	})
}

// oneShardTopic opens an engine with one writer shard (cfg, if set,
// adjusts its configuration further) and creates a topic on it.
func oneShardTopic(t *testing.T, name string, partitions int32, cfg func(*Config)) (*Engine, *Topic) {
	t.Helper()
	e := openEngine(t, t.TempDir(), func(c *Config) {
		c.Shards = 1
		if cfg != nil {
			cfg(c)
		}
	})
	top, err := e.CreateTopic(CreateTopicRequest{Name: name, Partitions: partitions, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	return e, top
}
