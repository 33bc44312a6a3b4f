package metadata

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Listener is one named Kafka listener of a broker (Kafka's endpoint):
// clients connected to a listener named Name are told, in Metadata, the
// Addr of every broker's listener of the same name.
type Listener struct {
	// Name is the listener's name: here its security protocol
	// ("PLAINTEXT", "SASL_SSL"), 1-64 of [A-Z0-9_].
	Name string `json:"name"`
	// Addr is the advertised host:port.
	Addr string `json:"addr"`
}

// ScramMechanism is a SCRAM mechanism, by Kafka's code.
type ScramMechanism uint8

// The SCRAM mechanisms.
const (
	ScramSHA256 ScramMechanism = 1
	ScramSHA512 ScramMechanism = 2
)

// keySize is the size of StoredKey and ServerKey (the hash's), 0 for an
// unknown mechanism.
func (m ScramMechanism) keySize() int {
	switch m {
	case ScramSHA256:
		return 32
	case ScramSHA512:
		return 64
	}
	return 0
}

// ScramCredential is a user's SCRAM credential for one mechanism (RFC
// 5802's stored form: never the password).
type ScramCredential struct {
	Iterations int32  `json:"iterations"`
	Salt       []byte `json:"salt"`
	StoredKey  []byte `json:"stored_key"`
	ServerKey  []byte `json:"server_key"`
}

// ACLBinding is one ACL (Kafka's AclBinding). The enums are Kafka's
// numbers; the proposer checks their meaning (security.ACL.Validate),
// Apply only that they are concrete values.
type ACLBinding struct {
	ResourceType int8   `json:"resource_type"`
	ResourceName string `json:"resource_name"`
	PatternType  int8   `json:"pattern_type"`
	Principal    string `json:"principal"`
	Host         string `json:"host"`
	Operation    int8   `json:"operation"`
	Permission   int8   `json:"permission"`
}

// compareACLs orders bindings: the image keeps them sorted and unique,
// so its encoding depends only on the set.
func compareACLs(a, b ACLBinding) int {
	return cmp.Or(cmp.Compare(a.ResourceType, b.ResourceType), strings.Compare(a.ResourceName, b.ResourceName),
		cmp.Compare(a.PatternType, b.PatternType), strings.Compare(a.Principal, b.Principal),
		strings.Compare(a.Host, b.Host), cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.Permission, b.Permission))
}

// Limits on security records.
const (
	maxListeners  = 16
	maxSecretSize = 1024
)

// UpsertScramCredential sets User's credential for Mechanism, replacing
// any it had (AlterUserScramCredentials' upsertion).
type UpsertScramCredential struct {
	User       string
	Mechanism  ScramMechanism
	Credential ScramCredential
}

// DeleteScramCredential removes User's credential for Mechanism
// (RESOURCE_NOT_FOUND if there is none).
type DeleteScramCredential struct {
	User      string
	Mechanism ScramMechanism
}

// CreateACLs adds bindings; one already there is not added twice.
type CreateACLs struct {
	ACLs []ACLBinding
}

// DeleteACLs removes the listed bindings (exact matches: the proposer
// resolves DeleteAcls filters against its image); one not there is
// skipped.
type DeleteACLs struct {
	ACLs []ACLBinding
}

// Kind implements Record.
func (UpsertScramCredential) Kind() Kind { return KindUpsertScramCredential }

// Kind implements Record.
func (DeleteScramCredential) Kind() Kind { return KindDeleteScramCredential }

// Kind implements Record.
func (CreateACLs) Kind() Kind { return KindCreateACLs }

// Kind implements Record.
func (DeleteACLs) Kind() Kind { return KindDeleteACLs }

func (UpsertScramCredential) sealed() {}
func (DeleteScramCredential) sealed() {}
func (CreateACLs) sealed()            {}
func (DeleteACLs) sealed()            {}

