package netio

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/security"
)

// AlterUserScramCredentials (key 51, v0), served when the broker keeps
// credentials. Upsertions carry what the client derived (salt, salted
// password, iterations: the password itself never crosses the wire);
// the broker keeps StoredKey and ServerKey. Needs ALTER on the cluster.
// Errors per user, as in Kafka: UNSUPPORTED_SASL_MECHANISM,
// UNACCEPTABLE_CREDENTIAL (empty name or salt, iterations out of
// 4096..16384), DUPLICATE_RESOURCE (a user named twice in one request:
// nothing is changed for it), RESOURCE_NOT_FOUND (deleting a credential
// that does not exist). Each change is durable before the answer: saved
// on a single broker, committed to the metadata quorum in cluster mode
// (forwarded to the controller, which proposes it).
func handleAlterUserScramCredentials(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	store := s.cfg.Security.Writer
	allowed := r.clusterAllowed(kmsg.ACLOperationAlter)
	if allowed && s.forwardToController(r, req) {
		return frameDone
	}
	count := map[string]int{}
	for _, d := range req.Deletions {
		count[d.Name]++
	}
	for _, u := range req.Upsertions {
		count[u.Name]++
	}
	answered := map[string]bool{}
	answer := func(name string, err error) {
		if answered[name] {
			return
		}
		answered[name] = true
		res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		res.User = name
		if err != nil {
			res.ErrorCode, res.ErrorMessage = errCode(err), errMessage(err)
			r.failed = true
		}
		resp.Results = append(resp.Results, res)
	}
	check := func(name string, code int8) (security.Mechanism, error) {
		switch {
		case !allowed:
			return "", kerr.ClusterAuthorizationFailed
		case count[name] > 1:
			return "", fmt.Errorf("%w: a user may appear once per request", kerr.DuplicateResource)
		case name == "":
			return "", fmt.Errorf("%w: empty user name", kerr.UnacceptableCredential)
		}
		m, ok := security.MechanismFromCode(code)
		if !ok {
			return "", kerr.UnsupportedSaslMechanism
		}
		return m, nil
	}
	for _, d := range req.Deletions {
		m, err := check(d.Name, d.Mechanism)
		if err == nil {
			if err = store.DeleteCredential(d.Name, m); errors.Is(err, security.ErrNoSuchCredential) {
				err = fmt.Errorf("%w: %v", kerr.ResourceNotFound, err)
			}
		}
		answer(d.Name, err)
	}
	for _, u := range req.Upsertions {
		m, err := check(u.Name, u.Mechanism)
		if err == nil {
			var cred security.ScramCredential
			cred, err = security.FromSalted(m, u.Salt, u.SaltedPassword, int(u.Iterations))
			if err != nil {
				err = fmt.Errorf("%w: %v", kerr.UnacceptableCredential, err)
			} else {
				err = store.UpsertCredential(u.Name, cred)
			}
		}
		answer(u.Name, err)
	}
	r.respond(resp)
	return frameDone
}
