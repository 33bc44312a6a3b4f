package sharegroup

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

var testLimits = Limits{LockMillis: 1000, DeliveryLimit: 3, MaxInFlight: 100}

// spans cuts [first, last] into batches of n offsets.
func spans(first, last int64, n int64) []Span {
	var out []Span
	for off := first; off <= last; off += n {
		out = append(out, Span{First: off, Last: min(off+n-1, last)})
	}
	return out
}

func TestAcquireAcknowledgeRelease(t *testing.T) {
	p := NewPartition(10, testLimits)
	acq, send := p.Acquire("a", 0, -1, spans(10, 19, 5), 0, false)
	if want := []Acquisition{{10, 19, 1}}; !reflect.DeepEqual(acq, want) || !reflect.DeepEqual(send, []bool{true, true}) {
		t.Fatalf("acquired %v send %v, want %v", acq, send, want)
	}
	if from, ok := p.FetchFrom(); !ok || from != 20 {
		t.Fatalf("FetchFrom = %d %v, want 20 (all in flight)", from, ok)
	}
	// Another member reading the same batches gets nothing.
	if acq, _ := p.Acquire("b", 0, -1, spans(10, 19, 5), 0, false); len(acq) != 0 {
		t.Fatalf("b acquired %v of a's records", acq)
	}
	if err := p.Acknowledge("a", 0, 10, 14, []int8{int8(AckAccept)}); err != nil {
		t.Fatal(err)
	}
	if p.Start() != 15 {
		t.Fatalf("start %d after accepting 10-14, want 15", p.Start())
	}
	// Release 15-16, reject 17, accept 18-19 in one batch of types.
	if err := p.Acknowledge("a", 0, 15, 19, []int8{2, 2, 3, 1, 1}); err != nil {
		t.Fatal(err)
	}
	if from, ok := p.FetchFrom(); !ok || from != 15 {
		t.Fatalf("FetchFrom = %d, want the released 15", from)
	}
	acq, send = p.Acquire("b", 5, -1, spans(15, 19, 5), 0, false)
	if want := []Acquisition{{15, 16, 2}}; !reflect.DeepEqual(acq, want) || !send[0] {
		t.Fatalf("b re-acquired %v, want %v (delivery 2)", acq, want)
	}
	// A member cannot acknowledge what another holds, nor what is done.
	if err := p.Acknowledge("a", 5, 15, 15, []int8{1}); !errors.Is(err, kerr.InvalidRecordState) {
		t.Fatalf("a acknowledging b's record: %v", err)
	}
	if err := p.Acknowledge("b", 5, 17, 17, []int8{1}); !errors.Is(err, kerr.InvalidRecordState) {
		t.Fatalf("acknowledging a rejected record: %v", err)
	}
	if err := p.Acknowledge("b", 5, 15, 16, []int8{1}); err != nil {
		t.Fatal(err)
	}
	if p.Start() != 20 || p.End() != 20 {
		t.Fatalf("start %d end %d, want 20 20", p.Start(), p.End())
	}
}

func TestLockExpiryAndDeliveryLimit(t *testing.T) {
	p := NewPartition(0, testLimits)
	now := int64(0)
	for delivery := int16(1); delivery <= testLimits.DeliveryLimit; delivery++ {
		acq, _ := p.Acquire("a", now, -1, spans(0, 3, 4), 0, false)
		if want := []Acquisition{{0, 3, delivery}}; !reflect.DeepEqual(acq, want) {
			t.Fatalf("delivery %d: acquired %v, want %v", delivery, acq, want)
		}
		p.Expire(now + testLimits.LockMillis - 1)
		if _, acquired, _ := p.InFlight(); acquired != 4 {
			t.Fatalf("lock expired early: %d acquired", acquired)
		}
		now += testLimits.LockMillis
		p.Expire(now)
	}
	// The third expiry reached the limit: archived, never delivered again.
	if p.Start() != 4 {
		t.Fatalf("start %d after the delivery limit, want 4 (archived)", p.Start())
	}
	if acq, _ := p.Acquire("a", now, -1, spans(0, 3, 4), 0, false); len(acq) != 0 {
		t.Fatalf("archived records acquired again: %v", acq)
	}
}

