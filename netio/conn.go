package netio

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal"
)

// conn is one client connection. gnet's event loop reads it and parses
// requests. Writes bypass gnet (its outbound buffer is never used, so
// bytes from gnet and from sendfile can never interleave) and are made by
// one goroutine at a time, the one holding writing: the goroutine that
// completes a small response at the head of the FIFO (an event loop, a
// writer shard, a fetch's waiting goroutine, an async handler), with
// non-blocking writes on gnet's socket, or the connection's writer
// goroutine (writeLoop) for the rest, on a dup of the socket. The writer
// goroutine and its dup exist only once a connection needed them (a full
// socket, a large response, responses completed during another write):
// an idle connection costs one descriptor and no goroutine. Responses
// leave strictly in request order: each request gets a slot in the FIFO
// when it is parsed, and only complete slots at its head are sent,
// whatever order the handlers finish in. The package comment (doc.go) has the whole contract.
type conn struct {
	srv *Server
	gc  gnet.Conn
	// fd is gnet's socket, for inline writes. gnet closes it after
	// OnClose returns, and OnClose waits for an inline writer using it
	// (inline), so it is never written once closed or reused.
	fd int
	id uint64

	mu     sync.Mutex
	cond   sync.Cond
	queue  []*response
	closed bool
	// done is closed with the connection, so that work waiting for it
	// ends with it.
	done chan struct{}
	// parked are the connection's long-poll fetches waiting for data
	// (fetch.park); close abandons them, Drain expires them.
	parked map[*fetch]struct{}
	// remoteQuota bounds the tiered-storage records its fetches hold
	// until their responses are written.
	remoteQuota engine.RemoteQuota
	// groupTail is closed once the connection's last group coordinator
	// request has been processed (dispatchOrdered); nil before the
	// first. Event loop only.
	groupTail chan struct{}
	// spareFetch is the memory of the connection's last answered fetch,
	// for its next one (fetchScratch).
	spareFetch atomic.Pointer[fetchScratch]

	// inflight counts requests parsed and not yet written.
	inflight atomic.Int32
	// clientID is the client id of the connection's last request, shared
	// by the requests that send the same one (handleFrame).
	clientID atomic.Pointer[string]
	// paused is set by the event loop when it stops parsing (in-flight
	// limit or a full writer shard); whoever resumes it clears it and
	// wakes the loop.
	paused        atomic.Bool
	pausedInflght atomic.Bool

	remote string
	// shareSessions counts the share sessions this connection holds
	// (guarded by Server.shareSessions' mutex): a close with none skips
	// looking for them.
	shareSessions int
	// certPrincipal is the client certificate's principal (mTLS), ""
	// without one.
	certPrincipal string
	// auth is the connection's SASL state and principal (auth.go).
	auth connAuth

	// The frame being assembled (event loop only): its length prefix,
	// then its pooled buffer and how much of it arrived. A frame whose
	// dispatch paused stays here, whole, until the connection resumes.
	hdr    [4]byte
	nhdr   int
	frame  []byte
	filled int
	// lastRead is when the event loop last saw bytes from the client, and
	// frameStart when the first byte of the frame being assembled came
	// (0: none is), in Unix nanoseconds: the reaper's clocks
	// (IdleTimeout, RequestReadTimeout).
	lastRead   atomic.Int64
	frameStart atomic.Int64
	reaped     atomic.Bool // the reaper closed it
	// over holds what the client sent while the connection was not read,
	// moved out of gnet's buffer (overflow.go); unread is its charge,
	// this connection's share of srv.unread (event loop only).
	over   overflow
	unread int
	// preAuthFrame is the size of the last frame dispatched before
	// authentication, which its handler may still hold (event loop
	// only; see preAuthHeld).
	preAuthFrame int

	// Writing (all under mu): whether a goroutine is sending; the unsent
	// rest of an inline write and the responses it belongs to, which the
	// writer goroutine sends first.
	writing bool
	inline  bool // the writing goroutine is an inline writer, on fd
	// held: the event loop is dispatching frames it read together
	// (holdWrites), so a response completed meanwhile waits for its
	// flushHeld instead of being sent at once: one write answers them
	// all.
	held bool
	// writerUp: the writer goroutine runs (see wakeWriter).
	writerUp bool
	rest     []part
	restOf   []*response

	// Scratch of whoever holds writing.
	batch []*response
	out   []part
	iov   []unix.Iovec

	// Off-loop work that must keep request order (see serial), under
	// serialMu: the functions queued and whether a goroutine runs them.
	serialMu  sync.Mutex
	serialQ   []func()
	serialRun bool
}

