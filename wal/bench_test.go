package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// Benchmarks of the append path. Compare within one run (the machine is
// shared and noisy); the interesting numbers are ratios:
//
//   - policy=always: appenders=64 (group commit: many appends share one
//     fdatasync) against appenders=1 (one fdatasync per append);
//   - policy=pagecache: each backend against BenchmarkWritevReference,
//     the physical reference (a bare pwritev loop over the same bytes into a
//     preallocated file; Linux only, in bench_linux_test.go).
//
// Set RINGLOG_BENCH_DIR to measure on the file system the broker will use.

var benchSizes = []struct {
	name string
	size int
}{{"1KiB", 1 << 10}, {"16KiB", 16 << 10}, {"256KiB", 256 << 10}}

func benchDir(b *testing.B) string {
	if d := os.Getenv("RINGLOG_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "walbench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// benchBatch is one valid batch of about size bytes.
func benchBatch(b testing.TB, size int) []byte {
	n := max(1, size/1024)
	return makeBatch(b, 0, n, size/n-40, 1_700_000_000_000)
}

// appendRequest is one appender's request to the owner goroutine.
type appendRequest struct {
	data []byte
	done chan error
}

// runOwner is a minimal writer shard: it drains whatever requests are
// queued, stages them all in one Batch, submits, and answers each.
func runOwner(l *Log, be ring.Backend, sync bool, reqs chan appendRequest) {
	var b Batch
	pending := make([]appendRequest, 0, 256)
	for r := range reqs {
		pending = append(pending[:0], r)
	drain:
		for len(pending) < cap(pending) {
			select {
			case r, ok := <-reqs:
				if !ok {
					break drain
				}
				pending = append(pending, r)
			default:
				break drain
			}
		}
		var err error
		for _, p := range pending {
			if _, err = b.Append(l, [][]byte{p.data}, sync); err != nil {
				break
			}
		}
		if err == nil {
			err = b.Submit(be)
		}
		for _, p := range pending {
			p.done <- err
		}
		b.Reset()
	}
}

func BenchmarkAppend(b *testing.B) {
	for _, kind := range []ring.Kind{ring.KindHybrid, ring.KindIOUring, ring.KindPortable} {
		for _, policy := range []string{"pagecache", "always"} {
			for _, sz := range benchSizes {
				for _, appenders := range []int{1, 64} {
					name := fmt.Sprintf("backend=%s/policy=%s/batch=%s/appenders=%d", kind, policy, sz.name, appenders)
					b.Run(name, func(b *testing.B) {
						benchAppend(b, kind, policy == "always", sz.size, appenders)
					})
				}
			}
		}
	}
}

func benchAppend(b *testing.B, kind ring.Kind, syncEach bool, size, appenders int) {
	be := newBackend(b, kind)
	l, err := Open(benchDir(b), Options{Preallocate: true, Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	// Close flushes everything: keep it out of the timing.
	defer func() { b.StopTimer(); l.Close() }()
	data := benchBatch(b, size)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	if appenders == 1 {
		var bt Batch
		bufs := [][]byte{data}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := bt.Append(l, bufs, syncEach); err != nil {
				b.Fatal(err)
			}
			if err := bt.Submit(be); err != nil {
				b.Fatal(err)
			}
			bt.Reset()
		}
		return
	}
	reqs := make(chan appendRequest, appenders)
	go runOwner(l, be, syncEach, reqs)
	defer close(reqs)
	var wg sync.WaitGroup
	per := b.N / appenders
	extra := b.N % appenders
	b.ResetTimer()
	for g := 0; g < appenders; g++ {
		n := per
		if g < extra {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each appender has its own copy: the owner patches offsets
			// in place.
			mine := append([]byte(nil), data...)
			done := make(chan error, 1)
			for i := 0; i < n; i++ {
				reqs <- appendRequest{data: mine, done: done}
				if err := <-done; err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkGroupCommitManyLogs is a writer shard's always-sync case: one
// 16 KiB batch to each of 8 logs per submission. io_uring runs the eight
// fdatasyncs concurrently in the kernel; the pwritev backend one by one.
func BenchmarkGroupCommitManyLogs(b *testing.B) {
	for _, kind := range []ring.Kind{ring.KindHybrid, ring.KindIOUring, ring.KindPortable} {
		b.Run("backend="+string(kind), func(b *testing.B) {
			be := newBackend(b, kind)
			dir := benchDir(b)
			var logs []*Log
			for i := 0; i < 8; i++ {
				l, err := Open(filepath.Join(dir, fmt.Sprint(i)), Options{Preallocate: true, Logger: testLogger(b)})
				if err != nil {
					b.Fatal(err)
				}
				logs = append(logs, l)
			}
			defer func() {
				b.StopTimer()
				for _, l := range logs {
					l.Close()
				}
			}()
			data := benchBatch(b, 16<<10)
			bufs := [][]byte{data}
			b.SetBytes(int64(len(data) * len(logs)))
			b.ReportAllocs()
			var bt Batch
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, l := range logs {
					if _, err := bt.Append(l, bufs, true); err != nil {
						b.Fatal(err)
					}
				}
				if err := bt.Submit(be); err != nil {
					b.Fatal(err)
				}
				bt.Reset()
			}
		})
	}
}

// BenchmarkRead measures a fetch's lookup: find the batch holding an
// offset and the file range up to 1 MiB after it.
func BenchmarkRead(b *testing.B) {
	be := newBackend(b, ring.KindPortable)
	l, err := Open(benchDir(b), Options{Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	data := benchBatch(b, 16<<10)
	for i := 0; i < 2000; i++ {
		if _, err := l.Append(be, [][]byte{data}, false); err != nil {
			b.Fatal(err)
		}
	}
	end := l.EndOffset()
	b.ReportAllocs()
	var c Chunk
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := int64(i*7919) % end
		if err := l.Read(&c, off, 1<<20, end); err != nil || c.Bytes == 0 {
			b.Fatal(err)
		}
		c.Release()
	}
	_ = batch.HeaderSize
}

// BenchmarkReadTail measures a consumer's lookup at the tail: a read from
// the base offset of one of the last 8 batches (1 KiB each, 4 KiB between
// offset-index entries) to the end.
func BenchmarkReadTail(b *testing.B) {
	be := newBackend(b, ring.KindPortable)
	l, err := Open(benchDir(b), Options{Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	data := benchBatch(b, 1<<10)
	var bases []int64
	for i := 0; i < 1000; i++ {
		res, err := l.Append(be, [][]byte{data}, false)
		if err != nil {
			b.Fatal(err)
		}
		bases = append(bases, res[0].BaseOffset)
	}
	end := l.EndOffset()
	b.ReportAllocs()
	var c Chunk
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := bases[len(bases)-1-i%8]
		if err := l.Read(&c, off, 1<<20, end); err != nil || c.Bytes == 0 {
			b.Fatal(err)
		}
		c.Release()
	}
}
