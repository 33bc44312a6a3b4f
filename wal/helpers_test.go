package wal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// forEachBackend runs f once per ring backend available here.
func forEachBackend(t *testing.T, f func(t *testing.T, b ring.Backend)) {
	t.Helper()
	for _, k := range []ring.Kind{ring.KindHybrid, ring.KindIOUring, ring.KindPortable} {
		t.Run(string(k), func(t *testing.T) {
			b := newBackend(t, k)
			f(t, b)
		})
	}
}

func newBackend(t testing.TB, k ring.Kind) ring.Backend {
	t.Helper()
	var (
		b   ring.Backend
		err error
	)
	switch k {
	case ring.KindPortable:
		b = ring.NewPortable()
	case ring.KindHybrid:
		var fallback string
		b, fallback = ring.NewHybrid(ring.Options{})
		if fallback != "" && testenv.Required(testenv.IOURing) {
			b.Close()
			t.Fatalf("hybrid backend without io_uring (required: %s is set): %s", testenv.IOURing, fallback)
		}
	default:
		b, err = ring.NewURing(ring.Options{})
		if err != nil {
			testenv.Missing(t, testenv.IOURing, "io_uring unavailable here: %v", err)
		}
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(discard{}, nil))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func openLog(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// makeBatch builds a valid batch of n records of valueSize bytes whose
// values say which batch (tag) and record they are.
func makeBatch(t testing.TB, tag int, n, valueSize int, ts int64) []byte {
	t.Helper()
	b := batch.NewBuilder()
	for i := 0; i < n; i++ {
		v := []byte(fmt.Sprintf("batch-%d-record-%d-", tag, i))
		if len(v) < valueSize {
			v = append(v, bytes.Repeat([]byte{'x'}, valueSize-len(v))...)
		}
		b.Add(ts+int64(i), []byte(fmt.Sprintf("k%d", i%7)), v, nil)
	}
	out, err := b.Build(nil, batch.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func appendOne(t testing.TB, l *Log, be ring.Backend, data []byte, sync bool) Appended {
	t.Helper()
	res, err := l.Append(be, [][]byte{data}, sync)
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// readAll reads every batch of the log and checks each one is valid and
// the offsets dense (gaps allowed when gapsOK).
func readAll(t testing.TB, l *Log, gapsOK bool) []batch.Header {
	t.Helper()
	buf, err := l.ReadBytes(nil, l.StartOffset(), 1<<30, l.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	var out []batch.Header
	next := l.StartOffset()
	for len(buf) > 0 {
		n := int(batch.BatchLength(buf)) + batch.LogOverhead
		h, err := batch.CheckStored(buf[:n])
		if err != nil {
			t.Fatalf("stored batch at offset %d invalid: %v", next, err)
		}
		if h.BaseOffset != next && !(gapsOK && h.BaseOffset > next) {
			t.Fatalf("batch base %d, want %d", h.BaseOffset, next)
		}
		next = h.NextOffset()
		out = append(out, h)
		buf = buf[n:]
	}
	if next != l.EndOffset() && !gapsOK {
		t.Fatalf("read up to %d, end offset %d", next, l.EndOffset())
	}
	return out
}

// fakeClock is a settable clock.
type fakeClock struct{ ms atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ms.Store(1_700_000_000_000)
	return c
}
func (c *fakeClock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// faultyBackend fails every op touching fd failFd.
type faultyBackend struct {
	ring.Backend
	failFd atomic.Int64
	runs   atomic.Int64
	syncs  atomic.Int64
}

var errInjected = errors.New("injected EIO")

func (f *faultyBackend) Run(ops []ring.Op) error {
	f.runs.Add(1)
	if err := f.Backend.Run(ops); err != nil {
		return err
	}
	for i := range ops {
		if ops[i].Kind == ring.OpFdatasync {
			f.syncs.Add(1)
		}
		if int64(ops[i].Fd) == f.failFd.Load() {
			ops[i].Err = errInjected
		}
	}
	return nil
}
