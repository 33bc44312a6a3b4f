package engine

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/wal"
)

// ErrInvalidConfig is wrapped by every configuration error (Kafka's
// INVALID_CONFIG).
var ErrInvalidConfig = errors.New("invalid config")

// ConfigType is a Kafka config type, as DescribeConfigs v3+ reports it.
type ConfigType int8

// Kafka's numbering.
const (
	TypeBoolean ConfigType = 1
	TypeString  ConfigType = 2
	TypeInt     ConfigType = 3
	TypeShort   ConfigType = 4
	TypeLong    ConfigType = 5
	TypeDouble  ConfigType = 6
	TypeList    ConfigType = 7
	TypeClass   ConfigType = 8
	TypePass    ConfigType = 9
)

// ConfigDef describes one topic config key: its type, the broker setting
// that supplies its default, how its values are checked, and what it does.
type ConfigDef struct {
	Name       string
	BrokerKey  string // broker-level default (DescribeConfigs synonyms)
	Type       ConfigType
	Default    string
	Doc        string
	validate   func(v string) error
	ReadOnly   bool // reported but cannot be changed
	compaction bool // meaningful with cleanup.policy=compact
}

const unlimited = "-1"

// topicConfigDefs is every topic config ringlog knows; a key outside this
// table is rejected with INVALID_CONFIG, so nothing is silently ignored.
var topicConfigDefs = []ConfigDef{
	{Name: "cleanup.policy", BrokerKey: "log.cleanup.policy", Type: TypeList, Default: "delete",
		Doc: "delete: drop whole segments past retention; compact: keep the newest record per key (compact,delete: both)", validate: validCleanupPolicy},
	{Name: "retention.ms", BrokerKey: "log.retention.ms", Type: TypeLong, Default: "604800000",
		Doc: "delete segments whose newest record is older than this; -1: forever", validate: validLong(-1, math.MaxInt64)},
	{Name: "retention.bytes", BrokerKey: "log.retention.bytes", Type: TypeLong, Default: unlimited,
		Doc: "delete the oldest segments while a partition is larger than this; -1: unlimited", validate: validLong(-1, math.MaxInt64)},
	{Name: "remote.storage.enable", BrokerKey: "remote.storage.enable", Type: TypeBoolean, Default: "false",
		Doc: "copy closed segments to the object store (--remote-storage-endpoint) and read them back from there; once on, stays on", validate: validBool},
	{Name: "local.retention.ms", BrokerKey: "log.local.retention.ms", Type: TypeLong, Default: "-2",
		Doc: "with remote.storage.enable: delete copied local segments whose newest record is older than this; -2: retention.ms, -1: forever", validate: validLong(-2, math.MaxInt64)},
	{Name: "local.retention.bytes", BrokerKey: "log.local.retention.bytes", Type: TypeLong, Default: "-2",
		Doc: "with remote.storage.enable: delete the oldest copied local segments while the local log is larger than this; -2: retention.bytes, -1: unlimited", validate: validLong(-2, math.MaxInt64)},
	{Name: "segment.bytes", BrokerKey: "log.segment.bytes", Type: TypeInt, Default: "1073741824",
		Doc: "roll the active segment at this size", validate: validLong(1024, math.MaxInt32)},
	{Name: "segment.ms", BrokerKey: "log.roll.ms", Type: TypeLong, Default: "604800000",
		Doc: "roll the active segment once its first record is this old", validate: validLong(1, math.MaxInt64)},
	{Name: "segment.index.bytes", BrokerKey: "log.index.size.max.bytes", Type: TypeInt, Default: "10485760",
		Doc: "preallocated size of each offset index (new segments)", validate: validLong(64, math.MaxInt32)},
	{Name: "index.interval.bytes", BrokerKey: "log.index.interval.bytes", Type: TypeInt, Default: "4096",
		Doc: "bytes of log between two sparse index entries", validate: validLong(0, math.MaxInt32)},
	{Name: "max.message.bytes", BrokerKey: "message.max.bytes", Type: TypeInt, Default: "1048588",
		Doc: "largest record batch accepted", validate: validLong(0, math.MaxInt32)},
	{Name: "message.timestamp.type", BrokerKey: "log.message.timestamp.type", Type: TypeString, Default: "CreateTime",
		Doc: "CreateTime keeps producer timestamps; LogAppendTime stamps batches with the broker's clock", validate: validOneOf("CreateTime", "LogAppendTime")},
	{Name: "flush.messages", BrokerKey: "log.flush.interval.messages", Type: TypeLong, Default: strconv.FormatInt(math.MaxInt64, 10),
		Doc: "fdatasync a partition after this many records (default: leave it to the page cache)", validate: validLong(1, math.MaxInt64)},
	{Name: "flush.ms", BrokerKey: "log.flush.interval.ms", Type: TypeLong, Default: strconv.FormatInt(math.MaxInt64, 10),
		Doc: "fdatasync a partition when unsynced data is this old (default: leave it to the page cache)", validate: validLong(0, math.MaxInt64)},
	{Name: "write.caching", BrokerKey: "write.caching", Type: TypeBoolean, Default: "false",
		Doc: "true: acks=all is acknowledged from the page cache, like acks=1 (no fdatasync)", validate: validBool},
	{Name: "preallocate", BrokerKey: "log.preallocate", Type: TypeBoolean, Default: "false",
		Doc: "reserve segment.bytes of disk when a segment is created", validate: validBool},
	{Name: "min.insync.replicas", BrokerKey: "min.insync.replicas", Type: TypeInt, Default: "1",
		Doc: "acks=all fails with NOT_ENOUGH_REPLICAS when fewer replicas are in sync, and the high watermark waits (a single node has 1)", validate: validLong(1, math.MaxInt32)},
	{Name: "compression.type", BrokerKey: "compression.type", Type: TypeString, Default: "producer",
		Doc: "ringlog stores batches exactly as produced; only 'producer' is accepted", validate: validOneOf("producer")},
	{Name: "delete.retention.ms", BrokerKey: "log.cleaner.delete.retention.ms", Type: TypeLong, Default: "86400000",
		Doc: "how long compaction keeps tombstones", validate: validLong(0, math.MaxInt64), compaction: true},
	{Name: "min.compaction.lag.ms", BrokerKey: "log.cleaner.min.compaction.lag.ms", Type: TypeLong, Default: "0",
		Doc: "records younger than this are never compacted", validate: validLong(0, math.MaxInt64), compaction: true},
	{Name: "min.cleanable.dirty.ratio", BrokerKey: "log.cleaner.min.cleanable.ratio", Type: TypeDouble, Default: "0.5",
		Doc: "compact when at least this share of the log is not yet compacted", validate: validRatio, compaction: true},
}

