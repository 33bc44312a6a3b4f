package main

// Errors that name their fix, for every command that talks to a broker:
// an authorization failure says which operation on which resource the
// request needed and the `ringlog acl add` that grants it (the table of
// what each request needs is aclNeed, the one place it is kept), and a
// failed TLS handshake says which flag or certificate to change
// (tlsHint).

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/security"
)

// aclResource is a resource the broker's ACLs protect, as a command named
// it: a topic, a group, a transactional id, or the cluster.
type aclResource struct {
	typ  kmsg.ACLResourceType
	name string
}

func topicResource(name string) aclResource { return aclResource{kmsg.ACLResourceTypeTopic, name} }
func groupResource(name string) aclResource { return aclResource{kmsg.ACLResourceTypeGroup, name} }
func txnResource(id string) aclResource {
	return aclResource{kmsg.ACLResourceTypeTransactionalId, id}
}

// clusterResource is Kafka's one CLUSTER resource.
func clusterResource() aclResource {
	return aclResource{kmsg.ACLResourceTypeCluster, security.ClusterName}
}

// String is the resource for people: `topic "orders"`, `the cluster`.
func (r aclResource) String() string {
	switch r.typ {
	case kmsg.ACLResourceTypeCluster:
		return "the cluster"
	case kmsg.ACLResourceTypeTransactionalId:
		return fmt.Sprintf("transactional id %q", r.name)
	}
	return fmt.Sprintf("%s %q", strings.ToLower(r.typ.String()), r.name)
}

// flag is the resource as `ringlog acl` selects it: --topic orders.
func (r aclResource) flag() string {
	switch r.typ {
	case kmsg.ACLResourceTypeCluster:
		return "--cluster"
	case kmsg.ACLResourceTypeTransactionalId:
		return "--transactional-id " + shellQuote(r.name)
	}
	return "--" + strings.ToLower(r.typ.String()) + " " + shellQuote(r.name)
}

// deniedResourceType is the resource type an authorization error code is
// about (UNKNOWN for other errors).
func deniedResourceType(err error) (kmsg.ACLResourceType, *kerr.Error) {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return kmsg.ACLResourceTypeUnknown, nil
	}
	switch ke.Code {
	case kerr.TopicAuthorizationFailed.Code:
		return kmsg.ACLResourceTypeTopic, ke
	case kerr.GroupAuthorizationFailed.Code:
		return kmsg.ACLResourceTypeGroup, ke
	case kerr.ClusterAuthorizationFailed.Code:
		return kmsg.ACLResourceTypeCluster, ke
	case kerr.TransactionalIDAuthorizationFailed.Code:
		return kmsg.ACLResourceTypeTransactionalId, ke
	}
	return kmsg.ACLResourceTypeUnknown, nil
}

// isDenied reports whether err is an authorization failure.
func isDenied(err error) bool {
	_, code := deniedResourceType(err)
	return code != nil
}

// aclNeed is what the broker checks for request api on a resource of
// type rt, as Kafka's authorizer does (netio's handlers check the same):
// the operation, and, for requests on the cluster, what the request does
// (the resource alone does not say it). An api that needs more than one
// operation is given the one that covers the others where one does (WRITE
// and READ imply DESCRIBE), so that a command's api can be the request
// its work is for (Produce for everything `produce` sends). Unknown
// pairs are ACLOperationUnknown.
func aclNeed(api kmsg.Key, rt kmsg.ACLResourceType) (op kmsg.ACLOperation, purpose string) {
	switch api {
	case kmsg.Produce:
		return kmsg.ACLOperationWrite, "" // on the cluster: InitProducerId, which WRITE on the topic also allows
	case kmsg.Fetch, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.LeaveGroup, kmsg.OffsetCommit, kmsg.DescribeProducers:
		return kmsg.ACLOperationRead, ""
	case kmsg.TxnOffsetCommit, kmsg.AddOffsetsToTxn:
		if rt == kmsg.ACLResourceTypeTransactionalId {
			return kmsg.ACLOperationWrite, ""
		}
		return kmsg.ACLOperationRead, ""
	case kmsg.ListOffsets, kmsg.Metadata, kmsg.OffsetForLeaderEpoch, kmsg.OffsetFetch, kmsg.FindCoordinator,
		kmsg.DescribeGroups, kmsg.DescribeTransactions, kmsg.ListTransactions:
		return kmsg.ACLOperationDescribe, ""
	case kmsg.ListGroups:
		return kmsg.ACLOperationDescribe, "listing every group"
	case kmsg.DescribeCluster:
		return kmsg.ACLOperationDescribe, "describing the cluster"
	case kmsg.CreateTopics:
		return kmsg.ACLOperationCreate, ""
	case kmsg.DeleteTopics, kmsg.DeleteRecords, kmsg.DeleteGroups:
		return kmsg.ACLOperationDelete, ""
	case kmsg.OffsetDelete:
		if rt == kmsg.ACLResourceTypeGroup {
			return kmsg.ACLOperationDelete, ""
		}
		return kmsg.ACLOperationRead, ""
	case kmsg.CreatePartitions:
		return kmsg.ACLOperationAlter, ""
	case kmsg.DescribeConfigs:
		return kmsg.ACLOperationDescribeConfigs, ""
	case kmsg.AlterConfigs, kmsg.IncrementalAlterConfigs:
		return kmsg.ACLOperationAlterConfigs, ""
	case kmsg.InitProducerID:
		if rt == kmsg.ACLResourceTypeCluster {
			return kmsg.ACLOperationIdempotentWrite, "an idempotent producer"
		}
		return kmsg.ACLOperationWrite, ""
	case kmsg.AddPartitionsToTxn, kmsg.EndTxn:
		return kmsg.ACLOperationWrite, ""
	case kmsg.DescribeACLs:
		return kmsg.ACLOperationDescribe, "listing ACLs"
	case kmsg.CreateACLs:
		return kmsg.ACLOperationAlter, "creating ACLs"
	case kmsg.DeleteACLs:
		return kmsg.ACLOperationAlter, "deleting ACLs"
	case kmsg.DescribeUserSCRAMCredentials:
		return kmsg.ACLOperationDescribe, "listing SCRAM users"
	case kmsg.AlterUserSCRAMCredentials:
		return kmsg.ACLOperationAlter, "changing SCRAM credentials"
	}
	return kmsg.ACLOperationUnknown, ""
}

