package security

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ACL is one binding, as Kafka's AclBinding: a resource pattern and an
// access control entry.
type ACL struct {
	ResourceType kmsg.ACLResourceType        `json:"resource_type"`
	ResourceName string                      `json:"resource_name"`
	PatternType  kmsg.ACLResourcePatternType `json:"pattern_type"`
	Principal    string                      `json:"principal"`
	Host         string                      `json:"host"`
	Operation    kmsg.ACLOperation           `json:"operation"`
	Permission   kmsg.ACLPermissionType      `json:"permission"`
}

// ErrInvalidACL is a binding or filter that cannot be stored or used.
var ErrInvalidACL = errors.New("invalid ACL")

// validate refuses what Kafka's CreateAcls refuses.
func (a ACL) validate() error {
	switch {
	case !concreteResource(a.ResourceType):
		return fmt.Errorf("%w: resource type %v", ErrInvalidACL, a.ResourceType)
	case a.PatternType != kmsg.ACLResourcePatternTypeLiteral && a.PatternType != kmsg.ACLResourcePatternTypePrefixed:
		return fmt.Errorf("%w: pattern type %v (LITERAL or PREFIXED)", ErrInvalidACL, a.PatternType)
	case a.ResourceName == "":
		return fmt.Errorf("%w: empty resource name", ErrInvalidACL)
	case a.ResourceType == kmsg.ACLResourceTypeCluster && a.ResourceName != "kafka-cluster":
		return fmt.Errorf("%w: the cluster resource is named kafka-cluster", ErrInvalidACL)
	case !concreteOperation(a.Operation):
		return fmt.Errorf("%w: operation %v", ErrInvalidACL, a.Operation)
	case a.Permission != kmsg.ACLPermissionTypeAllow && a.Permission != kmsg.ACLPermissionTypeDeny:
		return fmt.Errorf("%w: permission %v (ALLOW or DENY)", ErrInvalidACL, a.Permission)
	case !validPrincipal(a.Principal):
		return fmt.Errorf("%w: principal %q (User:NAME or User:*)", ErrInvalidACL, a.Principal)
	case a.Host == "":
		return fmt.Errorf("%w: empty host (* is any host)", ErrInvalidACL)
	}
	return nil
}

func concreteResource(rt kmsg.ACLResourceType) bool {
	switch rt {
	case kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeCluster,
		kmsg.ACLResourceTypeTransactionalId, kmsg.ACLResourceTypeDelegationToken, kmsg.ACLResourceTypeUser:
		return true
	}
	return false
}

func concreteOperation(op kmsg.ACLOperation) bool {
	return op >= kmsg.ACLOperationAll && op <= kmsg.ACLOperationDescribeTokens
}

func validPrincipal(p string) bool {
	name, ok := strings.CutPrefix(p, "User:")
	return ok && name != ""
}

// ACLFilter selects bindings, as Kafka's AclBindingFilter: ANY and nil
// fields match everything; pattern type MATCH matches the bindings that
// would apply to a resource of that name (the literal one, the literal
// "*", and the prefixed ones that are prefixes of it).
type ACLFilter struct {
	ResourceType kmsg.ACLResourceType
	ResourceName *string
	PatternType  kmsg.ACLResourcePatternType
	Principal    *string
	Host         *string
	Operation    kmsg.ACLOperation
	Permission   kmsg.ACLPermissionType
}

// ValidateFilter refuses a filter with an unknown enum value.
func ValidateFilter(f ACLFilter) error {
	switch {
	case f.ResourceType != kmsg.ACLResourceTypeAny && !concreteResource(f.ResourceType):
		return fmt.Errorf("%w: filter resource type %v", ErrInvalidACL, f.ResourceType)
	case f.PatternType < kmsg.ACLResourcePatternTypeAny || f.PatternType > kmsg.ACLResourcePatternTypePrefixed:
		return fmt.Errorf("%w: filter pattern type %v", ErrInvalidACL, f.PatternType)
	case f.Operation != kmsg.ACLOperationAny && !concreteOperation(f.Operation):
		return fmt.Errorf("%w: filter operation %v", ErrInvalidACL, f.Operation)
	case f.Permission != kmsg.ACLPermissionTypeAny && f.Permission != kmsg.ACLPermissionTypeAllow && f.Permission != kmsg.ACLPermissionTypeDeny:
		return fmt.Errorf("%w: filter permission %v", ErrInvalidACL, f.Permission)
	}
	return nil
}