// part is one piece of a response: bytes, or a range of a segment file.
type part struct {
	b []byte
	f wal.FileRange
}

// response is a slot in a connection's FIFO.
type response struct {
	parts   []part
	ready   bool
	noReply bool // acks=0 produce: nothing is sent
	// closeAfter closes the connection once this response is written
	// (set before it completes).
	closeAfter bool
	release    func()
	// one backs parts for a response of one buffer (completeBytes);
	// pooled, when set, is that buffer, from the server's pool, which
	// takes it back once it is written (finish).
	one    [1]part
	pooled []byte
}

func newConn(s *Server, gc gnet.Conn, id uint64, peer *peerInfo) *conn {
	c := &conn{srv: s, gc: gc, fd: gc.Fd(), id: id, done: make(chan struct{})}
	if peer != nil {
		// A TLS connection: gnet sees a socket pair, the front end the client.
		c.remote = peer.remote
		c.certPrincipal = peer.principal
	} else if ra := gc.RemoteAddr(); ra != nil {
		c.remote = ra.String()
	}
	c.cond.L = &c.mu
	return c
}

// wakeWriter hands the connection's pending writes to its writer
// goroutine, starting it on first use (c.mu held, c not closed).
func (c *conn) wakeWriter() {
	if c.writerUp {
		c.cond.Signal()
		return
	}
	nc, rc, err := c.dupSocket()
	if err != nil {
		// No descriptor for the writer (EMFILE): the connection cannot
		// be served. OnClose releases what it holds.
		c.srv.logger.Warn("closing connection: cannot start its writer", "remote", c.remote, "err", err)
		c.gc.Close()
		return
	}
	c.writerUp = true
	c.srv.metrics.WritersStarted.Inc()
	go c.writeLoop(nc, rc)
}

