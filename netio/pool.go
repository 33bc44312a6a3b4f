package netio

import (
	"math/bits"
	"sync"
)

// bufPool hands out byte slices by power-of-two size class, so request
// frames are reused instead of allocated per request. A frame is taken
// when its length prefix arrives and returned once its request is
// answered (request.finish), or when its connection closes; produce
// batches alias it until their append completes. Responses are not
// pooled: each is encoded into a buffer of its own.
//
// Each class keeps a bounded free list of its own rather than a sync.Pool:
// a sync.Pool is emptied by every garbage collection, and a broker taking
// megabyte produce frames at full speed collects often enough that most
// gets would miss. A class keeps at most classBudget bytes of free
// buffers (and at least a few), so idle memory stays bounded.
type bufPool struct {
	classes [32]freeList
}

type freeList struct {
	mu   sync.Mutex
	free [][]byte
}

const (
	minPoolClass = 9        // 512 bytes
	classBudget  = 32 << 20 // free bytes kept per size class
	minPerClass  = 4
)

func perClass(c int) int { return max(minPerClass, classBudget>>c) }

// get returns a slice of length n (capacity the next power of two).
func (p *bufPool) get(n int) []byte {
	c := sizeClass(n)
	if c >= len(p.classes) {
		return make([]byte, n)
	}
	fl := &p.classes[c]
	fl.mu.Lock()
	if k := len(fl.free); k > 0 {
		b := fl.free[k-1]
		fl.free[k-1] = nil
		fl.free = fl.free[:k-1]
		fl.mu.Unlock()
		return b[:n]
	}
	fl.mu.Unlock()
	return make([]byte, n, 1<<c)
}

// put returns b to its class; b must not be used afterwards.
func (p *bufPool) put(b []byte) {
	c := sizeClass(cap(b))
	if c >= len(p.classes) || cap(b) != 1<<c {
		return // not one of ours
	}
	fl := &p.classes[c]
	fl.mu.Lock()
	if len(fl.free) < perClass(c) {
		fl.free = append(fl.free, b[:0])
	}
	fl.mu.Unlock()
}

func sizeClass(n int) int {
	if n <= 1<<minPoolClass {
		return minPoolClass
	}
	return bits.Len(uint(n - 1))
}
