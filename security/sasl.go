package security

import (
	"errors"
	"fmt"
)

// The SASL errors. None says whether a user exists: a wrong password and
// an unknown user are both ErrAuthenticationFailed.
var (
	// ErrAuthenticationFailed is a user and password (or proof) that do
	// not check out.
	ErrAuthenticationFailed = errors.New("authentication failed: invalid credentials")
	// ErrMalformedSASL is a client message that breaks its mechanism's
	// syntax.
	ErrMalformedSASL = errors.New("malformed SASL message")
	// ErrUnsupportedMechanism is a SASL or SCRAM mechanism this package
	// does not implement.
	ErrUnsupportedMechanism = errors.New("unsupported SASL mechanism")
	// ErrExchangeOver is a Step after the exchange finished, with
	// success or not.
	ErrExchangeOver = errors.New("SASL exchange already over")
)

// mechanismPlain is the PLAIN mechanism's SASL name.
const mechanismPlain = "PLAIN"

// Exchange is the server side of one SASL authentication, a state
// machine fed the client's messages in order. Step answers one; done
// reports the exchange over, successfully if err is nil (then serverMsg,
// possibly empty, is the last answer). An error ends the exchange too;
// every Step after the end fails with ErrExchangeOver.
type Exchange interface {
	Step(clientMsg []byte) (serverMsg []byte, done bool, err error)
	// Principal is "User:<name>" once the exchange succeeded, and ""
	// before or after a failure.
	Principal() string
}

// SupportedMechanisms are the SASL mechanisms NewExchange knows, in
// Kafka's names.
func SupportedMechanisms() []string {
	return []string{mechanismPlain, string(ScramSHA256), string(ScramSHA512)}
}

// NewExchange starts an exchange of the named SASL mechanism (exactly as
// SupportedMechanisms spells it) against store's credentials; another
// name is an error wrapping ErrUnsupportedMechanism.
func NewExchange(store Source, mechanism string) (Exchange, error) {
	switch mechanism {
	case mechanismPlain:
		return NewPlain(store), nil
	case string(ScramSHA256), string(ScramSHA512):
		return NewScram(store, Mechanism(mechanism)), nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnsupportedMechanism, mechanism)
}

// principalOf is the principal of an authenticated user.
func principalOf(user string) string { return "User:" + user }
