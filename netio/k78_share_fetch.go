package netio

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// ShareFetch, key 78, versions 1-2, and ShareAcknowledge, key 79,
// versions 1-2 (KIP-932 share groups).
//
//   - A share consumer fetches from the partition's leader; each record it
//     gets is acquired by its member until the group's lock duration
//     (share.record.lock.duration.ms, answered as
//     AcquisitionLockTimeoutMillis) passes, then available again. Records
//     go out as whole batches; AcquiredRecords says which offsets of them
//     are this member's, with their delivery counts.
//   - Acknowledgements (accept, release, reject, gap; renew in v2) ride on
//     the next ShareFetch or go alone in ShareAcknowledge; each is applied
//     and made durable (__share_group_state) before it is answered, and
//     every partition that carried one is in the answer.
//   - Share sessions (sharesession.go): epoch 0 opens, a positive epoch
//     continues (the request names only what changed), -1 closes and
//     releases the member's other records.
//   - MaxRecords bounds what a fetch acquires (whole batches, or exactly
//     with ShareAcquireMode 1); MaxBytes what it reads. With nothing to
//     acquire, the fetch waits for new records up to MaxWaitMillis.
//   - Authorization: READ on the group and on each topic.
//   - Served on a single broker only for now: in cluster mode the share
//     state would have to move between brokers (not built).

// maxShareWait caps a ShareFetch's long poll, whatever MaxWaitMillis asks.
const maxShareWait = 30 * time.Second

// shareRequest is what ShareFetch and ShareAcknowledge share: the group
// and member, the session, and the partitions' acknowledgements.
type shareRequest struct {
	s      *Server
	r      *request
	key    shareSessionKey
	ss     *shareSession
	owner  string // engine.Owner of the member's session
	epoch  int32
	acks   map[sharePartKey][]engine.ShareAck
	acked  []sharePartKey // in request order
	ackErr map[sharePartKey]error
}

// begin validates the group and member and opens or continues the
// session; the error is the request's top-level answer.
func (q *shareRequest) begin(group, member *string, epoch int32) error {
	if group == nil || *group == "" {
		return fmt.Errorf("%w: a share request needs a group id", kerr.InvalidRequest)
	}
	if member == nil || *member == "" || len(*member) > 64 {
		return fmt.Errorf("%w: a share request needs a member id of at most 64 characters", kerr.InvalidRequest)
	}
	if !q.r.groupAllowed(kmsg.ACLOperationRead, *group) {
		return kerr.GroupAuthorizationFailed
	}
	if epoch != -1 {
		if err := q.s.eng.Coordinator().CheckShareMember(*group, *member, epoch == 0); err != nil {
			return err
		}
	}
	q.key, q.epoch = shareSessionKey{*group, *member}, epoch
	ss, err := q.s.shareSessions.begin(q.r.conn, q.key, epoch)
	if err != nil {
		return err
	}
	q.ss, q.owner = ss, engine.Owner(*member, ss.id)
	return nil
}

// addAcks collects one partition's acknowledgement batches.
func (q *shareRequest) addAcks(topic [16]byte, partition int32, batches []engine.ShareAck) {
	if len(batches) == 0 {
		return
	}
	k := sharePartKey{topic, partition}
	if q.acks == nil {
		q.acks, q.ackErr = map[sharePartKey][]engine.ShareAck{}, map[sharePartKey]error{}
	}
	if _, ok := q.acks[k]; !ok {
		q.acked = append(q.acked, k)
	}
	q.acks[k] = append(q.acks[k], batches...)
}

// partition resolves a share partition, checking READ on its topic.
func (q *shareRequest) partition(k sharePartKey) (*engine.Partition, error) {
	t := q.s.eng.TopicByID(engine.TopicID(k.topic))
	if t == nil || t.Deleted() {
		return nil, fmt.Errorf("%w: no topic with that id", kerr.UnknownTopicID)
	}
	if !q.r.topicAllowed(kmsg.ACLOperationRead, t.Name) {
		return nil, kerr.TopicAuthorizationFailed
	}
	p := t.Partition(k.partition)
	if p == nil {
		return nil, fmt.Errorf("%w: %s has no partition %d", kerr.UnknownTopicOrPartition, t.Name, k.partition)
	}
	return p, nil
}

// applyAcks applies the collected acknowledgements (renew only when
// renew is set, as IsRenewAck says).
func (q *shareRequest) applyAcks(renew bool) {
	for _, k := range q.acked {
		q.ackErr[k] = q.applyPartAcks(k, q.acks[k], renew)
	}
}

