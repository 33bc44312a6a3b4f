package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// The model: a log is a list of batches (offsets, stored bytes), a start
// and an end, plus the epoch Append stamps and a leader's epoch entry that
// has no data yet. Its epoch cache is derived, not computed the way the
// wal computes it: the epoch of each run of batches with its first
// offset, then the leader's entry if it sits at the end above them.

type modelBatch struct {
	base, last int64
	epoch      int32
	data       []byte
}

type replicaModel struct {
	batches    []modelBatch
	start, end int64
	stamp      int32
	leader     *EpochEntry
}

func (m *replicaModel) dataEpoch() int32 {
	for i := len(m.batches) - 1; i >= 0; i-- {
		if m.batches[i].epoch >= 0 {
			return m.batches[i].epoch
		}
	}
	return UndefinedEpoch
}

func (m *replicaModel) epochs() []EpochEntry {
	out := []EpochEntry{}
	for _, b := range m.batches {
		if n := len(out); b.epoch >= 0 && (n == 0 || out[n-1].Epoch != b.epoch) {
			out = append(out, EpochEntry{Epoch: b.epoch, StartOffset: b.base})
		}
	}
	if m.leader != nil && m.leader.StartOffset == m.end && m.leader.Epoch > m.dataEpoch() {
		out = append(out, *m.leader)
	}
	return out
}

func (m *replicaModel) latest() int32 {
	if e := m.epochs(); len(e) > 0 {
		return e[len(e)-1].Epoch
	}
	return UndefinedEpoch
}

// endOffsetFor is KIP-279 spelled out over the derived cache.
func (m *replicaModel) endOffsetFor(req int32) (int32, int64) {
	e := m.epochs()
	if req < 0 || len(e) == 0 || req > e[len(e)-1].Epoch {
		return -1, -1
	}
	if req == e[len(e)-1].Epoch {
		return req, m.end
	}
	floor, higher := -1, -1
	for i, x := range e {
		if x.Epoch <= req {
			floor = i
		}
		if x.Epoch > req && higher < 0 {
			higher = i
		}
	}
	if floor < 0 {
		return req, e[higher].StartOffset
	}
	return e[floor].Epoch, e[higher].StartOffset
}

// opReader hands out the fuzz input a byte at a time (0 when exhausted).
type opReader struct {
	b []byte
	i int
}

func (r *opReader) next() int {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return int(r.b[r.i-1])
}

func (r *opReader) done() bool { return r.i >= len(r.b) }

func modelOptions() Options {
	return Options{SegmentBytes: 400, IndexIntervalBytes: 64, MaxIndexBytes: 64}
}

