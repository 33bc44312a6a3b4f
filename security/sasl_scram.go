package security

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// scramExchange is the server side of RFC 5802 SCRAM, written here
// rather than taken from xdg-go/scram's server for two reasons. That
// server wants the client-final nonce to be exactly the combined one,
// while librdkafka sends the client's nonce followed by the combined one
// ("r=" cnonce cnonce snonce); Kafka accepts any nonce that ends with the
// combined one, and so does this. It also indexes past the end of an
// empty gs2 flag (a client-first-message starting with ",") and panics.
// Both sides check the proof over the AuthMessage as the client sent it,
// so the tolerance weakens nothing. An unknown user gets a decoy
// credential (Decoys) and fails at the proof like a wrong password.
type scramExchange struct {
	store Source
	mech  Mechanism
	// newNonce makes the server's part of the nonce; tests replace it.
	newNonce func() (string, error)

	state       scramState
	user        string
	cred        ScramCredential
	known       bool   // cred is the user's, not a decoy
	gs2         string // the gs2 header as sent, e.g. "n,,"
	nonce       string // client nonce + server nonce
	clientFirst string // client-first-message-bare
	serverFirst string // server-first-message
	principal   string
}

// scramState is where an exchange is.
type scramState int

const (
	scramAwaitFirst scramState = iota // expecting client-first-message
	scramAwaitFinal                   // expecting client-final-message
	scramOver                         // succeeded or failed
)

// serverNonceSize is the random bytes of the server's nonce part.
const serverNonceSize = 24

// NewScram starts a SCRAM exchange of mechanism m against store: the
// client-first-message is answered with the server-first-message, the
// client-final-message with the server-final-message (done). A wrong
// proof, a wrong nonce and an unknown user fail with
// ErrAuthenticationFailed; a message outside RFC 5802's syntax, channel
// binding ("p=" flag) and SCRAM extensions (Kafka's tokenauth: there are
// no delegation tokens here) fail with ErrMalformedSASL; a mechanism that
// is not SCRAM-SHA-256 or SCRAM-SHA-512 fails at the first step with
// ErrUnsupportedMechanism.
func NewScram(store Source, m Mechanism) Exchange {
	return &scramExchange{store: store, mech: m, newNonce: randomNonce}
}

func (x *scramExchange) Step(msg []byte) ([]byte, bool, error) {
	switch x.state {
	case scramAwaitFirst:
		x.state = scramOver
		if !x.mech.valid() {
			return nil, true, fmt.Errorf("%w: SCRAM mechanism %q", ErrUnsupportedMechanism, x.mech)
		}
		out, err := x.handleFirst(string(msg))
		if err != nil {
			return nil, true, err
		}
		x.state = scramAwaitFinal
		return []byte(out), false, nil
	case scramAwaitFinal:
		x.state = scramOver
		out, err := x.handleFinal(string(msg))
		if err != nil {
			return nil, true, err
		}
		x.principal = principalOf(x.user)
		return []byte(out), true, nil
	}
	return nil, true, ErrExchangeOver
}

func (x *scramExchange) Principal() string { return x.principal }