// dupSocket returns a dup of gnet's socket that the runtime's poller can
// wait on, and its raw connection, for the writer goroutine's blocking
// writes (c.mu held, c not closed: gnet has not closed fd).
func (c *conn) dupSocket() (net.Conn, syscall.RawConn, error) {
	fd, err := unix.FcntlInt(uintptr(c.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("dup socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "kafka-conn")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("wrap socket: %w", err)
	}
	// A TCP socket, or (behind the TLS front end) a Unix socket pair's end.
	sc, ok := fc.(syscall.Conn)
	if !ok {
		fc.Close()
		return nil, nil, errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		fc.Close()
		return nil, nil, err
	}
	return fc, rc, nil
}

// slot appends a new response slot in request order (event loop).
func (c *conn) slot() *response { return c.queueSlot(&response{}) }

// queueSlot appends r, an unused response, as the next slot in request
// order (event loop).
func (c *conn) queueSlot(r *response) *response {
	c.mu.Lock()
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	c.inflight.Add(1)
	return r
}

// complete marks r ready with its parts; release runs after it is written
// (or dropped). Safe from any goroutine.
//
// When r is at the head of the FIFO, small, and nobody is writing, the
// calling goroutine sends it (and any ready responses behind it) itself with
// non-blocking writes: a produce answer leaves from the writer shard that
// completed it, without waking the connection's writer goroutine. Only
// when the socket is full (EAGAIN) does the unsent rest go to the writer
// goroutine, which waits for the socket to drain; the caller never blocks.
// While the event loop dispatches frames it read together (conn.held),
// r only waits: the loop's flushHeld sends it with the others (sendHead).
func (c *conn) complete(r *response, parts []part, release func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		// Nobody will send it: release what it holds now.
		if release != nil {
			release()
		}
		return
	}
	r.parts, r.release, r.ready = parts, release, true
	if len(c.queue) == 0 || c.queue[0] != r {
		c.mu.Unlock()
		return
	}
	c.sendHead()
}

// sendHead sends the ready responses at the head of the FIFO on the
// calling goroutine, or leaves them to whoever sends them next (c.mu held
// and the head ready; it unlocks c.mu).
func (c *conn) sendHead() {
	if c.writing || c.rest != nil || c.queue[0].size() > inlineMaxBytes {
		// The writer that holds the socket picks it up next; a large
		// response goes to the writer goroutine, which may take its
		// time (and another core) over it.
		if !c.writing {
			c.wakeWriter()
		}
		c.mu.Unlock()
		return
	}
	if c.held {
		// The event loop sends it with the responses to the frames it
		// read with this one (flushHeld).
		c.mu.Unlock()
		return
	}
	c.writing, c.inline = true, true
	c.batch = c.takeReady(c.batch, inlineMaxBytes)
	c.mu.Unlock()
	c.writeInline()
}

// holdWrites starts a run of frames the event loop read together: the
// responses completed until flushHeld wait for it (event loop).
func (c *conn) holdWrites() {
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
}

// flushHeld ends a run started by holdWrites: the ready responses at the
// head of the FIFO leave in one write, from the event loop, as complete
// would have sent the first of them (event loop).
//
// Why: a producer with several requests in flight has them read together
// (2.5 frames per read at 205k records/s); answering each on its own cost
// a sendmsg apiece, about 7 µs of the event loop's time each on loopback.
func (c *conn) flushHeld() {
	c.mu.Lock()
	c.held = false
	if c.closed || len(c.queue) == 0 || !c.queue[0].ready {
		c.mu.Unlock()
		return
	}
	c.sendHead()
}

// inlineMaxBytes is the largest response a completing goroutine sends
// itself (see complete): produce answers and fetches of up to 1 MiB, which
// loopback and LAN sockets take whole. Sending more itself would hold an
// event loop's other connections for longer than the direct-write fast
// path of a 1 MiB append does (engine.InlineMaxBytes). Larger responses go
// to the writer goroutine, whose wake-up from a busy event loop waited for
// a P for up to 15 ms under load (a runtime trace at 322k records/s: the
// woken goroutine sat in the run queue of a P whose event loop kept
// running, while the other P's loop slept in epoll_wait).
const inlineMaxBytes = 1 << 20

// size is how many bytes r sends.
func (r *response) size() int64 {
	var n int64
	for _, p := range r.parts {
		n += int64(len(p.b)) + p.f.Len
	}
	return n
}

// completeBytes completes r with one encoded response frame.
func (c *conn) completeBytes(r *response, frame []byte) {
	r.one[0] = part{b: frame}
	c.complete(r, r.one[:], nil)
}

// completePooled is completeBytes for a frame taken from the server's
// pool, which gets it back once it is written (or dropped): the caller
// must not keep it.
func (c *conn) completePooled(r *response, frame []byte) {
	r.pooled = frame
	c.completeBytes(r, frame)
}

// skip completes r with nothing to send (acks=0).
func (c *conn) skip(r *response, release func()) {
	c.mu.Lock()
	r.noReply = true
	c.mu.Unlock()
	c.complete(r, nil, release)
}

// close marks the connection closed and stops its writer goroutine, or,
// when it has none, releases what the unsent responses hold. From OnClose
// (onLoop) it returns only once no inline writer uses gnet's socket, which
// gnet closes next; after a write error (finish, the caller holding
// writing) it does not wait.
func (c *conn) close(onLoop bool) {
	c.mu.Lock()
	if !c.closed {
		close(c.done)
	}
	c.closed = true
	for onLoop && c.inline {
		c.cond.Wait()
	}
	var releases []func()
	if !c.writerUp && !c.writing {
		releases = c.takeReleases()
	}
	parked := c.takeParked()
	c.mu.Unlock()
	c.cond.Broadcast()
	for _, f := range releases {
		f()
	}
	for _, f := range parked {
		f.abandon()
	}
}

// park registers a long-poll fetch; false if the connection is closed.
func (c *conn) park(f *fetch) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	if c.parked == nil {
		c.parked = map[*fetch]struct{}{}
	}
	c.parked[f] = struct{}{}
	c.srv.parkedFetches.Add(1)
	c.srv.metrics.FetchesParked.Inc()
	return true
}

