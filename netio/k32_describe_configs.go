package netio

import (
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// DescribeConfigs, key 32, versions 0-4.
//
//   - Topic resources (type 2): every topic config ringlog implements, with
//     its effective value and source: the topic's override
//     (DYNAMIC_TOPIC_CONFIG), a dynamic broker default
//     (DYNAMIC_DEFAULT_BROKER_CONFIG), a broker flag (STATIC_BROKER_CONFIG)
//     or the built-in default (DEFAULT_CONFIG). Synonyms (v1+) list them in
//     order of precedence; documentation and types from v3.
//   - Broker resources (type 4, name "" or this node's id): the broker
//     defaults of the topic configs (alterable) and read-only settings.
//   - ConfigNames filters; unknown names are left out, as in Kafka.

func handleDescribeConfigs(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrDescribeConfigsRequest()
	if err := r.decode(req); err != nil {
		r.closeMalformed(err)
		return frameDone
	}
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, rr := range req.Resources {
		res := kmsg.NewDescribeConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		entries, err := s.describeResource(rr.ResourceType, rr.ResourceName)
		if !r.configAllowed(kmsg.ACLOperationDescribeConfigs, rr.ResourceType, rr.ResourceName) {
			entries, err = nil, configAuthError(rr.ResourceType)
		}
		if err != nil {
			res.ErrorCode = errCode(err)
			res.ErrorMessage = errMessage(err)
			r.failed = true
			resp.Resources = append(resp.Resources, res)
			continue
		}
		want := map[string]bool{}
		for _, n := range rr.ConfigNames {
			want[n] = true
		}
		for _, ent := range entries {
			if rr.ConfigNames != nil && !want[ent.Name] {
				continue
			}
			v := ent.Value
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name, c.Value, c.ReadOnly, c.IsSensitive = ent.Name, &v, ent.ReadOnly, ent.Sensitive
			c.Source = kmsg.ConfigSource(ent.Source)
			c.IsDefault = ent.Source == engine.SourceDefault || ent.Source == engine.SourceStaticBroker && rr.ResourceType == kmsg.ConfigResourceTypeTopic
			c.ConfigType = kmsg.ConfigType(ent.Type)
			if req.IncludeDocumentation {
				doc := ent.Doc
				c.Documentation = &doc
			}
			if req.IncludeSynonyms {
				for _, syn := range ent.Synonyms {
					sv := syn.Value
					cs := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
					cs.Name, cs.Value, cs.Source = syn.Name, &sv, kmsg.ConfigSource(syn.Source)
					c.ConfigSynonyms = append(c.ConfigSynonyms, cs)
				}
			}
			res.Configs = append(res.Configs, c)
		}
		resp.Resources = append(resp.Resources, res)
	}
	r.respond(resp)
	return frameDone
}

func (s *Server) describeResource(typ kmsg.ConfigResourceType, name string) ([]engine.ConfigEntry, error) {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		t := s.eng.Topic(name)
		if t == nil {
			return nil, fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name)
		}
		return s.eng.DescribeTopicConfig(t), nil
	case kmsg.ConfigResourceTypeBroker:
		if err := s.checkBrokerName(name); err != nil {
			return nil, err
		}
		host, port := s.Advertised()
		return s.eng.DescribeBrokerConfig(engine.BrokerSettings{
			"advertised.listeners":     "PLAINTEXT://" + host + ":" + strconv.Itoa(int(port)),
			"socket.request.max.bytes": strconv.Itoa(s.cfg.MaxRequestBytes),
			"max.connections":          strconv.Itoa(s.cfg.MaxConnections),
			"io.backend":               s.eng.BackendName(),
		}), nil
	case kmsg.ConfigResourceTypeGroupConfig:
		if name == "" {
			return nil, fmt.Errorf("%w: a group config resource needs the group id as its name", kerr.InvalidRequest)
		}
		return s.eng.DescribeGroupConfig(name), nil
	}
	return nil, fmt.Errorf("%w: resource type %d is not supported (use 2 for topics, 4 for the broker, 32 for a group)", kerr.InvalidRequest, typ)
}

func (s *Server) checkBrokerName(name string) error {
	if name == "" || name == strconv.Itoa(int(s.eng.NodeID())) {
		return nil
	}
	return fmt.Errorf("%w: broker %q: this is broker %d", kerr.InvalidRequest, name, s.eng.NodeID())
}
