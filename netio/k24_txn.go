package netio

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// The transaction APIs: AddPartitionsToTxn (key 24, v0-4), AddOffsetsToTxn
// (25, v0-3), EndTxn (26, v0-4), TxnOffsetCommit (28, v0-3),
// DescribeTransactions (65, v0), ListTransactions (66, v0-1). The
// transactional side of InitProducerId, FindCoordinator, Produce, Fetch
// and ListOffsets lives in their own files. engine/txn.go is the
// coordinator.
//
//   - In cluster mode each transactional id has its coordinator, the
//     leader of its __transaction_state partition (FindCoordinator key
//     type 1); elsewhere its requests are NOT_COORDINATOR, which clients
//     answer by finding it again. DescribeTransactions answers per id;
//     ListTransactions lists the ids coordinated here (admin clients ask
//     every broker). Partition leaders verify transactional produces with
//     the coordinator (AddPartitionsToTxn v4, verify only), and the
//     coordinator writes markers to other brokers' partitions with
//     WriteTxnMarkers (k27_write_txn_markers.go).
//   - Versions stop before KIP-890 part 2 (EndTxn v5, AddPartitionsToTxn
//     v5, TxnOffsetCommit v4+): clients add partitions explicitly, and the
//     broker verifies every transactional produce against the coordinator
//     (a partition not added is INVALID_TXN_STATE), so no transaction is
//     left open that the coordinator does not know.
//   - AddPartitionsToTxn v4 is the brokers' batched form; its VerifyOnly
//     transactions are checked, not changed.
//   - Errors as Kafka's: INVALID_PRODUCER_ID_MAPPING (unknown id or
//     producer id), PRODUCER_FENCED (an older epoch), INVALID_TXN_STATE
//     (EndTxn with no transaction, the wrong outcome for a retry),
//     CONCURRENT_TRANSACTIONS (the transaction is still ending),
//     UNKNOWN_TOPIC_OR_PARTITION with OPERATION_NOT_ATTEMPTED for the
//     rest of the request.
//   - ACLs: WRITE on the TRANSACTIONAL_ID (TRANSACTIONAL_ID_AUTHORIZATION_
//     FAILED); WRITE on each added topic; READ on the group and topics of
//     TxnOffsetCommit and AddOffsetsToTxn; DESCRIBE on the id to describe
//     or list it.

// txnAPITable is served on the Kafka listeners (not the native one).
var txnAPITable = []apiHandler{
	{key: 24, name: "AddPartitionsToTxn", min: 0, max: 4, advMin: 0, async: true, handler: handleAddPartitionsToTxn},
	{key: 25, name: "AddOffsetsToTxn", min: 0, max: 3, advMin: 0, async: true, handler: handleAddOffsetsToTxn},
	{key: 26, name: "EndTxn", min: 0, max: 4, advMin: 0, async: true, handler: handleEndTxn},
	{key: 28, name: "TxnOffsetCommit", min: 0, max: 3, advMin: 0, async: true, handler: handleTxnOffsetCommit},
	{key: 65, name: "DescribeTransactions", min: 0, max: 0, advMin: 0, async: true, handler: handleDescribeTransactions},
	{key: 66, name: "ListTransactions", min: 0, max: 1, advMin: 0, async: true, handler: handleListTransactions},
}

// txnIDAllowed is allowed for a TRANSACTIONAL_ID.
func (r *request) txnIDAllowed(op kmsg.ACLOperation, id string) bool {
	return r.allowed(op, kmsg.ACLResourceTypeTransactionalId, id)
}

