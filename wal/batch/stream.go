package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Stream walks the records of one batch in order without holding its
// decompressed records region in memory: the codec's decoder feeds a
// small window (streamWindow bytes), and only what a caller asks for is
// kept. It is how the broker looks inside compressed batches it did not
// build (a produce's, a native fetch's), where Records would decompress a
// whole batch at once, and it bounds the work: past Limit decompressed
// bytes the walk stops with a ClassTooLarge error, so a small "bomb"
// costs at most Limit bytes of decompression and a window of memory.
//
// A Stream is reused: Reset starts a walk, Close gives pooled decoders
// back. It is not safe for concurrent use.
type Stream struct {
	src   streamSource
	left  int32 // records still to read
	index int32 // records read
	body  []byte
	err   error
}

// streamWindow is the bytes of decompressed records a Stream reads ahead.
const streamWindow = 32 << 10

// streamSource is the decompressed records: a window over a decoder, or
// the batch's own bytes when it is not compressed.
type streamSource struct {
	r        io.Reader
	window   []byte // buf[pos:end] is read and not consumed
	pos, end int
	produced int64 // bytes the decoder produced so far
	limit    int64 // most bytes the decoder may produce
	done     bool  // r reported io.EOF
	release  func()
	buf      []byte // the window's storage when r is a decoder
}

// errTooLarge is the error of a source past its limit.
func (s *streamSource) errTooLarge() error {
	return errorf(ClassTooLarge, "records decompress past %d bytes", s.limit)
}

// fill reads more of the decoder into the window; it reports false at
// the end of the records or on an error (then err is set).
func (s *streamSource) fill() (bool, error) {
	if s.r == nil || s.done {
		return false, nil
	}
	if s.pos < s.end {
		return true, nil
	}
	n, err := s.r.Read(s.buf)
	s.pos, s.end = 0, n
	s.window = s.buf
	s.produced += int64(n)
	if s.produced > s.limit {
		return false, s.errTooLarge()
	}
	if err == io.EOF {
		s.done = true
		err = nil
	}
	if err != nil {
		return false, errorf(ClassInvalid, "records do not decompress: %v", err)
	}
	if n == 0 && !s.done {
		return true, nil // an empty read: ask again
	}
	return n > 0, nil
}

// ReadByte serves binary.ReadVarint.
func (s *streamSource) ReadByte() (byte, error) {
	for s.pos == s.end {
		more, err := s.fill()
		if err != nil {
			return 0, err
		}
		if !more {
			return 0, io.EOF
		}
	}
	b := s.window[s.pos]
	s.pos++
	return b, nil
}

// discard skips n bytes, reporting false if the records end first.
func (s *streamSource) discard(n int64) (bool, error) {
	for n > 0 {
		if s.pos == s.end {
			more, err := s.fill()
			if err != nil || !more {
				return false, err
			}
			continue
		}
		k := min(int64(s.end-s.pos), n)
		s.pos += int(k)
		n -= k
	}
	return true, nil
}

// read fills p, reporting false if the records end first.
func (s *streamSource) read(p []byte) (bool, error) {
	for len(p) > 0 {
		if s.pos == s.end {
			more, err := s.fill()
			if err != nil || !more {
				return false, err
			}
			continue
		}
		k := copy(p, s.window[s.pos:s.end])
		s.pos += k
		p = p[k:]
	}
	return true, nil
}

// atEnd reports whether the records end here, reading (and checking) the
// rest of the decoder's stream: a checksum a codec keeps at its end is
// verified then.
func (s *streamSource) atEnd() (bool, error) {
	for {
		if s.pos < s.end {
			return false, nil
		}
		more, err := s.fill()
		if err != nil {
			return false, err
		}
		if !more {
			return true, nil
		}
	}
}

