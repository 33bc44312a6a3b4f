package netio

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// AlterConfigs, key 33, versions 0-2 (the legacy, non-incremental form that
// some admin clients still send).
//
//   - Topic resources: the given configs become the topic's whole set of
//     overrides; every config not named goes back to its default.
//   - Broker resources: the given broker defaults are set (the others are
//     kept: the broker has settings this request cannot express).
//   - ValidateOnly checks and changes nothing.

func handleAlterConfigs(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrAlterConfigsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	if s.clusterAdmin(r, req) {
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	for _, rr := range req.Resources {
		res := kmsg.NewAlterConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		set := map[string]*string{}
		var err error
		for _, c := range rr.Configs {
			key := c.Name
			if rr.ResourceType == kmsg.ConfigResourceTypeBroker {
				if key, err = engine.TopicKeyForBrokerKey(c.Name); err != nil {
					break
				}
			}
			set[key] = c.Value
		}
		if err == nil && !r.configAllowed(kmsg.ACLOperationAlterConfigs, rr.ResourceType, rr.ResourceName) {
			err = configAuthError(rr.ResourceType)
		}
		if err == nil {
			switch rr.ResourceType {
			case kmsg.ConfigResourceTypeTopic:
				err = s.eng.AlterTopicConfig(rr.ResourceName, set, true, req.ValidateOnly)
			case kmsg.ConfigResourceTypeBroker:
				if err = s.checkBrokerName(rr.ResourceName); err == nil {
					err = s.eng.AlterBrokerDefaults(set, req.ValidateOnly)
				}
			default:
				err = fmt.Errorf("%w: resource type %d cannot be altered", kerr.InvalidRequest, rr.ResourceType)
			}
		}
		if err != nil {
			res.ErrorCode = errCode(err)
			res.ErrorMessage = errMessage(err)
			r.failed = true
		}
		resp.Resources = append(resp.Resources, res)
	}
	r.respond(resp)
	return frameDone
}
