package netio

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/wal"
)

// TestCopyRange checks the portable sendfile stand-in on a non-blocking
// socket pair: it sends the range in chunks and advances Pos by what the
// socket took, reports EAGAIN with nothing taken when the socket is full,
// and returns 0 and no error past the end of the file.
func TestCopyRange(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	path := filepath.Join(t.TempDir(), "seg.log")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	// Fill the socket until it refuses, reading nothing yet.
	fr := wal.FileRange{File: f, Pos: 100, Len: int64(len(data)) - 100}
	buf := make([]byte, 4096)
	sent := 0
	for {
		before := fr.Pos
		n, err := copyRange(fds[0], &fr, buf)
		if err == unix.EAGAIN {
			if n != 0 || fr.Pos != before {
				t.Fatalf("EAGAIN with %d bytes sent, Pos %d -> %d", n, before, fr.Pos)
			}
			break
		}
		if err != nil || n <= 0 || n > len(buf) {
			t.Fatalf("copyRange = %d, %v", n, err)
		}
		if fr.Pos != before+int64(n) {
			t.Fatalf("Pos %d after sending %d bytes from %d", fr.Pos, n, before)
		}
		fr.Len -= int64(n)
		sent += n
		if fr.Len == 0 {
			t.Fatal("the socket took the whole megabyte: the test needs it to fill")
		}
	}
	got := make([]byte, 0, sent)
	for len(got) < sent {
		n, err := unix.Read(fds[1], got[len(got):sent])
		if err != nil || n <= 0 {
			t.Fatalf("reading the peer after %d bytes: %d, %v", len(got), n, err)
		}
		got = got[:len(got)+n]
	}
	if !bytes.Equal(got, data[100:100+sent]) {
		t.Fatalf("the %d bytes received differ from the file range", sent)
	}

	// Past the end of the file: nothing to send, no error.
	end := wal.FileRange{File: f, Pos: int64(len(data)), Len: 10}
	if n, err := copyRange(fds[0], &end, buf); n != 0 || err != nil {
		t.Fatalf("past the end: copyRange = %d, %v; want 0, nil", n, err)
	}
}
