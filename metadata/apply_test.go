package metadata

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// step applies rec at the next index and fails the test if it is refused.
func step(t testing.TB, img *Image, rec Record) (*Image, Result) {
	t.Helper()
	next, res := img.Apply(img.Index()+1, rec)
	if res.Err != nil {
		t.Fatalf("%s refused: %v", rec.Kind(), res.Err)
	}
	return next, res
}

// refused applies rec and checks it is refused with code, changing
// nothing but the index.
func refused(t testing.TB, img *Image, rec Record, code *kerr.Error) *RefusedError {
	t.Helper()
	next, res := img.Apply(img.Index()+1, rec)
	var re *RefusedError
	if !errors.As(res.Err, &re) {
		t.Fatalf("%s: got %v, want %s", rec.Kind(), res.Err, code.Message)
	}
	if re.Code != code || !errors.Is(res.Err, code) {
		t.Fatalf("%s: got %v, want %s", rec.Kind(), res.Err, code.Message)
	}
	if next.Hash() != img.Hash() || next.Index() != img.Index()+1 {
		t.Fatalf("%s: a refused record changed the image", rec.Kind())
	}
	return re
}

// cluster returns an image with brokers 1..live registered and unfenced,
// plus fenced brokers after them, and the cluster id set.
func cluster(t testing.TB, live, fenced int) *Image {
	t.Helper()
	img, _ := step(t, NewImage(), InitCluster{ClusterID: "test-cluster"})
	for i := 1; i <= live+fenced; i++ {
		var res Result
		img, res = step(t, img, RegisterBroker{ID: int32(i), Incarnation: UUID{byte(i)}, KafkaAddr: fmt.Sprintf("127.0.0.1:%d", 9000+i)})
		if i <= live {
			img, _ = step(t, img, UnfenceBroker{ID: int32(i), Epoch: res.BrokerEpoch})
		}
	}
	return img
}

func fuzzImage(t testing.TB) *Image {
	img := cluster(t, 3, 1)
	img, _ = step(t, img, CreateTopic{Name: "orders", ID: UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		Replicas: [][]int32{{1, 2, 3}, {2, 3, 1}}})
	return img
}

func createTopic(t testing.TB, img *Image, name string, parts, rf int) (*Image, *Topic) {
	t.Helper()
	assign, err := PlaceReplicas(img, 0, parts, rf)
	if err != nil {
		t.Fatal(err)
	}
	img, _ = step(t, img, CreateTopic{Name: name, ID: NewUUID(), Replicas: assign})
	return img, img.Topic(name)
}

func TestRegisterBroker(t *testing.T) {
	img := NewImage()
	reg := RegisterBroker{ID: 1, Incarnation: UUID{9}, KafkaAddr: "h:1", ControllerAddr: "h:2", Rack: "a"}
	img, res := step(t, img, reg)
	b, _ := img.Broker(1)
	if res.BrokerEpoch != 1 || b.Epoch != 1 || !b.Fenced {
		t.Fatalf("registration %+v result %+v: want epoch 1 (the index), fenced", b, res)
	}
	// A retry of the same registration keeps the epoch.
	img, res = step(t, img, reg)
	if res.BrokerEpoch != 1 {
		t.Fatalf("retried registration got epoch %d", res.BrokerEpoch)
	}
	img, _ = step(t, img, UnfenceBroker{ID: 1, Epoch: 1})
	// A new incarnation is a new, fenced registration with a new epoch.
	reg.Incarnation = UUID{10}
	img, res = step(t, img, reg)
	if b, _ := img.Broker(1); res.BrokerEpoch != 4 || b.Epoch != 4 || !b.Fenced {
		t.Fatalf("new incarnation: %+v, result %+v", b, res)
	}
	refused(t, img, UnfenceBroker{ID: 1, Epoch: 1}, kerr.StaleBrokerEpoch)
	refused(t, img, FenceBroker{ID: 7, Epoch: 1}, kerr.BrokerIDNotRegistered)
	for _, bad := range []RegisterBroker{
		{ID: -1, Incarnation: UUID{1}, KafkaAddr: "h:1"},
		{ID: 2, KafkaAddr: "h:1"},
		{ID: 2, Incarnation: UUID{1}, KafkaAddr: "h"},
		{ID: 2, Incarnation: UUID{1}, KafkaAddr: ":1"},
		{ID: 2, Incarnation: UUID{1}, KafkaAddr: "h:0"},
		{ID: 2, Incarnation: UUID{1}, KafkaAddr: "h:1", ControllerAddr: "h:70000"},
		{ID: 2, Incarnation: UUID{1}, KafkaAddr: "h:1", Rack: strings.Repeat("r", 256)},
	} {
		refused(t, img, bad, kerr.InvalidRegistration)
	}
	// Fencing is idempotent.
	img, _ = step(t, img, UnfenceBroker{ID: 1, Epoch: 4})
	img, _ = step(t, img, FenceBroker{ID: 1, Epoch: 4})
	step(t, img, FenceBroker{ID: 1, Epoch: 4})
}

