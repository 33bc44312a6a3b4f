package security

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestStorePersists(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "security.json")
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Users()) != 0 || len(s.ACLs()) != 0 {
		t.Fatal("a missing file is not an empty store")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("opening wrote the file: %v", err)
	}
	addUser(t, s, "zed", "zed-first-pw", ScramSHA256)
	addUser(t, s, "dave", "dave-pw", ScramSHA512, ScramSHA256)
	c, err := NewScramCredential(ScramSHA512, "zed-second-pw", 8192, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertCredential("zed", c); err != nil {
		t.Fatal(err)
	}
	acls := []ACL{binding(topic, "orders", pre, "User:dave", opRead, allow), binding(group, "g", lit, "User:*", opAll, deny)}
	mustCreate(t, s, acls...)

	re, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []UserInfo{
		{"dave", []MechanismInfo{{ScramSHA256, 4096}, {ScramSHA512, 4096}}},
		{"zed", []MechanismInfo{{ScramSHA256, 4096}, {ScramSHA512, 8192}}},
	}
	if got := re.Users(); !reflect.DeepEqual(got, want) {
		t.Fatalf("users after reopening: %+v, want %+v", got, want)
	}
	for _, u := range []string{"dave", "zed"} {
		for _, m := range bothScram {
			a, _ := s.Credential(u, m)
			b, ok := re.Credential(u, m)
			if !ok || !reflect.DeepEqual(a, b) {
				t.Errorf("%s %s after reopening: %+v, want %+v", u, m, b, a)
			}
		}
	}
	if got, _ := re.Credential("zed", ScramSHA512); !got.VerifyPassword("zed-second-pw") {
		t.Error("zed's reopened credential does not verify")
	}
	if got := re.ACLs(); !reflect.DeepEqual(got, acls) {
		t.Fatalf("ACLs after reopening: %+v, want %+v", got, acls)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v, %v; want 0600", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("files left beside the store: %v", entries)
	}
	b, _ := os.ReadFile(path)
	// The passwords hold '-', which base64 never writes, so no salt or
	// key can spell one by chance ("pw3" once turned up inside a salt).
	for _, secret := range []string{"zed-first-pw", "dave-pw", "zed-second-pw"} {
		if strings.Contains(string(b), secret) {
			t.Fatalf("the file holds a password: %s", b)
		}
	}
	if !strings.Contains(string(b), `"TOPIC"`) || !strings.Contains(string(b), `"PREFIXED"`) {
		t.Errorf("the file does not name the enums: %s", b)
	}
}

