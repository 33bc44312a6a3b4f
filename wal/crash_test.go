package wal

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

const (
	envCrashDir  = "RINGLOG_CRASH_DIR"
	envCrashSeed = "RINGLOG_CRASH_SEED"
	crashLogs    = 3
)

func crashOptions() Options {
	return Options{SegmentBytes: 64 << 10, IndexIntervalBytes: 512}
}

// TestCrashChild is the writer the crash test kills; it only runs when the
// parent starts this test binary with RINGLOG_CRASH_DIR set.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(envCrashDir)
	if dir == "" {
		t.Skip("run by TestCrashRecovery")
	}
	seed, _ := strconv.ParseUint(os.Getenv(envCrashSeed), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 1))
	be, _, err := ring.New(ring.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var logs []*Log
	for i := 0; i < crashLogs; i++ {
		o := crashOptions()
		o.Logger = testLogger(t)
		l, err := Open(filepath.Join(dir, fmt.Sprintf("p%d", i)), o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "open:", err)
			os.Exit(3)
		}
		logs = append(logs, l)
	}
	out := bufio.NewWriter(os.Stdout)
	var b Batch
	type ack struct {
		log int
		tk  Ticket
		i   int
		crc uint32
	}
	var acks []ack
	for tag := 0; ; tag++ {
		b.Reset()
		acks = acks[:0]
		for n := 1 + rng.IntN(6); n > 0; n-- {
			li := rng.IntN(crashLogs)
			var bs [][]byte
			for k := 1 + rng.IntN(3); k > 0; k-- {
				bs = append(bs, makeBatch(t, tag, 1+rng.IntN(20), rng.IntN(400), time.Now().UnixMilli()))
			}
			tk, err := b.Append(logs[li], bs, true)
			if err != nil {
				fmt.Fprintln(os.Stderr, "append:", err)
				os.Exit(4)
			}
			for i, data := range bs {
				h, _ := batch.ParseHeader(data)
				acks = append(acks, ack{li, tk, i, h.CRC})
			}
		}
		if err := b.Submit(be); err != nil {
			fmt.Fprintln(os.Stderr, "submit:", err)
			os.Exit(5)
		}
		for _, a := range acks {
			if a.tk.Err() != nil {
				fmt.Fprintln(os.Stderr, "stage:", a.tk.Err())
				os.Exit(6)
			}
			r := a.tk.Results()[a.i]
			fmt.Fprintf(out, "ack %d %d %d %d\n", a.log, r.BaseOffset, r.LastOffset, a.crc)
		}
		// Acknowledge only after the sync completed: a line on stdout is
		// a promise that the batch survives.
		out.Flush()
	}
}

type crashAck struct {
	base, last int64
	crc        uint32
}

// TestCrashRecovery kills a writer with SIGKILL at random moments, many
// times, and checks after each crash that every batch whose append was
// acknowledged under the always-sync policy is present and intact, offsets
// stay dense, no corrupt batch is served, and the log keeps accepting
// appends.
func TestCrashRecovery(t *testing.T) {
	cycles := 60
	if s := os.Getenv("RINGLOG_CRASH_CYCLES"); s != "" {
		cycles, _ = strconv.Atoi(s)
	}
	dir := t.TempDir()
	acked := make([]map[int64]crashAck, crashLogs)
	for i := range acked {
		acked[i] = map[int64]crashAck{}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	be := newBackend(t, ring.KindPortable)
	for cycle := 0; cycle < cycles; cycle++ {
		env := []string{envCrashDir + "=" + dir, fmt.Sprintf("%s=%d", envCrashSeed, rng.Uint64())}
		if cycle%2 == 1 {
			env = append(env, ring.EnvBackend+"=pwritev")
		}
		lines := killChildAfter(t, "TestCrashChild", env, time.Duration(30+rng.IntN(120))*time.Millisecond)
		n := 0
		for _, line := range lines {
			var li int
			var a crashAck
			if _, err := fmt.Sscanf(line, "ack %d %d %d %d", &li, &a.base, &a.last, &a.crc); err != nil {
				continue // a line cut by the kill was never a promise
			}
			acked[li][a.base] = a
			n++
		}
		verifyCrashedLogs(t, dir, acked, be, cycle)
	}
	total := 0
	for _, m := range acked {
		total += len(m)
	}
	if total == 0 {
		t.Fatal("no append was ever acknowledged")
	}
	t.Logf("%d crash cycles, %d acknowledged batches verified", cycles, total)
}

func verifyCrashedLogs(t *testing.T, dir string, acked []map[int64]crashAck, be ring.Backend, cycle int) {
	t.Helper()
	for li := 0; li < crashLogs; li++ {
		o := crashOptions()
		o.Logger = testLogger(t)
		l, err := Open(filepath.Join(dir, fmt.Sprintf("p%d", li)), o)
		if err != nil {
			t.Fatalf("cycle %d: reopen p%d: %v", cycle, li, err)
		}
		hs := readAll(t, l, false) // dense offsets, every batch CRC-valid
		byBase := make(map[int64]batch.Header, len(hs))
		for _, h := range hs {
			byBase[h.BaseOffset] = h
		}
		for base, a := range acked[li] {
			h, ok := byBase[base]
			if !ok {
				t.Fatalf("cycle %d: p%d lost acknowledged batch at %d (end %d)", cycle, li, base, l.EndOffset())
			}
			if h.CRC != a.crc || h.LastOffset() != a.last {
				t.Fatalf("cycle %d: p%d batch at %d changed: crc %08x last %d, acked crc %08x last %d", cycle, li, base, h.CRC, h.LastOffset(), a.crc, a.last)
			}
		}
		// The log keeps accepting appends, at the next dense offset.
		end := l.EndOffset()
		res, err := l.Append(be, [][]byte{makeBatch(t, -1, 1, 5, 1)}, true)
		if err != nil || res[0].BaseOffset != end {
			t.Fatalf("cycle %d: p%d append after recovery: %+v %v", cycle, li, res, err)
		}
		// Close without the clean flag: the next child opens uncleanly.
		l.Close()
	}
}

// killChildAfter runs this test binary's test function test as a child
// process (env added to this process's environment), kills it with
// SIGKILL after d, and returns the lines it printed on stdout until then.
// A child that exits on its own before the kill fails t.
func killChildAfter(t *testing.T, test string, env []string, d time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
	}()
	time.Sleep(d)
	cmd.Process.Signal(syscall.SIGKILL)
	<-read
	werr := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("%s: child exited on its own (%v): %s", test, werr, stderr.String())
	}
	return lines
}
