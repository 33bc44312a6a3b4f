// Package faultring is a test-only fault seam for the broker's file
// layer: an Injector wraps the ring.Backend of every writer shard
// (engine.Config.WrapBackend) and can fail the Nth write or fdatasync
// with an errno (EIO, ENOSPC), tear a write (write half of it, then
// fail), or slow writes down to a fixed bandwidth, so that tests drive
// the engine's failure and overload paths deterministically.
//
// Faults keep ring's batch semantics: an operation that fails ends its
// link chain, whose later operations complete with ring.ErrCanceled, as
// the real backends do. Operations run one by one through the wrapped
// backend (batching is not what these tests measure).
package faultring

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ringlog/ringlog/ring"
)

// Injector decides, for all the backends it wrapped, which operations
// fail and how slow writes are. Its methods are safe for concurrent use.
type Injector struct {
	mu sync.Mutex
	// writeFault and syncFault: the operation that fails is the one that
	// brings the counter to zero (counting down from the Nth).
	writeIn, syncIn   int
	writeErr, syncErr syscall.Errno
	tear              bool

	writes, syncs atomic.Int64 // operations run (not failed)
	failed        atomic.Int64 // operations failed by the injector
	rate          atomic.Int64 // write bandwidth in bytes/s; 0: unlimited

	paceMu   sync.Mutex
	nextFree time.Time // when the slowed "disk" is free for the next write
}

// New returns an injector with no fault armed.
func New() *Injector { return &Injector{} }

// Wrap has the signature of engine.Config.WrapBackend: it returns b with
// the injector's faults.
func (in *Injector) Wrap(shard int, b ring.Backend) ring.Backend {
	return &backend{in: in, inner: b}
}

// FailWrite makes the nth write from now (1: the next one) fail with
// errno, writing nothing; tear: it writes the first half of its bytes
// first (a torn write, as a disk filling up mid-write leaves).
func (in *Injector) FailWrite(n int, errno syscall.Errno, tear bool) {
	in.mu.Lock()
	in.writeIn, in.writeErr, in.tear = n, errno, tear
	in.mu.Unlock()
}

// FailSync makes the nth fdatasync from now fail with errno (the data it
// should have flushed is written but not known to be durable: the
// fsyncgate case).
func (in *Injector) FailSync(n int, errno syscall.Errno) {
	in.mu.Lock()
	in.syncIn, in.syncErr = n, errno
	in.mu.Unlock()
}

// FailAllWrites makes every write from now fail with errno (a full disk)
// until Heal.
func (in *Injector) FailAllWrites(errno syscall.Errno) {
	in.mu.Lock()
	in.writeIn, in.writeErr, in.tear = -1, errno, false
	in.mu.Unlock()
}

// Heal disarms every fault.
func (in *Injector) Heal() {
	in.mu.Lock()
	in.writeIn, in.syncIn = 0, 0
	in.mu.Unlock()
}

// SetWriteRate limits writes, over all the backends the injector wrapped,
// to bytesPerSec: one disk of that bandwidth, which writes one at a time
// (each write waits for the ones before it, then for its own length at
// that rate); 0 removes the limit.
func (in *Injector) SetWriteRate(bytesPerSec int64) { in.rate.Store(bytesPerSec) }

// Writes is the number of writes run successfully so far.
func (in *Injector) Writes() int64 { return in.writes.Load() }

// Syncs is the number of fdatasyncs run successfully so far.
func (in *Injector) Syncs() int64 { return in.syncs.Load() }

// Failed is the number of operations the injector failed.
func (in *Injector) Failed() int64 { return in.failed.Load() }

// decide says whether op fails, with which errno, and whether it tears.
func (in *Injector) decide(kind ring.OpKind) (syscall.Errno, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch kind {
	case ring.OpWritev:
		if in.writeIn < 0 {
			return in.writeErr, false
		}
		if in.writeIn > 0 {
			in.writeIn--
			if in.writeIn == 0 {
				return in.writeErr, in.tear
			}
		}
	case ring.OpFdatasync:
		if in.syncIn > 0 {
			in.syncIn--
			if in.syncIn == 0 {
				return in.syncErr, false
			}
		}
	}
	return 0, false
}

type backend struct {
	in    *Injector
	inner ring.Backend
	one   [1]ring.Op
}

func (b *backend) Name() string { return "faultring(" + b.inner.Name() + ")" }

func (b *backend) Close() error { return b.inner.Close() }

// Run runs ops one at a time through the wrapped backend, failing the
// ones the injector picks and canceling the rest of a failed chain.
func (b *backend) Run(ops []ring.Op) error {
	chainFailed := false
	for i := range ops {
		op := &ops[i]
		op.Res, op.Err = 0, nil
		switch {
		case chainFailed:
			op.Err = ring.ErrCanceled
		default:
			if err := b.runOne(op); err != nil {
				return err
			}
			chainFailed = op.Err != nil
		}
		if !op.Link {
			chainFailed = false
		}
	}
	return nil
}

func (b *backend) runOne(op *ring.Op) error {
	if op.Kind == ring.OpWritev {
		b.in.pace(op.Len())
	}
	errno, tear := b.in.decide(op.Kind)
	if errno != 0 {
		b.in.failed.Add(1)
		if tear {
			half := *op
			half.Link = false
			half.Bufs = firstBytes(op.Bufs, op.Len()/2)
			b.one[0] = half
			if err := b.inner.Run(b.one[:]); err != nil {
				return err
			}
			op.Res = b.one[0].Res
		}
		op.Err = &ring.OpError{Kind: op.Kind, Fd: op.Fd, Offset: op.Offset, Err: errno}
		return nil
	}
	b.one[0] = *op
	b.one[0].Link = false
	if err := b.inner.Run(b.one[:]); err != nil {
		return err
	}
	op.Res, op.Err = b.one[0].Res, b.one[0].Err
	b.one[0] = ring.Op{}
	if op.Err == nil {
		if op.Kind == ring.OpWritev {
			b.in.writes.Add(1)
		} else {
			b.in.syncs.Add(1)
		}
	}
	return nil
}

// firstBytes is the first n bytes of bufs, as buffers.
func firstBytes(bufs [][]byte, n int64) [][]byte {
	var out [][]byte
	for _, buf := range bufs {
		if n <= 0 {
			break
		}
		take := min(int64(len(buf)), n)
		out = append(out, buf[:take])
		n -= take
	}
	return out
}

// pace holds a write of n bytes for its turn on the slowed disk.
func (in *Injector) pace(n int64) {
	r := in.rate.Load()
	if r <= 0 {
		return
	}
	d := time.Duration(float64(n) / float64(r) * float64(time.Second))
	in.paceMu.Lock()
	now := time.Now()
	start := in.nextFree
	if start.Before(now) {
		start = now
	}
	in.nextFree = start.Add(d)
	done := in.nextFree
	in.paceMu.Unlock()
	time.Sleep(time.Until(done))
}