func TestOpenStoreErrors(t *testing.T) {
	if _, err := OpenStore(""); err == nil {
		t.Error("an empty path opened")
	}
	dir := t.TempDir()
	if _, err := OpenStore(dir); err == nil {
		t.Error("a directory opened as a store")
	}
	path := filepath.Join(dir, "security.json")
	cred := mustCred(t, ScramSHA256, "pw")
	credJSON := func(c ScramCredential) string {
		return fmt.Sprintf(`{"mechanism":%q,"salt":"c2FsdA==","iterations":%d,"stored_key":%q,"server_key":%q}`, c.Mechanism, c.Iterations,
			b64(c.StoredKey), b64(c.ServerKey))
	}
	aclJSON := `{"resource_type":"TOPIC","resource_name":"t","pattern_type":"LITERAL","principal":"User:a","host":"*","operation":"READ","permission":"ALLOW"}`
	for name, content := range map[string]string{
		"not JSON":            `{not json`,
		"truncated":           `{"version":1,"users":{`,
		"empty":               ``,
		"null":                `null`,
		"an array":            `[]`,
		"no version":          `{"users":{},"acls":[]}`,
		"a later version":     `{"version":2}`,
		"trailing data":       `{"version":1} {"version":1}`,
		"trailing garbage":    `{"version":1} x`,
		"unknown field":       `{"version":1,"groups":{}}`,
		"bad credential":      `{"version":1,"users":{"x":{"SCRAM-SHA-256":{"mechanism":"SCRAM-SHA-256","salt":"","iterations":1}}}}`,
		"misfiled credential": `{"version":1,"users":{"x":{"SCRAM-SHA-512":` + credJSON(cred) + `}}}`,
		"few iterations":      `{"version":1,"users":{"x":{"SCRAM-SHA-256":` + strings.Replace(credJSON(cred), `"iterations":4096`, `"iterations":100`, 1) + `}}}`,
		"empty user name":     `{"version":1,"users":{"":{"SCRAM-SHA-256":` + credJSON(cred) + `}}}`,
		"invalid ACL":         `{"version":1,"acls":[` + strings.Replace(aclJSON, `"User:a"`, `"a"`, 1) + `]}`,
		"unknown operation":   `{"version":1,"acls":[` + strings.Replace(aclJSON, `"READ"`, `"READS"`, 1) + `]}`,
		"numeric enum":        `{"version":1,"acls":[` + strings.Replace(aclJSON, `"TOPIC"`, `2`, 1) + `]}`,
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := OpenStore(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move it aside") {
			t.Errorf("%s: %v; want an error naming %s and what to do", name, err, path)
		}
	}
	// What a hand edit may leave: a user with no credentials, a repeated
	// binding, whitespace after the object.
	content := `{"version":1,"users":{"x":{},"y":{"SCRAM-SHA-256":` + credJSON(cred) + `}},"acls":[` + aclJSON + `,` + aclJSON + "]}\n\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if u := s.Users(); len(u) != 1 || u[0].Name != "y" || len(s.ACLs()) != 1 {
		t.Fatalf("users %+v, %d ACLs", u, len(s.ACLs()))
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// TestStoreFailedSaveKeepsState: when the file cannot be written each
// change fails and the store stays as it was; a later save writes only
// what succeeded.
func TestStoreFailedSaveKeepsState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "security.json")
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	addUser(t, s, "dave", "pw", ScramSHA256)
	kept := binding(topic, "orders", lit, "User:dave", opRead, allow)
	mustCreate(t, s, kept)
	users, acls := s.Users(), s.ACLs()

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertCredential("erin", mustCred(t, ScramSHA256, "x")); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("upsert into a removed directory: %v", err)
	}
	if err := s.UpsertCredential("dave", mustCred(t, ScramSHA512, "x")); err == nil {
		t.Error("a second upsert into a removed directory succeeded")
	}
	if err := s.DeleteCredential("dave", ScramSHA256); err == nil {
		t.Error("delete in a removed directory succeeded")
	}
	fresh := binding(group, "g", lit, "User:x", opRead, allow)
	if errs := s.CreateACLs([]ACL{fresh, {}}); errs[0] == nil || !errors.Is(errs[1], ErrInvalidACL) {
		t.Errorf("create in a removed directory: %v", errs)
	}
	if _, err := s.DeleteACLs([]ACLFilter{{ResourceType: topic, PatternType: kmsg.ACLResourcePatternTypeAny, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}}); err == nil {
		t.Error("delete of ACLs in a removed directory succeeded")
	}
	if !reflect.DeepEqual(s.Users(), users) || !reflect.DeepEqual(s.ACLs(), acls) {
		t.Fatalf("state changed by failed saves: %+v %+v", s.Users(), s.ACLs())
	}
	if _, ok := s.Credential("erin", ScramSHA256); ok {
		t.Fatal("a credential whose save failed is visible")
	}
	if c, ok := s.Credential("dave", ScramSHA256); !ok || !c.VerifyPassword("pw") {
		t.Fatal("a credential whose delete failed is gone")
	}
	if a := NewAuthorizer(s, nil); a.Authorize("User:x", "h", opRead, group, "g") || !a.Authorize("User:dave", "h", opRead, topic, "orders") {
		t.Fatal("the authorizer sees the failed ACL changes")
	}

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	addUser(t, s, "fay", "pw", ScramSHA512)
	re, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, u := range re.Users() {
		names = append(names, u.Name)
	}
	if strings.Join(names, ",") != "dave,fay" || !reflect.DeepEqual(re.ACLs(), []ACL{kept}) {
		t.Fatalf("after the directory came back: users %v, ACLs %+v", names, re.ACLs())
	}
}

