package netio

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// ListOffsets, key 2, versions 0-10.
//
//   - Timestamp -1: the high watermark, or with isolation level
//     read_committed (v2+) the last stable offset; -2: the log start offset; -3 (v7+): the record with
//     the largest timestamp; -4 (v8+, earliest local): the log start
//     offset of the local log; -5 (v9+, latest tiered): the last offset
//     in tiered storage, -1 with none. -2 is the first offset anywhere,
//     the object store's when it holds older data.
//   - A timestamp >= 0 finds the first record at or after it through the
//     time index and, inside the batch, the records (decompressed if
//     needed), in tiered storage first (waiting for the store: ListOffsets
//     runs off the event loop); when there is none, offset and timestamp
//     are -1.
//   - v0 answers in the old format (a list of at most MaxNumOffsets).
//   - CurrentLeaderEpoch (v4+) above ours gets UNKNOWN_LEADER_EPOCH.

func handleListOffsets(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrListOffsetsRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	// One bound on the waits for the object store, whatever the number
	// of partitions asked.
	ctx, cancel := context.WithTimeout(context.Background(), remoteLookupTimeout)
	defer cancel()
	for _, rt := range req.Topics {
		tr := kmsg.ListOffsetsResponseTopic{Topic: rt.Topic}
		t := s.eng.Topic(rt.Topic)
		for _, rp := range rt.Partitions {
			pr := kmsg.NewListOffsetsResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.Timestamp, pr.Offset, pr.LeaderEpoch = -1, -1, -1
			if r.topicAllowed(kmsg.ACLOperationDescribe, rt.Topic) {
				s.listOffset(ctx, r, t, &rp, &pr, req.IsolationLevel)
			} else {
				pr.ErrorCode = kerr.TopicAuthorizationFailed.Code
			}
			if pr.ErrorCode != 0 {
				r.failed = true
			}
			if r.version == 0 {
				if pr.ErrorCode == 0 && rp.MaxNumOffsets > 0 && pr.Offset >= 0 {
					pr.OldStyleOffsets = []int64{pr.Offset}
				} else {
					pr.OldStyleOffsets = []int64{}
				}
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	r.respond(resp)
	return frameDone
}

func (s *Server) listOffset(ctx context.Context, r *request, t *engine.Topic, rp *kmsg.ListOffsetsRequestTopicPartition, pr *kmsg.ListOffsetsResponseTopicPartition, isolation int8) {
	if t == nil {
		pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
		return
	}
	p := t.Partition(rp.Partition)
	if p == nil {
		pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
		return
	}
	if err := p.CheckLeaderEpoch(rp.CurrentLeaderEpoch); err != nil {
		pr.ErrorCode = errCode(err)
		return
	}
	l, err := p.Log()
	if err != nil {
		pr.ErrorCode = errCode(err)
		return
	}
	found := func(off, ts int64) {
		pr.Offset, pr.Timestamp, pr.LeaderEpoch = off, ts, p.LeaderEpoch()
	}
	switch ts := rp.Timestamp; {
	case ts == -1:
		if !p.LeaderReady() {
			pr.ErrorCode = kerr.OffsetNotAvailable.Code
			return
		}
		if r.version >= 2 && isolation == 1 {
			found(p.LastStableOffset(), -1)
		} else {
			found(p.HighWatermark(), -1)
		}
	case ts == -2:
		found(p.LogStartOffset(), -1)
	case ts == -4 && r.version >= 8:
		found(l.StartOffset(), -1)
	case ts == -3 && r.version >= 7:
		got, ok, err := l.MaxTimestamp()
		if rt := p.RemoteMaxTimestamp(); err == nil && rt >= 0 && (!ok || rt > got.Timestamp) {
			got, ok, err = p.RemoteOffsetForTime(ctx, rt)
		}
		if err != nil {
			pr.ErrorCode = errCode(err)
			return
		}
		if ok {
			found(got.Offset, got.Timestamp)
		}
	case ts == -5 && r.version >= 9:
		if end, ok := p.RemoteEnd(); ok {
			found(end-1, -1)
		} else {
			found(-1, -1)
		}
	case ts >= 0:
		got, ok, err := p.RemoteOffsetForTime(ctx, ts)
		if err == nil && !ok {
			got, ok, err = l.OffsetForTime(ts)
		}
		if err != nil {
			pr.ErrorCode = errCode(err)
			return
		}
		if ok {
			found(got.Offset, got.Timestamp)
		}
	default:
		pr.ErrorCode = kerr.InvalidRequest.Code
	}
}

// remoteLookupTimeout bounds a ListOffsets request's waits for the
// object store.
const remoteLookupTimeout = 30 * time.Second
