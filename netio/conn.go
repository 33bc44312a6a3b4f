package netio

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/wal"
)

// conn is one client connection. gnet's event loop reads it and parses
// requests; a writer goroutine owns every write, on a dup of the socket
// (gnet's own outbound buffer is never used, so bytes from gnet and from
// sendfile can never interleave). Responses leave strictly in request
// order: each request gets a slot in the FIFO when it is parsed, and the
// writer sends the head slot only once it is complete, whatever order the
// handlers finish in.
type conn struct {
	srv *Server
	gc  gnet.Conn
	nc  *net.TCPConn // the writer's dup of the socket
	rc  sysConn
	id  uint64

	mu     sync.Mutex
	cond   sync.Cond
	queue  []*response
	closed bool
	// done is closed with the connection, so that work parked for it
	// (long-poll fetches) ends with it.
	done chan struct{}

	// inflight counts requests parsed and not yet written.
	inflight atomic.Int32
	// paused is set by the event loop when it stops parsing (in-flight
	// limit or a full writer shard); whoever resumes it clears it and
	// wakes the loop.
	paused        atomic.Bool
	pausedInflght atomic.Bool

	remote string

	// The frame being assembled (event loop only): its length prefix,
	// then its pooled buffer and how much of it arrived.
	hdr    [4]byte
	nhdr   int
	frame  []byte
	filled int

	scratch []byte // the writer's buffer for flushMore
}

type sysConn interface {
	Write(func(fd uintptr) bool) error
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
	release func()
}

func newConn(s *Server, gc gnet.Conn, id uint64) (*conn, error) {
	fd, err := gc.Dup()
	if err != nil {
		return nil, fmt.Errorf("dup socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "kafka-conn")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("wrap socket: %w", err)
	}
	tc, ok := fc.(*net.TCPConn)
	if !ok {
		fc.Close()
		return nil, errors.New("not a TCP connection")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		tc.Close()
		return nil, err
	}
	c := &conn{srv: s, gc: gc, nc: tc, rc: rc, id: id, done: make(chan struct{})}
	if ra := gc.RemoteAddr(); ra != nil {
		c.remote = ra.String()
	}
	c.cond.L = &c.mu
	go c.writeLoop()
	return c, nil
}

// slot appends a response slot in request order (event loop).
func (c *conn) slot() *response {
	r := &response{}
	c.mu.Lock()
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	c.inflight.Add(1)
	return r
}

// complete marks r ready with its parts; release runs after it is written
// (or dropped). Safe from any goroutine.
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
	head := len(c.queue) > 0 && c.queue[0] == r
	c.mu.Unlock()
	if head {
		c.cond.Signal()
	}
}

// completeBytes completes r with one encoded response frame.
func (c *conn) completeBytes(r *response, frame []byte) {
	c.complete(r, []part{{b: frame}}, nil)
}

// skip completes r with nothing to send (acks=0).
func (c *conn) skip(r *response, release func()) {
	c.mu.Lock()
	r.noReply = true
	c.mu.Unlock()
	c.complete(r, nil, release)
}

// close stops the writer; called from OnClose.
func (c *conn) close() {
	c.mu.Lock()
	if !c.closed {
		close(c.done)
	}
	c.closed = true
	c.mu.Unlock()
	c.cond.Broadcast()
}

func (c *conn) writeLoop() {
	defer c.nc.Close()
	var batch []*response
	var bufs net.Buffers
	for {
		c.mu.Lock()
		for !c.closed && (len(c.queue) == 0 || !c.queue[0].ready) {
			c.cond.Wait()
		}
		if c.closed {
			// Responses completed before the close hold resources;
			// those completed after it release them in complete.
			var releases []func()
			for _, r := range c.queue {
				if r.release != nil {
					releases = append(releases, r.release)
					r.release = nil
				}
			}
			c.queue = nil
			c.mu.Unlock()
			for _, f := range releases {
				f()
			}
			return
		}
		// Take every ready response at the head: one writev for them.
		n := 0
		for n < len(c.queue) && c.queue[n].ready {
			n++
		}
		batch = append(batch[:0], c.queue[:n]...)
		clear(c.queue[:n])
		c.queue = c.queue[n:]
		c.mu.Unlock()

		err := c.writeResponses(batch, &bufs)
		for _, r := range batch {
			if r.release != nil {
				r.release()
			}
		}
		clear(batch)
		left := c.inflight.Add(-int32(n))
		if c.pausedInflght.Load() && int(left) < c.srv.cfg.MaxInflightPerConn {
			c.pausedInflght.Store(false)
			c.resume()
		}
		if err != nil {
			c.srv.logger.Debug("closing connection after a write error", "remote", c.remote, "err", err)
			c.gc.Close()
			c.close()
		}
	}
}

// resume clears a pause and asks the event loop to parse again.
func (c *conn) resume() {
	if c.paused.CompareAndSwap(true, false) {
		c.gc.Wake(nil)
	}
}

func (c *conn) writeResponses(rs []*response, bufs *net.Buffers) error {
	*bufs = (*bufs)[:0]
	for _, r := range rs {
		if r.noReply {
			continue
		}
		for _, p := range r.parts {
			if p.f.File == nil {
				*bufs = append(*bufs, p.b)
				continue
			}
			// The bytes before a file range (response and partition
			// headers) go out with MSG_MORE, so TCP sends them with the
			// range instead of as a segment of their own (which would
			// wake the consumer for a few bytes).
			if err := c.flushMore(bufs); err != nil {
				return err
			}
			if err := c.sendfile(p.f); err != nil {
				return err
			}
		}
	}
	return c.flush(bufs)
}

func (c *conn) flush(bufs *net.Buffers) error {
	if len(*bufs) == 0 {
		return nil
	}
	keep := (*bufs)[:0]
	_, err := bufs.WriteTo(c.nc)
	*bufs = keep
	return err
}

// moreLimit bounds the header bytes flushMore gathers into one buffer.
const moreLimit = 64 << 10

// flushMore writes bufs with MSG_MORE: more data follows at once.
func (c *conn) flushMore(bufs *net.Buffers) error {
	n := 0
	for _, b := range *bufs {
		n += len(b)
	}
	if n == 0 || n > moreLimit {
		return c.flush(bufs)
	}
	c.scratch = c.scratch[:0]
	for _, b := range *bufs {
		c.scratch = append(c.scratch, b...)
	}
	*bufs = (*bufs)[:0]
	out := c.scratch
	var werr error
	err := c.rc.Write(func(fd uintptr) bool {
		for len(out) > 0 {
			n, err := unix.SendmsgN(int(fd), out, nil, nil, unix.MSG_MORE)
			if n > 0 {
				out = out[n:]
			}
			switch {
			case err == unix.EAGAIN:
				return false
			case err == unix.EINTR:
				continue
			case err != nil:
				werr = err
				return true
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	return werr
}

// sendfile sends a segment file range to the socket without copying it
// through user space, waiting for writability through Go's poller.
func (c *conn) sendfile(r wal.FileRange) error {
	off, remain := r.Pos, r.Len
	src := int(r.File.Fd())
	var werr error
	err := c.rc.Write(func(fd uintptr) bool {
		for remain > 0 {
			n, err := unix.Sendfile(int(fd), src, &off, int(min(remain, 1<<30)))
			if n > 0 {
				remain -= int64(n)
				c.srv.metrics.SendfileBytes.Add(float64(n))
			}
			switch {
			case err == unix.EAGAIN:
				return false
			case err == unix.EINTR:
				continue
			case err != nil:
				werr = err
				return true
			case n == 0:
				werr = io.ErrUnexpectedEOF
				return true
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	return werr
}
