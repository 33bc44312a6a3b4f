package netio

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/wal/batch"
)

// Produce, key 0, versions 3-12 served, advertised from 0.
//
//   - Advertised from v0 because librdkafka sends every codec uncompressed
//     unless Produce v0 is in the range; v0-2 requests (message format v0/v1)
//     are answered UNSUPPORTED_FOR_MESSAGE_FORMAT per partition.
//   - Each partition's records may hold several batches; each is validated
//     (length, magic 2, CRC32C, record count vs lastOffsetDelta,
//     max.message.bytes) and a bad one fails its partition only, with
//     CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE or
//     UNSUPPORTED_FOR_MESSAGE_FORMAT, writing nothing of it. CORRUPT_MESSAGE
//     (which clients retry) is for bytes damaged on the way (length or
//     CRC32C); a batch that arrived intact but whose records do not match
//     its record count or do not parse is INVALID_RECORD, as in Kafka.
//   - acks=0 gets no response; when any partition failed, the connection
//     is closed instead (as Kafka does), the only way to tell the producer.
//     acks=1 is answered once the batch is in the log (page cache);
//     acks=-1 once it is fdatasync'ed (group commit), unless write caching
//     is on for the topic or broker. Other values: INVALID_REQUIRED_ACKS.
//   - Unknown topics are created when auto-creation is on. Creating one
//     is disk work, so such a produce leaves the event loop: it runs on
//     the connection's serial goroutine (conn.serial), and so do the
//     produces after it on that connection until it is done, to keep
//     their appends in request order. Off the loop, a produce waits for
//     its shards' room instead of pausing the connection.
//   - An idle writer shard writes an acks=0/1 produce on the event loop
//     itself (engine.AppendRequest.Inline, the direct-write fast path): a
//     write into the page cache, then the response goes out with a
//     non-blocking send, with no handoff to the shard goroutine and back.
//   - Backpressure: if a target writer shard's queue is full the request
//     is not admitted: its frame stays whole in the connection's
//     conn.frame, the connection is paused (conn.roomOrPause), and once the
//     shard drains it resumes and the frame is handled again from the
//     start. What the client sends meanwhile is bounded (holdUnread).
//   - Compacted topics refuse records without a key (INVALID_RECORD).
//   - With the authorizer on, each topic needs WRITE
//     (TOPIC_AUTHORIZATION_FAILED), and an unknown topic is auto-created
//     only for a principal with CREATE on it or on the cluster.
//   - Idempotent batches are checked against the producer's last five
//     batches: retries get their original offsets, gaps
//     OUT_OF_ORDER_SEQUENCE_NUMBER.
//   - Transactional batches must belong to their producer's open
//     transaction, with this partition added (checkTransactional);
//     control batches cannot be produced (INVALID_RECORD).

func handleProduce(s *Server, r *request) frameOutcome {
	// The request lives in the call that answers it: one allocation.
	pc := new(produceCall)
	req := &pc.req
	req.Default()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	c := r.conn
	offLoop := c.serialBusy()
	if !offLoop {
		offLoop = s.producePlan(r, req, pc, s.loopTopic, false, nil)
	}
	if offLoop {
		// A topic must be created (that writes files and may wait for
		// another creation) or a transaction verified with another
		// broker (cluster mode), so it leaves the event loop. Produces behind
		// it on this connection follow it (conn.serial) until it is done,
		// so that appends keep the order of their requests.
		r.resp = r.slot()
		c.serial(func() { s.produceOffLoop(r, req) })
		return frameDone
	}
	// Admission: every target shard must have room, else pause.
	for i := range pc.works {
		if !c.roomOrPause(pc.works[i].p.Shard()) {
			return framePaused
		}
	}
	r.resp = r.slot()
	s.produceAppend(r, req, pc)
	return frameDone
}

// produceWork is one partition's part of a produce: its validated batches
// and, once queued, the append that carries them.
type produceWork struct {
	rp      *kmsg.ProduceResponseTopicPartition
	p       *engine.Partition
	batches [][]byte
	headers []batch.Header
	append  engine.AppendRequest
}

// produceCall is a produce's plan, response and completion count. The
// common produce (one topic, one partition, one batch) needs no other
// allocation for them: the arrays below back its slices.
type produceCall struct {
	req     kmsg.ProduceRequest // the request, when it was decoded into its call
	resp    kmsg.ProduceResponse
	works   []produceWork
	pending atomic.Int32 // works not completed

	oneWork   [1]produceWork
	oneTopic  [1]kmsg.ProduceResponseTopic
	onePart   [1]kmsg.ProduceResponseTopicPartition
	oneBatch  [1][]byte
	oneHeader [1]batch.Header
	oneUsed   bool // oneBatch and oneHeader back a work's slices
}

