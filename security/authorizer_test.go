package security

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestAuthorizer(t *testing.T) {
	s := newStore(t)
	onHost := func(a ACL, host string) ACL { a.Host = host; return a }
	mustCreate(t, s,
		binding(topic, "orders", lit, "User:alice", opRead, allow),
		binding(topic, "logs-", pre, "User:alice", opWrite, allow),
		binding(topic, "logs-secret", lit, "User:alice", opWrite, deny),
		binding(topic, "*", lit, "User:bob", opDescribe, allow),
		onHost(binding(topic, "public", lit, "User:*", opRead, allow), "10.0.0.1"),
		binding(topic, "cfg", lit, "User:carol", opAlterCfg, allow),
		binding(topic, "mixed", lit, "User:dan", opAll, allow),
		binding(topic, "mixed", lit, "User:dan", opDescribe, deny),
		binding(topic, "del", lit, "User:dan", opDelete, allow),
		binding(topic, "alt", lit, "User:dan", opAlter, allow),
		binding(topic, "w", lit, "User:dan", opWrite, allow),
		binding(topic, "quiet", lit, "User:dan", opRead, allow),
		binding(topic, "quiet", lit, "User:dan", opAll, deny),
		binding(topic, "shared", lit, "User:*", opRead, allow),
		binding(topic, "shared", lit, "User:mallory", opRead, deny),
		onHost(binding(topic, "shared", lit, "User:*", opRead, deny), "6.6.6.6"),
		binding(topic, "tmp-", pre, "User:*", opAll, deny),
		binding(topic, "tmp-ok", lit, "User:erin", opRead, allow),
		binding(group, "g", lit, "User:alice", opRead, allow),
		binding(cluster, "kafka-cluster", lit, "User:ops", opIdemWrite, allow),
	)
	a := NewAuthorizer(s, []string{"User:root", "User:admin"})
	for _, c := range []struct {
		why     string
		p, host string
		op      kmsg.ACLOperation
		rt      kmsg.ACLResourceType
		name    string
		want    bool
	}{
		{"literal", "User:alice", "1.2.3.4", opRead, topic, "orders", true},
		{"literal, other name", "User:alice", "1.2.3.4", opRead, topic, "orders2", false},
		{"literal, other operation", "User:alice", "1.2.3.4", opWrite, topic, "orders", false},
		{"READ implies DESCRIBE", "User:alice", "1.2.3.4", opDescribe, topic, "orders", true},
		{"READ implies nothing else", "User:alice", "1.2.3.4", opDescCfg, topic, "orders", false},
		{"prefixed", "User:alice", "h", opWrite, topic, "logs-app", true},
		{"prefixed, the prefix itself", "User:alice", "h", opWrite, topic, "logs-", true},
		{"prefixed, shorter name", "User:alice", "h", opWrite, topic, "logs", false},
		{"prefixed, not a prefix", "User:alice", "h", opWrite, topic, "app-logs-x", false},
		{"literal deny beats prefixed allow", "User:alice", "h", opWrite, topic, "logs-secret", false},
		{"WRITE implies DESCRIBE despite the deny of WRITE", "User:alice", "h", opDescribe, topic, "logs-secret", true},
		{"wildcard name", "User:bob", "h", opDescribe, topic, "anything", true},
		{"DESCRIBE does not imply READ", "User:bob", "h", opRead, topic, "anything", false},
		{"wildcard name, other type", "User:bob", "h", opDescribe, group, "anything", false},
		{"wildcard principal on its host", "User:eve", "10.0.0.1", opRead, topic, "public", true},
		{"wildcard principal, other host", "User:eve", "10.0.0.2", opRead, topic, "public", false},
		{"ALTER_CONFIGS implies DESCRIBE_CONFIGS", "User:carol", "h", opDescCfg, topic, "cfg", true},
		{"ALTER_CONFIGS does not imply DESCRIBE", "User:carol", "h", opDescribe, topic, "cfg", false},
		{"ALTER_CONFIGS does not imply ALTER", "User:carol", "h", opAlter, topic, "cfg", false},
		{"ALL", "User:dan", "h", opCreate, topic, "mixed", true},
		{"DENY DESCRIBE does not deny READ", "User:dan", "h", opRead, topic, "mixed", true},
		{"DENY DESCRIBE denies DESCRIBE over ALL", "User:dan", "h", opDescribe, topic, "mixed", false},
		{"DELETE implies DESCRIBE", "User:dan", "h", opDescribe, topic, "del", true},
		{"ALTER implies DESCRIBE", "User:dan", "h", opDescribe, topic, "alt", true},
		{"WRITE implies DESCRIBE", "User:dan", "h", opDescribe, topic, "w", true},
		{"WRITE does not imply READ", "User:dan", "h", opRead, topic, "w", false},
		{"DENY ALL denies READ", "User:dan", "h", opRead, topic, "quiet", false},
		{"wildcard allow", "User:zoe", "h", opRead, topic, "shared", true},
		{"user deny beats wildcard allow", "User:mallory", "h", opRead, topic, "shared", false},
		{"host deny beats wildcard allow", "User:zoe", "6.6.6.6", opRead, topic, "shared", false},
		{"prefixed wildcard deny beats literal allow", "User:erin", "h", opRead, topic, "tmp-ok", false},
		{"other resource type", "User:alice", "h", opRead, group, "g", true},
		{"type is part of the resource", "User:alice", "h", opRead, group, "orders", false},
		{"cluster", "User:ops", "h", opIdemWrite, cluster, "kafka-cluster", true},
		{"super user", "User:root", "h", kmsg.ACLOperationDelete, cluster, "kafka-cluster", true},
		{"super user despite a deny", "User:admin", "h", opRead, topic, "tmp-x", true},
		{"super user names are exact", "User:Root", "h", opRead, topic, "x", false},
		{"default deny", "User:nobody", "h", opDescribe, topic, "orders", false},
		{"no principal", "", "h", opRead, topic, "orders", false},
	} {
		if got := a.Authorize(c.p, c.host, c.op, c.rt, c.name); got != c.want {
			t.Errorf("%s: %s@%s %v %v %q = %v, want %v", c.why, c.p, c.host, c.op, c.rt, c.name, got, c.want)
		}
	}
}

