package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/internal/cli"
	"github.com/ringlog/ringlog/security"
)

func TestUserCommands(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	runOK := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != cli.ExitOK {
			t.Fatalf("ringlog %v: exit %d\n%s", args, code, errb.String())
		}
		return out.String()
	}
	runOK("user", "add", "--data-dir", dir, "--name", "admin", "--password-file", pw)
	runOK("user", "add", "--data-dir", dir, "--name", "alice", "--password-file", pw, "--mechanism", "SCRAM-SHA-512", "--iterations", "8192")
	list := runOK("user", "list", "--data-dir", dir)
	for _, want := range []string{"admin  SCRAM-SHA-256  4096", "admin  SCRAM-SHA-512  4096", "alice  SCRAM-SHA-512  8192"} {
		if !strings.Contains(list, want) {
			t.Fatalf("user list lacks %q:\n%s", want, list)
		}
	}
	st, err := security.OpenStore(filepath.Join(dir, "security.json"))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := st.Credential("alice", security.ScramSHA512); !ok || !c.VerifyPassword("s3cret") {
		t.Fatal("alice's credential does not verify her password")
	}
	runOK("user", "delete", "--data-dir", dir, "--name", "alice")
	var out, errb bytes.Buffer
	if code := run([]string{"user", "delete", "--data-dir", dir, "--name", "alice"}, &out, &errb); code != cli.ExitError {
		t.Fatalf("deleting a missing user: exit %d", code)
	}
	if code := run([]string{"user", "add", "--data-dir", dir, "--name", "x", "--password-file", pw, "--iterations", "10"}, &out, &errb); code != cli.ExitUsage {
		t.Fatalf("10 iterations: exit %d", code)
	}
	// A running broker holds the data directory: refused, with the fix.
	b := brokertest.Start(t)
	errb.Reset()
	if code := run([]string{"user", "list", "--data-dir", b.Dir}, &out, &errb); code != cli.ExitError || !strings.Contains(errb.String(), "AlterUserScramCredentials") {
		t.Fatalf("user list on a served directory: exit %d\n%s", code, errb.String())
	}
}
