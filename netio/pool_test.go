package netio

import "testing"

func TestBufPool(t *testing.T) {
	var p bufPool
	for _, n := range []int{1, 512, 513, 4096, 1 << 20, 3<<20 + 1} {
		b := p.get(n)
		if len(b) != n || cap(b)&(cap(b)-1) != 0 || cap(b) < n {
			t.Fatalf("get(%d): len %d cap %d", n, len(b), cap(b))
		}
		p.put(b)
		if b2 := p.get(n); &b2[:1][0] != &b[:1][0] {
			t.Fatalf("get(%d) after put did not reuse the buffer", n)
		}
	}
	// A foreign slice is ignored, and a class keeps a bounded number.
	p.put(make([]byte, 100, 1000))
	c := sizeClass(8 << 20)
	for i := 0; i < 100; i++ {
		p.put(make([]byte, 0, 8<<20))
	}
	if n := len(p.classes[c].free); n != perClass(c) {
		t.Fatalf("class of 8 MiB keeps %d free buffers, want %d", n, perClass(c))
	}
}

func BenchmarkBufPool(b *testing.B) {
	var p bufPool
	b.ReportAllocs()
	for b.Loop() {
		p.put(p.get(1 << 20))
	}
}