// runReplicaModel applies the operations encoded in ops to a real log in
// dir and to the model, checking after every step that they agree.
func runReplicaModel(t *testing.T, dir string, ops []byte) {
	be := ring.NewPortable()
	opts := modelOptions()
	opts.Logger = testLogger(t)
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { l.Close() }()
	m := &replicaModel{}
	r := &opReader{b: ops}
	tag := 0
	var trace []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("after %v: %s", trace, fmt.Sprintf(format, args...))
	}
	expect := func(what string, err, want error) bool {
		t.Helper()
		switch {
		case want == nil && err != nil:
			fail("%s: unexpected error %v", what, err)
		case want != nil && !errors.Is(err, want):
			fail("%s: error %v, want %v", what, err, want)
		}
		return err == nil
	}
	for n := 0; n < 64 && !r.done(); n++ {
		op := r.next() % 11
		switch op {
		case 0, 1, 2: // leader append
			k := 1 + r.next()%3
			var bs [][]byte
			for i := 0; i < k; i++ {
				tag++
				bs = append(bs, makeBatch(t, tag, 1+r.next()%3, r.next()%24, int64(1000+tag)))
			}
			sync := r.next()%2 == 0
			trace = append(trace, fmt.Sprintf("append(%d,sync=%v)@%d", k, sync, m.stamp))
			var want error
			if m.dataEpoch() > m.stamp {
				want = ErrEpochOrder
			}
			res, err := l.Append(be, bs, sync)
			if !expect("append", err, want) {
				break
			}
			for i, b := range bs {
				h, _ := batch.ParseHeader(b)
				if res[i].BaseOffset != m.end || h.LeaderEpoch != m.stamp {
					fail("append result %+v epoch %d, want base %d epoch %d", res[i], h.LeaderEpoch, m.end, m.stamp)
				}
				m.batches = append(m.batches, modelBatch{base: m.end, last: h.LastOffset(), epoch: m.stamp, data: b})
				m.end = h.NextOffset()
			}
			m.leader = nil
		case 3, 4, 5: // replica append
			k := 1 + r.next()%3
			var bs [][]byte
			var want error
			next, ep := m.end, max(m.dataEpoch(), 0)
			var add []modelBatch
			for i := 0; i < k; i++ {
				tag++
				x := r.next()
				base := next
				if x%4 == 0 {
					base += int64(1 + x/4%5) // a compaction gap
				}
				if x%29 == 28 && base > 0 {
					base-- // overlaps what is there
				}
				switch d := r.next() % 8; {
				case d == 0:
					ep-- // backwards (or -1: no epoch, refused)
				case d >= 6:
					ep += int32(d - 5)
				}
				b := makeBatch(t, tag, 1+x%3, r.next()%24, int64(1000+tag))
				batch.SetBaseOffset(b, base)
				batch.SetLeaderEpoch(b, ep)
				h, _ := batch.ParseHeader(b)
				corrupt := x%31 == 30
				if corrupt {
					b[batch.HeaderSize+r.next()%(len(b)-batch.HeaderSize)] ^= 0x10
				}
				bs = append(bs, b)
				if want != nil {
					continue
				}
				dataEp := m.dataEpoch()
				for _, a := range add {
					if a.epoch >= 0 {
						dataEp = a.epoch
					}
				}
				switch { // in the order AppendReplica checks
				case corrupt:
					want = ErrCorrupt
				case base < next:
					want = ErrOffsetOrder
				case ep < 0:
					want = ErrCorrupt
				case ep < dataEp:
					want = ErrEpochOrder
				}
				add = append(add, modelBatch{base: base, last: h.LastOffset(), epoch: ep, data: b})
				next = h.NextOffset()
			}
			sync := r.next()%2 == 0
			desc := ""
			for _, a := range add {
				desc += fmt.Sprintf("[%d,%d]e%d ", a.base, a.last, a.epoch)
			}
			trace = append(trace, fmt.Sprintf("replica(%swant %v)", desc, want))
			res, err := l.AppendReplica(be, bs, sync)
			if !expect("replica append", err, want) {
				break
			}
			for i, a := range add {
				if res[i].BaseOffset != a.base || res[i].LastOffset != a.last {
					fail("replica result %+v, want [%d,%d]", res[i], a.base, a.last)
				}
			}
			m.batches = append(m.batches, add...)
			m.end = add[len(add)-1].last + 1
			m.leader = nil
		case 6: // truncate
			off := m.start - 1 + int64(r.next())%(m.end-m.start+3)
			trace = append(trace, fmt.Sprintf("truncate(%d)", off))
			var want error
			if off < m.start {
				want = ErrOffsetOutOfRange
			}
			got, err := l.TruncateTo(off)
			if !expect("truncate", err, want) {
				break
			}
			if off >= m.end {
				if off == m.end {
					m.leader = nil
				}
			} else {
				k := 0
				for k < len(m.batches) && m.batches[k].last < off {
					k++
				}
				m.batches = m.batches[:k]
				m.end = m.start
				if k > 0 {
					m.end = m.batches[k-1].last + 1
				}
				m.leader = nil
			}
			if got != m.end {
				fail("TruncateTo(%d) = %d, want %d", off, got, m.end)
			}
		case 7: // reset
			off := max(m.end+int64(r.next()%9)-4, 0)
			trace = append(trace, fmt.Sprintf("reset(%d)", off))
			if err := l.ResetTo(off); err != nil {
				fail("reset: %v", err)
			}
			m.batches, m.start, m.end, m.leader = nil, off, off, nil
		case 8: // new leader epoch
			e := m.latest() + int32(r.next()%4) - 1
			trace = append(trace, fmt.Sprintf("leader(%d)", e))
			var want error
			switch {
			case e < 0:
				if err := l.StartLeaderEpoch(e); err == nil {
					fail("negative epoch accepted")
				}
				continue
			case e < m.latest():
				want = ErrEpochOrder
			}
			if !expect("start leader epoch", l.StartLeaderEpoch(e), want) {
				break
			}
			if e > m.latest() {
				m.leader = &EpochEntry{Epoch: e, StartOffset: m.end}
			}
			m.stamp = e
		case 9: // roll
			trace = append(trace, "roll")
			if l.active().wpos > 0 {
				if err := l.roll(); err != nil {
					fail("roll: %v", err)
				}
				l.sealPending()
			}
		case 10: // close and reopen, cleanly or after a crash
			clean := r.next()%2 == 0
			trace = append(trace, fmt.Sprintf("reopen(clean=%v)", clean))
			if clean {
				if err := l.Close(); err != nil {
					fail("close: %v", err)
				}
			} else {
				crashLog(l)
			}
			o := opts
			o.Clean = clean
			if l, err = Open(dir, o); err != nil {
				fail("reopen: %v", err)
			}
			m.stamp = 0
		}
		checkModel(t, l, m, r, fail)
	}
}