// authzError is an authorization failure with what the request needed
// and how to get it.
type authzError struct {
	action    string      // the command and its subject: "topic describe orders"
	code      *kerr.Error // TOPIC_AUTHORIZATION_FAILED, ...
	op        kmsg.ACLOperation
	res       aclResource
	purpose   string // what the request does, where the resource does not say it; or ""
	principal string // who the broker took the client for
}

// Error says what was needed and the ACL that grants it. The cluster's
// ALTER and DESCRIBE guard the security settings themselves, so the first
// one to have them is a super user: the message says so.
func (e *authzError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s: ", e.action, e.code.Message)
	if e.purpose != "" {
		b.WriteString(e.purpose + " ")
	}
	if e.op == kmsg.ACLOperationUnknown {
		fmt.Fprintf(&b, "%s is not allowed on %s (ask an admin for an ACL: see 'ringlog acl add --help')", e.principal, e.res)
		return b.String()
	}
	grant := fmt.Sprintf("ringlog acl add --principal %s --operation %s %s", shellQuote(e.principal), strings.ToLower(e.op.String()), e.res.flag())
	fmt.Fprintf(&b, "needs %s on %s", e.op, e.res)
	if e.res.typ == kmsg.ACLResourceTypeCluster && (e.op == kmsg.ACLOperationAlter || e.op == kmsg.ACLOperationDescribe) {
		fmt.Fprintf(&b, ": run as a super user (a principal the broker's --super-users names), or have one grant it to %s: %s", e.principal, grant)
		return b.String()
	}
	fmt.Fprintf(&b, " (ask an admin: %s)", grant)
	return b.String()
}

// Unwrap is the broker's error code.
func (e *authzError) Unwrap() error { return e.code }

// denied turns err, when it is an authorization failure of request api,
// into an error naming the operation the broker checks, on the one of
// res whose type the error is about (the cluster for
// CLUSTER_AUTHORIZATION_FAILED), and the ACL that grants it to the
// principal this command connects as. It returns nil for other errors.
// action is what failed, as the message starts: "topic describe orders".
func (s *session) denied(action string, api kmsg.Key, err error, res ...aclResource) error {
	rt, code := deniedResourceType(err)
	if code == nil {
		return nil
	}
	r := aclResource{typ: rt}
	if rt == kmsg.ACLResourceTypeCluster {
		r = clusterResource()
	}
	for _, c := range res {
		if c.typ == rt {
			r = c
			break
		}
	}
	if r.name == "" && r.typ != kmsg.ACLResourceTypeCluster {
		return nil // no name to grant it on: the error as it is says enough
	}
	op, purpose := aclNeed(api, r.typ)
	if r.typ != kmsg.ACLResourceTypeCluster {
		purpose = ""
	}
	if r.typ == kmsg.ACLResourceTypeCluster && api == kmsg.Produce {
		// An idempotent producer's InitProducerId: WRITE on any topic
		// allows it (Kafka 3.0+), and produce needs that anyway.
		for _, c := range res {
			if c.typ == kmsg.ACLResourceTypeTopic {
				r, op, purpose = c, kmsg.ACLOperationWrite, "an idempotent producer"
				break
			}
		}
	}
	return &authzError{action: action, code: code, op: op, res: r, purpose: purpose, principal: s.principal()}
}

// principal is who the broker takes this client for, as Kafka's default
// principal builder names it: User:NAME after SASL, User:<certificate
// subject> with a client certificate on SSL, else User:ANONYMOUS.
func (s *session) principal() string {
	return s.sec.principal()
}

func (c *clientSecurity) principal() string {
	proto := strings.ToUpper(c.protocol)
	if strings.HasPrefix(proto, "SASL_") && c.user != "" {
		return "User:" + c.user
	}
	if proto == "SSL" && c.certFile != "" {
		pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err == nil && len(pair.Certificate) > 0 {
			if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil {
				return security.CertPrincipal(leaf)
			}
		}
	}
	return "User:ANONYMOUS"
}