// ScramCredential returns user's credential for m; the byte slices are
// shared with the image and must not be modified.
func (img *Image) ScramCredential(user string, m ScramMechanism) (ScramCredential, bool) {
	c, ok := img.scram[user][m]
	return c, ok
}

// ScramUsers returns the users with credentials, by name, each with its
// mechanisms in order.
func (img *Image) ScramUsers() []ScramUser {
	out := make([]ScramUser, 0, len(img.scram))
	for _, name := range slices.Sorted(maps.Keys(img.scram)) {
		u := ScramUser{Name: name}
		for _, m := range slices.Sorted(maps.Keys(img.scram[name])) {
			u.Mechanisms = append(u.Mechanisms, ScramUserMechanism{Mechanism: m, Iterations: img.scram[name][m].Iterations})
		}
		out = append(out, u)
	}
	return out
}

// ScramUser is a user's mechanisms and iteration counts (no secrets).
type ScramUser struct {
	Name       string
	Mechanisms []ScramUserMechanism
}

// ScramUserMechanism is one of a user's credentials, without secrets.
type ScramUserMechanism struct {
	Mechanism  ScramMechanism
	Iterations int32
}

// ACLs returns every binding, sorted. The slice is shared with the image
// and replaced (never modified) by a change, so its identity tells a
// cache whether the bindings changed.
func (img *Image) ACLs() []ACLBinding { return img.acls }

// checkScram refuses a credential no exchange could use.
func checkScram(user string, m ScramMechanism, c ScramCredential) *RefusedError {
	switch {
	case user == "":
		return refuse(kerr.UnacceptableCredential, "empty user name")
	case m.keySize() == 0:
		return refuse(kerr.UnsupportedSaslMechanism, "user %q: mechanism %d", user, m)
	case c.Iterations < 1:
		return refuse(kerr.UnacceptableCredential, "user %q: %d iterations", user, c.Iterations)
	case len(c.Salt) == 0 || len(c.Salt) > maxSecretSize:
		return refuse(kerr.UnacceptableCredential, "user %q: salt of %d bytes", user, len(c.Salt))
	case len(c.StoredKey) != m.keySize() || len(c.ServerKey) != m.keySize():
		return refuse(kerr.UnacceptableCredential, "user %q: keys of %d and %d bytes, want %d", user, len(c.StoredKey), len(c.ServerKey), m.keySize())
	}
	return nil
}

// checkACL refuses a binding with a wildcard or unknown enum or an empty
// string (what every valid binding has: the proposer checks the rest).
func checkACL(a ACLBinding) *RefusedError {
	switch {
	case a.ResourceType < 2 || a.ResourceType > 7:
		return refuse(kerr.InvalidRequest, "ACL resource type %d", a.ResourceType)
	case a.PatternType != 3 && a.PatternType != 4:
		return refuse(kerr.InvalidRequest, "ACL pattern type %d, want LITERAL (3) or PREFIXED (4)", a.PatternType)
	case a.Operation < 2 || a.Operation > 14:
		return refuse(kerr.InvalidRequest, "ACL operation %d", a.Operation)
	case a.Permission != 2 && a.Permission != 3:
		return refuse(kerr.InvalidRequest, "ACL permission %d, want DENY (2) or ALLOW (3)", a.Permission)
	case a.ResourceName == "" || a.Principal == "" || a.Host == "":
		return refuse(kerr.InvalidRequest, "ACL with an empty resource name, principal or host")
	}
	return nil
}

// checkListeners refuses listeners that are not named and addressed as
// RegisterBroker requires.
func checkListeners(ls []Listener) error {
	if len(ls) > maxListeners {
		return fmt.Errorf("%d listeners, the limit is %d", len(ls), maxListeners)
	}
	for i, l := range ls {
		if l.Name == "" || len(l.Name) > 64 || strings.Trim(l.Name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
			return fmt.Errorf("listener name %q: want 1-64 of [A-Z0-9_]", l.Name)
		}
		if err := validHostPort(l.Addr); err != nil {
			return fmt.Errorf("listener %s: %v", l.Name, err)
		}
		for _, o := range ls[:i] {
			if o.Name == l.Name {
				return fmt.Errorf("listener %s appears twice", l.Name)
			}
		}
	}
	return nil
}

