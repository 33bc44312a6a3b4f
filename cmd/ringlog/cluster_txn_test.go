package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/cluster"
	"github.com/ringlog/ringlog/internal/kwire"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/wal/batch"
)

// readAllValues reads topic from the start on every broker in seeds with
// the isolation level until a poll brings nothing new, and counts values:
// a read_committed consumer gets everything below the LSO at once, so
// the first empty poll ends the read.
func readAllValues(ctx context.Context, t *testing.T, seeds []string, topic string, level kgo.IsolationLevel) map[string]int {
	t.Helper()
	cl := procClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(level))
	defer cl.Close()
	seen := map[string]int{}
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if fs.NumRecords() == 0 {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	return seen
}

// TestClusterTransactions runs transactions on three broker processes: the
// coordinator of a transactional id is the leader of its
// __transaction_state partition, the partitions of the transaction are
// led by the other brokers too (verified and ended across brokers), and
// read_committed consumers see commits only. A second producer with the
// same id fences the first. Then a consume-transform-produce loop
// (franz-go GroupTransactSession) keeps exactly-once output while its
// transaction coordinator is killed with SIGKILL inside a transaction.
func TestClusterTransactions(t *testing.T) {
	ringlogBinary(t)
	c := newTestCluster(t, 3)
	for id := 1; id <= 3; id++ {
		c.startReplicated(id)
	}
	ctx := deadlineCtx(t, 4*time.Minute)
	c.converge(ctx, 3)
	adm := kadm.NewClient(procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...)))
	for _, topic := range []string{"ctx-data", "ctx-in", "ctx-out", "ctx-sarama"} {
		parts := int32(3)
		if topic == "ctx-data" {
			parts = 6 // two per leader: a produce verifies several partitions at once
		}
		if res, err := adm.CreateTopic(ctx, parts, 3, nil, topic); err != nil || res.Err != nil {
			t.Fatalf("create %s: %v %v", topic, err, res.Err)
		}
	}
	data := c.waitFullISR(ctx, "ctx-data", 6, 3, 30*time.Second)
	c.waitFullISR(ctx, "ctx-in", 3, 3, 30*time.Second)
	c.waitFullISR(ctx, "ctx-out", 3, 3, 30*time.Second)
	c.waitFullISR(ctx, "ctx-sarama", 3, 3, 30*time.Second)
	c.waitFullISR(ctx, "__transaction_state", int(cluster.DefaultTxnStatePartitions), 3, 30*time.Second)
	c.waitFullISR(ctx, "__consumer_offsets", int(cluster.DefaultOffsetsPartitions), 3, 30*time.Second)

	// Commit and abort with partitions on every broker.
	const txnID = "ctx-producer"
	prod := procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...), kgo.TransactionalID(txnID),
		kgo.DefaultProduceTopic("ctx-data"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.RetryTimeout(30*time.Second))
	coord := adm.FindTxnCoordinators(ctx, txnID)
	if coord[txnID].Err != nil {
		t.Fatalf("find the coordinator of %s: %v", txnID, coord[txnID].Err)
	}
	remote := 0
	for _, l := range data.leaders() {
		if l != coord[txnID].NodeID {
			remote++
		}
	}
	t.Logf("transaction coordinator of %s: broker %d; ctx-data leaders %v", txnID, coord[txnID].NodeID, data.leaders())
	if remote == 0 {
		t.Fatalf("every ctx-data partition is led by the coordinator %d: nothing crosses brokers", coord[txnID].NodeID)
	}
	want := map[string]bool{}
	for round, commit := range []bool{true, false, true} {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for i := 0; i < 30; i++ {
			v := fmt.Sprintf("r%d-%d", round, i)
			recs = append(recs, &kgo.Record{Value: []byte(v)})
			if commit {
				want[v] = true
			}
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("round %d: produce: %v", round, err)
		}
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("round %d: end (commit=%v): %v", round, commit, err)
		}
	}
	committed := readAllValues(ctx, t, c.kafka, "ctx-data", kgo.ReadCommitted())
	if len(committed) != len(want) {
		t.Fatalf("read_committed sees %d records, want the %d committed", len(committed), len(want))
	}
	for v, n := range committed {
		if !want[v] || n != 1 {
			t.Fatalf("read_committed: %q ×%d (committed: %v)", v, n, want[v])
		}
	}
	if all := readAllValues(ctx, t, c.kafka, "ctx-data", kgo.ReadUncommitted()); len(all) != 90 {
		t.Fatalf("read_uncommitted sees %d records, want 90", len(all))
	}
	desc, err := adm.DescribeTransactions(ctx, txnID)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := desc[txnID]; !ok || d.Err != nil || d.State != "CompleteCommit" || d.Coordinator != coord[txnID].NodeID {
		t.Fatalf("DescribeTransactions: %+v", desc[txnID])
	}

	// A second instance fences the first: its produce and its commit
	// fail, and nothing it wrote after the fencing is visible.
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie-before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	prod2 := procClient(t, c.kafka[1], kgo.SeedBrokers(c.kafka...), kgo.TransactionalID(txnID),
		kgo.DefaultProduceTopic("ctx-data"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err := prod2.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod2.ProduceSync(ctx, &kgo.Record{Value: []byte("fencer")}).FirstErr(); err != nil {
		t.Fatalf("the new instance's produce: %v", err)
	}
	zerr := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie-after")}).FirstErr()
	cerr := prod.EndTransaction(ctx, kgo.TryCommit)
	if zerr == nil && cerr == nil {
		t.Fatal("the fenced instance produced and committed")
	}
	t.Logf("fenced instance: produce %v; commit %v", zerr, cerr)
	if err := prod2.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("the new instance's commit: %v", err)
	}
	committed = readAllValues(ctx, t, c.kafka, "ctx-data", kgo.ReadCommitted())
	if committed["zombie-before"] != 0 || committed["zombie-after"] != 0 || committed["fencer"] != 1 {
		t.Fatalf("after fencing, read_committed sees zombie-before ×%d, zombie-after ×%d, fencer ×%d",
			committed["zombie-before"], committed["zombie-after"], committed["fencer"])
	}

	saramaTransactionsInCluster(t, ctx, c)
	// The CLI lists the ids of every coordinator from one broker's
	// address (ListTransactions goes to each broker).
	code, out, errOut := runBinary(t, 30*time.Second, "txn", "list", "--brokers", c.kafka[2], "--output", "json")
	if code != 0 {
		t.Fatalf("txn list: exit %d: %s", code, errOut)
	}
	listed := map[string]string{}
	var rows []txnListJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("txn list --output json: %v\n%s", err, out)
	}
	for _, r := range rows {
		listed[r.ID] = r.State
	}
	if listed[txnID] != "CompleteCommit" || listed["ctx-sarama"] != "CompleteAbort" {
		t.Fatalf("txn list: %s", out)
	}
	txnBadInputAcrossBrokers(t, ctx, c, data)
	exactlyOnceAcrossCoordinatorKill(t, ctx, c)
}

