package netio

// overflow holds the bytes a connection sent while it was not read
// (paused by backpressure or by its requests in flight, or the server
// draining). gnet reads every readable socket whatever the handler does,
// into an inbound ring buffer that grows by a quarter at a time from
// power-of-two pooled buffers and keeps its garbage in a sync.Pool: 100
// MiB left there took the broker's RSS to 400 MiB. So holdUnread moves
// what gnet read into chunks of the server's pool, whose memory is
// exactly what is counted against the limits (charge), and the loop reads
// them back, in order, before gnet's buffer once the connection is read
// again. Event loop only.
type overflow struct {
	chunks [][]byte // len: bytes written into it; each overflowChunk big
	r      int      // read position in chunks[0]
	n      int      // bytes held
	charge int      // the chunks' capacities, summed
}

// overflowChunk is the size of an overflow chunk: a connection's
// overflow costs its bytes rounded up to whole chunks.
const overflowChunk = 16 << 10

// chargeWith is what charge would be with n more bytes written.
func (o *overflow) chargeWith(n int) int {
	used := o.r + o.n // bytes written into the chunks, read ones included
	return (used + n + overflowChunk - 1) / overflowChunk * overflowChunk
}

// write appends p, taking chunks from pool.
func (o *overflow) write(p []byte, pool *bufPool) {
	for len(p) > 0 {
		last := len(o.chunks) - 1
		if last < 0 || len(o.chunks[last]) == overflowChunk {
			o.chunks = append(o.chunks, pool.get(overflowChunk)[:0])
			o.charge += overflowChunk
			last++
		}
		c := o.chunks[last]
		k := copy(c[len(c):overflowChunk], p)
		o.chunks[last] = c[:len(c)+k]
		o.n += k
		p = p[k:]
	}
}

// read moves up to len(dst) bytes into dst, giving emptied chunks back to
// pool, and returns how many.
func (o *overflow) read(dst []byte, pool *bufPool) int {
	got := 0
	for got < len(dst) && o.n > 0 {
		c := o.chunks[0]
		k := copy(dst[got:], c[o.r:])
		got += k
		o.r += k
		o.n -= k
		if o.r == overflowChunk || o.n == 0 {
			o.charge -= overflowChunk
			pool.put(c[:cap(c)])
			o.chunks[0] = nil
			o.chunks = o.chunks[1:]
			o.r = 0
		}
	}
	if len(o.chunks) == 0 {
		o.chunks = nil
	}
	return got
}

// release gives every chunk back to pool (the connection closed).
func (o *overflow) release(pool *bufPool) {
	for _, c := range o.chunks {
		pool.put(c[:cap(c)])
	}
	*o = overflow{}
}