func (q *shareRequest) applyPartAcks(k sharePartKey, acks []engine.ShareAck, renew bool) error {
	if q.epoch == 0 {
		return fmt.Errorf("%w: acknowledgements need an open share session (epoch above 0)", kerr.InvalidRequest)
	}
	last := int64(-1)
	for _, a := range acks {
		if a.First <= last {
			return fmt.Errorf("%w: acknowledgement batches out of order or overlapping at %d", kerr.InvalidRequest, a.First)
		}
		last = a.Last
		for _, t := range a.Types {
			if t == 4 && !renew {
				return fmt.Errorf("%w: a renew acknowledgement needs IsRenewAck", kerr.InvalidRequest)
			}
		}
	}
	p, err := q.partition(k)
	if err != nil {
		return err
	}
	return q.s.eng.Shares().Acknowledge(q.r.arrived, q.key.group, q.owner, p, acks)
}

// end finishes the session's part of the request: a closing request
// releases the session's records and removes it; so does a request
// whose session went away meanwhile (its connection closed during a
// long poll: what it acquired since must not stay locked to nobody).
func (q *shareRequest) end(ok bool) {
	if q.ss == nil {
		return
	}
	closing := q.epoch == -1
	live := q.s.shareSessions.live(q.key, q.ss)
	q.s.shareSessions.done(q.key, q.ss, ok, closing)
	if closing || !live {
		q.s.eng.Shares().ReleaseOwner(q.key.group, q.owner)
	}
}

// releaseShareSessions releases the records of the share sessions c
// held (the connection closed).
func (s *Server) releaseShareSessions(c *conn) {
	closed := s.shareSessions.closeConn(c)
	if len(closed) == 0 {
		return
	}
	go func() { // Release writes the share state: not on the event loop
		for _, cs := range closed {
			s.eng.Shares().ReleaseOwner(cs.key.group, engine.Owner(cs.key.member, cs.id))
		}
	}()
}

func shareAcks[B any](batches []B, get func(B) (int64, int64, []int8)) []engine.ShareAck {
	out := make([]engine.ShareAck, 0, len(batches))
	for _, b := range batches {
		first, last, types := get(b)
		out = append(out, engine.ShareAck{First: first, Last: last, Types: types})
	}
	return out
}

func handleShareFetch(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrShareFetchRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
	q := &shareRequest{s: s, r: r}
	if err := q.begin(req.GroupID, req.MemberID, req.ShareSessionEpoch); err != nil {
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		r.failed = true
		r.respond(resp)
		return frameDone
	}
	resp.AcquisitionLockTimeoutMillis = s.eng.Shares().LockMillis(q.key.group)
	parts := map[sharePartKey]*kmsg.ShareFetchResponseTopicPartition{}
	var order []sharePartKey
	out := func(k sharePartKey) *kmsg.ShareFetchResponseTopicPartition {
		if rp := parts[k]; rp != nil {
			return rp
		}
		rp := new(kmsg.ShareFetchResponseTopicPartition)
		*rp = kmsg.NewShareFetchResponseTopicPartition()
		rp.Partition = k.partition
		rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
		parts[k] = rp
		order = append(order, k)
		return rp
	}
	forgotten := map[sharePartKey]bool{}
	for _, t := range req.ForgottenTopicsData {
		for _, p := range t.Partitions {
			forgotten[sharePartKey{t.TopicID, p}] = true
		}
	}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			k := sharePartKey{t.TopicID, p.Partition}
			if q.epoch != -1 {
				if _, err := q.partition(k); err != nil {
					rp := out(k) // not kept in the session: answered once
					rp.ErrorCode, rp.ErrorMessage = errCode(err), errMessage(err)
					r.failed = true
				} else {
					q.ss.add(k)
				}
			}
			q.addAcks(t.TopicID, p.Partition, shareAcks(p.AcknowledgementBatches, func(b kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) (int64, int64, []int8) {
				return b.FirstOffset, b.LastOffset, b.AcknowledgeTypes
			}))
		}
	}
	q.applyAcks(req.Version >= 2 && req.IsRenewAck)
	for k := range forgotten {
		q.ss.forget(k)
	}
	for _, k := range q.acked { // every partition that carried acknowledgements is answered
		if err := q.ackErr[k]; err != nil {
			rp := out(k)
			rp.AcknowledgeErrorCode, rp.AcknowledgeErrorMessage = errCode(err), errMessage(err)
			r.failed = true
		} else {
			out(k)
		}
	}
	// The fetch itself (not when closing, nor renewing only).
	if q.epoch != -1 && !(req.Version >= 2 && req.IsRenewAck) {
		q.fetch(req, out)
	}
	topics := map[[16]byte]int{}
	for _, k := range order {
		i, ok := topics[k.topic]
		if !ok {
			rt := kmsg.NewShareFetchResponseTopic()
			rt.TopicID = k.topic
			resp.Topics = append(resp.Topics, rt)
			i = len(resp.Topics) - 1
			topics[k.topic] = i
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, *parts[k])
	}
	q.end(true)
	r.respond(resp)
	return frameDone
}

