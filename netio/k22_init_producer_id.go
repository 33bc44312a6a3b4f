package netio

import (
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// InitProducerId, key 22, versions 0-5.
//
//   - Idempotent producers get a fresh producer id with epoch 0; ids are
//     reserved in blocks in the metadata file and never repeat, across
//     restarts too.
//   - v3+ with an existing id and epoch (KIP-360, a producer recovering
//     after an error) bumps the epoch, or issues a new id when the epoch
//     would overflow.
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
	case r.version >= 3 && req.ProducerID >= 0 && req.ProducerEpoch >= 0 && req.ProducerEpoch < math.MaxInt16-1:
		resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
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
