package security

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// The SASL errors. Messages to clients must not say which of user or
// password was wrong.
var (
	ErrAuthenticationFailed = errors.New("authentication failed: invalid credentials")
	ErrMalformedSASL        = errors.New("malformed SASL message")
	ErrUnsupportedMechanism = errors.New("unsupported SASL mechanism")
	errExchangeDone         = errors.New("SASL exchange already completed")
)

// Exchange is the server side of one SASL authentication: each client
// message gets the server's answer; done reports the exchange over
// (successfully: err is nil).
type Exchange interface {
	Step(clientMsg []byte) (serverMsg []byte, done bool, err error)
	// Principal is "User:<name>" once the exchange succeeded.
	Principal() string
}

// SupportedMechanisms are the SASL mechanisms NewExchange knows.
func SupportedMechanisms() []string {
	return []string{"PLAIN", string(ScramSHA256), string(ScramSHA512)}
}

// NewExchange starts an exchange of the named mechanism against store.
func NewExchange(store *Store, mechanism string) (Exchange, error) {
	switch mechanism {
	case "PLAIN":
		return NewPlain(store), nil
	case string(ScramSHA256), string(ScramSHA512):
		return NewScram(store, Mechanism(mechanism)), nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnsupportedMechanism, mechanism)
}

// plainExchange is RFC 4616 PLAIN, checked against the user's SCRAM
// credential (one store of secrets for both mechanisms).
type plainExchange struct {
	store     *Store
	done      bool
	principal string
}

// NewPlain starts a PLAIN exchange.
func NewPlain(store *Store) Exchange { return &plainExchange{store: store} }

// ParsePlain splits a PLAIN message, authzid NUL authcid NUL passwd: exactly
// two NULs, a user and a password; an authzid, if any, must be the user.
func ParsePlain(msg []byte) (user, password string, err error) {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 {
		return "", "", fmt.Errorf("%w: PLAIN wants authzid NUL user NUL password", ErrMalformedSASL)
	}
	authz, user, password := string(parts[0]), string(parts[1]), string(parts[2])
	switch {
	case user == "" || password == "":
		return "", "", fmt.Errorf("%w: PLAIN with an empty user or password", ErrMalformedSASL)
	case authz != "" && authz != user:
		return "", "", fmt.Errorf("%w: PLAIN authorization id %q differs from the user (acting as another user is not supported)", ErrMalformedSASL, authz)
	}
	return user, password, nil
}

func (p *plainExchange) Step(msg []byte) ([]byte, bool, error) {
	if p.done {
		return nil, true, errExchangeDone
	}
	p.done = true
	user, password, err := ParsePlain(msg)
	if err != nil {
		return nil, true, err
	}
	for _, m := range []Mechanism{ScramSHA512, ScramSHA256} {
		if c, ok := p.store.Credential(user, m); ok {
			if c.VerifyPassword(password) {
				p.principal = "User:" + user
				return nil, true, nil
			}
			break
		}
	}
	return nil, true, ErrAuthenticationFailed
}

func (p *plainExchange) Principal() string { return p.principal }

// scramExchange is the server side of RFC 5802 SCRAM. It is written here
// rather than taken from xdg-go/scram's server, whose exact nonce check
// refuses librdkafka: its client-final-message repeats the client nonce
// before the combined one ("r=" cnonce cnonce snonce). Kafka accepts that
// (the final nonce must end with the combined one), and so does this.
// The proof is checked over the AuthMessage as the client sent it, so the
// tolerance costs nothing. Salts and keys come from xdg-go's derivation
// (credentials.go). An unknown user is answered with a made-up salt and
// fails only at the proof, like a wrong password, so answers do not
// reveal who exists.
type scramExchange struct {
	store     *Store
	mech      Mechanism
	steps     int
	cred      ScramCredential
	known     bool
	user      string
	gs2       string // the gs2 header, e.g. "n,,"
	nonce     string // client nonce + server nonce
	first     string // client-first-message-bare
	serverMsg string // server-first-message
	principal string
}

// NewScram starts a SCRAM exchange of mechanism m.
func NewScram(store *Store, m Mechanism) Exchange { return &scramExchange{store: store, mech: m} }

// decoyCredential stands in for a user who does not exist: random keys
// no proof can match.
func decoyCredential(m Mechanism) ScramCredential {
	_, h := m.hashes()
	size := h().Size()
	b := make([]byte, 32+2*size)
	rand.Read(b)
	return ScramCredential{Mechanism: m, Salt: b[:32], Iterations: MinIterations, StoredKey: b[32 : 32+size], ServerKey: b[32+size:]}
}

func (x *scramExchange) Step(msg []byte) ([]byte, bool, error) {
	x.steps++
	switch x.steps {
	case 1:
		out, err := x.clientFirst(string(msg))
		if err != nil {
			return nil, true, fmt.Errorf("%w: SCRAM client-first-message: %v", ErrMalformedSASL, err)
		}
		return []byte(out), false, nil
	case 2:
		out, err := x.clientFinal(string(msg))
		if err != nil {
			return nil, true, err
		}
		x.principal = "User:" + x.user
		return []byte(out), true, nil
	}
	return nil, true, errExchangeDone
}

