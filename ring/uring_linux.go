//go:build linux

package ring

// The io_uring binding.
//
// Ring memory layout
//
// io_uring_setup(2) returns a file descriptor and fills io_uring_params with
// the sizes of three shared memory areas and the byte offsets of the fields
// inside them. We map them with mmap(2) on the ring fd at fixed "offsets"
// that name the area:
//
//	SQ ring, mmap offset IORING_OFF_SQ_RING (0), field offsets in params.sqOff
//	+------+------+-----------+--------------+-------+---------+---------------------+
//	| head | tail | ring_mask | ring_entries | flags | dropped | array[sq_entries]   |
//	+------+------+-----------+--------------+-------+---------+---------------------+
//	  kernel  us                                                  u32 SQE indexes
//	  moves   move
//
//	SQE array, mmap offset IORING_OFF_SQES (0x10000000)
//	+-----------+-----------+-----+-------------------------+
//	| sqe[0] 64B| sqe[1] 64B| ... | sqe[sq_entries-1] 64B   |
//	+-----------+-----------+-----+-------------------------+
//
//	CQ ring, mmap offset IORING_OFF_CQ_RING (0x8000000), field offsets in
//	params.cqOff; with IORING_FEAT_SINGLE_MMAP it is not mapped separately:
//	it lives in the SQ ring's mapping (one mmap of the larger of the two
//	sizes serves both)
//	+------+------+-----------+--------------+----------+-------------------------+
//	| head | tail | ring_mask | ring_entries | overflow | cqes[cq_entries] 16B    |
//	+------+------+-----------+--------------+----------+-------------------------+
//	  us     kernel
//	  moves  moves
//
// Head and tail are free-running uint32 counters; the slot of counter c is
// c & ring_mask (the sizes are powers of two). Each ring has one producer
// and one consumer:
//
//   - SQ: we produce. We write an SQE into sqe[tail & mask], put its index
//     into array[tail & mask] (we set array[i] = i once at setup, so the
//     indirection is the identity), and publish with an atomic store of
//     tail+1. io_uring_enter(to_submit) makes the kernel consume entries
//     from head and advance head; an entry is free again once head passed
//     it. tail - head is the number of entries not yet consumed.
//   - CQ: the kernel produces. We load tail atomically, read the 16-byte
//     CQEs from cqes[head & mask] up to tail, then store the new head so
//     the kernel may reuse those slots.
//
// The Go atomics (sequentially consistent) give the ordering the kernel
// expects from the liburing smp_store_release / smp_load_acquire pairs. We
// never queue more SQEs than the SQ holds and never have more in flight
// than the CQ (twice as large) holds, so the CQ cannot overflow: a round
// has at most sq_entries in flight, and detached requests (below) at most
// cq_entries - sq_entries more.
//
// Detached requests
//
// StartWriteback submits a SYNC_FILE_RANGE SQE and DropCache a FADVISE
// (DONTNEED) SQE, and both return without waiting for it; the kernel
// always runs either on an io-wq worker. Its user_data has the top bit set
// (the next one for a drop, and the fd in the low bits), which no round's
// SQE has, so whoever reaps the CQ next (a Run, or the next hint) counts
// it off and keeps its error for the next hint to report. A kernel without
// IORING_OP_FADVISE (before 5.6) answers a drop with EINVAL: that is not
// reported, and later drops make the system call. When
// maxDetached are in flight the next hint runs as a plain system call,
// which throttles its caller the way a synchronous writeback start would.
// The kernel looks the fd up when the worker runs: should the file be
// closed and its number reused before that, the hint lands on another
// file, which is harmless for a hint.
//
// Memory rules
//
// An SQE carries raw addresses: for IORING_OP_WRITEV the address of an
// iovec array, whose entries hold the addresses of the caller's buffers.
// The kernel reads the iovec array when it prepares the request and the
// buffers when the (possibly punted, io-wq) write runs, after
// io_uring_enter returned. Go does not see uintptrs in mmapped memory, so:
//
//   - the iovec array must be heap memory: goroutine stacks move when they
//     grow, which would leave the kernel a dangling address; heap objects do
//     not move. We keep one []unix.Iovec per URing, grown (never while a
//     batch is in flight) and reused, so steady-state Run does not allocate;
//   - the buffers and the iovec array must stay reachable until their
//     completions are reaped: the URing holds the array, the ops slice
//     holds the buffers, and runtime.KeepAlive(ops) follows the reaping;
//   - after the batch we clear the iovec entries so the URing does not pin
//     the caller's buffers.
//
// EINTR
//
// Go preempts goroutines with signals (SIGURG). io_uring_enter waiting for
// completions is not restarted by SA_RESTART: it returns EINTR. That is not
// a failure: we reap what completed and call it again, submitting whatever
// the kernel did not yet consume (tail - head) and waiting for the rest. We
// count submissions from the SQ head, not from return values, so a retry
// never submits an entry twice. EAGAIN and EBUSY are retried the same way.
//
// Links and short writes
//
// Op.Link becomes IOSQE_IO_LINK: the kernel starts the next SQE only when
// this one succeeded, and fails the rest of the chain with ECANCELED
// otherwise. An Op with more than MaxIovecs buffers (UIO_MAXIOV) becomes several
// WRITEV SQEs linked to each other. A short write counts as a failure for
// the kernel, so it cancels the rest of the chain. We then repair the chain
// ourselves, after all completions of the batch are in: finish the write's
// remainder with pwritev, then run the canceled operations of that chain
// synchronously (pwritev / fdatasync) in order, so the caller sees the
// chain complete. (We rerun them even if the kernel did run them: writing
// the same bytes at the same offset again is harmless, and a sync must
// follow the repaired write.) If the remainder cannot be written the write
// fails with ErrShortWrite and the rest of the chain with ErrCanceled.
//
// Batches larger than the ring
//
// A batch is submitted in rounds of at most sq_entries SQEs, each round one
// io_uring_enter that submits it and waits for all of it. Rounds end at
// link-chain boundaries. A chain larger than the ring is the exception: it
// is split between operations across rounds (the last SQE of a round never
// carries IOSQE_IO_LINK); since a round is complete before the next one is
// submitted, the chain's order is kept, and its state (failed: cancel the
// rest) is carried over by Run. An Op needing more SQEs than the whole ring
// (over 1024*sq_entries buffers), and an Op of unknown Kind, is run
// synchronously at its place in the order.

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// io_uring ABI constants (include/uapi/linux/io_uring.h).
const (
	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	setupClamp        = 1 << 4
	setupSubmitAll    = 1 << 7
	setupCoopTaskrun  = 1 << 8
	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13

	enterGetEvents = 1 << 0

	sqeIOLink = 1 << 2

	opWritev        = 2
	opFsync         = 3
	opSyncFileRange = 8
	opFadvise       = 24

	fsyncDatasync      = 1
	syncFileRangeWrite = 2 // SYNC_FILE_RANGE_WRITE
	fadvDontNeed       = 4 // POSIX_FADV_DONTNEED

	sqeSize = 64
	cqeSize = 16
)

