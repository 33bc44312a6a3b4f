package engine

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// GroupConfigKeys are the group configs a GROUP resource takes
// (IncrementalAlterConfigs, DescribeConfigs), Kafka's names; each
// overrides a broker-wide setting for one group.
var GroupConfigKeys = []string{
	"consumer.heartbeat.interval.ms",
	"consumer.session.timeout.ms",
	"share.auto.offset.reset",
	"share.delivery.count.limit",
	"share.heartbeat.interval.ms",
	"share.isolation.level",
	"share.record.lock.duration.ms",
	"share.session.timeout.ms",
}

// MaxGroupConfigs bounds the groups that have config overrides (they
// live in the broker's metadata file, rewritten whole on each change).
const MaxGroupConfigs = 10000

// ValidateGroupConfig checks one group config's value.
func ValidateGroupConfig(key, value string) error {
	intIn := func(lo, hi int64) error {
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("%s=%q: want an integer from %d to %d", key, value, lo, hi)
		}
		return nil
	}
	switch key {
	case "share.auto.offset.reset":
		if value == "earliest" || value == "latest" {
			return nil
		}
		if d, ok := strings.CutPrefix(value, "by_duration:"); ok {
			if _, err := parseISODuration(d); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			return nil
		}
		return fmt.Errorf("%s=%q: want earliest, latest or by_duration:<ISO-8601 duration>", key, value)
	case "share.isolation.level":
		if value == "read_uncommitted" {
			return nil
		}
		return fmt.Errorf("%s=%q: only read_uncommitted is supported", key, value)
	case "share.delivery.count.limit":
		return intIn(2, 10)
	case "consumer.heartbeat.interval.ms":
		return intIn(500, 15*60*1000)
	case "consumer.session.timeout.ms":
		return intIn(1000, 30*60*1000)
	case "share.heartbeat.interval.ms":
		return intIn(1000, 15*60*1000)
	case "share.session.timeout.ms":
		return intIn(1000, 30*60*1000)
	case "share.record.lock.duration.ms":
		return intIn(1000, 60*60*1000)
	}
	return fmt.Errorf("unknown group config %q (known: %s)", key, strings.Join(GroupConfigKeys, ", "))
}

// GroupConfigs returns group's config overrides (do not modify); in
// cluster mode those of the newest metadata applied (ClusterHooks).
func (e *Engine) GroupConfigs(group string) map[string]string {
	if h := e.clusterHooks(); h != nil && h.GroupConfigs != nil {
		return h.GroupConfigs(group)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.meta.GroupConfigs[group]
}

// AllGroupConfigs returns every group's overrides (do not modify).
func (e *Engine) AllGroupConfigs() map[string]map[string]string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.meta.GroupConfigs
}

// ReplaceGroupConfigs makes all the group configs (cluster mode: the
// metadata image's), durably.
func (e *Engine) ReplaceGroupConfigs(all map[string]map[string]string) error {
	if err := e.beginAdmin(); err != nil {
		return err
	}
	defer e.admin.Done()
	e.metaMu.Lock()
	var old map[string]map[string]string
	err := e.writeMetaLocked(func(next *brokerMeta) error {
		old, next.GroupConfigs = next.GroupConfigs, maps.Clone(all)
		return nil
	}, nil)
	e.metaMu.Unlock() // the limits below wait for share-partitions' locks
	if err != nil {
		return err
	}
	for _, m := range []map[string]map[string]string{all, old} {
		for g := range m {
			if !maps.Equal(all[g], old[g]) {
				e.shares.applyLimits(g) // twice for a changed group: harmless
			}
		}
	}
	return nil
}

// GroupConfigDefaults returns the broker-wide value of each group config.
func (e *Engine) GroupConfigDefaults() map[string]string {
	s := e.cfg.Groups.Share
	c := e.cfg.Groups.Consumer
	return map[string]string{
		"consumer.heartbeat.interval.ms": strconv.FormatInt(c.HeartbeatInterval.Milliseconds(), 10),
		"consumer.session.timeout.ms":    strconv.FormatInt(c.SessionTimeout.Milliseconds(), 10),
		"share.auto.offset.reset":        "latest",
		"share.delivery.count.limit":     strconv.Itoa(int(s.DeliveryLimit)),
		"share.heartbeat.interval.ms":    strconv.Itoa(int(s.Group.HeartbeatMillis)),
		"share.isolation.level":          "read_uncommitted",
		"share.record.lock.duration.ms":  strconv.FormatInt(s.LockDuration.Milliseconds(), 10),
		"share.session.timeout.ms":       strconv.FormatInt(s.Group.SessionMillis, 10),
	}
}

