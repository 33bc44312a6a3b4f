package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/internal/cli"
	"github.com/ringlog/ringlog/internal/testcerts"
	"github.com/ringlog/ringlog/netio"
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
	// What the offline tool wrote, into a directory it created, is
	// owner-only: the directory, the lock file, the credentials.
	fresh := filepath.Join(t.TempDir(), "fresh")
	runOK("user", "add", "--data-dir", fresh, "--name", "admin", "--password-file", pw)
	for _, p := range []string{fresh, filepath.Join(fresh, ".ringlog.lock"), filepath.Join(fresh, "security.json")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("ringlog user add wrote %s with mode %04o: group or others may use it", p, fi.Mode().Perm())
		}
	}
	// A running broker holds the data directory: refused, with the fix.
	b := brokertest.Start(t)
	errb.Reset()
	if code := run([]string{"user", "list", "--data-dir", b.Dir}, &out, &errb); code != cli.ExitError || !strings.Contains(errb.String(), "--brokers") {
		t.Fatalf("user list on a served directory: exit %d\n%s", code, errb.String())
	}
	// RINGLOG_BROKERS stands for --brokers here too, as for every command
	// that takes it: list asks the broker it names (here none listens),
	// and does not open ./data (run from an empty directory, so a ./data
	// would show); --data-dir still wins over the environment.
	t.Chdir(t.TempDir())
	t.Setenv(cli.BrokersEnv, "127.0.0.1:1")
	errb.Reset()
	if code := run([]string{"user", "list", "--timeout", "2s"}, &out, &errb); code != cli.ExitError || !strings.Contains(errb.String(), "127.0.0.1:1") {
		t.Errorf("user list with %s=127.0.0.1:1: exit %d, want 1 naming that broker\n%s", cli.BrokersEnv, code, errb.String())
	}
	if _, err := os.Stat("data"); err == nil {
		t.Errorf("with %s set, user list opened ./data", cli.BrokersEnv)
	}
	if list := runOK("user", "list", "--data-dir", dir); !strings.Contains(list, "admin") {
		t.Errorf("user list --data-dir with %s set lacks admin:\n%s", cli.BrokersEnv, list)
	}
}

// TestToolsOverSASLSSL: the admin tools reach a SASL_SSL listener with
// --security-protocol, SCRAM credentials and the CA; a wrong password is
// a clear failure, not a hang.
func TestToolsOverSASLSSL(t *testing.T) {
	certs := testcerts.New(t)
	b := brokertest.Start(t, func(c *broker.Config) {
		c.Listeners = []broker.Listener{{Protocol: netio.SASLSSL, Addr: "127.0.0.1:0"}}
		c.Security.TLS = security.TLSFiles{CertFile: certs.ServerCert, KeyFile: certs.ServerKey}
		c.Security.Authorizer = true
		c.Security.SuperUsers = []string{"User:admin"}
	})
	cred, err := security.NewScramCredential(security.ScramSHA512, "pw", security.MinIterations, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.B.Security().UpsertCredential("admin", cred); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("pw\n"), 0o600)
	os.WriteFile(bad, []byte("nope\n"), 0o600)
	sec := func(pwFile string) []string {
		return []string{"--brokers", b.B.Listeners()[0].Addr().String(), "--security-protocol", "SASL_SSL",
			"--sasl-username", "admin", "--sasl-password-file", pwFile, "--tls-ca", certs.CAFile, "--tls-server-name", "localhost"}
	}
	var out, errb bytes.Buffer
	if code := run(append([]string{"topic", "create", "secured"}, sec(good)...), &out, &errb); code != cli.ExitOK {
		t.Fatalf("topic create over SASL_SSL: exit %d\n%s", code, errb.String())
	}
	out.Reset()
	if code := run(append([]string{"topic", "list"}, sec(good)...), &out, &errb); code != cli.ExitOK || !strings.Contains(out.String(), "secured") {
		t.Fatalf("topic list over SASL_SSL: exit %d\n%s%s", code, out.String(), errb.String())
	}
	errb.Reset()
	if code := run(append([]string{"topic", "list", "--timeout", "10s"}, sec(bad)...), &out, &errb); code == cli.ExitOK || !strings.Contains(errb.String(), "SASL_AUTHENTICATION_FAILED") {
		t.Fatalf("topic list with a wrong password: exit %d\n%s", code, errb.String())
	}
	if code := run([]string{"topic", "list", "--security-protocol", "SASL_SSL"}, &out, &errb); code != cli.ExitUsage {
		t.Fatalf("SASL_SSL without credentials: exit %d", code)
	}
}