// ioSqringOffsets is struct io_sqring_offsets.
type ioSqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// ioCqringOffsets is struct io_cqring_offsets.
type ioCqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// ioUringParams is struct io_uring_params (120 bytes).
type ioUringParams struct {
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFd         uint32
	resv         [3]uint32
	sqOff        ioSqringOffsets
	cqOff        ioCqringOffsets
}

// sqe is struct io_uring_sqe (64 bytes), with the union members we use.
type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32 // rw_flags, fsync_flags, ...
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFdIn  int32
	addr3       uint64
	pad2        uint64
}

// cqe is struct io_uring_cqe (16 bytes, no CQE32).
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// Compile-time checks of the ABI sizes.
var (
	_ [120]byte     = [unsafe.Sizeof(ioUringParams{})]byte{}
	_ [sqeSize]byte = [unsafe.Sizeof(sqe{})]byte{}
	_ [cqeSize]byte = [unsafe.Sizeof(cqe{})]byte{}
)

// subEntry describes one SQE of the round in flight; user_data is its
// index in URing.subs.
type subEntry struct {
	op   int32 // index into the ops of Run
	res  int32 // the CQE's res
	want int64 // bytes this SQE asks to write
}

// URing is the io_uring Backend.
//
// It is owned by one goroutine (see Backend). With Options.SingleIssuer the
// ring is created with IORING_SETUP_SINGLE_ISSUER|IORING_SETUP_DEFER_TASKRUN
// and is tied to the OS thread that created it: the owner must call
// runtime.LockOSThread before NewURing and stay locked for the life of the
// URing, or Run fails with EEXIST.
type URing struct {
	fd       int
	features uint32
	flags    uint32 // setup flags the kernel accepted

	ringMem []byte // SQ ring, and the CQ ring with SINGLE_MMAP
	cqMem   []byte // CQ ring when mapped on its own
	sqeMem  []byte // SQE array

	sqHead, sqTail *uint32
	sqMask         uint32
	sqEntries      uint32
	sqes           unsafe.Pointer

	cqHead, cqTail *uint32
	cqMask         uint32
	cqEntries      uint32
	cqes           unsafe.Pointer

	iov  []unix.Iovec // iovecs of the round in flight (heap, reused)
	subs []subEntry   // SQEs of the round in flight
	sc   sysScratch   // the synchronous path's iovecs

	closed bool
	broken error // set when the ring failed with requests in flight

	detached    int   // detached requests (StartWriteback, DropCache) in flight
	maxDetached int   // the most of them: min(16, cq_entries - sq_entries)
	detachedErr error // the first detached failure not yet reported
	// fadviseOp is the opcode DropCache submits (opFadvise; tests name
	// one the kernel lacks), and noFadvise is set once the kernel
	// answered it with EINVAL (io_uring before Linux 5.6 has no
	// IORING_OP_FADVISE): from then on DropCache makes the system call.
	fadviseOp uint8
	noFadvise bool

	// testHookRes, when set by a test, may replace the result of an SQE
	// as reaped from the CQ (to fake a short write).
	testHookRes func(op *Op, res int32) int32

	stats uringStats
}

