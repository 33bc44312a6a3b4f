package security

import (
	"context"
	"crypto/sha512"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	kscram "github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/xdg-go/pbkdf2"
	"github.com/xdg-go/scram"
)

func newStore(t testing.TB) *Store {
	t.Helper()
	s, err := OpenStore(filepath.Join(t.TempDir(), "security.json"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func addUser(t testing.TB, s *Store, user, pass string, mechs ...Mechanism) {
	t.Helper()
	for _, m := range mechs {
		c, err := NewScramCredential(m, pass, MinIterations, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.UpsertCredential(user, c); err != nil {
			t.Fatal(err)
		}
	}
}

// xdgClient runs xdg-go/scram's client against a server exchange.
func xdgClient(t *testing.T, s *Store, m Mechanism, user, pass string) (string, error) {
	t.Helper()
	gen := scram.SHA256
	if m == ScramSHA512 {
		gen = scram.SHA512
	}
	cl, err := gen.NewClient(user, pass, "")
	if err != nil {
		t.Fatal(err)
	}
	conv := cl.NewConversation()
	ex := NewScram(s, m)
	c1, _ := conv.Step("")
	s1, done, err := ex.Step([]byte(c1))
	if err != nil || done {
		return "", err
	}
	c2, err := conv.Step(string(s1))
	if err != nil {
		t.Fatal(err)
	}
	s2, done, err := ex.Step([]byte(c2))
	if err != nil {
		return "", err
	}
	if !done {
		t.Fatal("not done after client-final")
	}
	if _, err := conv.Step(string(s2)); err != nil || !conv.Valid() {
		t.Fatalf("client rejects the server signature: %v", err)
	}
	return ex.Principal(), nil
}

func TestScramWithXdgClient(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "alice", "pässwörd", ScramSHA256, ScramSHA512)
	for _, m := range []Mechanism{ScramSHA256, ScramSHA512} {
		if p, err := xdgClient(t, s, m, "alice", "pässwörd"); err != nil || p != "User:alice" {
			t.Fatalf("%s good password: %q %v", m, p, err)
		}
		if _, err := xdgClient(t, s, m, "alice", "wrong"); !errors.Is(err, ErrAuthenticationFailed) {
			t.Fatalf("%s wrong password: %v", m, err)
		}
		if _, err := xdgClient(t, s, m, "mallory", "x"); !errors.Is(err, ErrAuthenticationFailed) {
			t.Fatalf("%s unknown user: %v", m, err)
		}
	}
}

// TestScramWithFranzGo drives the exchange with the client the e2e tests
// use, and a librdkafka-style client-final that repeats the client nonce.
func TestScramWithFranzGo(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "bob", "hunter2", ScramSHA512)
	run := func(pass string) error {
		var mech sasl.Mechanism = kscram.Auth{User: "bob", Pass: pass}.AsSha512Mechanism()
		sess, first, err := mech.Authenticate(context.Background(), "localhost")
		if err != nil {
			t.Fatal(err)
		}
		ex := NewScram(s, ScramSHA512)
		msg := first
		for {
			out, done, err := ex.Step(msg)
			if err != nil {
				return err
			}
			cdone, next, cerr := sess.Challenge(out)
			if cerr != nil {
				t.Fatalf("client: %v", cerr)
			}
			if done || cdone {
				if !done || !cdone {
					t.Fatalf("server done %v, client done %v", done, cdone)
				}
				return nil
			}
			msg = next
		}
	}
	if err := run("hunter2"); err != nil {
		t.Fatal(err)
	}
	if err := run("hunter3"); !errors.Is(err, ErrAuthenticationFailed) {
		t.Fatalf("wrong password: %v", err)
	}
}

func TestScramRefusals(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "bob", "pw", ScramSHA256)
	for first, want := range map[string]string{
		"p=tls-unique,,n=bob,r=abc":     "channel binding",
		"n,,n=bob,r=abc,tokenauth=true": "extension",
		"n,,r=abc":                      "want n=USER",
		"n,,n=,r=abc":                   "empty user",
		"n,,n=b=4ob,r=abc":              "bad escape",
		"n,a=eve,n=bob,r=abc":           "authorization id",
		"x,,n=bob,r=abc":                "gs2 flag",
		"n,,n=bob,r=":                   "nonce",
	} {
		_, _, err := NewScram(s, ScramSHA256).Step([]byte(first))
		if !errors.Is(err, ErrMalformedSASL) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", first, err, want)
		}
	}
	ex := NewScram(s, ScramSHA256)
	if _, _, err := ex.Step([]byte("n,,n=bob,r=abc")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ex.Step([]byte("c=biws,r=abcWRONG,p=AAAA")); !errors.Is(err, ErrAuthenticationFailed) {
		t.Fatalf("a wrong nonce: %v", err)
	}
	if _, _, err := ex.Step([]byte("x")); err == nil {
		t.Fatal("a third step succeeded")
	}
}

func TestPlain(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "carol", "s3cret", ScramSHA256)
	ok := func(msg string) (string, error) {
		ex := NewPlain(s)
		_, done, err := ex.Step([]byte(msg))
		if !done {
			t.Fatalf("%q: PLAIN not done after one step", msg)
		}
		return ex.Principal(), err
	}
	for _, good := range []string{"\x00carol\x00s3cret", "carol\x00carol\x00s3cret"} {
		if p, err := ok(good); err != nil || p != "User:carol" {
			t.Fatalf("%q: %q %v", good, p, err)
		}
	}
	for _, bad := range []string{"\x00carol\x00wrong", "\x00nobody\x00s3cret"} {
		if _, err := ok(bad); !errors.Is(err, ErrAuthenticationFailed) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	for _, bad := range []string{"carol\x00s3cret", "\x00carol\x00s3\x00cret", "\x00\x00s3cret", "\x00carol\x00", "eve\x00carol\x00s3cret", ""} {
		if _, err := ok(bad); !errors.Is(err, ErrMalformedSASL) {
			t.Fatalf("%q: %v, want malformed", bad, err)
		}
	}
}

func TestFromSaltedMatchesPassword(t *testing.T) {
	salt := []byte("0123456789abcdef")
	want, err := NewScramCredential(ScramSHA512, "pw", 8192, salt)
	if err != nil {
		t.Fatal(err)
	}
	salted := pbkdf2.Key([]byte("pw"), salt, 8192, sha512.Size, sha512.New)
	got, err := FromSalted(ScramSHA512, salt, salted, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.StoredKey) != string(want.StoredKey) || string(got.ServerKey) != string(want.ServerKey) {
		t.Fatal("FromSalted and NewScramCredential disagree")
	}
	if !got.VerifyPassword("pw") || got.VerifyPassword("pw2") {
		t.Fatal("VerifyPassword")
	}
	for _, n := range []int{100, 4095, 16385} {
		if _, err := FromSalted(ScramSHA512, salt, salted, n); err == nil {
			t.Errorf("%d iterations accepted", n)
		}
	}
	if _, err := FromSalted(ScramSHA512, salt, salted[:10], 4096); err == nil {
		t.Error("a short salted password accepted")
	}
}

func TestStorePersistsAndRefusesDamage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "security.json")
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	addUser(t, s, "dave", "pw", ScramSHA256, ScramSHA512)
	acl := ACL{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "orders", PatternType: kmsg.ACLResourcePatternTypePrefixed,
		Principal: "User:dave", Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow}
	if errs := s.CreateACLs([]ACL{acl, acl}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	bad := acl
	bad.Principal = "dave"
	if errs := s.CreateACLs([]ACL{bad}); !errors.Is(errs[0], ErrInvalidACL) {
		t.Fatalf("a principal without User: %v", errs[0])
	}
	re, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if u := re.Users(); len(u) != 1 || u[0].Name != "dave" || len(u[0].Mechanisms) != 2 {
		t.Fatalf("users after reopening: %+v", u)
	}
	if got := re.ACLs(); len(got) != 1 || got[0] != acl {
		t.Fatalf("ACLs after reopening: %+v", got)
	}
	if err := re.DeleteCredential("dave", ScramSHA256); err != nil {
		t.Fatal(err)
	}
	if err := re.DeleteCredential("dave", ScramSHA256); !errors.Is(err, ErrNoSuchCredential) {
		t.Fatalf("deleting twice: %v", err)
	}
	// A failed save changes nothing in memory.
	os.RemoveAll(dir)
	if err := re.UpsertCredential("erin", mustCred(t, ScramSHA256, "x")); err == nil {
		t.Fatal("saving into a removed directory succeeded")
	}
	if _, ok := re.Credential("erin", ScramSHA256); ok {
		t.Fatal("a credential whose save failed is visible")
	}
	if errs := re.CreateACLs([]ACL{{ResourceType: kmsg.ACLResourceTypeGroup, ResourceName: "g", PatternType: kmsg.ACLResourcePatternTypeLiteral,
		Principal: "User:x", Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow}}); errs[0] == nil || len(re.ACLs()) != 1 {
		t.Fatalf("an ACL whose save failed: %v, %d ACLs", errs[0], len(re.ACLs()))
	}
	// A damaged file: an error that names it and says what to do.
	os.MkdirAll(dir, 0o755)
	os.WriteFile(path, []byte(`{"version":1,"users":{"x":{"SCRAM-SHA-256":{"mechanism":"SCRAM-SHA-256","salt":"","iterations":1}}}}`), 0o600)
	if _, err := OpenStore(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move it aside") {
		t.Fatalf("damaged store: %v", err)
	}
}

