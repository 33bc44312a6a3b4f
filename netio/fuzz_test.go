package netio_test

import (
	"encoding/binary"
	"flag"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/wal/batch"
)

// FuzzKafkaFrame sends whole request frames to a real broker over TCP: the
// broker's own framing (OnTraffic), header parsing and dispatch
// (handleFrame) and every handler see the bytes. One broker serves every
// input of a fuzz process.
//
// Input: byte 0 chooses how the rest is sent:
//
//	mode%4 == 0, 1: as a frame body, behind its correct length (gets past
//	                framing, so the header and handlers are fuzzed)
//	mode%4 == 2:    as is (the framing itself is fuzzed)
//	mode%4 == 3:    as a frame body, followed on the same connection by an
//	                ApiVersions request (pipelining and response order)
//
// Oracles: every response frame is well formed and answers the request in
// order (correlation ids), and after each input a fresh connection still
// gets an ApiVersions answer.
func FuzzKafkaFrame(f *testing.F) {
	limitMinimization()
	b := startBroker(f, withEngine(func(c *engine.Config) { c.Shards = 1 }))
	fz := &fuzzBroker{b: b}
	fz.ensureTopic()
	for _, seed := range fz.seeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		mode, body := in[0]%4, in[1:]
		if mode != 2 && !fuzzSafe(body) {
			return
		}
		fz.run(t, mode, body)
		fz.alive(t)
		fz.quiesce(t)
		fz.tidy()
	})
}

// limitMinimization caps -fuzzminimizetime at 20 runs unless the command
// line sets it. Minimizing an interesting input reruns it O(n²) times for
// an n-byte input, a minute or more for one produce frame at about a
// millisecond a run, and nothing is fuzzed meanwhile; this target finds new
// coverage several times a second (some of it from the broker's own
// goroutines, which coverage counts too), so with the default of 60s the
// workers would do little but minimize. The coordinator reads the flag in
// f.Fuzz, after this runs.
func limitMinimization() {
	set := false
	flag.Visit(func(fl *flag.Flag) { set = set || fl.Name == "test.fuzzminimizetime" })
	if !set {
		flag.Set("test.fuzzminimizetime", "20x")
	}
}

type fuzzBroker struct {
	b     *testBroker
	baseG int // goroutines when idle, measured at the first input
}

// fuzzReadWait bounds how long an input's answers are awaited.
const fuzzReadWait = 20 * time.Millisecond

// fuzzMaxExtraGoroutines: more goroutines than this above the idle count,
// after an input has been answered and its connection closed, is a leak.
const fuzzMaxExtraGoroutines = 500

const (
	fuzzTopic   = "fuzz"
	fuzzCreated = "fuzz-created"
	// fuzzProbeCorr is the correlation id of the ApiVersions that mode 3
	// pipelines behind the input, and of the liveness probe.
	fuzzProbeCorr = 0x7eadbeef
)

// run sends one input and checks whatever comes back before the deadline.
func (fz *fuzzBroker) run(t *testing.T, mode byte, body []byte) {
	c, err := net.DialTimeout("tcp", fz.b.Addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	var wire []byte
	var want []int32 // correlation ids, in order, of the answers that may come
	// skippable: the input's answer may be missing while a later one
	// arrives: an acks=0 produce gets no answer.
	var skippable bool
	if mode == 2 {
		wire = body
	} else {
		wire = binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		wire = append(wire, body...)
		if len(body) >= 8 {
			want = append(want, int32(binary.BigEndian.Uint32(body[4:])))
			skippable = binary.BigEndian.Uint16(body) == 0
		}
		if mode == 3 {
			wire = append(wire, reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, fuzzProbeCorr)...)
			want = append(want, fuzzProbeCorr)
		}
	}
	c.SetDeadline(time.Now().Add(fuzzReadWait))
	if _, err := c.Write(wire); err != nil {
		return // the broker may close before reading it all
	}
	if mode == 2 {
		// Raw bytes may end inside a frame: let the broker see the end
		// rather than wait for the deadline.
		c.(*net.TCPConn).CloseWrite()
	}
	// Read until every expected answer is in, the broker closes, or the
	// deadline (inputs that get no answer: acks=0, long polls, joins).
	var buf []byte
	tmp := make([]byte, 64<<10)
	for {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil || mode != 2 && len(want) > 0 && countFrames(buf) >= len(want) {
			break
		}
	}
	// Every whole frame that arrived must be an answer we expect, in order.
	for len(buf) >= 4 {
		size := binary.BigEndian.Uint32(buf)
		if size < 4 || size > 64<<20 {
			t.Fatalf("response frame size %d", size)
		}
		if uint32(len(buf)-4) < size {
			break // cut by the deadline
		}
		corr := int32(binary.BigEndian.Uint32(buf[4:]))
		if mode == 2 {
			// Raw bytes: we cannot know what was asked; just framing.
			buf = buf[4+size:]
			continue
		}
		switch {
		case len(want) > 0 && corr == want[0]:
			want = want[1:]
		case len(want) == 2 && skippable && corr == want[1]:
			want = want[2:]
		default:
			t.Fatalf("response with correlation id %d, expected %v (mode %d)", corr, want, mode)
		}
		buf = buf[4+size:]
	}
}