// saramaTransactionsInCluster: sarama's transactional producer (other
// request versions than franz-go's, its own coordinator lookup) commits
// and aborts across the three brokers' partitions.
func saramaTransactionsInCluster(t *testing.T, ctx context.Context, c *testCluster) {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = "ringlog-sarama-cluster-test"
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	cfg.Producer.Transaction.ID = "ctx-sarama"
	cfg.Producer.Transaction.Timeout = 10 * time.Second
	cfg.Producer.Retry.Backoff = 50 * time.Millisecond
	cfg.Net.MaxOpenRequests = 1
	prod, err := sarama.NewSyncProducer(c.kafka, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for round, commit := range []bool{true, false} {
		if err := prod.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			v := fmt.Sprintf("sarama-%v-%d", commit, i)
			if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: "ctx-sarama", Value: sarama.StringEncoder(v)}); err != nil {
				t.Fatalf("round %d: send %s: %v", round, v, err)
			}
		}
		if commit {
			err = prod.CommitTxn()
		} else {
			err = prod.AbortTxn()
		}
		if err != nil {
			t.Fatalf("round %d: end (commit %v): %v", round, commit, err)
		}
	}
	got := readAllValues(ctx, t, c.kafka, "ctx-sarama", kgo.ReadCommitted())
	if len(got) != 6 {
		t.Fatalf("read_committed after sarama's commit and abort: %v, want the 6 committed", got)
	}
	for v, n := range got {
		if n != 1 || !strings.HasPrefix(v, "sarama-true-") {
			t.Fatalf("read_committed: %q ×%d", v, n)
		}
	}
	if all := readAllValues(ctx, t, c.kafka, "ctx-sarama", kgo.ReadUncommitted()); len(all) != 12 {
		t.Fatalf("read_uncommitted: %d records, want 12", len(all))
	}
}

