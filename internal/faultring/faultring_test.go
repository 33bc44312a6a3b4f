package faultring

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/ring"
)

func openFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestFaultsKeepChainSemantics: the failed write ends its chain (the
// rest canceled, nothing written), a torn one writes half, and an
// unlinked operation after the chain still runs.
func TestFaultsKeepChainSemantics(t *testing.T) {
	for _, tear := range []bool{false, true} {
		in := New()
		be := in.Wrap(0, ring.NewPortable())
		defer be.Close()
		f, g := openFile(t), openFile(t)
		data := []byte("0123456789")
		ops := []ring.Op{
			{Kind: ring.OpWritev, Fd: int(f.Fd()), Offset: 0, Bufs: [][]byte{data}, Link: true},
			{Kind: ring.OpWritev, Fd: int(f.Fd()), Offset: 10, Bufs: [][]byte{data}, Link: true},
			{Kind: ring.OpFdatasync, Fd: int(f.Fd())},
			{Kind: ring.OpWritev, Fd: int(g.Fd()), Offset: 0, Bufs: [][]byte{data}},
		}
		in.FailWrite(2, syscall.EIO, tear)
		if err := be.Run(ops); err != nil {
			t.Fatal(err)
		}
		if ops[0].Err != nil || !errors.Is(ops[1].Err, syscall.EIO) || !errors.Is(ops[2].Err, ring.ErrCanceled) || ops[3].Err != nil {
			t.Fatalf("tear=%v: errors %v, %v, %v, %v", tear, ops[0].Err, ops[1].Err, ops[2].Err, ops[3].Err)
		}
		want := int64(10)
		if tear {
			want = 15
		}
		if st, _ := f.Stat(); st.Size() != want {
			t.Errorf("tear=%v: file holds %d bytes, want %d", tear, st.Size(), want)
		}
		if in.Failed() != 1 || in.Writes() != 2 || in.Syncs() != 0 {
			t.Errorf("counts: failed %d writes %d syncs %d", in.Failed(), in.Writes(), in.Syncs())
		}
	}
}

func TestFailSyncAndHeal(t *testing.T) {
	in := New()
	be := in.Wrap(0, ring.NewPortable())
	defer be.Close()
	f := openFile(t)
	sync := []ring.Op{{Kind: ring.OpFdatasync, Fd: int(f.Fd())}}
	in.FailSync(1, syscall.EIO)
	be.Run(sync)
	if !errors.Is(sync[0].Err, syscall.EIO) {
		t.Fatalf("armed sync: %v", sync[0].Err)
	}
	in.FailAllWrites(syscall.ENOSPC)
	w := []ring.Op{{Kind: ring.OpWritev, Fd: int(f.Fd()), Bufs: [][]byte{[]byte("x")}}}
	for range 3 {
		be.Run(w)
		if !errors.Is(w[0].Err, syscall.ENOSPC) {
			t.Fatalf("full disk: %v", w[0].Err)
		}
	}
	in.Heal()
	be.Run(sync)
	be.Run(w)
	if sync[0].Err != nil || w[0].Err != nil {
		t.Fatalf("healed: %v, %v", sync[0].Err, w[0].Err)
	}
}

// TestWriteRateIsOneDisk: two backends share the paced bandwidth.
func TestWriteRateIsOneDisk(t *testing.T) {
	in := New()
	in.SetWriteRate(1 << 20) // 1 MiB/s
	a, b := in.Wrap(0, ring.NewPortable()), in.Wrap(1, ring.NewPortable())
	defer a.Close()
	defer b.Close()
	f := openFile(t)
	buf := make([]byte, 100<<10)
	start := time.Now()
	done := make(chan struct{})
	for i, be := range []ring.Backend{a, b} {
		go func() {
			be.Run([]ring.Op{{Kind: ring.OpWritev, Fd: int(f.Fd()), Offset: int64(i) * int64(len(buf)), Bufs: [][]byte{buf}}})
			done <- struct{}{}
		}()
	}
	<-done
	<-done
	// 200 KiB at 1 MiB/s: at least ~195 ms whatever the overlap.
	if d := time.Since(start); d < 190*time.Millisecond {
		t.Errorf("two 100 KiB writes at 1 MiB/s took %v", d)
	}
}