func TestInitCluster(t *testing.T) {
	img, _ := step(t, NewImage(), InitCluster{ClusterID: "abc"})
	img, _ = step(t, img, InitCluster{ClusterID: "abc"})
	refused(t, img, InitCluster{ClusterID: "xyz"}, kerr.InconsistentClusterID)
	refused(t, NewImage(), InitCluster{ClusterID: ""}, kerr.InvalidRequest)
	refused(t, NewImage(), InitCluster{ClusterID: "a b"}, kerr.InvalidRequest)
	if img.ClusterID() != "abc" {
		t.Fatalf("cluster id %q", img.ClusterID())
	}
}

func TestCreateTopicPreconditions(t *testing.T) {
	img := cluster(t, 3, 1) // brokers 1-3 live, 4 fenced
	img, orders := createTopic(t, img, "orders", 3, 3)
	p := orders.Partitions[0]
	if !reflect.DeepEqual(p.ISR, p.Replicas) || p.Leader != p.Replicas[0] || p.LeaderEpoch != 0 || p.PartitionEpoch != 0 {
		t.Fatalf("new partition %+v: want ISR = replicas, first replica leading, epochs 0", p)
	}
	ok := [][]int32{{1, 2}}
	cases := []struct {
		rec  CreateTopic
		code *kerr.Error
	}{
		{CreateTopic{Name: "orders", ID: NewUUID(), Replicas: ok}, kerr.TopicAlreadyExists},
		{CreateTopic{Name: "Orders", ID: NewUUID(), Replicas: ok}, kerr.InvalidTopicException},
		{CreateTopic{Name: "a.b", ID: NewUUID(), Replicas: ok}, nil},
		{CreateTopic{Name: "bad name", ID: NewUUID(), Replicas: ok}, kerr.InvalidTopicException},
		{CreateTopic{Name: "..", ID: NewUUID(), Replicas: ok}, kerr.InvalidTopicException},
		{CreateTopic{Name: strings.Repeat("x", 250), ID: NewUUID(), Replicas: ok}, kerr.InvalidTopicException},
		{CreateTopic{Name: "t", Replicas: ok}, kerr.InvalidRequest},
		{CreateTopic{Name: "t", ID: orders.ID, Replicas: ok}, kerr.InvalidRequest},
		{CreateTopic{Name: "t", ID: NewUUID()}, kerr.InvalidPartitions},
		{CreateTopic{Name: "t", ID: NewUUID(), Replicas: [][]int32{{}}}, kerr.InvalidReplicationFactor},
		{CreateTopic{Name: "t", ID: NewUUID(), Replicas: [][]int32{{1, 2, 3, 4}}}, kerr.InvalidReplicationFactor},
		{CreateTopic{Name: "t", ID: NewUUID(), Replicas: [][]int32{{1, 2}, {1}}}, kerr.InvalidReplicaAssignment},
		{CreateTopic{Name: "t", ID: NewUUID(), Replicas: [][]int32{{1, 1}}}, kerr.InvalidReplicaAssignment},
		{CreateTopic{Name: "t", ID: NewUUID(), Replicas: [][]int32{{1, 9}}}, kerr.InvalidReplicaAssignment},
		{CreateTopic{Name: "t", ID: NewUUID(), Replicas: [][]int32{{1, 4}}}, kerr.InvalidReplicaAssignment},
		{CreateTopic{Name: "t", ID: NewUUID(), Replicas: ok, Configs: map[string]string{"": "x"}}, kerr.InvalidConfig},
	}
	for _, c := range cases {
		if c.code == nil {
			step(t, img, c.rec)
			continue
		}
		refused(t, img, c.rec, c.code)
	}
	img, _ = step(t, img, CreateTopic{Name: "a.b", ID: NewUUID(), Replicas: ok})
	re := refused(t, img, CreateTopic{Name: "a_b", ID: NewUUID(), Replicas: ok}, kerr.InvalidTopicException)
	if !strings.Contains(re.Reason, `"a.b"`) {
		t.Fatalf("collision message %q does not name the existing topic", re.Reason)
	}
}

