package metadata

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"
)

// feed applies rec to f as raft would, at the next index.
func feed(t testing.TB, f *FSM, rec Record) Result {
	t.Helper()
	b, err := EncodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	return f.Apply(&raft.Log{Index: f.Image().Index() + 1, Type: raft.LogCommand, Data: b}).(Result)
}

func TestFSMApplyPublishesAndNotifies(t *testing.T) {
	var events []ApplyEvent
	f := NewFSM(FSMOptions{OnApply: func(e ApplyEvent) { events = append(events, e) }})
	sub := f.Subscribe()
	defer sub.Close()
	first := f.Image()
	if r := feed(t, f, InitCluster{ClusterID: "c"}); r.Err != nil || r.Index != 1 {
		t.Fatalf("result %+v", r)
	}
	r := feed(t, f, InitCluster{ClusterID: "d"})
	if !errors.Is(r.Err, kerr.InconsistentClusterID) || r.Index != 2 {
		t.Fatalf("result %+v", r)
	}
	if f.Image().Index() != 2 || f.Image().ClusterID() != "c" || first.ClusterID() != "" {
		t.Fatal("images wrong")
	}
	// Two publishes, one pending wake-up.
	select {
	case <-sub.C():
	default:
		t.Fatal("no wake-up")
	}
	select {
	case <-sub.C():
		t.Fatal("wake-ups do not coalesce")
	default:
	}
	if len(events) != 2 || events[1].Result.Err == nil || events[1].Record != (InitCluster{ClusterID: "d"}) {
		t.Fatalf("events %+v", events)
	}
	d := Diff(first, f.Image())
	if !d.ClusterID || d.Empty() {
		t.Fatalf("delta %+v", d)
	}
}

func TestFSMWaitIndex(t *testing.T) {
	f := NewFSM(FSMOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan *Image, 1)
	go func() {
		img, err := f.WaitIndex(ctx, 3)
		if err != nil {
			t.Error(err)
		}
		got <- img
	}()
	feed(t, f, InitCluster{ClusterID: "c"})
	feed(t, f, DeleteTopic{Name: "x"})
	select {
	case <-got:
		t.Fatal("WaitIndex returned before index 3")
	default:
	}
	feed(t, f, DeleteTopic{Name: "y"})
	if img := <-got; img == nil || img.Index() != 3 {
		t.Fatalf("WaitIndex gave %v", img)
	}
	short, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	if _, err := f.WaitIndex(short, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
}

func TestFSMHaltsOnUndecodableEntry(t *testing.T) {
	f := NewFSM(FSMOptions{})
	feed(t, f, InitCluster{ClusterID: "c"})
	res := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: []byte{9, 9}}).(Result)
	if res.Err == nil || f.Err() == nil || !errors.Is(f.Err(), ErrMalformed) {
		t.Fatalf("result %+v, Err %v", res, f.Err())
	}
	// Later entries are not applied; snapshots are refused.
	b, _ := EncodeRecord(InitCluster{ClusterID: "c"})
	if r := f.Apply(&raft.Log{Index: 3, Data: b}).(Result); r.Err == nil || f.Image().Index() != 1 {
		t.Fatal("a halted FSM applied an entry")
	}
	if _, err := f.Snapshot(); err == nil {
		t.Fatal("a halted FSM took a snapshot")
	}
	if _, err := f.WaitIndex(context.Background(), 5); err == nil {
		t.Fatal("WaitIndex on a halted FSM did not fail")
	}
}

type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

func TestFSMSnapshotRestore(t *testing.T) {
	f := NewFSM(FSMOptions{})
	for _, rec := range []Record{InitCluster{ClusterID: "c"}, RegisterBroker{ID: 1, Incarnation: UUID{1}, KafkaAddr: "h:1"}, UnfenceBroker{ID: 1, Epoch: 2}} {
		if r := feed(t, f, rec); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	feed(t, f, CreateTopic{Name: "t", ID: UUID{5}, Replicas: [][]int32{{1}}})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	feed(t, f, DeleteTopic{Name: "t"}) // after the snapshot: not in it
	var sink memSink
	if err := snap.Persist(&sink); err != nil || !sink.closed {
		t.Fatalf("persist: %v", err)
	}
	snap.Release()

	g := NewFSM(FSMOptions{})
	sub := g.Subscribe()
	defer sub.Close()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if g.Image().Index() != 4 || g.Image().Topic("t") == nil {
		t.Fatalf("restored image at %d", g.Image().Index())
	}
	select {
	case <-sub.C():
	default:
		t.Fatal("restore did not wake subscribers")
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader([]byte("{}")))); err == nil {
		t.Fatal("restored a bad snapshot")
	}
	if g.Image().Index() != 4 {
		t.Fatal("a failed restore changed the image")
	}
}
