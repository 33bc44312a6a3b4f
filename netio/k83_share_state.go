package netio

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/sharegroup"
)

// InitializeShareGroupState (83), ReadShareGroupState (84),
// WriteShareGroupState (85) and DeleteShareGroupState (86), version 0
// (85: 0-1): the share coordinator's side, cluster mode only, between
// brokers (never advertised).
//
//   - A share-partition leader reads a state when it starts serving a
//     share-partition and writes every change before it answers an
//     acknowledgement; a group coordinator resets (Initialize, the next
//     state epoch) and deletes states for the offsets admin APIs.
//   - Served by the leader of the key's __share_group_state partition
//     (engine.ShareStates.Serve*): NOT_COORDINATOR elsewhere,
//     COORDINATOR_LOAD_IN_PROGRESS while it replays.
//   - A read of a key with no state answers StartOffset -1 and the state
//     epoch a new state starts at.
//   - Authorization: CLUSTER_ACTION on the cluster (brokers only).

// shareStateAPITable are the share coordinator's internal APIs.
var shareStateAPITable = []apiHandler{
	{key: 83, name: "InitializeShareGroupState", min: 0, max: 0, advMin: 0, async: true, clusterOnly: true, handler: handleInitializeShareGroupState},
	{key: 84, name: "ReadShareGroupState", min: 0, max: 0, advMin: 0, async: true, clusterOnly: true, handler: handleReadShareGroupState},
	{key: 85, name: "WriteShareGroupState", min: 0, max: 1, advMin: 0, async: true, clusterOnly: true, handler: handleWriteShareGroupState},
	{key: 86, name: "DeleteShareGroupState", min: 0, max: 0, advMin: 0, async: true, clusterOnly: true, handler: handleDeleteShareGroupState},
}

// answerErr is a partition's error code and message for err (none for
// nil), marking the request failed when there is one.
func (r *request) answerErr(err error) (int16, *string) {
	if err == nil {
		return 0, nil
	}
	r.failed = true
	return errCode(err), errMessage(err)
}

func shareKey(group string, topic [16]byte, partition int32) engine.ShareKey {
	return engine.ShareKey{Group: group, Topic: engine.TopicID(topic), Partition: partition}
}

func handleReadShareGroupState(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrReadShareGroupStateRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.ReadShareGroupStateResponse)
	allowed := r.clusterAllowed(kmsg.ACLOperationClusterAction)
	for _, t := range req.Topics {
		rt := kmsg.NewReadShareGroupStateResponseTopic()
		rt.TopicID = t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewReadShareGroupStateResponseTopicPartition()
			rp.Partition = p.Partition
			var err error = kerr.ClusterAuthorizationFailed
			if allowed {
				var st engine.ShareState
				var ok bool
				st, ok, err = s.eng.ShareStates().ServeRead(shareKey(req.GroupID, t.TopicID, p.Partition), p.LeaderEpoch)
				rp.StateEpoch, rp.StartOffset = st.StateEpoch, st.Start
				if !ok {
					rp.StartOffset = -1
				}
				for _, b := range st.Batches {
					rp.StateBatches = append(rp.StateBatches, kmsg.ReadShareGroupStateResponseTopicPartitionStateBatch{
						FirstOffset: b.First, LastOffset: b.Last, DeliveryState: int8(b.State), DeliveryCount: b.DeliveryCount})
				}
			}
			rp.ErrorCode, rp.ErrorMessage = r.answerErr(err)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.respond(resp)
	return frameDone
}

func handleWriteShareGroupState(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrWriteShareGroupStateRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.WriteShareGroupStateResponse)
	allowed := r.clusterAllowed(kmsg.ACLOperationClusterAction)
	for _, t := range req.Topics {
		rt := kmsg.NewWriteShareGroupStateResponseTopic()
		rt.TopicID = t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewWriteShareGroupStateResponseTopicPartition()
			rp.Partition = p.Partition
			var err error = kerr.ClusterAuthorizationFailed
			if allowed {
				st := engine.ShareState{StateEpoch: p.StateEpoch, LeaderEpoch: p.LeaderEpoch}
				st.Start = p.StartOffset
				for _, b := range p.StateBatches {
					st.Batches = append(st.Batches, sharegroup.StateBatch{First: b.FirstOffset, Last: b.LastOffset, State: sharegroup.RecordState(b.DeliveryState), DeliveryCount: b.DeliveryCount})
				}
				err = s.eng.ShareStates().ServeWrite(shareKey(req.GroupID, t.TopicID, p.Partition), st)
			}
			rp.ErrorCode, rp.ErrorMessage = r.answerErr(err)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.respond(resp)
	return frameDone
}

func handleInitializeShareGroupState(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrInitializeShareGroupStateRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.InitializeShareGroupStateResponse)
	allowed := r.clusterAllowed(kmsg.ACLOperationClusterAction)
	for _, t := range req.Topics {
		rt := kmsg.NewInitializeShareGroupStateResponseTopic()
		rt.TopicID = t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewInitializeShareGroupStateResponseTopicPartition()
			rp.Partition = p.Partition
			var err error = kerr.ClusterAuthorizationFailed
			if allowed {
				err = s.eng.ShareStates().ServeReset(shareKey(req.GroupID, t.TopicID, p.Partition), p.StartOffset)
			}
			rp.ErrorCode, rp.ErrorMessage = r.answerErr(err)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.respond(resp)
	return frameDone
}

func handleDeleteShareGroupState(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDeleteShareGroupStateRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DeleteShareGroupStateResponse)
	allowed := r.clusterAllowed(kmsg.ACLOperationClusterAction)
	for _, t := range req.Topics {
		rt := kmsg.NewDeleteShareGroupStateResponseTopic()
		rt.TopicID = t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewDeleteShareGroupStateResponseTopicPartition()
			rp.Partition = p.Partition
			var err error = kerr.ClusterAuthorizationFailed
			if allowed {
				err = s.eng.ShareStates().ServeDelete(shareKey(req.GroupID, t.TopicID, p.Partition))
			}
			rp.ErrorCode, rp.ErrorMessage = r.answerErr(err)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.respond(resp)
	return frameDone
}
