package security

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"

	"github.com/xdg-go/scram"
)

// Mechanism is a SCRAM mechanism's SASL name.
type Mechanism string

// The SCRAM mechanisms Kafka defines (KIP-84).
const (
	ScramSHA256 Mechanism = "SCRAM-SHA-256"
	ScramSHA512 Mechanism = "SCRAM-SHA-512"
)

// Kafka's bounds on SCRAM iterations (AlterUserScramCredentials).
const (
	MinIterations = 4096
	MaxIterations = 16384
)

// MechanismFromCode maps Kafka's wire code (1: SCRAM-SHA-256, 2:
// SCRAM-SHA-512) to a mechanism.
func MechanismFromCode(code int8) (Mechanism, bool) {
	switch code {
	case 1:
		return ScramSHA256, true
	case 2:
		return ScramSHA512, true
	}
	return "", false
}

// Code is the mechanism's Kafka wire code (0 for an unknown one).
func (m Mechanism) Code() int8 {
	switch m {
	case ScramSHA256:
		return 1
	case ScramSHA512:
		return 2
	}
	return 0
}

func (m Mechanism) valid() bool { return m.Code() != 0 }

// hashes are the mechanism's hash for xdg-go/scram and for direct use.
func (m Mechanism) hashes() (scram.HashGeneratorFcn, func() hash.Hash) {
	if m == ScramSHA512 {
		return scram.SHA512, sha512.New
	}
	return scram.SHA256, sha256.New
}

// ScramCredential is what RFC 5802 has a server keep: never the password.
type ScramCredential struct {
	Mechanism  Mechanism `json:"mechanism"`
	Salt       []byte    `json:"salt"`
	Iterations int       `json:"iterations"`
	StoredKey  []byte    `json:"stored_key"`
	ServerKey  []byte    `json:"server_key"`
}

// NewScramCredential derives a credential from a password (normalised
// with SASLprep), with a fresh 32-byte random salt when salt is nil.
func NewScramCredential(m Mechanism, password string, iterations int, salt []byte) (ScramCredential, error) {
	if !m.valid() {
		return ScramCredential{}, fmt.Errorf("unknown SCRAM mechanism %q", m)
	}
	if err := checkIterations(iterations); err != nil {
		return ScramCredential{}, err
	}
	if salt == nil {
		salt = make([]byte, 32)
		if _, err := rand.Read(salt); err != nil {
			return ScramCredential{}, fmt.Errorf("salt: %w", err)
		}
	}
	gen, _ := m.hashes()
	cl, err := gen.NewClient("", password, "")
	if err != nil {
		return ScramCredential{}, fmt.Errorf("password: %w", err)
	}
	sc := cl.GetStoredCredentials(scram.KeyFactors{Salt: string(salt), Iters: iterations})
	return ScramCredential{Mechanism: m, Salt: salt, Iterations: iterations, StoredKey: sc.StoredKey, ServerKey: sc.ServerKey}, nil
}

// FromSalted builds a credential from a salted password (PBKDF2 output),
// as AlterUserScramCredentials carries it.
func FromSalted(m Mechanism, salt, saltedPassword []byte, iterations int) (ScramCredential, error) {
	if !m.valid() {
		return ScramCredential{}, fmt.Errorf("unknown SCRAM mechanism %q", m)
	}
	if err := checkIterations(iterations); err != nil {
		return ScramCredential{}, err
	}
	_, h := m.hashes()
	if len(salt) == 0 {
		return ScramCredential{}, errors.New("empty salt")
	}
	if len(saltedPassword) != h().Size() {
		return ScramCredential{}, fmt.Errorf("salted password of %d bytes, want %d for %s", len(saltedPassword), h().Size(), m)
	}
	mac := func(key []byte, msg string) []byte {
		hm := hmac.New(h, key)
		hm.Write([]byte(msg))
		return hm.Sum(nil)
	}
	clientKey := mac(saltedPassword, "Client Key")
	d := h()
	d.Write(clientKey)
	return ScramCredential{Mechanism: m, Salt: append([]byte(nil), salt...), Iterations: iterations,
		StoredKey: d.Sum(nil), ServerKey: mac(saltedPassword, "Server Key")}, nil
}

func checkIterations(n int) error {
	if n < MinIterations || n > MaxIterations {
		return fmt.Errorf("%d iterations: use %d to %d", n, MinIterations, MaxIterations)
	}
	return nil
}

// VerifyPassword reports whether password derives this credential's
// StoredKey (compared in constant time).
func (c ScramCredential) VerifyPassword(password string) bool {
	if !c.Mechanism.valid() {
		return false
	}
	gen, _ := c.Mechanism.hashes()
	cl, err := gen.NewClient("", password, "")
	if err != nil {
		return false
	}
	sc := cl.GetStoredCredentials(scram.KeyFactors{Salt: string(c.Salt), Iters: c.Iterations})
	return hmac.Equal(sc.StoredKey, c.StoredKey)
}

func (c ScramCredential) check() error {
	_, h := c.Mechanism.hashes()
	switch {
	case !c.Mechanism.valid():
		return fmt.Errorf("unknown SCRAM mechanism %q", c.Mechanism)
	case checkIterations(c.Iterations) != nil:
		return checkIterations(c.Iterations)
	case len(c.Salt) == 0:
		return errors.New("empty salt")
	case len(c.StoredKey) != h().Size() || len(c.ServerKey) != h().Size():
		return fmt.Errorf("keys of %d and %d bytes, want %d", len(c.StoredKey), len(c.ServerKey), h().Size())
	}
	return nil
}
