package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/metadata"
	"github.com/ringlog/ringlog/security"
)

// Credentials and ACLs in cluster mode live in the metadata image
// (metadata.UpsertScramCredential, CreateACLs, ...): every broker reads
// them from its own image through Security (a security.Source), and the
// controller changes them by proposing records through Security's Writer
// methods. A broker that is not the controller forwards the Kafka request
// (AlterUserScramCredentials, CreateAcls, DeleteAcls) to it first
// (Forward), after checking its own client's authorization.

// securityTimeout bounds one proposal of a credential or ACL change.
const securityTimeout = 30 * time.Second

// Security is the cluster's credentials and ACLs: a security.Source over
// the current image, and on the controller a security.Writer that
// proposes changes.
type Security struct {
	security.Decoys
	c *Cluster
	// acls caches the image's bindings converted for the authorizer,
	// keyed by the identity of the image's slice (a change replaces it).
	acls atomic.Pointer[aclCache]
	// mu serialises changes, so a DeleteACLs resolves its filters
	// against an image no other change of this broker is about to move.
	mu sync.Mutex
}

type aclCache struct {
	from []metadata.ACLBinding
	acls []security.ACL
}

// Security returns the cluster's credentials and ACLs (one per Cluster).
func (c *Cluster) Security() *Security { return c.sec }

func newSecurity(c *Cluster) (*Security, error) {
	d, err := security.NewDecoys()
	if err != nil {
		return nil, err
	}
	return &Security{Decoys: d, c: c}, nil
}

// mechanismCode maps a security mechanism to the image's.
func mechanismCode(m security.Mechanism) metadata.ScramMechanism {
	return metadata.ScramMechanism(m.Code())
}

// Credential implements security.Source.
func (s *Security) Credential(user string, m security.Mechanism) (security.ScramCredential, bool) {
	c, ok := s.c.Image().ScramCredential(user, mechanismCode(m))
	if !ok {
		return security.ScramCredential{}, false
	}
	return security.ScramCredential{Mechanism: m, Salt: clone(c.Salt), Iterations: int(c.Iterations),
		StoredKey: clone(c.StoredKey), ServerKey: clone(c.ServerKey)}, true
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// Users implements security.Source.
func (s *Security) Users() []security.UserInfo {
	var out []security.UserInfo
	for _, u := range s.c.Image().ScramUsers() {
		info := security.UserInfo{Name: u.Name}
		for _, m := range u.Mechanisms {
			mech, ok := security.MechanismFromCode(int8(m.Mechanism))
			if !ok {
				continue
			}
			info.Mechanisms = append(info.Mechanisms, security.MechanismInfo{Mechanism: mech, Iterations: int(m.Iterations)})
		}
		out = append(out, info)
	}
	return out
}

// ACLs implements security.Source. It converts the image's bindings once
// per change and then returns the cached slice, so the authorizer's
// decisions stay allocation-free.
func (s *Security) ACLs() []security.ACL {
	from := s.c.Image().ACLs()
	if cur := s.acls.Load(); cur != nil && sameSlice(cur.from, from) {
		return cur.acls
	}
	acls := aclsOf(from)
	s.acls.Store(&aclCache{from: from, acls: acls})
	return acls
}

// sameSlice reports whether a and b are the same slice (not just equal):
// the image replaces its bindings' slice on every change.
func sameSlice(a, b []metadata.ACLBinding) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// aclsOf is the image's bindings as the authorizer reads them.
func aclsOf(from []metadata.ACLBinding) []security.ACL {
	acls := make([]security.ACL, len(from))
	for i, b := range from {
		acls[i] = security.ACLOfCodes(b.ResourceType, b.ResourceName, b.PatternType, b.Principal, b.Host, b.Operation, b.Permission)
	}
	return acls
}

// binding is an ACL as the image keeps it.
func binding(a security.ACL) metadata.ACLBinding {
	return metadata.ACLBinding{ResourceType: int8(a.ResourceType), ResourceName: a.ResourceName, PatternType: int8(a.PatternType),
		Principal: a.Principal, Host: a.Host, Operation: int8(a.Operation), Permission: int8(a.Permission)}
}

// propose commits rec on the controller; on another broker (the
// controller moved since the request was routed here) it is
// NOT_CONTROLLER.
func (s *Security) propose(rec metadata.Record) error {
	if !s.c.node.IsLeader() {
		return fmt.Errorf("%w: the controller moved", kerr.NotController)
	}
	ctx, cancel := context.WithTimeout(context.Background(), securityTimeout)
	defer cancel()
	_, err := s.c.propose(ctx, rec)
	return err
}

// UpsertCredential implements security.Writer.
func (s *Security) UpsertCredential(user string, c security.ScramCredential) error {
	if err := security.CheckUserName(user); err != nil {
		return fmt.Errorf("%w: %v", kerr.UnacceptableCredential, err)
	}
	if err := c.Check(); err != nil {
		return fmt.Errorf("%w: user %q: %v", kerr.UnacceptableCredential, user, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.propose(metadata.UpsertScramCredential{User: user, Mechanism: mechanismCode(c.Mechanism),
		Credential: metadata.ScramCredential{Iterations: int32(c.Iterations), Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey}})
}

// DeleteCredential implements security.Writer.
func (s *Security) DeleteCredential(user string, m security.Mechanism) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.propose(metadata.DeleteScramCredential{User: user, Mechanism: mechanismCode(m)})
	if errors.Is(err, kerr.ResourceNotFound) {
		return fmt.Errorf("user %q, %s: %w", user, m, security.ErrNoSuchCredential)
	}
	return err
}

// CreateACLs implements security.Writer: the valid bindings are proposed
// in one record; an invalid one gets its own error, a failed proposal
// fails every valid one.
func (s *Security) CreateACLs(add []security.ACL) []error {
	errs := make([]error, len(add))
	var rec metadata.CreateACLs
	for i, a := range add {
		if errs[i] = a.Validate(); errs[i] == nil {
			rec.ACLs = append(rec.ACLs, binding(a))
		}
	}
	if len(rec.ACLs) == 0 {
		return errs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.propose(rec); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	return errs
}

// DeleteACLs implements security.Writer: the filters are resolved
// against this (the controller's) image, and the matching bindings are
// deleted in one record.
func (s *Security) DeleteACLs(filters []security.ACLFilter) ([][]security.ACL, error) {
	for i, f := range filters {
		if err := security.ValidateFilter(f); err != nil {
			return nil, fmt.Errorf("filter %d: %w", i, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Resolve the filters against everything committed, not just what
	// this (possibly new) controller has applied so far.
	ctx, cancel := context.WithTimeout(context.Background(), securityTimeout)
	defer cancel()
	img, err := s.c.node.ConsistentImage(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", kerr.NotController, err)
	}
	matched, _, removed := security.MatchFilters(aclsOf(img.ACLs()), filters)
	var rec metadata.DeleteACLs
	for _, a := range removed {
		rec.ACLs = append(rec.ACLs, binding(a))
	}
	if len(rec.ACLs) == 0 {
		return matched, nil
	}
	if err := s.propose(rec); err != nil {
		return nil, err
	}
	return matched, nil
}

var (
	_ security.Source = (*Security)(nil)
	_ security.Writer = (*Security)(nil)
)