// Reset starts a walk over the records of batch b (header h, as Validate
// or CheckStored returned it), decompressing at most limit bytes (0:
// MaxDecompressedBytes). It returns an error, classified, when the codec
// cannot start.
func (st *Stream) Reset(b []byte, h *Header, limit int64) error {
	st.Close()
	if limit <= 0 {
		limit = MaxDecompressedBytes
	}
	body := st.body
	*st = Stream{left: h.RecordCount, body: body}
	recs := b[HeaderSize:]
	src := &st.src
	src.limit = limit
	if h.Codec() == CodecNone {
		src.window, src.pos, src.end = recs, 0, len(recs)
		return nil
	}
	r, release, err := openDecoder(h.Codec(), recs, limit)
	if err != nil {
		st.err = err
		return err
	}
	src.r, src.release = r, release
	src.buf = getWindow()
	return nil
}

// Close gives the pooled decoder and window back; the Stream can be Reset
// again.
func (st *Stream) Close() {
	src := &st.src
	if src.release != nil {
		src.release()
		src.release = nil
	}
	if src.buf != nil {
		putWindow(src.buf)
		src.buf = nil
	}
	src.r, src.window = nil, nil
}

// Err is why the walk stopped early, or nil.
func (st *Stream) Err() error { return st.err }

// fail records err (classified) and stops the walk.
func (st *Stream) fail(err error) bool {
	if ClassOf(err) == 0 {
		err = errorf(ClassInvalid, "%v", err)
	}
	st.err = fmt.Errorf("record %d: %w", st.index, err)
	return false
}

// Info is what Skip tells of a record without keeping its bytes.
type Info struct {
	TimestampDelta int64
	OffsetDelta    int32
	NullKey        bool
	Bytes          int // the record's encoded size, length prefix included
}

// Skip reads the next record's fields, checking that they parse and fill
// the record's length exactly, without keeping its key, value or headers
// (memory stays a window however large the record). It returns false at
// the end of the declared records (then Err is nil if the records ended
// exactly there) or on a malformed record (Err says why).
func (st *Stream) Skip() (Info, bool) {
	var in Info
	if !st.begin() {
		return in, false
	}
	src := &st.src
	length, err := st.recordLength()
	if err != nil {
		return in, st.fail(err)
	}
	start := src.consumed()
	rem := func() int64 { return length - (src.consumed() - start) }
	if _, err := src.ReadByte(); err != nil { // attributes: unused
		return in, st.fail(readErr(err, "record cut short"))
	}
	if in.TimestampDelta, err = binary.ReadVarint(src); err != nil {
		return in, st.fail(readErr(err, "bad timestamp delta"))
	}
	od, err := binary.ReadVarint(src)
	if err != nil || od < 0 || od > 1<<31-1 {
		return in, st.fail(readErr(err, "bad offset delta %d", od))
	}
	in.OffsetDelta = int32(od)
	skip := func(nullable bool, what string) (isNull bool, ok bool) {
		n, err := binary.ReadVarint(src)
		switch {
		case err != nil:
			return false, st.fail(readErr(err, "bad %s length", what))
		case n == -1 && nullable:
			return true, true
		case n < 0:
			return false, st.fail(errorf(ClassInvalid, "%s length %d (a %s cannot be null)", what, n, what))
		case n > rem():
			return false, st.fail(errorf(ClassInvalid, "%s length %d does not fit the record's %d bytes", what, n, length))
		}
		if ok, err := src.discard(n); !ok {
			return false, st.fail(readErr(err, "%s cut short", what))
		}
		return false, true
	}
	var ok bool
	if in.NullKey, ok = skip(true, "key"); !ok {
		return in, false
	}
	if _, ok = skip(true, "value"); !ok {
		return in, false
	}
	hc, err := binary.ReadVarint(src)
	if err != nil || hc < 0 || hc > rem() {
		return in, st.fail(readErr(err, "bad header count %d", hc))
	}
	for i := int64(0); i < hc; i++ {
		// Kafka refuses a null header key.
		if _, ok = skip(false, "header key"); !ok {
			return in, false
		}
		if _, ok = skip(true, "header value"); !ok {
			return in, false
		}
	}
	if r := rem(); r != 0 {
		return in, st.fail(errorf(ClassInvalid, "record length %d, but its fields take %d bytes", length, length-r))
	}
	in.Bytes = int(src.consumed()-start) + varintLen(length)
	st.left--
	st.index++
	return in, true
}

