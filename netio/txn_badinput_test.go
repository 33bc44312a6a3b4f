package netio_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/wal/batch"
)

type txnRaw struct {
	t   *testing.T
	ctx context.Context
	cl  *kgo.Client
}

func (x txnRaw) req(r kmsg.Request) kmsg.Response {
	x.t.Helper()
	resp, err := x.cl.Request(x.ctx, r)
	if err != nil {
		x.t.Fatalf("%T: %v", r, err)
	}
	return resp
}

func (x txnRaw) init(id string, timeoutMs int32) (int64, int16, int16) {
	x.t.Helper()
	r := kmsg.NewPtrInitProducerIDRequest()
	r.TransactionalID, r.TransactionTimeoutMillis = &id, timeoutMs
	resp := x.req(r).(*kmsg.InitProducerIDResponse)
	return resp.ProducerID, resp.ProducerEpoch, resp.ErrorCode
}

func (x txnRaw) add(id string, pid int64, epoch int16, topics map[string][]int32) map[string]map[int32]int16 {
	x.t.Helper()
	r := kmsg.NewPtrAddPartitionsToTxnRequest()
	r.SetVersion(3)
	r.TransactionalID, r.ProducerID, r.ProducerEpoch = id, pid, epoch
	for topic, ps := range topics {
		r.Topics = append(r.Topics, kmsg.AddPartitionsToTxnRequestTopic{Topic: topic, Partitions: ps})
	}
	resp := x.req(r).(*kmsg.AddPartitionsToTxnResponse)
	out := map[string]map[int32]int16{}
	for _, t := range resp.Topics {
		out[t.Topic] = map[int32]int16{}
		for _, p := range t.Partitions {
			out[t.Topic][p.Partition] = p.ErrorCode
		}
	}
	return out
}

func (x txnRaw) end(id string, pid int64, epoch int16, commit bool) int16 {
	x.t.Helper()
	r := kmsg.NewPtrEndTxnRequest()
	r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Commit = id, pid, epoch, commit
	return x.req(r).(*kmsg.EndTxnResponse).ErrorCode
}

// noError is code 0 for wantCode.
var noError = &kerr.Error{Message: "NONE", Code: 0}

func wantCode(t *testing.T, what string, got int16, want *kerr.Error) {
	t.Helper()
	if got != want.Code {
		t.Fatalf("%s: error %v, want %v", what, kerr.ErrorForCode(got), want)
	}
}

