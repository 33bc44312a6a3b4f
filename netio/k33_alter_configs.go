package netio

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/engine"
)

// AlterConfigs, key 33, versions 0-2 (the legacy, non-incremental form that
// some admin clients still send).
//
//   - Topic resources: the given configs become the topic's whole set of
//     overrides; every config not named goes back to its default.
//   - Broker resources: the given broker defaults are set (the others are
//     kept: the broker has settings this request cannot express).
//   - The same path in cluster mode (admin.go), where the broker defaults
//     are the cluster-wide ones (an empty broker name).
//   - ValidateOnly checks and changes nothing.

func handleAlterConfigs(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrAlterConfigsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	answer := func(rr kmsg.AlterConfigsRequestResource, err error) kmsg.AlterConfigsResponseResource {
		out := kmsg.NewAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = rr.ResourceType, rr.ResourceName
		if err != nil {
			out.ErrorCode, out.ErrorMessage = errCode(err), errMessage(err)
			r.failed = true
		}
		return out
	}
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	resp.Resources = adminEntries(r, req.Resources,
		func(rr kmsg.AlterConfigsRequestResource) (func(context.Context) kmsg.AlterConfigsResponseResource, kmsg.AlterConfigsResponseResource) {
			if !r.configAllowed(kmsg.ACLOperationAlterConfigs, rr.ResourceType, rr.ResourceName) {
				return nil, answer(rr, configAuthError(rr.ResourceType))
			}
			ch, keyOf, err := s.configChangeOf(rr.ResourceType, rr.ResourceName)
			// The legacy AlterConfigs replaces a topic's overrides; the
			// broker keeps the defaults not named (it has settings this
			// request cannot express).
			ch.Replace = ch.Type == admin.TopicConfigs
			for _, c := range rr.Configs {
				if err != nil {
					break
				}
				op := admin.ConfigOp{Kind: admin.Delete}
				if op.Key, err = keyOf(c.Name); c.Value != nil {
					op.Kind, op.Value = admin.Set, *c.Value
				}
				ch.Ops = append(ch.Ops, op)
			}
			if err == nil {
				err = ch.Check()
			}
			if err != nil {
				return nil, answer(rr, err)
			}
			return func(ctx context.Context) kmsg.AlterConfigsResponseResource {
				return answer(rr, s.admin.AlterConfigs(ctx, ch, req.ValidateOnly))
			}, kmsg.AlterConfigsResponseResource{}
		},
		forwardPart(s, r, func(sub []kmsg.AlterConfigsRequestResource) kmsg.Request { c := *req; c.Resources = sub; return &c },
			func(resp *kmsg.AlterConfigsResponse) []kmsg.AlterConfigsResponseResource { return resp.Resources }), answer)
	r.respond(resp)
	return frameDone
}

// configChangeOf starts the change of a config resource: topics, and the
// brokers' defaults (a broker resource named "" or, on a single broker,
// its own id; cluster mode replicates no per-broker settings). keyOf
// turns a config name of the request into a topic config key: broker
// defaults are named by their broker keys (log.retention.ms).
func (s *Server) configChangeOf(typ kmsg.ConfigResourceType, name string) (ch admin.ConfigChange, keyOf func(string) (string, error), err error) {
	keyOf = func(k string) (string, error) { return k, nil }
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		return admin.ConfigChange{Type: admin.TopicConfigs, Name: name}, keyOf, nil
	case kmsg.ConfigResourceTypeBroker:
		if name != "" && s.cfg.Cluster != nil {
			return ch, keyOf, fmt.Errorf("%w: per-broker configs are not available in cluster mode; alter the cluster-wide default (an empty broker name)", kerr.InvalidRequest)
		}
		if err := s.checkBrokerName(name); err != nil {
			return ch, keyOf, err
		}
		return admin.ConfigChange{Type: admin.BrokerDefaults}, engine.TopicKeyForBrokerKey, nil
	case kmsg.ConfigResourceTypeGroupConfig:
		if name == "" {
			return ch, keyOf, fmt.Errorf("%w: a group config resource needs the group id as its name", kerr.InvalidRequest)
		}
		return admin.ConfigChange{Type: admin.GroupConfigs, Name: name}, keyOf, nil
	}
	return ch, keyOf, fmt.Errorf("%w: resource type %d cannot be altered (use 2 for topics, 4 for the broker, 32 for a group)", kerr.InvalidRequest, typ)
}
