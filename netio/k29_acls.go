package netio

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/security"
)

// The ACL APIs: DescribeAcls (29), CreateAcls (30) and DeleteAcls (31),
// versions 0-3, served when the authorizer is on (without it Kafka
// answers SECURITY_DISABLED; here they are absent from ApiVersions).
// Describe needs DESCRIBE on the cluster, create and delete ALTER. On a
// single broker the bindings live in the data directory's security.json:
// each change is durable before the answer, and every request checked
// after it sees it. In cluster mode they live in the metadata image:
// create and delete are forwarded to the controller, which commits them
// to the quorum before the answer; each broker sees them once it has
// applied that record (Kafka's ACLs propagate the same way).
// Version 0 has no pattern type: its bindings and filters are LITERAL.

func handleDescribeAcls(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDescribeACLsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	f := security.ACLFilter{ResourceType: req.ResourceType, ResourceName: req.ResourceName, PatternType: req.ResourcePatternType,
		Principal: req.Principal, Host: req.Host, Operation: req.Operation, Permission: req.PermissionType}
	if r.version == 0 {
		f.PatternType = kmsg.ACLResourcePatternTypeLiteral
	}
	switch err := security.ValidateFilter(f); {
	case !r.clusterAllowed(kmsg.ACLOperationDescribe):
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
	case err != nil:
		resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, new(err.Error())
	default:
		type key struct {
			rt   kmsg.ACLResourceType
			name string
			pt   kmsg.ACLResourcePatternType
		}
		index := map[key]int{}
		for _, a := range s.cfg.Security.Source.ACLs() {
			if !f.Matches(a) {
				continue
			}
			k := key{a.ResourceType, a.ResourceName, a.PatternType}
			i, ok := index[k]
			if !ok {
				res := kmsg.NewDescribeACLsResponseResource()
				res.ResourceType, res.ResourceName, res.ResourcePatternType = k.rt, k.name, k.pt
				resp.Resources = append(resp.Resources, res)
				i = len(resp.Resources) - 1
				index[k] = i
			}
			acl := kmsg.NewDescribeACLsResponseResourceACL()
			acl.Principal, acl.Host, acl.Operation, acl.PermissionType = a.Principal, a.Host, a.Operation, a.Permission
			resp.Resources[i].ACLs = append(resp.Resources[i].ACLs, acl)
		}
	}
	r.failed = resp.ErrorCode != 0
	r.respond(resp)
	return frameDone
}

func handleCreateAcls(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrCreateACLsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	allowed := r.clusterAllowed(kmsg.ACLOperationAlter)
	if allowed && s.forwardToController(r, req) {
		return frameDone
	}
	acls := make([]security.ACL, 0, len(req.Creations))
	for _, c := range req.Creations {
		a := security.ACL{ResourceType: c.ResourceType, ResourceName: c.ResourceName, PatternType: c.ResourcePatternType,
			Principal: c.Principal, Host: c.Host, Operation: c.Operation, Permission: c.PermissionType}
		if r.version == 0 {
			a.PatternType = kmsg.ACLResourcePatternTypeLiteral
		}
		acls = append(acls, a)
	}
	var errs []error
	if allowed {
		errs = s.cfg.Security.Writer.CreateACLs(acls)
	}
	for i := range acls {
		res := kmsg.NewCreateACLsResponseResult()
		switch {
		case !allowed:
			res.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		case errs[i] != nil:
			res.ErrorCode, res.ErrorMessage = aclErrCode(errs[i]), new(errs[i].Error())
		}
		r.failed = r.failed || res.ErrorCode != 0
		resp.Results = append(resp.Results, res)
	}
	r.respond(resp)
	return frameDone
}

func handleDeleteAcls(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDeleteACLsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	allowed := r.clusterAllowed(kmsg.ACLOperationAlter)
	if allowed && s.forwardToController(r, req) {
		return frameDone
	}
	filters := make([]security.ACLFilter, 0, len(req.Filters))
	invalid := make([]error, len(req.Filters))
	var valid []security.ACLFilter
	for i, f := range req.Filters {
		af := security.ACLFilter{ResourceType: f.ResourceType, ResourceName: f.ResourceName, PatternType: f.ResourcePatternType,
			Principal: f.Principal, Host: f.Host, Operation: f.Operation, Permission: f.PermissionType}
		if r.version == 0 {
			af.PatternType = kmsg.ACLResourcePatternTypeLiteral
		}
		filters = append(filters, af)
		if invalid[i] = security.ValidateFilter(af); invalid[i] == nil {
			valid = append(valid, af)
		}
	}
	var deleted [][]security.ACL
	var storeErr error
	if allowed && len(valid) > 0 {
		deleted, storeErr = s.cfg.Security.Writer.DeleteACLs(valid)
	}
	next := 0
	for i := range filters {
		res := kmsg.NewDeleteACLsResponseResult()
		switch {
		case !allowed:
			res.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		case invalid[i] != nil:
			res.ErrorCode, res.ErrorMessage = kerr.InvalidRequest.Code, new(invalid[i].Error())
		case storeErr != nil:
			res.ErrorCode, res.ErrorMessage = kerr.UnknownServerError.Code, new(fmt.Sprintf("saving the ACLs: %v", storeErr))
			next++
		default:
			for _, a := range deleted[next] {
				m := kmsg.NewDeleteACLsResponseResultMatchingACL()
				m.ResourceType, m.ResourceName, m.ResourcePatternType = a.ResourceType, a.ResourceName, a.PatternType
				m.Principal, m.Host, m.Operation, m.PermissionType = a.Principal, a.Host, a.Operation, a.Permission
				res.MatchingACLs = append(res.MatchingACLs, m)
			}
			next++
		}
		r.failed = r.failed || res.ErrorCode != 0
		resp.Results = append(resp.Results, res)
	}
	r.respond(resp)
	return frameDone
}

// aclErrCode is the code of a binding CreateAcls refuses: INVALID_REQUEST
// for an invalid one, else (a failed save) UNKNOWN_SERVER_ERROR.
func aclErrCode(err error) int16 {
	if errors.Is(err, security.ErrInvalidACL) {
		return kerr.InvalidRequest.Code
	}
	return errCode(err)
}
