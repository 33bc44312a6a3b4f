package security

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
)

// Source is where credentials and ACLs are read from: a Store (a single
// broker's file) or, in cluster mode, the replicated metadata image. The
// SASL exchanges and the Authorizer read through it; changes go to the
// Store, or through the metadata quorum, never through a Source.
type Source interface {
	// Credential returns user's credential for m (a copy the caller may
	// keep).
	Credential(user string, m Mechanism) (ScramCredential, bool)
	// Decoy is the stand-in credential of a user who has none for m
	// (see Decoys).
	Decoy(user string, m Mechanism) ScramCredential
	// Users lists the users with credentials, by name.
	Users() []UserInfo
	// ACLs is every binding. The Authorizer calls it on each decision:
	// it must not allocate or block, and the slice must not be modified.
	ACLs() []ACL
}

// Decoys makes the credentials an exchange uses for a user who has none,
// so that answers and timing do not say who exists: a credential's salt
// is derived from a secret key and the name (the same one each time the
// name is tried, as a real user's is), its iteration count is Kafka's
// default, and its keys are derived from the same secret, so no password
// yields them. Exchanges refuse a decoy's user even so. Embed it in a
// Source.
type Decoys struct {
	key []byte
}

// NewDecoys returns Decoys with a fresh random key. The key lives only in
// memory: after a restart (or on another broker) an unknown name gets
// another salt, just as a user who is deleted and created again does.
func NewDecoys() (Decoys, error) {
	d := Decoys{key: make([]byte, 32)}
	if _, err := rand.Read(d.key); err != nil {
		return Decoys{}, fmt.Errorf("security: random decoy key: %w", err)
	}
	return d, nil
}

// Decoy is the stand-in credential of user for m.
func (d Decoys) Decoy(user string, m Mechanism) ScramCredential {
	seed := hmacSum(sha256.New, d.key, string(m)+"\x00"+user)
	h := m.newHash()
	return ScramCredential{
		Mechanism:  m,
		Salt:       seed[:saltSize],
		Iterations: MinIterations,
		StoredKey:  hmacSum(h, seed, "Stored Key"),
		ServerKey:  hmacSum(h, seed, "Server Key"),
	}
}

// SortUsers orders users by name (Source implementations list them so).
func SortUsers(users []UserInfo) {
	slices.SortFunc(users, func(a, b UserInfo) int { return strings.Compare(a.Name, b.Name) })
}

// Writer changes credentials and ACLs: a Store saves them to its file; in
// cluster mode the controller proposes them to the metadata quorum. Each
// change is durable (saved, or committed) before the call returns.
type Writer interface {
	// UpsertCredential sets user's credential for c.Mechanism.
	UpsertCredential(user string, c ScramCredential) error
	// DeleteCredential removes user's credential for m; one the user
	// does not have is an error wrapping ErrNoSuchCredential.
	DeleteCredential(user string, m Mechanism) error
	// CreateACLs adds bindings, with one result per input (an invalid
	// binding: an error wrapping ErrInvalidACL).
	CreateACLs(add []ACL) []error
	// DeleteACLs removes every binding a filter matches and returns, per
	// filter, the bindings it matched.
	DeleteACLs(filters []ACLFilter) ([][]ACL, error)
}