func mustCred(t testing.TB, m Mechanism, pass string) ScramCredential {
	c, err := NewScramCredential(m, pass, MinIterations, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDeleteACLFilters(t *testing.T) {
	s := newStore(t)
	mk := func(name string, pt kmsg.ACLResourcePatternType, p string, op kmsg.ACLOperation) ACL {
		return ACL{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: name, PatternType: pt, Principal: p, Host: "*", Operation: op, Permission: kmsg.ACLPermissionTypeAllow}
	}
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	all := []ACL{mk("orders", lit, "User:a", kmsg.ACLOperationRead), mk("ord", pre, "User:a", kmsg.ACLOperationWrite),
		mk("*", lit, "User:b", kmsg.ACLOperationRead), mk("payroll", lit, "User:b", kmsg.ACLOperationRead), mk("or", lit, "User:c", kmsg.ACLOperationRead)}
	for _, err := range s.CreateACLs(all) {
		if err != nil {
			t.Fatal(err)
		}
	}
	name := "orders"
	match := ACLFilter{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: &name, PatternType: kmsg.ACLResourcePatternTypeMatch,
		Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}
	var got []string
	for _, a := range s.ACLs() {
		if match.Matches(a) {
			got = append(got, a.ResourceName)
		}
	}
	if strings.Join(got, ",") != "orders,ord,*" {
		t.Fatalf("MATCH orders selects %v", got)
	}
	b := "User:b"
	del, err := s.DeleteACLs([]ACLFilter{{ResourceType: kmsg.ACLResourceTypeAny, PatternType: kmsg.ACLResourcePatternTypeAny,
		Principal: &b, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}})
	if err != nil || len(del[0]) != 2 || len(s.ACLs()) != 3 {
		t.Fatalf("delete User:b: %v %v, %d left", err, del, len(s.ACLs()))
	}
	if _, err := s.DeleteACLs([]ACLFilter{{ResourceType: 99}}); !errors.Is(err, ErrInvalidACL) {
		t.Fatalf("a bad filter: %v", err)
	}
}

func TestAuthorizer(t *testing.T) {
	s := newStore(t)
	topic, group := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	allow, deny := kmsg.ACLPermissionTypeAllow, kmsg.ACLPermissionTypeDeny
	acls := []ACL{
		{topic, "orders", lit, "User:alice", "*", kmsg.ACLOperationRead, allow},
		{topic, "logs-", pre, "User:alice", "*", kmsg.ACLOperationWrite, allow},
		{topic, "*", lit, "User:bob", "*", kmsg.ACLOperationDescribe, allow},
		{topic, "public", lit, "User:*", "10.0.0.1", kmsg.ACLOperationRead, allow},
		{topic, "logs-secret", lit, "User:alice", "*", kmsg.ACLOperationWrite, deny},
		{topic, "cfg", lit, "User:carol", "*", kmsg.ACLOperationAlterConfigs, allow},
		{topic, "mixed", lit, "User:dan", "*", kmsg.ACLOperationAll, allow},
		{topic, "mixed", lit, "User:dan", "*", kmsg.ACLOperationDescribe, deny},
		{group, "g", lit, "User:alice", "*", kmsg.ACLOperationRead, allow},
	}
	for _, err := range s.CreateACLs(acls) {
		if err != nil {
			t.Fatal(err)
		}
	}
	a := NewAuthorizer(s, []string{"User:root"})
	for _, c := range []struct {
		p, host string
		op      kmsg.ACLOperation
		rt      kmsg.ACLResourceType
		name    string
		want    bool
	}{
		{"User:alice", "1.2.3.4", kmsg.ACLOperationRead, topic, "orders", true},
		{"User:alice", "1.2.3.4", kmsg.ACLOperationDescribe, topic, "orders", true}, // READ implies DESCRIBE
		{"User:alice", "1.2.3.4", kmsg.ACLOperationWrite, topic, "orders", false},
		{"User:alice", "1.2.3.4", kmsg.ACLOperationWrite, topic, "logs-app", true}, // prefixed
		{"User:alice", "1.2.3.4", kmsg.ACLOperationWrite, topic, "logs", false},
		{"User:alice", "1.2.3.4", kmsg.ACLOperationWrite, topic, "logs-secret", false}, // deny wins
		{"User:bob", "1.2.3.4", kmsg.ACLOperationDescribe, topic, "anything", true},    // wildcard name
		{"User:bob", "1.2.3.4", kmsg.ACLOperationRead, topic, "anything", false},       // DESCRIBE does not imply READ
		{"User:eve", "10.0.0.1", kmsg.ACLOperationRead, topic, "public", true},         // wildcard principal, host
		{"User:eve", "10.0.0.2", kmsg.ACLOperationRead, topic, "public", false},
		{"User:carol", "h", kmsg.ACLOperationDescribeConfigs, topic, "cfg", true}, // ALTER_CONFIGS implies DESCRIBE_CONFIGS
		{"User:carol", "h", kmsg.ACLOperationDescribe, topic, "cfg", false},
		{"User:dan", "h", kmsg.ACLOperationRead, topic, "mixed", true},      // DENY DESCRIBE does not deny READ
		{"User:dan", "h", kmsg.ACLOperationDescribe, topic, "mixed", false}, // but denies DESCRIBE
		{"User:alice", "h", kmsg.ACLOperationRead, group, "g", true},
		{"User:alice", "h", kmsg.ACLOperationRead, group, "orders", false}, // other resource type
		{"User:root", "h", kmsg.ACLOperationDelete, kmsg.ACLResourceTypeCluster, "kafka-cluster", true},
		{"User:nobody", "h", kmsg.ACLOperationDescribe, topic, "orders", false}, // default deny
	} {
		if got := a.Authorize(c.p, c.host, c.op, c.rt, c.name); got != c.want {
			t.Errorf("%s@%s %v %v %q: %v, want %v", c.p, c.host, c.op, c.rt, c.name, got, c.want)
		}
	}
}

func BenchmarkAuthorize(b *testing.B) {
	s := newStore(b)
	var acls []ACL
	for i := 0; i < 100; i++ {
		acls = append(acls, ACL{kmsg.ACLResourceTypeTopic, "topic-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), kmsg.ACLResourcePatternTypeLiteral,
			"User:u", "*", kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeAllow})
	}
	s.CreateACLs(acls)
	a := NewAuthorizer(s, nil)
	b.ReportAllocs()
	for b.Loop() {
		if !a.Authorize("User:u", "127.0.0.1", kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, "topic-zc") {
			b.Fatal("denied")
		}
	}
}
