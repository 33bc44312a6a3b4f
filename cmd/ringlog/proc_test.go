package main

// Helpers that run the real ringlog binary as a child process: build it
// once per test binary, start `ringlog serve`, wait for its ready line,
// stop it with a signal or SIGKILL, and show its log when a test fails.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/testenv"
)

const ringlogPkg = "github.com/ringlog/ringlog/cmd/ringlog"

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error

	listenerOnce  sync.Once
	listenerFlags []string // every listener of the binary on a free port
)

// serveArgs is `serve --data-dir dataDir`, every listener the binary has
// on a free 127.0.0.1 port (so that tests never collide on a default
// port), then extra (later flags win).
func serveArgs(t testing.TB, dataDir string, extra ...string) []string {
	t.Helper()
	bin := ringlogBinary(t)
	listenerOnce.Do(func() {
		listenerFlags = []string{"--kafka-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}
		out, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
		for _, l := range []string{"native-addr"} { // listeners not every build has
			if bytes.Contains(out, []byte("-"+l+" ")) {
				listenerFlags = append(listenerFlags, "--"+l, "127.0.0.1:0")
			}
		}
	})
	args := append([]string{"serve", "--data-dir", dataDir}, listenerFlags...)
	return append(args, extra...)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// ringlogBinary builds the broker once per test binary (with -race when the
// tests run with it) and returns its path.
//
// RINGLOG_TEST_BINARY names a prebuilt binary to test instead.
func ringlogBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("RINGLOG_TEST_BINARY"); p != "" {
		return p
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "ringlog-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "ringlog")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, ringlogPkg)
		cmd := exec.Command("go", args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if binErr != nil {
		t.Fatalf("building ringlog: %v", binErr)
	}
	return binPath
}

// readyWatcher reads stdout and reports the first ready line.
type readyWatcher struct {
	mu    sync.Mutex
	line  []byte
	found bool
	ready chan string
	// onReady, if set, runs inside Write as soon as the ready line is
	// seen (before anyone is told).
	onReady func()
}

func (w *readyWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range p {
		if c != '\n' {
			w.line = append(w.line, c)
			continue
		}
		l := string(w.line)
		w.line = w.line[:0]
		if !w.found && strings.HasPrefix(l, "ringlog ready ") {
			w.found = true
			if w.onReady != nil {
				w.onReady()
			}
			w.ready <- l
		}
	}
	return len(p), nil
}

// serveProc is one `ringlog serve` child process.
type serveProc struct {
	Kafka   string // host:port from the ready line
	HTTP    string
	cmd     *exec.Cmd
	stdout  *readyWatcher
	stderr  *testenv.SyncBuffer
	done    chan struct{} // closed when the process has exited
	waitErr error         // cmd.Wait's result, valid after done
}

// startTimeout bounds how long a start may take to print its ready line.
const startTimeout = 30 * time.Second

// startServe runs `ringlog serve` on dataDir with free ports (unless
// extraFlags name them; later flags win) and waits for the ready line.
func startServe(t testing.TB, dataDir string, extraFlags ...string) *serveProc {
	t.Helper()
	b, err := tryStartServe(t, dataDir, extraFlags...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tryStartServe is startServe returning the failure instead (the process,
// if it exited, can still be inspected through the returned broker).
func tryStartServe(t testing.TB, dataDir string, extraFlags ...string) (*serveProc, error) {
	t.Helper()
	args := serveArgs(t, dataDir, append([]string{"--retention-check-interval", "1h"}, extraFlags...)...)
	b := &serveProc{
		stdout: &readyWatcher{ready: make(chan string, 1)}, stderr: &testenv.SyncBuffer{}, done: make(chan struct{})}
	b.cmd = exec.Command(ringlogBinary(t), args...)
	b.cmd.Stdout = b.stdout
	b.cmd.Stderr = b.stderr
	// RINGLOG_TEST_LOG_DIR keeps every broker's whole stderr (the failure
	// output shows only its tail): one file per process.
	if dir := os.Getenv("RINGLOG_TEST_LOG_DIR"); dir != "" {
		f, err := os.CreateTemp(dir, "serve-*.log")
		if err != nil {
			return nil, fmt.Errorf("RINGLOG_TEST_LOG_DIR: %v", err)
		}
		fmt.Fprintf(f, "ringlog %s\n", strings.Join(args, " "))
		t.Cleanup(func() { f.Close() })
		b.cmd.Stderr = io.MultiWriter(b.stderr, f)
	}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ringlog: %v", err)
	}
	go func() {
		b.waitErr = b.cmd.Wait()
		close(b.done)
	}()
	t.Cleanup(func() {
		b.kill()
		if strings.Contains(b.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("the race detector found a data race in ringlog serve (pid %d)", b.cmd.Process.Pid)
		}
		if t.Failed() {
			t.Logf("ringlog serve %s (pid %d) stderr:\n%s", strings.Join(args[1:], " "), b.cmd.Process.Pid, lastChars(b.stderr.String(), 6000))
		}
	})
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case line := <-b.stdout.ready:
		for _, f := range strings.Fields(line)[2:] {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "kafka":
				b.Kafka = v
			case "http":
				b.HTTP = v
			}
		}
		if b.Kafka == "" {
			return b, fmt.Errorf("ready line without a kafka address: %q", line)
		}
		// stderr is copied independently of stdout: wait for the log
		// line written just before the ready line, so that callers see
		// the startup log (start=..., recovery warnings) complete.
		if !testenv.Eventually(5*time.Second, func() bool { return strings.Contains(b.stderr.String(), "listening") }) {
			return b, fmt.Errorf("ready line printed but no 'listening' log line on stderr:\n%s", lastChars(b.stderr.String(), 4000))
		}
		return b, nil
	case <-b.done:
		return b, fmt.Errorf("ringlog serve exited before it was ready (%v); stderr:\n%s", b.waitErr, lastChars(b.stderr.String(), 4000))
	case <-timer.C:
		b.kill()
		return b, fmt.Errorf("ringlog serve printed no ready line within %v; stderr:\n%s", startTimeout, lastChars(b.stderr.String(), 4000))
	}
}

func lastChars(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// kill SIGKILLs the process (if it still runs) and waits for it.
func (b *serveProc) kill() {
	select {
	case <-b.done:
		return
	default:
	}
	b.cmd.Process.Kill()
	<-b.done
}

// signal sends sig and waits up to d for the process to exit; it returns
// the exit code (-1 when killed by a signal) and how long the exit took.
func (b *serveProc) signal(sig syscall.Signal, d time.Duration) (int, time.Duration, error) {
	start := time.Now()
	if err := b.cmd.Process.Signal(sig); err != nil {
		return 0, 0, err
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-b.done:
		return b.cmd.ProcessState.ExitCode(), time.Since(start), nil
	case <-timer.C:
		return 0, time.Since(start), fmt.Errorf("ringlog did not exit within %v of %v", d, sig)
	}
}

// exited reports whether the process has exited.
func (b *serveProc) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// procClient returns a franz-go client for addr, closed at cleanup.
func procClient(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond })}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// runBinary runs the binary to completion (bounded by d) and returns its
// exit code, stdout and stderr.
func runBinary(t testing.TB, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, ringlogBinary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ringlog %s: still running after %v; stderr:\n%s", strings.Join(args, " "), d, lastChars(stderr.String(), 4000))
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("ringlog %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

func deadlineCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
