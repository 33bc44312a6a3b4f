package netio

import (
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
//   - Transactions are not implemented: a transactional id gets
//     TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients surface at once
//     instead of retrying.

func handleInitProducerID(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrInitProducerIDRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	switch {
	case req.TransactionalID != nil:
		s.logger.Info("refusing transactional producer: transactions are not supported", "transactional_id", *req.TransactionalID, "client", clientName(r))
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
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
