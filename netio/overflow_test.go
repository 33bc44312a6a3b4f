package netio

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestOverflowKeepsOrderAndCharge: bytes come out in the order written,
// however the writes and reads are cut, and the charge is always the
// chunks held (the bytes from the first chunk's start, rounded up).
func TestOverflowKeepsOrderAndCharge(t *testing.T) {
	var pool bufPool
	rng := rand.New(rand.NewPCG(1, 2))
	var o overflow
	var want, got []byte
	next := byte(0)
	for step := 0; step < 2000; step++ {
		if rng.IntN(2) == 0 {
			p := make([]byte, rng.IntN(40<<10))
			for i := range p {
				p[i] = next
				next++
			}
			if c := o.chargeWith(len(p)); c < o.n+len(p) || c%overflowChunk != 0 {
				t.Fatalf("chargeWith(%d) = %d with %d held", len(p), c, o.n)
			}
			expect := o.chargeWith(len(p))
			o.write(p, &pool)
			if o.charge != expect {
				t.Fatalf("charge %d after writing, chargeWith said %d", o.charge, expect)
			}
			want = append(want, p...)
		} else {
			dst := make([]byte, rng.IntN(30<<10))
			k := o.read(dst, &pool)
			got = append(got, dst[:k]...)
		}
		if o.charge != len(o.chunks)*overflowChunk || o.charge < o.n+o.r || o.charge >= o.n+o.r+overflowChunk {
			t.Fatalf("step %d: charge %d for %d chunks, %d bytes held", step, o.charge, len(o.chunks), o.n)
		}
	}
	dst := make([]byte, o.n)
	got = append(got, dst[:o.read(dst, &pool)]...)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes back, not the %d written in order", len(got), len(want))
	}
	if o.n != 0 || o.charge != 0 || len(o.chunks) != 0 {
		t.Fatalf("emptied overflow: %d bytes, charge %d, %d chunks", o.n, o.charge, len(o.chunks))
	}
	o.write([]byte("x"), &pool)
	o.release(&pool)
	if o.n != 0 || o.charge != 0 {
		t.Fatal("release left something")
	}
}