// batchSlots returns empty slices for a work's batches and headers: the
// call's one-element arrays the first time, nil (allocate) after.
func (pc *produceCall) batchSlots() ([][]byte, []batch.Header) {
	if pc.oneUsed {
		return nil, nil
	}
	pc.oneUsed = true
	return pc.oneBatch[:0], pc.oneHeader[:0]
}

// errCreateOffLoop is loopTopic's answer for a topic that does not exist
// and would be auto-created.
var errCreateOffLoop = errors.New("topic must be created off the event loop")

// loopTopic finds a produce's topic on the event loop, which never creates
// one.
func (s *Server) loopTopic(name string) (*engine.Topic, error) {
	if t := s.eng.Topic(name); t != nil {
		return t, nil
	}
	if s.eng.AutoCreateTopics() {
		return nil, errCreateOffLoop
	}
	return nil, fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name)
}

// producePlan resolves the topics of a produce with topic and validates
// every partition's batches: the response with the partitions that failed
// already answered, and the work for the others. It stops with offLoop
// set when topic says a topic has to be created off the event loop, or
// when a transaction must be verified with another broker and mayWait is
// false.
// failed holds the verifications preverify saw fail, not asked again.
// pc is a new call that the plan fills; after offLoop it is left unused.
func (s *Server) producePlan(r *request, req *kmsg.ProduceRequest, pc *produceCall, topic func(string) (*engine.Topic, error), mayWait bool, failed map[*engine.Partition]error) (offLoop bool) {
	pc.works = pc.oneWork[:0]
	resp := &pc.resp
	resp.Version = req.Version // as req.ResponseKind
	acksOK := req.Acks == -1 || req.Acks == 0 || req.Acks == 1
	if len(req.Topics) == 1 {
		resp.Topics = pc.oneTopic[:]
	} else {
		resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	}
	for i := range req.Topics {
		rt := &req.Topics[i]
		tr := &resp.Topics[i]
		tr.Topic = rt.Topic
		if i == 0 && len(rt.Partitions) == 1 {
			tr.Partitions = pc.onePart[:]
		} else {
			tr.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		}
		var t *engine.Topic
		var terr error
		switch {
		case !acksOK:
		case !r.topicAllowed(kmsg.ACLOperationWrite, rt.Topic):
			terr = kerr.TopicAuthorizationFailed
		case !r.mayCreateTopic(rt.Topic) && s.eng.Topic(rt.Topic) == nil:
			// (mayCreateTopic first: without an authorizer it is true and
			// the topic is looked up once, by topic below)
			// Not auto-created for a principal that may not create it.
			terr = fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, rt.Topic)
		default:
			t, terr = topic(rt.Topic)
			if errors.Is(terr, errCreateOffLoop) {
				return true
			}
		}
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			pr := &tr.Partitions[j]
			pr.Default()
			pr.Partition = rp.Partition
			pr.BaseOffset, pr.LogAppendTime, pr.LogStartOffset = -1, -1, -1
			if !acksOK {
				pr.ErrorCode = kerr.InvalidRequiredAcks.Code
				continue
			}
			if terr != nil {
				pr.ErrorCode = errCode(terr)
				continue
			}
			p := t.Partition(rp.Partition)
			if p == nil {
				pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				continue
			}
			bdst, hdst := pc.batchSlots()
			lim := batch.Limits{MaxBatchBytes: t.Config().MaxMessageBytes(), MaxUncompressedBytes: s.cfg.MaxUncompressedBatchBytes, RequireKeys: t.Config().Compact()}
			batches, headers, err := validateRecords(rp.Records, lim, r.version, bdst, hdst)
			if err == nil {
				err = s.checkTransactional(r, req, p, headers, mayWait, failed[p])
				if errors.Is(err, engine.ErrVerifyOffLoop) {
					return true
				}
			}
			if err != nil {
				pr.ErrorCode = errCode(err)
				msg := err.Error()
				pr.ErrorMessage = &msg
				s.logger.Debug("rejected produce batch", "partition", p.String(), "err", err, "client", clientName(r))
				continue
			}
			pc.works = append(pc.works, produceWork{rp: pr, p: p, batches: batches, headers: headers})
		}
	}
	return false
}