// AlterGroupConfigs sets (non-nil) or removes (nil) group's config
// overrides, durably.
func (e *Engine) AlterGroupConfigs(group string, set map[string]*string, validateOnly bool) error {
	if group == "" {
		return fmt.Errorf("%w: a group config needs a group id", kerr.InvalidRequest)
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if v := set[k]; v != nil {
			if err := ValidateGroupConfig(k, *v); err != nil {
				return fmt.Errorf("%w: %w", kerr.InvalidConfig, err)
			}
		} else if !slices.Contains(GroupConfigKeys, k) {
			return fmt.Errorf("%w: unknown group config %q", kerr.InvalidConfig, k)
		}
	}
	if validateOnly {
		return nil
	}
	if err := e.beginAdmin(); err != nil {
		return err
	}
	defer e.admin.Done()
	e.metaMu.Lock()
	err := e.writeMetaLocked(func(next *brokerMeta) error {
		next.GroupConfigs = maps.Clone(next.GroupConfigs)
		if next.GroupConfigs == nil {
			next.GroupConfigs = map[string]map[string]string{}
		}
		cur := ApplyConfigSet(next.GroupConfigs[group], set)
		if cur == nil {
			delete(next.GroupConfigs, group)
			return nil
		}
		if _, had := next.GroupConfigs[group]; !had && len(next.GroupConfigs) >= MaxGroupConfigs {
			return fmt.Errorf("%w: %d groups have configs already (at most %d); delete some (IncrementalAlterConfigs DELETE)", kerr.PolicyViolation, len(next.GroupConfigs), MaxGroupConfigs)
		}
		next.GroupConfigs[group] = cur
		return nil
	}, nil)
	e.metaMu.Unlock() // the limits below wait for share-partitions' locks
	if err != nil {
		return err
	}
	e.shares.applyLimits(group)
	return nil
}

// consumerTimeouts returns a consumer-protocol group's session timeout
// and heartbeat interval: the coordinator's, with the group's configs
// applied (the interval kept below the timeout).
func (c *Coordinator) consumerTimeouts(group string) (session, heartbeat time.Duration) {
	session, heartbeat = c.cfg.Consumer.SessionTimeout, c.cfg.Consumer.HeartbeatInterval
	over := c.eng.GroupConfigs(group)
	if v, err := strconv.ParseInt(over["consumer.session.timeout.ms"], 10, 64); err == nil {
		session = time.Duration(v) * time.Millisecond
	}
	if v, err := strconv.ParseInt(over["consumer.heartbeat.interval.ms"], 10, 64); err == nil {
		heartbeat = time.Duration(v) * time.Millisecond
	}
	if session > 0 {
		heartbeat = min(heartbeat, session/2)
	}
	return session, heartbeat
}

// shareSettings returns group's share settings: the broker's, with the
// group's overrides applied.
func (e *Engine) shareSettings(group string) ShareConfig {
	c := e.cfg.Groups.Share
	c.Group.MaxMetadataBytes = e.cfg.Groups.maxMetadataBytes()
	for k, v := range e.GroupConfigs(group) {
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "share.delivery.count.limit":
			c.DeliveryLimit = int16(n)
		case "share.heartbeat.interval.ms":
			c.Group.HeartbeatMillis = int32(n)
		case "share.session.timeout.ms":
			c.Group.SessionMillis = n
		case "share.record.lock.duration.ms":
			c.LockDuration = time.Duration(n) * time.Millisecond
		}
	}
	return c
}

// DescribeGroupConfig lists every group config of group with its value
// and where it comes from (the group's override, else the broker's).
func (e *Engine) DescribeGroupConfig(group string) []ConfigEntry {
	over, defs := e.GroupConfigs(group), e.GroupConfigDefaults()
	out := make([]ConfigEntry, 0, len(GroupConfigKeys))
	for _, k := range GroupConfigKeys {
		ent := ConfigEntry{Name: k, Value: defs[k], Source: SourceStaticBroker, Type: TypeInt}
		if strings.HasSuffix(k, ".ms") {
			ent.Type = TypeLong
		}
		if k == "share.auto.offset.reset" || k == "share.isolation.level" {
			ent.Type = TypeString
		}
		if v, ok := over[k]; ok {
			ent.Synonyms = append(ent.Synonyms, ConfigSynonym{k, v, SourceGroup})
			ent.Value, ent.Source = v, SourceGroup
		}
		ent.Synonyms = append(ent.Synonyms, ConfigSynonym{k, defs[k], SourceStaticBroker})
		out = append(out, ent)
	}
	return out
}
