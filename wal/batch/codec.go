package batch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// MaxDecompressedBytes bounds what Decompress will produce for one batch, so
// a tiny "zip bomb" batch cannot make the broker allocate without bound.
const MaxDecompressedBytes = 256 << 20

// zstdCodec holds the zstd encoder and decoder. Both are safe for concurrent
// EncodeAll/DecodeAll and expensive to build, so they are built once, on
// first use, and never change afterwards.
var zstdCodec struct {
	once sync.Once
	enc  *zstd.Encoder
	dec  *zstd.Decoder
	err  error
}

func zstdInit() error {
	zstdCodec.once.Do(func() {
		zstdCodec.enc, zstdCodec.err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		if zstdCodec.err != nil {
			return
		}
		zstdCodec.dec, zstdCodec.err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxDecompressedBytes))
	})
	return zstdCodec.err
}

// xerialMagic opens the snappy framing the Java client (snappy-java) uses.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// Compress appends src compressed with c to dst.
func Compress(c Codec, dst, src []byte) ([]byte, error) {
	switch c {
	case CodecNone:
		return append(dst, src...), nil
	case CodecGzip:
		buf := bytes.NewBuffer(dst)
		w := gzip.NewWriter(buf)
		if _, err := w.Write(src); err != nil {
			return dst, fmt.Errorf("gzip: %w", err)
		}
		if err := w.Close(); err != nil {
			return dst, fmt.Errorf("gzip: %w", err)
		}
		return buf.Bytes(), nil
	case CodecSnappy:
		n := snappy.MaxEncodedLen(len(src))
		start := len(dst)
		dst = grow(dst, n)
		out := snappy.Encode(dst[start:start+n], src)
		return dst[:start+len(out)], nil
	case CodecLZ4:
		buf := bytes.NewBuffer(dst)
		w := lz4.NewWriter(buf)
		if _, err := w.Write(src); err != nil {
			return dst, fmt.Errorf("lz4: %w", err)
		}
		if err := w.Close(); err != nil {
			return dst, fmt.Errorf("lz4: %w", err)
		}
		return buf.Bytes(), nil
	case CodecZstd:
		if err := zstdInit(); err != nil {
			return dst, fmt.Errorf("zstd: %w", err)
		}
		return zstdCodec.enc.EncodeAll(src, dst), nil
	}
	return dst, fmt.Errorf("unknown codec %d", c)
}

// Decompress appends the decompressed form of src to dst. It never produces
// more than MaxDecompressedBytes.
func Decompress(c Codec, dst, src []byte) ([]byte, error) {
	switch c {
	case CodecNone:
		return append(dst, src...), nil
	case CodecGzip:
		r, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return dst, errorf(ClassCorrupt, "gzip: %v", err)
		}
		return readLimited(dst, r, "gzip")
	case CodecSnappy:
		if bytes.HasPrefix(src, xerialMagic) {
			return decodeXerial(dst, src)
		}
		return decodeSnappyBlock(dst, src)
	case CodecLZ4:
		return readLimited(dst, lz4.NewReader(bytes.NewReader(src)), "lz4")
	case CodecZstd:
		if err := zstdInit(); err != nil {
			return dst, fmt.Errorf("zstd: %w", err)
		}
		out, err := zstdCodec.dec.DecodeAll(src, dst)
		if err != nil {
			return dst, errorf(ClassCorrupt, "zstd: %v", err)
		}
		return out, nil
	}
	return dst, errorf(ClassCorrupt, "unknown codec %d", c)
}

func readLimited(dst []byte, r io.Reader, name string) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	n, err := buf.ReadFrom(io.LimitReader(r, MaxDecompressedBytes+1))
	if err != nil {
		return dst, errorf(ClassCorrupt, "%s: %v", name, err)
	}
	if n > MaxDecompressedBytes {
		return dst, errorf(ClassTooLarge, "%s: decompresses past %d bytes", name, MaxDecompressedBytes)
	}
	return buf.Bytes(), nil
}

func decodeSnappyBlock(dst, src []byte) ([]byte, error) {
	n, err := snappy.DecodedLen(src)
	if err != nil {
		return dst, errorf(ClassCorrupt, "snappy: %v", err)
	}
	if n > MaxDecompressedBytes || len(dst)+n > MaxDecompressedBytes {
		return dst, errorf(ClassTooLarge, "snappy: decompresses past %d bytes", MaxDecompressedBytes)
	}
	start := len(dst)
	dst = grow(dst, n)
	out, err := snappy.Decode(dst[start:start+n], src)
	if err != nil {
		return dst[:start], errorf(ClassCorrupt, "snappy: %v", err)
	}
	return dst[:start+len(out)], nil
}

// decodeXerial undoes snappy-java's framing: the 8-byte magic, two 4-byte
// version fields, then chunks of [length:4][snappy block].
func decodeXerial(dst, src []byte) ([]byte, error) {
	if len(src) < 16 {
		return dst, errorf(ClassCorrupt, "snappy: short xerial header")
	}
	src = src[16:]
	for len(src) > 0 {
		if len(src) < 4 {
			return dst, errorf(ClassCorrupt, "snappy: truncated xerial chunk length")
		}
		n := binary.BigEndian.Uint32(src)
		src = src[4:]
		if uint64(n) > uint64(len(src)) {
			return dst, errorf(ClassCorrupt, "snappy: xerial chunk of %d bytes runs past the data", n)
		}
		var err error
		if dst, err = decodeSnappyBlock(dst, src[:n]); err != nil {
			return dst, err
		}
		src = src[n:]
	}
	return dst, nil
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*len(b)+n)
	copy(nb, b)
	return nb
}