// shellQuote is s as one shell word: as it is when that is safe, else in
// single quotes.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:/=,@+%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tlsError is a TLS failure with a broker, with what to change.
type tlsError struct {
	addr string
	err  error
	fix  string
}

func (e *tlsError) Error() string {
	return fmt.Sprintf("TLS with the broker at %s failed (%v): %s", e.addr, e.err, e.fix)
}

func (e *tlsError) Unwrap() error { return e.err }

// tlsHint explains err, met connecting to the broker at addr, when it is
// a TLS failure a flag or a certificate fixes: a broker certificate this
// client does not trust (--tls-ca), one for other names than the address
// used (its SANs), an expired one, a listener that does not speak TLS, or
// a broker refusing the client's certificate. It returns nil otherwise.
func (c *clientSecurity) tlsHint(addr string, err error) error {
	if err == nil {
		return nil
	}
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
		op       *net.OpError
	)
	fix := ""
	switch {
	case errors.As(err, &unknown):
		issuer := ""
		if unknown.Cert != nil {
			issuer = fmt.Sprintf(" (issued by %q)", unknown.Cert.Issuer.String())
		}
		if c.caFile != "" {
			fix = fmt.Sprintf("the broker's certificate%s is not signed by a CA in --tls-ca %s: give --tls-ca the CA file that signed the broker's --tls-cert", issuer, c.caFile)
		} else {
			fix = fmt.Sprintf("the broker's certificate%s is signed by an authority this system does not trust: give its CA with --tls-ca FILE (the CA that signed the broker's --tls-cert, e.g. the ca.pem of 'ringlog tls init')", issuer)
		}
	case errors.As(err, &hostname):
		fix = hostnameFix(hostname, c.serverName)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		fix = "the broker's certificate has expired or is not valid yet (or this machine's clock is wrong): renew the broker's --tls-cert (ringlog tls init makes a new set) and send the broker SIGHUP"
		if invalid.Cert != nil {
			fix = fmt.Sprintf("the broker's certificate is valid from %s to %s, not now (or this machine's clock is wrong): renew the broker's --tls-cert (ringlog tls init makes a new set) and send the broker SIGHUP",
				invalid.Cert.NotBefore.UTC().Format(time.RFC3339), invalid.Cert.NotAfter.UTC().Format(time.RFC3339))
		}
	case errors.As(err, &record):
		fix = fmt.Sprintf("%s does not speak TLS: use the address of the broker's SSL or SASL_SSL listener, or --security-protocol PLAINTEXT (or SASL_PLAINTEXT) for this one", addr)
	case errors.As(err, &op) && op.Op == "remote error":
		switch op.Err.Error() {
		case "tls: certificate required":
			fix = "the broker requires a client certificate (its --tls-client-auth is required): give --tls-cert and --tls-key, a certificate signed by a CA in the broker's --tls-client-ca"
			if c.certFile != "" {
				// Go sends a certificate only if a CA the broker named
				// signed it.
				fix = fmt.Sprintf("the broker requires a client certificate signed by a CA in its --tls-client-ca, and --tls-cert %s is not signed by one (so none was sent): use a certificate that CA signed (ringlog tls init --client NAME makes one with its CA)", c.certFile)
			}
		case "tls: bad certificate", "tls: unknown certificate authority", "tls: certificate expired", "tls: unsupported certificate":
			fix = fmt.Sprintf("the broker refused the client certificate --tls-cert %s: it must be signed by a CA in the broker's --tls-client-ca, be valid now and allow client authentication (ringlog tls init --client NAME makes one)", c.certFile)
		}
	}
	if fix == "" {
		return nil
	}
	return &tlsError{addr: addr, err: err, fix: fix}
}

// hostnameFix says what to do when the broker's certificate does not name
// the host the client checked (--tls-server-name, else the host of the
// address it connected to).
func hostnameFix(e x509.HostnameError, serverName string) string {
	var names []string
	if e.Certificate != nil {
		names = append(names, e.Certificate.DNSNames...)
		for _, ip := range e.Certificate.IPAddresses {
			names = append(names, ip.String())
		}
	}
	certFor := "names no host"
	if len(names) > 0 {
		certFor = "is for " + strings.Join(names, ", ")
	}
	checked := fmt.Sprintf("%q, the host of the address used (--brokers, or the address the broker advertises)", e.Host)
	if serverName != "" {
		checked = fmt.Sprintf("%q (--tls-server-name)", e.Host)
	}
	return fmt.Sprintf("the broker's certificate %s, not %s: connect with a name or address it lists, set --tls-server-name to one of them, or reissue the certificate with %q among its subject alternative names (ringlog tls init --hosts %s)",
		certFor, checked, e.Host, shellQuote(e.Host))
}

// appendUnique appends err unless errs already holds an error with its
// message (one authorization failure per partition says it once).
func appendUnique(errs []error, err error) []error {
	for _, e := range errs {
		if e.Error() == err.Error() {
			return errs
		}
	}
	return append(errs, err)
}