// TestTxnBadInput sends the transaction APIs what a buggy or stale client
// would: each gets Kafka's error code, nothing crashes, and nothing is
// half-committed.
func TestTxnBadInput(t *testing.T) {
	b := startBroker(t, withEngine(func(c *engine.Config) { c.Transactions.CheckInterval = 50 * time.Millisecond }))
	ctx := testCtx(t, 30*time.Second)
	b.e2eCreate(ctx, "bad-txn", 2, nil)
	x := txnRaw{t, ctx, b.client()}

	if _, _, code := x.init("too-long", int32((16 * time.Minute).Milliseconds())); code != kerr.InvalidTransactionTimeout.Code {
		t.Fatalf("a timeout past transaction.max.timeout.ms: %v", kerr.ErrorForCode(code))
	}
	wantCode(t, "EndTxn of an unknown id", x.end("never-initialized", 1, 0, true), kerr.InvalidProducerIDMapping)

	pid, epoch, code := x.init("bad", 60000)
	wantCode(t, "InitProducerId", code, noError)
	wantCode(t, "EndTxn with no transaction", x.end("bad", pid, epoch, true), kerr.InvalidTxnState)
	wantCode(t, "EndTxn(abort) with no transaction", x.end("bad", pid, epoch, false), kerr.InvalidTxnState)

	// An unknown topic fails the whole request: nothing is added.
	res := x.add("bad", pid, epoch, map[string][]int32{"bad-txn": {0}, "no-such-topic": {0}})
	wantCode(t, "AddPartitions unknown topic", res["no-such-topic"][0], kerr.UnknownTopicOrPartition)
	wantCode(t, "AddPartitions known topic next to an unknown one", res["bad-txn"][0], kerr.OperationNotAttempted)
	res = x.add("bad", pid, epoch, map[string][]int32{"bad-txn": {7}})
	wantCode(t, "AddPartitions unknown partition", res["bad-txn"][7], kerr.UnknownTopicOrPartition)
	wantCode(t, "EndTxn after refused adds", x.end("bad", pid, epoch, true), kerr.InvalidTxnState)

	// Wrong producer id and wrong epochs.
	res = x.add("bad", pid+1, epoch, map[string][]int32{"bad-txn": {0}})
	wantCode(t, "AddPartitions wrong producer id", res["bad-txn"][0], kerr.InvalidProducerIDMapping)
	res = x.add("bad", pid, epoch+1, map[string][]int32{"bad-txn": {0}})
	wantCode(t, "AddPartitions future epoch", res["bad-txn"][0], kerr.ProducerFenced)

	// A transactional batch for a partition not added is refused.
	res = x.add("bad", pid, epoch, map[string][]int32{"bad-txn": {0}})
	wantCode(t, "AddPartitions", res["bad-txn"][0], noError)
	produce := func(partition int32, pid int64, epoch int16, seq int32) int16 {
		bl := batch.NewBuilder()
		bl.ProducerID, bl.ProducerEpoch, bl.BaseSequence, bl.Transactional = pid, epoch, seq, true
		bl.Add(time.Now().UnixMilli(), nil, []byte("v"), nil)
		data, _ := bl.Build(nil, batch.CodecNone)
		id := "bad"
		r := kmsg.NewPtrProduceRequest()
		r.TransactionID, r.Acks, r.TimeoutMillis = &id, -1, 5000
		r.Topics = []kmsg.ProduceRequestTopic{{Topic: "bad-txn", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: partition, Records: data}}}}
		return x.req(r).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	}
	wantCode(t, "transactional produce to a partition not added", produce(1, pid, epoch, 0), kerr.InvalidTxnState)
	wantCode(t, "transactional produce", produce(0, pid, epoch, 0), noError)
	p0 := b.e2ePart("bad-txn", 0)
	if lso := p0.LastStableOffset(); lso != 0 {
		t.Fatalf("LSO %d with a transaction open at 0", lso)
	}

	// A concurrent transaction on the same id: a second InitProducerId
	// fences the first instance and aborts its transaction.
	pid2, epoch2, code := x.init("bad", 60000)
	wantCode(t, "second InitProducerId", code, noError)
	if pid2 != pid || epoch2 <= epoch {
		t.Fatalf("second InitProducerId: %d/%d after %d/%d", pid2, epoch2, pid, epoch)
	}
	wantCode(t, "EndTxn of the fenced instance", x.end("bad", pid, epoch, true), kerr.ProducerFenced)
	wantCode(t, "produce of the fenced instance", produce(0, pid, epoch, 1), kerr.InvalidProducerEpoch)
	if lso, hw := p0.LastStableOffset(), p0.HighWatermark(); lso != hw || hw != 2 {
		t.Fatalf("after the fencing abort: LSO %d, HW %d; want both 2 (data + marker)", lso, hw)
	}
	if ab := p0.AbortedTxns(nil, 0, 10); len(ab) != 1 || ab[0].ProducerID != pid {
		t.Fatalf("the fenced transaction is not in the aborted index: %+v", ab)
	}

	// transaction.timeout.ms: the coordinator aborts and fences.
	pid3, epoch3, code := x.init("slow", 300)
	wantCode(t, "InitProducerId slow", code, noError)
	res = x.add("slow", pid3, epoch3, map[string][]int32{"bad-txn": {1}})
	wantCode(t, "AddPartitions slow", res["bad-txn"][1], noError)
	txns := b.Eng.Transactions()
	if !testenv.Eventually(10*time.Second, func() bool { return txns.Timeouts.Load() > 0 }) {
		t.Fatal("the transaction past its timeout was not aborted")
	}
	wantCode(t, "EndTxn after the timeout", x.end("slow", pid3, epoch3, true), kerr.ProducerFenced)
	infos := txns.Describe([]string{"slow", "bad", "nobody"})
	if infos[0].State != engine.TxnCompleteAbort || infos[0].Epoch != epoch3+1 || infos[1].State != engine.TxnEmpty || infos[2].State != engine.TxnDead {
		t.Fatalf("states: %+v", infos)
	}
	if got := txns.List([]engine.TxnState{engine.TxnCompleteAbort}, nil, 0); len(got) != 1 || got[0].ID != "slow" {
		t.Fatalf("ListTransactions(CompleteAbort) = %+v", got)
	}

	// DescribeTransactions and ListTransactions over the wire.
	dr := kmsg.NewPtrDescribeTransactionsRequest()
	dr.TransactionalIDs = []string{"slow", "nobody"}
	dresp := x.req(dr).(*kmsg.DescribeTransactionsResponse)
	if len(dresp.TransactionStates) != 2 || dresp.TransactionStates[0].State != "CompleteAbort" || dresp.TransactionStates[1].ErrorCode != kerr.TransactionalIDNotFound.Code {
		t.Fatalf("DescribeTransactions: %+v", dresp.TransactionStates)
	}
	lr := kmsg.NewPtrListTransactionsRequest()
	lr.StateFilters = []string{"Empty", "Bogus"}
	lresp := x.req(lr).(*kmsg.ListTransactionsResponse)
	if len(lresp.TransactionStates) != 1 || lresp.TransactionStates[0].TransactionalID != "bad" || len(lresp.UnknownStateFilters) != 1 {
		t.Fatalf("ListTransactions: %+v", lresp)
	}
	// The broker still serves everyone.
	if err := b.client().ProduceSync(ctx, &kgo.Record{Topic: "bad-txn", Value: []byte("ok")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestTxnOffsetCommitVisibility: offsets committed in a transaction are
// invisible (UNSTABLE_OFFSET_COMMIT under require_stable) until it
// commits, dropped when it aborts, and come back after a restart.
func TestTxnOffsetCommitVisibility(t *testing.T) {
	b := startBroker(t)
	ctx := testCtx(t, 30*time.Second)
	b.e2eCreate(ctx, "txn-offsets", 1, nil)
	x := txnRaw{t, ctx, b.client()}
	pid, epoch, code := x.init("offsets-txn", 60000)
	wantCode(t, "InitProducerId", code, noError)
	commitIn := func(offset int64) int16 {
		r := kmsg.NewPtrTxnOffsetCommitRequest()
		r.TransactionalID, r.Group, r.ProducerID, r.ProducerEpoch, r.Generation = "offsets-txn", "txn-group", pid, epoch, -1
		r.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "txn-offsets", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: offset, LeaderEpoch: -1}}}}
		return x.req(r).(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	}
	addOffsets := func() int16 {
		r := kmsg.NewPtrAddOffsetsToTxnRequest()
		r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Group = "offsets-txn", pid, epoch, "txn-group"
		return x.req(r).(*kmsg.AddOffsetsToTxnResponse).ErrorCode
	}
	fetch := func(x txnRaw, stable bool) (int64, int16) {
		r := kmsg.NewPtrOffsetFetchRequest()
		r.SetVersion(7)
		r.Group, r.RequireStable = "txn-group", stable
		r.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "txn-offsets", Partitions: []int32{0}}}
		p := x.req(r).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0]
		return p.Offset, p.ErrorCode
	}
	wantCode(t, "TxnOffsetCommit before AddOffsetsToTxn", commitIn(5), kerr.InvalidTxnState)
	wantCode(t, "AddOffsetsToTxn", addOffsets(), noError)
	wantCode(t, "TxnOffsetCommit", commitIn(5), noError)
	if off, code := fetch(x, true); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("require_stable during the transaction: offset %d, %v", off, kerr.ErrorForCode(code))
	}
	if off, code := fetch(x, false); off != -1 || code != 0 {
		t.Fatalf("the uncommitted offset is visible: %d %v", off, kerr.ErrorForCode(code))
	}
	wantCode(t, "EndTxn commit", x.end("offsets-txn", pid, epoch, true), noError)
	if off, code := fetch(x, true); off != 5 || code != 0 {
		t.Fatalf("after the commit: offset %d, %v", off, kerr.ErrorForCode(code))
	}
	// An aborted transaction's offsets never appear.
	wantCode(t, "AddOffsetsToTxn 2", addOffsets(), noError)
	wantCode(t, "TxnOffsetCommit 2", commitIn(9), noError)
	wantCode(t, "EndTxn abort", x.end("offsets-txn", pid, epoch, false), noError)
	if off, _ := fetch(x, true); off != 5 {
		t.Fatalf("after the abort: offset %d, want 5", off)
	}
	// A transaction left open across a restart stays pending, then
	// commits; the replay of __consumer_offsets gives the same answers.
	wantCode(t, "AddOffsetsToTxn 3", addOffsets(), noError)
	wantCode(t, "TxnOffsetCommit 3", commitIn(12), noError)
	b.restart()
	x2 := txnRaw{t, ctx, b.client()}
	if off, code := fetch(x2, true); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("require_stable after the restart: offset %d, %v", off, kerr.ErrorForCode(code))
	}
	wantCode(t, "EndTxn commit after the restart", x2.end("offsets-txn", pid, epoch, true), noError)
	if off, code := fetch(x2, true); off != 12 || code != 0 {
		t.Fatalf("after the restart and commit: offset %d, %v", off, kerr.ErrorForCode(code))
	}
	b.restart()
	if off, _ := fetch(txnRaw{t, ctx, b.client()}, true); off != 12 {
		t.Fatalf("replayed offset %d, want 12", off)
	}
}