func TestAcquireLimits(t *testing.T) {
	p := NewPartition(0, Limits{LockMillis: 1000, DeliveryLimit: 5, MaxInFlight: 10})
	// Whole batches: 4+4 reach maxRecords 5, the second batch is taken whole.
	acq, send := p.Acquire("a", 0, -1, spans(0, 11, 4), 5, false)
	if want := []Acquisition{{0, 7, 1}}; !reflect.DeepEqual(acq, want) || !reflect.DeepEqual(send, []bool{true, true, false}) {
		t.Fatalf("acquired %v send %v, want %v", acq, send, want)
	}
	// Strict: exactly 3, stopping inside a batch.
	// Strict: at most 3, and never past the window (10 offsets).
	acq, _ = p.Acquire("b", 0, -1, spans(8, 15, 4), 3, true)
	if want := []Acquisition{{8, 9, 1}}; !reflect.DeepEqual(acq, want) {
		t.Fatalf("strict acquired %v, want %v", acq, want)
	}
	// The window is full: nothing new.
	if _, ok := p.FetchFrom(); ok {
		t.Fatal("FetchFrom offers more with a full window")
	}
	// Control batches and gaps are archived, never delivered.
	q := NewPartition(0, testLimits)
	acq, send = q.Acquire("a", 0, -1, []Span{{First: 0, Last: 1}, {First: 2, Last: 2, Control: true}, {First: 5, Last: 6}}, 0, false)
	if want := []Acquisition{{0, 1, 1}, {5, 6, 1}}; !reflect.DeepEqual(acq, want) || !reflect.DeepEqual(send, []bool{true, false, true}) {
		t.Fatalf("acquired %v send %v, want %v", acq, send, want)
	}
	if err := q.Acknowledge("a", 0, 0, 1, []int8{1}); err != nil {
		t.Fatal(err)
	}
	if q.Start() != 5 {
		t.Fatalf("start %d, want 5 (the marker and the gap 3-4 are done)", q.Start())
	}
}