func handleAddPartitionsToTxn(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if r.version >= 4 {
		if !r.clusterAllowed(kmsg.ACLOperationClusterAction) {
			resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
			r.failed = true
			r.respond(resp)
			return frameDone
		}
		for _, t := range req.Transactions {
			rt := kmsg.NewAddPartitionsToTxnResponseTransaction()
			rt.TransactionalID = t.TransactionalID
			topics := make([]kmsg.AddPartitionsToTxnRequestTopic, len(t.Topics))
			for i, x := range t.Topics {
				topics[i] = kmsg.AddPartitionsToTxnRequestTopic{Topic: x.Topic, Partitions: x.Partitions}
			}
			codes := s.addPartitions(r, t.TransactionalID, t.ProducerID, t.ProducerEpoch, t.VerifyOnly, topics)
			for i, x := range t.Topics {
				tt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
				tt.Topic = x.Topic
				for j, p := range x.Partitions {
					tp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
					tp.Partition, tp.ErrorCode = p, codes[i][j]
					r.failed = r.failed || tp.ErrorCode != 0
					tt.Partitions = append(tt.Partitions, tp)
				}
				rt.Topics = append(rt.Topics, tt)
			}
			resp.Transactions = append(resp.Transactions, rt)
		}
		r.respond(resp)
		return frameDone
	}
	codes := s.addPartitions(r, req.TransactionalID, req.ProducerID, req.ProducerEpoch, false, req.Topics)
	for i, t := range req.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, codes[i][j]
			r.failed = r.failed || rp.ErrorCode != 0
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.respond(resp)
	return frameDone
}

