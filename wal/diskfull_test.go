package wal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/ring"
)

// TestIndexOnFullDisk: a batch that still fits in the log's last
// allocated page on a full file system commits an index entry into a page
// of the (sparse, mapped) index file that has no disk block yet. Written
// through the mapping, that page fault has no space to allocate and the
// kernel kills the process with SIGBUS. The index reserves its blocks
// (fallocate) before writing through the mapping, and skips the entry
// when it cannot (the index is sparse): the append succeeds, the next
// one that needs a new log page fails with ENOSPC, and the process lives.
func TestIndexOnFullDisk(t *testing.T) {
	dir := t.TempDir()
	testenv.MountTmpfs(t, dir, 4<<20, false)
	logDir := filepath.Join(dir, "p-0")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, logDir, Options{IndexIntervalBytes: 1, MaxIndexBytes: 64 << 10})
	defer l.Close()
	be := ring.NewPortable()
	defer be.Close()
	// A batch whose size is 1 mod 8: after 512 of them (one index entry
	// each, the first page of the offset index full) the log ends 512
	// bytes into a page, so the 513th batch needs no new log page but
	// its index entry needs a new index page.
	var data []byte
	for v := 10; ; v++ {
		data = makeBatch(t, 0, 1, v, 1000)
		if len(data)%8 == 1 {
			break
		}
	}
	for range 512 {
		appendOne(t, l, be, data, false)
	}
	// Fill the file system to the last block.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := filler.Write(chunk); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	if _, err := filler.Write(chunk[:1]); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("the file system is not full: %v", err)
	}
	// Fits in the log's tail page; its index entry would not fit on disk.
	appendOne(t, l, be, data, false)
	// Appends go on until the log itself needs a block.
	var appendErr error
	for i := 0; i < 100 && appendErr == nil; i++ {
		_, appendErr = l.Append(be, [][]byte{data}, false)
	}
	if !errors.Is(appendErr, unix.ENOSPC) {
		t.Fatalf("append on a full disk: %v, want ENOSPC", appendErr)
	}
	// Everything committed reads back (the index is sparse: a skipped
	// entry costs a longer scan, not a wrong answer).
	hs := readAll(t, l, false)
	if int64(len(hs)) != l.EndOffset() || len(hs) < 513 {
		t.Fatalf("read %d batches, log ends at %d", len(hs), l.EndOffset())
	}
}
