package testenv

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// KcatPath is the path of librdkafka's command-line client, kcat: an
// independent Kafka client implementation. Without it the test is skipped,
// or fails where RINGLOG_REQUIRE_KCAT is set (CI installs it).
func KcatPath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("kcat")
	if err != nil {
		Missing(t, Kcat, "kcat not installed (apt-get install kcat)")
	}
	return p
}

// RunKcat runs kcat with stdin and returns its output; a failure fails
// the test.
func RunKcat(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	out, err := KcatOutput(t, stdin, args...)
	if err != nil {
		t.Fatalf("kcat %v: %v\n%s", args, err, out)
	}
	return out
}

// KcatOutput runs kcat and returns its combined output and exit error; a
// kcat still running after 20 s fails the test (a hang).
func KcatOutput(t testing.TB, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(KcatPath(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("kcat %v hung", args)
	}
	return string(out), err
}