// unpark forgets a parked fetch once it is over.
func (c *conn) unpark(f *fetch) {
	c.mu.Lock()
	delete(c.parked, f)
	c.mu.Unlock()
	c.srv.parkedFetches.Add(-1)
	c.srv.metrics.FetchesParked.Dec()
}

// takeParked returns the parked fetches (c.mu held): they are woken once
// it is unlocked, since waking one may answer it, which takes c.mu.
func (c *conn) takeParked() []*fetch {
	var out []*fetch
	for f := range c.parked {
		out = append(out, f)
	}
	return out
}

// expireParked answers every parked fetch of the connection now (drain).
func (c *conn) expireParked() {
	c.mu.Lock()
	parked := c.takeParked()
	c.mu.Unlock()
	for _, f := range parked {
		f.expire()
	}
}

// takeReleases empties the FIFO and the unsent rest of a closed
// connection and returns the release functions of their responses, to be
// run once c.mu is unlocked. Responses completed before the close hold
// resources; those completed after it release them in complete.
func (c *conn) takeReleases() []func() {
	var releases []func()
	for _, r := range append(c.restOf, c.queue...) {
		if r.release != nil {
			releases = append(releases, r.release)
			r.release = nil
		}
	}
	c.queue, c.rest, c.restOf = nil, nil, nil
	return releases
}

// takeReady moves the ready responses at the head of the FIFO into batch,
// at least one and as long as they add up to at most limit bytes (c.mu
// held).
func (c *conn) takeReady(batch []*response, limit int64) []*response {
	n := 0
	var bytes int64
	for n < len(c.queue) && c.queue[n].ready {
		if bytes += c.queue[n].size(); n > 0 && bytes > limit {
			break
		}
		n++
	}
	batch = append(batch[:0], c.queue[:n]...)
	// Move the rest to the front rather than reslicing past the taken
	// ones, so the queue's array is reused and slot never reallocates it
	// once it is as long as the connection's pipeline.
	m := copy(c.queue, c.queue[n:])
	clear(c.queue[m:])
	c.queue = c.queue[:m]
	return batch
}

// writeInline sends c.batch without blocking (the caller set c.writing).
// What the socket does not take becomes c.rest for the writer goroutine.
func (c *conn) writeInline() {
	for round := 1; ; round++ {
		rest, err := c.send(c.batch, nil)
		c.mu.Lock()
		if err == nil && len(rest) > 0 && !c.closed {
			// Copies: c.out and c.batch are reused by the next writer.
			c.rest = append([]part(nil), rest...)
			c.restOf = append([]*response(nil), c.batch...)
			clear(c.batch)
			c.writing, c.inline = false, false
			c.wakeWriter()
			c.mu.Unlock()
			c.cond.Broadcast() // OnClose may wait for inline
			return
		}
		c.mu.Unlock()
		c.finish(c.batch, err)
		c.mu.Lock()
		again := false
		var releases []func()
		switch {
		case c.closed && !c.writerUp:
			// Nobody else will: release what the unsent responses hold.
			releases = c.takeReleases()
		case c.closed:
			// The writer goroutine waits for us to finish, then releases.
		case len(c.queue) > 0 && c.queue[0].ready:
			// Responses completed while we were writing: this caller
			// sends them too, up to inlineRounds writes, so that its
			// time stays bounded; then the writer goroutine takes over.
			// (Waking the writer from an event loop whose goroutine
			// keeps running can leave it runnable, without a P, for
			// milliseconds.)
			if err == nil && round < inlineRounds && c.queue[0].size() <= inlineMaxBytes {
				c.batch = c.takeReady(c.batch, inlineMaxBytes)
				again = true
			}
		}
		if !again {
			c.writing, c.inline = false, false
			if !c.closed && len(c.queue) > 0 && c.queue[0].ready {
				c.wakeWriter()
			}
		}
		closed := c.closed
		c.mu.Unlock()
		if closed {
			// The writer goroutine or OnClose waits for this write to end.
			// (Open, nobody waits for it: the writer goroutine waits for
			// work, which wakeWriter signals; waking it for nothing on
			// every inline response cost a futex and a scheduling round.)
			c.cond.Broadcast()
		}
		for _, f := range releases {
			f()
		}
		if !again {
			return
		}
	}
}

