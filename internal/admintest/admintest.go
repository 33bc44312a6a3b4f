// Package admintest holds the admin cases (CreateTopics, DeleteTopics,
// CreatePartitions, AlterConfigs, IncrementalAlterConfigs, ElectLeaders,
// Alter/ListPartitionReassignments) that a single
// broker and a cluster must answer alike: they take one path (package
// admin), and these cases show it, run by netio's tests against a single
// broker and by cmd/ringlog's against a broker of a three-node cluster
// that is not the controller (every request forwarded).
package admintest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Run sends every case to the first seed broker of cl, on topics named
// prefix-*, and fails t where an answer is not the one both modes give.
// Changes a broker applies after it answers (cluster mode publishes them
// to every broker) are waited for up to 15 s.
func Run(t *testing.T, ctx context.Context, cl *kgo.Client, prefix string) {
	t.Helper()
	r := &runner{t: t, ctx: ctx, br: cl.Broker(math.MinInt32), prefix: prefix}
	a, b := r.name("a"), r.name("b")

	// CreateTopics.
	ct := r.createTopics(false, topic(a, 3, 1), topic(r.name("bad/name"), 1, 1), topic("__consumer.offsets", 1, 1),
		topic(r.name("zero"), 0, 1), topic(r.name("rf0"), 1, 0), topic(r.name("dup"), 1, 1), topic(r.name("dup"), 1, 1),
		topic(r.name("cfg"), 1, 1, "retention.ms", "soon"), topic(r.name("unknown-cfg"), 1, 1, "no.such.config", "1"),
		assigned(r.name("both"), 1, [][]int32{{1}}), assigned(r.name("twice"), -1, [][]int32{{1, 1}}),
		assigned(r.name("gap"), -1, [][]int32{{1}}, 2))
	codes(r, "CreateTopics", ct.Topics, func(t kmsg.CreateTopicsResponseTopic) int16 { return t.ErrorCode },
		0, kerr.InvalidTopicException.Code, kerr.InvalidTopicException.Code, kerr.InvalidPartitions.Code,
		kerr.InvalidReplicationFactor.Code, kerr.InvalidRequest.Code, kerr.InvalidRequest.Code, kerr.InvalidConfig.Code,
		kerr.InvalidConfig.Code, kerr.InvalidRequest.Code, kerr.InvalidReplicaAssignment.Code, kerr.InvalidReplicaAssignment.Code)
	if got := ct.Topics[0]; got.NumPartitions != 3 || got.ReplicationFactor != 1 || got.TopicID == [16]byte{} || len(got.Configs) == 0 {
		t.Errorf("CreateTopics %s: %d partitions, RF %d, id %x, %d configs; want 3, 1, an id, the configs", a, got.NumPartitions, got.ReplicationFactor, got.TopicID, len(got.Configs))
	}
	if ct.Topics[1].ErrorMessage == nil {
		t.Errorf("CreateTopics of a bad name: no message says why")
	}
	codes(r, "CreateTopics again", r.createTopics(false, topic(a, 3, 1), topic(b, 1, 1)).Topics,
		func(t kmsg.CreateTopicsResponseTopic) int16 { return t.ErrorCode }, kerr.TopicAlreadyExists.Code, 0)
	v := r.createTopics(true, topic(r.name("validated"), 2, 1, "cleanup.policy", "compact"))
	codes(r, "CreateTopics validate-only", v.Topics, func(t kmsg.CreateTopicsResponseTopic) int16 { return t.ErrorCode }, 0)
	if got := v.Topics[0]; got.NumPartitions != 2 || got.ReplicationFactor != 1 || got.TopicID != [16]byte{} {
		t.Errorf("CreateTopics validate-only: %d partitions, RF %d, id %x; want 2, 1, no id", got.NumPartitions, got.ReplicationFactor, got.TopicID)
	}
	r.await("topic "+a+" with 3 partitions, no validated topic", func() bool {
		ps := r.partitions()
		_, validated := ps[r.name("validated")]
		return ps[a] == 3 && !validated
	})

	// CreatePartitions.
	cp := r.createPartitions(false, partitions(a, 2), partitions(a, 5), partitions(r.name("missing"), 2),
		partitions(a, 6, []int32{1, 1}))
	codes(r, "CreatePartitions", cp.Topics, func(t kmsg.CreatePartitionsResponseTopic) int16 { return t.ErrorCode },
		kerr.InvalidPartitions.Code, 0, kerr.UnknownTopicOrPartition.Code, kerr.InvalidReplicaAssignment.Code)
	codes(r, "CreatePartitions validate-only", r.createPartitions(true, partitions(a, 8)).Topics,
		func(t kmsg.CreatePartitionsResponseTopic) int16 { return t.ErrorCode }, 0)
	r.await("topic "+a+" with 5 partitions", func() bool { return r.partitions()[a] == 5 })
	// A count not larger is that, whatever the assignment says; the
	// internal topics keep their partition count (groups and
	// transactional ids map to partitions by it).
	r.await("__consumer_offsets", func() bool { return r.partitions()["__consumer_offsets"] > 0 })
	codes(r, "CreatePartitions not larger, internal", r.createPartitions(false, partitions(a, 2, []int32{1}),
		partitions("__consumer_offsets", 100)).Topics,
		func(t kmsg.CreatePartitionsResponseTopic) int16 { return t.ErrorCode }, kerr.InvalidPartitions.Code, kerr.InvalidPartitions.Code)

	// IncrementalAlterConfigs on a topic, then the legacy AlterConfigs,
	// which replaces every override.
	ia := r.incremental(topicRes(a, op(kmsg.IncrementalAlterConfigOpSet, "retention.ms", "1000"),
		op(kmsg.IncrementalAlterConfigOpAppend, "cleanup.policy", "compact")),
		topicRes(r.name("missing"), op(kmsg.IncrementalAlterConfigOpSet, "retention.ms", "1000")),
		topicRes(a, op(kmsg.IncrementalAlterConfigOpSet, "retention.ms", "soon")),
		topicRes(a, op(kmsg.IncrementalAlterConfigOpAppend, "retention.ms", "5")),
		topicRes(a, op(kmsg.IncrementalAlterConfigOpSet, "no.such.config", "1")),
		topicRes(a, op(kmsg.IncrementalAlterConfigOpDelete, "cleanup.policy", ""), op(kmsg.IncrementalAlterConfigOpAppend, "cleanup.policy", "compact")))
	codes(r, "IncrementalAlterConfigs", ia.Resources, func(t kmsg.IncrementalAlterConfigsResponseResource) int16 { return t.ErrorCode },
		0, kerr.UnknownTopicOrPartition.Code, kerr.InvalidConfig.Code, kerr.InvalidConfig.Code, kerr.InvalidConfig.Code, kerr.InvalidRequest.Code)
	r.await(a+"'s retention.ms=1000 and cleanup.policy=delete,compact", func() bool {
		c := r.describe(kmsg.ConfigResourceTypeTopic, a)
		return c["retention.ms"] == "1000" && c["cleanup.policy"] == "delete,compact"
	})
	legacy := kmsg.NewPtrAlterConfigsRequest()
	lr := kmsg.NewAlterConfigsRequestResource()
	lr.ResourceType, lr.ResourceName = kmsg.ConfigResourceTypeTopic, a
	lc := kmsg.NewAlterConfigsRequestResourceConfig()
	lc.Name, lc.Value = "segment.ms", kmsg.StringPtr("5000")
	lr.Configs = append(lr.Configs, lc)
	legacy.Resources = append(legacy.Resources, lr)
	if resp, err := legacy.RequestWith(ctx, r.br); err != nil || len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("AlterConfigs %s: %v %+v", a, err, resp)
	}
	r.await(a+"'s overrides replaced by segment.ms=5000", func() bool {
		c := r.describe(kmsg.ConfigResourceTypeTopic, a)
		return c["segment.ms"] == "5000" && c["retention.ms"] == "604800000" && c["cleanup.policy"] == "delete"
	})

	// The brokers' defaults: by broker key, under the empty name.
	bd := r.incremental(brokerRes(op(kmsg.IncrementalAlterConfigOpSet, "log.retention.ms", "7200000")),
		brokerRes(op(kmsg.IncrementalAlterConfigOpSet, "retention.ms", "1")),
		brokerRes(op(kmsg.IncrementalAlterConfigOpSet, "log.retention.ms", "soon")))
	codes(r, "IncrementalAlterConfigs on the broker defaults", bd.Resources,
		func(t kmsg.IncrementalAlterConfigsResponseResource) int16 { return t.ErrorCode },
		0, kerr.InvalidConfig.Code, kerr.InvalidConfig.Code)
	r.await(b+" following log.retention.ms=7200000", func() bool { return r.describe(kmsg.ConfigResourceTypeTopic, b)["retention.ms"] == "7200000" })
	codes(r, "IncrementalAlterConfigs deleting the broker default",
		r.incremental(brokerRes(op(kmsg.IncrementalAlterConfigOpDelete, "log.retention.ms", ""))).Resources,
		func(t kmsg.IncrementalAlterConfigsResponseResource) int16 { return t.ErrorCode }, 0)
	r.await(b+" back on the default retention.ms", func() bool { return r.describe(kmsg.ConfigResourceTypeTopic, b)["retention.ms"] == "604800000" })

	// ElectLeaders: every partition here is led by its preferred
	// replica, and has a live leader.
	for _, typ := range []int8{0, 1} {
		el := kmsg.NewPtrElectLeadersRequest()
		el.ElectionType = typ
		et := kmsg.NewElectLeadersRequestTopic()
		et.Topic, et.Partitions = b, []int32{0, 5}
		el.Topics = append(el.Topics, et)
		resp, err := el.RequestWith(ctx, r.br)
		if err != nil || resp.ErrorCode != 0 || len(resp.Topics) != 1 {
			t.Fatalf("ElectLeaders type %d: %v %+v", typ, err, resp)
		}
		codes(r, fmt.Sprintf("ElectLeaders type %d", typ), resp.Topics[0].Partitions,
			func(p kmsg.ElectLeadersResponseTopicPartition) int16 { return p.ErrorCode },
			kerr.ElectionNotNeeded.Code, kerr.UnknownTopicOrPartition.Code)
	}

	// AlterPartitionReassignments and ListPartitionReassignments: a move
	// to the replicas b-0 has changes nothing; the refusals are the same
	// in both modes; nothing is left moving.
	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(b)
	md.Topics = append(md.Topics, mt)
	mresp, err := md.RequestWith(ctx, r.br)
	if err != nil || len(mresp.Topics) != 1 || len(mresp.Topics[0].Partitions) == 0 {
		t.Fatalf("Metadata of %s: %v %+v", b, err, mresp)
	}
	current := mresp.Topics[0].Partitions[0].Replicas
	alter := func(allowRF bool, parts ...kmsg.AlterPartitionAssignmentsRequestTopicPartition) []kmsg.AlterPartitionAssignmentsResponseTopicPartition {
		ar := kmsg.NewPtrAlterPartitionAssignmentsRequest()
		ar.AllowReplicationFactorChange = allowRF
		at := kmsg.NewAlterPartitionAssignmentsRequestTopic()
		at.Topic, at.Partitions = b, parts
		ar.Topics = append(ar.Topics, at)
		aresp, err := ar.RequestWith(ctx, r.br)
		if err != nil || aresp.ErrorCode != 0 || len(aresp.Topics) != 1 || len(aresp.Topics[0].Partitions) != len(parts) {
			t.Fatalf("AlterPartitionReassignments: %v %+v", err, aresp)
		}
		return aresp.Topics[0].Partitions
	}
	part := func(p int32, reps []int32) kmsg.AlterPartitionAssignmentsRequestTopicPartition {
		ap := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
		ap.Partition, ap.Replicas = p, reps
		return ap
	}
	for _, allowRF := range []bool{true, false} {
		// AllowReplicationFactorChange false (v1) refuses a count
		// change before anything else (KIP-860).
		rf := kerr.InvalidReplicaAssignment.Code
		if !allowRF {
			rf = kerr.InvalidReplicationFactor.Code
		}
		// (nil: a cancel, of nothing)
		for i, c := range []struct {
			reps []int32
			code int16
		}{{current, 0}, {nil, kerr.NoReassignmentInProgress.Code}, {[]int32{99}, kerr.InvalidReplicaAssignment.Code},
			{[]int32{current[0], current[0]}, rf}, {[]int32{current[0], 99}, rf}} {
			got := alter(allowRF, part(0, c.reps))
			codes(r, fmt.Sprintf("AlterPartitionReassignments case %d (allowing RF changes %v)", i, allowRF), got,
				func(p kmsg.AlterPartitionAssignmentsResponseTopicPartition) int16 { return p.ErrorCode }, c.code)
		}
	}
	// A partition that does not exist, and one named twice.
	codes(r, "AlterPartitionReassignments of a missing and a repeated partition", alter(true, part(7, current), part(0, current), part(0, nil)),
		func(p kmsg.AlterPartitionAssignmentsResponseTopicPartition) int16 { return p.ErrorCode },
		kerr.UnknownTopicOrPartition.Code, kerr.InvalidRequest.Code, kerr.InvalidRequest.Code)
	lresp, err := kmsg.NewPtrListPartitionReassignmentsRequest().RequestWith(ctx, r.br)
	if err != nil || lresp.ErrorCode != 0 || len(lresp.Topics) != 0 {
		t.Fatalf("ListPartitionReassignments: %v %+v; want nothing moving", err, lresp)
	}

	// DeleteTopics, by name and by id.
	dt := kmsg.NewPtrDeleteTopicsRequest()
	for _, n := range []string{a, r.name("missing")} {
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic = kmsg.StringPtr(n)
		dt.Topics = append(dt.Topics, rt)
		dt.TopicNames = append(dt.TopicNames, n)
	}
	unknownID := kmsg.NewDeleteTopicsRequestTopic()
	unknownID.TopicID = [16]byte{0xde, 0xad}
	dt.Topics = append(dt.Topics, unknownID)
	dt.TimeoutMillis = 15000
	resp, err := dt.RequestWith(ctx, r.br)
	if err != nil {
		t.Fatalf("DeleteTopics: %v", err)
	}
	want := []int16{0, kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicID.Code}
	codes(r, "DeleteTopics", resp.Topics, func(t kmsg.DeleteTopicsResponseTopic) int16 { return t.ErrorCode }, want[:len(resp.Topics)]...)
	if len(resp.Topics) > 0 && resp.Topics[0].TopicID != ct.Topics[0].TopicID && resp.Version >= 1 {
		t.Errorf("DeleteTopics %s answered id %x, created as %x", a, resp.Topics[0].TopicID, ct.Topics[0].TopicID)
	}
	r.await(a+" gone", func() bool { _, ok := r.partitions()[a]; return !ok })
}

