package reliability

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// slowbrokerBinary builds ./slowbroker once, without the race detector
// (its memory is what the overload test measures).
func slowbrokerBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "slowbroker-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "slowbroker")
		out, err := exec.Command("go", "build", "-o", binPath, "./slowbroker").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ./slowbroker: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// brokerProc is a running slowbroker.
type brokerProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *strings.Builder
	mu     sync.Mutex
	addr   string
	done   chan struct{}
	killed bool
}

// startBroker runs slowbroker on a fresh data directory with args and
// waits for it to listen; it is stopped at the test's cleanup.
func startBroker(t testing.TB, args ...string) *brokerProc {
	t.Helper()
	return startBrokerIn(t, t.TempDir(), args...)
}

// startBrokerIn is startBroker on the data directory dir.
func startBrokerIn(t testing.TB, dir string, args ...string) *brokerProc {
	t.Helper()
	b, err := tryStartBrokerIn(t, dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tryStartBrokerIn is startBrokerIn, returning the error (with the
// broker's log) of a broker that did not become ready.
func tryStartBrokerIn(t testing.TB, dir string, args ...string) (*brokerProc, error) {
	t.Helper()
	args = append([]string{"--data-dir", dir}, args...)
	cmd := exec.Command(slowbrokerBinary(t), args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	b := &brokerProc{t: t, cmd: cmd, stdin: stdin, stderr: &strings.Builder{}, done: make(chan struct{})}
	cmd.Stderr = lockedWriter{&b.mu, b.stderr}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- a
			}
		}
	}()
	go func() { cmd.Wait(); close(b.done) }()
	select {
	case b.addr = <-ready:
	case <-b.done:
		b.killed = true // nothing to stop
		return nil, fmt.Errorf("slowbroker exited: %s", b.log())
	case <-time.After(60 * time.Second):
		b.kill()
		return nil, fmt.Errorf("slowbroker not ready after 60 s: %s", b.log())
	}
	t.Cleanup(b.stop)
	return b, nil
}

func (b *brokerProc) log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stderr.String()
}

// setRate sets the disk's bandwidth (bytes/s, 0: unlimited).
func (b *brokerProc) setRate(bytesPerSec int64) {
	fmt.Fprintf(b.stdin, "rate %d\n", bytesPerSec)
}

// kill sends SIGKILL and waits for the process to end.
func (b *brokerProc) kill() {
	b.killed = true
	b.cmd.Process.Kill()
	<-b.done
}

// stop shuts the broker down cleanly (closing its stdin), killing it if
// that takes more than a minute.
func (b *brokerProc) stop() {
	if b.killed {
		return
	}
	b.stdin.Close()
	select {
	case <-b.done:
	case <-time.After(time.Minute):
		b.cmd.Process.Kill()
		<-b.done
		b.t.Errorf("slowbroker did not shut down within a minute")
	}
	if b.cmd.ProcessState != nil && !b.cmd.ProcessState.Success() && !b.t.Failed() {
		b.t.Errorf("slowbroker exited with %v: %s", b.cmd.ProcessState, b.log())
	}
}

// rss is the broker's resident set size in bytes (VmRSS), and its
// high-water mark (VmHWM).
func (b *brokerProc) rss() (rss, hwm int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.cmd.Process.Pid))
	if err != nil {
		b.t.Fatalf("read broker status: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		n, _ := strconv.ParseInt(f[0], 10, 64)
		if k == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
	}
	return rss, hwm
}

// fds is how many descriptors the broker holds open.
func (b *brokerProc) fds() int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", b.cmd.Process.Pid))
	if err != nil {
		b.t.Fatalf("list broker descriptors: %v", err)
	}
	return len(ents)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// envInt is the integer in environment variable name, or def.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// result prints the scenario's row for run.sh's table.
func result(t testing.TB, scenario, figure string) {
	t.Helper()
	status := "pass"
	switch {
	case t.Failed():
		status = "FAIL"
	case t.Skipped():
		status = "skipped"
	}
	fmt.Printf("RESULT %s | %s | %s\n", scenario, figure, status)
}