// TestAcquireNeverStalls: what FetchFrom points at can always be
// acquired or is archived, so a share-partition never stops delivering:
// a strict fetch inside a batch wider than the window, and a released
// record the cleaner compacted away.
func TestAcquireNeverStalls(t *testing.T) {
	lim := Limits{LockMillis: 1000, DeliveryLimit: 5, MaxInFlight: 10}
	p := NewPartition(0, lim)
	acq, _ := p.Acquire("a", 0, 0, spans(0, 49, 50), 10, true)
	if want := []Acquisition{{0, 9, 1}}; !reflect.DeepEqual(acq, want) {
		t.Fatalf("acquired %v, want %v", acq, want)
	}
	if err := p.Acknowledge("a", 0, 0, 9, []int8{int8(AckRelease)}); err != nil {
		t.Fatal(err)
	}
	from, ok := p.FetchFrom()
	if !ok || from != 0 {
		t.Fatalf("FetchFrom %d %v", from, ok)
	}
	acq, _ = p.Acquire("b", 0, from, spans(0, 49, 50), 10, true)
	if want := []Acquisition{{0, 9, 2}}; !reflect.DeepEqual(acq, want) {
		t.Fatalf("after a release in a batch wider than the window: acquired %v, want %v", acq, want)
	}

	q := NewPartition(0, lim)
	q.Acquire("a", 0, 0, spans(0, 9, 10), 0, false)
	if err := q.Acknowledge("a", 0, 0, 9, []int8{1, 1, 1, 2, 2, 1, 1, 1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	// 3 and 4 were released, then compacted away: the log reads from 5.
	from, _ = q.FetchFrom()
	if from != 3 {
		t.Fatalf("FetchFrom %d, want 3", from)
	}
	acq, _ = q.Acquire("b", 0, from, spans(10, 14, 5), 0, false)
	if want := []Acquisition{{10, 14, 1}}; !reflect.DeepEqual(acq, want) || q.Start() != 10 {
		t.Fatalf("acquired %v start %d, want %v and start 10 (3-4 archived: gone from the log)", acq, q.Start(), want)
	}
}

// TestAcquireHugeBatch: one batch of a million records is shared out,
// the window stays within its bound, and a gap of millions of offsets
// costs nothing when nothing is in flight.
func TestAcquireHugeBatch(t *testing.T) {
	p := NewPartition(0, Limits{LockMillis: 1000, DeliveryLimit: 5, MaxInFlight: 100})
	huge := []Span{{First: 0, Last: 999_999}}
	acq, _ := p.Acquire("a", 0, 0, huge, 10, false)
	if want := []Acquisition{{0, 19, 1}}; !reflect.DeepEqual(acq, want) {
		t.Fatalf("a acquired %v, want %v (at most twice MaxRecords of one batch)", acq, want)
	}
	acq, _ = p.Acquire("b", 0, 20, huge, 0, false)
	if want := []Acquisition{{20, 99, 1}}; !reflect.DeepEqual(acq, want) || p.End()-p.Start() != 100 {
		t.Fatalf("b acquired %v, window %d-%d, want %v and a window of 100", acq, p.Start(), p.End(), want)
	}
	q := NewPartition(0, Limits{LockMillis: 1000, DeliveryLimit: 5, MaxInFlight: 100})
	acq, _ = q.Acquire("a", 0, 0, []Span{{First: 5_000_000, Last: 5_000_004}}, 0, false)
	if want := []Acquisition{{5_000_000, 5_000_004, 1}}; !reflect.DeepEqual(acq, want) || q.End()-q.Start() != 5 {
		t.Fatalf("after a gap: acquired %v, window %d-%d", acq, q.Start(), q.End())
	}
	// A gap wider than the window behind a record in flight waits.
	acq, _ = q.Acquire("a", 0, 5_000_005, []Span{{First: 9_000_000, Last: 9_000_001}}, 0, false)
	if len(acq) != 0 || q.End() != 5_000_005 {
		t.Fatalf("acquired %v across a gap wider than the window, end %d", acq, q.End())
	}
}

func TestAcknowledgeMalformed(t *testing.T) {
	p := NewPartition(0, testLimits)
	p.Acquire("a", 0, -1, spans(0, 9, 10), 0, false)
	for _, c := range []struct {
		first, last int64
		types       []int8
		want        error
	}{
		{5, 4, []int8{1}, kerr.InvalidRequest},
		{0, 3, []int8{1, 1}, kerr.InvalidRequest},
		{0, 0, []int8{9}, kerr.InvalidRequest},
		{0, 1 << 60, []int8{1}, kerr.InvalidRecordState},
		{-5, 2, []int8{1}, kerr.InvalidRequest},
	} {
		if err := p.Acknowledge("a", 0, c.first, c.last, c.types); !errors.Is(err, c.want) {
			t.Errorf("ack %d-%d %v: %v, want %v", c.first, c.last, c.types, err, c.want)
		}
	}
	if _, acquired, _ := p.InFlight(); acquired != 10 {
		t.Fatalf("a refused acknowledgement changed state: %d acquired", acquired)
	}
}

func TestStateRestore(t *testing.T) {
	p := NewPartition(100, testLimits)
	p.Acquire("a", 0, -1, spans(100, 119, 10), 0, false)
	if err := p.Acknowledge("a", 0, 100, 104, []int8{1}); err != nil {
		t.Fatal(err)
	}
	if err := p.Acknowledge("a", 0, 106, 108, []int8{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	st := p.State()
	want := State{Start: 105, Batches: []StateBatch{
		{105, 105, Available, 1}, {106, 106, Acknowledged, 1}, {107, 107, Available, 1},
		{108, 108, Archived, 1}, {109, 119, Available, 1},
	}}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("state\n%+v, want\n%+v", st, want)
	}
	r, err := Restore(st, testLimits, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// Locks do not survive: everything not done is available, with its count.
	acq, _ := r.Acquire("b", 0, -1, spans(100, 119, 10), 0, false)
	if want := []Acquisition{{105, 105, 2}, {107, 107, 2}, {109, 119, 2}}; !reflect.DeepEqual(acq, want) {
		t.Fatalf("after restore acquired %v, want %v", acq, want)
	}
	for _, bad := range []State{
		{Start: -1},
		{Start: 1<<63 - 2, Batches: []StateBatch{{1<<63 - 2, 1<<63 - 1, Available, 1}}},
		{Start: 0, Batches: []StateBatch{{5, 4, Available, 1}}},
		{Start: 10, Batches: []StateBatch{{5, 6, Available, 1}}},
		{Start: 0, Batches: []StateBatch{{0, 5, Acknowledged, 1}, {3, 7, Available, 1}}},
		{Start: 0, Batches: []StateBatch{{0, 1 << 40, Archived, 1}}},
		{Start: 0, Batches: []StateBatch{{0, 1, Acquired, 1}}},
		{Start: 0, Batches: []StateBatch{{0, 1, Available, -1}}},
	} {
		if _, err := Restore(bad, testLimits, 1<<20); err == nil {
			t.Errorf("Restore(%+v) accepted", bad)
		}
	}
}

// TestRandomized drives one share-partition with random fetches,
// acknowledgements, releases, expiries and restarts by three members,
// against a model, and checks after every step: an offset is held by at
// most one member, an acknowledged or archived offset is never delivered
// again, no record is delivered more than the limit, the start offset
// only moves forward over done records, and a restored state loses no
// acknowledgement.
func TestRandomized(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomized(t, seed, 500) })
	}
}

func randomized(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed))
	lim := Limits{LockMillis: 100, DeliveryLimit: 3, MaxInFlight: 40}
	p := NewPartition(0, lim)
	members := []string{"a", "b", "c"}
	type model struct {
		owner string
		until int64
		count int16
		done  bool
	}
	m := map[int64]*model{}
	hw := int64(0)
	now := int64(0)
	held := map[string][]Acquisition{}
	for step := range steps {
		now += int64(rng.IntN(30))
		switch op := rng.IntN(10); {
		case op < 2: // produce
			hw += int64(1 + rng.IntN(8))
		case op < 5: // fetch
			mem := members[rng.IntN(3)]
			from, ok := p.FetchFrom()
			if !ok || from >= hw {
				continue
			}
			base := from - int64(rng.IntN(3)) // a read may start inside a batch
			acq, _ := p.Acquire(mem, now, from, spans(max(base, 0), hw-1, int64(1+rng.IntN(5))), rng.IntN(12), rng.IntN(2) == 0)
			for _, a := range acq {
				for off := a.First; off <= a.Last; off++ {
					r := m[off]
					if r == nil {
						r = &model{}
						m[off] = r
					}
					switch {
					case r.done:
						t.Fatalf("step %d: %s acquired %d, which is done", step, mem, off)
					case r.owner != "" && r.until > now:
						t.Fatalf("step %d: %s acquired %d, locked by %s until %d (now %d)", step, mem, off, r.owner, r.until, now)
					case r.count >= lim.DeliveryLimit:
						t.Fatalf("step %d: %d delivered a %dth time", step, off, r.count+1)
					}
					r.count++
					if a.DeliveryCount != r.count {
						t.Fatalf("step %d: %d delivery count %d, model %d", step, off, a.DeliveryCount, r.count)
					}
					r.owner, r.until = mem, now+lim.LockMillis
				}
				held[mem] = append(held[mem], a)
			}
		case op < 8: // acknowledge part of what a member holds
			mem := members[rng.IntN(3)]
			if len(held[mem]) == 0 {
				continue
			}
			i := rng.IntN(len(held[mem]))
			a := held[mem][i]
			held[mem] = append(held[mem][:i], held[mem][i+1:]...)
			typ := int8(1 + rng.IntN(3))
			err := p.Acknowledge(mem, now, a.First, a.Last, []int8{typ})
			valid := true
			for off := a.First; off <= a.Last; off++ {
				if r := m[off]; r.done || r.owner != mem || r.until <= now {
					valid = false
				}
			}
			// A lock may have expired in p only when Expire ran.
			if valid && err != nil && !errors.Is(err, kerr.InvalidRecordState) {
				t.Fatalf("step %d: ack %v: %v", step, a, err)
			}
			if err == nil {
				for off := a.First; off <= a.Last; off++ {
					r := m[off]
					r.owner, r.until = "", 0
					if typ == int8(AckAccept) || typ == int8(AckReject) || r.count >= lim.DeliveryLimit {
						r.done = true
					}
				}
			}
		case op < 9: // expire
			p.Expire(now)
			for _, r := range m {
				if r.owner != "" && r.until <= now {
					r.owner, r.until = "", 0
					if r.count >= lim.DeliveryLimit {
						r.done = true
					}
				}
			}
		default: // restart from the persisted state
			st := p.State()
			var err error
			if p, err = Restore(st, lim, 1<<20); err != nil {
				t.Fatalf("step %d: restore: %v", step, err)
			}
			held = map[string][]Acquisition{}
			for _, r := range m {
				r.owner, r.until = "", 0
				if r.count >= lim.DeliveryLimit {
					r.done = true
				}
			}
		}
		for off := int64(0); off < p.Start(); off++ {
			if r := m[off]; r == nil || !r.done {
				t.Fatalf("step %d: start %d passed %d, which is not done (%+v)", step, p.Start(), off, r)
			}
		}
	}
}