// Next reads the next record whole; its slices alias the Stream's buffer
// and stay valid until the next call. It returns false at the end of the
// declared records or on a malformed record, as Skip.
func (st *Stream) Next() (Record, bool) {
	if !st.begin() {
		return Record{}, false
	}
	src := &st.src
	length, err := st.recordLength()
	if err != nil {
		return Record{}, st.fail(err)
	}
	if int64(cap(st.body)) < length {
		st.body = make([]byte, length)
	}
	body := st.body[:length]
	if ok, err := src.read(body); !ok {
		return Record{}, st.fail(readErr(err, "record cut short"))
	}
	var r Record
	if err := parseRecord(body, &r); err != nil {
		return Record{}, st.fail(err)
	}
	st.left--
	st.index++
	return r, true
}

// recordLength reads a record's length prefix: positive, and within the
// decompression limit (past it: ClassTooLarge, before anything is read).
func (st *Stream) recordLength() (int64, error) {
	length, err := binary.ReadVarint(&st.src)
	switch {
	case err != nil || length <= 0:
		return 0, readErr(err, "bad record length %d", length)
	case length > st.src.limit-st.src.consumed():
		return 0, st.src.errTooLarge()
	}
	return length, nil
}

// begin checks whether another record is due; at the end of the declared
// records it checks that the records end there too.
func (st *Stream) begin() bool {
	if st.err != nil {
		return false
	}
	if st.left > 0 {
		return true
	}
	end, err := st.src.atEnd()
	switch {
	case err != nil:
		st.err = err
	case !end:
		st.err = errorf(ClassInvalid, "bytes follow the last of the %d declared records", st.index)
	}
	return false
}

// consumed is the bytes of records read so far.
func (s *streamSource) consumed() int64 {
	if s.r == nil {
		return int64(s.pos)
	}
	return s.produced - int64(s.end-s.pos)
}

// readErr turns a failed read into a batch error: the records ended
// early, a codec failed, or a field is out of range.
func readErr(err error, format string, args ...any) error {
	if err != nil && ClassOf(err) != 0 {
		return err
	}
	msg := fmt.Sprintf(format, args...)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		msg += ": " + err.Error()
	} else if err != nil {
		msg += ": the records end early"
	}
	return &Error{Class: ClassInvalid, Msg: msg}
}

// The decoders are pooled: building one costs more than a small batch's
// decompression. None of them runs goroutines of its own (zstd is used
// with concurrency 1), so a pooled one the GC drops leaks nothing.
var (
	gzipPool   sync.Pool // *gzip.Reader
	lz4Pool    sync.Pool // *lz4.Reader
	zstdPool   sync.Pool // *zstd.Decoder
	snappyPool sync.Pool // *snappyReader, with its block buffer
	windowPool = sync.Pool{New: func() any { b := make([]byte, streamWindow); return &b }}
)

func getWindow() []byte  { return *windowPool.Get().(*[]byte) }
func putWindow(b []byte) { windowPool.Put(&b) }

// zstdMaxWindow bounds the window a zstd frame may ask the decoder to keep
// (the memory a stream needs). Producers' frames use at most 8 MiB
// (klauspost's default) and libzstd shrinks the window to the input for
// a batch-sized input.
const zstdMaxWindow = 32 << 20

