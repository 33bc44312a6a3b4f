package security

import (
	"bytes"
	"fmt"
)

// plainExchange is RFC 4616 PLAIN, checked against the user's SCRAM
// credential: one store of secrets serves both mechanisms.
type plainExchange struct {
	store     Source
	over      bool
	principal string
}

// NewPlain starts a PLAIN exchange: one client message, "authzid NUL
// authcid NUL passwd", answered with nothing. The password is checked
// against the user's SCRAM-SHA-512 credential, or its SCRAM-SHA-256 one
// if it has only that. A wrong password and an unknown user fail alike,
// with ErrAuthenticationFailed and the same cost; a message that is not
// PLAIN fails with ErrMalformedSASL.
func NewPlain(store Source) Exchange { return &plainExchange{store: store} }

func (p *plainExchange) Step(msg []byte) ([]byte, bool, error) {
	if p.over {
		return nil, true, ErrExchangeOver
	}
	p.over = true
	user, password, err := parsePlain(msg)
	if err != nil {
		return nil, true, err
	}
	if !p.verify(user, password) {
		return nil, true, ErrAuthenticationFailed
	}
	p.principal = principalOf(user)
	return nil, true, nil
}

func (p *plainExchange) Principal() string { return p.principal }

// verify checks password against user's preferred credential, or spends
// the same work on a decoy when there is none.
func (p *plainExchange) verify(user, password string) bool {
	for _, m := range []Mechanism{ScramSHA512, ScramSHA256} {
		if c, ok := p.store.Credential(user, m); ok {
			return c.VerifyPassword(password)
		}
	}
	p.store.Decoy(user, ScramSHA512).VerifyPassword(password)
	return false
}

// parsePlain splits a PLAIN message: exactly two NULs, a non-empty user
// (authcid) and password, and an authzid that is empty or the user
// (acting as someone else is not supported).
func parsePlain(msg []byte) (user, password string, err error) {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 {
		return "", "", fmt.Errorf("%w: PLAIN wants authzid NUL user NUL password, got %d NULs", ErrMalformedSASL, len(parts)-1)
	}
	authz, user, password := string(parts[0]), string(parts[1]), string(parts[2])
	switch {
	case user == "":
		return "", "", fmt.Errorf("%w: PLAIN with an empty user", ErrMalformedSASL)
	case password == "":
		return "", "", fmt.Errorf("%w: PLAIN with an empty password", ErrMalformedSASL)
	case authz != "" && authz != user:
		return "", "", fmt.Errorf("%w: PLAIN authorization id differs from the user (acting as another user is not supported)", ErrMalformedSASL)
	}
	return user, password, nil
}
