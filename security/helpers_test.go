package security

import (
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// newStore is an empty store in a fresh directory.
func newStore(t testing.TB) *Store {
	t.Helper()
	s, err := OpenStore(filepath.Join(t.TempDir(), "security.json"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mustCred derives a credential with the fewest iterations Kafka allows.
func mustCred(t testing.TB, m Mechanism, pass string) ScramCredential {
	t.Helper()
	c, err := NewScramCredential(m, pass, MinIterations, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// addUser gives user a credential for password under each mechanism.
func addUser(t testing.TB, s *Store, user, pass string, mechs ...Mechanism) {
	t.Helper()
	for _, m := range mechs {
		if err := s.UpsertCredential(user, mustCred(t, m, pass)); err != nil {
			t.Fatal(err)
		}
	}
}

// mustCreate adds bindings that must all be valid.
func mustCreate(t testing.TB, s *Store, acls ...ACL) {
	t.Helper()
	for i, err := range s.CreateACLs(acls) {
		if err != nil {
			t.Fatalf("ACL %d %+v: %v", i, acls[i], err)
		}
	}
}

// Short names for the enums the tables use.
const (
	topic   = kmsg.ACLResourceTypeTopic
	group   = kmsg.ACLResourceTypeGroup
	cluster = kmsg.ACLResourceTypeCluster
	lit     = kmsg.ACLResourcePatternTypeLiteral
	pre     = kmsg.ACLResourcePatternTypePrefixed
	allow   = kmsg.ACLPermissionTypeAllow
	deny    = kmsg.ACLPermissionTypeDeny

	opAll       = kmsg.ACLOperationAll
	opRead      = kmsg.ACLOperationRead
	opWrite     = kmsg.ACLOperationWrite
	opCreate    = kmsg.ACLOperationCreate
	opDelete    = kmsg.ACLOperationDelete
	opAlter     = kmsg.ACLOperationAlter
	opDescribe  = kmsg.ACLOperationDescribe
	opDescCfg   = kmsg.ACLOperationDescribeConfigs
	opAlterCfg  = kmsg.ACLOperationAlterConfigs
	opIdemWrite = kmsg.ACLOperationIdempotentWrite
)

// binding is an ACL on any host.
func binding(rt kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType, principal string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) ACL {
	return ACL{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: principal, Host: "*", Operation: op, Permission: perm}
}

func ptr(s string) *string { return &s }
