package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeUserScramCredentials (key 50, v0), served when the broker keeps
// credentials (a SASL listener or the authorizer is on). It lists each
// user's mechanisms and iteration counts, never salts or keys. Needs
// DESCRIBE on the cluster. A user named without credentials gets
// RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE, as in Kafka.
func handleDescribeUserScramCredentials(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if !r.clusterAllowed(kmsg.ACLOperationDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		r.failed = true
		r.respond(resp)
		return frameDone
	}
	users := s.cfg.Security.Source.Users()
	infos := map[string][]kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{}
	for _, u := range users {
		for _, m := range u.Mechanisms {
			infos[u.Name] = append(infos[u.Name], kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{
				Mechanism: m.Mechanism.Code(), Iterations: int32(m.Iterations)})
		}
	}
	result := func(name string) kmsg.DescribeUserSCRAMCredentialsResponseResult {
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User, res.CredentialInfos = name, infos[name]
		return res
	}
	if req.Users == nil {
		for _, u := range users {
			resp.Results = append(resp.Results, result(u.Name))
		}
		r.respond(resp)
		return frameDone
	}
	seen := map[string]int{}
	for _, u := range req.Users {
		seen[u.Name]++
	}
	for _, u := range req.Users {
		if seen[u.Name] == 0 {
			continue // a duplicate, answered once
		}
		res := result(u.Name)
		switch {
		case seen[u.Name] > 1:
			res.ErrorCode, res.CredentialInfos = kerr.DuplicateResource.Code, nil
			res.ErrorMessage = new("user " + u.Name + " named more than once")
		case len(res.CredentialInfos) == 0:
			res.ErrorCode = kerr.ResourceNotFound.Code
			res.ErrorMessage = new("user " + u.Name + " has no SCRAM credentials")
		}
		r.failed = r.failed || res.ErrorCode != 0
		seen[u.Name] = 0
		resp.Results = append(resp.Results, res)
	}
	r.respond(resp)
	return frameDone
}
