package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"

	"github.com/ringlog/ringlog/engine/consumergroup"
)

// Consumer-protocol groups in __consumer_offsets, in Kafka's record
// formats (group-coordinator's ConsumerGroup*Key/Value): a key is an
// int16 record type and the non-flexible key struct; a value an int16
// version (0) and the flexible value struct (compact strings and arrays,
// tagged fields, which are skipped on read). A nil value is a tombstone.
//
//	3 ConsumerGroupMetadata           group  -> epoch, metadata hash (tag 0)
//	5 ConsumerGroupMemberMetadata     member -> instance, rack, client, subscription, rebalance timeout, assignor
//	6 ConsumerGroupTargetAssignmentMetadata group -> assignment epoch
//	7 ConsumerGroupTargetAssignmentMember   member -> target partitions
//	8 ConsumerGroupCurrentMemberAssignment  member -> epochs, state, assigned and pending-revocation partitions
//
// Types 4 (partition metadata, dropped by Kafka 4.1) and 16 (resolved
// regexes, which ringlog resolves again after a load) are read and
// ignored.

// The record types.
const (
	recConsumerGroup     int16 = 3
	recConsumerPartMeta  int16 = 4
	recConsumerMember    int16 = 5
	recConsumerTargetMD  int16 = 6
	recConsumerTarget    int16 = 7
	recConsumerCurrent   int16 = 8
	recConsumerRegex     int16 = 16
	consumerValueVersion int16 = 0
)

// consumerKey is a decoded key: the group, and the member for the member
// records.
type consumerKey struct {
	typ    int16
	group  string
	member string
}

func (k consumerKey) append(dst []byte) []byte {
	dst = kbin.AppendInt16(dst, k.typ)
	dst = kbin.AppendString(dst, k.group)
	if k.typ == recConsumerMember || k.typ == recConsumerTarget || k.typ == recConsumerCurrent {
		dst = kbin.AppendString(dst, k.member)
	}
	return dst
}

func readConsumerKey(b []byte) (consumerKey, error) {
	r := kbin.Reader{Src: b}
	k := consumerKey{typ: r.Int16(), group: r.String()}
	switch k.typ {
	case recConsumerMember, recConsumerTarget, recConsumerCurrent:
		k.member = r.String()
	case recConsumerGroup, recConsumerTargetMD, recConsumerPartMeta:
	case recConsumerRegex:
		_ = r.String() // the regex
	default:
		return k, fmt.Errorf("record type %d is not a consumer-group record", k.typ)
	}
	if err := r.Complete(); err != nil {
		return k, fmt.Errorf("consumer-group key (type %d): %w", k.typ, err)
	}
	return k, nil
}

// valueReader reads a flexible value, bounding every count by the bytes
// left, so that a hostile length cannot drive an allocation.
type valueReader struct{ kbin.Reader }

func newValueReader(b []byte) (*valueReader, error) {
	r := &valueReader{kbin.Reader{Src: b}}
	if v := r.Int16(); r.Ok() && v != consumerValueVersion {
		return nil, fmt.Errorf("value version %d, ringlog reads %d", v, consumerValueVersion)
	}
	return r, nil
}

// count is a compact array length; -1 for null.
func (r *valueReader) count(min int) int {
	n := int(r.CompactArrayLen())
	if n > 0 && n*min > len(r.Src) {
		r.Src = nil // a count the bytes left cannot hold: fail
		_ = r.Int8()
		return 0
	}
	return n
}

// skipTags skips a tagged-field section, calling fn (if set) with each.
func (r *valueReader) skipTags(fn func(tag uint32, data []byte)) {
	for n := r.Uvarint(); n > 0 && r.Ok(); n-- {
		tag, size := r.Uvarint(), r.Uvarint()
		data := r.Span(int(size))
		if fn != nil && r.Ok() {
			fn(tag, data)
		}
	}
}

func (r *valueReader) partitions() consumergroup.Assignment {
	a := consumergroup.Assignment{}
	for n := r.count(18); n > 0 && r.Ok(); n-- {
		id := r.Uuid()
		var ps []int32
		for m := r.count(4); m > 0 && r.Ok(); m-- {
			ps = append(ps, r.Int32())
		}
		r.skipTags(nil)
		a[id] = append(a[id], ps...)
	}
	return consumergroup.Normalize(a)
}

