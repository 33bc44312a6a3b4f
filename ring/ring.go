// Package ring submits batches of file writes and syncs to the kernel.
//
// It owns three implementations of one small interface, Backend:
//
//   - the io_uring backend (uring_linux.go): a pure-Go binding on
//     golang.org/x/sys/unix that sets up a ring, mmaps its SQ/CQ rings and
//     SQE array, prepares WRITEV / FSYNC(DATASYNC) entries, links a sync
//     behind the writes it must follow, and hands a whole batch to the
//     kernel with one io_uring_enter call (several when the batch has more
//     entries than the ring: it is then cut at link-chain boundaries);
//   - the portable backend (portable.go): the same batch run as pwritev and
//     fdatasync system calls, one after another;
//   - the hybrid backend (hybrid.go), the default: writes inline with
//     pwritev, and the batch's fdatasyncs handed to io_uring together so
//     the kernel flushes many files concurrently. It exists because of a
//     measurement: buffered writes through io_uring are punted to kernel
//     worker threads and lose to pwritev, while concurrent syncs win.
//
// Besides batches, StartWriteback passes on a hint to start the kernel's
// writeback of a file range (sync_file_range) and DropCache one to drop a
// written-back range from the page cache (posix_fadvise DONTNEED): the
// ring-backed backends submit them without waiting, so that the caller,
// an event loop on the direct-write path, does not wait while the kernel
// does the work.
//
// All backends give a batch the same meaning, including link chains and
// short writes (see Op), and none allocates in steady state on Linux.
// Off Linux only the portable backend exists (pwrite and fsync; on macOS
// fsync does not flush the drive's write cache, so syncs there are not a
// durability promise: macOS is a development platform).
//
// New, with KindAuto, returns the hybrid backend, which uses io_uring when
// the kernel lets us set up a ring and otherwise runs syncs one by one (old
// kernel, io_uring_disabled, a seccomp profile that refuses
// io_uring_setup), reporting which one it chose and why.
//
// The package knows nothing about logs, segments or Kafka: it moves bytes to
// file descriptors and reports, per operation, how it went.
package ring

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// MaxIovecs is the most buffers one vectored system call takes (pwritev,
// writev, sendmsg, IORING_OP_WRITEV): the kernel's UIO_MAXIOV, which is
// IOV_MAX, 1024 on Linux and the BSDs. Longer lists are split.
const MaxIovecs = 1024

// OpKind says what an Op does.
type OpKind uint8

const (
	// OpWritev writes Bufs, in order, at Offset of Fd (like pwritev).
	OpWritev OpKind = iota + 1
	// OpFdatasync flushes Fd's data (and the metadata needed to read it
	// back) to stable storage, like fdatasync.
	OpFdatasync
)

