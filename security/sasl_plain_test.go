package security

import (
	"errors"
	"testing"
)

// plainStep runs a one-message PLAIN exchange.
func plainStep(t *testing.T, s *Store, msg string) (string, error) {
	t.Helper()
	ex := NewPlain(s)
	out, done, err := ex.Step([]byte(msg))
	if !done || len(out) != 0 {
		t.Fatalf("%q: PLAIN answered %q, done %v", msg, out, done)
	}
	if err != nil && ex.Principal() != "" {
		t.Fatalf("%q: failed with principal %q", msg, ex.Principal())
	}
	if _, _, again := ex.Step([]byte(msg)); !errors.Is(again, ErrExchangeOver) {
		t.Fatalf("%q: a second step: %v", msg, again)
	}
	return ex.Principal(), err
}

func TestPlain(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "carol", "s3cret", ScramSHA256)
	addUser(t, s, "dan", "ｐａｓｓ", ScramSHA512)
	for msg, want := range map[string]string{
		"\x00carol\x00s3cret":      "User:carol",
		"carol\x00carol\x00s3cret": "User:carol",
		"\x00dan\x00ｐａｓｓ":          "User:dan",
	} {
		if p, err := plainStep(t, s, msg); err != nil || p != want {
			t.Errorf("%q: %q, %v; want %s", msg, p, err, want)
		}
	}
	var failures []string
	for _, msg := range []string{"\x00carol\x00wrong", "\x00carol\x00s3cret ", "\x00Carol\x00s3cret", "\x00nobody\x00s3cret", "\x00dan\x00pass"} {
		_, err := plainStep(t, s, msg)
		if !errors.Is(err, ErrAuthenticationFailed) {
			t.Errorf("%q: %v, want ErrAuthenticationFailed", msg, err)
			continue
		}
		failures = append(failures, err.Error())
	}
	for _, f := range failures {
		if f != failures[0] {
			t.Errorf("failures read differently (%q, %q): they tell a wrong password from an unknown user", failures[0], f)
		}
	}
	for _, msg := range []string{
		"",                            // no NUL
		"carol\x00s3cret",             // one NUL
		"\x00carol\x00s3\x00cret",     // three NULs
		"\x00carol\x00s3cret\x00",     // a trailing NUL
		"\x00\x00s3cret",              // empty user
		"\x00carol\x00",               // empty password
		"eve\x00carol\x00s3cret",      // authzid of another user
		"Carol\x00carol\x00s3cret",    // authzid differs in case
		"\x00\x00\x00",                // nothing at all
		"carol\x00\x00carol\x00pw",    // four fields
		"\x00carol\x00s3cret\x00\x00", // extra NULs
	} {
		if _, err := plainStep(t, s, msg); !errors.Is(err, ErrMalformedSASL) {
			t.Errorf("%q: %v, want ErrMalformedSASL", msg, err)
		}
	}
}

// TestPlainPrefersSHA512: with both credentials the SCRAM-SHA-512 one
// decides, even when the SCRAM-SHA-256 one holds another password.
func TestPlainPrefersSHA512(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "erin", "old", ScramSHA256)
	if p, err := plainStep(t, s, "\x00erin\x00old"); err != nil || p != "User:erin" {
		t.Fatalf("SCRAM-SHA-256 only: %q %v", p, err)
	}
	addUser(t, s, "erin", "new", ScramSHA512)
	if p, err := plainStep(t, s, "\x00erin\x00new"); err != nil || p != "User:erin" {
		t.Fatalf("the SCRAM-SHA-512 password: %q %v", p, err)
	}
	if _, err := plainStep(t, s, "\x00erin\x00old"); !errors.Is(err, ErrAuthenticationFailed) {
		t.Fatalf("the SCRAM-SHA-256 password once there is a SCRAM-SHA-512 one: %v", err)
	}
}