// uringStats counts what Run did, for tests and benchmarks.
type uringStats struct {
	rounds  uint64 // batches of SQEs submitted and waited for
	enters  uint64 // io_uring_enter calls
	sqes    uint64 // SQEs submitted
	syncOps uint64 // ops run synchronously (too big, unknown kind, after a repair)
	repairs uint64 // short writes finished synchronously
	eintr   uint64 // io_uring_enter calls interrupted by a signal

	detached     uint64 // writeback hints submitted without waiting
	detachedSync uint64 // writeback hints run as system calls instead
}

// Probe sets up (and tears down) a small io_uring to find out whether the
// kernel lets this process use io_uring, and returns the IORING_FEAT_* bits
// it reports (see FeatureNames).
func Probe() (features uint32, err error) {
	var p ioUringParams
	fd, err := setup(2, &p)
	if err != nil {
		return 0, err
	}
	unix.Close(fd)
	return p.features, nil
}

// setup calls io_uring_setup, retrying EINTR.
func setup(entries uint32, p *ioUringParams) (int, error) {
	for {
		r, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return -1, e
		}
		return int(r), nil
	}
}

// NewURing sets up an io_uring with opts.Entries submission entries (0:
// 256; the kernel rounds up to a power of two and clamps to its maximum).
// It asks for SINGLE_ISSUER|DEFER_TASKRUN when opts.SingleIssuer is set
// (falling back to a plain ring if the kernel answers EINVAL), else for
// COOP_TASKRUN; SUBMIT_ALL and CLAMP are asked for too and dropped on
// EINVAL. SQPOLL is never used. opts.Kind is ignored.
func NewURing(opts Options) (*URing, error) {
	entries := opts.Entries
	if entries == 0 {
		entries = 256
	}
	const base = setupClamp | setupSubmitAll
	var tries [3]uint32
	n := 0
	if opts.SingleIssuer {
		tries[n] = base | setupSingleIssuer | setupDeferTaskrun
		n++
	}
	tries[n] = base | setupCoopTaskrun
	tries[n+1] = 0
	n += 2

	var p ioUringParams
	fd := -1
	var err error
	for _, flags := range tries[:n] {
		p = ioUringParams{flags: flags}
		fd, err = setup(entries, &p)
		if err != unix.EINVAL {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ring: io_uring_setup(%d): %w", entries, err)
	}
	u := &URing{fd: fd, features: p.features, flags: p.flags}
	if err := u.mmap(&p); err != nil {
		u.release()
		return nil, err
	}
	u.subs = make([]subEntry, 0, u.sqEntries)
	u.maxDetached = int(min(16, u.cqEntries-min(u.cqEntries, u.sqEntries)))
	u.fadviseOp = opFadvise
	return u, nil
}

// mmap maps the rings and the SQE array and sets the field pointers.
func (u *URing) mmap(p *ioUringParams) error {
	const prot = unix.PROT_READ | unix.PROT_WRITE
	const flags = unix.MAP_SHARED | unix.MAP_POPULATE
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*cqeSize
	single := p.features&featSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	if u.ringMem, err = unix.Mmap(u.fd, offSQRing, sqSize, prot, flags); err != nil {
		return fmt.Errorf("ring: mmap SQ ring: %w", err)
	}
	cq := u.ringMem
	if !single {
		if u.cqMem, err = unix.Mmap(u.fd, offCQRing, cqSize, prot, flags); err != nil {
			return fmt.Errorf("ring: mmap CQ ring: %w", err)
		}
		cq = u.cqMem
	}
	if u.sqeMem, err = unix.Mmap(u.fd, offSQEs, int(p.sqEntries)*sqeSize, prot, flags); err != nil {
		return fmt.Errorf("ring: mmap SQEs: %w", err)
	}

	sq := u.ringMem
	u32 := func(mem []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	u.sqHead = u32(sq, p.sqOff.head)
	u.sqTail = u32(sq, p.sqOff.tail)
	u.sqMask = *u32(sq, p.sqOff.ringMask)
	u.sqEntries = *u32(sq, p.sqOff.ringEntries)
	u.sqes = unsafe.Pointer(&u.sqeMem[0])
	array := unsafe.Slice(u32(sq, p.sqOff.array), u.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}

	u.cqHead = u32(cq, p.cqOff.head)
	u.cqTail = u32(cq, p.cqOff.tail)
	u.cqMask = *u32(cq, p.cqOff.ringMask)
	u.cqEntries = *u32(cq, p.cqOff.ringEntries)
	u.cqes = unsafe.Pointer(&cq[p.cqOff.cqes])
	if u.cqEntries < u.sqEntries {
		return fmt.Errorf("ring: CQ (%d) smaller than SQ (%d)", u.cqEntries, u.sqEntries)
	}
	return nil
}

// release unmaps and closes whatever is set up.
func (u *URing) release() error {
	var first error
	for _, m := range []*[]byte{&u.sqeMem, &u.cqMem, &u.ringMem} {
		if *m != nil {
			if err := unix.Munmap(*m); err != nil && first == nil {
				first = err
			}
			*m = nil
		}
	}
	u.sqHead, u.sqTail, u.cqHead, u.cqTail = nil, nil, nil, nil
	u.sqes, u.cqes = nil, nil
	if u.fd >= 0 {
		if err := unix.Close(u.fd); err != nil && first == nil {
			first = err
		}
		u.fd = -1
	}
	return first
}

// Name returns "io_uring".
func (u *URing) Name() string { return string(KindIOUring) }

// Features returns the IORING_FEAT_* bits the kernel reported at setup.
func (u *URing) Features() uint32 { return u.features }

// Entries returns the number of submission queue entries (the most SQEs
// one io_uring_enter submits).
func (u *URing) Entries() uint32 { return u.sqEntries }

// SingleIssuer reports whether the ring runs with
// IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN (asked for and accepted).
func (u *URing) SingleIssuer() bool { return u.flags&setupSingleIssuer != 0 }

// Close unmaps the rings and closes the ring fd. Run then returns
// ErrClosed. Closing twice is a no-op.
func (u *URing) Close() error {
	if u.closed {
		return nil
	}
	u.closed = true
	u.iov, u.subs = nil, nil
	if err := u.release(); err != nil {
		return fmt.Errorf("ring: close io_uring: %w", err)
	}
	return nil
}

// sqeCount is the number of SQEs op needs, or 0 when op must run
// synchronously: unknown Kind, more SQEs than the ring holds, or a negative
// Offset (which io_uring would take as "the file position" where pwritev
// fails with EINVAL).
func (u *URing) sqeCount(op *Op) uint32 {
	switch op.Kind {
	case OpFdatasync:
		return 1
	case OpWritev:
		if op.Offset < 0 {
			return 0
		}
		n := (uint64(len(op.Bufs)) + MaxIovecs - 1) / MaxIovecs
		if n == 0 {
			return 1
		}
		if n > uint64(u.sqEntries) {
			return 0
		}
		return uint32(n)
	}
	return 0
}

// Run submits ops and waits for all of them; see Backend. It returns
// ErrClosed after Close, and an error when io_uring_enter itself fails; the
// Ops of the failed round and every Op after them then carry that error
// too (Ops of earlier rounds keep their results). If that happens with
// requests in flight the URing is broken: every later Run returns the
// error, and the kernel may still read the batch's buffers until Close.
func (u *URing) Run(ops []Op) error {
	if u.closed {
		return ErrClosed
	}
	if u.broken != nil {
		return u.broken
	}
	for i := range ops {
		ops[i].Res, ops[i].Err = 0, nil
	}
	failed := false // the chain in progress failed: cancel its rest
	for i := 0; i < len(ops); {
		op := &ops[i]
		if failed {
			op.Err = ErrCanceled
			failed = op.Link
			i++
			continue
		}
		if u.sqeCount(op) == 0 {
			u.stats.syncOps++
			runSync(op, &u.sc)
			failed = op.Err != nil && op.Link
			i++
			continue
		}
		j := u.plan(ops, i)
		var err error
		if failed, err = u.round(ops, i, j); err != nil {
			for k := i; k < len(ops); k++ {
				if ops[k].Err == nil {
					ops[k].Err = err
				}
			}
			return err
		}
		i = j
	}
	return nil
}

// plan returns the end j of the round that starts at ops[i] (which needs at
// least one SQE and fits the ring): whole chains while they fit; when the
// first chain alone does not fit, as many of its operations as fit. A round
// also ends before an operation that must run synchronously.
func (u *URing) plan(ops []Op, i int) int {
	used := uint32(0)
	j := i
	for j < len(ops) {
		// The chain starting at j, cut before a synchronous-only op.
		k, c := j, uint32(0)
		for k < len(ops) {
			n := u.sqeCount(&ops[k])
			if n == 0 {
				break
			}
			c += n
			k++
			if !ops[k-1].Link {
				break
			}
		}
		if k == j {
			break // ops[j] runs synchronously, after this round
		}
		if used+c <= u.sqEntries {
			used += c
			j = k
			if k < len(ops) && ops[k-1].Link {
				break // cut before a synchronous-only op
			}
			continue
		}
		if used > 0 {
			break
		}
		// One chain larger than the ring: take the operations that fit.
		for j < k {
			n := u.sqeCount(&ops[j])
			if used+n > u.sqEntries {
				break
			}
			used += n
			j++
		}
		break
	}
	return j
}

// Chain states while completing a round.
const (
	chainOK        = iota
	chainFailed    // an op failed: the rest of the chain is ErrCanceled
	chainRepairing // a short write was finished by hand: run the rest synchronously
)

// round submits ops[i:j] with one io_uring_enter (more if interrupted),
// waits for all of their completions, and fills in their results. failed
// reports that the round ended inside a chain that failed.
func (u *URing) round(ops []Op, i, j int) (failed bool, err error) {
	// Make room for the iovecs before any SQE points into the array.
	nIov := 0
	for k := i; k < j; k++ {
		if ops[k].Kind == OpWritev {
			nIov += len(ops[k].Bufs)
		}
	}
	if cap(u.iov) < nIov {
		u.iov = make([]unix.Iovec, nIov, max(nIov, 2*cap(u.iov)))
	}
	iov := u.iov[:nIov]

	// Fill the SQEs.
	u.subs = u.subs[:0]
	tail := atomic.LoadUint32(u.sqTail)
	var last *sqe
	p := 0
	for k := i; k < j; k++ {
		op := &ops[k]
		if op.Kind == OpFdatasync {
			s := u.sqe(tail)
			tail++
			*s = sqe{opcode: opFsync, fd: int32(op.Fd), opFlags: fsyncDatasync, userData: uint64(len(u.subs))}
			if op.Link {
				s.flags = sqeIOLink
			}
			u.subs = append(u.subs, subEntry{op: int32(k)})
			last = s
			continue
		}
		bufs := op.Bufs
		off := op.Offset
		for first := true; first || len(bufs) > 0; first = false {
			take := min(len(bufs), MaxIovecs)
			start := p
			var want int64
			for _, b := range bufs[:take] {
				if len(b) > 0 {
					iov[p] = unix.Iovec{Base: &b[0]}
					iov[p].SetLen(len(b))
				} else {
					iov[p] = unix.Iovec{}
				}
				want += int64(len(b))
				p++
			}
			bufs = bufs[take:]
			var addr uint64
			if take > 0 {
				addr = uint64(uintptr(unsafe.Pointer(&iov[start])))
			}
			s := u.sqe(tail)
			tail++
			*s = sqe{opcode: opWritev, fd: int32(op.Fd), off: uint64(off), addr: addr, len: uint32(take), userData: uint64(len(u.subs))}
			if len(bufs) > 0 || op.Link {
				s.flags = sqeIOLink
			}
			u.subs = append(u.subs, subEntry{op: int32(k), want: want})
			off += want
			last = s
		}
	}
	last.flags &^= sqeIOLink // a round never ends inside a kernel link
	atomic.StoreUint32(u.sqTail, tail)
	u.stats.rounds++
	u.stats.sqes += uint64(len(u.subs))

	err = u.submitAndWait(tail)
	// The kernel is done with the buffers (reachable from ops) and the
	// iovec array (u.iov, still used just below).
	runtime.KeepAlive(ops)
	clear(iov)
	if err != nil {
		return false, err
	}

	// Complete the ops in order, following their chains.
	state := chainOK
	s := 0
	for k := i; k < j; k++ {
		op := &ops[k]
		e := s
		for e < len(u.subs) && int(u.subs[e].op) == k {
			e++
		}
		pieces := u.subs[s:e]
		s = e
		switch state {
		case chainFailed:
			op.Err = ErrCanceled
		case chainRepairing:
			u.stats.syncOps++
			runSync(op, &u.sc)
			if op.Err != nil {
				state = chainFailed
			}
		default:
			state = u.complete(op, pieces)
		}
		if !op.Link {
			state = chainOK
		}
	}
	return state == chainFailed, nil
}

// complete sets op's Res and Err from the results of its SQEs and returns
// the state of its chain: chainOK, chainFailed, or chainRepairing when a
// short write was finished synchronously (the kernel canceled the rest of
// the chain, which must then be run synchronously).
func (u *URing) complete(op *Op, pieces []subEntry) int {
	if op.Kind == OpFdatasync {
		res := pieces[0].res
		if u.testHookRes != nil {
			res = u.testHookRes(op, res)
		}
		if res < 0 {
			op.Err = errnoResult(op, res)
			return chainFailed
		}
		return chainOK
	}
	var done int64
	for _, pc := range pieces {
		res := pc.res
		if u.testHookRes != nil {
			res = u.testHookRes(op, res)
		}
		if res < 0 {
			if done == 0 {
				op.Err = errnoResult(op, res)
			} else {
				setWriteResult(op, done, syscall.Errno(-res))
			}
			return chainFailed
		}
		done += int64(res)
		if int64(res) < pc.want {
			// Short: finish the whole op's remainder ourselves.
			u.stats.repairs++
			n, err := writeAll(op.Fd, op.Bufs, op.Offset, done, &u.sc)
			setWriteResult(op, done+n, err)
			if op.Err != nil {
				return chainFailed
			}
			return chainRepairing
		}
	}
	op.Res = done
	return chainOK
}

// errnoResult turns a negative CQE result into Op.Err: ECANCELED (a linked
// predecessor failed) is ErrCanceled, anything else an *OpError.
func errnoResult(op *Op, res int32) error {
	errno := syscall.Errno(-res)
	if errno == syscall.ECANCELED {
		return ErrCanceled
	}
	return &OpError{Kind: op.Kind, Fd: op.Fd, Offset: op.Offset, Err: errno}
}

// sqe returns the SQE slot of SQ position pos.
func (u *URing) sqe(pos uint32) *sqe {
	return (*sqe)(unsafe.Add(u.sqes, uintptr(pos&u.sqMask)*sqeSize))
}

// submitAndWait makes the kernel consume the SQ up to tail and waits until
// every SQE of the round (len(u.subs)) has completed, reaping into u.subs.
func (u *URing) submitAndWait(tail uint32) error {
	n := len(u.subs)
	reaped := 0
	stalls := 0
	for reaped < n {
		head := atomic.LoadUint32(u.sqHead)
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(u.fd),
			uintptr(tail-head), uintptr(n-reaped), enterGetEvents, 0, 0)
		u.stats.enters++
		got := u.reap()
		reaped += got
		switch errno {
		case 0, syscall.EINTR:
			if errno != 0 {
				u.stats.eintr++
			}
			stalls = 0
			continue
		case syscall.EAGAIN, syscall.EBUSY:
			if got > 0 {
				stalls = 0
			} else if stalls++; stalls > 10 {
				time.Sleep(time.Millisecond)
			} else {
				runtime.Gosched()
			}
			continue
		}
		// A hard failure. Withdraw what the kernel did not consume.
		head = atomic.LoadUint32(u.sqHead)
		atomic.StoreUint32(u.sqTail, head)
		submitted := n - int(tail-head)
		err := fmt.Errorf("ring: io_uring_enter: %w", errno)
		if errno == syscall.EEXIST && u.SingleIssuer() {
			err = fmt.Errorf("ring: io_uring_enter: %w: a SingleIssuer ring is used from another OS thread than the one that created it (runtime.LockOSThread)", errno)
		}
		if submitted > reaped {
			u.broken = fmt.Errorf("%w (with %d requests in flight; the ring is unusable)", err, submitted-reaped)
			return u.broken
		}
		return err
	}
	return nil
}

// reap consumes the CQ, storing each result of the round in its
// subEntry and counting off detached requests, and returns how many CQEs
// belonged to the round.
func (u *URing) reap() int {
	head := atomic.LoadUint32(u.cqHead)
	tail := atomic.LoadUint32(u.cqTail)
	got := 0
	for ; head != tail; head++ {
		c := (*cqe)(unsafe.Add(u.cqes, uintptr(head&u.cqMask)*cqeSize))
		switch {
		case c.userData&detachedTag != 0:
			u.detached--
			drop := c.userData&detachedDrop != 0
			if drop && c.res == -int32(syscall.EINVAL) {
				u.noFadvise = true // an old kernel: not the hint's failure
			} else if c.res < 0 && u.detachedErr == nil {
				call := "sync_file_range"
				if drop {
					call = "fadvise"
				}
				u.detachedErr = fmt.Errorf("ring: %s fd %d: %w", call, int32(uint32(c.userData)), syscall.Errno(-c.res))
			}
		case c.userData < uint64(len(u.subs)):
			u.subs[c.userData].res = c.res
			got++
		}
	}
	atomic.StoreUint32(u.cqHead, head)
	return got
}

// detachedTag marks the user_data of a detached request, detachedDrop
// that of a DropCache; the low 32 bits hold its fd.
const (
	detachedTag  = 1 << 63
	detachedDrop = 1 << 62
)

// StartWriteback submits the start of [off, off+n)'s writeback of fd to
// the ring and returns without waiting for it (see "Detached requests").
// It runs the system call itself when maxDetached hints are in flight,
// when n does not fit an SQE, or when the kernel does not take the SQE.
// The error is this call's, or an earlier detached hint's (see the package
// function StartWriteback).
func (u *URing) StartWriteback(fd int, off, n int64) error {
	return u.hint(sqe{opcode: opSyncFileRange, opFlags: syncFileRangeWrite, userData: detachedTag}, "sync_file_range", syncFileRange, fd, off, n)
}

// DropCache submits the drop of [off, off+n)'s clean page cache of fd to
// the ring (see the package function DropCache), as StartWriteback does
// its hint.
func (u *URing) DropCache(fd int, off, n int64) error {
	return u.hint(sqe{opcode: u.fadviseOp, opFlags: fadvDontNeed, userData: detachedTag | detachedDrop}, "fadvise", dropCache, fd, off, n)
}

// hint submits s (its opcode, flags and user_data tag; hint fills in the
// file and range) as a detached request, or runs call(fd, off, n), named name
// in its error, when it cannot be detached (a drop, too, once the kernel
// refused the opcode: noFadvise).
func (u *URing) hint(s sqe, name string, call func(fd int, off, n int64) error, fd int, off, n int64) error {
	if u.closed {
		return ErrClosed
	}
	if u.broken != nil {
		return u.broken
	}
	u.reap() // outside a round only detached requests complete
	err := u.detachedErr
	u.detachedErr = nil
	if u.detached >= u.maxDetached || off < 0 || n <= 0 || n > math.MaxUint32 || s.userData&detachedDrop != 0 && u.noFadvise {
		return u.hintSync(name, call, fd, off, n, err)
	}
	s.fd, s.off, s.len = int32(fd), uint64(off), uint32(n)
	s.userData |= uint64(uint32(fd))
	if !u.submitDetached(s) {
		return u.hintSync(name, call, fd, off, n, err)
	}
	u.detached++
	u.stats.detached++
	return err
}

// hintSync runs a hint as a system call, returning its error or, when it
// succeeds, err (an earlier detached hint's).
func (u *URing) hintSync(name string, call func(fd int, off, n int64) error, fd int, off, n int64, err error) error {
	u.stats.detachedSync++
	if e := call(fd, off, n); e != nil {
		err = fmt.Errorf("ring: %s fd %d: %w", name, fd, e)
	}
	return err
}

// submitDetached queues one detached SQE and submits it, reporting
// whether the kernel took it; an SQE it did not take is withdrawn. The SQ
// is empty here: rounds submit all of theirs before they return.
func (u *URing) submitDetached(s sqe) bool {
	tail := atomic.LoadUint32(u.sqTail)
	*u.sqe(tail) = s
	atomic.StoreUint32(u.sqTail, tail+1)
	for {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(u.fd), 1, 0, 0, 0, 0)
		u.stats.enters++
		if errno != syscall.EINTR {
			break
		}
		u.stats.eintr++
	}
	if atomic.LoadUint32(u.sqHead) != tail+1 {
		atomic.StoreUint32(u.sqTail, tail)
		return false
	}
	return true
}

var (
	_ Backend          = (*URing)(nil)
	_ WritebackStarter = (*URing)(nil)
)