func TestStoreCredentials(t *testing.T) {
	s := newStore(t)
	for name, f := range map[string]func() error{
		"empty user":     func() error { return s.UpsertCredential("", mustCred(t, ScramSHA256, "pw")) },
		"non-UTF-8 user": func() error { return s.UpsertCredential("a\xffb", mustCred(t, ScramSHA256, "pw")) },
		"zero credential": func() error {
			return s.UpsertCredential("a", ScramCredential{})
		},
		"short keys": func() error {
			c := mustCred(t, ScramSHA512, "pw")
			c.StoredKey = c.StoredKey[:32]
			return s.UpsertCredential("a", c)
		},
		"mechanism swapped": func() error {
			c := mustCred(t, ScramSHA512, "pw")
			c.Mechanism = ScramSHA256
			return s.UpsertCredential("a", c)
		},
	} {
		if err := f(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if len(s.Users()) != 0 {
		t.Fatalf("refused credentials stored: %+v", s.Users())
	}
	addUser(t, s, "gus", "one", ScramSHA256)
	addUser(t, s, "gus", "two", ScramSHA256)
	if c, _ := s.Credential("gus", ScramSHA256); !c.VerifyPassword("two") || c.VerifyPassword("one") {
		t.Fatal("upsert did not replace the credential")
	}
	c, _ := s.Credential("gus", ScramSHA256)
	c.StoredKey[0] ^= 1
	c.Salt[0] ^= 1
	if again, _ := s.Credential("gus", ScramSHA256); !again.VerifyPassword("two") {
		t.Fatal("changing a returned credential changed the store's")
	}
	for _, tc := range []struct {
		user string
		m    Mechanism
	}{{"gus", ScramSHA512}, {"nobody", ScramSHA256}, {"gus", "PLAIN"}} {
		if err := s.DeleteCredential(tc.user, tc.m); !errors.Is(err, ErrNoSuchCredential) {
			t.Errorf("delete %s %s: %v, want ErrNoSuchCredential", tc.user, tc.m, err)
		}
	}
	if err := s.DeleteCredential("gus", ScramSHA256); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Credential("gus", ScramSHA256); ok || len(s.Users()) != 0 {
		t.Fatalf("after deleting the last credential: %+v", s.Users())
	}
	if err := s.DeleteCredential("gus", ScramSHA256); !errors.Is(err, ErrNoSuchCredential) {
		t.Fatalf("deleting twice: %v", err)
	}
}

func TestCreateACLs(t *testing.T) {
	s := newStore(t)
	a := binding(topic, "orders", lit, "User:a", opRead, allow)
	b := binding(topic, "orders", lit, "User:a", opRead, deny)
	bad := a
	bad.Host = ""
	errs := s.CreateACLs([]ACL{a, bad, a, b})
	if len(errs) != 4 || errs[0] != nil || !errors.Is(errs[1], ErrInvalidACL) || errs[2] != nil || errs[3] != nil {
		t.Fatalf("results %v", errs)
	}
	if got := s.ACLs(); !reflect.DeepEqual(got, []ACL{a, b}) {
		t.Fatalf("ACLs %+v", got)
	}
	if errs := s.CreateACLs([]ACL{b, a}); errs[0] != nil || errs[1] != nil || len(s.ACLs()) != 2 {
		t.Fatalf("re-creating: %v, %d ACLs", errs, len(s.ACLs()))
	}
	if errs := s.CreateACLs(nil); len(errs) != 0 {
		t.Fatalf("no bindings: %v", errs)
	}
	// Nothing new, nothing written: it succeeds with the file gone.
	os.RemoveAll(filepath.Dir(s.path))
	if errs := s.CreateACLs([]ACL{a}); errs[0] != nil {
		t.Fatalf("a duplicate needed a save: %v", errs[0])
	}
}

func TestDeleteACLs(t *testing.T) {
	s := newStore(t)
	orders := binding(topic, "orders", lit, "User:a", opRead, allow)
	ord := binding(topic, "ord", pre, "User:a", opWrite, allow)
	star := binding(topic, "*", lit, "User:b", opRead, allow)
	payroll := binding(topic, "payroll", lit, "User:b", opRead, allow)
	or := binding(topic, "or", lit, "User:c", opRead, allow)
	g := binding(group, "orders", lit, "User:a", opRead, allow)
	mustCreate(t, s, orders, ord, star, payroll, or, g)

	match := ACLFilter{ResourceType: topic, ResourceName: ptr("orders"), PatternType: kmsg.ACLResourcePatternTypeMatch, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}
	userB := ACLFilter{ResourceType: kmsg.ACLResourceTypeAny, PatternType: kmsg.ACLResourcePatternTypeAny, Principal: ptr("User:b"), Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}
	none := ACLFilter{ResourceType: kmsg.ACLResourceTypeUser, PatternType: kmsg.ACLResourcePatternTypeAny, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}
	del, err := s.DeleteACLs([]ACLFilter{match, userB, none})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]ACL{{orders, ord, star}, {star, payroll}, nil}
	if !reflect.DeepEqual(del, want) {
		t.Fatalf("deleted %+v, want %+v", del, want)
	}
	if got := s.ACLs(); !reflect.DeepEqual(got, []ACL{or, g}) {
		t.Fatalf("left %+v", got)
	}
	if _, err := s.DeleteACLs([]ACLFilter{none, {ResourceType: 99}}); !errors.Is(err, ErrInvalidACL) {
		t.Fatalf("a bad filter: %v", err)
	}
	if len(s.ACLs()) != 2 {
		t.Fatal("a call with a bad filter deleted something")
	}
	re, err := OpenStore(s.path)
	if err != nil || !reflect.DeepEqual(re.ACLs(), []ACL{or, g}) {
		t.Fatalf("after reopening: %+v %v", re.ACLs(), err)
	}
}

// TestACLSnapshotsImmutable: a slice ACLs returned never changes, even
// as bindings are created and deleted.
func TestACLSnapshotsImmutable(t *testing.T) {
	s := newStore(t)
	a := binding(topic, "a", lit, "User:a", opRead, allow)
	b := binding(topic, "b", lit, "User:a", opRead, allow)
	mustCreate(t, s, a, b)
	snap := s.ACLs()
	want := append([]ACL{}, snap...)
	mustCreate(t, s, binding(topic, "c", lit, "User:a", opRead, allow))
	if _, err := s.DeleteACLs([]ACLFilter{{ResourceType: topic, ResourceName: ptr("a"), PatternType: lit, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, binding(topic, "d", lit, "User:a", opRead, allow))
	if !reflect.DeepEqual(snap, want) {
		t.Fatalf("an old snapshot changed: %+v", snap)
	}
	if len(s.ACLs()) != 3 {
		t.Fatalf("current ACLs %+v", s.ACLs())
	}
}

// TestStoreConcurrent is for the race detector: readers on the hot path
// while credentials and bindings change.
func TestStoreConcurrent(t *testing.T) {
	s := newStore(t)
	cred := mustCred(t, ScramSHA256, "pw")
	a := NewAuthorizer(s, nil)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				a.Authorize("User:u", "h", opRead, topic, "t-3")
				s.Credential("u", ScramSHA256)
				s.Users()
			}
		})
	}
	for i := range 20 {
		mustCreate(t, s, binding(topic, fmt.Sprintf("t-%d", i), lit, "User:u", opRead, allow))
		if err := s.UpsertCredential(fmt.Sprintf("u%d", i), cred); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if !a.Authorize("User:u", "h", opRead, topic, "t-19") || len(s.Users()) != 20 {
		t.Fatal("changes lost")
	}
}
