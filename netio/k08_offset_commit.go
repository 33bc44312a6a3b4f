package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// OffsetCommit, key 8, versions 0-9.
//
//   - Commits are written to __consumer_offsets and fdatasync'ed before the
//     answer (group commit makes that cheap), and replayed at start.
//   - A member commits with its id and generation (UNKNOWN_MEMBER_ID,
//     ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS while the generation forms);
//     generation -1 with no member id is a simple commit (kafka-go,
//     sarama's group-less offset manager), allowed while the group has no
//     members.
//   - The committed leader epoch (v6+) and metadata (up to 4096 bytes, else
//     OFFSET_METADATA_TOO_LARGE) are kept; retention time (v2-4) is
//     ignored: offsets stay until the group is deleted.
//   - Unknown partitions get UNKNOWN_TOPIC_OR_PARTITION.

func handleOffsetCommit(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrOffsetCommitRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	// READ on the group, then on each topic: a denied topic's
	// partitions are answered TOPIC_AUTHORIZATION_FAILED, not committed.
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
	if r.version == 0 {
		req.Generation, req.MemberID = -1, ""
	}
	var errs []error
	var err error
	if r.groupAllowed(kmsg.ACLOperationRead, req.Group) {
		errs, err = s.eng.Coordinator().CommitOffsets(req.Group, req.MemberID, req.InstanceID, req.Generation, commits)
	} else {
		err = kerr.GroupAuthorizationFailed
	}
	out := partitionOutcomes{err: err, errs: errs, denied: denied}
	for _, t := range req.Topics {
		rt := kmsg.OffsetCommitResponseTopic{Topic: t.Topic}
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
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
