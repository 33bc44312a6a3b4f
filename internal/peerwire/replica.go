package peerwire

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/bytopic"
	"github.com/ringlog/ringlog/internal/kwire"
	"github.com/ringlog/ringlog/internal/peer"
)

// Versions of the replica fetchers' requests.
const (
	replicaFetchVersion = 12
	epochQueryVersion   = 3
)

var _ peer.Replicas = (*Client)(nil)

// DialReplica opens a replica fetcher's connection to the leader at addr.
func (c *Client) DialReplica(ctx context.Context, addr string) (peer.ReplicaConn, error) {
	conn, err := c.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return replicaConn{conn}, nil
}

// replicaConn carries a fetcher's Fetch and OffsetForLeaderEpoch
// requests on its own connection.
type replicaConn struct{ conn *kwire.Conn }

func (rc replicaConn) Close() error { return rc.conn.Close() }

// Fetch sends a Fetch (v12, no session) as replica f.ReplicaID.
func (rc replicaConn) Fetch(ctx context.Context, f peer.ReplicaFetch) ([]peer.Fetched, error) {
	req := kmsg.NewPtrFetchRequest()
	req.Version = replicaFetchVersion
	req.ReplicaID = f.ReplicaID
	req.MaxWaitMillis = int32(f.MaxWait / time.Millisecond)
	req.MinBytes = 1
	req.MaxBytes = f.MaxBytes
	req.SessionEpoch = -1
	byTopic := map[string]int{}
	for _, p := range f.Partitions {
		i := bytopic.Index(byTopic, &req.Topics, p.Topic, func(name string) kmsg.FetchRequestTopic {
			t := kmsg.NewFetchRequestTopic()
			t.Topic = name
			return t
		})
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.FetchOffset = p.Partition, p.LeaderEpoch, p.Offset
		rp.LastFetchedEpoch, rp.LogStartOffset, rp.PartitionMaxBytes = -1, -1, f.PartitionMaxBytes
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	raw, err := rc.conn.Call(ctx, req)
	if err != nil {
		return nil, err
	}
	resp := raw.(*kmsg.FetchResponse)
	if err := codeErr(resp.ErrorCode, nil); err != nil {
		return nil, err
	}
	var out []peer.Fetched
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			out = append(out, peer.Fetched{Topic: rt.Topic, Partition: rp.Partition, Err: codeErr(rp.ErrorCode, nil),
				HighWatermark: rp.HighWatermark, LogStart: rp.LogStartOffset, Records: rp.RecordBatches})
		}
	}
	return out, nil
}

// EpochEnds sends an OffsetForLeaderEpoch (v3) as replica replicaID.
func (rc replicaConn) EpochEnds(ctx context.Context, replicaID int32, qs []peer.EpochQuery) ([]peer.EpochEnd, error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.Version = epochQueryVersion
	req.ReplicaID = replicaID
	byTopic := map[string]int{}
	for _, q := range qs {
		i := bytopic.Index(byTopic, &req.Topics, q.Topic, func(name string) kmsg.OffsetForLeaderEpochRequestTopic {
			t := kmsg.NewOffsetForLeaderEpochRequestTopic()
			t.Topic = name
			return t
		})
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = q.Partition, q.CurrentLeaderEpoch, q.LeaderEpoch
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	raw, err := rc.conn.Call(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []peer.EpochEnd
	for _, rt := range raw.(*kmsg.OffsetForLeaderEpochResponse).Topics {
		for _, rp := range rt.Partitions {
			out = append(out, peer.EpochEnd{Topic: rt.Topic, Partition: rp.Partition, Err: codeErr(rp.ErrorCode, nil),
				LeaderEpoch: rp.LeaderEpoch, EndOffset: rp.EndOffset})
		}
	}
	return out, nil
}