func TestDeleteTopicAndCreatePartitions(t *testing.T) {
	img := cluster(t, 3, 0)
	img, orders := createTopic(t, img, "orders", 2, 2)
	refused(t, img, DeleteTopic{Name: "nope"}, kerr.UnknownTopicOrPartition)
	refused(t, img, DeleteTopic{Name: "orders", ID: NewUUID()}, kerr.UnknownTopicID)
	refused(t, img, DeleteTopic{ID: NewUUID()}, kerr.UnknownTopicID)
	refused(t, img, DeleteTopic{}, kerr.InvalidRequest)

	refused(t, img, CreatePartitions{Name: "orders"}, kerr.InvalidPartitions)
	refused(t, img, CreatePartitions{Name: "orders", Replicas: [][]int32{{1, 2, 3}}}, kerr.InvalidReplicaAssignment)
	refused(t, img, CreatePartitions{Name: "nope", Replicas: [][]int32{{1, 2}}}, kerr.UnknownTopicOrPartition)
	more, err := PlaceReplicas(img, 2, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	img, _ = step(t, img, CreatePartitions{ID: orders.ID, Replicas: more})
	if n := len(img.Topic("orders").Partitions); n != 5 {
		t.Fatalf("%d partitions after adding 3 to 2", n)
	}
	img, _ = step(t, img, DeleteTopic{ID: orders.ID})
	if img.Topic("orders") != nil || img.TopicByID(orders.ID) != nil {
		t.Fatal("deleted topic still there")
	}
	// The name (and a colliding one) can be used again.
	img, _ = createTopic(t, img, "ORDERS", 1, 1)
	refused(t, img, DeleteTopic{Name: "ORDERS", ID: orders.ID}, kerr.UnknownTopicID)
}

func TestChangePartitionEpochs(t *testing.T) {
	img := cluster(t, 3, 0)
	img, _ = step(t, img, CreateTopic{Name: "t", ID: UUID{7}, Replicas: [][]int32{{1, 2, 3}}})
	part := func(img *Image) Partition { return img.Topic("t").Partitions[0] }
	b1, _ := img.Broker(1)
	// The leader shrinks the ISR: partition epoch only.
	img, _ = step(t, img, ChangePartition{TopicID: UUID{7}, ExpectedPartitionEpoch: 0, LeaderEpoch: new(int32(0)),
		Requester: &BrokerEpoch{ID: 1, Epoch: b1.Epoch}, ISR: []int32{1, 2}})
	if p := part(img); p.LeaderEpoch != 0 || p.PartitionEpoch != 1 || !reflect.DeepEqual(p.ISR, []int32{1, 2}) {
		t.Fatalf("after ISR shrink: %+v", p)
	}
	// The controller elects 2: both epochs.
	img, _ = step(t, img, ChangePartition{TopicID: UUID{7}, ExpectedPartitionEpoch: 1,
		Leader: new(int32(2)), ISR: []int32{2}})
	if p := part(img); p.Leader != 2 || p.LeaderEpoch != 1 || p.PartitionEpoch != 2 {
		t.Fatalf("after election: %+v", p)
	}
	// Nothing changes: a no-op, no bump.
	img, _ = step(t, img, ChangePartition{TopicID: UUID{7}, ExpectedPartitionEpoch: 2,
		Leader: new(int32(2)), ISR: []int32{2}})
	if p := part(img); p.LeaderEpoch != 1 || p.PartitionEpoch != 2 {
		t.Fatalf("after no-op: %+v", p)
	}
	// Going offline is a leader change too.
	img, _ = step(t, img, ChangePartition{TopicID: UUID{7}, ExpectedPartitionEpoch: 2,
		Leader: new(int32(NoLeader))})
	if p := part(img); p.Leader != NoLeader || p.LeaderEpoch != 2 || p.PartitionEpoch != 3 || !reflect.DeepEqual(p.ISR, []int32{2}) {
		t.Fatalf("after going offline: %+v", p)
	}
	img, _ = step(t, img, ChangePartition{TopicID: UUID{7}, ExpectedPartitionEpoch: 3,
		Leader: new(int32(2)), ISR: []int32{2, 3}})
	b2, _ := img.Broker(2)
	b3, _ := img.Broker(3)

	base := ChangePartition{TopicID: UUID{7}, ExpectedPartitionEpoch: 4, LeaderEpoch: new(int32(3)), Requester: &BrokerEpoch{ID: 2, Epoch: b2.Epoch},
		ISR: []int32{2, 3, 1}}
	step(t, img, base)
	with := func(f func(*ChangePartition)) ChangePartition { c := base; f(&c); return c }
	cases := []struct {
		name string
		rec  ChangePartition
		code *kerr.Error
	}{
		{"stale partition epoch", with(func(c *ChangePartition) { c.ExpectedPartitionEpoch = 3 }), kerr.InvalidUpdateVersion},
		{"future partition epoch", with(func(c *ChangePartition) { c.ExpectedPartitionEpoch = 5 }), kerr.InvalidUpdateVersion},
		{"old leader epoch", with(func(c *ChangePartition) { c.LeaderEpoch = new(int32(2)) }), kerr.FencedLeaderEpoch},
		{"new leader epoch", with(func(c *ChangePartition) { c.LeaderEpoch = new(int32(4)) }), kerr.UnknownLeaderEpoch},
		{"stale requester epoch", with(func(c *ChangePartition) { c.Requester = &BrokerEpoch{ID: 2, Epoch: b2.Epoch - 1} }), kerr.StaleBrokerEpoch},
		{"requester not leader", with(func(c *ChangePartition) { c.Requester = &BrokerEpoch{ID: 3, Epoch: b3.Epoch} }), kerr.NotLeaderForPartition},
		{"unknown requester", with(func(c *ChangePartition) { c.Requester = &BrokerEpoch{ID: 9, Epoch: 1} }), kerr.BrokerIDNotRegistered},
		{"unknown topic", with(func(c *ChangePartition) { c.TopicID = UUID{8} }), kerr.UnknownTopicID},
		{"unknown partition", with(func(c *ChangePartition) { c.Partition = 1 }), kerr.UnknownTopicOrPartition},
		{"negative partition", with(func(c *ChangePartition) { c.Partition = -1 }), kerr.UnknownTopicOrPartition},
		{"ISR not replicas", with(func(c *ChangePartition) { c.ISR = []int32{2, 5} }), kerr.InvalidRequest},
		{"ISR duplicate", with(func(c *ChangePartition) { c.ISR = []int32{2, 2} }), kerr.InvalidRequest},
		{"ISR without leader", with(func(c *ChangePartition) { c.ISR = []int32{3} }), kerr.InvalidRequest},
		{"leader not replica", with(func(c *ChangePartition) { c.Leader = new(int32(5)) }), kerr.InvalidRequest},
		{"ISR epochs length", with(func(c *ChangePartition) { c.ISREpochs = []int64{1} }), kerr.InvalidRequest},
		{"ISR member epoch", with(func(c *ChangePartition) { c.ISREpochs = []int64{-1, -1, 12345} }), kerr.IneligibleReplica},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { refused(t, img, c.rec, c.code) })
	}

	// A fenced broker can neither join the ISR nor lead; a member already
	// in the ISR may stay while fenced (the controller removes it).
	b1, _ = img.Broker(1)
	fenced, _ := step(t, img, FenceBroker{ID: 1, Epoch: b1.Epoch})
	refused(t, fenced, base, kerr.IneligibleReplica)
	refused(t, fenced, with(func(c *ChangePartition) {
		c.Requester = nil
		c.LeaderEpoch = nil
		c.Leader = new(int32(1))
		c.ISR = nil
	}), kerr.IneligibleReplica)
	b3, _ = img.Broker(3)
	fenced3, _ := step(t, img, FenceBroker{ID: 3, Epoch: b3.Epoch})
	step(t, fenced3, with(func(c *ChangePartition) { c.ISR = []int32{3, 2} })) // same set, reordered: no-op
}