// String returns "writev", "fdatasync" or "op(N)".
func (k OpKind) String() string {
	switch k {
	case OpWritev:
		return "writev"
	case OpFdatasync:
		return "fdatasync"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Op is one operation of a batch. The caller fills the request fields; Run
// fills Res and Err.
//
// Link chains an operation to the next one in the slice: the next starts only
// after this one completed successfully, and if this one fails (or writes
// short) every following operation of the chain completes with
// ErrCanceled. A chain ends at the first Op without Link. This is how a sync
// is made to follow the writes it must cover.
//
// A write that the kernel completes short (fewer bytes than asked, no
// error) is finished by the backend with pwritev before anything after it
// in its chain runs; only when that fails too does the write end with
// ErrShortWrite (Res then says how much was written) and its chain with
// ErrCanceled. A negative Offset fails with EINVAL.
type Op struct {
	Kind   OpKind
	Fd     int
	Offset int64    // file position, OpWritev only
	Bufs   [][]byte // data, OpWritev only; must stay untouched until Run returns
	Link   bool

	// Res is the number of bytes written (OpWritev) or 0 (OpFdatasync).
	Res int64
	// Err is nil on success, ErrCanceled when a linked predecessor failed,
	// ErrShortWrite when fewer bytes than asked were written, or the
	// operation's errno wrapped with context. The last two come wrapped
	// in an *OpError: test them with errors.Is.
	Err error
}

// Len is the number of bytes an OpWritev asks to write.
func (o *Op) Len() int64 {
	var n int64
	for _, b := range o.Bufs {
		n += int64(len(b))
	}
	return n
}

// ErrCanceled is the error of an operation that never ran because an earlier
// operation of its link chain failed.
var ErrCanceled = errors.New("ring: canceled: an earlier linked operation failed")

// ErrShortWrite is the error of a write that wrote fewer bytes than asked and
// could not finish (the disk is full, for example).
var ErrShortWrite = errors.New("ring: short write")

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("ring: backend closed")

// OpError is the error of an operation the kernel failed (or that wrote
// short). Err is the cause: a syscall.Errno such as EBADF or ENOSPC, or an
// error wrapping ErrShortWrite (and, when known, the errno that stopped the
// write), so errors.Is works on Op.Err for both.
type OpError struct {
	Kind   OpKind
	Fd     int
	Offset int64 // OpWritev only
	Err    error
}

func (e *OpError) Error() string {
	if e.Kind == OpWritev {
		return fmt.Sprintf("ring: %s fd %d at offset %d: %v", e.Kind, e.Fd, e.Offset, e.Err)
	}
	return fmt.Sprintf("ring: %s fd %d: %v", e.Kind, e.Fd, e.Err)
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Backend runs batches of operations.
//
// A Backend is owned by one goroutine: Run and Close must not be called
// concurrently. (The io_uring backend may tie itself to the OS thread of its
// owner; the owner must then call runtime.LockOSThread before New and keep it.)
type Backend interface {
	// Run submits every operation of ops as one batch and returns when all
	// of them completed, with Res and Err filled in. The error return is
	// for failures of the submission itself (the ring broke); per-operation
	// failures are reported in the Ops, not here.
	Run(ops []Op) error
	// Name says which implementation this is: "io_uring" or "pwritev".
	Name() string
	// Close releases the backend's kernel resources.
	Close() error
}

// Kind selects a backend implementation.
type Kind string

const (
	// KindAuto is the default: hybrid, with io_uring for syncs when it can
	// be set up.
	KindAuto Kind = "auto"
	// KindHybrid is pwritev for writes, io_uring for concurrent syncs.
	KindHybrid Kind = "hybrid"
	// KindIOUring requires io_uring; New fails if it cannot be set up.
	KindIOUring Kind = "io_uring"
	// KindPortable is pwritev + fdatasync.
	KindPortable Kind = "pwritev"
)

// EnvBackend names the environment variable that picks the kind when
// Options ask for KindAuto (tests use it to run a whole suite on the
// portable path).
const EnvBackend = "RINGLOG_BACKEND"

// ParseKind turns a flag value into a Kind.
func ParseKind(s string) (Kind, error) {
	switch Kind(strings.ToLower(strings.TrimSpace(s))) {
	case "", KindAuto:
		return KindAuto, nil
	case KindIOUring, "iouring", "uring":
		return KindIOUring, nil
	case KindPortable, "portable":
		return KindPortable, nil
	case KindHybrid:
		return KindHybrid, nil
	}
	return "", fmt.Errorf("unknown io backend %q: use auto, hybrid, io_uring or pwritev", s)
}

// Options configure New.
type Options struct {
	// Kind chooses the implementation. KindAuto (or empty) lets the
	// RINGLOG_BACKEND environment variable choose, when set; an explicit
	// kind is never overridden.
	Kind Kind
	// Entries is the io_uring submission queue size (rounded up to a power
	// of two and clamped to the kernel's maximum, 32768); batches larger
	// than this are submitted in several io_uring_enter calls. 0 means 256.
	Entries uint32
	// SingleIssuer asks for IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN. The
	// owning goroutine must have called runtime.LockOSThread before New
	// and stay locked: the ring then only accepts io_uring_enter from that
	// thread (Run fails with EEXIST from any other). A kernel that refuses
	// the flags gets a plain ring instead (see URing.SingleIssuer).
	SingleIssuer bool
}

// New returns the backend that opts ask for. With KindAuto (or
// KindHybrid) it returns the hybrid backend; fallback, when not empty,
// says why that backend runs without io_uring.
func New(opts Options) (b Backend, fallback string, err error) {
	kind := opts.Kind
	if env := os.Getenv(EnvBackend); env != "" && (kind == "" || kind == KindAuto) {
		if kind, err = ParseKind(env); err != nil {
			return nil, "", fmt.Errorf("%s: %w", EnvBackend, err)
		}
	}
	switch kind {
	case KindPortable:
		return NewPortable(), "", nil
	case KindIOUring:
		u, err := NewURing(opts)
		if err != nil {
			return nil, "", err
		}
		return u, "", nil
	default:
		h, fallback := NewHybrid(opts)
		return h, fallback, nil
	}
}