var topicConfigIndex = func() map[string]*ConfigDef {
	m := make(map[string]*ConfigDef, len(topicConfigDefs))
	for i := range topicConfigDefs {
		m[topicConfigDefs[i].Name] = &topicConfigDefs[i]
	}
	return m
}()

// TopicConfigDefs lists the topic config keys, sorted by name.
func TopicConfigDefs() []ConfigDef {
	out := append([]ConfigDef(nil), topicConfigDefs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LookupTopicConfig returns the definition of a topic config key.
func LookupTopicConfig(name string) (*ConfigDef, bool) {
	d, ok := topicConfigIndex[name]
	return d, ok
}

func validLong(lo, hi int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		if n < lo || n > hi {
			return fmt.Errorf("%d is outside [%d, %d]", n, lo, hi)
		}
		return nil
	}
}

func validBool(v string) error {
	if _, err := strconv.ParseBool(v); err != nil {
		return fmt.Errorf("%q is not true or false", v)
	}
	return nil
}

func validRatio(v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1 {
		return fmt.Errorf("%q is not a ratio in [0, 1]", v)
	}
	return nil
}

func validOneOf(vals ...string) func(string) error {
	return func(v string) error {
		for _, ok := range vals {
			if v == ok {
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %s", v, strings.Join(vals, ", "))
	}
}

func validCleanupPolicy(v string) error {
	parts := strings.Split(v, ",")
	seen := map[string]bool{}
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p != "delete" && p != "compact" {
			return fmt.Errorf("%q: cleanup.policy takes delete, compact or both", v)
		}
		if seen[p] {
			return fmt.Errorf("%q repeats %s", v, p)
		}
		seen[p] = true
	}
	return nil
}

// TopicConfig is a topic's configuration: its explicit overrides over the
// broker defaults.
type TopicConfig struct {
	overrides map[string]string
	defaults  map[string]string // broker-level values by topic key
}

// ValidateTopicConfig checks one key and value.
func ValidateTopicConfig(name, value string) error {
	d, ok := topicConfigIndex[name]
	if !ok {
		return fmt.Errorf("%w: unknown topic config %q", ErrInvalidConfig, name)
	}
	if d.ReadOnly {
		return fmt.Errorf("%w: %s is read-only", ErrInvalidConfig, name)
	}
	if d.validate != nil {
		if err := d.validate(value); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidConfig, name, err)
		}
	}
	return nil
}

