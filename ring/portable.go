package ring

import (
	"errors"
	"fmt"
)

// Portable is the Backend that runs a batch as plain system calls, one
// operation after another, in slice order: pwritev (looping on short
// writes, retrying EINTR, at most MaxIovecs iovecs per call) and fdatasync.
//
// Link chains keep their meaning: when an operation fails, the following
// operations of its chain are not run and complete with ErrCanceled.
// Operations of other chains are unaffected.
//
// On Linux Run does not allocate in steady state (it reuses one iovec
// array); elsewhere on Unix it writes buffer by buffer with pwrite and syncs
// with fsync.
type Portable struct {
	sc     sysScratch
	closed bool
}

// NewPortable returns a portable backend. It holds no kernel resources.
func NewPortable() *Portable { return &Portable{} }

// Name returns "pwritev".
func (p *Portable) Name() string { return string(KindPortable) }

// Close marks the backend closed; Run then returns ErrClosed.
func (p *Portable) Close() error {
	p.closed = true
	p.sc = sysScratch{}
	return nil
}

// Run runs ops in order and fills their Res and Err. It returns ErrClosed
// after Close and nil otherwise: per-operation failures are in the Ops.
func (p *Portable) Run(ops []Op) error {
	if p.closed {
		return ErrClosed
	}
	canceled := false
	for i := range ops {
		op := &ops[i]
		op.Res, op.Err = 0, nil
		if canceled {
			op.Err = ErrCanceled
		} else {
			runSync(op, &p.sc)
			canceled = op.Err != nil
		}
		if !op.Link {
			canceled = false
		}
	}
	return nil
}

// errUnknownKind is the cause of an Op whose Kind is neither OpWritev nor
// OpFdatasync.
var errUnknownKind = fmt.Errorf("%w: unknown operation kind", errors.ErrUnsupported)

// runSync runs one operation with plain system calls and sets its Res and
// Err. Both backends use it (io_uring for the pieces it runs itself).
func runSync(op *Op, sc *sysScratch) {
	switch op.Kind {
	case OpWritev:
		n, err := writeAll(op.Fd, op.Bufs, op.Offset, 0, sc)
		setWriteResult(op, n, err)
	case OpFdatasync:
		op.Res = 0
		if err := fdatasync(op.Fd); err != nil {
			op.Err = &OpError{Kind: op.Kind, Fd: op.Fd, Err: err}
		}
	default:
		op.Res = 0
		op.Err = &OpError{Kind: op.Kind, Fd: op.Fd, Err: errUnknownKind}
	}
}

// setWriteResult records that an OpWritev wrote written bytes in all and
// stopped with cause (nil: it stopped without an error, or it finished).
// Nothing written and an error: Err is that error. Some but not all
// written: Err wraps ErrShortWrite, the count, and the cause when known.
func setWriteResult(op *Op, written int64, cause error) {
	op.Res = written
	want := op.Len()
	switch {
	case written >= want:
		op.Err = nil
	case written == 0 && cause != nil:
		op.Err = &OpError{Kind: OpWritev, Fd: op.Fd, Offset: op.Offset, Err: cause}
	case cause != nil:
		op.Err = &OpError{Kind: OpWritev, Fd: op.Fd, Offset: op.Offset,
			Err: fmt.Errorf("%w: wrote %d of %d bytes: %w", ErrShortWrite, written, want, cause)}
	default:
		op.Err = &OpError{Kind: OpWritev, Fd: op.Fd, Offset: op.Offset,
			Err: fmt.Errorf("%w: wrote %d of %d bytes", ErrShortWrite, written, want)}
	}
}