// TestAuthorizerSeesChanges: a decision after a change returned reflects it.
func TestAuthorizerSeesChanges(t *testing.T) {
	s := newStore(t)
	a := NewAuthorizer(s, nil)
	if a.Authorize("User:u", "h", opRead, topic, "t") {
		t.Fatal("allowed with no ACLs")
	}
	mustCreate(t, s, binding(topic, "t", lit, "User:u", opRead, allow))
	if !a.Authorize("User:u", "h", opRead, topic, "t") {
		t.Fatal("a new ALLOW is not seen")
	}
	mustCreate(t, s, binding(topic, "t", lit, "User:u", opRead, deny))
	if a.Authorize("User:u", "h", opRead, topic, "t") {
		t.Fatal("a new DENY is not seen")
	}
	if _, err := s.DeleteACLs([]ACLFilter{{ResourceType: kmsg.ACLResourceTypeAny, PatternType: kmsg.ACLResourcePatternTypeAny, Operation: kmsg.ACLOperationAny, Permission: deny}}); err != nil {
		t.Fatal(err)
	}
	if !a.Authorize("User:u", "h", opRead, topic, "t") {
		t.Fatal("the deleted DENY still applies")
	}
}

// hundredBindings is the benchmark's store: 100 bindings over topics,
// prefixes and groups for several users.
func hundredBindings(t testing.TB) *Store {
	s := newStore(t)
	var acls []ACL
	for i := range 100 {
		user := fmt.Sprintf("User:u%d", i%5)
		switch i % 4 {
		case 0:
			acls = append(acls, binding(topic, fmt.Sprintf("topic-%d", i), lit, user, opWrite, allow))
		case 1:
			acls = append(acls, binding(topic, fmt.Sprintf("team-%d-", i), pre, user, opRead, allow))
		case 2:
			acls = append(acls, binding(group, fmt.Sprintf("group-%d", i), lit, user, opRead, allow))
		default:
			acls = append(acls, binding(topic, fmt.Sprintf("topic-%d", i), lit, "User:*", opDescribe, deny))
		}
	}
	mustCreate(t, s, acls...)
	return s
}

func TestAuthorizeDoesNotAllocate(t *testing.T) {
	a := NewAuthorizer(hundredBindings(t), []string{"User:root"})
	name := "topic-96"
	if allocs := testing.AllocsPerRun(100, func() {
		if !a.Authorize("User:u1", "127.0.0.1", opWrite, topic, name) {
			t.Fatal("denied")
		}
		a.Authorize("User:u1", "127.0.0.1", opRead, topic, "team-97-x")
		a.Authorize("User:root", "127.0.0.1", opRead, topic, name)
	}); allocs != 0 {
		t.Fatalf("%v allocations per decision", allocs)
	}
}

func BenchmarkAuthorize(b *testing.B) {
	a := NewAuthorizer(hundredBindings(b), []string{"User:root"})
	b.ReportAllocs()
	for b.Loop() {
		if !a.Authorize("User:u1", "127.0.0.1", opWrite, topic, "topic-96") {
			b.Fatal("denied")
		}
	}
}
