package security

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzPlainMessage: any bytes as a PLAIN message never panic, fail with
// one of the two PLAIN errors, and succeed exactly when the message is
// well formed and its password verifies against the user's credential.
func FuzzPlainMessage(f *testing.F) {
	s := newStore(f)
	addUser(f, s, "alice", "secret", ScramSHA256)
	addUser(f, s, "bob", "hunter2", ScramSHA512)
	for _, seed := range []string{
		"\x00alice\x00secret", "alice\x00alice\x00secret", "\x00bob\x00hunter2", "\x00alice\x00wrong", "\x00nobody\x00secret",
		"\x00\x00", "", "a\x00b", "\x00alice\x00secret\x00", "bob\x00alice\x00secret", "\x00alice\x00sec\xffret",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		ex := NewPlain(s)
		_, done, err := ex.Step(msg)
		if !done {
			t.Fatal("PLAIN not done after its one step")
		}
		user, pass, perr := parsePlain(msg)
		if perr != nil {
			if !errors.Is(err, ErrMalformedSASL) {
				t.Fatalf("%q: %v, want ErrMalformedSASL", msg, err)
			}
			return
		}
		c, ok := s.Credential(user, ScramSHA512)
		if !ok {
			c, ok = s.Credential(user, ScramSHA256)
		}
		verifies := ok && c.VerifyPassword(pass)
		switch {
		case verifies && (err != nil || ex.Principal() != "User:"+user):
			t.Fatalf("%q: a right password refused: %v", msg, err)
		case !verifies && !errors.Is(err, ErrAuthenticationFailed):
			t.Fatalf("%q: accepted as %q (%v) without the password", msg, ex.Principal(), err)
		}
	})
}

// FuzzScramExchange feeds arbitrary client-first and client-final
// messages to a server exchange: it never panics, a failure ends it, and
// it never succeeds, since no message can carry a proof made without the
// password. "NONCE" in the final message stands for the server's
// combined nonce, so the fuzzer gets past the nonce check to the proof.
func FuzzScramExchange(f *testing.F) {
	s := newStore(f)
	addUser(f, s, "bob", "pw", bothScram...)
	addUser(f, s, "a,b", "pw", ScramSHA512)
	for _, seed := range []struct {
		first, final string
		sha512       bool
	}{
		{"n,,n=bob,r=fyko+d2lbbFgONRv9qkxdawL", "c=biws,r=NONCE,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=", false},
		{"n,,n=bob,r=fyko+d2lbbFgONRv9qkxdawL", "c=biws,r=NONCE,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", false},
		{"n,,n=bob,r=rOprNGfwEbeRWgbNEkqO", "c=biws,r=rOprNGfwEbeRWgbNEkqONONCE,p=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", false},
		{"n,a=bob,n=bob,r=abc", "c=bixhPWJvYiw=,r=NONCE,p=AAAA", true},
		{"y,,n=a=2Cb,r=x", "c=eSws,r=NONCE,ext=1,p=", true},
		{"n,,n=nobody,r=x", "c=biws,r=NONCE,p=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", true},
		{"p=tls-unique,,n=bob,r=x", "", false},
		{"n,,n=bob,r=x,tokenauth=true", "c=biws,r=NONCE,p=AAAA", false},
		{",,n=bob,r=x", "c=biws,r=NONCE", false},
	} {
		f.Add([]byte(seed.first), []byte(seed.final), seed.sha512)
	}
	f.Fuzz(func(t *testing.T, first, final []byte, sha512 bool) {
		m := ScramSHA256
		if sha512 {
			m = ScramSHA512
		}
		ex := NewScram(s, m)
		out, done, err := ex.Step(first)
		if err != nil {
			if !done || !errors.Is(err, ErrMalformedSASL) {
				t.Fatalf("client-first %q: %v (done %v)", first, err, done)
			}
			if _, _, err := ex.Step(final); !errors.Is(err, ErrExchangeOver) {
				t.Fatalf("a step after a failure: %v", err)
			}
			return
		}
		if done || !bytes.HasPrefix(out, []byte("r=")) {
			t.Fatalf("client-first %q: server-first %q, done %v", first, out, done)
		}
		nonce := strings.TrimPrefix(strings.Split(string(out), ",")[0], "r=")
		final = bytes.ReplaceAll(final, []byte("NONCE"), []byte(nonce))
		_, done, err = ex.Step(final)
		if err == nil || !done || ex.Principal() != "" {
			t.Fatalf("client-final %q authenticated (done %v, principal %q) without the password", final, done, ex.Principal())
		}
		if !errors.Is(err, ErrMalformedSASL) && !errors.Is(err, ErrAuthenticationFailed) {
			t.Fatalf("client-final %q: %v", final, err)
		}
	})
}

// FuzzStoreFile: OpenStore on any file contents never panics, and a
// store it accepts saves and reopens to the same state.
func FuzzStoreFile(f *testing.F) {
	seed := newStore(f)
	addUser(f, seed, "carol", "pw", bothScram...)
	addUser(f, seed, "dave", "pw", ScramSHA256)
	mustCreate(f, seed, binding(topic, "t", pre, "User:carol", opRead, allow), binding(cluster, "kafka-cluster", lit, "User:*", opAll, deny))
	b, err := os.ReadFile(seed.path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"version":1,"users":{},"acls":[]}`))
	f.Add([]byte(`{"version":1,"users":{"x":{}},"acls":null}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"acls":[{"resource_type":"topic","resource_name":"t","pattern_type":"literal","principal":"User:a","host":"*","operation":"read","permission":"allow"}]}`))
	f.Add([]byte(`{"version":1,"acls":[{"resource_type":"TOPIC"}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"version":1}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "security.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := OpenStore(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("an error that does not name the file: %v", err)
			}
			return
		}
		users := *s.users.Load()
		s.mu.Lock()
		err = s.save(users, s.ACLs())
		s.mu.Unlock()
		if err != nil {
			t.Fatalf("saving what was opened: %v", err)
		}
		re, err := OpenStore(path)
		if err != nil {
			t.Fatalf("reopening what was saved: %v", err)
		}
		if !reflect.DeepEqual(*re.users.Load(), users) || !reflect.DeepEqual(re.ACLs(), s.ACLs()) {
			t.Fatalf("state changed across a save:\n%+v %+v\n%+v %+v", users, s.ACLs(), *re.users.Load(), re.ACLs())
		}
	})
}