func (t *txn) scramUsers() map[string]map[ScramMechanism]ScramCredential {
	if !t.ownScram {
		t.img.scram = maps.Clone(t.img.scram)
		t.ownScram = true
	}
	return t.img.scram
}

func (t *txn) upsertScram(r UpsertScramCredential) *RefusedError {
	if err := checkScram(r.User, r.Mechanism, r.Credential); err != nil {
		return err
	}
	users := t.scramUsers()
	creds := maps.Clone(users[r.User])
	if creds == nil {
		creds = map[ScramMechanism]ScramCredential{}
	}
	creds[r.Mechanism] = r.Credential
	users[r.User] = creds
	return nil
}

func (t *txn) deleteScram(r DeleteScramCredential) *RefusedError {
	if _, ok := t.img.scram[r.User][r.Mechanism]; !ok {
		return refuse(kerr.ResourceNotFound, "user %q has no credential for mechanism %d", r.User, r.Mechanism)
	}
	users := t.scramUsers()
	creds := maps.Clone(users[r.User])
	delete(creds, r.Mechanism)
	if len(creds) == 0 {
		delete(users, r.User)
	} else {
		users[r.User] = creds
	}
	return nil
}

func (t *txn) createACLs(r CreateACLs) *RefusedError {
	next := slices.Clone(t.img.acls)
	for _, a := range r.ACLs {
		if err := checkACL(a); err != nil {
			return err
		}
		if i, found := slices.BinarySearchFunc(next, a, compareACLs); !found {
			next = slices.Insert(next, i, a)
		}
	}
	if len(next) != len(t.img.acls) {
		t.img.acls = next
	}
	return nil
}

func (t *txn) deleteACLs(r DeleteACLs) *RefusedError {
	next := slices.Clone(t.img.acls)
	for _, a := range r.ACLs {
		if i, found := slices.BinarySearchFunc(next, a, compareACLs); found {
			next = slices.Delete(next, i, i+1)
		}
	}
	if len(next) != len(t.img.acls) {
		t.img.acls = next
	}
	return nil
}

// snapshotScram is one credential in a snapshot.
type snapshotScram struct {
	User      string         `json:"user"`
	Mechanism ScramMechanism `json:"mechanism"`
	ScramCredential
}

// scramList lists the credentials for a snapshot, by user and mechanism.
func (img *Image) scramList() []snapshotScram {
	var out []snapshotScram
	for _, name := range slices.Sorted(maps.Keys(img.scram)) {
		for _, m := range slices.Sorted(maps.Keys(img.scram[name])) {
			out = append(out, snapshotScram{User: name, Mechanism: m, ScramCredential: img.scram[name][m]})
		}
	}
	return out
}

// restoreSecurity checks and sets a snapshot's credentials and ACLs.
func (img *Image) restoreSecurity(scram []snapshotScram, acls []ACLBinding) error {
	for _, s := range scram {
		if err := checkScram(s.User, s.Mechanism, s.ScramCredential); err != nil {
			return errors.New(err.Reason)
		}
		if _, dup := img.scram[s.User][s.Mechanism]; dup {
			return fmt.Errorf("user %q mechanism %d appears twice", s.User, s.Mechanism)
		}
		if img.scram[s.User] == nil {
			img.scram[s.User] = map[ScramMechanism]ScramCredential{}
		}
		img.scram[s.User][s.Mechanism] = s.ScramCredential
	}
	for i, a := range acls {
		if err := checkACL(a); err != nil {
			return errors.New(err.Reason)
		}
		if i > 0 && compareACLs(acls[i-1], a) >= 0 {
			return fmt.Errorf("ACL %d is out of order or repeated", i)
		}
	}
	if len(acls) > 0 {
		img.acls = acls
	}
	return nil
}
