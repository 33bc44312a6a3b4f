package security

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"hash"
	"testing"

	"github.com/xdg-go/pbkdf2"
	"github.com/xdg-go/scram"
)

func TestMechanismNamesAndCodes(t *testing.T) {
	for _, m := range []Mechanism{ScramSHA256, ScramSHA512} {
		got, ok := MechanismFromCode(m.Code())
		if !ok || got != m {
			t.Errorf("%s: code %d maps back to %q %v", m, m.Code(), got, ok)
		}
	}
	if ScramSHA256.Code() != 1 || ScramSHA512.Code() != 2 || Mechanism("SCRAM-SHA-1").Code() != 0 {
		t.Error("codes differ from Kafka's (1, 2; 0 for others)")
	}
	for _, c := range []int8{0, 3, -1} {
		if m, ok := MechanismFromCode(c); ok {
			t.Errorf("code %d maps to %q", c, m)
		}
	}
	for in, want := range map[string]Mechanism{"SCRAM-SHA-256": ScramSHA256, "scram-sha-512": ScramSHA512, "1": ScramSHA256, "2": ScramSHA512} {
		if got, err := ParseMechanism(in); err != nil || got != want {
			t.Errorf("ParseMechanism(%q) = %q, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "PLAIN", "SCRAM-SHA-1", "0", "3", "SCRAM-SHA-256 "} {
		if _, err := ParseMechanism(in); !errors.Is(err, ErrUnsupportedMechanism) {
			t.Errorf("ParseMechanism(%q): %v, want ErrUnsupportedMechanism", in, err)
		}
	}
}

func TestNewScramCredentialBounds(t *testing.T) {
	for _, n := range []int{0, MinIterations - 1, MaxIterations + 1} {
		if _, err := NewScramCredential(ScramSHA256, "pw", n, nil); err == nil {
			t.Errorf("%d iterations accepted", n)
		}
	}
	for _, n := range []int{MinIterations, MaxIterations} {
		if _, err := NewScramCredential(ScramSHA256, "pw", n, nil); err != nil {
			t.Errorf("%d iterations: %v", n, err)
		}
	}
	if _, err := NewScramCredential("SCRAM-SHA-1", "pw", MinIterations, nil); !errors.Is(err, ErrUnsupportedMechanism) {
		t.Errorf("SCRAM-SHA-1: %v", err)
	}
	a, b := mustCred(t, ScramSHA512, "pw"), mustCred(t, ScramSHA512, "pw")
	if len(a.Salt) != 32 || bytes.Equal(a.Salt, b.Salt) || bytes.Equal(a.StoredKey, b.StoredKey) {
		t.Errorf("random salts: %x and %x", a.Salt, b.Salt)
	}
	if len(a.StoredKey) != sha512.Size || len(a.ServerKey) != sha512.Size {
		t.Errorf("SHA-512 keys of %d and %d bytes", len(a.StoredKey), len(a.ServerKey))
	}
	salt := []byte("caller's salt")
	c, err := NewScramCredential(ScramSHA256, "pw", MinIterations, salt)
	if err != nil {
		t.Fatal(err)
	}
	salt[0] = 'X'
	if string(c.Salt) != "caller's salt" {
		t.Error("the credential shares the caller's salt")
	}
}

func TestVerifyPassword(t *testing.T) {
	for _, m := range []Mechanism{ScramSHA256, ScramSHA512} {
		c := mustCred(t, m, "correct horse")
		if !c.VerifyPassword("correct horse") {
			t.Errorf("%s: the password does not verify", m)
		}
		for _, wrong := range []string{"", "correct horsE", "correct horse ", "correct"} {
			if c.VerifyPassword(wrong) {
				t.Errorf("%s: %q verifies", m, wrong)
			}
		}
		// Keys right for 16385 iterations, which Kafka refuses: such a
		// credential verifies nothing.
		h := m.newHash()
		salted := pbkdf2.Key([]byte("correct horse"), c.Salt, MaxIterations+1, h().Size(), h)
		d := h()
		d.Write(hmacSum(h, salted, "Client Key"))
		over := ScramCredential{Mechanism: m, Salt: c.Salt, Iterations: MaxIterations + 1, StoredKey: d.Sum(nil), ServerKey: hmacSum(h, salted, "Server Key")}
		if over.VerifyPassword("correct horse") {
			t.Errorf("%s: a credential with out-of-bounds iterations verifies", m)
		}
	}
}

// TestPasswordBytesAsKafka: passwords are not SASLprep'd, as in Kafka and
// the Kafka clients; SASLprep would map the full-width letters and drop
// the soft hyphen, and then those clients could not authenticate.
func TestPasswordBytesAsKafka(t *testing.T) {
	const pass = "ｐａｓｓ\u00adword"
	c := mustCred(t, ScramSHA256, pass)
	if !c.VerifyPassword(pass) || c.VerifyPassword("password") {
		t.Fatal("the password was normalised")
	}
	salted := pbkdf2.Key([]byte(pass), c.Salt, c.Iterations, sha256.Size, sha256.New)
	raw, err := FromSalted(ScramSHA256, c.Salt, salted, c.Iterations)
	if err != nil || !bytes.Equal(raw.StoredKey, c.StoredKey) {
		t.Fatalf("differs from PBKDF2 over the raw bytes: %v", err)
	}
}

// TestFromSaltedMatchesPassword checks the two constructors against each
// other and against xdg-go/scram's own derivation.
func TestFromSaltedMatchesPassword(t *testing.T) {
	salt := []byte("0123456789abcdef")
	for _, tc := range []struct {
		m    Mechanism
		gen  scram.HashGeneratorFcn
		hash func() hash.Hash
	}{{ScramSHA256, scram.SHA256, sha256.New}, {ScramSHA512, scram.SHA512, sha512.New}} {
		want, err := NewScramCredential(tc.m, "pencil", 8192, salt)
		if err != nil {
			t.Fatal(err)
		}
		salted := pbkdf2.Key([]byte("pencil"), salt, 8192, tc.hash().Size(), tc.hash)
		got, err := FromSalted(tc.m, salt, salted, 8192)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.StoredKey, want.StoredKey) || !bytes.Equal(got.ServerKey, want.ServerKey) || got.Iterations != 8192 || !bytes.Equal(got.Salt, salt) {
			t.Fatalf("%s: FromSalted and NewScramCredential disagree", tc.m)
		}
		cl, err := tc.gen.NewClientUnprepped("", "pencil", "")
		if err != nil {
			t.Fatal(err)
		}
		xdg := cl.GetStoredCredentials(scram.KeyFactors{Salt: string(salt), Iters: 8192})
		if !bytes.Equal(xdg.StoredKey, got.StoredKey) || !bytes.Equal(xdg.ServerKey, got.ServerKey) {
			t.Fatalf("%s: differs from xdg-go/scram's derivation", tc.m)
		}
		if !got.VerifyPassword("pencil") || got.VerifyPassword("pencil2") {
			t.Fatalf("%s: VerifyPassword", tc.m)
		}
		for _, n := range []int{100, MinIterations - 1, MaxIterations + 1} {
			if _, err := FromSalted(tc.m, salt, salted, n); err == nil {
				t.Errorf("%s: %d iterations accepted", tc.m, n)
			}
		}
		if _, err := FromSalted(tc.m, salt, salted[:10], MinIterations); err == nil {
			t.Errorf("%s: a short salted password accepted", tc.m)
		}
		if _, err := FromSalted(tc.m, nil, salted, MinIterations); err == nil {
			t.Errorf("%s: an empty salt accepted", tc.m)
		}
	}
}

func TestCredentialJSON(t *testing.T) {
	c := mustCred(t, ScramSHA512, "pw")
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back ScramCredential
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Mechanism != c.Mechanism || back.Iterations != c.Iterations || !bytes.Equal(back.Salt, c.Salt) ||
		!bytes.Equal(back.StoredKey, c.StoredKey) || !bytes.Equal(back.ServerKey, c.ServerKey) || !back.VerifyPassword("pw") {
		t.Fatalf("JSON round trip: %s", b)
	}
}