// handleFirst reads gs2-header client-first-message-bare and returns the
// server-first-message.
func (x *scramExchange) handleFirst(m string) (string, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: SCRAM client-first-message: %s", ErrMalformedSASL, fmt.Sprintf(format, args...))
	}
	flag, rest, ok := strings.Cut(m, ",")
	switch {
	case !ok:
		return "", bad("no gs2 header")
	case strings.HasPrefix(flag, "p="):
		return "", bad("channel binding is not supported")
	case flag != "n" && flag != "y":
		return "", bad("gs2 flag %q, want n or y", flag)
	}
	authzField, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return "", bad("no client-first-message-bare")
	}
	fields := strings.Split(bare, ",")
	switch {
	case strings.HasPrefix(fields[0], "m="):
		return "", bad("mandatory extension is not supported")
	case len(fields) < 2 || !strings.HasPrefix(fields[0], "n=") || !strings.HasPrefix(fields[1], "r="):
		return "", bad("want n=USER,r=NONCE")
	case len(fields) > 2:
		key, _, _ := strings.Cut(fields[2], "=")
		return "", bad("extension %.20q is not supported", key)
	}
	user, err := decodeSASLName(fields[0][2:])
	if err != nil {
		return "", bad("user: %v", err)
	}
	if authzField != "" {
		a, ok := strings.CutPrefix(authzField, "a=")
		if !ok {
			return "", bad("authorization field %.20q, want a=NAME", authzField)
		}
		if authz, err := decodeSASLName(a); err != nil || authz != user {
			return "", bad("an authorization id other than the user (acting as another user is not supported)")
		}
	}
	cnonce := fields[1][2:]
	if !printableNonce(cnonce) {
		return "", bad("empty or unprintable client nonce")
	}
	snonce, err := x.newNonce()
	if err != nil {
		return "", fmt.Errorf("SCRAM server nonce: %w", err)
	}
	x.user, x.gs2, x.clientFirst, x.nonce = user, flag+","+authzField+",", bare, cnonce+snonce
	x.cred, x.known = x.store.Credential(user, x.mech)
	if !x.known {
		x.cred = x.store.Decoy(user, x.mech)
	}
	x.serverFirst = "r=" + x.nonce + ",s=" + base64.StdEncoding.EncodeToString(x.cred.Salt) + ",i=" + strconv.Itoa(x.cred.Iterations)
	return x.serverFirst, nil
}

// handleFinal checks client-final-message and returns the
// server-final-message.
func (x *scramExchange) handleFinal(m string) (string, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: SCRAM client-final-message: %s", ErrMalformedSASL, fmt.Sprintf(format, args...))
	}
	i := strings.LastIndex(m, ",p=")
	if i < 0 {
		return "", bad("no proof")
	}
	withoutProof, proofB64 := m[:i], m[i+len(",p="):]
	fields := strings.Split(withoutProof, ",")
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "c=") || !strings.HasPrefix(fields[1], "r=") {
		return "", bad("want c=BINDING,r=NONCE,...,p=PROOF")
	}
	cbind, err := base64.StdEncoding.DecodeString(fields[0][2:])
	if err != nil || string(cbind) != x.gs2 {
		return "", bad("channel binding does not repeat the gs2 header")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil {
		return "", bad("proof is not base64")
	}
	// Kafka's rule (ScramSaslServer): the nonce ends with the combined
	// one; librdkafka puts its own nonce before it.
	if !strings.HasSuffix(fields[1][2:], x.nonce) {
		return "", fmt.Errorf("%w: SCRAM nonce is not the server's", ErrAuthenticationFailed)
	}
	h := x.mech.newHash()
	authMessage := x.clientFirst + "," + x.serverFirst + "," + withoutProof
	signature := hmacSum(h, x.cred.StoredKey, authMessage)
	if len(proof) != len(signature) {
		return "", ErrAuthenticationFailed
	}
	clientKey := make([]byte, len(signature))
	for i := range signature {
		clientKey[i] = proof[i] ^ signature[i]
	}
	d := h()
	d.Write(clientKey)
	if !hmac.Equal(d.Sum(nil), x.cred.StoredKey) || !x.known {
		return "", ErrAuthenticationFailed
	}
	return "v=" + base64.StdEncoding.EncodeToString(hmacSum(h, x.cred.ServerKey, authMessage)), nil
}

// randomNonce is a server nonce part: random bytes in URL-safe base64,
// which has no comma.
func randomNonce() (string, error) {
	b := make([]byte, serverNonceSize)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// decodeSASLName decodes RFC 5802's saslname: "," and "=" come escaped
// as =2C and =3D, and no other "=" may appear.
func decodeSASLName(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("empty name")
	}
	if !strings.Contains(s, "=") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] != '=':
			b.WriteByte(s[i])
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
			i += 2
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
			i += 2
		default:
			return "", fmt.Errorf("bad escape in name %.40q", s)
		}
	}
	return b.String(), nil
}

// printableNonce: non-empty, RFC 5802's printable characters (comma
// excluded, which cannot appear in a split field anyway).
func printableNonce(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == ',' {
			return false
		}
	}
	return true
}