// validateBrokerDefault checks a broker-level default of a topic key:
// ValidateTopicConfig, and remote.storage.enable is per topic only (a
// default would tier the internal topics too).
func validateBrokerDefault(name, value string) error {
	if err := ValidateTopicConfig(name, value); err != nil {
		return err
	}
	if name == "remote.storage.enable" {
		return fmt.Errorf("%w: remote.storage.enable is set per topic, not as a broker default", ErrInvalidConfig)
	}
	return nil
}

// Get returns the effective value of key and whether it is an override.
func (c *TopicConfig) Get(key string) (value string, override bool) {
	if v, ok := c.overrides[key]; ok {
		return v, true
	}
	if v, ok := c.defaults[key]; ok {
		return v, false
	}
	if d, ok := topicConfigIndex[key]; ok {
		return d.Default, false
	}
	return "", false
}

// Overrides returns a copy of the explicit settings.
func (c *TopicConfig) Overrides() map[string]string {
	out := make(map[string]string, len(c.overrides))
	for k, v := range c.overrides {
		out[k] = v
	}
	return out
}

func (c *TopicConfig) long(key string) int64 {
	v, _ := c.Get(key)
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

func (c *TopicConfig) boolean(key string) bool {
	v, _ := c.Get(key)
	b, _ := strconv.ParseBool(v)
	return b
}

// MaxMessageBytes is max.message.bytes.
func (c *TopicConfig) MaxMessageBytes() int { return int(c.long("max.message.bytes")) }

// MinInsyncReplicas is min.insync.replicas.
func (c *TopicConfig) MinInsyncReplicas() int { return int(c.long("min.insync.replicas")) }

// WriteCaching is write.caching.
func (c *TopicConfig) WriteCaching() bool { return c.boolean("write.caching") }

// Compact reports whether cleanup.policy includes compact.
func (c *TopicConfig) Compact() bool {
	v, _ := c.Get("cleanup.policy")
	return strings.Contains(v, "compact")
}

// RemoteStorage is remote.storage.enable: the topic's closed segments
// are copied to the object store.
func (c *TopicConfig) RemoteStorage() bool { return c.boolean("remote.storage.enable") }

// CheckTopicConfigs checks what single keys cannot: the effective
// configuration of a topic (overrides over the defaults), given whether
// the broker has an object store (tiered) and the topic's configuration
// before the change (nil for a new topic). Tiered storage needs a store,
// refuses compacted topics (as Kafka does), cannot be turned off once
// on, and local retention may not exceed retention.
func CheckTopicConfigs(next, prev *TopicConfig, tiered bool) error {
	if !next.RemoteStorage() {
		if prev != nil && prev.RemoteStorage() {
			return fmt.Errorf("%w: remote.storage.enable cannot be turned off once on: the topic's older data lives in the object store", ErrInvalidConfig)
		}
		return nil
	}
	if !tiered {
		return fmt.Errorf("%w: remote.storage.enable=true needs a broker started with --remote-storage-endpoint and --remote-storage-bucket", ErrInvalidConfig)
	}
	if policy, _ := next.Get("cleanup.policy"); next.Compact() {
		return fmt.Errorf("%w: remote.storage.enable=true is refused with cleanup.policy=%s: compacted topics are not tiered", ErrInvalidConfig, policy)
	}
	for _, k := range [][2]string{{"local.retention.bytes", "retention.bytes"}, {"local.retention.ms", "retention.ms"}} {
		local, total := next.long(k[0]), next.long(k[1])
		if local == -2 || total < 0 {
			continue
		}
		if local < 0 || local > total {
			return fmt.Errorf("%w: %s=%d exceeds %s=%d: the local copy cannot outlive the log", ErrInvalidConfig, k[0], local, k[1], total)
		}
	}
	return nil
}

// CheckTopicConfigsOver is CheckTopicConfigs for a cluster's controller:
// the topic's overrides next (and prev before the change, nil for a new
// topic) over brokerConfigs, the metadata's broker defaults, with this
// broker's object store standing for every broker's (they must all be
// started with the same one). The error wraps INVALID_CONFIG.
func (e *Engine) CheckTopicConfigsOver(next, prev, brokerConfigs map[string]string, isNew bool) error {
	var pc *TopicConfig
	if !isNew {
		pc = e.topicConfigOver(prev, brokerConfigs)
	}
	if err := CheckTopicConfigs(e.topicConfigOver(next, brokerConfigs), pc, e.remote != nil); err != nil {
		return fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
	}
	return nil
}

// Delete reports whether cleanup.policy includes delete.
func (c *TopicConfig) Delete() bool {
	v, _ := c.Get("cleanup.policy")
	return strings.Contains(v, "delete")
}

// DeleteRetention is delete.retention.ms.
func (c *TopicConfig) DeleteRetention() time.Duration {
	return time.Duration(c.long("delete.retention.ms")) * time.Millisecond
}

// MinCompactionLag is min.compaction.lag.ms.
func (c *TopicConfig) MinCompactionLag() time.Duration {
	return time.Duration(c.long("min.compaction.lag.ms")) * time.Millisecond
}

// MinCleanableRatio is min.cleanable.dirty.ratio.
func (c *TopicConfig) MinCleanableRatio() float64 {
	v, _ := c.Get("min.cleanable.dirty.ratio")
	f, _ := strconv.ParseFloat(v, 64)
	return f
}

func msDuration(ms int64) time.Duration {
	if ms <= 0 || ms >= math.MaxInt64/int64(time.Millisecond) {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// walOptions maps the config onto a log's options.
func (c *TopicConfig) walOptions(base wal.Options) wal.Options {
	o := base
	o.SegmentBytes = c.long("segment.bytes")
	o.SegmentAge = msDuration(c.long("segment.ms"))
	o.IndexIntervalBytes = int(c.long("index.interval.bytes"))
	if o.IndexIntervalBytes == 0 {
		o.IndexIntervalBytes = 1
	}
	o.MaxIndexBytes = int(c.long("segment.index.bytes"))
	o.RetentionBytes, o.RetentionAge = 0, 0
	if c.Delete() {
		if rb := c.long("retention.bytes"); rb > 0 {
			o.RetentionBytes = rb
		}
		o.RetentionAge = msDuration(c.long("retention.ms"))
	}
	o.Tiered = c.RemoteStorage()
	o.LocalRetentionBytes, o.LocalRetentionAge = 0, 0
	if o.Tiered && c.Delete() {
		if lb := c.long("local.retention.bytes"); lb > 0 {
			o.LocalRetentionBytes = lb
		} else if lb == -2 {
			o.LocalRetentionBytes = o.RetentionBytes
		}
		if lm := c.long("local.retention.ms"); lm == -2 {
			o.LocalRetentionAge = o.RetentionAge
		} else {
			o.LocalRetentionAge = msDuration(lm)
		}
	}
	o.FlushMessages = 0
	if fm := c.long("flush.messages"); fm > 0 && fm < math.MaxInt64 {
		o.FlushMessages = fm
	}
	o.FlushInterval = msDuration(c.long("flush.ms"))
	o.Preallocate = c.boolean("preallocate")
	v, _ := c.Get("message.timestamp.type")
	o.LogAppendTime = v == "LogAppendTime"
	return o
}
