package netio

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/admin"
)

// IncrementalAlterConfigs, key 44, versions 0-1.
//
//   - Topic resources: SET and DELETE (back to the default) on topic
//     configs; APPEND and SUBTRACT on list configs (cleanup.policy). The
//     change reaches the partitions' logs at once (retention, segment size,
//     timestamps type, flush policy, ...) and survives restarts.
//   - Broker resources: the same operations on the broker defaults of topic
//     configs (log.retention.ms, ...), which every topic without its own
//     override follows.
//   - The same path in cluster mode (admin.go), where the broker defaults
//     are the cluster-wide ones (an empty broker name).
//   - ValidateOnly checks and changes nothing.

func handleIncrementalAlterConfigs(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	answer := func(rr kmsg.IncrementalAlterConfigsRequestResource, err error) kmsg.IncrementalAlterConfigsResponseResource {
		out := kmsg.NewIncrementalAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = rr.ResourceType, rr.ResourceName
		if err != nil {
			out.ErrorCode, out.ErrorMessage = errCode(err), errMessage(err)
			r.failed = true
		}
		return out
	}
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	resp.Resources = adminEntries(r, req.Resources,
		func(rr kmsg.IncrementalAlterConfigsRequestResource) (func(context.Context) kmsg.IncrementalAlterConfigsResponseResource, kmsg.IncrementalAlterConfigsResponseResource) {
			if !r.configAllowed(kmsg.ACLOperationAlterConfigs, rr.ResourceType, rr.ResourceName) {
				return nil, answer(rr, configAuthError(rr.ResourceType))
			}
			ch, err := s.incrementalChange(&rr)
			if err != nil {
				return nil, answer(rr, err)
			}
			return func(ctx context.Context) kmsg.IncrementalAlterConfigsResponseResource {
				return answer(rr, s.admin.AlterConfigs(ctx, ch, req.ValidateOnly))
			}, kmsg.IncrementalAlterConfigsResponseResource{}
		},
		forwardPart(s, r, func(sub []kmsg.IncrementalAlterConfigsRequestResource) kmsg.Request {
			c := *req
			c.Resources = sub
			return &c
		},
			func(resp *kmsg.IncrementalAlterConfigsResponse) []kmsg.IncrementalAlterConfigsResponseResource {
				return resp.Resources
			}), answer)
	r.respond(resp)
	return frameDone
}

// incrementalChange is one resource of an IncrementalAlterConfigs
// request, checked.
func (s *Server) incrementalChange(rr *kmsg.IncrementalAlterConfigsRequestResource) (admin.ConfigChange, error) {
	ch, keyOf, err := s.configChangeOf(rr.ResourceType, rr.ResourceName)
	if err != nil {
		return ch, err
	}
	for _, c := range rr.Configs {
		op := admin.ConfigOp{}
		if op.Key, err = keyOf(c.Name); err != nil {
			return ch, err
		}
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			op.Kind = admin.Set
		case kmsg.IncrementalAlterConfigOpDelete:
			op.Kind = admin.Delete
		case kmsg.IncrementalAlterConfigOpAppend:
			op.Kind = admin.Append
		case kmsg.IncrementalAlterConfigOpSubtract:
			op.Kind = admin.Subtract
		default:
			return ch, fmt.Errorf("%w: unknown operation %d", kerr.InvalidRequest, c.Op)
		}
		if op.Kind != admin.Delete {
			if c.Value == nil {
				return ch, fmt.Errorf("%w: %s %s without a value", kerr.InvalidRequest, c.Op, c.Name)
			}
			op.Value = *c.Value
		}
		ch.Ops = append(ch.Ops, op)
	}
	return ch, ch.Check()
}
