package admin

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Names that are, or collide with, the brokers' internal topics are
// refused.
func TestInternalNameCollision(t *testing.T) {
	for name, want := range map[string]bool{"__consumer_offsets": true, "__consumer.offsets": true, "__Consumer_Offsets": true, "consumer_offsets": false, "orders": false,
		"__transaction_state": true, "__transaction.state": true, "transaction_state": false,
		"__share_group_state": true, "__share.group.state": true, "share_group_state": false} {
		if got := IsInternalName(name); got != want {
			t.Errorf("IsInternalName(%q) = %v, want %v", name, got, want)
		}
	}
}

// Check refuses every malformed shape with the code Kafka gives it.
func TestNewTopicCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    NewTopic
		want *kerr.Error
	}{
		{"defaults", NewTopic{Name: "a", Partitions: -1, ReplicationFactor: -1}, nil},
		{"bad name", NewTopic{Name: "a/b", Partitions: -1, ReplicationFactor: -1}, kerr.InvalidTopicException},
		{"internal", NewTopic{Name: "__consumer.offsets", Partitions: -1, ReplicationFactor: -1}, kerr.InvalidTopicException},
		{"zero partitions", NewTopic{Name: "a", Partitions: 0, ReplicationFactor: -1}, kerr.InvalidPartitions},
		{"too many partitions", NewTopic{Name: "a", Partitions: 1 << 30, ReplicationFactor: -1}, kerr.InvalidPartitions},
		{"zero rf", NewTopic{Name: "a", Partitions: 1, ReplicationFactor: 0}, kerr.InvalidReplicationFactor},
		{"assignment and count", NewTopic{Name: "a", Partitions: 1, ReplicationFactor: -1, Assignment: [][]int32{{1}}}, kerr.InvalidRequest},
		{"empty replicas", NewTopic{Name: "a", Partitions: -1, ReplicationFactor: -1, Assignment: [][]int32{{}}}, kerr.InvalidReplicaAssignment},
		{"broker twice", NewTopic{Name: "a", Partitions: -1, ReplicationFactor: -1, Assignment: [][]int32{{1, 1}}}, kerr.InvalidReplicaAssignment},
		{"empty assignment", NewTopic{Name: "a", Partitions: -1, ReplicationFactor: -1, Assignment: [][]int32{}}, kerr.InvalidReplicaAssignment},
		{"uneven", NewTopic{Name: "a", Partitions: -1, ReplicationFactor: -1, Assignment: [][]int32{{1, 2}, {1}}}, kerr.InvalidReplicaAssignment},
		{"unknown config", NewTopic{Name: "a", Partitions: -1, ReplicationFactor: -1, Configs: map[string]string{"no.such": "1"}}, kerr.InvalidConfig},
		{"bad value", NewTopic{Name: "a", Partitions: -1, ReplicationFactor: -1, Configs: map[string]string{"retention.ms": "soon"}}, kerr.InvalidConfig},
	} {
		err := tc.t.Check()
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// Resolve applies SET, DELETE, APPEND and SUBTRACT in order, from the
// effective values, and lists every key it touches.
func TestResolve(t *testing.T) {
	current := map[string]string{"retention.ms": "1000", "segment.ms": "5000"}
	effective := func(k string) string {
		if v, ok := current[k]; ok {
			return v
		}
		return "delete"
	}
	ch := ConfigChange{Type: TopicConfigs, Name: "t", Ops: []ConfigOp{
		{Key: "cleanup.policy", Kind: Append, Value: "compact"},
		{Key: "retention.ms", Kind: Delete},
		{Key: "retention.bytes", Kind: Set, Value: "100"},
	}}
	if err := ch.Check(); err != nil {
		t.Fatal(err)
	}
	set, err := ch.Resolve(current, effective)
	if err != nil {
		t.Fatal(err)
	}
	if v := set["cleanup.policy"]; v == nil || *v != "delete,compact" {
		t.Errorf("cleanup.policy: %v", v)
	}
	if v, ok := set["retention.ms"]; !ok || v != nil {
		t.Errorf("retention.ms: %v, %v; want deleted", v, ok)
	}
	if _, ok := set["segment.ms"]; ok {
		t.Errorf("segment.ms was not named and is not replaced, yet changes")
	}
	ch.Replace = true
	if set, _ = ch.Resolve(current, effective); set["segment.ms"] != nil {
		t.Errorf("Replace keeps segment.ms: %v", *set["segment.ms"])
	}
	if _, ok := set["segment.ms"]; !ok {
		t.Errorf("Replace does not delete segment.ms")
	}
	bad := ConfigChange{Type: TopicConfigs, Ops: []ConfigOp{{Key: "retention.ms", Kind: Append, Value: "1"}}}
	if err := bad.Check(); !errors.Is(err, kerr.InvalidConfig) {
		t.Errorf("APPEND to a long: %v", err)
	}
	twice := ConfigChange{Type: TopicConfigs, Ops: []ConfigOp{{Key: "retention.ms", Kind: Set, Value: "1"}, {Key: "retention.ms", Kind: Set, Value: "2"}}}
	if err := twice.Check(); !errors.Is(err, kerr.InvalidRequest) {
		t.Errorf("a key named twice: %v", err)
	}
}