type runner struct {
	t      *testing.T
	ctx    context.Context
	br     *kgo.Broker
	prefix string
}

func (r *runner) name(s string) string { return r.prefix + "-" + s }

// codes fails unless the answers carry want, in order.
func codes[A any](r *runner, what string, answers []A, code func(A) int16, want ...int16) {
	r.t.Helper()
	got := make([]int16, 0, len(answers))
	for _, a := range answers {
		got = append(got, code(a))
	}
	if !slices.Equal(got, want) {
		r.t.Errorf("%s: codes %s, want %s", what, names(got), names(want))
	}
}

func names(codes []int16) string {
	var out []string
	for _, c := range codes {
		if c == 0 {
			out = append(out, "OK")
		} else {
			out = append(out, kerr.ErrorForCode(c).(*kerr.Error).Message)
		}
	}
	return "[" + strings.Join(out, " ") + "]"
}

// await polls cond until it holds or 15 s pass.
func (r *runner) await(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			r.t.Fatalf("waited 15 s for %s", what)
		}
		select {
		case <-r.ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func topic(name string, partitions int32, rf int16, configs ...string) kmsg.CreateTopicsRequestTopic {
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, rf
	for i := 0; i+1 < len(configs); i += 2 {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = configs[i], kmsg.StringPtr(configs[i+1])
		rt.Configs = append(rt.Configs, c)
	}
	return rt
}

// assigned is a topic with a replica assignment; partition numbers from
// first (0 unless given).
func assigned(name string, partitions int32, replicas [][]int32, first ...int32) kmsg.CreateTopicsRequestTopic {
	rt := topic(name, partitions, -1)
	for i, reps := range replicas {
		a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		a.Partition, a.Replicas = int32(i), reps
		if len(first) > 0 {
			a.Partition += first[0]
		}
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
	}
	return rt
}

func (r *runner) createTopics(validateOnly bool, topics ...kmsg.CreateTopicsRequestTopic) *kmsg.CreateTopicsResponse {
	r.t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Topics, req.ValidateOnly, req.TimeoutMillis = topics, validateOnly, 15000
	resp, err := req.RequestWith(r.ctx, r.br)
	if err != nil || len(resp.Topics) != len(topics) {
		r.t.Fatalf("CreateTopics: %v, %d answers for %d", err, len(resp.Topics), len(topics))
	}
	return resp
}

func partitions(name string, count int32, replicas ...[]int32) kmsg.CreatePartitionsRequestTopic {
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = name, count
	for _, reps := range replicas {
		a := kmsg.NewCreatePartitionsRequestTopicAssignment()
		a.Replicas = reps
		rt.Assignment = append(rt.Assignment, a)
	}
	return rt
}

func (r *runner) createPartitions(validateOnly bool, topics ...kmsg.CreatePartitionsRequestTopic) *kmsg.CreatePartitionsResponse {
	r.t.Helper()
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.Topics, req.ValidateOnly, req.TimeoutMillis = topics, validateOnly, 15000
	resp, err := req.RequestWith(r.ctx, r.br)
	if err != nil || len(resp.Topics) != len(topics) {
		r.t.Fatalf("CreatePartitions: %v, %d answers for %d", err, len(resp.Topics), len(topics))
	}
	return resp
}

func op(o kmsg.IncrementalAlterConfigOp, name, value string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Op, c.Name = o, name
	if o != kmsg.IncrementalAlterConfigOpDelete {
		c.Value = kmsg.StringPtr(value)
	}
	return c
}

func topicRes(name string, ops ...kmsg.IncrementalAlterConfigsRequestResourceConfig) kmsg.IncrementalAlterConfigsRequestResource {
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName, rr.Configs = kmsg.ConfigResourceTypeTopic, name, ops
	return rr
}

func brokerRes(ops ...kmsg.IncrementalAlterConfigsRequestResourceConfig) kmsg.IncrementalAlterConfigsRequestResource {
	rr := topicRes("", ops...)
	rr.ResourceType = kmsg.ConfigResourceTypeBroker
	return rr
}

func (r *runner) incremental(rs ...kmsg.IncrementalAlterConfigsRequestResource) *kmsg.IncrementalAlterConfigsResponse {
	r.t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Resources = rs
	resp, err := req.RequestWith(r.ctx, r.br)
	if err != nil || len(resp.Resources) != len(rs) {
		r.t.Fatalf("IncrementalAlterConfigs: %v, %d answers for %d", err, len(resp.Resources), len(rs))
	}
	return resp
}

// partitions is every topic's partition count, from Metadata.
func (r *runner) partitions() map[string]int {
	req := kmsg.NewPtrMetadataRequest()
	resp, err := req.RequestWith(r.ctx, r.br)
	out := map[string]int{}
	if err != nil {
		return out
	}
	for _, t := range resp.Topics {
		if t.Topic != nil && t.ErrorCode == 0 {
			out[*t.Topic] = len(t.Partitions)
		}
	}
	return out
}

// describe is a resource's config values, from DescribeConfigs.
func (r *runner) describe(typ kmsg.ConfigResourceType, name string) map[string]string {
	req := kmsg.NewPtrDescribeConfigsRequest()
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = typ, name
	req.Resources = append(req.Resources, rr)
	out := map[string]string{}
	resp, err := req.RequestWith(r.ctx, r.br)
	if err != nil || len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
		return out
	}
	for _, c := range resp.Resources[0].Configs {
		if c.Value != nil {
			out[c.Name] = *c.Value
		}
	}
	return out
}
