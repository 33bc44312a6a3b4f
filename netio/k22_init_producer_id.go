package netio

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// InitProducerId, key 22, versions 0-5.
//
//   - Idempotent producers get a fresh producer id with epoch 0; ids are
//     reserved in blocks in the metadata file and never repeat, across
//     restarts too.
//   - Without a transactional id every request gets a new id, also when
//     it names an existing id and epoch (v3+, KIP-360): as in Kafka, an
//     idempotent producer recovering from an error starts over with a
//     fresh id, and no client can bump (fence) another's epoch.
//   - A transactional id goes to the transaction coordinator
//     (engine/txn.go): the id keeps its producer id and gets the next
//     epoch, which fences older instances (an open transaction of theirs
//     is aborted first); transaction.timeout.ms must be within
//     1..transaction.max.timeout.ms (INVALID_TRANSACTION_TIMEOUT). It
//     needs WRITE on the TRANSACTIONAL_ID. In cluster mode it must reach
//     the id's coordinator (FindCoordinator), else NOT_COORDINATOR.

func handleInitProducerID(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrInitProducerIDRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	switch {
	case req.TransactionalID != nil && !r.txnIDAllowed(kmsg.ACLOperationWrite, *req.TransactionalID):
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
	case req.TransactionalID != nil:
		id, epoch, err := s.eng.Transactions().InitProducerID(*req.TransactionalID, time.Duration(req.TransactionTimeoutMillis)*time.Millisecond, req.ProducerID, req.ProducerEpoch)
		if err != nil {
			s.logger.Debug("InitProducerId refused", "transactional_id", *req.TransactionalID, "err", err, "client", clientName(r))
			resp.ErrorCode = errCode(err)
			break
		}
		resp.ProducerID, resp.ProducerEpoch = id, epoch
	case !r.mayWriteIdempotently():
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
	default:
		id, err := s.eng.AllocateProducerID()
		if err != nil {
			resp.ErrorCode = errCode(err)
			break
		}
		resp.ProducerID, resp.ProducerEpoch = id, 0
	}
	r.failed = resp.ErrorCode != 0
	r.respond(resp)
	return frameDone
}
