package security

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// Mechanism is a SCRAM mechanism's SASL name.
type Mechanism string

// The SCRAM mechanisms Kafka defines (KIP-84).
const (
	ScramSHA256 Mechanism = "SCRAM-SHA-256"
	ScramSHA512 Mechanism = "SCRAM-SHA-512"
)

// MinIterations and MaxIterations bound a credential's PBKDF2 iteration
// count, as Kafka's AlterUserScramCredentials does.
const (
	MinIterations = 4096
	MaxIterations = 16384
)

// saltSize is the length of the salt NewScramCredential makes.
const saltSize = 32

// ParseMechanism reads a SCRAM mechanism's name (case-insensitively) or
// its Kafka wire code written in decimal ("1" or "2").
func ParseMechanism(s string) (Mechanism, error) {
	for _, m := range []Mechanism{ScramSHA256, ScramSHA512} {
		if strings.EqualFold(s, string(m)) {
			return m, nil
		}
	}
	if code, err := strconv.ParseInt(s, 10, 8); err == nil {
		if m, ok := MechanismFromCode(int8(code)); ok {
			return m, nil
		}
	}
	return "", fmt.Errorf("%w: %q is not a SCRAM mechanism (%s or %s)", ErrUnsupportedMechanism, s, ScramSHA256, ScramSHA512)
}

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

// Code is the mechanism's Kafka wire code (0, Kafka's UNKNOWN, for a
// mechanism that is neither SCRAM-SHA-256 nor SCRAM-SHA-512).
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

// newHash is the mechanism's hash function; SHA-256 for an invalid
// mechanism, which callers refuse before it matters.
func (m Mechanism) newHash() func() hash.Hash {
	if m == ScramSHA512 {
		return sha512.New
	}
	return sha256.New
}

// ScramCredential is what RFC 5802 has a server keep for a user: the
// salt and iteration count the client derives its keys with, StoredKey
// to check the client's proof, and ServerKey to sign the server's answer.
// It never holds the password. Byte fields are base64 in JSON.
type ScramCredential struct {
	Mechanism  Mechanism `json:"mechanism"`
	Salt       []byte    `json:"salt"`
	Iterations int       `json:"iterations"`
	StoredKey  []byte    `json:"stored_key"`
	ServerKey  []byte    `json:"server_key"`
}

// NewScramCredential derives a credential from a password, with a fresh
// 32-byte random salt when salt is nil. The password is used as its UTF-8
// bytes, without SASLprep, as Kafka (ScramFormatter) and its clients
// (Java, librdkafka, franz-go) do; only with the same bytes do this
// credential and those clients agree.
func NewScramCredential(m Mechanism, password string, iterations int, salt []byte) (ScramCredential, error) {
	if err := checkParams(m, iterations); err != nil {
		return ScramCredential{}, err
	}
	if salt == nil {
		salt = make([]byte, saltSize)
		if _, err := rand.Read(salt); err != nil {
			return ScramCredential{}, fmt.Errorf("SCRAM credential: random salt: %w", err)
		}
	}
	salted, err := saltPassword(m, password, salt, iterations)
	if err != nil {
		return ScramCredential{}, err
	}
	return FromSalted(m, salt, salted, iterations)
}

// FromSalted builds a credential from a salted password, RFC 5802's
// SaltedPassword = PBKDF2(password, salt, iterations), as
// AlterUserScramCredentials carries it: ClientKey = HMAC(SaltedPassword,
// "Client Key"), StoredKey = H(ClientKey), ServerKey =
// HMAC(SaltedPassword, "Server Key").
func FromSalted(m Mechanism, salt, saltedPassword []byte, iterations int) (ScramCredential, error) {
	if err := checkParams(m, iterations); err != nil {
		return ScramCredential{}, err
	}
	h := m.newHash()
	switch size := h().Size(); {
	case len(salt) == 0:
		return ScramCredential{}, errors.New("SCRAM credential: empty salt")
	case len(saltedPassword) != size:
		return ScramCredential{}, fmt.Errorf("SCRAM credential: salted password of %d bytes, %s wants %d", len(saltedPassword), m, size)
	}
	clientKey := hmacSum(h, saltedPassword, "Client Key")
	d := h()
	d.Write(clientKey)
	return ScramCredential{
		Mechanism:  m,
		Salt:       clone(salt),
		Iterations: iterations,
		StoredKey:  d.Sum(nil),
		ServerKey:  hmacSum(h, saltedPassword, "Server Key"),
	}, nil
}

// VerifyPassword reports whether password derives this credential's
// StoredKey, compared in constant time. A credential that is unusable (an
// unknown mechanism, iterations out of bounds, no salt, keys of the wrong
// size) verifies nothing.
func (c ScramCredential) VerifyPassword(password string) bool {
	if c.Check() != nil {
		return false
	}
	salted, err := saltPassword(c.Mechanism, password, c.Salt, c.Iterations)
	if err != nil {
		return false
	}
	derived, err := FromSalted(c.Mechanism, c.Salt, salted, c.Iterations)
	return err == nil && hmac.Equal(derived.StoredKey, c.StoredKey)
}

// Check reports what makes c unusable: an unknown mechanism, iterations
// out of bounds, no salt, or keys of the wrong size.
func (c ScramCredential) Check() error {
	if err := checkParams(c.Mechanism, c.Iterations); err != nil {
		return err
	}
	size := c.Mechanism.newHash()().Size()
	switch {
	case len(c.Salt) == 0:
		return errors.New("SCRAM credential: empty salt")
	case len(c.StoredKey) != size || len(c.ServerKey) != size:
		return fmt.Errorf("SCRAM credential: keys of %d and %d bytes, %s wants %d", len(c.StoredKey), len(c.ServerKey), c.Mechanism, size)
	}
	return nil
}

// clone returns c with its own copies of the byte slices.
func (c ScramCredential) clone() ScramCredential {
	c.Salt, c.StoredKey, c.ServerKey = clone(c.Salt), clone(c.StoredKey), clone(c.ServerKey)
	return c
}

// checkParams refuses an unknown mechanism or an iteration count Kafka
// would refuse.
func checkParams(m Mechanism, iterations int) error {
	if !m.valid() {
		return fmt.Errorf("SCRAM credential: %w: %q", ErrUnsupportedMechanism, m)
	}
	if iterations < MinIterations || iterations > MaxIterations {
		return fmt.Errorf("SCRAM credential: %d iterations, want %d to %d", iterations, MinIterations, MaxIterations)
	}
	return nil
}

// saltPassword is RFC 5802's Hi(password, salt, iterations): PBKDF2 with
// the mechanism's HMAC, as long as its hash.
func saltPassword(m Mechanism, password string, salt []byte, iterations int) ([]byte, error) {
	h := m.newHash()
	key, err := pbkdf2.Key(h, password, salt, iterations, h().Size())
	if err != nil {
		return nil, fmt.Errorf("SCRAM credential: PBKDF2: %w", err)
	}
	return key, nil
}

// hmacSum is HMAC(key, msg) with hash h.
func hmacSum(h func() hash.Hash, key []byte, msg string) []byte {
	mac := hmac.New(h, key)
	mac.Write([]byte(msg))
	return mac.Sum(nil)
}

// clone copies b; nil stays nil.
func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