// countFrames counts the whole response frames at the start of buf.
func countFrames(buf []byte) int {
	n := 0
	for len(buf) >= 4 {
		size := int(binary.BigEndian.Uint32(buf))
		if size < 0 || len(buf)-4 < size {
			break
		}
		buf = buf[4+size:]
		n++
	}
	return n
}

// quiesce waits (briefly) until the broker has finished the work of the
// input: its connections closed and handled, nothing queued in the
// shards, no handler goroutines left. Coverage is collected process-wide,
// so work that spills into the next input's run would be reported as new
// coverage of an unrelated input (and the fuzzer would then spend its time
// failing to minimize it). A leak that accumulates fails the input.
func (fz *fuzzBroker) quiesce(t *testing.T) {
	if fz.baseG == 0 {
		fz.baseG = runtime.NumGoroutine()
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
		idle := fz.b.Kafka.OpenConns() == 0 && runtime.NumGoroutine() <= fz.baseG
		for _, sh := range fz.b.Eng.Shards() {
			idle = idle && sh.QueuedBytes() == 0
		}
		if idle {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
	if n := runtime.NumGoroutine(); n > fz.baseG+fuzzMaxExtraGoroutines {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%d goroutines after the input, %d at the start: work outlives its connection\n%s", n, fz.baseG, buf)
	}
}

// alive asserts a fresh connection gets an ApiVersions answer.
func (fz *fuzzBroker) alive(t *testing.T) {
	c, err := net.DialTimeout("tcp", fz.b.Addr, 2*time.Second)
	if err != nil {
		t.Fatalf("broker unreachable after the input: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, fuzzProbeCorr)); err != nil {
		t.Fatalf("broker not accepting requests after the input: %v", err)
	}
	var hdr [8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatalf("broker not answering ApiVersions after the input: %v", err)
	}
	if corr := int32(binary.BigEndian.Uint32(hdr[4:])); corr != fuzzProbeCorr {
		t.Fatalf("ApiVersions probe answered with correlation id %d", corr)
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:])-4)
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatalf("ApiVersions probe: %v", err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(3)
	if err := resp.ReadFrom(body); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions probe: error %d, %v", resp.ErrorCode, err)
	}
}

// tidy keeps the broker's state bounded across inputs: the seed topic
// exists, and topics the inputs created are dropped once there are many.
func (fz *fuzzBroker) tidy() {
	topics := fz.b.Eng.Topics()
	if len(topics) > 32 {
		for _, t := range topics {
			if t.Name != fuzzTopic && !t.Internal {
				fz.b.Eng.DeleteTopic(t.Name)
			}
		}
	}
	fz.ensureTopic()
}

func (fz *fuzzBroker) ensureTopic() {
	if fz.b.Eng.Topic(fuzzTopic) == nil {
		fz.b.Eng.CreateTopic(engine.CreateTopicRequest{Name: fuzzTopic, Partitions: 2, ReplicationFactor: 1})
	}
}

// fuzzSafe rejects (framed) inputs that would make the shared broker use
// unbounded disk or files rather than exercise parsing: topics or
// partition counts beyond a few, and preallocated segments. Bodies that
// do not decode are always sent (the broker must refuse them).
func fuzzSafe(body []byte) bool {
	if len(body) < 10 {
		return true
	}
	key := int16(binary.BigEndian.Uint16(body))
	version := int16(binary.BigEndian.Uint16(body[2:]))
	switch key {
	case 19, 33, 37, 44:
	default:
		return true
	}
	req := kmsg.RequestForKey(key)
	if req == nil || version < 0 || version > req.MaxVersion() {
		return true
	}
	req.SetVersion(version)
	b := body[8:]
	idLen := int16(binary.BigEndian.Uint16(b))
	b = b[2:]
	if idLen > 0 {
		if int(idLen) > len(b) {
			return true
		}
		b = b[idLen:]
	}
	if req.IsFlexible() {
		rest, ok := skipTags(b)
		if !ok {
			return true
		}
		b = rest
	}
	if err := req.ReadFrom(b); err != nil {
		return true
	}
	const maxParts = 4
	prealloc := func(name string) bool { return name == "preallocate" || name == "log.preallocate" }
	switch r := req.(type) {
	case *kmsg.CreateTopicsRequest:
		if len(r.Topics) > maxParts {
			return false
		}
		for _, t := range r.Topics {
			if t.NumPartitions > maxParts || len(t.ReplicaAssignment) > maxParts {
				return false
			}
			for _, c := range t.Configs {
				if prealloc(c.Name) {
					return false
				}
			}
		}
	case *kmsg.CreatePartitionsRequest:
		for _, t := range r.Topics {
			if t.Count > maxParts {
				return false
			}
		}
	case *kmsg.AlterConfigsRequest:
		for _, res := range r.Resources {
			for _, c := range res.Configs {
				if prealloc(c.Name) {
					return false
				}
			}
		}
	case *kmsg.IncrementalAlterConfigsRequest:
		for _, res := range r.Resources {
			for _, c := range res.Configs {
				if prealloc(c.Name) {
					return false
				}
			}
		}
	}
	return true
}

// seeds are real requests of every API in apiTable at its lowest, a
// middle and its highest version, plus some broken framing.
func (fz *fuzzBroker) seeds(f *testing.F) [][]byte {
	topic := fz.b.Eng.Topic(fuzzTopic)
	var out [][]byte
	add := func(mode byte, frame []byte) {
		out = append(out, append([]byte{mode}, frame...))
	}
	corr := int32(1)
	for _, h := range apiTable {
		versions := []int16{h.min, (h.min + h.max) / 2, h.max}
		if h.key == 0 {
			versions = append(versions, 2) // advertised, not served
		}
		for _, v := range versions {
			for _, req := range fuzzRequests(f, h.key, v, topic) {
				frame := reqFrame(req, v, corr)
				corr++
				add(byte(corr%2), frame[4:]) // modes 0 and 1: framed
				if v == h.max {
					add(3, frame[4:])
				}
			}
		}
	}
	av := reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, 9)
	add(2, av)                                         // raw, whole
	add(2, av[:len(av)-2])                             // raw, truncated
	add(2, append(append([]byte{}, av...), av...))     // two frames
	add(2, []byte{0, 0, 0, 0})                         // size 0
	add(2, []byte{0x7f, 0xff, 0xff, 0xff, 0, 18})      // absurd size
	add(0, []byte{0x27, 0x0f, 0, 0, 0, 0, 0, 1, 0, 0}) // unknown key 9999
	add(0, []byte{0, 17, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0, 5, 'P', 'L', 'A', 'I', 'N'})
	return out
}