func appendPartitions(dst []byte, a consumergroup.Assignment) []byte {
	ids := a.TopicIDs()
	dst = kbin.AppendCompactArrayLen(dst, len(ids))
	for _, id := range ids {
		dst = kbin.AppendUuid(dst, id)
		dst = kbin.AppendCompactArrayLen(dst, len(a[id]))
		for _, p := range a[id] {
			dst = kbin.AppendInt32(dst, p)
		}
		dst = kbin.AppendUvarint(dst, 0) // no tags
	}
	return dst
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// consumerRecords are the records of a group's changes.
func consumerRecords(group string, ch consumergroup.Changes) []kv {
	var recs []kv
	value := func() []byte { return kbin.AppendInt16(nil, consumerValueVersion) }
	if ch.EpochChanged {
		v := kbin.AppendInt32(value(), ch.Epoch)
		// Tag 0: the metadata hash (int64, 8 bytes).
		v = kbin.AppendUvarint(v, 1)
		v = kbin.AppendUvarint(v, 0)
		v = kbin.AppendUvarint(v, 8)
		v = kbin.AppendInt64(v, int64(ch.MetadataHash))
		recs = append(recs, kv{consumerKey{typ: recConsumerGroup, group: group}.append(nil), v})
	}
	for _, id := range ch.Removed {
		for _, typ := range []int16{recConsumerCurrent, recConsumerTarget, recConsumerMember} {
			recs = append(recs, kv{key: consumerKey{typ: typ, group: group, member: id}.append(nil)})
		}
	}
	for _, m := range ch.Members {
		v := value()
		v = kbin.AppendCompactNullableString(v, nullable(m.InstanceID))
		v = kbin.AppendCompactNullableString(v, nullable(m.RackID))
		v = kbin.AppendCompactString(v, m.ClientID)
		v = kbin.AppendCompactString(v, m.ClientHost)
		v = kbin.AppendCompactArrayLen(v, len(m.Topics))
		for _, t := range m.Topics {
			v = kbin.AppendCompactString(v, t)
		}
		v = kbin.AppendCompactNullableString(v, nullable(m.Regex))
		v = kbin.AppendInt32(v, int32(m.RebalanceTimeout.Milliseconds()))
		v = kbin.AppendCompactNullableString(v, nullable(m.Assignor))
		if m.Classic == nil {
			v = kbin.AppendUvarint(v, 0)
		} else {
			// Tag 0: ClassicMemberMetadata, for a member that speaks the
			// classic protocol.
			cm := appendClassicMeta(nil, m.Classic)
			v = kbin.AppendUvarint(v, 1)
			v = kbin.AppendUvarint(v, 0)
			v = kbin.AppendUvarint(v, uint32(len(cm)))
			v = append(v, cm...)
		}
		recs = append(recs, kv{consumerKey{typ: recConsumerMember, group: group, member: m.ID}.append(nil), v})

		c := value()
		c = kbin.AppendInt32(c, m.Epoch)
		c = kbin.AppendInt32(c, m.PreviousEpoch)
		c = kbin.AppendInt8(c, int8(m.State))
		c = appendPartitions(c, m.Assigned)
		c = appendPartitions(c, m.Revoking)
		c = kbin.AppendUvarint(c, 0)
		recs = append(recs, kv{consumerKey{typ: recConsumerCurrent, group: group, member: m.ID}.append(nil), c})
	}
	ids := make([]string, 0, len(ch.Targets))
	for id := range ch.Targets {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		v := appendPartitions(value(), ch.Targets[id])
		v = kbin.AppendUvarint(v, 0)
		recs = append(recs, kv{consumerKey{typ: recConsumerTarget, group: group, member: id}.append(nil), v})
	}
	if ch.AssignmentEpochChanged {
		v := kbin.AppendInt32(value(), ch.AssignmentEpoch)
		v = kbin.AppendUvarint(v, 0)
		recs = append(recs, kv{consumerKey{typ: recConsumerTargetMD, group: group}.append(nil), v})
	}
	return recs
}

// errConsumerRecord wraps what a consumer-group record failed with.
var errConsumerRecord = errors.New("unreadable consumer-group record")

// applyConsumerRecord replays one consumer-group record into its group's
// state (g.mu held; g.consumer is created when missing).
func (g *Group) applyConsumerRecord(cfg consumergroup.Config, k consumerKey, value []byte) error {
	if k.typ == recConsumerPartMeta || k.typ == recConsumerRegex {
		return nil
	}
	if g.consumer == nil {
		if value == nil {
			return nil // a tombstone of a group that is not one (any more)
		}
		if len(g.members) > 0 {
			// A consumer record after the group's classic generation:
			// the protocol changed; the classic members are gone.
			g.members, g.static, g.pending = map[string]*member{}, map[string]string{}, map[string]Timer{}
		}
		g.consumer = consumergroup.New(g.ID, cfg)
		g.protocolType, g.protocol, g.generation, g.state = ConsumerTypeName, "", 0, StateEmpty
	}
	g.consumerLoading = true
	cg := g.consumer
	if value == nil {
		switch k.typ {
		case recConsumerGroup:
			// The group was deleted (or went back to the classic
			// protocol): its consumer state ends here.
			g.consumer, g.protocolType, g.leftConsumer = nil, "", true
		case recConsumerTarget:
			cg.RestoreTarget(k.member, nil)
		case recConsumerMember, recConsumerCurrent:
			cg.RestoreRemoveMember(k.member)
		}
		return nil
	}
	r, err := newValueReader(value)
	if err != nil {
		return err
	}
	switch k.typ {
	case recConsumerGroup:
		epoch := r.Int32()
		var hash uint64
		r.skipTags(func(tag uint32, data []byte) {
			if tag == 0 && len(data) == 8 {
				hash = uint64((&kbin.Reader{Src: data}).Int64())
			}
		})
		if err := r.Complete(); err != nil {
			return err
		}
		cg.RestoreEpoch(epoch, hash)
	case recConsumerTargetMD:
		epoch := r.Int32()
		r.skipTags(nil)
		if err := r.Complete(); err != nil {
			return err
		}
		cg.RestoreAssignmentEpoch(epoch)
	case recConsumerTarget:
		a := r.partitions()
		r.skipTags(nil)
		if err := r.Complete(); err != nil {
			return err
		}
		cg.RestoreTarget(k.member, a)
	case recConsumerMember:
		m := consumergroup.MemberRecord{ID: k.member}
		m.InstanceID, m.RackID = deref(r.CompactNullableString()), deref(r.CompactNullableString())
		m.ClientID, m.ClientHost = r.CompactString(), r.CompactString()
		for n := r.count(1); n > 0 && r.Ok(); n-- {
			m.Topics = append(m.Topics, r.CompactString())
		}
		m.Regex = deref(r.CompactNullableString())
		m.RebalanceTimeout = time.Duration(r.Int32()) * time.Millisecond
		m.Assignor = deref(r.CompactNullableString())
		var classicErr error
		r.skipTags(func(tag uint32, data []byte) {
			if tag == 0 {
				m.Classic, classicErr = readClassicMeta(data)
			}
		})
		if err := r.Complete(); err != nil {
			return err
		}
		if classicErr != nil {
			return classicErr
		}
		cg.RestoreMemberMetadata(m)
	case recConsumerCurrent:
		m := consumergroup.MemberRecord{ID: k.member, Epoch: r.Int32(), PreviousEpoch: r.Int32(), State: consumergroup.MemberState(r.Int8())}
		m.Assigned = r.partitions()
		m.Revoking = r.partitions()
		r.skipTags(nil)
		if err := r.Complete(); err != nil {
			return err
		}
		cg.RestoreMemberAssignment(m)
	}
	return nil
}

// appendClassicMeta appends a classic member's metadata as the nullable
// struct ClassicMemberMetadata (present: 1; session timeout; supported
// protocols, each a name and the member's metadata for it).
func appendClassicMeta(dst []byte, c *consumergroup.ClassicMeta) []byte {
	dst = kbin.AppendInt8(dst, 1)
	dst = kbin.AppendInt32(dst, int32(c.SessionTimeout.Milliseconds()))
	dst = kbin.AppendCompactArrayLen(dst, len(c.Protocols))
	for _, p := range c.Protocols {
		dst = kbin.AppendCompactString(dst, p.Name)
		dst = kbin.AppendCompactBytes(dst, p.Metadata)
		dst = kbin.AppendUvarint(dst, 0)
	}
	return kbin.AppendUvarint(dst, 0)
}

// readClassicMeta reads what appendClassicMeta wrote (nil for a null).
func readClassicMeta(b []byte) (*consumergroup.ClassicMeta, error) {
	r := &valueReader{Reader: kbin.Reader{Src: b}}
	if r.Int8() < 0 {
		return nil, r.Complete()
	}
	c := &consumergroup.ClassicMeta{SessionTimeout: time.Duration(r.Int32()) * time.Millisecond}
	for n := r.count(3); n > 0 && r.Ok(); n-- {
		p := consumergroup.ClassicProtocol{Name: r.CompactString(), Metadata: slices.Clone(r.CompactBytes())}
		r.skipTags(nil)
		c.Protocols = append(c.Protocols, p)
	}
	r.skipTags(nil)
	if err := r.Complete(); err != nil {
		return nil, fmt.Errorf("classic member metadata: %w", err)
	}
	return c, nil
}