// fetch acquires records of the session's partitions into the response,
// waiting up to MaxWaitMillis for new records when none could be
// acquired. It reports whether any were.
func (q *shareRequest) fetch(req *kmsg.ShareFetchRequest, out func(sharePartKey) *kmsg.ShareFetchResponseTopicPartition) bool {
	maxBytes := int(req.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = 1
	}
	maxRecords := int(req.MaxRecords)
	strict := req.Version >= 2 && req.ShareAcquireMode == 1
	wait := min(time.Duration(max(req.MaxWaitMillis, 0))*time.Millisecond, maxShareWait)
	deadline := time.Now().Add(wait)
	var waiter *engine.Waiter
	var watched []*engine.Partition
	defer func() {
		for _, p := range watched {
			p.Unwatch(waiter)
		}
	}()
	for {
		got := false
		for _, k := range q.ss.order {
			p, err := q.partition(k)
			if err == nil {
				var recs []byte
				var acq []engine.ShareAcquisition
				recs, acq, err = q.s.eng.Shares().Fetch(q.r.arrived, q.key.group, q.owner, p, maxBytes, maxRecords, strict)
				if err == nil && len(acq) > 0 {
					rp := out(k)
					rp.Records = recs
					rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = q.s.eng.NodeID(), p.LeaderEpoch()
					for _, a := range acq {
						ar := kmsg.NewShareFetchResponseTopicPartitionAcquiredRecord()
						ar.FirstOffset, ar.LastOffset, ar.DeliveryCount = a.First, a.Last, a.DeliveryCount
						rp.AcquiredRecords = append(rp.AcquiredRecords, ar)
						maxRecords -= int(a.Last - a.First + 1)
					}
					maxBytes -= len(recs)
					got = true
					if maxBytes <= 0 || (req.MaxRecords > 0 && maxRecords <= 0) {
						return true
					}
					if maxRecords <= 0 {
						maxRecords = int(req.MaxRecords)
					}
				}
			}
			if err != nil {
				rp := out(k)
				rp.ErrorCode, rp.ErrorMessage = errCode(err), errMessage(err)
				if errors.Is(err, kerr.NotLeaderForPartition) {
					q.r.failed = true
				}
			}
		}
		if got || len(q.ss.order) == 0 || !time.Now().Before(deadline) {
			return got
		}
		if waiter == nil {
			waiter = engine.NewWaiter()
			for _, k := range q.ss.order {
				if p, err := q.partition(k); err == nil {
					p.Watch(waiter)
					watched = append(watched, p)
				}
			}
			continue // look again: a record may have come before the watch
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-waiter.C:
		case <-t.C:
		case <-q.s.stopped:
		}
		t.Stop()
	}
}

func handleShareAcknowledge(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrShareAcknowledgeRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
	q := &shareRequest{s: s, r: r}
	var err error
	if req.ShareSessionEpoch == 0 { // checked first: the open session stays
		err = fmt.Errorf("%w: ShareAcknowledge needs an open share session (epoch above 0, or -1 to close)", kerr.InvalidShareSessionEpoch)
	} else {
		err = q.begin(req.GroupID, req.MemberID, req.ShareSessionEpoch)
	}
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		r.failed = true
		r.respond(resp)
		return frameDone
	}
	resp.AcquisitionLockTimeoutMillis = s.eng.Shares().LockMillis(q.key.group)
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			q.addAcks(t.TopicID, p.Partition, shareAcks(p.AcknowledgementBatches, func(b kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) (int64, int64, []int8) {
				return b.FirstOffset, b.LastOffset, b.AcknowledgeTypes
			}))
		}
	}
	q.applyAcks(req.Version >= 2 && req.IsRenewAck)
	topics := map[[16]byte]int{}
	for _, k := range q.acked {
		i, ok := topics[k.topic]
		if !ok {
			rt := kmsg.NewShareAcknowledgeResponseTopic()
			rt.TopicID = k.topic
			resp.Topics = append(resp.Topics, rt)
			i = len(resp.Topics) - 1
			topics[k.topic] = i
		}
		rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
		rp.Partition = k.partition
		rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
		if err := q.ackErr[k]; err != nil {
			rp.ErrorCode, rp.ErrorMessage = errCode(err), errMessage(err)
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
	}
	q.end(true)
	r.respond(resp)
	return frameDone
}
