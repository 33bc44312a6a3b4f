package security

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrInvalidACL is a binding or a filter that cannot be stored or used.
var ErrInvalidACL = errors.New("invalid ACL")

// The names Kafka gives special meaning in bindings.
const (
	// WildcardResource, as a LITERAL binding's name, is every resource
	// of its type.
	WildcardResource = "*"
	// WildcardPrincipal is every user.
	WildcardPrincipal = "User:*"
	// WildcardHost is every host.
	WildcardHost = "*"
	// ClusterName is the one name of the CLUSTER resource.
	ClusterName = "kafka-cluster"
)

// ACL is one binding, as Kafka's AclBinding: a resource pattern (type,
// name, pattern type) and an access control entry (principal, host,
// operation, permission). The enums are kmsg's, so a request's fields
// pass straight through; in JSON they are Kafka's names ("TOPIC").
type ACL struct {
	ResourceType kmsg.ACLResourceType        `json:"resource_type"`
	ResourceName string                      `json:"resource_name"`
	PatternType  kmsg.ACLResourcePatternType `json:"pattern_type"`
	Principal    string                      `json:"principal"`
	Host         string                      `json:"host"`
	Operation    kmsg.ACLOperation           `json:"operation"`
	Permission   kmsg.ACLPermissionType      `json:"permission"`
}

// ACLOfCodes is the ACL with Kafka's codes of its resource type, pattern
// type, operation and permission (as the cluster's metadata keeps them).
func ACLOfCodes(resourceType int8, resourceName string, patternType int8, principal, host string, operation, permission int8) ACL {
	return ACL{ResourceType: kmsg.ACLResourceType(resourceType), ResourceName: resourceName,
		PatternType: kmsg.ACLResourcePatternType(patternType), Principal: principal, Host: host,
		Operation: kmsg.ACLOperation(operation), Permission: kmsg.ACLPermissionType(permission)}
}

// Validate refuses what Kafka's CreateAcls refuses: wildcard enums (ANY,
// MATCH) and UNKNOWN ones, an empty name, a cluster not named
// kafka-cluster, a principal not of the form User:NAME or User:*, an
// empty host. Text that is not UTF-8 is refused too: the store's JSON
// could not keep it as it is.
func (a ACL) Validate() error {
	switch {
	case !concreteResource(a.ResourceType):
		return fmt.Errorf("%w: resource type %v", ErrInvalidACL, a.ResourceType)
	case a.PatternType != kmsg.ACLResourcePatternTypeLiteral && a.PatternType != kmsg.ACLResourcePatternTypePrefixed:
		return fmt.Errorf("%w: pattern type %v, want LITERAL or PREFIXED", ErrInvalidACL, a.PatternType)
	case !concreteOperation(a.Operation):
		return fmt.Errorf("%w: operation %v", ErrInvalidACL, a.Operation)
	case a.Permission != kmsg.ACLPermissionTypeAllow && a.Permission != kmsg.ACLPermissionTypeDeny:
		return fmt.Errorf("%w: permission %v, want ALLOW or DENY", ErrInvalidACL, a.Permission)
	case a.ResourceName == "":
		return fmt.Errorf("%w: empty resource name", ErrInvalidACL)
	case a.ResourceType == kmsg.ACLResourceTypeCluster && a.ResourceName != ClusterName:
		return fmt.Errorf("%w: cluster resource %q, the only one is %s", ErrInvalidACL, a.ResourceName, ClusterName)
	case !validPrincipal(a.Principal):
		return fmt.Errorf("%w: principal %q, want User:NAME or %s", ErrInvalidACL, a.Principal, WildcardPrincipal)
	case a.Host == "":
		return fmt.Errorf("%w: empty host (%s is any host)", ErrInvalidACL, WildcardHost)
	case !utf8.ValidString(a.ResourceName) || !utf8.ValidString(a.Host):
		return fmt.Errorf("%w: resource name or host is not UTF-8", ErrInvalidACL)
	}
	return nil
}

// concreteResource: a resource type a binding can name (not ANY, not
// UNKNOWN, not out of range).
func concreteResource(rt kmsg.ACLResourceType) bool {
	return rt >= kmsg.ACLResourceTypeTopic && rt <= kmsg.ACLResourceTypeUser
}

// concreteOperation: an operation a binding can name (ALL included).
func concreteOperation(op kmsg.ACLOperation) bool {
	return op >= kmsg.ACLOperationAll && op <= kmsg.ACLOperationDescribeTokens
}