// inlineRounds is how many writes an inline writer makes at most: its
// own batch, then what completed meanwhile.
const inlineRounds = 4

// finish releases what a written batch held, updates the in-flight count
// (resuming a paused connection) and closes the connection after a write
// error. Called by whoever wrote the batch, before clearing c.writing.
func (c *conn) finish(batch []*response, err error) {
	closeAfter := false
	for _, r := range batch {
		if r.release != nil {
			r.release()
			r.release = nil
		}
		if r.pooled != nil {
			r.one[0] = part{}
			c.srv.pool.put(r.pooled)
			r.pooled = nil
		}
		closeAfter = closeAfter || r.closeAfter
	}
	n := len(batch)
	clear(batch)
	left := c.inflight.Add(-int32(n))
	if c.pausedInflght.Load() && int(left) < c.inflightLimit() {
		c.pausedInflght.Store(false)
		c.resume()
	}
	if err != nil {
		c.srv.logger.Debug("closing connection after a write error", "remote", c.remote, "err", err)
		c.gc.Close()
		c.close(false)
		return
	}
	if closeAfter {
		// The last word (a failed authentication): written, now close.
		c.gc.Close()
	}
}

// writeLoop is the connection's writer goroutine: it sends what inline
// writers could not (a full socket) and responses completed while another
// write was under way, blocking on nc, its dup of the socket, as long as
// it takes. It runs until the connection closes.
func (c *conn) writeLoop(nc net.Conn, rc syscall.RawConn) {
	defer nc.Close()
	var batch []*response
	for {
		c.mu.Lock()
		for !c.closed && (c.writing || (c.rest == nil && (len(c.queue) == 0 || !c.queue[0].ready))) {
			c.cond.Wait()
		}
		if c.closed {
			for c.writing {
				// An inline writer finishes (its write fails or
				// succeeds) and releases its own batch.
				c.cond.Wait()
			}
			releases := c.takeReleases()
			c.mu.Unlock()
			for _, f := range releases {
				f()
			}
			return
		}
		c.writing = true
		var err error
		if c.rest != nil {
			rest := c.rest
			batch = append(batch[:0], c.restOf...)
			c.rest, c.restOf = nil, nil
			c.mu.Unlock()
			_, err = c.sendParts(rest, rc)
		} else {
			batch = c.takeReady(batch, math.MaxInt64)
			c.mu.Unlock()
			_, err = c.send(batch, rc)
		}
		c.finish(batch, err)
		c.mu.Lock()
		c.writing = false
		c.mu.Unlock()
	}
}

// serial runs fn off the event loop, after every function queued before
// it on this connection has returned (event loop). It is for requests
// whose effects must keep their order, such as produces, when one of them
// has to leave the loop (auto-creating a topic): until the queue is empty
// (serialBusy), the produces behind it go the same way. The goroutine
// that runs the queue exits when it is empty; fn must end on its own
// (it may block, e.g. waiting for a shard's room).
func (c *conn) serial(fn func()) {
	c.serialMu.Lock()
	c.serialQ = append(c.serialQ, fn)
	start := !c.serialRun
	c.serialRun = true
	c.serialMu.Unlock()
	if start {
		go c.runSerial()
	}
}

// serialBusy reports whether functions queued by serial have not all
// returned.
func (c *conn) serialBusy() bool {
	c.serialMu.Lock()
	defer c.serialMu.Unlock()
	return c.serialRun
}

func (c *conn) runSerial() {
	for {
		c.serialMu.Lock()
		if len(c.serialQ) == 0 {
			c.serialQ = nil
			c.serialRun = false
			c.serialMu.Unlock()
			return
		}
		fn := c.serialQ[0]
		c.serialQ[0] = nil
		c.serialQ = c.serialQ[1:]
		c.serialMu.Unlock()
		fn()
	}
}

// roomOrPause is a produce handler's admission (event loop): it reports
// whether sh has room for an append now. When it has none, c is paused
// and the shard resumes it once its queue drains below the bound; the
// handler then returns framePaused, the frame stays in c.frame, and it is
// dispatched again (from the start) on resume.
func (c *conn) roomOrPause(sh *engine.Shard) bool {
	if sh.HasRoom() {
		return true
	}
	c.paused.Store(true)
	// Called at once if the shard drained in between: then the pause
	// ends before the loop returns, and the Wake dispatches again.
	sh.OnRoom(c.resume)
	return false
}