// produceOffLoop is a produce that left the event loop (conn.serial): it
// creates its topics as needed, waits for its shards' room instead of
// pausing the connection, and appends.
func (s *Server) produceOffLoop(r *request, req *kmsg.ProduceRequest) {
	failed := s.preverify(r, req)
	pc := new(produceCall)
	s.producePlan(r, req, pc, s.eng.GetOrCreateTopic, true, failed)
	for i := range pc.works {
		waitRoom(pc.works[i].p.Shard())
	}
	s.produceAppend(r, req, pc)
}

// preverify verifies, all at once, the transactions of the partitions of
// a produce that need it (cluster mode), so that a produce to several
// partitions waits for one round trip to the coordinator, not one per
// partition; producePlan then finds them verified. It returns the
// verifications that failed, by partition.
func (s *Server) preverify(r *request, req *kmsg.ProduceRequest) map[*engine.Partition]error {
	if s.cfg.Cluster == nil || req.TransactionID == nil || !r.txnIDAllowed(kmsg.ACLOperationWrite, *req.TransactionID) {
		return nil
	}
	var mu sync.Mutex
	failed := map[*engine.Partition]error{}
	var wg sync.WaitGroup
	for i := range req.Topics {
		rt := &req.Topics[i]
		t := s.eng.Topic(rt.Topic)
		if t == nil || !r.topicAllowed(kmsg.ACLOperationWrite, rt.Topic) {
			continue
		}
		for j := range rt.Partitions {
			p := t.Partition(rt.Partitions[j].Partition)
			h, err := batch.ParseHeader(rt.Partitions[j].Records)
			if p == nil || err != nil || !h.Transactional() || h.Control() {
				continue
			}
			if errors.Is(s.eng.VerifyTxnProduce(p, *req.TransactionID, h.ProducerID, h.ProducerEpoch, false), engine.ErrVerifyOffLoop) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := s.eng.VerifyTxnProduce(p, *req.TransactionID, h.ProducerID, h.ProducerEpoch, true); err != nil {
						mu.Lock()
						failed[p] = err
						mu.Unlock()
					}
				}()
			}
		}
	}
	wg.Wait()
	return failed
}

// waitRoom waits until sh has room for appends (off the event loop only;
// the loop pauses the connection instead). One wait is enough: an append
// admitted at the moment room appears may overshoot the bound, as the
// event loops' may.
func waitRoom(sh *engine.Shard) {
	if sh.HasRoom() {
		return
	}
	room := make(chan struct{})
	sh.OnRoom(func() { close(room) })
	<-room
}

// produceAppend queues the works on their shards and answers the produce
// (into r.resp) once every one completed.
func (s *Server) produceAppend(r *request, req *kmsg.ProduceRequest, pc *produceCall) {
	if len(pc.works) == 0 {
		s.produceFinish(r, req, &pc.resp)
		return
	}
	pc.pending.Store(int32(len(pc.works)))
	for i := range pc.works {
		w := &pc.works[i]
		n := 0
		for _, b := range w.batches {
			n += len(b)
		}
		w.append = engine.AppendRequest{
			Partition: w.p, Batches: w.batches, Headers: w.headers, Acks: req.Acks, Bytes: n,
			Timeout: time.Duration(req.TimeoutMillis) * time.Millisecond,
			// Done is ready to run before Append returns (pending
			// counts every work already, the slot exists), and holds
			// no lock: an idle shard writes it on this goroutine —
			// for a small request only. A large one (many partitions'
			// batches) goes to the shards, which copy it while this
			// loop reads the next request: inline, one connection's
			// produce would be read, checked and written on one core.
			Inline: len(r.frame) <= engine.InlineMaxBytes,
			Done: func(res engine.AppendResult) {
				w.rp.ErrorCode = errCode(res.Err)
				if res.Err != nil {
					msg := res.Err.Error()
					w.rp.ErrorMessage = &msg
				} else {
					w.rp.BaseOffset = res.BaseOffset
				}
				w.rp.LogAppendTime = res.LogAppendTime
				w.rp.LogStartOffset = res.LogStartOffset
				if pc.pending.Add(-1) == 0 {
					s.produceFinish(r, req, &pc.resp)
				}
			},
		}
		w.p.Shard().Append(&w.append)
	}
}

