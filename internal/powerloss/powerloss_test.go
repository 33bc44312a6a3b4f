package powerloss

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// TestApplyKeepsSyncedBytes writes a file through a journaled backend:
// synced bytes, then unsynced ones; a cut must keep the synced prefix
// whole and do one of its three things to the rest. Run for many seeds,
// so that every mode is seen.
func TestApplyKeepsSyncedBytes(t *testing.T) {
	seen := map[Mode]int{}
	for seed := range uint64(40) {
		dir := t.TempDir()
		jpath := filepath.Join(dir, "journal")
		j, err := Open(jpath)
		if err != nil {
			t.Fatal(err)
		}
		b := j.Wrap(0, ring.NewPortable())
		file := filepath.Join(dir, "seg.log")
		f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 7))
		synced := bytes.Repeat([]byte{'s'}, 1000+rng.IntN(9000))
		unsynced := bytes.Repeat([]byte{'u'}, 1+rng.IntN(20000))
		fd := int(f.Fd())
		run := func(ops ...ring.Op) {
			t.Helper()
			if err := b.Run(ops); err != nil {
				t.Fatal(err)
			}
			for _, op := range ops {
				if op.Err != nil {
					t.Fatal(op.Err)
				}
			}
		}
		run(ring.Op{Kind: ring.OpWritev, Fd: fd, Bufs: [][]byte{synced}, Link: true}, ring.Op{Kind: ring.OpFdatasync, Fd: fd})
		run(ring.Op{Kind: ring.OpWritev, Fd: fd, Offset: int64(len(synced)), Bufs: [][]byte{unsynced}})
		f.Close()
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		whole := append(append([]byte(nil), synced...), unsynced...)

		dmg, err := Apply(jpath, rng)
		if err != nil {
			t.Fatal(err)
		}
		if len(dmg) != 1 || dmg[0].Durable != int64(len(synced)) || dmg[0].Size != int64(len(whole)) {
			t.Fatalf("seed %d: damage %+v, want one file with durable %d, size %d", seed, dmg, len(synced), len(whole))
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(got, synced) {
			t.Fatalf("seed %d (%v): the synced bytes did not survive", seed, dmg[0].Mode)
		}
		switch m := dmg[0].Mode; m {
		case Drop:
			if len(got) != len(synced) {
				t.Fatalf("seed %d: drop left %d bytes, want %d", seed, len(got), len(synced))
			}
		case Torn:
			if len(got) >= len(whole) || !bytes.Equal(got, whole[:len(got)]) {
				t.Fatalf("seed %d: torn left %d bytes that are not a shorter prefix of the %d written", seed, len(got), len(whole))
			}
		case Holes:
			if len(got) != len(whole) {
				t.Fatalf("seed %d: holes changed the length to %d", seed, len(got))
			}
			var zeroed int64
			for i := range got {
				if got[i] != whole[i] {
					if got[i] != 0 {
						t.Fatalf("seed %d: byte %d is %q, neither written nor zero", seed, i, got[i])
					}
					zeroed++
				}
			}
			if zeroed != dmg[0].Lost {
				t.Fatalf("seed %d: %d bytes zeroed, damage says %d", seed, zeroed, dmg[0].Lost)
			}
		}
		seen[dmg[0].Mode]++
		// The journal is emptied: a second cut does nothing.
		if dmg, err := Apply(jpath, rng); err != nil || len(dmg) != 0 {
			t.Fatalf("second cut: %v, %+v", err, dmg)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("modes seen over 40 seeds: %v, want all three", seen)
	}
}

// TestJournalSpansProcesses: a second journal on the same file (the next
// process after a kill without a cut) keeps the durable length the first
// one recorded, rather than trusting the file's length, which includes
// bytes that only the page cache holds.
func TestJournalSpansProcesses(t *testing.T) {
	dir := t.TempDir()
	jpath := filepath.Join(dir, "journal")
	file := filepath.Join(dir, "seg.log")
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(j *Journal, off int64, n int, sync bool) {
		t.Helper()
		ops := []ring.Op{{Kind: ring.OpWritev, Fd: int(f.Fd()), Offset: off, Bufs: [][]byte{bytes.Repeat([]byte{'x'}, n)}, Link: sync}}
		if sync {
			ops = append(ops, ring.Op{Kind: ring.OpFdatasync, Fd: int(f.Fd())})
		}
		if err := j.Wrap(0, ring.NewPortable()).Run(ops); err != nil {
			t.Fatal(err)
		}
	}
	j1, err := Open(jpath)
	if err != nil {
		t.Fatal(err)
	}
	write(j1, 0, 100, true)
	write(j1, 100, 50, false)
	j1.Close()
	j2, err := Open(jpath)
	if err != nil {
		t.Fatal(err)
	}
	write(j2, 150, 50, false)
	j2.Close()
	dmg, err := Apply(jpath, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if len(dmg) != 1 || dmg[0].Durable != 100 || dmg[0].Size != 200 {
		t.Fatalf("damage %+v, want durable 100 of 200 bytes", dmg)
	}
}

// FuzzJournal: any journal bytes are read without a panic, and a line
// read back is one that was there.
func FuzzJournal(f *testing.F) {
	f.Add([]byte("durable 0 /tmp/a/00000000000000000000.log\ndurable 4096 /tmp/a/00000000000000000000.log\n"))
	f.Add([]byte("durable -1 x\n"))
	f.Add([]byte("durable 12 \ndurable\n\n"))
	f.Add([]byte("durable 99999999999999999999 y\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "journal")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		durable, order, err := read(path)
		if err != nil {
			return
		}
		if len(order) != len(durable) {
			t.Fatalf("%d files in order, %d lengths", len(order), len(durable))
		}
		for file, n := range durable {
			if n < 0 || file == "" || !bytes.Contains(data, []byte(" "+file)) {
				t.Fatalf("read %q at %d, not a file and length in the journal", file, n)
			}
		}
	})
}
