package wal

import (
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// nopBackend completes every operation without doing it.
type nopBackend struct{}

func (nopBackend) Run([]ring.Op) error { return nil }
func (nopBackend) Name() string        { return "nop" }
func (nopBackend) Close() error        { return nil }

// BenchmarkAppendPathCPU is the append path without the I/O: staging
// (offsets, epoch, roll checks), building the ring operations and the
// commit (indexes, published offsets), with a backend that does nothing.
// On a shared machine the disk dominates and drowns changes of a few
// nanoseconds in BenchmarkAppend; this isolates the wal's own CPU cost.
func BenchmarkAppendPathCPU(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(map[int]string{1: "batches=1", 16: "batches=16"}[n], func(b *testing.B) {
			l, err := Open(b.TempDir(), Options{Logger: testLogger(b)})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { b.StopTimer(); l.Close() }()
			data := benchBatch(b, 1<<10)
			bufs := make([][]byte, n)
			for i := range bufs {
				bufs[i] = data
			}
			var bt Batch
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := bt.Append(l, bufs, false); err != nil {
					b.Fatal(err)
				}
				if err := bt.Submit(nopBackend{}); err != nil {
					b.Fatal(err)
				}
				bt.Reset()
			}
		})
	}
}
