package metadata

import (
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestRegisterBrokerListeners(t *testing.T) {
	img := cluster(t, 1, 0)
	ls := []Listener{{Name: "SSL", Addr: "h:9092"}, {Name: "SASL_SSL", Addr: "h:9095"}}
	rec := RegisterBroker{ID: 2, Incarnation: UUID{2}, KafkaAddr: "h:9092", Listeners: ls}
	img, res := step(t, img, rec)
	b := mustBroker(t, img, 2)
	if !slices.Equal(b.Listeners, ls) {
		t.Fatalf("listeners %v, want %v", b.Listeners, ls)
	}
	if addr, ok := b.Listener("SASL_SSL"); !ok || addr != "h:9095" {
		t.Fatalf("SASL_SSL listener: %q %v", addr, ok)
	}
	if _, ok := b.Listener("PLAINTEXT"); ok {
		t.Fatal("a broker with listeners has no implicit PLAINTEXT one")
	}
	if addr, ok := mustBroker(t, img, 1).Listener("PLAINTEXT"); !ok || addr != "127.0.0.1:9001" {
		t.Fatalf("a broker without listeners: PLAINTEXT at %q %v, want its Kafka address", addr, ok)
	}
	// The same registration again is a no-op; other listeners are a new
	// registration.
	img, again := step(t, img, rec)
	if again.BrokerEpoch != res.BrokerEpoch {
		t.Fatalf("a retried registration got epoch %d, want %d", again.BrokerEpoch, res.BrokerEpoch)
	}
	moved := rec
	moved.Listeners = []Listener{{Name: "SSL", Addr: "h:9092"}}
	_, next := step(t, img, moved)
	if next.BrokerEpoch == res.BrokerEpoch {
		t.Fatal("changed listeners kept the epoch")
	}
	for _, bad := range [][]Listener{
		{{Name: "SSL", Addr: "h:1"}, {Name: "SSL", Addr: "h:2"}},
		{{Name: "ssl", Addr: "h:1"}},
		{{Name: "", Addr: "h:1"}},
		{{Name: "SSL", Addr: "nohost"}},
	} {
		r := rec
		r.Incarnation, r.Listeners = UUID{9}, bad
		refused(t, img, r, kerr.InvalidRegistration)
	}
}

func TestScramCredentials(t *testing.T) {
	img := cluster(t, 1, 0)
	c256, c512 := sampleScram(ScramSHA256), sampleScram(ScramSHA512)
	img, _ = step(t, img, UpsertScramCredential{User: "bob", Mechanism: ScramSHA512, Credential: c512})
	img, _ = step(t, img, UpsertScramCredential{User: "alice", Mechanism: ScramSHA256, Credential: c256})
	before := img
	c256b := c256
	c256b.Iterations = 8192
	img, _ = step(t, img, UpsertScramCredential{User: "alice", Mechanism: ScramSHA256, Credential: c256b})
	img, _ = step(t, img, UpsertScramCredential{User: "alice", Mechanism: ScramSHA512, Credential: c512})
	if got, ok := img.ScramCredential("alice", ScramSHA256); !ok || got.Iterations != 8192 {
		t.Fatalf("alice's SHA-256 credential after the replacement: %+v %v", got, ok)
	}
	if got, _ := before.ScramCredential("alice", ScramSHA256); got.Iterations != 4096 {
		t.Fatal("an upsert changed the image it was applied to")
	}
	want := []ScramUser{
		{Name: "alice", Mechanisms: []ScramUserMechanism{{ScramSHA256, 8192}, {ScramSHA512, 4096}}},
		{Name: "bob", Mechanisms: []ScramUserMechanism{{ScramSHA512, 4096}}},
	}
	if got := img.ScramUsers(); !reflect.DeepEqual(got, want) {
		t.Fatalf("users %+v, want %+v", got, want)
	}
	img, _ = step(t, img, DeleteScramCredential{User: "bob", Mechanism: ScramSHA512})
	if _, ok := img.ScramCredential("bob", ScramSHA512); ok || len(img.ScramUsers()) != 1 {
		t.Fatal("bob survived the deletion of his one credential")
	}
	refused(t, img, DeleteScramCredential{User: "bob", Mechanism: ScramSHA512}, kerr.ResourceNotFound)
	refused(t, img, DeleteScramCredential{User: "alice", Mechanism: 3}, kerr.ResourceNotFound)

	short := c512
	short.StoredKey = short.StoredKey[:32]
	refused(t, img, UpsertScramCredential{User: "carol", Mechanism: ScramSHA512, Credential: short}, kerr.UnacceptableCredential)
	refused(t, img, UpsertScramCredential{User: "", Mechanism: ScramSHA256, Credential: c256}, kerr.UnacceptableCredential)
	refused(t, img, UpsertScramCredential{User: "carol", Mechanism: 7, Credential: c256}, kerr.UnsupportedSaslMechanism)
	noSalt := c256
	noSalt.Salt = nil
	refused(t, img, UpsertScramCredential{User: "carol", Mechanism: ScramSHA256, Credential: noSalt}, kerr.UnacceptableCredential)
}

func TestACLs(t *testing.T) {
	img := cluster(t, 1, 0)
	read := ACLBinding{ResourceType: 2, ResourceName: "orders", PatternType: 3, Principal: "User:alice", Host: "*", Operation: 3, Permission: 3}
	write := read
	write.Operation = 4
	deny := ACLBinding{ResourceType: 4, ResourceName: "kafka-cluster", PatternType: 3, Principal: "User:*", Host: "10.0.0.1", Operation: 2, Permission: 2}
	img, _ = step(t, img, CreateACLs{ACLs: []ACLBinding{write, read, write}})
	before := img
	img, _ = step(t, img, CreateACLs{ACLs: []ACLBinding{deny, read}})
	if got := img.ACLs(); !slices.IsSortedFunc(got, compareACLs) || len(got) != 3 {
		t.Fatalf("ACLs %v: want 3, sorted, without repeats", got)
	}
	if len(before.ACLs()) != 2 {
		t.Fatal("CreateACLs changed the image it was applied to")
	}
	// An invalid binding refuses the whole record.
	bad := read
	bad.PatternType = 1 // ANY: a filter's, never a binding's
	refused(t, img, CreateACLs{ACLs: []ACLBinding{write, bad}}, kerr.InvalidRequest)
	empty := read
	empty.Principal = ""
	refused(t, img, CreateACLs{ACLs: []ACLBinding{empty}}, kerr.InvalidRequest)

	img, _ = step(t, img, DeleteACLs{ACLs: []ACLBinding{read, read, bad}})
	if got := img.ACLs(); len(got) != 2 || slices.Contains(got, read) {
		t.Fatalf("after deleting read: %v", got)
	}
	same := img
	img, _ = step(t, img, DeleteACLs{ACLs: []ACLBinding{read}})
	if img.Hash() != same.Hash() {
		t.Fatal("deleting a missing binding changed the image")
	}
}
