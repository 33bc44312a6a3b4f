package security

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzPlainMessage: any bytes as a PLAIN message never panic, and are
// accepted only with the user's password.
func FuzzPlainMessage(f *testing.F) {
	s := newStore(f)
	addUser(f, s, "alice", "secret", ScramSHA256)
	for _, seed := range []string{"\x00alice\x00secret", "alice\x00alice\x00secret", "\x00alice\x00wrong", "\x00\x00", "", "a\x00b", "\x00alice\x00secret\x00"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		ex := NewPlain(s)
		_, done, err := ex.Step(msg)
		if !done {
			t.Fatal("PLAIN not done after a step")
		}
		if err == nil {
			user, pass, perr := ParsePlain(msg)
			if perr != nil || user != "alice" || pass != "secret" || ex.Principal() != "User:alice" {
				t.Fatalf("accepted %q as %q", msg, ex.Principal())
			}
		}
	})
}

// FuzzScramExchange: arbitrary client-first and client-final messages
// never panic and never authenticate (no proof can be guessed).
func FuzzScramExchange(f *testing.F) {
	s := newStore(f)
	addUser(f, s, "bob", "pw", ScramSHA256, ScramSHA512)
	f.Add([]byte("n,,n=bob,r=fyko+d2lbbFgONRv9qkxdawL"), []byte("c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="), true)
	f.Add([]byte("n,a=bob,n=bob,r=abc"), []byte("c=bixhPWJvYiw=,r=abc,p=AAAA"), false)
	f.Add([]byte("y,,n=b=2Cob,r=x"), []byte("c=eSws,r=x,p="), true)
	f.Add([]byte("p=tls-unique,,n=bob,r=x"), []byte(""), false)
	f.Fuzz(func(t *testing.T, first, final []byte, sha512 bool) {
		m := ScramSHA256
		if sha512 {
			m = ScramSHA512
		}
		ex := NewScram(s, m)
		out, done, err := ex.Step(first)
		if err != nil || done {
			if err == nil {
				t.Fatal("done without an error after client-first")
			}
			return
		}
		if !bytes.HasPrefix(out, []byte("r=")) {
			t.Fatalf("server-first %q", out)
		}
		_, done, err = ex.Step(final)
		if err == nil || !done {
			t.Fatalf("client-final %q authenticated (done %v) without the password", final, done)
		}
	})
}

// FuzzStoreFile: OpenStore on any bytes never panics; a file it accepts
// saves and reopens to the same state.
func FuzzStoreFile(f *testing.F) {
	seed := newStore(f)
	addUser(f, seed, "carol", "pw", ScramSHA512)
	seed.CreateACLs([]ACL{{ResourceType: 2, ResourceName: "t", PatternType: 3, Principal: "User:carol", Host: "*", Operation: 3, Permission: 3}})
	b, err := os.ReadFile(seed.path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"version":1,"users":{},"acls":[]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"acls":[{"resource_type":"TOPIC"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "security.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := OpenStore(path)
		if err != nil {
			return
		}
		users, acls := s.Users(), s.ACLs()
		// Save through a change that is then undone, and reopen.
		if errs := s.CreateACLs([]ACL{{ResourceType: 3, ResourceName: "fuzz", PatternType: 3, Principal: "User:f", Host: "*", Operation: 3, Permission: 3}}); errs[0] != nil {
			t.Fatalf("save: %v", errs[0])
		}
		name := "fuzz"
		if _, err := s.DeleteACLs([]ACLFilter{{ResourceType: 3, ResourceName: &name, PatternType: 3, Operation: 3, Permission: 3}}); err != nil {
			t.Fatal(err)
		}
		re, err := OpenStore(path)
		if err != nil {
			t.Fatalf("reopening what was saved: %v", err)
		}
		a, _ := json.Marshal([]any{users, acls})
		b, _ := json.Marshal([]any{re.Users(), re.ACLs()})
		if !bytes.Equal(a, b) {
			t.Fatalf("state changed across a save:\n%s\n%s", a, b)
		}
	})
}