func TestAlterConfigs(t *testing.T) {
	img := cluster(t, 1, 0)
	img, _ = createTopic(t, img, "t", 1, 1)
	img, _ = step(t, img, AlterConfigs{Type: ConfigTopic, Name: "t", Ops: []ConfigOp{{Key: "retention.ms", Value: "5"}, {Key: "x", Value: "y"}}})
	img, _ = step(t, img, AlterConfigs{Type: ConfigTopic, Name: "t", Ops: []ConfigOp{{Key: "x", Delete: true}, {Key: "absent", Delete: true}}})
	if got := img.Topic("t").Configs; !reflect.DeepEqual(got, map[string]string{"retention.ms": "5"}) {
		t.Fatalf("topic configs %v", got)
	}
	img, _ = step(t, img, AlterConfigs{Type: ConfigTopic, Name: "t", Ops: []ConfigOp{{Key: "retention.ms", Delete: true}}})
	if img.Topic("t").Configs != nil {
		t.Fatalf("emptied configs are %#v, want nil", img.Topic("t").Configs)
	}
	img, _ = step(t, img, AlterConfigs{Type: ConfigBroker, Ops: []ConfigOp{{Key: "log.retention.ms", Value: "7"}}})
	if v, _ := img.BrokerConfig("log.retention.ms"); v != "7" {
		t.Fatalf("broker default %q", v)
	}
	refused(t, img, AlterConfigs{Type: ConfigTopic, Name: "nope", Ops: []ConfigOp{{Key: "a", Value: "b"}}}, kerr.UnknownTopicOrPartition)
	refused(t, img, AlterConfigs{Type: ConfigBroker, Name: "1", Ops: []ConfigOp{{Key: "a", Value: "b"}}}, kerr.InvalidRequest)
	refused(t, img, AlterConfigs{Type: 3, Name: "t"}, kerr.InvalidRequest)
	refused(t, img, AlterConfigs{Type: ConfigTopic, Name: "t", Ops: []ConfigOp{{Key: "a"}, {Key: "a"}}}, kerr.InvalidRequest)
	refused(t, img, AlterConfigs{Type: ConfigTopic, Name: "t", Ops: []ConfigOp{{Key: ""}}}, kerr.InvalidConfig)
}