func validPrincipal(p string) bool {
	name, ok := strings.CutPrefix(p, "User:")
	return ok && name != "" && utf8.ValidString(name)
}

// ACLFilter selects bindings, as Kafka's AclBindingFilter. ResourceType,
// Operation and Permission ANY and nil ResourceName, Principal and Host
// match every binding. PatternType ANY matches every pattern type (the
// name, if set, exactly); LITERAL and PREFIXED match bindings of that
// type (the name, if set, exactly); MATCH matches the bindings that apply
// to a resource of that name: the LITERAL one of the same name, the
// LITERAL "*", and the PREFIXED ones whose name is a prefix of it.
type ACLFilter struct {
	ResourceType kmsg.ACLResourceType
	ResourceName *string
	PatternType  kmsg.ACLResourcePatternType
	Principal    *string
	Host         *string
	Operation    kmsg.ACLOperation
	Permission   kmsg.ACLPermissionType
}

// MatchFilters splits acls by filters (DeleteAcls' semantics): matched
// holds, per filter, the bindings it matches (a binding two filters match
// is listed under both); kept the bindings no filter matches, removed the
// others, each in acls' order.
func MatchFilters(acls []ACL, filters []ACLFilter) (matched [][]ACL, kept, removed []ACL) {
	matched = make([][]ACL, len(filters))
	kept = make([]ACL, 0, len(acls))
	for _, a := range acls {
		hit := false
		for i, f := range filters {
			if f.Matches(a) {
				matched[i] = append(matched[i], a)
				hit = true
			}
		}
		if hit {
			removed = append(removed, a)
		} else {
			kept = append(kept, a)
		}
	}
	return matched, kept, removed
}

// ValidateFilter refuses a filter with an UNKNOWN or out-of-range enum;
// the error wraps ErrInvalidACL.
func ValidateFilter(f ACLFilter) error {
	switch {
	case f.ResourceType != kmsg.ACLResourceTypeAny && !concreteResource(f.ResourceType):
		return fmt.Errorf("%w: filter resource type %v", ErrInvalidACL, f.ResourceType)
	case f.PatternType < kmsg.ACLResourcePatternTypeAny || f.PatternType > kmsg.ACLResourcePatternTypePrefixed:
		return fmt.Errorf("%w: filter pattern type %v", ErrInvalidACL, f.PatternType)
	case f.Operation != kmsg.ACLOperationAny && !concreteOperation(f.Operation):
		return fmt.Errorf("%w: filter operation %v", ErrInvalidACL, f.Operation)
	case f.Permission < kmsg.ACLPermissionTypeAny || f.Permission > kmsg.ACLPermissionTypeAllow:
		return fmt.Errorf("%w: filter permission %v", ErrInvalidACL, f.Permission)
	}
	return nil
}

// Matches reports whether the filter selects a.
func (f ACLFilter) Matches(a ACL) bool {
	switch {
	case f.ResourceType != kmsg.ACLResourceTypeAny && f.ResourceType != a.ResourceType:
		return false
	case !f.matchesPattern(a):
		return false
	case f.Principal != nil && *f.Principal != a.Principal:
		return false
	case f.Host != nil && *f.Host != a.Host:
		return false
	case f.Operation != kmsg.ACLOperationAny && f.Operation != a.Operation:
		return false
	}
	return f.Permission == kmsg.ACLPermissionTypeAny || f.Permission == a.Permission
}

// matchesPattern is the filter's pattern type and name against a's.
func (f ACLFilter) matchesPattern(a ACL) bool {
	switch f.PatternType {
	case kmsg.ACLResourcePatternTypeAny:
	case kmsg.ACLResourcePatternTypeMatch:
		if f.ResourceName == nil {
			return true
		}
		return a.appliesTo(*f.ResourceName)
	default:
		if f.PatternType != a.PatternType {
			return false
		}
	}
	return f.ResourceName == nil || *f.ResourceName == a.ResourceName
}

// appliesTo reports whether a's resource pattern covers the resource
// named name: the same literal name, the literal wildcard, or a prefix.
func (a *ACL) appliesTo(name string) bool {
	if a.PatternType == kmsg.ACLResourcePatternTypePrefixed {
		return strings.HasPrefix(name, a.ResourceName)
	}
	return a.ResourceName == name || a.ResourceName == WildcardResource
}