// Matches reports whether the filter selects a.
func (f ACLFilter) Matches(a ACL) bool {
	if f.ResourceType != kmsg.ACLResourceTypeAny && f.ResourceType != a.ResourceType {
		return false
	}
	if !f.matchesPattern(a) {
		return false
	}
	if f.Principal != nil && *f.Principal != a.Principal {
		return false
	}
	if f.Host != nil && *f.Host != a.Host {
		return false
	}
	if f.Operation != kmsg.ACLOperationAny && f.Operation != a.Operation {
		return false
	}
	return f.Permission == kmsg.ACLPermissionTypeAny || f.Permission == a.Permission
}

func (f ACLFilter) matchesPattern(a ACL) bool {
	switch f.PatternType {
	case kmsg.ACLResourcePatternTypeMatch:
		if f.ResourceName == nil {
			return true
		}
		name := *f.ResourceName
		if a.PatternType == kmsg.ACLResourcePatternTypePrefixed {
			return strings.HasPrefix(name, a.ResourceName)
		}
		return a.ResourceName == name || a.ResourceName == "*"
	case kmsg.ACLResourcePatternTypeAny:
	default:
		if f.PatternType != a.PatternType {
			return false
		}
	}
	return f.ResourceName == nil || *f.ResourceName == a.ResourceName
}

// Authorizer decides requests from the Store's ACLs, as Kafka's
// StandardAuthorizer: super users may do everything; otherwise a matching
// DENY wins, then a matching ALLOW allows, and nothing matching denies.
type Authorizer struct {
	store *Store
	super map[string]bool
}

// NewAuthorizer decides from store's ACLs, with superUsers ("User:admin")
// allowed everything.
func NewAuthorizer(store *Store, superUsers []string) *Authorizer {
	a := &Authorizer{store: store, super: map[string]bool{}}
	for _, u := range superUsers {
		a.super[u] = true
	}
	return a
}

// Authorize reports whether principal, connected from host, may do op on
// the resource rt/name. It reads an immutable snapshot of the ACLs and
// allocates nothing.
func (a *Authorizer) Authorize(principal, host string, op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	if a.super[principal] {
		return true
	}
	allowed := false
	acls := *a.store.acls.Load()
	for i := range acls {
		b := &acls[i]
		if b.ResourceType != rt || !b.appliesTo(name) || !b.principalMatches(principal) || (b.Host != "*" && b.Host != host) {
			continue
		}
		if b.Permission == kmsg.ACLPermissionTypeDeny {
			if b.Operation == op || b.Operation == kmsg.ACLOperationAll {
				return false
			}
			continue
		}
		allowed = allowed || grants(b.Operation, op)
	}
	return allowed
}

func (b *ACL) appliesTo(name string) bool {
	if b.PatternType == kmsg.ACLResourcePatternTypePrefixed {
		return strings.HasPrefix(name, b.ResourceName)
	}
	return b.ResourceName == name || b.ResourceName == "*"
}

func (b *ACL) principalMatches(p string) bool { return b.Principal == p || b.Principal == "User:*" }

// grants reports whether an ALLOW of have allows want: the same
// operation, ALL, or Kafka's implications (READ, WRITE, DELETE and ALTER
// imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS).
func grants(have, want kmsg.ACLOperation) bool {
	switch {
	case have == want, have == kmsg.ACLOperationAll:
		return true
	case want == kmsg.ACLOperationDescribe:
		return have == kmsg.ACLOperationRead || have == kmsg.ACLOperationWrite || have == kmsg.ACLOperationDelete || have == kmsg.ACLOperationAlter
	case want == kmsg.ACLOperationDescribeConfigs:
		return have == kmsg.ACLOperationAlterConfigs
	}
	return false
}