func TestAllocateProducerIDs(t *testing.T) {
	img := cluster(t, 2, 0)
	b1, _ := img.Broker(1)
	b2, _ := img.Broker(2)
	img, r1 := step(t, img, AllocateProducerIDs{Broker: 1, BrokerEpoch: b1.Epoch, Count: 1000})
	img, r2 := step(t, img, AllocateProducerIDs{Broker: 2, BrokerEpoch: b2.Epoch, Count: 10})
	if r1.ProducerIDs != (ProducerIDBlock{First: FirstProducerID, Count: 1000}) || r2.ProducerIDs != (ProducerIDBlock{First: FirstProducerID + 1000, Count: 10}) {
		t.Fatalf("blocks %+v %+v", r1.ProducerIDs, r2.ProducerIDs)
	}
	if img.NextProducerID() != FirstProducerID+1010 {
		t.Fatalf("next %d", img.NextProducerID())
	}
	refused(t, img, AllocateProducerIDs{Broker: 1, BrokerEpoch: b1.Epoch + 1, Count: 1}, kerr.StaleBrokerEpoch)
	refused(t, img, AllocateProducerIDs{Broker: 9, Count: 1}, kerr.BrokerIDNotRegistered)
	refused(t, img, AllocateProducerIDs{Broker: 1, BrokerEpoch: b1.Epoch, Count: 0}, kerr.InvalidRequest)
	refused(t, img, AllocateProducerIDs{Broker: 1, BrokerEpoch: b1.Epoch, Count: MaxProducerIDBlock + 1}, kerr.InvalidRequest)
}

func TestTakeOffice(t *testing.T) {
	img := cluster(t, 2, 0)
	if _, ok := img.Office(); ok {
		t.Fatal("a new cluster names a controller in office")
	}
	img, _ = step(t, img, TakeOffice{Controller: 1, Term: 3})
	img, _ = step(t, img, TakeOffice{Controller: 2, Term: 5})
	if o, ok := img.Office(); !ok || o != (Office{Controller: 2, Term: 5}) {
		t.Fatalf("office %+v %v, want controller 2 in term 5", o, ok)
	}
	// A deposed controller's record, committed late, changes nothing.
	refused(t, img, TakeOffice{Controller: 1, Term: 4}, kerr.StaleControllerEpoch)
	refused(t, img, TakeOffice{Controller: 1, Term: 5}, kerr.StaleControllerEpoch)
	refused(t, img, TakeOffice{Controller: -1, Term: 9}, kerr.InvalidRequest)
	refused(t, img, TakeOffice{Controller: 1, Term: 0}, kerr.InvalidRequest)
	if o, _ := img.Office(); o.Controller != 2 {
		t.Fatalf("office moved to %d by a refused record", o.Controller)
	}
	// InOffice guards a batch: it applies only while its controller is
	// the one in office.
	b1 := mustBroker(t, img, 1)
	fence := func(c int32, term uint64) Record {
		return Batch{Records: []Record{InOffice{Controller: c, Term: term}, FenceBroker{ID: 1, Epoch: b1.Epoch}}}
	}
	refused(t, img, fence(1, 3), kerr.NotController)
	refused(t, img, fence(2, 4), kerr.NotController)
	if b, _ := img.Broker(1); b.Fenced {
		t.Fatal("a refused guarded batch fenced broker 1")
	}
	img, _ = step(t, img, fence(2, 5))
	if b, _ := img.Broker(1); !b.Fenced {
		t.Fatal("the guarded batch of the controller in office did not fence broker 1")
	}
}

