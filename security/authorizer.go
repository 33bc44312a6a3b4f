package security

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Authorizer decides requests from a Source's ACLs with the semantics of
// Kafka's StandardAuthorizer: super users may do everything; otherwise a
// matching DENY wins over any ALLOW, and with no matching ALLOW the
// request is denied. It reads the ACLs through the source's immutable
// snapshot (Source.ACLs), so a decision takes no lock and allocates
// nothing. Every decision after a change has returned sees it on a
// single broker; in cluster mode, once this broker has applied the
// change's record (at once on the controller, within a Raft round trip
// elsewhere).
type Authorizer struct {
	src   Source
	super map[string]bool // read-only after NewAuthorizer
}

// NewAuthorizer decides from src's ACLs, allowing superUsers
// (principals, "User:admin") everything.
func NewAuthorizer(src Source, superUsers []string) *Authorizer {
	a := &Authorizer{src: src, super: make(map[string]bool, len(superUsers))}
	for _, u := range superUsers {
		a.super[u] = true
	}
	return a
}

// IsSuper reports whether principal is a super user.
func (a *Authorizer) IsSuper(principal string) bool { return a.super[principal] }

// Authorize reports whether principal ("User:alice"), connected from
// host, may do op on the resource of type rt named name. A binding
// matches when its resource type is rt, its pattern covers name (the same
// literal name, the literal "*", or a PREFIXED prefix of name), its
// principal is principal or User:*, its host is host or *, and its
// operation is op or ALL; an ALLOW of READ, WRITE, DELETE or ALTER also
// allows DESCRIBE, and one of ALTER_CONFIGS allows DESCRIBE_CONFIGS (a
// DENY implies nothing).
func (a *Authorizer) Authorize(principal, host string, op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	if a.super[principal] {
		return true
	}
	allowed := false
	acls := a.src.ACLs()
	for i := range acls {
		b := &acls[i]
		if b.ResourceType != rt || !b.appliesTo(name) ||
			(b.Principal != principal && b.Principal != WildcardPrincipal) ||
			(b.Host != host && b.Host != WildcardHost) {
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

// grants reports whether an ALLOW of have allows want: the same
// operation, ALL, or one of Kafka's implications.
func grants(have, want kmsg.ACLOperation) bool {
	switch {
	case have == want, have == kmsg.ACLOperationAll:
		return true
	case want == kmsg.ACLOperationDescribe:
		switch have {
		case kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDelete, kmsg.ACLOperationAlter:
			return true
		}
	case want == kmsg.ACLOperationDescribeConfigs:
		return have == kmsg.ACLOperationAlterConfigs
	}
	return false
}