// txnBadInputAcrossBrokers sends raw requests to chosen brokers: a
// transaction call to a broker that does not coordinate the id, markers
// to a broker that does not lead the partition, and a transactional
// produce to a partition not added, which its leader refuses after asking
// the coordinator on another broker, then takes once it is added.
func txnBadInputAcrossBrokers(t *testing.T, ctx context.Context, c *testCluster, data topicView) {
	cl := procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...))
	adm := kadm.NewClient(cl)
	if _, err := adm.Metadata(ctx); err != nil {
		t.Fatal(err)
	}
	const id = "ctx-raw"
	coord := adm.FindTxnCoordinators(ctx, id)[id]
	if coord.Err != nil {
		t.Fatal(coord.Err)
	}
	other := coord.NodeID%3 + 1
	// kwire sends each request at the version it is given (a kgo client
	// would raise it to the newest the broker advertises).
	call := func(node int32, req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := kwire.Call(ctx, c.kafka[node-1], req)
		if err != nil {
			t.Fatalf("%s to broker %d: %v", kmsg.NameForKey(req.Key()), node, err)
		}
		return resp
	}
	init := kmsg.NewPtrInitProducerIDRequest()
	init.Version = 4
	init.TransactionalID = kmsg.StringPtr(id)
	init.TransactionTimeoutMillis = 30000
	if r := call(other, init).(*kmsg.InitProducerIDResponse); r.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("InitProducerId at broker %d, not the coordinator %d: %s", other, coord.NodeID, kerr.ErrorForCode(r.ErrorCode))
	}
	ir := call(coord.NodeID, init).(*kmsg.InitProducerIDResponse)
	if ir.ErrorCode != 0 {
		t.Fatalf("InitProducerId at the coordinator: %v", kerr.ErrorForCode(ir.ErrorCode))
	}
	// A partition led by another broker than the coordinator.
	part := int32(-1)
	for i, p := range data.Parts {
		if p.Leader != coord.NodeID {
			part = int32(i)
			break
		}
	}
	leader := data.Parts[part].Leader
	produce := func(seq int32) int16 {
		b := batch.NewBuilder()
		b.ProducerID, b.ProducerEpoch, b.BaseSequence, b.Transactional = ir.ProducerID, ir.ProducerEpoch, seq, true
		b.Add(time.Now().UnixMilli(), nil, []byte("raw"), nil)
		recs, err := b.Build(nil, batch.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		req := kmsg.NewPtrProduceRequest()
		req.Version = 9
		req.TransactionID, req.Acks, req.TimeoutMillis = kmsg.StringPtr(id), -1, 10000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "ctx-data"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = part, recs
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return call(leader, req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	}
	if code := produce(0); code != kerr.InvalidTxnState.Code {
		t.Fatalf("a transactional produce to ctx-data-%d (leader %d), never added at coordinator %d: %s, want INVALID_TXN_STATE",
			part, leader, coord.NodeID, kerr.ErrorForCode(code))
	}
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.Version = 3
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = id, ir.ProducerID, ir.ProducerEpoch
	at := kmsg.NewAddPartitionsToTxnRequestTopic()
	at.Topic, at.Partitions = "ctx-data", []int32{part}
	add.Topics = append(add.Topics, at)
	if r := call(other, add).(*kmsg.AddPartitionsToTxnResponse); r.Topics[0].Partitions[0].ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("AddPartitionsToTxn at a broker that does not coordinate: %s", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	if r := call(coord.NodeID, add).(*kmsg.AddPartitionsToTxnResponse); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("AddPartitionsToTxn: %s", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	if code := produce(0); code != 0 {
		t.Fatalf("the produce once the partition is added: %s", kerr.ErrorForCode(code))
	}
	lso := func() int64 {
		o, err := adm.ListCommittedOffsets(ctx, "ctx-data")
		if err != nil {
			t.Fatal(err)
		}
		r, _ := o.Lookup("ctx-data", part)
		return r.Offset
	}
	hwm, err := adm.ListEndOffsets(ctx, "ctx-data")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := hwm.Lookup("ctx-data", part)
	if got := lso(); got >= end.Offset {
		t.Fatalf("ctx-data-%d: LSO %d with a transaction open below its end %d", part, got, end.Offset)
	}
	// Markers from a client: a partition this broker does not lead, and
	// one that does not exist.
	wm := kmsg.NewPtrWriteTxnMarkersRequest()
	wm.Version = 1
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed = ir.ProducerID, ir.ProducerEpoch, true
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic, mt.Partitions = "ctx-data", []int32{part}
	nt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	nt.Topic, nt.Partitions = "no-such-topic", []int32{0}
	m.Topics = append(m.Topics, mt, nt)
	wm.Markers = append(wm.Markers, m)
	notLeader := leader%3 + 1
	wr := call(notLeader, wm).(*kmsg.WriteTxnMarkersResponse)
	if c0, c1 := wr.Markers[0].Topics[0].Partitions[0].ErrorCode, wr.Markers[0].Topics[1].Partitions[0].ErrorCode; c0 != kerr.NotLeaderForPartition.Code || c1 != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("WriteTxnMarkers at broker %d: %s, %s; want NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION", notLeader, kerr.ErrorForCode(c0), kerr.ErrorForCode(c1))
	}
	end2 := kmsg.NewPtrEndTxnRequest()
	end2.Version = 3
	end2.TransactionalID, end2.ProducerID, end2.ProducerEpoch, end2.Commit = id, ir.ProducerID, ir.ProducerEpoch, true
	if r := call(coord.NodeID, end2).(*kmsg.EndTxnResponse); r.ErrorCode != 0 {
		t.Fatalf("EndTxn: %s", kerr.ErrorForCode(r.ErrorCode))
	}
	waitFor(t, ctx, "the LSO to pass the committed transaction", func() bool { return lso() > end.Offset })
	if r := call(coord.NodeID, end2).(*kmsg.EndTxnResponse); r.ErrorCode != 0 {
		t.Fatalf("a retried EndTxn(commit): %s", kerr.ErrorForCode(r.ErrorCode))
	}
	end2.Commit = false
	if r := call(coord.NodeID, end2).(*kmsg.EndTxnResponse); r.ErrorCode != kerr.InvalidTxnState.Code {
		t.Fatalf("EndTxn(abort) after the commit: %s, want INVALID_TXN_STATE", kerr.ErrorForCode(r.ErrorCode))
	}
}

// exactlyOnceAcrossCoordinatorKill runs a GroupTransactSession loop from
// ctx-in to ctx-out, kills its transaction coordinator's broker while a
// transaction is open, and checks that ctx-out read with read_committed
// holds every input record exactly once.
func exactlyOnceAcrossCoordinatorKill(t *testing.T, ctx context.Context, c *testCluster) {
	const n = 600
	const loopID = "ctx-loop"
	in := procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...), kgo.DefaultProduceTopic("ctx-in"), kgo.RequiredAcks(kgo.AllISRAcks()))
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("v%04d", i))})
	}
	if err := in.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A fresh session replaces one that failed for good, as an
	// application restarts its loop: franz-go gives up on a coordinator
	// it cached when that broker leaves the metadata (it was killed), and
	// the new instance fences the old one's transaction.
	newSession := transactSessions(t, c.kafka, "ctx", 6*time.Second)
	loop := startTransactLoop(t, ctx, newSession, 20, true)
	loop.waitInside(ctx, 8)
	adm := kadm.NewClient(procClient(t, c.kafka[0], kgo.SeedBrokers(c.kafka...)))
	coord := adm.FindTxnCoordinators(ctx, loopID)
	if coord[loopID].Err != nil {
		t.Fatalf("find the coordinator of %s: %v", loopID, coord[loopID].Err)
	}
	victim := coord[loopID].NodeID
	t.Logf("SIGKILL of broker %d, the coordinator of %s, after %d committed transactions, one open: %v", victim, loopID, loop.committed(), loop.inTxn.Load())
	c.procs[victim-1].kill()
	var live []string
	for _, id := range c.running() {
		live = append(live, c.kafka[id-1])
	}
	var seen map[string]int
	if !testenv.Poll(90*time.Second, 500*time.Millisecond, func() bool {
		seen = readAllValues(ctx, t, live, "ctx-out", kgo.ReadCommitted())
		return len(seen) >= n || ctx.Err() != nil
	}) {
		logTxnState(t, ctx, live, loopID, "ctx-out")
		t.Fatalf("after 90 s the committed output holds %d of %d records", len(seen), n)
	}
	loop.halt()
	for i := 0; i < 5 && len(seen) < n; i++ {
		seen = readAllValues(ctx, t, live, "ctx-out", kgo.ReadCommitted())
	}
	t.Logf("%v, across the coordinator's SIGKILL", loop)
	if len(seen) != n {
		t.Fatalf("read_committed output holds %d distinct records, want %d", len(seen), n)
	}
	for i := 0; i < n; i++ {
		if v := fmt.Sprintf("out-v%04d", i); seen[v] != 1 {
			t.Fatalf("%s appears %d times in the committed output", v, seen[v])
		}
	}
	if now := adm.FindTxnCoordinators(ctx, loopID); now[loopID].Err == nil && now[loopID].NodeID == victim {
		t.Fatalf("the killed broker %d still coordinates %s", victim, loopID)
	}
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("ran out of time")
	}
}

// logTxnState logs what a stuck transactional test needs: the id's
// transaction and each partition's high watermark and last stable offset.
func logTxnState(t *testing.T, ctx context.Context, seeds []string, id, topic string) {
	adm := kadm.NewClient(procClient(t, seeds[0], kgo.SeedBrokers(seeds...)))
	d, err := adm.DescribeTransactions(ctx, id)
	t.Logf("DescribeTransactions(%s): %+v %v", id, d, err)
	hw, err1 := adm.ListEndOffsets(ctx, topic)
	lso, err2 := adm.ListCommittedOffsets(ctx, topic)
	t.Logf("%s end offsets: %+v %v; committed (LSO): %+v %v", topic, hw, err1, lso, err2)
}
