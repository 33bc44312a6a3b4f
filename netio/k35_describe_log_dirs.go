package netio

import (
	"encoding/binary"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeLogDirs, key 35, versions 0-4.
//
//   - One log directory, the broker's data directory: its absolute path,
//     and from v4 its file system's total and usable bytes (-1 when
//     unknown).
//   - Per partition this broker holds a log of (all topics when Topics
//     is null, else those asked for; ones it does not hold are left
//     out, as Kafka does): Size, the bytes of the local log; OffsetLag
//     0 and IsFuture false (no log is ever moved between directories).
//     A tiered partition's entry also carries, from v2 (flexible), the
//     bytes of its segments in the object store in the tagged field
//     RemoteBytesTag (8 bytes, big-endian): ringlog's own, ignored by
//     other clients; `ringlog topic describe` reads it.
//   - DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED from v3
//     (earlier versions have no error field: no directories, as Kafka).
//     A broker answers for its own replicas: clients ask every broker.

// RemoteBytesTag is the tag of a DescribeLogDirs partition entry's field
// holding the partition's bytes in tiered storage.
const RemoteBytesTag = 0x5242

func handleDescribeLogDirs(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDescribeLogDirsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	if !r.clusterAllowed(kmsg.ACLOperationDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		r.failed = true
		r.respond(resp)
		return frameDone
	}
	ld := s.eng.LogDir()
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir, dir.TotalBytes, dir.UsableBytes = ld.Path, ld.TotalBytes, ld.UsableBytes
	add := func(name string, parts []int32) {
		t := s.eng.Topic(name)
		if t == nil {
			return
		}
		rt := kmsg.NewDescribeLogDirsResponseDirTopic()
		rt.Topic = name
		for _, p := range t.Partitions() {
			if parts != nil && !slices.Contains(parts, p.Index) {
				continue
			}
			size, ok := p.LocalBytes()
			if !ok {
				continue
			}
			rp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			rp.Partition, rp.Size = p.Index, size
			if st, tiered := p.RemoteStatus(); tiered {
				rp.UnknownTags.Set(RemoteBytesTag, binary.BigEndian.AppendUint64(nil, uint64(st.Bytes)))
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		if len(rt.Partitions) > 0 {
			dir.Topics = append(dir.Topics, rt)
		}
	}
	if req.Topics == nil {
		for _, t := range s.eng.Topics() {
			add(t.Name, nil)
		}
	} else {
		for _, rt := range req.Topics {
			add(rt.Topic, rt.Partitions)
		}
	}
	resp.Dirs = append(resp.Dirs, dir)
	r.respond(resp)
	return frameDone
}
