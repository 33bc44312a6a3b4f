package main

// ringlog acl add|list|delete: ACLs of a running broker or cluster over
// the Kafka API (CreateAcls, DescribeAcls, DeleteAcls), with the
// semantics of Kafka's kafka-acls.sh: a binding is a principal, a host,
// an operation and a permission on a resource pattern (type, name,
// LITERAL or PREFIXED); list and delete take filters, where what is not
// given matches anything.

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/cli"
)

func runACL(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("ringlog", "acl", "Adds, lists and deletes the ACLs of a running broker or cluster (--authorizer), as Kafka's kafka-acls.sh.", []cli.Subcommand{
		{Name: "add", Summary: "allow (or deny) principals operations on resources", Run: runACLAdd},
		{Name: "list", Summary: "list ACLs, all or those a filter matches", Run: runACLList},
		{Name: "delete", Summary: "delete the ACLs a filter matches", Run: runACLDelete},
	}, args, stdout, stderr)
}

const aclExamples = `
Examples:
  ringlog acl add --principal User:alice --operation read --topic orders --group billing   # a consumer
  ringlog acl add --principal User:app --operation write --topic orders- --pattern prefixed   # every orders-* topic
  ringlog acl add --principal 'User:CN=admin' --operation all --cluster
  ringlog acl add --principal User:mallory --operation all --topic '*' --permission deny
  ringlog acl list
  ringlog acl list --principal User:alice --output json
  ringlog acl list --topic orders --pattern match          # every ACL that applies to topic orders
  ringlog acl delete --principal User:alice --topic orders --dry-run
  ringlog acl delete --principal User:alice

A binding allows (or denies) a principal one operation on a resource
pattern: a topic, group or transactional id by its LITERAL name ('*' is
every one) or by a PREFIXED one, or the cluster. DENY wins over ALLOW;
READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies
DESCRIBE_CONFIGS. A consumer needs READ on its topics and its group, a
producer WRITE on its topics (and on its transactional id, if any).
Principals are User:NAME: the SASL user name, or the subject of a client
certificate (User:CN=alice,O=acme; run 'ringlog tls init' to make some).
The broker must run with --authorizer; adding and deleting need ALTER on
the cluster, listing DESCRIBE (a super user has both).
Exit status: 0 done, 1 failed, 2 usage.
`

// aclFlags are the flags every acl subcommand has: the binding (add) or
// the filter (list, delete).
type aclFlags struct {
	cf          connFlags
	fs          *flag.FlagSet
	principals  stringList
	hosts       stringList
	operations  stringList
	permission  string
	topics      stringList
	groups      stringList
	txnIDs      stringList
	cluster     bool
	pattern     string
	add         bool // add's meanings and defaults, else a filter's
	hasResource bool
}

func (f *aclFlags) register(fs *flag.FlagSet, add bool) {
	f.fs, f.add = fs, add
	f.cf.Register(fs, 30*time.Second, adminTimeoutHelp)
	if add {
		fs.Var(&f.principals, "principal", "principal to allow or deny, User:NAME (repeatable, or a comma list; a certificate's User:CN=..,O=.. may hold commas)")
		fs.Var(&f.hosts, "host", "host the principal connects from, an IP address (repeatable; default *: any host)")
		fs.Var(&f.operations, "operation", "operation: read, write, create, delete, alter, describe, cluster_action, describe_configs, alter_configs, idempotent_write or all (repeatable, or a comma list; required)")
		fs.StringVar(&f.permission, "permission", "allow", "allow or deny")
		fs.StringVar(&f.pattern, "pattern", "literal", "how the resource name matches: literal (that name; '*' is every one) or prefixed (every name starting with it)")
	} else {
		fs.Var(&f.principals, "principal", "only ACLs of this principal, User:NAME (repeatable, or a comma list; default: any)")
		fs.Var(&f.hosts, "host", "only ACLs of this host (repeatable; default: any)")
		fs.Var(&f.operations, "operation", "only ACLs of this operation (repeatable, or a comma list; default: any)")
		fs.StringVar(&f.permission, "permission", "any", "only allow or deny ACLs, or any")
		fs.StringVar(&f.pattern, "pattern", "literal", "with a resource: literal (bindings of exactly that name), prefixed (prefixed bindings of exactly that name), any (both) or match (every binding that applies to that resource: its name, '*' and the prefixes of it); without one: any")
	}
	fs.Var(&f.topics, "topic", "a topic (repeatable)")
	fs.Var(&f.groups, "group", "a consumer group (repeatable)")
	fs.BoolVar(&f.cluster, "cluster", false, "the cluster (its operations: create, alter, describe, cluster_action, describe_configs, alter_configs, idempotent_write)")
	fs.Var(&f.txnIDs, "transactional-id", "a transactional id (repeatable)")
}

