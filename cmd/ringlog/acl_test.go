package main

// Tests of `ringlog acl` and of the authorization hints of the other
// tools: the built binary against an in-process broker with the
// authorizer on, a super user (User:admin) on a SASL_PLAINTEXT listener
// and User:ANONYMOUS on the PLAINTEXT one.

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/security"
)

// aclBroker is a broker with --authorizer and --super-users User:admin.
type aclBroker struct {
	*brokertest.Broker
	sasl      string   // the SASL_PLAINTEXT listener
	adminArgs []string // --brokers and the security flags of User:admin
}

func startACLBroker(t *testing.T) *aclBroker {
	t.Helper()
	b := brokertest.Start(t, func(c *broker.Config) {
		c.Listeners = []broker.Listener{{Protocol: netio.SASLPlaintext, Addr: "127.0.0.1:0"}}
		c.Security.Authorizer = true
		c.Security.SuperUsers = []string{"User:admin"}
		c.Engine.Groups.InitialRebalanceDelay = 0
	})
	cred, err := security.NewScramCredential(security.ScramSHA512, "admin-pw", security.MinIterations, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.B.Security().UpsertCredential("admin", cred); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "admin.pw")
	if err := os.WriteFile(pw, []byte("admin-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sasl := b.B.Listeners()[0].Addr().String()
	return &aclBroker{Broker: b, sasl: sasl, adminArgs: []string{"--brokers", sasl, "--security-protocol", "SASL_PLAINTEXT",
		"--sasl-username", "admin", "--sasl-password-file", pw}}
}

// admin runs `ringlog args...` as the super user and checks the exit code.
func (b *aclBroker) admin(t *testing.T, wantCode int, args ...string) toolResult {
	t.Helper()
	r := tool(t, "", nil, append(args, b.adminArgs...)...)
	if r.code != wantCode {
		t.Fatalf("ringlog %s (as admin): exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, wantCode, r.stdout, r.stderr)
	}
	return r
}

// anon runs `ringlog args...` on the PLAINTEXT listener (User:ANONYMOUS).
func (b *aclBroker) anon(t *testing.T, wantCode int, stdin string, args ...string) toolResult {
	t.Helper()
	r := tool(t, stdin, nil, append(args, "--brokers", b.Addr)...)
	if r.code != wantCode {
		t.Fatalf("ringlog %s (anonymous): exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, wantCode, r.stdout, r.stderr)
	}
	return r
}

// storedACLs is the broker's bindings as the commands print them, sorted.
func (b *aclBroker) storedACLs() []aclJSON {
	var out []aclJSON
	for _, a := range b.B.Security().ACLs() {
		out = append(out, newACLJSON(a.Principal, a.Host, a.Operation, a.Permission, a.ResourceType, a.ResourceName, a.PatternType))
	}
	return sortACLs(out)
}

func aclRow(principal, host, op, perm, rt, name, pattern string) aclJSON {
	return aclJSON{Principal: principal, Host: host, Operation: op, Permission: perm, ResourceType: rt, ResourceName: name, Pattern: pattern}
}

// TestACLCommands adds, lists (with filters, --pattern match) and deletes
// ACLs as a super user, and checks what the broker stored.
func TestACLCommands(t *testing.T) {
	t.Parallel()
	b := startACLBroker(t)

	r := b.admin(t, 0, "acl", "add", "--principal", "User:alice,User:bob", "--operation", "read", "--operation", "describe", "--topic", "orders", "--group", "billing")
	wantContains(t, "acl add", r.stdout, "added 8 ACLs:", "PRINCIPAL", "RESOURCE-TYPE", "User:alice", "User:bob", "READ", "DESCRIBE", "ALLOW", "TOPIC", "GROUP", "billing", "LITERAL")
	b.admin(t, 0, "acl", "add", "--principal", "User:app", "--operation", "write", "--topic", "orders-", "--pattern", "prefixed", "--host", "10.0.0.1")
	b.admin(t, 0, "acl", "add", "--principal", "User:mallory", "--operation", "all", "--topic", "*", "--permission", "deny")
	// A certificate principal holds commas; --cluster and a transactional id.
	b.admin(t, 0, "acl", "add", "--principal", "User:CN=ops,O=acme", "--operation", "alter,describe", "--cluster")
	b.admin(t, 0, "acl", "add", "--principal", "User:app", "--operation", "write", "--transactional-id", "app-tx")

	want := []aclJSON{
		aclRow("User:CN=ops,O=acme", "*", "ALTER", "ALLOW", "CLUSTER", "kafka-cluster", "LITERAL"),
		aclRow("User:CN=ops,O=acme", "*", "DESCRIBE", "ALLOW", "CLUSTER", "kafka-cluster", "LITERAL"),
		aclRow("User:alice", "*", "DESCRIBE", "ALLOW", "GROUP", "billing", "LITERAL"),
		aclRow("User:alice", "*", "READ", "ALLOW", "GROUP", "billing", "LITERAL"),
		aclRow("User:bob", "*", "DESCRIBE", "ALLOW", "GROUP", "billing", "LITERAL"),
		aclRow("User:bob", "*", "READ", "ALLOW", "GROUP", "billing", "LITERAL"),
		aclRow("User:mallory", "*", "ALL", "DENY", "TOPIC", "*", "LITERAL"),
		aclRow("User:alice", "*", "DESCRIBE", "ALLOW", "TOPIC", "orders", "LITERAL"),
		aclRow("User:alice", "*", "READ", "ALLOW", "TOPIC", "orders", "LITERAL"),
		aclRow("User:bob", "*", "DESCRIBE", "ALLOW", "TOPIC", "orders", "LITERAL"),
		aclRow("User:bob", "*", "READ", "ALLOW", "TOPIC", "orders", "LITERAL"),
		aclRow("User:app", "10.0.0.1", "WRITE", "ALLOW", "TOPIC", "orders-", "PREFIXED"),
		aclRow("User:app", "*", "WRITE", "ALLOW", "TRANSACTIONAL_ID", "app-tx", "LITERAL"),
	}
	want = sortACLs(want)
	if got := b.storedACLs(); !slices.Equal(got, want) {
		t.Fatalf("the broker stored\n%v\nwant\n%v", got, want)
	}
	list := func(args ...string) []aclJSON {
		t.Helper()
		return decodeJSON[[]aclJSON](t, b.admin(t, 0, append([]string{"acl", "list", "--output", "json"}, args...)...).stdout)
	}
	if got := list(); !slices.Equal(got, want) {
		t.Errorf("acl list: %v\nwant %v", got, want)
	}
	r = b.admin(t, 0, "acl", "list")
	wantContains(t, "acl list (text)", r.stdout, "PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE-TYPE", "RESOURCE-NAME", "PATTERN",
		"User:app", "10.0.0.1", "WRITE", "orders-", "PREFIXED", "DENY", "TRANSACTIONAL_ID", "kafka-cluster")
	if got := list("--principal", "User:alice"); len(got) != 4 {
		t.Errorf("acl list --principal User:alice: %v, want her 4", got)
	}
	// --topic without --pattern: the literal bindings of that name.
	if got := list("--topic", "orders"); len(got) != 4 || got[0].ResourceName != "orders" {
		t.Errorf("acl list --topic orders: %v, want the 4 literal ones", got)
	}
	// --pattern match: every binding that applies to the topic orders-eu.
	if got, w := list("--topic", "orders-eu", "--pattern", "match"), []aclJSON{
		aclRow("User:mallory", "*", "ALL", "DENY", "TOPIC", "*", "LITERAL"),
		aclRow("User:app", "10.0.0.1", "WRITE", "ALLOW", "TOPIC", "orders-", "PREFIXED"),
	}; !slices.Equal(got, w) {
		t.Errorf("acl list --topic orders-eu --pattern match: %v, want %v", got, w)
	}
	if got := list("--pattern", "prefixed"); len(got) != 1 || got[0].Pattern != "PREFIXED" {
		t.Errorf("acl list --pattern prefixed: %v", got)
	}
	if got := list("--permission", "deny"); len(got) != 1 || got[0].Principal != "User:mallory" {
		t.Errorf("acl list --permission deny: %v", got)
	}
	if got := list("--cluster", "--operation", "alter"); len(got) != 1 || got[0].Operation != "ALTER" {
		t.Errorf("acl list --cluster --operation alter: %v", got)
	}
	if got := list("--principal", "User:nobody"); len(got) != 0 {
		t.Errorf("acl list --principal User:nobody: %v, want none", got)
	}
	// RINGLOG_BROKERS stands for --brokers.
	r = tool(t, "", []string{brokersEnv + "=" + b.sasl}, append([]string{"acl", "list", "--output", "json"}, b.adminArgs[2:]...)...)
	if r.code != 0 || len(decodeJSON[[]aclJSON](t, r.stdout)) != len(want) {
		t.Errorf("acl list with %s: exit %d\n%s%s", brokersEnv, r.code, r.stdout, r.stderr)
	}

	// delete: a filter is required; --dry-run deletes nothing.
	r = b.admin(t, 2, "acl", "delete")
	wantContains(t, "acl delete without a filter", r.stderr, "give a filter", "every ACL")
	r = b.admin(t, 2, "acl", "delete", "--permission", "any")
	wantContains(t, "acl delete --permission any", r.stderr, "give a filter")
	r = b.admin(t, 0, "acl", "delete", "--principal", "User:bob", "--dry-run")
	wantContains(t, "acl delete --dry-run", r.stdout, "would delete 4 ACLs", "User:bob")
	if got := b.storedACLs(); len(got) != len(want) {
		t.Fatalf("after --dry-run the broker has %d ACLs, want %d", len(got), len(want))
	}
	r = b.admin(t, 0, "acl", "delete", "--principal", "User:bob")
	wantContains(t, "acl delete --principal User:bob", r.stdout, "deleted 4 ACLs:", "User:bob", "billing", "orders")
	if strings.Contains(r.stdout, "User:alice") {
		t.Errorf("acl delete --principal User:bob printed alice's:\n%s", r.stdout)
	}
	r = b.admin(t, 0, "acl", "delete", "--principal", "User:bob")
	wantContains(t, "acl delete of nothing", r.stdout, "deleted no ACLs")
	// Deleting by resource and operation only.
	deleted := decodeJSON[[]aclJSON](t, b.admin(t, 0, "acl", "delete", "--group", "billing", "--operation", "read", "--output", "json").stdout)
	if w := []aclJSON{aclRow("User:alice", "*", "READ", "ALLOW", "GROUP", "billing", "LITERAL")}; !slices.Equal(deleted, w) {
		t.Errorf("acl delete --group billing --operation read: %v, want %v", deleted, w)
	}
	b.admin(t, 0, "acl", "delete", "--topic", "orders-", "--pattern", "prefixed")
	if got := b.storedACLs(); len(got) != len(want)-6 {
		t.Errorf("the broker has %d ACLs after the deletes, want %d:\n%v", len(got), len(want)-6, got)
	}
	for _, a := range b.storedACLs() {
		if a.Principal == "User:bob" || a.Pattern == "PREFIXED" {
			t.Errorf("still stored: %v", a)
		}
	}
}

// TestACLCommandErrors: usage errors name the flag; a principal without
// ALTER on the cluster is told to run as a super user; a broker without
// --authorizer is named as the problem.
func TestACLCommandErrors(t *testing.T) {
	t.Parallel()
	b := startACLBroker(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"acl", "add", "--principal", "alice", "--operation", "read", "--topic", "t"}, "want User:NAME"},
		{[]string{"acl", "add", "--principal", "User:a", "--operation", "fly", "--topic", "t"}, `--operation "fly"`},
		{[]string{"acl", "add", "--principal", "User:a", "--operation", "any", "--topic", "t"}, `--operation "any"`},
		{[]string{"acl", "add", "--principal", "User:a", "--operation", "read"}, "give the resource"},
		{[]string{"acl", "add", "--operation", "read", "--topic", "t"}, "give --principal"},
		{[]string{"acl", "add", "--principal", "User:a", "--topic", "t"}, "give --operation"},
		{[]string{"acl", "add", "--principal", "User:a", "--operation", "read", "--topic", "t", "--pattern", "match"}, "literal or prefixed"},
		{[]string{"acl", "add", "--principal", "User:a", "--operation", "read", "--topic", "t", "--permission", "maybe"}, "allow or deny"},
		{[]string{"acl", "add", "--principal", "User:a", "--operation", "alter", "--cluster", "--pattern", "prefixed"}, "--cluster has one name"},
		{[]string{"acl", "list", "--pattern", "glob"}, "literal, prefixed, any or match"},
		{[]string{"acl", "list", "extra"}, "takes no arguments"},
		{[]string{"acl", "remove"}, `unknown subcommand "remove"`},
	} {
		r := b.anon(t, 2, "", tc.args...)
		wantContains(t, "ringlog "+strings.Join(tc.args, " "), r.stderr, tc.want)
	}
	for _, cmd := range [][]string{{"acl", "add"}, {"acl", "list"}, {"acl", "delete"}} {
		r := tool(t, "", nil, append(cmd, "--help")...)
		if r.code != 0 {
			t.Errorf("ringlog %s --help: exit %d", strings.Join(cmd, " "), r.code)
		}
		wantContains(t, "ringlog "+strings.Join(cmd, " ")+" --help", r.stdout, "Usage: ringlog "+strings.Join(cmd, " "), "Examples:",
			"ringlog acl add --principal", "-brokers", brokersEnv, "-security-protocol", "-tls-ca", "-sasl-username", "-principal", "-operation", "-topic", "-pattern")
	}
	r := tool(t, "", nil, "acl", "delete", "--help")
	wantContains(t, "acl delete --help", r.stdout, "At least one filter is required", "--dry-run")

	// User:ANONYMOUS is not a super user.
	r = b.anon(t, 1, "", "acl", "add", "--principal", "User:ANONYMOUS", "--operation", "all", "--topic", "*")
	wantContains(t, "acl add without ALTER on the cluster", r.stderr,
		"acl add: CLUSTER_AUTHORIZATION_FAILED: creating ACLs needs ALTER on the cluster: run as a super user (a principal the broker's --super-users names)",
		"ringlog acl add --principal User:ANONYMOUS --operation alter --cluster")
	r = b.anon(t, 1, "", "acl", "list")
	wantContains(t, "acl list without DESCRIBE on the cluster", r.stderr, "acl list: CLUSTER_AUTHORIZATION_FAILED: listing ACLs needs DESCRIBE on the cluster", "super user")
	r = b.anon(t, 1, "", "acl", "delete", "--principal", "User:x")
	wantContains(t, "acl delete without ALTER on the cluster", r.stderr, "deleting ACLs needs ALTER on the cluster")
	if n := len(b.storedACLs()); n != 0 {
		t.Errorf("the refused add stored %d ACLs", n)
	}

	// Once granted ALTER and DESCRIBE on the cluster, it may.
	b.admin(t, 0, "acl", "add", "--principal", "User:ANONYMOUS", "--operation", "alter", "--operation", "describe", "--cluster")
	b.anon(t, 0, "", "acl", "add", "--principal", "User:carol", "--operation", "read", "--topic", "t")
	if r := b.anon(t, 0, "", "acl", "list", "--principal", "User:carol"); !strings.Contains(r.stdout, "User:carol") {
		t.Errorf("acl list after the grant:\n%s", r.stdout)
	}

	// Without --authorizer the broker serves no ACL APIs.
	plain := startToolBroker(t)
	for _, args := range [][]string{{"acl", "list"}, {"acl", "add", "--principal", "User:a", "--operation", "read", "--topic", "t"}, {"acl", "delete", "--principal", "User:a"}} {
		r := plain.run(t, 1, "", args...)
		wantContains(t, "ringlog "+strings.Join(args, " ")+" without --authorizer", r.stderr, "has no authorizer", "restart it with --authorizer")
	}
}

// TestToolsAuthorizationHints: a tool the ACLs refuse names the operation
// and resource it needed and the acl add that grants it, for the
// principal it connected as.
func TestToolsAuthorizationHints(t *testing.T) {
	t.Parallel()
	b := startACLBroker(t)
	b.admin(t, 0, "topic", "create", "orders", "--partitions", "2")
	b.admin(t, 0, "acl", "add", "--principal", "User:ANONYMOUS", "--operation", "describe", "--topic", "orders")

	grant := func(op, flag, name string) string {
		return "(ask an admin: ringlog acl add --principal User:ANONYMOUS --operation " + op + " --" + flag + " " + name + ")"
	}
	for _, tc := range []struct {
		stdin string
		args  []string
		want  []string
	}{
		{"", []string{"topic", "describe", "orders"}, []string{
			`topic describe orders: TOPIC_AUTHORIZATION_FAILED: needs DESCRIBE_CONFIGS on topic "orders" ` + grant("describe_configs", "topic", "orders")}},
		{"", []string{"topic", "describe", "secret"}, []string{
			`topic describe secret: TOPIC_AUTHORIZATION_FAILED: needs DESCRIBE on topic "secret" ` + grant("describe", "topic", "secret")}},
		{"", []string{"topic", "create", "fresh"}, []string{
			`topic create fresh: TOPIC_AUTHORIZATION_FAILED: needs CREATE on topic "fresh" ` + grant("create", "topic", "fresh")}},
		{"", []string{"topic", "delete", "orders"}, []string{
			`topic delete orders: TOPIC_AUTHORIZATION_FAILED: needs DELETE on topic "orders" ` + grant("delete", "topic", "orders")}},
		{"", []string{"topic", "alter", "orders", "--set", "retention.ms=1000"}, []string{
			`topic alter orders: TOPIC_AUTHORIZATION_FAILED: needs ALTER_CONFIGS on topic "orders" ` + grant("alter_configs", "topic", "orders")}},
		{"", []string{"topic", "alter", "orders", "--partitions", "3"}, []string{
			`topic alter orders: TOPIC_AUTHORIZATION_FAILED: needs ALTER on topic "orders" ` + grant("alter", "topic", "orders")}},
		{"a\nb\n", []string{"produce", "orders"}, []string{
			`produce orders: `, `_AUTHORIZATION_FAILED: `, `needs WRITE on topic "orders" ` + grant("write", "topic", "orders")}},
		{"", []string{"produce", "secret"}, []string{
			`produce secret: TOPIC_AUTHORIZATION_FAILED: needs WRITE on topic "secret" ` + grant("write", "topic", "secret")}},
		{"", []string{"consume", "orders", "--from-beginning", "--idle-timeout", "5s"}, []string{
			`consume orders: TOPIC_AUTHORIZATION_FAILED: needs READ on topic "orders" ` + grant("read", "topic", "orders")}},
		{"", []string{"group", "describe", "billing"}, []string{
			`group describe billing: GROUP_AUTHORIZATION_FAILED: needs DESCRIBE on group "billing" ` + grant("describe", "group", "billing")}},
		{"", []string{"group", "delete", "billing"}, []string{
			`group delete billing: GROUP_AUTHORIZATION_FAILED: needs DELETE on group "billing" ` + grant("delete", "group", "billing")}},
		{"", []string{"user", "list", "--timeout", "10s"}, []string{
			"user list: CLUSTER_AUTHORIZATION_FAILED: listing SCRAM users needs DESCRIBE on the cluster: run as a super user"}},
	} {
		r := b.anon(t, 1, tc.stdin, tc.args...)
		wantContains(t, "ringlog "+strings.Join(tc.args, " "), r.stderr, tc.want...)
	}

	// With READ on the topic, a group consumer is told about the group.
	b.admin(t, 0, "acl", "add", "--principal", "User:ANONYMOUS", "--operation", "read", "--topic", "orders")
	r := b.anon(t, 1, "", "consume", "orders", "--group", "billing", "--timeout", "20s")
	wantContains(t, "consume --group without READ on the group", r.stderr,
		`consume orders: GROUP_AUTHORIZATION_FAILED: needs READ on group "billing" `+grant("read", "group", "billing"))
	if r.took > 15*time.Second {
		t.Errorf("consume --group took %v to report the refused group", r.took)
	}

	// The principal in the hint is the one the command connects as.
	cred, err := security.NewScramCredential(security.ScramSHA512, "pw", security.MinIterations, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.B.Security().UpsertCredential("alice", cred); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "alice.pw")
	if err := os.WriteFile(pw, []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = tool(t, "", nil, "topic", "describe", "orders", "--brokers", b.sasl, "--security-protocol", "SASL_PLAINTEXT",
		"--sasl-username", "alice", "--sasl-password-file", pw)
	wantContains(t, "topic describe as alice", r.stderr, `needs DESCRIBE on topic "orders" (ask an admin: ringlog acl add --principal User:alice --operation describe --topic orders)`)
}

// TestAuthzHintTable: every request the tools send maps to an operation,
// and the messages name resources as `ringlog acl` takes them.
func TestAuthzHintTable(t *testing.T) {
	for _, api := range []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.ListOffsets, kmsg.Metadata, kmsg.OffsetCommit, kmsg.OffsetFetch,
		kmsg.FindCoordinator, kmsg.JoinGroup, kmsg.DescribeGroups, kmsg.ListGroups, kmsg.CreateTopics, kmsg.DeleteTopics,
		kmsg.InitProducerID, kmsg.DescribeACLs, kmsg.CreateACLs, kmsg.DeleteACLs, kmsg.DescribeConfigs, kmsg.IncrementalAlterConfigs,
		kmsg.CreatePartitions, kmsg.DeleteGroups, kmsg.OffsetDelete, kmsg.DescribeUserSCRAMCredentials, kmsg.AlterUserSCRAMCredentials,
		kmsg.DescribeTransactions, kmsg.ListTransactions} {
		for _, rt := range []kmsg.ACLResourceType{kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeCluster} {
			if op, _ := aclNeed(api, rt); op == kmsg.ACLOperationUnknown || op == kmsg.ACLOperationAny {
				t.Errorf("aclNeed(%v, %v) = %v", api, rt, op)
			}
		}
	}
	for r, want := range map[aclResource]string{
		topicResource("orders"):  "--topic orders",
		groupResource("my grp"):  "--group 'my grp'",
		txnResource("tx-1"):      "--transactional-id tx-1",
		clusterResource():        "--cluster",
		groupResource("it's"):    `--group 'it'\''s'`,
		topicResource("a.b_c-d"): "--topic a.b_c-d",
	} {
		if got := r.flag(); got != want {
			t.Errorf("%v.flag() = %q, want %q", r, got, want)
		}
	}
}
