package netio

import (
	"math/bits"
	"sync"
)

// bufPool hands out byte slices by power-of-two size class, so request
// frames (which produce batches alias until the write completes) and
// response buffers are reused instead of allocated per request.
type bufPool struct {
	classes [32]sync.Pool
}

const minPoolClass = 9 // 512 bytes

// get returns a slice of length n (capacity the next power of two).
func (p *bufPool) get(n int) []byte {
	c := sizeClass(n)
	if c >= len(p.classes) {
		return make([]byte, n)
	}
	if v := p.classes[c].Get(); v != nil {
		b := *(v.(*[]byte))
		return b[:n]
	}
	return make([]byte, n, 1<<c)
}

// put returns b to its class; b must not be used afterwards.
func (p *bufPool) put(b []byte) {
	c := sizeClass(cap(b))
	if c >= len(p.classes) || cap(b) != 1<<c {
		return // not one of ours
	}
	b = b[:0]
	p.classes[c].Put(&b)
}

func sizeClass(n int) int {
	if n <= 1<<minPoolClass {
		return minPoolClass
	}
	return bits.Len(uint(n - 1))
}