// openDecoder starts a streaming decoder of codec c over src.
func openDecoder(c Codec, src []byte, limit int64) (io.Reader, func(), error) {
	switch c {
	case CodecGzip:
		zr, _ := gzipPool.Get().(*gzip.Reader)
		var err error
		if zr == nil {
			zr, err = gzip.NewReader(bytes.NewReader(src))
		} else {
			err = zr.Reset(bytes.NewReader(src))
		}
		if err != nil {
			return nil, nil, errorf(ClassInvalid, "gzip: %v", err)
		}
		return zr, func() { gzipPool.Put(zr) }, nil
	case CodecLZ4:
		lr, _ := lz4Pool.Get().(*lz4.Reader)
		if lr == nil {
			lr = lz4.NewReader(nil)
		}
		lr.Reset(bytes.NewReader(src))
		return lr, func() { lr.Reset(nil); lz4Pool.Put(lr) }, nil
	case CodecZstd:
		zd, _ := zstdPool.Get().(*zstd.Decoder)
		var err error
		if zd == nil {
			zd, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
				zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(uint64(MaxDecompressedBytes)))
			if err != nil {
				return nil, nil, fmt.Errorf("zstd: %w", err)
			}
		}
		if err := zd.Reset(bytes.NewReader(src)); err != nil {
			zstdPool.Put(zd)
			return nil, nil, errorf(ClassInvalid, "zstd: %v", err)
		}
		return zd, func() { zd.Reset(nil); zstdPool.Put(zd) }, nil
	case CodecSnappy:
		sr, _ := snappyPool.Get().(*snappyReader)
		if sr == nil {
			sr = new(snappyReader)
		}
		*sr = snappyReader{src: src, limit: limit, buf: sr.buf}
		return sr, func() {
			if cap(sr.buf) > snappyKeepBytes {
				sr.buf = nil
			}
			sr.src, sr.out = nil, nil
			snappyPool.Put(sr)
		}, nil
	}
	return nil, nil, errorf(ClassCorrupt, "unknown compression codec %d", c)
}

// snappyKeepBytes is the largest block buffer a pooled snappyReader keeps.
const snappyKeepBytes = 1 << 20

// snappyReader decodes Kafka's two snappy framings as a stream: the Java
// client's xerial chunks one at a time, a bare snappy block (other
// clients) whole, since that format has no smaller unit. A chunk or block
// that would decode past limit is refused before it is decoded.
type snappyReader struct {
	src     []byte
	limit   int64
	started bool
	xerial  bool
	out     []byte // decoded and not yet read
	buf     []byte
}

func (r *snappyReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if !r.started {
			r.started = true
			if bytes.HasPrefix(r.src, xerialMagic) {
				if len(r.src) < 16 {
					return 0, errorf(ClassInvalid, "snappy: short xerial header")
				}
				r.xerial, r.src = true, r.src[16:]
			} else {
				if err := r.decode(r.src); err != nil {
					return 0, err
				}
				r.src = nil
				continue
			}
		}
		if !r.xerial || len(r.src) == 0 {
			return 0, io.EOF
		}
		if len(r.src) < 4 {
			return 0, errorf(ClassInvalid, "snappy: truncated xerial chunk length")
		}
		n := binary.BigEndian.Uint32(r.src)
		if uint64(n) > uint64(len(r.src)-4) {
			return 0, errorf(ClassInvalid, "snappy: xerial chunk of %d bytes runs past the data", n)
		}
		if err := r.decode(r.src[4 : 4+n]); err != nil {
			return 0, err
		}
		r.src = r.src[4+n:]
	}
	k := copy(p, r.out)
	r.out = r.out[k:]
	return k, nil
}

func (r *snappyReader) decode(block []byte) error {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return errorf(ClassInvalid, "snappy: %v", err)
	}
	if int64(n) > r.limit {
		return errorf(ClassTooLarge, "records decompress past %d bytes", r.limit)
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	out, err := snappy.Decode(r.buf[:n], block)
	if err != nil {
		return errorf(ClassInvalid, "snappy: %v", err)
	}
	r.out = out
	return nil
}
