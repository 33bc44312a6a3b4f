package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkWritevReference is the physical reference: a plain pwritev loop
// appending the same batch bytes to a preallocated file, with fdatasync
// after each write for policy=always.
func BenchmarkWritevReference(b *testing.B) {
	for _, policy := range []string{"pagecache", "always"} {
		for _, sz := range benchSizes {
			b.Run(fmt.Sprintf("policy=%s/batch=%s", policy, sz.name), func(b *testing.B) {
				data := benchBatch(b, sz.size)
				f, err := os.Create(filepath.Join(benchDir(b), "ref.log"))
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				const span = 1 << 30
				if err := unix.Fallocate(int(f.Fd()), 0, 0, span); err != nil {
					b.Fatal(err)
				}
				iov := [][]byte{data}
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				b.ResetTimer()
				var off int64
				for i := 0; i < b.N; i++ {
					if off+int64(len(data)) > span {
						off = 0
					}
					if _, err := unix.Pwritev(int(f.Fd()), iov, off); err != nil {
						b.Fatal(err)
					}
					if policy == "always" {
						if err := unix.Fdatasync(int(f.Fd())); err != nil {
							b.Fatal(err)
						}
					}
					off += int64(len(data))
				}
			})
		}
	}
}