// given reports whether the flag was set on the command line.
func (f *aclFlags) given(name string) bool {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

// builder checks the flags and turns them into a kadm.ACLBuilder: the
// bindings to create (add) or the filters (list, delete).
func (f *aclFlags) builder() (*kadm.ACLBuilder, error) {
	principals, err := f.principalList()
	if err != nil {
		return nil, err
	}
	hosts, err := f.hostList()
	if err != nil {
		return nil, err
	}
	ops, err := f.operationList()
	if err != nil {
		return nil, err
	}
	perm, err := kmsg.ParseACLPermissionType(f.permission)
	if err != nil || perm == kmsg.ACLPermissionTypeUnknown || (f.add && perm == kmsg.ACLPermissionTypeAny) {
		if f.add {
			return nil, cli.Usagef("--permission %q: allow or deny", f.permission)
		}
		return nil, cli.Usagef("--permission %q: allow, deny or any", f.permission)
	}
	pattern, err := f.patternType()
	if err != nil {
		return nil, err
	}
	for _, list := range []struct {
		flag  string
		names []string
	}{{"--topic", f.topics}, {"--group", f.groups}, {"--transactional-id", f.txnIDs}} {
		for _, n := range list.names {
			if n == "" {
				return nil, cli.Usagef("%s: the name is empty ('*' is every one)", list.flag)
			}
		}
	}
	f.hasResource = len(f.topics)+len(f.groups)+len(f.txnIDs) > 0 || f.cluster

	b := kadm.NewACLs().ResourcePatternType(pattern)
	if f.add {
		switch {
		case len(principals) == 0:
			return nil, cli.Usagef("acl add: give --principal User:NAME")
		case len(ops) == 0:
			return nil, cli.Usagef("acl add: give --operation (read, write, describe, ... or all)")
		case !f.hasResource:
			return nil, cli.Usagef("acl add: give the resource: --topic NAME, --group NAME, --cluster or --transactional-id ID")
		case f.cluster && pattern == kmsg.ACLResourcePatternTypePrefixed:
			return nil, cli.Usagef("--cluster has one name (kafka-cluster): it takes --pattern literal, not prefixed")
		}
		b.Operations(ops...)
		if perm == kmsg.ACLPermissionTypeAllow {
			b.Allow(principals...).AllowHosts(hosts...)
		} else {
			b.Deny(principals...).DenyHosts(hosts...)
		}
	} else {
		b.Operations(ops...) // none: any operation
		if perm != kmsg.ACLPermissionTypeDeny {
			b.Allow(principals...).AllowHosts(hosts...) // empty: any
		}
		if perm != kmsg.ACLPermissionTypeAllow {
			b.Deny(principals...).DenyHosts(hosts...)
		}
		if !f.hasResource {
			b.AnyResource()
		}
	}
	b.MaybeTopics(f.topics...).MaybeGroups(f.groups...).MaybeTransactionalIDs(f.txnIDs...).MaybeClusters(f.cluster)
	return b, nil
}

// principalList is --principal, each value split as --super-users is.
func (f *aclFlags) principalList() ([]string, error) {
	var out []string
	for _, v := range f.principals {
		for _, p := range splitPrincipals(v) {
			name, ok := strings.CutPrefix(p, "User:")
			if !ok || name == "" {
				return nil, cli.Usagef("--principal %q: want User:NAME (a SASL user, User:alice, or a certificate's subject, User:CN=alice,O=acme; User:* is every user)", p)
			}
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// hostList is --host; add's default is every host ("*").
func (f *aclFlags) hostList() ([]string, error) {
	var out []string
	for _, h := range f.hosts {
		if h = strings.TrimSpace(h); h == "" {
			return nil, cli.Usagef("--host is empty: give an IP address, or * for any host")
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	if f.add && len(out) == 0 {
		out = []string{"*"}
	}
	return out, nil
}

// operationList is --operation, refusing what cannot be bound (any, for
// add) and naming the valid ones.
func (f *aclFlags) operationList() ([]kmsg.ACLOperation, error) {
	var out []kmsg.ACLOperation
	for _, v := range f.operations {
		for _, s := range strings.Split(v, ",") {
			op, err := kmsg.ParseACLOperation(strings.TrimSpace(s))
			if err != nil || op == kmsg.ACLOperationUnknown || (f.add && op == kmsg.ACLOperationAny) {
				msg := "read, write, create, delete, alter, describe, cluster_action, describe_configs, alter_configs, idempotent_write, create_tokens, describe_tokens or all"
				if !f.add {
					msg += " (or any)"
				}
				return nil, cli.Usagef("--operation %q: want %s", s, msg)
			}
			if !slices.Contains(out, op) {
				out = append(out, op)
			}
		}
	}
	return out, nil
}

// patternType is --pattern. A filter without a resource matches every
// pattern type unless --pattern says otherwise, as kafka-acls.sh --list.
func (f *aclFlags) patternType() (kmsg.ACLResourcePatternType, error) {
	p, err := kmsg.ParseACLResourcePatternType(f.pattern)
	switch {
	case f.add && (err != nil || (p != kmsg.ACLResourcePatternTypeLiteral && p != kmsg.ACLResourcePatternTypePrefixed)):
		return 0, cli.Usagef("--pattern %q: literal or prefixed (any and match are for list and delete)", f.pattern)
	case err != nil || p == kmsg.ACLResourcePatternTypeUnknown:
		return 0, cli.Usagef("--pattern %q: literal, prefixed, any or match", f.pattern)
	}
	if !f.add && !f.given("pattern") && len(f.topics)+len(f.groups)+len(f.txnIDs) == 0 && !f.cluster {
		return kmsg.ACLResourcePatternTypeAny, nil
	}
	return p, nil
}

// aclJSON is one binding as the commands print it.
type aclJSON struct {
	Principal    string `json:"principal"`
	Host         string `json:"host"`
	Operation    string `json:"operation"`
	Permission   string `json:"permission"`
	ResourceType string `json:"resource_type"`
	ResourceName string `json:"resource_name"`
	Pattern      string `json:"pattern"`
}

func newACLJSON(principal, host string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType, rt kmsg.ACLResourceType, name string, pattern kmsg.ACLResourcePatternType) aclJSON {
	return aclJSON{Principal: principal, Host: host, Operation: op.String(), Permission: perm.String(),
		ResourceType: rt.String(), ResourceName: name, Pattern: pattern.String()}
}

// sortACLs sorts bindings by resource, then principal, host, operation and
// permission, dropping duplicates (two filters may match one binding).
func sortACLs(acls []aclJSON) []aclJSON {
	slices.SortFunc(acls, func(a, b aclJSON) int {
		return cmp.Or(cmp.Compare(a.ResourceType, b.ResourceType), cmp.Compare(a.ResourceName, b.ResourceName),
			cmp.Compare(a.Pattern, b.Pattern), cmp.Compare(a.Principal, b.Principal), cmp.Compare(a.Host, b.Host),
			cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.Permission, b.Permission))
	})
	return slices.Compact(acls)
}

// printACLs prints bindings as a table.
func printACLs(w io.Writer, acls []aclJSON) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "PRINCIPAL\tHOST\tOPERATION\tPERMISSION\tRESOURCE-TYPE\tRESOURCE-NAME\tPATTERN\t")
	for _, a := range acls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", a.Principal, a.Host, a.Operation, a.Permission, a.ResourceType, a.ResourceName, a.Pattern)
	}
	return tw.Flush()
}

// aclRequestError explains the failure of an ACL request as a whole. A
// broker that serves no ACL APIs runs without --authorizer (Kafka then
// answers SECURITY_DISABLED).
func (s *session) aclRequestError(action string, api kmsg.Key, err error) error {
	if d := s.denied(action, api, err); d != nil {
		return d
	}
	if ex := s.explain(err); ex != err {
		return ex
	}
	noACLs := errors.Is(err, kerr.SecurityDisabled)
	if !noACLs {
		if vs, verr := s.adm.ApiVersions(s.ctx); verr == nil {
			vs.Each(func(v kadm.BrokerApiVersions) {
				if _, ok := v.KeyMaxVersion(int16(api)); v.Err == nil && !ok {
					noACLs = true
				}
			})
		}
	}
	if noACLs {
		return fmt.Errorf("%s: the broker (%s) has no authorizer, so it keeps no ACLs: restart it with --authorizer and --super-users naming the admins (then every request is checked against the ACLs)", action, s.brokers)
	}
	return fmt.Errorf("%s: %w", action, err)
}

// parse parses an acl command's flags (it takes no arguments: hint says
// what names its ACLs) and builds the ACLs, or their filter, they give.
func (f *aclFlags) parse(fs *flag.FlagSet, args []string, hint string) (*kadm.ACLBuilder, error) {
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		return nil, cli.Usagef("%s takes no arguments, got %q (%s)", fs.Name(), rest, hint)
	}
	return f.builder()
}

// ---- add ----

func runACLAdd(args []string, stdout, stderr io.Writer) error {
	var f aclFlags
	fs := cli.NewFlagSet("acl add", "\nUsage: ringlog acl add --principal User:NAME --operation OP (--topic NAME | --group NAME | --cluster | --transactional-id ID) [flags]\n\nAdds ACLs: every principal × host × operation × resource given, allowed or denied.\n", aclExamples, stdout)
	f.register(fs, true)
	b, err := f.parse(fs, args, "name resources with --topic, --group, --cluster, --transactional-id")
	if err != nil {
		return err
	}
	s, err := f.cf.connect(f.cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	results, err := s.adm.CreateACLs(s.ctx, b)
	if err != nil {
		return s.aclRequestError("acl add", kmsg.CreateACLs, err)
	}
	var added []aclJSON
	var errs []error
	for _, r := range results {
		a := newACLJSON(r.Principal, r.Host, r.Operation, r.Permission, r.Type, r.Name, r.Pattern)
		if errors.Is(r.Err, kerr.SecurityDisabled) {
			return s.aclRequestError("acl add", kmsg.CreateACLs, r.Err)
		}
		if r.Err != nil {
			if d := s.denied("acl add", kmsg.CreateACLs, r.Err); d != nil {
				errs = appendUnique(errs, d)
				continue
			}
			errs = append(errs, withMessage(fmt.Errorf("acl add: %s %s %s on %s %q (%s): %w", a.Permission, a.Principal, a.Operation, a.ResourceType, a.ResourceName, a.Pattern, r.Err), r.ErrMessage))
			continue
		}
		added = append(added, a)
	}
	if len(added) > 0 {
		fmt.Fprintf(stdout, "added %s:\n", plural(len(added), "ACL", "ACLs"))
		if err := printACLs(stdout, sortACLs(added)); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// ---- list ----

func runACLList(args []string, stdout, stderr io.Writer) error {
	var f aclFlags
	var out outputFlag
	fs := cli.NewFlagSet("acl list", "\nUsage: ringlog acl list [filters] [flags]\n\nLists ACLs: all of them, or those every given filter matches (a flag not given matches anything).\n", aclExamples, stdout)
	f.register(fs, false)
	addOutputFlag(fs, &out)
	b, err := f.parse(fs, args, "filter with --topic, --group, --principal, ...")
	if err != nil {
		return err
	}
	s, err := f.cf.connect(f.cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	acls, err := s.describeACLs("acl list", b)
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(stdout, acls)
	}
	return printACLs(stdout, acls)
}

// describeACLs lists the bindings b's filters match, sorted, once each.
func (s *session) describeACLs(action string, b *kadm.ACLBuilder) ([]aclJSON, error) {
	results, err := s.adm.DescribeACLs(s.ctx, b)
	if err != nil {
		return nil, s.aclRequestError(action, kmsg.DescribeACLs, err)
	}
	acls := []aclJSON{}
	for _, r := range results {
		if r.Err != nil {
			if errors.Is(r.Err, kerr.SecurityDisabled) {
				return nil, s.aclRequestError(action, kmsg.DescribeACLs, r.Err)
			}
			return nil, cmp.Or(s.denied(action, kmsg.DescribeACLs, r.Err), withMessage(fmt.Errorf("%s: %w", action, r.Err), r.ErrMessage))
		}
		for _, d := range r.Described {
			acls = append(acls, newACLJSON(d.Principal, d.Host, d.Operation, d.Permission, d.Type, d.Name, d.Pattern))
		}
	}
	return sortACLs(acls), nil
}

// ---- delete ----

func runACLDelete(args []string, stdout, stderr io.Writer) error {
	var f aclFlags
	var dryRun bool
	var out outputFlag
	fs := cli.NewFlagSet("acl delete", "\nUsage: ringlog acl delete FILTERS [flags]\n\nDeletes the ACLs every given filter matches (a flag not given matches anything)\nand prints them. At least one filter is required (--principal, --host,\n--operation, --permission, --pattern or a resource), so that a bare\n'acl delete' cannot remove every ACL; --dry-run prints what would go.\n", aclExamples, stdout)
	f.register(fs, false)
	addOutputFlag(fs, &out)
	fs.BoolVar(&dryRun, "dry-run", false, "print the ACLs that would be deleted, delete nothing")
	b, err := f.parse(fs, args, "filter with --topic, --group, --principal, ...")
	if err != nil {
		return err
	}
	narrowed := f.hasResource || len(f.principals) > 0 || len(f.hosts) > 0 || len(f.operations) > 0 ||
		(f.given("permission") && !strings.EqualFold(f.permission, "any")) || (f.given("pattern") && !strings.EqualFold(f.pattern, "any"))
	if !narrowed {
		return cli.Usagef("acl delete: give a filter (--principal, --topic, --group, --cluster, --transactional-id, --operation, --permission, --host or --pattern): without one it would delete every ACL (see them with 'ringlog acl list')")
	}
	s, err := f.cf.connect(f.cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	if dryRun {
		acls, err := s.describeACLs("acl delete", b)
		if err != nil {
			return err
		}
		if out == "json" {
			return writeJSON(stdout, acls)
		}
		fmt.Fprintf(stdout, "would delete %s (dry run: nothing deleted):\n", plural(len(acls), "ACL", "ACLs"))
		return printACLs(stdout, acls)
	}
	results, err := s.adm.DeleteACLs(s.ctx, b)
	if err != nil {
		return s.aclRequestError("acl delete", kmsg.DeleteACLs, err)
	}
	deleted := []aclJSON{}
	var errs []error
	for _, r := range results {
		if errors.Is(r.Err, kerr.SecurityDisabled) {
			return s.aclRequestError("acl delete", kmsg.DeleteACLs, r.Err)
		}
		if r.Err != nil {
			errs = appendUnique(errs, cmp.Or(s.denied("acl delete", kmsg.DeleteACLs, r.Err), withMessage(fmt.Errorf("acl delete: %w", r.Err), r.ErrMessage)))
			continue
		}
		for _, d := range r.Deleted {
			if d.Err != nil {
				errs = append(errs, withMessage(fmt.Errorf("acl delete: %s %s %s on %s %q: %w", d.Permission, d.Principal, d.Operation, d.Type, d.Name, d.Err), d.ErrMessage))
				continue
			}
			deleted = append(deleted, newACLJSON(d.Principal, d.Host, d.Operation, d.Permission, d.Type, d.Name, d.Pattern))
		}
	}
	deleted = sortACLs(deleted)
	if out == "json" {
		if err := writeJSON(stdout, deleted); err != nil {
			return err
		}
	} else if len(deleted) == 0 {
		fmt.Fprintln(stdout, "deleted no ACLs: none matched (see them with 'ringlog acl list')")
	} else {
		fmt.Fprintf(stdout, "deleted %s:\n", plural(len(deleted), "ACL", "ACLs"))
		if err := printACLs(stdout, deleted); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}