// resume clears a pause and asks the event loop to parse again.
func (c *conn) resume() {
	if c.paused.CompareAndSwap(true, false) {
		c.gc.Wake(nil)
	}
}

// send writes the parts of rs in order (see sendParts).
func (c *conn) send(rs []*response, rc syscall.RawConn) ([]part, error) {
	c.srv.metrics.ResponseWrites.Inc()
	c.out = c.out[:0]
	for _, r := range rs {
		if !r.noReply {
			c.out = append(c.out, r.parts...)
		}
	}
	return c.sendParts(c.out, rc)
}

// sendParts writes parts to the socket in order: runs of byte parts with
// one sendmsg, file ranges with sendfile (no copy through user space).
// Bytes followed by a file range go with MSG_MORE, so TCP sends the
// response and partition headers together with the range rather than as
// a segment of their own. With rc (the writer goroutine's dup), it waits
// for the socket to take everything; without (an inline writer), it
// writes gnet's socket, stops at the first EAGAIN and returns the unsent
// rest (parts may be advanced in place). Off Linux there is no MSG_MORE
// and file ranges are copied (sys_other.go).
func (c *conn) sendParts(parts []part, rc syscall.RawConn) ([]part, error) {
	if rc == nil {
		rest, _, err := c.sendSome(c.fd, parts)
		return rest, err
	}
	return c.sendPartsWaiting(parts, rc)
}

// sendPartsWaiting is sendParts with the writer goroutine's dup: a
// function of its own because the closure that rc.Write takes moves the
// variables it captures to the heap, which would cost the inline path an
// allocation per response.
func (c *conn) sendPartsWaiting(parts []part, rc syscall.RawConn) ([]part, error) {
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		var again bool
		parts, again, werr = c.sendSome(int(fd), parts)
		return !again
	})
	if err == nil {
		err = werr
	}
	return parts, err
}

// sendSome writes parts to the non-blocking socket fd until they are all
// sent, the socket is full (again) or a write fails; it returns what is
// left.
func (c *conn) sendSome(fd int, parts []part) (rest []part, again bool, err error) {
	for len(parts) > 0 {
		var n int
		if f := parts[0].f; f.File != nil {
			n, err = sendFile(fd, &f, c.srv.metrics)
			if n > 0 {
				parts[0].f.Pos, parts[0].f.Len = f.Pos, f.Len-int64(n)
				if parts[0].f.Len == 0 {
					parts = parts[1:]
				}
			} else if err == nil {
				return parts, false, io.ErrUnexpectedEOF // the file is shorter than its range
			}
		} else {
			n, err = c.sendmsg(fd, parts)
			parts = advance(parts, n)
		}
		switch {
		case err == unix.EAGAIN:
			return parts, true, nil
		case err == unix.EINTR:
		case err != nil:
			return parts, false, err
		}
	}
	return parts, false, nil
}

// sendmsg sends the leading run of byte parts with one sendmsg, MSG_MORE
// when more parts follow it.
func (c *conn) sendmsg(fd int, parts []part) (int, error) {
	c.iov = c.iov[:0]
	i := 0
	for ; i < len(parts) && parts[i].f.File == nil && len(c.iov) < ring.MaxIovecs; i++ {
		if b := parts[i].b; len(b) > 0 {
			c.iov = append(c.iov, unix.Iovec{Base: &b[0], Len: uint64(len(b))})
		}
	}
	if len(c.iov) == 0 {
		return 0, nil // only empty parts: advance skips them
	}
	n, err := sendIovecs(fd, c.iov, i < len(parts))
	clear(c.iov) // drop the pointers into response buffers
	return n, err
}

// advance drops n sent bytes from the leading byte parts.
func advance(parts []part, n int) []part {
	for len(parts) > 0 && parts[0].f.File == nil {
		if len(parts[0].b) > n {
			parts[0].b = parts[0].b[n:]
			return parts
		}
		n -= len(parts[0].b)
		parts = parts[1:]
	}
	return parts
}
