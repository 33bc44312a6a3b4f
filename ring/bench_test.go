//go:build linux

package ring

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// Benchmarks. Run them briefly on a shared machine, for example:
//
//	go test -run '^$' -bench . -benchtime 200ms -count 1 ./ring/
//
// RINGLOG_BENCH_DIR picks the directory of the benchmark files (default: the
// test's temp dir); it should be on the file system the log will use, since
// fdatasync costs depend on it.

const (
	benchFileSize = 64 << 20 // the append benchmarks wrap around here
	benchChunks   = 64       // chunks per Run
)

// benchDir returns where benchmark files go.
func benchDir(b *testing.B) string {
	if d := os.Getenv("RINGLOG_BENCH_DIR"); d != "" {
		return d
	}
	return b.TempDir()
}

// preallocated creates a file of size bytes with fallocate and writes it
// once, so that the benchmark overwrites allocated blocks in a warm page
// cache.
func preallocated(b *testing.B, dir, name string, size int64) *os.File {
	b.Helper()
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close(); os.Remove(path) })
	fd := int(f.Fd())
	if err := unix.Fallocate(fd, 0, 0, size); err != nil {
		b.Fatalf("fallocate: %v", err)
	}
	zero := make([]byte, min(size, 1<<20))
	for off := int64(0); off < size; off += int64(len(zero)) {
		if _, err := unix.Pwrite(fd, zero[:min(int64(len(zero)), size-off)], off); err != nil {
			b.Fatal(err)
		}
	}
	if err := unix.Fdatasync(fd); err != nil {
		b.Fatal(err)
	}
	return f
}

// benchBackends are the backends of the matrix.
var benchBackends = []struct {
	name string
	new  func(b *testing.B) Backend
}{
	{"io_uring", func(b *testing.B) Backend {
		u, err := NewURing(Options{})
		if err != nil {
			b.Skipf("io_uring: %v", err)
		}
		return u
	}},
	{"pwritev", func(*testing.B) Backend { return NewPortable() }},
}

func sizeName(n int) string {
	if n%(1<<10) == 0 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkAppend writes 64 chunks per iteration at the next position of a
// preallocated, cached 64 MiB file, wrapping around: as one OpWritev of 64
// buffers, or as 64 OpWritev of one buffer each. The "reference" backend is
// no Backend at all: raw unix.Pwritev (one call of 64 chunks) or unix.Pwrite
// (64 calls) of the same bytes.
func BenchmarkAppend(b *testing.B) {
	f := preallocated(b, benchDir(b), "append", benchFileSize)
	fd := int(f.Fd())
	for _, chunk := range []int{1 << 10, 16 << 10, 256 << 10} {
		chunks := make([][]byte, benchChunks)
		for i := range chunks {
			chunks[i] = pattern(i, chunk)
		}
		batch := int64(chunk * benchChunks)
		next := func(pos *int64) int64 {
			if *pos+batch > benchFileSize {
				*pos = 0
			}
			p := *pos
			*pos += batch
			return p
		}
		for _, shape := range []string{"one-writev-of-64-chunks", "64-separate-writes"} {
			b.Run("backend=reference/chunk="+sizeName(chunk)+"/shape="+shape, func(b *testing.B) {
				b.SetBytes(batch)
				b.ReportAllocs()
				var pos int64
				for b.Loop() {
					off := next(&pos)
					if shape == "64-separate-writes" {
						for i, c := range chunks {
							if _, err := unix.Pwrite(fd, c, off+int64(i*chunk)); err != nil {
								b.Fatal(err)
							}
						}
						continue
					}
					if n, err := unix.Pwritev(fd, chunks, off); err != nil || int64(n) != batch {
						b.Fatal(n, err)
					}
				}
			})
			for _, be := range benchBackends {
				b.Run("backend="+be.name+"/chunk="+sizeName(chunk)+"/shape="+shape, func(b *testing.B) {
					bk := be.new(b)
					defer bk.Close()
					var ops []Op
					if shape == "64-separate-writes" {
						ops = make([]Op, benchChunks)
						for i := range ops {
							ops[i] = Op{Kind: OpWritev, Fd: fd, Bufs: chunks[i : i+1]}
						}
					} else {
						ops = []Op{{Kind: OpWritev, Fd: fd, Bufs: chunks}}
					}
					b.SetBytes(batch)
					b.ReportAllocs()
					var pos int64
					for b.Loop() {
						off := next(&pos)
						for i := range ops {
							ops[i].Offset = off + int64(i*chunk)
						}
						if err := bk.Run(ops); err != nil {
							b.Fatal(err)
						}
						if ops[len(ops)-1].Err != nil {
							b.Fatal(ops[len(ops)-1].Err)
						}
					}
					reportEnters(b, bk)
				})
			}
		}
	}
}

// reportEnters adds io_uring_enter calls per iteration for io_uring.
func reportEnters(b *testing.B, bk Backend) {
	if u, ok := bk.(*URing); ok && b.N > 0 {
		b.ReportMetric(float64(u.stats.enters)/float64(b.N), "enters/op")
	}
}

// BenchmarkSync8Files gives each of 8 files a 4 KiB write and a linked
// fdatasync per iteration. io_uring runs the 8 chains concurrently in the
// kernel (io-wq workers); pwritev runs the 16 calls one after another. The
// reference is the raw pwrite+fdatasync loop.
func BenchmarkSync8Files(b *testing.B) {
	const nFiles, size, fileSize = 8, 4 << 10, 1 << 20
	dir := benchDir(b)
	fds := make([]int, nFiles)
	for i := range fds {
		fds[i] = int(preallocated(b, dir, fmt.Sprintf("sync%d", i), fileSize).Fd())
	}
	buf := pattern(1, size)
	bufs := [][]byte{buf}
	ops := make([]Op, 0, 2*nFiles)
	for _, fd := range fds {
		ops = append(ops,
			Op{Kind: OpWritev, Fd: fd, Bufs: bufs, Link: true},
			Op{Kind: OpFdatasync, Fd: fd})
	}
	run := func(b *testing.B, bk Backend) {
		b.SetBytes(nFiles * size)
		b.ReportAllocs()
		var off int64
		for b.Loop() {
			off = (off + size) % fileSize
			for i := 0; i < len(ops); i += 2 {
				ops[i].Offset = off
			}
			if bk == nil {
				for _, fd := range fds {
					if _, err := unix.Pwrite(fd, buf, off); err != nil {
						b.Fatal(err)
					}
					if err := unix.Fdatasync(fd); err != nil {
						b.Fatal(err)
					}
				}
				continue
			}
			if err := bk.Run(ops); err != nil {
				b.Fatal(err)
			}
			for i := range ops {
				if ops[i].Err != nil {
					b.Fatal(ops[i].Err)
				}
			}
		}
		if bk != nil {
			reportEnters(b, bk)
		}
	}
	b.Run("backend=reference", func(b *testing.B) { run(b, nil) })
	for _, be := range benchBackends {
		b.Run("backend="+be.name, func(b *testing.B) {
			bk := be.new(b)
			defer bk.Close()
			run(b, bk)
		})
	}
	b.Run("backend=io_uring-single-issuer", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		u, err := NewURing(Options{SingleIssuer: true})
		if err != nil {
			b.Skipf("io_uring: %v", err)
		}
		defer u.Close()
		run(b, u)
	})
}