func TestBatchIsAtomic(t *testing.T) {
	img := cluster(t, 3, 0)
	img, _ = step(t, img, CreateTopic{Name: "t", ID: UUID{7}, Replicas: [][]int32{{1, 2, 3}}})
	b1, _ := img.Broker(1)
	// Fencing broker 1 with its leadership moved away, in one record.
	fence := Batch{Records: []Record{
		FenceBroker{ID: 1, Epoch: b1.Epoch},
		ChangePartition{TopicID: UUID{7}, ExpectedPartitionEpoch: 0, Leader: new(int32(2)), ISR: []int32{2, 3}},
	}}
	next, _ := step(t, img, fence)
	if b, _ := next.Broker(1); !b.Fenced || next.Topic("t").Partitions[0].Leader != 2 {
		t.Fatal("batch not applied")
	}
	// A failing record refuses the whole batch, with its code and position.
	bad := Batch{Records: append(append([]Record(nil), fence.Records...), CreateTopic{Name: "t", ID: UUID{8}, Replicas: [][]int32{{2}}})}
	re := refused(t, img, bad, kerr.TopicAlreadyExists)
	if !strings.HasPrefix(re.Reason, "batch record 2 (CreateTopic): ") {
		t.Fatalf("reason %q", re.Reason)
	}
	refused(t, img, Batch{Records: []Record{Batch{}}}, kerr.InvalidRequest)
	step(t, img, Batch{})
}

// TestApplyNeverMutates checks copy-on-write: applying records never
// changes an earlier image, and unchanged topics are shared.
func TestApplyNeverMutates(t *testing.T) {
	img := cluster(t, 3, 0)
	img, _ = createTopic(t, img, "a", 3, 3)
	img, b := createTopic(t, img, "b", 2, 2)
	img, _ = step(t, img, AlterConfigs{Type: ConfigTopic, Name: "a", Ops: []ConfigOp{{Key: "k", Value: "v"}}})
	before := img.Hash()
	a := img.Topic("a")
	p0 := a.Partitions[0]
	recs := []Record{
		ChangePartition{TopicID: a.ID, ExpectedPartitionEpoch: 0, Leader: new(int32(p0.Replicas[1])), ISR: p0.Replicas[1:]},
		AlterConfigs{Type: ConfigTopic, Name: "a", Ops: []ConfigOp{{Key: "k", Value: "w"}, {Key: "k2", Value: "v"}}},
		AlterConfigs{Type: ConfigBroker, Ops: []ConfigOp{{Key: "x", Value: "y"}}},
		CreatePartitions{Name: "a", Replicas: [][]int32{{1, 2, 3}}},
		DeleteTopic{Name: "a"},
		RegisterBroker{ID: 1, Incarnation: UUID{99}, KafkaAddr: "h:1"},
		AllocateProducerIDs{Broker: 2, BrokerEpoch: mustBroker(t, img, 2).Epoch, Count: 5},
	}
	for _, rec := range recs {
		next, _ := step(t, img, rec)
		if img.Hash() != before {
			t.Fatalf("%s changed the image it was applied to", rec.Kind())
		}
		if next.Topic("b") != b {
			t.Fatalf("%s copied an untouched topic", rec.Kind())
		}
	}
}

func mustBroker(t testing.TB, img *Image, id int32) Broker {
	t.Helper()
	b, ok := img.Broker(id)
	if !ok {
		t.Fatalf("broker %d not registered", id)
	}
	return b
}