// clientFirst reads gs2-header client-first-message-bare and answers
// server-first-message.
func (x *scramExchange) clientFirst(m string) (string, error) {
	flag, rest, ok := strings.Cut(m, ",")
	if !ok {
		return "", errors.New("no gs2 header")
	}
	switch {
	case flag == "n", flag == "y":
	case strings.HasPrefix(flag, "p="):
		return "", errors.New("channel binding is not supported")
	default:
		return "", fmt.Errorf("gs2 flag %q", flag)
	}
	authz, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return "", errors.New("no client-first-message-bare")
	}
	if authz != "" && !strings.HasPrefix(authz, "a=") {
		return "", fmt.Errorf("authorization field %q", authz)
	}
	fields := strings.Split(bare, ",")
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "n=") || !strings.HasPrefix(fields[1], "r=") {
		return "", errors.New("want n=USER,r=NONCE")
	}
	if len(fields) > 2 {
		// Kafka's one extension is tokenauth (delegation tokens),
		// which ringlog does not have.
		return "", fmt.Errorf("extension %q is not supported", fields[2])
	}
	user, err := saslName(fields[0][2:])
	if err != nil {
		return "", err
	}
	if a := strings.TrimPrefix(authz, "a="); authz != "" {
		if name, err := saslName(a); err != nil || name != user {
			return "", errors.New("an authorization id other than the user")
		}
	}
	cnonce := fields[1][2:]
	if !printableNonce(cnonce) {
		return "", errors.New("empty or unprintable client nonce")
	}
	snonce := make([]byte, 24)
	if _, err := rand.Read(snonce); err != nil {
		return "", err
	}
	x.user, x.gs2, x.first = user, flag+","+authz+",", bare
	x.nonce = cnonce + base64.RawURLEncoding.EncodeToString(snonce)
	x.cred, x.known = x.store.Credential(user, x.mech)
	if !x.known {
		x.cred = decoyCredential(x.mech)
	}
	x.serverMsg = fmt.Sprintf("r=%s,s=%s,i=%d", x.nonce, base64.StdEncoding.EncodeToString(x.cred.Salt), x.cred.Iterations)
	return x.serverMsg, nil
}

// clientFinal checks client-final-message and answers server-final.
func (x *scramExchange) clientFinal(m string) (string, error) {
	i := strings.LastIndex(m, ",p=")
	if i < 0 {
		return "", fmt.Errorf("%w: SCRAM client-final-message without a proof", ErrMalformedSASL)
	}
	withoutProof, proofB64 := m[:i], m[i+3:]
	fields := strings.Split(withoutProof, ",")
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "c=") || !strings.HasPrefix(fields[1], "r=") {
		return "", fmt.Errorf("%w: SCRAM client-final-message: want c=...,r=...,p=...", ErrMalformedSASL)
	}
	cbind, err := base64.StdEncoding.DecodeString(fields[0][2:])
	if err != nil || string(cbind) != x.gs2 {
		return "", fmt.Errorf("%w: SCRAM channel binding does not match the gs2 header", ErrMalformedSASL)
	}
	// The combined nonce, possibly after a repeat of the client's
	// (librdkafka): see scramExchange.
	if !strings.HasSuffix(fields[1][2:], x.nonce) {
		return "", ErrAuthenticationFailed
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil {
		return "", fmt.Errorf("%w: SCRAM proof is not base64", ErrMalformedSASL)
	}
	_, h := x.mech.hashes()
	mac := func(key []byte, msg string) []byte {
		hm := hmac.New(h, key)
		hm.Write([]byte(msg))
		return hm.Sum(nil)
	}
	authMsg := x.first + "," + x.serverMsg + "," + withoutProof
	sig := mac(x.cred.StoredKey, authMsg)
	if len(proof) != len(sig) {
		return "", ErrAuthenticationFailed
	}
	clientKey := make([]byte, len(sig))
	for i := range sig {
		clientKey[i] = proof[i] ^ sig[i]
	}
	d := h()
	d.Write(clientKey)
	if !hmac.Equal(d.Sum(nil), x.cred.StoredKey) || !x.known {
		return "", ErrAuthenticationFailed
	}
	return "v=" + base64.StdEncoding.EncodeToString(mac(x.cred.ServerKey, authMsg)), nil
}

// saslName decodes a SCRAM saslname (",", "=" escaped as =2C and =3D).
func saslName(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty user name")
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == ',':
			return "", errors.New("unescaped comma in the user name")
		case s[i] != '=':
			b.WriteByte(s[i])
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
			i += 2
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
			i += 2
		default:
			return "", errors.New("bad escape in the user name")
		}
	}
	return b.String(), nil
}

// printableNonce: RFC 5802's printable characters, comma excluded.
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

func (x *scramExchange) Principal() string { return x.principal }
