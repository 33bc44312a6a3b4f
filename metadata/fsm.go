package metadata

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// maxSnapshotBytes bounds what Restore reads: images are kilobytes to a few
// megabytes.
const maxSnapshotBytes = 1 << 30

// ApplyEvent describes one applied log entry, for FSMOptions.OnApply.
type ApplyEvent struct {
	Index uint64
	// Record is nil when the entry did not decode (the FSM halted).
	Record Record
	Result Result
}

// FSMOptions configures an FSM.
type FSMOptions struct {
	// Logger receives the FSM's errors (nil: slog.Default()).
	Logger *slog.Logger
	// OnApply, if set, is called synchronously by Apply after every entry,
	// on Raft's FSM goroutine: it must be quick and must not block (count
	// refusals in a metric, record results in a test).
	OnApply func(ApplyEvent)
}

// FSM is the metadata state machine (raft.FSM). Raft's FSM goroutine calls
// Apply, Snapshot and Restore; readers call Image at any time, without
// locks. Every applied entry publishes a new *Image (atomic pointer swap)
// and wakes the subscribers.
//
// An entry that does not decode (a newer broker's record, or a corrupt
// log) halts the FSM: it stops applying, keeps its last image, refuses to
// snapshot, and Err reports why. Skipping the entry instead would let this
// node's image silently diverge from the others'.
type FSM struct {
	opts FSMOptions
	log  *slog.Logger
	cur  atomic.Pointer[Image]

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every publish
	subs    map[*Subscription]struct{}
	halted  error
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM returns an FSM holding NewImage().
func NewFSM(opts FSMOptions) *FSM {
	f := &FSM{opts: opts, log: opts.Logger, changed: make(chan struct{}), subs: map[*Subscription]struct{}{}}
	if f.log == nil {
		f.log = slog.Default()
	}
	f.cur.Store(NewImage())
	return f
}

// Image returns the current image.
func (f *FSM) Image() *Image { return f.cur.Load() }

// Err returns why the FSM halted, or nil.
func (f *FSM) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.halted
}

// Apply applies one committed log entry and returns its Result (to
// raft.ApplyFuture.Response on the proposing node).
func (f *FSM) Apply(l *raft.Log) any {
	if err := f.Err(); err != nil {
		return Result{Index: l.Index, Err: err}
	}
	rec, err := DecodeRecord(l.Data)
	if err != nil {
		err = fmt.Errorf("metadata: log entry %d: %w; this node stops applying metadata (upgrade it, or rebuild its metadata directory from the other nodes)", l.Index, err)
		f.log.Error("metadata FSM halted", "index", l.Index, "err", err)
		f.mu.Lock()
		f.halted = err
		f.mu.Unlock()
		res := Result{Index: l.Index, Err: err}
		f.notify()
		if f.opts.OnApply != nil {
			f.opts.OnApply(ApplyEvent{Index: l.Index, Result: res})
		}
		return res
	}
	next, res := f.cur.Load().Apply(l.Index, rec)
	f.publish(next)
	if f.opts.OnApply != nil {
		f.opts.OnApply(ApplyEvent{Index: l.Index, Record: rec, Result: res})
	}
	return res
}

// Snapshot captures the current image (cheap: images are immutable); the
// encoding happens in Persist, concurrently with later Applies.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.Err(); err != nil {
		return nil, err
	}
	return imageSnapshot{f.cur.Load()}, nil
}

// Restore replaces the image with a snapshot's (EncodeImage format).
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxSnapshotBytes+1))
	if err != nil {
		return fmt.Errorf("metadata: read snapshot: %w", err)
	}
	if len(b) > maxSnapshotBytes {
		return fmt.Errorf("metadata: snapshot is over %d bytes", maxSnapshotBytes)
	}
	img, err := DecodeImage(b)
	if err != nil {
		return err
	}
	f.publish(img)
	return nil
}

func (f *FSM) publish(img *Image) {
	f.cur.Store(img)
	f.notify()
}

func (f *FSM) notify() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.changed)
	f.changed = make(chan struct{})
	for s := range f.subs {
		select {
		case s.c <- struct{}{}:
		default: // a wake-up is already pending: it covers this one too
		}
	}
}

// WaitIndex waits until the image's index is at least index (or the FSM
// halts, or ctx ends) and returns the image: after Propose on another node
// returned index i, WaitIndex(i) gives reads that see that write.
func (f *FSM) WaitIndex(ctx context.Context, index uint64) (*Image, error) {
	for {
		f.mu.Lock()
		ch, halted := f.changed, f.halted
		f.mu.Unlock()
		img := f.cur.Load()
		if img.index >= index {
			return img, nil
		}
		if halted != nil {
			return nil, halted
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("metadata: waiting for index %d (at %d): %w", index, img.index, ctx.Err())
		}
	}
}

// Subscription wakes its owner after new images were published. Wake-ups
// coalesce: one pending wake-up stands for any number of new images, so
// the FSM never blocks on a slow subscriber and the subscriber never
// misses a change — it compares the image it handled last with the
// current one (Diff).
type Subscription struct {
	f *FSM
	c chan struct{}
}

// Subscribe returns a new Subscription. Its first wake-up comes with the
// next published image; handle the current one (FSM.Image) first.
func (f *FSM) Subscribe() *Subscription {
	s := &Subscription{f: f, c: make(chan struct{}, 1)}
	f.mu.Lock()
	f.subs[s] = struct{}{}
	f.mu.Unlock()
	return s
}

// C receives a value after one or more new images were published.
func (s *Subscription) C() <-chan struct{} { return s.c }

// Close stops the wake-ups.
func (s *Subscription) Close() {
	s.f.mu.Lock()
	delete(s.f.subs, s)
	s.f.mu.Unlock()
}

type imageSnapshot struct{ img *Image }

// Persist writes the image as JSON to the snapshot sink.
func (s imageSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(EncodeImage(s.img)); err != nil {
		return errors.Join(fmt.Errorf("metadata: write snapshot: %w", err), sink.Cancel())
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot; nothing to release.
func (imageSnapshot) Release() {}