// addPartitions adds (or verifies) one transaction's partitions and
// returns an error code per requested partition.
func (s *Server) addPartitions(r *request, id string, pid int64, epoch int16, verifyOnly bool, topics []kmsg.AddPartitionsToTxnRequestTopic) [][]int16 {
	codes := make([][]int16, len(topics))
	all := func(code int16) [][]int16 {
		for i, t := range topics {
			codes[i] = make([]int16, len(t.Partitions))
			for j := range codes[i] {
				codes[i][j] = code
			}
		}
		return codes
	}
	if !r.txnIDAllowed(kmsg.ACLOperationWrite, id) {
		return all(kerr.TransactionalIDAuthorizationFailed.Code)
	}
	var parts []engine.TopicPartition
	denied := false
	for i, t := range topics {
		codes[i] = make([]int16, len(t.Partitions))
		if !r.topicAllowed(kmsg.ACLOperationWrite, t.Topic) {
			denied = true
			for j := range codes[i] {
				codes[i][j] = kerr.TopicAuthorizationFailed.Code
			}
		}
		for _, p := range t.Partitions {
			parts = append(parts, engine.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	if denied {
		for i := range codes {
			for j := range codes[i] {
				if codes[i][j] == 0 {
					codes[i][j] = kerr.OperationNotAttempted.Code
				}
			}
		}
		return codes
	}
	txns := s.eng.Transactions()
	var errs []error
	var err error
	if verifyOnly {
		errs, err = txns.VerifyPartitions(id, pid, epoch, parts)
	} else {
		errs, err = txns.AddPartitions(id, pid, epoch, parts)
	}
	if err != nil {
		s.logger.Debug("AddPartitionsToTxn refused", "transactional_id", id, "err", err, "client", clientName(r))
		return all(errCode(err))
	}
	k := 0
	for i := range codes {
		for j := range codes[i] {
			codes[i][j] = errCode(errs[k])
			k++
		}
	}
	return codes
}

func handleAddOffsetsToTxn(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrAddOffsetsToTxnRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	var err error
	switch {
	case !r.txnIDAllowed(kmsg.ACLOperationWrite, req.TransactionalID):
		err = kerr.TransactionalIDAuthorizationFailed
	case !r.groupAllowed(kmsg.ACLOperationRead, req.Group):
		err = kerr.GroupAuthorizationFailed
	default:
		err = s.eng.Transactions().AddOffsets(req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group)
	}
	resp.ErrorCode = errCode(err)
	r.failed = err != nil
	r.respond(resp)
	return frameDone
}

func handleEndTxn(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrEndTxnRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	var err error
	if !r.txnIDAllowed(kmsg.ACLOperationWrite, req.TransactionalID) {
		err = kerr.TransactionalIDAuthorizationFailed
	} else {
		err = s.eng.Transactions().EndTxn(req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
	}
	if err != nil {
		s.logger.Debug("EndTxn refused", "transactional_id", req.TransactionalID, "err", err, "client", clientName(r))
	}
	resp.ErrorCode = errCode(err)
	r.failed = err != nil
	r.respond(resp)
	return frameDone
}

func handleTxnOffsetCommit(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	if r.version < 3 {
		req.Generation, req.MemberID = -1, ""
	}
	var commits []engine.OffsetCommit
	denied := map[string]bool{}
	for _, t := range req.Topics {
		if !r.topicAllowed(kmsg.ACLOperationRead, t.Topic) {
			denied[t.Topic] = true
			continue
		}
		for _, p := range t.Partitions {
			commits = append(commits, engine.OffsetCommit{Topic: t.Topic, Partition: p.Partition, Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata})
		}
	}
	var errs []error
	var err error
	switch {
	case !r.txnIDAllowed(kmsg.ACLOperationWrite, req.TransactionalID):
		err = kerr.TransactionalIDAuthorizationFailed
	case !r.groupAllowed(kmsg.ACLOperationRead, req.Group):
		err = kerr.GroupAuthorizationFailed
	default:
		errs, err = s.eng.Coordinator().TxnCommitOffsets(req.TransactionalID, req.Group, req.MemberID, req.InstanceID, req.Generation, req.ProducerID, req.ProducerEpoch, commits)
	}
	out := partitionOutcomes{err: err, errs: errs, denied: denied}
	for _, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = out.code(t.Topic)
			r.failed = r.failed || rp.ErrorCode != 0
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.respond(resp)
	return frameDone
}

func handleDescribeTransactions(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDescribeTransactionsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	var ids []string
	for _, id := range req.TransactionalIDs {
		if r.txnIDAllowed(kmsg.ACLOperationDescribe, id) {
			ids = append(ids, id)
		}
	}
	infos := s.eng.Transactions().Describe(ids)
	k := 0
	for _, id := range req.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = id
		st.ProducerID, st.ProducerEpoch, st.StartTimestamp = -1, -1, -1
		switch {
		case k >= len(infos) || infos[k].ID != id:
			st.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		case infos[k].Err != nil:
			st.ErrorCode = errCode(infos[k].Err)
			k++
		case infos[k].State == engine.TxnDead:
			st.ErrorCode = kerr.TransactionalIDNotFound.Code
			k++
		default:
			in := infos[k]
			k++
			st.State = in.State.String()
			st.TimeoutMillis = int32(in.Timeout.Milliseconds())
			st.ProducerID, st.ProducerEpoch = in.ProducerID, in.Epoch
			if !in.Start.IsZero() {
				st.StartTimestamp = in.Start.UnixMilli()
			}
			for _, tp := range in.Partitions {
				if n := len(st.Topics); n > 0 && st.Topics[n-1].Topic == tp.Topic {
					st.Topics[n-1].Partitions = append(st.Topics[n-1].Partitions, tp.Partition)
					continue
				}
				t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				t.Topic, t.Partitions = tp.Topic, []int32{tp.Partition}
				st.Topics = append(st.Topics, t)
			}
		}
		r.failed = r.failed || st.ErrorCode != 0
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	r.respond(resp)
	return frameDone
}

func handleListTransactions(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrListTransactionsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	var states []engine.TxnState
	for _, name := range req.StateFilters {
		st, ok := engine.ParseTxnState(name)
		if !ok {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, name)
			continue
		}
		states = append(states, st)
	}
	if len(req.StateFilters) > 0 && len(states) == 0 {
		r.respond(resp) // only unknown states: nothing matches
		return frameDone
	}
	for _, in := range s.eng.Transactions().List(states, req.ProducerIDFilters, time.Duration(req.DurationFilterMillis)*time.Millisecond) {
		if !r.txnIDAllowed(kmsg.ACLOperationDescribe, in.ID) {
			continue
		}
		st := kmsg.NewListTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.TransactionState = in.ID, in.ProducerID, in.State.String()
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	r.respond(resp)
	return frameDone
}