func checkModel(t *testing.T, l *Log, m *replicaModel, r *opReader, fail func(string, ...any)) {
	t.Helper()
	if l.StartOffset() != m.start || l.EndOffset() != m.end {
		fail("log [%d,%d), model [%d,%d)", l.StartOffset(), l.EndOffset(), m.start, m.end)
	}
	var want []byte
	for _, b := range m.batches {
		want = append(want, b.data...)
	}
	got, err := l.ReadBytes(nil, m.start, 1<<30, m.end)
	if err != nil || !bytes.Equal(got, want) {
		fail("read %d bytes (%v), model has %d", len(got), err, len(want))
	}
	if e := m.epochs(); !slices.Equal(l.EpochEntries(), e) {
		fail("epochs %v, model %v", l.EpochEntries(), e)
	}
	for e := int32(-1); e <= m.latest()+1; e++ {
		ge, gotOff := l.EndOffsetForEpoch(e)
		we, wo := m.endOffsetFor(e)
		if ge != we || gotOff != wo {
			fail("EndOffsetForEpoch(%d) = (%d,%d), model (%d,%d)", e, ge, gotOff, we, wo)
		}
	}
	if m.end > m.start {
		off := m.start + int64(r.next())%(m.end-m.start)
		var c Chunk
		err := l.Read(&c, off, 1, m.end)
		first := c.FirstOffset
		c.Release()
		i := slices.IndexFunc(m.batches, func(b modelBatch) bool { return b.last >= off })
		if err != nil || i < 0 || first != m.batches[i].base {
			fail("read at %d: first %d (%v)", off, first, err)
		}
	}
}

// FuzzReplicaModel applies random sequences of leader appends, replica
// appends (with gaps, overlaps, epoch regressions and corrupt batches),
// truncations, resets, new leader epochs, rolls and clean or crashed
// reopens to a real log with tiny segments and indexes, and to the model,
// and checks after every step that the log reads back exactly the model's
// batches, with the same bounds and epoch cache.
func FuzzReplicaModel(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 1, 3, 2, 1, 1, 6, 5})
	f.Add([]byte{8, 2, 0, 0, 1, 1, 3, 0, 2, 1, 5, 9, 0, 2, 2, 2, 10, 1, 6, 3, 10, 0})
	f.Add([]byte{3, 2, 4, 7, 5, 8, 6, 7, 6, 4, 9, 7, 200, 3, 2, 28, 0, 9, 4, 6, 1, 10, 1})
	f.Add([]byte{0, 2, 2, 2, 2, 2, 2, 2, 8, 3, 9, 0, 2, 1, 1, 1, 1, 1, 1, 1, 6, 4, 10, 1, 8, 0, 8, 3, 0, 1, 1, 1, 1, 6, 200})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 8; i++ {
		seed := make([]byte, 40+rng.IntN(150))
		for j := range seed {
			seed[j] = byte(rng.UintN(256))
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 512 {
			return
		}
		runReplicaModel(t, fuzzDir(t), ops)
	})
}

// TestReplicaModelRandom runs the model with random inputs beyond the seed
// corpus, so plain `go test` covers more than the seeds.
func TestReplicaModelRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(42), 7))
	n := 60
	if testing.Short() {
		n = 10
	}
	for i := 0; i < n; i++ {
		ops := make([]byte, 60+rng.IntN(200))
		for j := range ops {
			ops[j] = byte(rng.UintN(256))
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { runReplicaModel(t, fuzzDir(t), ops) })
	}
}
