package netio

import (
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
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
//   - ValidateOnly checks and changes nothing.

func handleIncrementalAlterConfigs(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	if s.clusterAdmin(r, req) {
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, rr := range req.Resources {
		res := kmsg.NewIncrementalAlterConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		err := configAuthError(rr.ResourceType)
		if r.configAllowed(kmsg.ACLOperationAlterConfigs, rr.ResourceType, rr.ResourceName) {
			err = s.incrementalAlter(&rr, req.ValidateOnly)
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

func (s *Server) incrementalAlter(rr *kmsg.IncrementalAlterConfigsRequestResource, validateOnly bool) error {
	var current func(key string) string
	var toKey func(name string) (string, error)
	switch rr.ResourceType {
	case kmsg.ConfigResourceTypeTopic:
		t := s.eng.Topic(rr.ResourceName)
		if t == nil {
			return fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, rr.ResourceName)
		}
		current = func(key string) string { v, _ := t.Config().Get(key); return v }
		toKey = func(name string) (string, error) {
			if _, ok := engine.LookupTopicConfig(name); !ok {
				return "", fmt.Errorf("%w: unknown topic config %q", kerr.InvalidConfig, name)
			}
			return name, nil
		}
	case kmsg.ConfigResourceTypeBroker:
		if err := s.checkBrokerName(rr.ResourceName); err != nil {
			return err
		}
		defaults := s.eng.BrokerConfigs()
		current = func(key string) string {
			if v, ok := defaults[key]; ok {
				return v
			}
			d, _ := engine.LookupTopicConfig(key)
			return d.Default
		}
		toKey = engine.TopicKeyForBrokerKey
	default:
		return fmt.Errorf("%w: resource type %d cannot be altered (use 2 for topics, 4 for the broker)", kerr.InvalidRequest, rr.ResourceType)
	}
	set := map[string]*string{}
	for _, c := range rr.Configs {
		key, err := toKey(c.Name)
		if err != nil {
			return err
		}
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if c.Value == nil {
				return fmt.Errorf("%w: SET %s without a value", kerr.InvalidRequest, c.Name)
			}
			v := *c.Value
			set[key] = &v
		case kmsg.IncrementalAlterConfigOpDelete:
			set[key] = nil
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			d, _ := engine.LookupTopicConfig(key)
			if d.Type != engine.TypeList {
				return fmt.Errorf("%w: %s is not a list; APPEND and SUBTRACT work on lists", kerr.InvalidConfig, c.Name)
			}
			if c.Value == nil {
				return fmt.Errorf("%w: %s without a value", kerr.InvalidRequest, c.Name)
			}
			items := splitList(current(key))
			if p, ok := set[key]; ok && p != nil {
				items = splitList(*p)
			}
			for _, it := range splitList(*c.Value) {
				i := slices.Index(items, it)
				if c.Op == kmsg.IncrementalAlterConfigOpAppend && i < 0 {
					items = append(items, it)
				} else if c.Op == kmsg.IncrementalAlterConfigOpSubtract && i >= 0 {
					items = slices.Delete(items, i, i+1)
				}
			}
			v := strings.Join(items, ",")
			set[key] = &v
		default:
			return fmt.Errorf("%w: unknown operation %d", kerr.InvalidRequest, c.Op)
		}
	}
	if rr.ResourceType == kmsg.ConfigResourceTypeBroker {
		return s.eng.AlterBrokerDefaults(set, validateOnly)
	}
	return s.eng.AlterTopicConfig(rr.ResourceName, set, false, validateOnly)
}

func splitList(v string) []string {
	var out []string
	for _, it := range strings.Split(v, ",") {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, it)
		}
	}
	return out
}
