package engine

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ConfigSource says where a config value comes from, numbered as Kafka's
// DescribeConfigs reports it.
type ConfigSource int8

// Kafka's numbering.
const (
	SourceTopic          ConfigSource = 1 // DYNAMIC_TOPIC_CONFIG
	SourceDynamicDefault ConfigSource = 3 // DYNAMIC_DEFAULT_BROKER_CONFIG
	SourceStaticBroker   ConfigSource = 4 // STATIC_BROKER_CONFIG
	SourceDefault        ConfigSource = 5 // DEFAULT_CONFIG
	SourceGroup          ConfigSource = 8 // GROUP_CONFIG
)

// ConfigSynonym is one of the places a value could come from, in order of
// precedence.
type ConfigSynonym struct {
	Name   string
	Value  string
	Source ConfigSource
}

// ConfigEntry is one described config.
type ConfigEntry struct {
	Name      string
	Value     string
	Source    ConfigSource
	ReadOnly  bool
	Sensitive bool
	Type      ConfigType
	Doc       string
	Synonyms  []ConfigSynonym
}

// DescribeTopicConfig lists every config of t with its effective value and
// where it comes from.
func (e *Engine) DescribeTopicConfig(t *Topic) []ConfigEntry {
	return e.DescribeConfigs(t.Config().overrides)
}

// DescribeConfigs describes the configs of a topic with overrides, as
// DescribeTopicConfig does.
func (e *Engine) DescribeConfigs(overrides map[string]string) []ConfigEntry {
	e.mu.RLock()
	dynamic := map[string]string{}
	for k, v := range e.meta.BrokerConfigs {
		dynamic[k] = v
	}
	e.mu.RUnlock()
	var out []ConfigEntry
	for _, d := range TopicConfigDefs() {
		ent := ConfigEntry{Name: d.Name, Type: d.Type, Doc: d.Doc, ReadOnly: d.ReadOnly}
		if v, ok := overrides[d.Name]; ok {
			ent.Synonyms = append(ent.Synonyms, ConfigSynonym{d.Name, v, SourceTopic})
		}
		e.brokerSynonyms(&ent, d, dynamic)
		out = append(out, ent)
	}
	return out
}

// brokerSynonyms appends to ent the broker-level sources of topic config
// d, strongest first (the dynamic default, the static one, Kafka's
// default), and takes its value and source from the strongest synonym of
// all.
func (e *Engine) brokerSynonyms(ent *ConfigEntry, d ConfigDef, dynamic map[string]string) {
	if v, ok := dynamic[d.Name]; ok {
		ent.Synonyms = append(ent.Synonyms, ConfigSynonym{d.BrokerKey, v, SourceDynamicDefault})
	}
	if v, ok := e.cfg.TopicDefaults[d.Name]; ok {
		ent.Synonyms = append(ent.Synonyms, ConfigSynonym{d.BrokerKey, v, SourceStaticBroker})
	}
	ent.Synonyms = append(ent.Synonyms, ConfigSynonym{d.BrokerKey, d.Default, SourceDefault})
	ent.Value, ent.Source = ent.Synonyms[0].Value, ent.Synonyms[0].Source
}

// BrokerSettings are read-only broker settings reported by DescribeConfigs
// for the broker resource, by Kafka name.
type BrokerSettings map[string]string

// DescribeBrokerConfig lists the broker resource's configs: the defaults
// of every topic config (by their broker keys, alterable), and the static
// settings passed in.
func (e *Engine) DescribeBrokerConfig(static BrokerSettings) []ConfigEntry {
	e.mu.RLock()
	dynamic := map[string]string{}
	for k, v := range e.meta.BrokerConfigs {
		dynamic[k] = v
	}
	e.mu.RUnlock()
	var out []ConfigEntry
	for _, d := range TopicConfigDefs() {
		ent := ConfigEntry{Name: d.BrokerKey, Type: d.Type, Doc: d.Doc}
		e.brokerSynonyms(&ent, d, dynamic)
		out = append(out, ent)
	}
	st := map[string]string{
		"broker.id":                        strconv.Itoa(int(e.cfg.NodeID)),
		"node.id":                          strconv.Itoa(int(e.cfg.NodeID)),
		"log.dirs":                         e.cfg.DataDir,
		"num.partitions":                   strconv.Itoa(int(e.cfg.DefaultPartitions)),
		"auto.create.topics.enable":        strconv.FormatBool(e.cfg.AutoCreateTopics),
		"default.replication.factor":       "1",
		"offsets.topic.replication.factor": "1",
		"log.retention.check.interval.ms":  strconv.FormatInt(e.cfg.RetentionCheckInterval.Milliseconds(), 10),
	}
	for k, v := range static {
		st[k] = v
	}
	keys := make([]string, 0, len(st))
	for k := range st {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, ConfigEntry{Name: k, Value: st[k], Source: SourceStaticBroker, ReadOnly: true, Type: TypeString,
			Synonyms: []ConfigSynonym{{k, st[k], SourceStaticBroker}}})
	}
	return out
}

// TopicKeyForBrokerKey maps a broker-level default's name (log.retention.ms)
// to the topic config it sets (retention.ms).
func TopicKeyForBrokerKey(brokerKey string) (string, error) {
	for _, d := range topicConfigDefs {
		if d.BrokerKey == brokerKey {
			return d.Name, nil
		}
	}
	return "", fmt.Errorf("%w: %q is not a dynamic broker config (those are the broker keys of topic configs, e.g. log.retention.ms)", kerr.InvalidConfig, brokerKey)
}
