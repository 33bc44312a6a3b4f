package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// OffsetFetch, key 9, versions 0-9.
//
//   - The committed offset, leader epoch and metadata of each partition
//     asked for (offset -1 when none); null topics (v2+) means every
//     partition the group committed.
//   - RequireStable (v7+): a partition whose offset an open transaction
//     committed (TxnOffsetCommit, not yet ended) answers
//     UNSTABLE_OFFSET_COMMIT, which the client retries, so a consumer
//     taking over never starts from an offset the transaction is about to
//     move (KIP-447). Without it the last visible commit is returned.
//     franz-go and librdkafka send it.
//   - The committed leader epoch is returned: OffsetForLeaderEpoch is
//     exact here, so clients can validate it.
//   - v8 fetches several groups at once.
//   - v9 names the member and its epoch (KIP-848): for a consumer-protocol
//     group the member must exist (UNKNOWN_MEMBER_ID) with that epoch
//     (STALE_MEMBER_EPOCH), so a fenced member does not resume from
//     offsets it no longer owns; without a member id nothing is checked.

func handleOffsetFetch(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrOffsetFetchRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	co := s.eng.Coordinator()
	if r.version >= 8 {
		for _, rg := range req.Groups {
			var topics map[string][]int32
			if rg.Topics != nil {
				topics = map[string][]int32{}
				for _, t := range rg.Topics {
					topics[t.Topic] = append(topics[t.Topic], t.Partitions...)
				}
			}
			got, err := r.fetchOffsets(co, rg.Group, topics, rg.MemberID, rg.MemberEpoch)
			g := kmsg.NewOffsetFetchResponseGroup()
			g.Group, g.ErrorCode = rg.Group, errCode(err)
			r.failed = r.failed || err != nil
			byTopic := map[string]int{}
			for _, f := range got {
				i, ok := byTopic[f.Topic]
				if !ok {
					i = len(g.Topics)
					byTopic[f.Topic] = i
					g.Topics = append(g.Topics, kmsg.OffsetFetchResponseGroupTopic{Topic: f.Topic})
				}
				p := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				p.Partition = f.Partition
				p.Offset, p.LeaderEpoch, p.Metadata = fetchedFields(f)
				if f.Unstable && req.RequireStable {
					p.ErrorCode, p.Offset = kerr.UnstableOffsetCommit.Code, -1
					r.failed = true
				}
				g.Topics[i].Partitions = append(g.Topics[i].Partitions, p)
			}
			resp.Groups = append(resp.Groups, g)
		}
		r.respond(resp)
		return frameDone
	}
	var topics map[string][]int32
	if req.Topics != nil || r.version < 2 {
		topics = map[string][]int32{}
		for _, t := range req.Topics {
			topics[t.Topic] = append(topics[t.Topic], t.Partitions...)
		}
	}
	got, err := r.fetchOffsets(co, req.Group, topics, nil, -1)
	resp.ErrorCode = errCode(err)
	r.failed = err != nil
	byTopic := map[string]int{}
	for _, f := range got {
		i, ok := byTopic[f.Topic]
		if !ok {
			i = len(resp.Topics)
			byTopic[f.Topic] = i
			resp.Topics = append(resp.Topics, kmsg.OffsetFetchResponseTopic{Topic: f.Topic})
		}
		p := kmsg.NewOffsetFetchResponseTopicPartition()
		p.Partition = f.Partition
		p.Offset, p.LeaderEpoch, p.Metadata = fetchedFields(f)
		if f.Unstable && req.RequireStable && r.version >= 7 {
			p.ErrorCode, p.Offset = kerr.UnstableOffsetCommit.Code, -1
			r.failed = true
		}
		if err != nil && r.version < 2 {
			p.ErrorCode = resp.ErrorCode
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, p)
	}
	r.respond(resp)
	return frameDone
}

// fetchOffsets is FetchOffsets behind the ACLs: DESCRIBE on the group
// (else GROUP_AUTHORIZATION_FAILED), and only the topics the principal
// may DESCRIBE (the others are left out, as if nothing were committed).
func (r *request) fetchOffsets(co *engine.Coordinator, group string, topics map[string][]int32, member *string, epoch int32) ([]engine.FetchedOffset, error) {
	if !r.groupAllowed(kmsg.ACLOperationDescribe, group) {
		return nil, kerr.GroupAuthorizationFailed
	}
	if err := co.CheckFetchMember(group, member, epoch); err != nil {
		return nil, err
	}
	got, err := co.FetchOffsets(group, topics)
	if r.conn.srv.cfg.Security.Authorizer == nil {
		return got, err
	}
	kept := got[:0]
	for _, f := range got {
		if r.topicAllowed(kmsg.ACLOperationDescribe, f.Topic) {
			kept = append(kept, f)
		}
	}
	return kept, err
}

func fetchedFields(f engine.FetchedOffset) (int64, int32, *string) {
	if !f.Found {
		empty := ""
		return -1, -1, &empty
	}
	md := f.Metadata
	return f.Offset, f.LeaderEpoch, &md
}