// fuzzRequests builds meaningful requests of key at version v.
func fuzzRequests(f *testing.F, key, v int16, topic *engine.Topic) []kmsg.Request {
	name := fuzzTopic
	switch key {
	case 0:
		var reqs []kmsg.Request
		for i, codec := range []batch.Codec{batch.CodecNone, batch.CodecGzip, batch.CodecZstd} {
			acks := []int16{-1, 1, 0}[i]
			reqs = append(reqs, produceReq(fuzzTopic, acks, testBatch(f, 3, codec, "fz"), testBatch(f, 1, batch.CodecLZ4, "fz")))
		}
		return reqs
	case 1:
		r := kmsg.NewPtrFetchRequest()
		r.MaxWaitMillis, r.MinBytes, r.MaxBytes = 1, 1, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = fuzzTopic, topic.ID
		for p := int32(0); p < 2; p++ {
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition, fp.PartitionMaxBytes = p, 1<<20
			ft.Partitions = append(ft.Partitions, fp)
		}
		r.Topics = append(r.Topics, ft)
		// A fetch that opens a session, and an incremental one that
		// forgets a partition (session ids are random, so the fuzzer
		// mostly meets FETCH_SESSION_ID_NOT_FOUND there, and the
		// session code through mutated epochs and ids).
		open := *r
		open.SessionEpoch = 0
		inc := open
		inc.SessionID, inc.SessionEpoch = 1, 1
		inc.Topics = inc.Topics[:0:0]
		inc.ForgottenTopics = []kmsg.FetchRequestForgottenTopic{{Topic: fuzzTopic, TopicID: topic.ID, Partitions: []int32{1}}}
		return []kmsg.Request{r, &open, &inc}
	case 2:
		r := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = fuzzTopic
		for i, ts := range []int64{-1, -2, 0} {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = int32(i%2), ts
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
		return []kmsg.Request{r}
	case 3:
		r := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic, mt.TopicID = &name, topic.ID
		r.Topics = append(r.Topics, mt)
		all := kmsg.NewPtrMetadataRequest()
		all.Topics = nil
		return []kmsg.Request{r, all}
	case 18:
		r := kmsg.NewPtrApiVersionsRequest()
		r.ClientSoftwareName, r.ClientSoftwareVersion = "fuzz", "1.0"
		return []kmsg.Request{r}
	case 19:
		r := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = fuzzCreated, 1, 1
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		val := "3600000"
		c.Name, c.Value = "retention.ms", &val
		rt.Configs = append(rt.Configs, c)
		r.Topics = append(r.Topics, rt)
		r.TimeoutMillis = 1000
		return []kmsg.Request{r}
	case 20:
		r := kmsg.NewPtrDeleteTopicsRequest()
		gone := "fuzz-gone"
		r.TopicNames = []string{gone}
		dt := kmsg.NewDeleteTopicsRequestTopic()
		dt.Topic = &gone
		r.Topics = append(r.Topics, dt)
		return []kmsg.Request{r}
	case 23:
		r := kmsg.NewPtrOffsetForLeaderEpochRequest()
		r.ReplicaID = -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = fuzzTopic
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
		return []kmsg.Request{r}
	case 32:
		r := kmsg.NewPtrDescribeConfigsRequest()
		t := kmsg.NewDescribeConfigsRequestResource()
		t.ResourceType, t.ResourceName = kmsg.ConfigResourceTypeTopic, fuzzTopic
		br := kmsg.NewDescribeConfigsRequestResource()
		br.ResourceType = kmsg.ConfigResourceTypeBroker
		r.Resources = append(r.Resources, t, br)
		r.IncludeSynonyms, r.IncludeDocumentation = true, true
		return []kmsg.Request{r}
	case 33:
		r := kmsg.NewPtrAlterConfigsRequest()
		res := kmsg.NewAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, fuzzCreated
		c := kmsg.NewAlterConfigsRequestResourceConfig()
		val := "7200000"
		c.Name, c.Value = "retention.ms", &val
		res.Configs = append(res.Configs, c)
		r.Resources = append(r.Resources, res)
		return []kmsg.Request{r}
	case 37:
		r := kmsg.NewPtrCreatePartitionsRequest()
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = fuzzCreated, 2
		r.Topics = append(r.Topics, rt)
		r.TimeoutMillis = 1000
		return []kmsg.Request{r}
	case 44:
		r := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, fuzzTopic
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		val := "604800000"
		c.Name, c.Value, c.Op = "retention.ms", &val, kmsg.IncrementalAlterConfigOpSet
		res.Configs = append(res.Configs, c)
		r.Resources = append(r.Resources, res)
		return []kmsg.Request{r}
	case 43:
		r := kmsg.NewPtrElectLeadersRequest()
		rt := kmsg.NewElectLeadersRequestTopic()
		rt.Topic, rt.Partitions = fuzzTopic, []int32{0, 1}
		r.Topics = append(r.Topics, rt)
		return []kmsg.Request{r, kmsg.NewPtrElectLeadersRequest()}
	case 45:
		r := kmsg.NewPtrAlterPartitionAssignmentsRequest()
		rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
		rt.Topic = fuzzTopic
		for _, reps := range [][]int32{{0}, nil, {1, 2}} {
			p := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
			p.Replicas = reps
			rt.Partitions = append(rt.Partitions, p)
		}
		r.Topics = append(r.Topics, rt)
		return []kmsg.Request{r}
	case 46:
		r := kmsg.NewPtrListPartitionReassignmentsRequest()
		rt := kmsg.NewListPartitionReassignmentsRequestTopic()
		rt.Topic, rt.Partitions = fuzzTopic, []int32{0, 1}
		r.Topics = append(r.Topics, rt)
		return []kmsg.Request{r, kmsg.NewPtrListPartitionReassignmentsRequest()}
	case 76:
		r := kmsg.NewPtrShareGroupHeartbeatRequest()
		r.GroupID, r.MemberID, r.SubscribedTopicNames = "fuzz-share", "fuzz-member", []string{fuzzTopic}
		beat := *r
		beat.MemberEpoch, beat.SubscribedTopicNames = 1, nil
		leave := beat
		leave.MemberEpoch = -1
		return []kmsg.Request{r, &beat, &leave}
	case 78, 79:
		// A session's opening fetch, a later one acknowledging (accept
		// and release, one type per offset) and forgetting a partition,
		// and a closing acknowledgement.
		g, m := "fuzz-share", "fuzz-member"
		open := kmsg.NewPtrShareFetchRequest()
		open.GroupID, open.MemberID = &g, &m
		open.MaxWaitMillis, open.MinBytes, open.MaxBytes, open.MaxRecords, open.BatchSize = 1, 1, 1<<20, 100, 100
		ft := kmsg.NewShareFetchRequestTopic()
		ft.TopicID = topic.ID
		for p := int32(0); p < 2; p++ {
			fp := kmsg.NewShareFetchRequestTopicPartition()
			fp.Partition = p
			ft.Partitions = append(ft.Partitions, fp)
		}
		open.Topics = append(open.Topics, ft)
		next := *open
		next.ShareSessionEpoch = 1
		nt := kmsg.NewShareFetchRequestTopic()
		nt.TopicID = topic.ID
		np := kmsg.NewShareFetchRequestTopicPartition()
		np.AcknowledgementBatches = []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{{FirstOffset: 0, LastOffset: 2, AcknowledgeTypes: []int8{1, 2, 1}}}
		nt.Partitions = append(nt.Partitions, np)
		next.Topics = []kmsg.ShareFetchRequestTopic{nt}
		next.ForgottenTopicsData = []kmsg.ShareFetchRequestForgottenTopicsData{{TopicID: topic.ID, Partitions: []int32{1}}}
		if key == 78 {
			return []kmsg.Request{open, &next}
		}
		ack := kmsg.NewPtrShareAcknowledgeRequest()
		ack.GroupID, ack.MemberID, ack.ShareSessionEpoch = &g, &m, -1
		at := kmsg.NewShareAcknowledgeRequestTopic()
		at.TopicID = topic.ID
		ap := kmsg.NewShareAcknowledgeRequestTopicPartition()
		ap.AcknowledgementBatches = []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{{FirstOffset: 0, LastOffset: 5, AcknowledgeTypes: []int8{3}}}
		at.Partitions = append(at.Partitions, ap)
		ack.Topics = append(ack.Topics, at)
		return []kmsg.Request{ack}
	case 91:
		r := kmsg.NewPtrAlterShareGroupOffsetsRequest()
		r.GroupID = "fuzz-share"
		rt := kmsg.NewAlterShareGroupOffsetsRequestTopic()
		rt.Topic = fuzzTopic
		rt.Partitions = []kmsg.AlterShareGroupOffsetsRequestTopicPartition{{Partition: 0, StartOffset: 1}}
		r.Topics = append(r.Topics, rt)
		return []kmsg.Request{r}
	case 10:
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.CoordinatorKey, r.CoordinatorKeys = "fuzz-group", []string{"fuzz-group"}
		return []kmsg.Request{r}
	case 11:
		r := kmsg.NewPtrJoinGroupRequest()
		r.Group, r.ProtocolType = "fuzz-group", "consumer"
		r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 6000, 1000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", []byte{0, 1, 0, 0, 0, 1, 0, 4, 'f', 'u', 'z', 'z', 0, 0, 0, 0}
		r.Protocols = append(r.Protocols, p)
		return []kmsg.Request{r}
	}
	// Everything else: the request with its defaults (and a group name
	// where the type has one, through the generic setter below).
	req := kmsg.RequestForKey(key)
	if req == nil {
		f.Fatalf("kmsg has no request for served key %d", key)
	}
	setGroup(req, "fuzz-group")
	return []kmsg.Request{req}
}

// setGroup sets a request's Group field, for the group APIs' seeds.
func setGroup(req kmsg.Request, g string) {
	switch r := req.(type) {
	case *kmsg.OffsetCommitRequest:
		r.Group = g
	case *kmsg.OffsetFetchRequest:
		r.Group = g
	case *kmsg.HeartbeatRequest:
		r.Group = g
	case *kmsg.LeaveGroupRequest:
		r.Group = g
	case *kmsg.SyncGroupRequest:
		r.Group = g
	case *kmsg.DescribeGroupsRequest:
		r.Groups = []string{g}
	case *kmsg.DeleteGroupsRequest:
		r.Groups = []string{g}
	case *kmsg.OffsetDeleteRequest:
		r.Group = g
	case *kmsg.ShareGroupDescribeRequest:
		r.GroupIDs = []string{g}
	case *kmsg.DescribeShareGroupOffsetsRequest:
		r.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{{GroupID: g}}
	case *kmsg.DeleteShareGroupOffsetsRequest:
		r.GroupID, r.Topics = g, []kmsg.DeleteShareGroupOffsetsRequestTopic{{Topic: fuzzTopic}}
	}
}