// produceFinish answers a produce whose partitions are all done: with
// resp, or for acks=0 by closing the connection when any failed.
func (s *Server) produceFinish(r *request, req *kmsg.ProduceRequest, resp *kmsg.ProduceResponse) {
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if resp.Topics[i].Partitions[j].ErrorCode != 0 {
				r.failed = true
			}
		}
	}
	if req.Acks == 0 {
		c, failed := r.conn, r.failed
		c.skip(r.resp, nil)
		r.finish()
		if failed {
			// No response can carry the error: close the
			// connection, as Kafka does, so the producer notices
			// and refreshes its metadata.
			s.logger.Debug("closing connection: an acks=0 produce failed", "remote", c.remote, "client", clientName(r))
			c.gc.Close()
		}
		return
	}
	r.respond(resp)
}

// checkTransactional refuses transactional batches that are not part of
// their producer's open transaction here (the coordinator's view, asked
// across brokers in cluster mode: engine.VerifyTxnProduce): a partition
// not added is INVALID_TXN_STATE, a fenced epoch INVALID_PRODUCER_EPOCH,
// a coordinator that cannot answer now NOT_ENOUGH_REPLICAS (retriable, as
// Kafka answers). They need the request's transactional id and WRITE on
// it. Without mayWait a verification that needs another broker is
// engine.ErrVerifyOffLoop. failed, when set, is the answer of a
// verification this request already made (preverify).
func (s *Server) checkTransactional(r *request, req *kmsg.ProduceRequest, p *engine.Partition, headers []batch.Header, mayWait bool, failed error) error {
	for i := range headers {
		h := &headers[i]
		if !h.Transactional() {
			continue
		}
		switch {
		case req.TransactionID == nil:
			return fmt.Errorf("%w: a transactional batch in a produce without a transactional id", kerr.InvalidRecord)
		case !r.txnIDAllowed(kmsg.ACLOperationWrite, *req.TransactionID):
			return kerr.TransactionalIDAuthorizationFailed
		}
		err := failed
		if err == nil {
			err = s.eng.VerifyTxnProduce(p, *req.TransactionID, h.ProducerID, h.ProducerEpoch, mayWait)
		}
		switch {
		case err == nil:
		case errors.Is(err, kerr.NotCoordinator), errors.Is(err, kerr.CoordinatorNotAvailable), errors.Is(err, kerr.CoordinatorLoadInProgress):
			return fmt.Errorf("%w: the transaction coordinator cannot verify the transaction now: %w", kerr.NotEnoughReplicas, err)
		default:
			return err
		}
	}
	return nil
}

// validateRecords splits a partition's records into batches and validates
// each one, appending to batchesDst and headersDst (either may be nil).
func validateRecords(records []byte, lim batch.Limits, version int16, batchesDst [][]byte, headersDst []batch.Header) ([][]byte, []batch.Header, error) {
	if version < 3 {
		// Produce v0-2 carry message sets (magic 0/1), never record
		// batches; reached only if the dispatcher lets v0-2 through.
		return nil, nil, fmt.Errorf("%w: produce v%d carries message format v0/v1; only record batches (magic 2, produce v3+) are stored", kerr.UnsupportedForMessageFormat, version)
	}
	if len(records) == 0 {
		return nil, nil, fmt.Errorf("%w: no records", kerr.InvalidRecord)
	}
	batches, err := batch.Split(records, batchesDst)
	if err != nil && len(records) >= 17 && records[16] != batch.Magic {
		err = &batch.Error{Class: batch.ClassUnsupported, Msg: fmt.Sprintf("magic %d", records[16])}
	}
	if err != nil {
		return nil, nil, batchErr(err)
	}
	headers := headersDst[:0]
	if cap(headers) < len(batches) {
		headers = make([]batch.Header, 0, len(batches))
	}
	headers = headers[:len(batches)]
	for i, b := range batches {
		h, err := batch.Validate(b, lim)
		if err != nil {
			return nil, nil, batchErr(err)
		}
		headers[i] = h
	}
	return batches, headers, nil
}

// batchErr maps a batch validation error to its Kafka error.
func batchErr(err error) error {
	var code *kerr.Error
	switch batch.ClassOf(err) {
	case batch.ClassCorrupt:
		code = kerr.CorruptMessage
	case batch.ClassInvalid:
		code = kerr.InvalidRecord
	case batch.ClassTooLarge:
		code = kerr.MessageTooLarge
	case batch.ClassUnsupported:
		code = kerr.UnsupportedForMessageFormat
	default:
		return err
	}
	if errors.Is(err, code) {
		return err
	}
	return fmt.Errorf("%w: %w", code, err)
}
