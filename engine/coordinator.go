package engine

import (
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// Coordinator is the group coordinator: it owns every consumer group and
// its committed offsets, and keeps them in the internal compacted topic
// __consumer_offsets ("everything is a log"): each commit and each
// completed generation is a record there, written and fdatasync'ed before
// it is acknowledged, and replayed into memory at start. The record
// formats are Kafka's own (kmsg OffsetCommitKey/Value, GroupMetadataKey/
// Value), so Kafka's tools can read the topic.
type Coordinator struct {
	eng   *Engine
	cfg   GroupConfig
	sched Scheduler

	mu     sync.RWMutex // guards groups, loaded; taken before any Group.mu
	groups map[string]*Group
	topic  *Topic
	// loaded marks, in cluster mode, the __consumer_offsets partitions
	// whose groups this broker has replayed as their leader (see
	// LoadPartition); nil on a single node, which serves every group.
	loaded map[int32]bool

	// txnMu guards txnOffsets: the offsets a producer committed in its
	// open transaction, by __consumer_offsets partition and producer id
	// (txnoffsets.go); a leaf lock.
	txnMu      sync.Mutex
	txnOffsets map[txnOffsetsKey][]groupOffset

	// shareGroups are the share groups (sharecoord.go), guarded by mu;
	// a group id is a share group or a classic/consumer one, not both
	// while it has members.
	shareGroups map[string]*shareGroup
}

// Offsets-topic layout.
const (
	offsetsPartitions   = 1
	offsetsSegmentBytes = "8388608"
	// MaxOffsetMetadata bounds the metadata string of a commit
	// (offset.metadata.max.bytes).
	MaxOffsetMetadata = 4096
)

func newCoordinator(e *Engine, cfg GroupConfig) *Coordinator {
	def := DefaultConfig().Groups
	if cfg.MinSessionTimeout <= 0 {
		cfg.MinSessionTimeout = def.MinSessionTimeout
	}
	if cfg.MaxSessionTimeout <= 0 {
		cfg.MaxSessionTimeout = def.MaxSessionTimeout
	}
	if cfg.Consumer.MaxMetadataBytes <= 0 {
		cfg.Consumer.MaxMetadataBytes = cfg.maxMetadataBytes()
	}
	return &Coordinator{eng: e, cfg: cfg, sched: realScheduler{}, groups: map[string]*Group{}}
}

// start creates __consumer_offsets if needed and replays it. In cluster
// mode the topic is the cluster's (replicated, created by the controller)
// and each partition is replayed when this broker becomes its leader.
func (c *Coordinator) start() error {
	if c.eng.cfg.Replicated {
		c.loaded = map[int32]bool{}
		return nil
	}
	t := c.eng.Topic(OffsetsTopic)
	if t == nil {
		var err error
		t, err = c.eng.CreateTopic(CreateTopicRequest{
			Name: OffsetsTopic, Partitions: offsetsPartitions, ReplicationFactor: 1, Internal: true,
			Configs: map[string]string{"cleanup.policy": "compact", "segment.bytes": offsetsSegmentBytes},
		})
		if err != nil {
			return fmt.Errorf("create %s: %w", OffsetsTopic, err)
		}
	}
	c.topic = t
	return c.replay()
}

// replay rebuilds groups and offsets from __consumer_offsets.
func (c *Coordinator) replay() error {
	commits, groups := 0, 0
	for _, p := range c.topic.Partitions() {
		l, err := p.Log()
		if err != nil {
			return fmt.Errorf("%s is offline: %w", p, err)
		}
		n, m, err := c.replayLog(p, l)
		if err != nil {
			return err
		}
		commits, groups = commits+n, groups+m
	}
	for _, p := range c.topic.Partitions() {
		c.finishConsumerLoads(p.Index)
	}
	c.eng.logger.Info("loaded consumer groups", "records_commits", commits, "records_groups", groups, "groups", len(c.groups))
	return nil
}

// replayLog applies one __consumer_offsets partition's records and counts
// the commits and group records.
//
// Offsets committed in a transaction (TxnOffsetCommit) are transactional
// batches of the producer: they wait in txnOffsets until the producer's
// marker says commit (then they apply) or abort (then they are dropped).
func (c *Coordinator) replayLog(p *Partition, l *wal.Log) (commits, groups int, err error) {
	_, commits, groups, err = c.replayLogFrom(p, l, l.StartOffset())
	return commits, groups, err
}

// replayLogFrom is replayLog from offset from on; next is where it ended
// (the log end it saw).
func (c *Coordinator) replayLogFrom(p *Partition, l *wal.Log, from int64) (next int64, commits, groups int, err error) {
	next, err = replayBatchesFrom(p, l, from, func(h *batch.Header, b []byte) error {
		if h.Control() {
			typ, err := batch.ControlRecordType(b, h)
			if err != nil {
				c.eng.logger.Warn("skipping unreadable control batch in "+OffsetsTopic, "offset", h.BaseOffset, "err", err)
				return nil
			}
			c.completeTxnOffsets(p.Index, h.ProducerID, typ == batch.ControlCommit)
			return nil
		}
		return forEachRecord(b, h, func(r *batch.Record) {
			if h.Transactional() {
				if err := c.stageTxnOffset(p.Index, h.ProducerID, r.Key, r.Value); err != nil {
					c.eng.logger.Warn("skipping unreadable transactional commit in "+OffsetsTopic, "offset", h.BaseOffset+int64(r.OffsetDelta), "err", err)
				}
				return
			}
			kind, err := c.apply(r.Key, r.Value)
			if err != nil {
				c.eng.logger.Warn("skipping unreadable record in "+OffsetsTopic, "offset", h.BaseOffset+int64(r.OffsetDelta), "err", err)
			}
			switch kind {
			case 1:
				commits++
			case 2:
				groups++
			}
		})
	})
	return next, commits, groups, err
}

// replayBatches calls fn with every stored batch of l, CRC-checked, in
// order (an internal topic's replay at start).
func replayBatches(p *Partition, l *wal.Log, fn func(h *batch.Header, b []byte) error) error {
	_, err := replayBatchesFrom(p, l, l.StartOffset(), fn)
	return err
}

// replayBatchesFrom is replayBatches from offset from (at most the log
// start) to the log end it sees first, which it returns.
func replayBatchesFrom(p *Partition, l *wal.Log, from int64, fn func(h *batch.Header, b []byte) error) (int64, error) {
	end := l.EndOffset()
	off := max(from, l.StartOffset())
	for off < end {
		buf, err := l.ReadBytes(nil, off, 4<<20, end)
		if err != nil {
			return off, fmt.Errorf("replay %s at %d: %w", p, off, err)
		}
		if len(buf) == 0 {
			break
		}
		for len(buf) > 0 {
			n := int(batch.BatchLength(buf)) + batch.LogOverhead
			h, err := batch.CheckStored(buf[:n])
			if err != nil {
				return off, fmt.Errorf("replay %s: %w", p, err)
			}
			if err := fn(&h, buf[:n]); err != nil {
				return off, err
			}
			off = h.NextOffset()
			buf = buf[n:]
		}
	}
	return max(off, end), nil
}

// forEachRecord calls fn with each record of batch b.
func forEachRecord(b []byte, h *batch.Header, fn func(r *batch.Record)) error {
	it, _, err := batch.Records(b, h, nil)
	if err != nil {
		return fmt.Errorf("batch at %d: %w", h.BaseOffset, err)
	}
	for {
		r, ok := it.Next()
		if !ok {
			return nil
		}
		fn(&r)
	}
}

// LoadPartition replays partition i of the cluster's __consumer_offsets
// after this broker became its leader (cluster mode; the publisher calls
// it): its groups are served from then on. Until then they answer
// COORDINATOR_LOAD_IN_PROGRESS.
func (c *Coordinator) LoadPartition(i int32) error {
	t := c.offsetsTopic()
	if t == nil || t.Partition(i) == nil {
		return fmt.Errorf("engine: %s has no partition %d", OffsetsTopic, i)
	}
	p := t.Partition(i)
	l, err := p.ReplicaLog()
	if err != nil {
		return err
	}
	c.unload(i) // what a previous leadership left
	next, commits, groups, err := c.replayLogFrom(p, l, l.StartOffset())
	if err != nil {
		return err
	}
	// The tail appended meanwhile (a transaction marker, most likely) is
	// replayed on the partition's shard, which then stages no append
	// until the partition counts as loaded: every marker is either in
	// the replay or completes its offsets after it (AppendTxnMarkers).
	err = p.shard.Call(func() error {
		_, n, m, err := c.replayLogFrom(p, l, next)
		if err != nil {
			return err
		}
		commits, groups = commits+n, groups+m
		c.finishConsumerLoads(i) // before any heartbeat is served
		c.mu.Lock()
		c.loaded[i] = true
		c.mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	c.eng.logger.Info("coordinating the groups of an offsets partition", "partition", p.String(), "records_commits", commits, "records_groups", groups)
	return nil
}

// Loaded reports whether partition i of __consumer_offsets is replayed
// and its groups served here (cluster mode).
func (c *Coordinator) Loaded(i int32) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.loaded[i]
}

// UnloadPartition forgets the groups of partition i of __consumer_offsets
// after this broker lost its leadership (cluster mode): they answer
// NOT_COORDINATOR, and what their timers still do is never written (see
// storeGroup).
func (c *Coordinator) UnloadPartition(i int32) {
	c.mu.RLock()
	was := c.loaded[i]
	c.mu.RUnlock()
	c.unload(i)
	if was {
		c.eng.logger.Info("no longer coordinating the groups of an offsets partition", "partition", OffsetsTopic+"-"+fmt.Sprint(i))
	}
}

func (c *Coordinator) unload(i int32) {
	c.mu.Lock()
	delete(c.loaded, i)
	n := c.partitionCount()
	for id, g := range c.groups {
		if n > 0 && OffsetsPartitionFor(id, n) == i {
			g.detached.Store(true)
			delete(c.groups, id)
		}
	}
	c.mu.Unlock()
	c.txnMu.Lock()
	for k := range c.txnOffsets {
		if k.part == i {
			delete(c.txnOffsets, k)
		}
	}
	c.txnMu.Unlock()
}

// offsetsTopic is __consumer_offsets: the local one, or in cluster mode
// the cluster's once the publisher created it (nil before).
func (c *Coordinator) offsetsTopic() *Topic {
	if c.topic != nil {
		return c.topic
	}
	if t := c.eng.Topic(OffsetsTopic); t != nil && t.Internal {
		return t
	}
	return nil
}

func (c *Coordinator) partitionCount() int {
	if t := c.offsetsTopic(); t != nil {
		return len(t.Partitions())
	}
	return 0
}

// OffsetsPartitionFor is the __consumer_offsets partition of group among
// n partitions (fnv-1a of the group id, mod n); the cluster's
// FindCoordinator uses it to name the partition's leader.
func OffsetsPartitionFor(group string, n int) int32 {
	h := fnv.New32a()
	h.Write([]byte(group))
	return int32(h.Sum32() % uint32(n))
}

// apply replays one record: 1 for an offset commit, 2 for group metadata.
func (c *Coordinator) apply(key, value []byte) (int, error) {
	if len(key) < 2 {
		return 0, errors.New("short key")
	}
	switch v := int16(key[0])<<8 | int16(key[1]); v {
	case 0, 1:
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(key); err != nil {
			return 0, err
		}
		g := c.group(k.Group, true)
		tp := TopicPartition{k.Topic, k.Partition}
		g.mu.Lock()
		if value == nil {
			delete(g.offsets, tp)
		} else {
			var val kmsg.OffsetCommitValue
			if err := val.ReadFrom(value); err != nil {
				g.unlock()
				return 0, err
			}
			g.offsets[tp] = CommittedOffset{Offset: val.Offset, LeaderEpoch: val.LeaderEpoch, Metadata: val.Metadata, CommitTime: val.CommitTimestamp}
		}
		g.unlock()
		c.dropIfUnused(k.Group)
		return 1, nil
	case 2:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(key); err != nil {
			return 0, err
		}
		if value == nil {
			c.mu.Lock()
			delete(c.groups, k.Group)
			c.mu.Unlock()
			return 2, nil
		}
		var val kmsg.GroupMetadataValue
		if err := val.ReadFrom(value); err != nil {
			return 0, err
		}
		snap := GroupSnapshot{ProtocolType: val.ProtocolType, Generation: val.Generation, StateSince: val.CurrentStateTimestamp}
		if val.Protocol != nil {
			snap.Protocol = *val.Protocol
		}
		if val.Leader != nil {
			snap.Leader = *val.Leader
		}
		for _, m := range val.Members {
			snap.Members = append(snap.Members, MemberSnapshot{MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID, ClientHost: m.ClientHost,
				RebalanceTimeout: time.Duration(m.RebalanceTimeoutMillis) * time.Millisecond, SessionTimeout: time.Duration(m.SessionTimeoutMillis) * time.Millisecond,
				Subscription: m.Subscription, Assignment: m.Assignment})
		}
		c.group(k.Group, true).restore(snap)
		return 2, nil
	case recConsumerGroup, recConsumerPartMeta, recConsumerMember, recConsumerTargetMD, recConsumerTarget, recConsumerCurrent, recConsumerRegex:
		k, err := readConsumerKey(key)
		if err != nil {
			return 0, err
		}
		g := c.group(k.group, value != nil) // a tombstone creates nothing
		if g == nil {
			return 2, nil
		}
		g.mu.Lock()
		err = g.applyConsumerRecord(c.cfg.Consumer, k, value)
		g.unlock()
		if err != nil {
			return 0, fmt.Errorf("%w: group %q, type %d: %w", errConsumerRecord, k.group, k.typ, err)
		}
		if value == nil {
			c.dropIfUnused(k.group)
		}
		return 2, nil
	default:
		return 0, fmt.Errorf("unknown key version %d", v)
	}
}

// finishConsumerLoads ends the replay of the consumer-protocol groups of
// an offsets partition whose records were just replayed
// (consumergroup.Group.Loaded): their members get fresh sessions and
// timers. It runs before the partition's groups are served. A group whose
// records do not add up (two owners of a partition, say) loses its
// members, which rejoin.
func (c *Coordinator) finishConsumerLoads(partition int32) {
	n := c.partitionCount()
	for _, g := range c.Groups() {
		if n > 0 && OffsetsPartitionFor(g.ID, n) != partition {
			continue
		}
		g.mu.Lock()
		if g.consumerLoading {
			g.consumerLoading = false
			if g.consumer != nil {
				if err := g.consumer.Loaded(c.sched.Now()); err != nil {
					c.eng.logger.Warn("dropping the members of a consumer group whose records do not add up; they rejoin", "group", g.ID, "err", err)
					g.consumer.Reset()
					g.consumerUnsaved = true // the next change writes it all, tombstones included
				}
				c.armConsumerTimer(g)
			}
		}
		g.unlock()
	}
}

// dropIfUnused forgets a group that has neither offsets nor members (after
// replaying tombstones).
func (c *Coordinator) dropIfUnused(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[id]
	if g == nil {
		return
	}
	g.mu.Lock()
	// One that just left the consumer protocol is kept: the classic
	// record that follows is the downgrade's (leftConsumer).
	unused := len(g.offsets) == 0 && len(g.members) == 0 && g.generation == 0 && g.consumer == nil && !g.leftConsumer
	g.unlock()
	if unused {
		delete(c.groups, id)
	}
}

// group returns the group, creating it when create is set.
func (c *Coordinator) group(id string, create bool) *Group {
	c.mu.RLock()
	g := c.groups[id]
	c.mu.RUnlock()
	if g != nil || !create {
		return g
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if g = c.groups[id]; g == nil {
		g = newGroup(id, &c.cfg, c.sched, c.storeGroup)
		g.topics, g.coord = engineTopics{c.eng}, c
		c.groups[id] = g
	}
	return g
}

// Group returns a group, creating it (empty) when create is set; nil when
// it does not exist and create is not set.
func (c *Coordinator) Group(id string, create bool) (*Group, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty group id", kerr.InvalidGroupID)
	}
	if err := c.checkCoordinator(id); err != nil {
		return nil, err
	}
	if create && c.isShareGroup(id) {
		return nil, fmt.Errorf("%w: group %q is a share group with members", kerr.InconsistentGroupProtocol, id)
	}
	return c.group(id, create), nil
}

// Groups returns every group, sorted by id.
func (c *Coordinator) Groups() []*Group {
	c.mu.RLock()
	out := make([]*Group, 0, len(c.groups))
	for _, g := range c.groups {
		out = append(out, g)
	}
	c.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (c *Coordinator) partitionFor(group string) *Partition {
	t := c.offsetsTopic()
	if t == nil {
		return nil
	}
	ps := t.Partitions()
	return ps[OffsetsPartitionFor(group, len(ps))]
}

type kv struct{ key, value []byte }

// write appends records to the group's __consumer_offsets partition and
// waits until they are durable (fdatasync'ed, unless write caching).
func (c *Coordinator) write(group string, recs []kv) error {
	return c.writeAs(group, recs, nil)
}

// writeAs is write with the records in a transactional batch of the
// given producer (TxnOffsetCommit) when txn is set.
func (c *Coordinator) writeAs(group string, recs []kv, txn *TxnMarker) error {
	return c.writeThen(group, recs, txn, nil)
}

// writeThen is writeAs calling written, when set, as soon as the records
// are written, before any marker appended after them completes.
func (c *Coordinator) writeThen(group string, recs []kv, txn *TxnMarker, written func()) error {
	p := c.partitionFor(group)
	if p == nil {
		return fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, OffsetsTopic)
	}
	b := batch.NewBuilder()
	if txn != nil {
		b.ProducerID, b.ProducerEpoch, b.Transactional = txn.ProducerID, txn.ProducerEpoch, true
	}
	err := appendBuilt(p, b, c.sched.Now().UnixMilli(), recs, written)
	if errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return err // the transaction's answer (TxnOffsetCommit), not the log's
	}
	if err != nil {
		if errors.Is(err, kerr.NotLeaderForPartition) {
			// The partition's leadership moved (cluster mode): so did the
			// group's coordinator; the commit may or may not be there.
			return fmt.Errorf("%w: %s moved to another broker: %w", kerr.NotCoordinator, p, err)
		}
		return fmt.Errorf("%w: write %s: %w", kerr.CoordinatorNotAvailable, OffsetsTopic, err)
	}
	return nil
}

// appendRecords appends records as one batch to an internal topic's
// partition and waits until they are durable (fdatasync'ed, unless
// write caching).
func appendRecords(p *Partition, ts int64, recs []kv) error {
	return appendBuilt(p, batch.NewBuilder(), ts, recs, nil)
}

// appendBuilt appends recs as one batch of b, acks=all, and waits;
// written, when set, runs in the append's completion on success.
func appendBuilt(p *Partition, b *batch.Builder, ts int64, recs []kv, written func()) error {
	for _, r := range recs {
		b.Add(ts, r.key, r.value, nil)
	}
	data, err := b.Build(nil, batch.CodecNone)
	if err != nil {
		return err
	}
	h, err := batch.ParseHeader(data)
	if err != nil {
		return err
	}
	done := make(chan AppendResult, 1)
	p.Shard().Append(&AppendRequest{Partition: p, Batches: [][]byte{data}, Headers: []batch.Header{h}, Acks: -1, Bytes: len(data), Internal: true,
		Done: func(r AppendResult) {
			if r.Err == nil && written != nil {
				written()
			}
			done <- r
		}})
	return (<-done).Err
}

// storeGroup persists a generation (Group.persist calls it, unlocked).
func (c *Coordinator) storeGroup(g *Group, s GroupSnapshot, done func(error)) {
	rec := groupMetadataRecord(g.ID, s)
	go func() {
		c.mu.RLock()
		current := c.groups[g.ID] == g
		c.mu.RUnlock()
		if !current {
			// Unloaded (its partition's leadership moved): never write a
			// detached group's state over the new coordinator's.
			done(fmt.Errorf("%w: group %q is no longer coordinated here", kerr.NotCoordinator, g.ID))
			return
		}
		done(c.write(g.ID, []kv{rec}))
	}()
}

// groupMetadataRecord is a classic generation as Kafka's GroupMetadata
// record.
func groupMetadataRecord(group string, s GroupSnapshot) kv {
	key := (&kmsg.GroupMetadataKey{Version: 2, Group: group}).AppendTo(nil)
	val := kmsg.GroupMetadataValue{Version: 3, ProtocolType: s.ProtocolType, Generation: s.Generation, CurrentStateTimestamp: s.StateSince}
	if s.Protocol != "" {
		p := s.Protocol
		val.Protocol = &p
	}
	if s.Leader != "" {
		l := s.Leader
		val.Leader = &l
	}
	for _, m := range s.Members {
		val.Members = append(val.Members, kmsg.GroupMetadataValueMember{MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID, ClientHost: m.ClientHost,
			RebalanceTimeoutMillis: int32(m.RebalanceTimeout.Milliseconds()), SessionTimeoutMillis: int32(m.SessionTimeout.Milliseconds()),
			Subscription: nonNil(m.Subscription), Assignment: nonNil(m.Assignment)})
	}
	return kv{key, val.AppendTo(nil)}
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// OffsetCommit is one partition's commit.
type OffsetCommit struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    *string
}

// CommitOffsets validates the member and generation and stores the
// commits durably. errs has one entry per commit (nil: stored); err fails
// the whole request.
func (c *Coordinator) CommitOffsets(groupID, memberID string, instanceID *string, generation int32, commits []OffsetCommit) (errs []error, err error) {
	g, err := c.Group(groupID, true)
	if err != nil {
		return nil, err
	}
	errs, recs, offs, err := c.checkedCommitRecords(g, memberID, instanceID, generation, commits)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return errs, nil
	}
	if err := c.write(groupID, recs); err != nil {
		return nil, err
	}
	g.mu.Lock()
	for _, o := range offs {
		g.offsets[o.tp] = o.off
	}
	g.unlock()
	return errs, nil
}

// checkedCommitRecords checks a commit's member (Group.CheckCommit), then
// builds the records of the commits it may write (commitRecords); errs
// has one entry per commit, STALE_MEMBER_EPOCH for a partition the
// member did not own at the epoch it sent.
func (c *Coordinator) checkedCommitRecords(g *Group, memberID string, instanceID *string, generation int32, commits []OffsetCommit) (errs []error, recs []kv, offs []groupOffset, err error) {
	stale, err := g.CheckCommit(memberID, instanceID, generation, c.commitParts(commits))
	if err != nil {
		return nil, nil, nil, err
	}
	errs = make([]error, len(commits))
	kept, at := dropStale(commits, stale, errs)
	keptErrs, recs, offs := c.commitRecords(g.ID, kept)
	for i, e := range keptErrs {
		errs[at[i]] = e
	}
	return errs, recs, offs, nil
}

// commitRecords checks each commit (known partition, metadata size) and
// builds the __consumer_offsets records of those that pass: errs has one
// entry per commit, recs and offs one per record.
func (c *Coordinator) commitRecords(groupID string, commits []OffsetCommit) (errs []error, recs []kv, offs []groupOffset) {
	errs = make([]error, len(commits))
	now := c.sched.Now().UnixMilli()
	for i, cm := range commits {
		t := c.eng.Topic(cm.Topic)
		if t == nil || t.Partition(cm.Partition) == nil {
			errs[i] = fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, cm.Topic, cm.Partition)
			continue
		}
		md := ""
		if cm.Metadata != nil {
			md = *cm.Metadata
		}
		if len(md) > MaxOffsetMetadata {
			errs[i] = fmt.Errorf("%w: %d bytes of metadata, the limit is %d", kerr.OffsetMetadataTooLarge, len(md), MaxOffsetMetadata)
			continue
		}
		key := (&kmsg.OffsetCommitKey{Version: 1, Group: groupID, Topic: cm.Topic, Partition: cm.Partition}).AppendTo(nil)
		val := (&kmsg.OffsetCommitValue{Version: 3, Offset: cm.Offset, LeaderEpoch: cm.LeaderEpoch, Metadata: md, CommitTimestamp: now}).AppendTo(nil)
		recs = append(recs, kv{key, val})
		offs = append(offs, groupOffset{group: groupID, tp: TopicPartition{cm.Topic, cm.Partition},
			off: CommittedOffset{Offset: cm.Offset, LeaderEpoch: cm.LeaderEpoch, Metadata: md, CommitTime: now}})
	}
	return errs, recs, offs
}

// FetchedOffset is a committed offset as OffsetFetch reports it.
type FetchedOffset struct {
	Topic     string
	Partition int32
	CommittedOffset
	Found bool
	// Unstable: an open transaction committed an offset of this
	// partition that is not visible yet (OffsetFetch's require_stable
	// answers UNSTABLE_OFFSET_COMMIT).
	Unstable bool
}

// FetchOffsets returns the group's committed offsets: for the given
// partitions (not committed: Found false), or all of them when topics is
// nil.
func (c *Coordinator) FetchOffsets(groupID string, topics map[string][]int32) ([]FetchedOffset, error) {
	if groupID == "" {
		return nil, fmt.Errorf("%w: empty group id", kerr.InvalidGroupID)
	}
	if err := c.checkCoordinator(groupID); err != nil {
		return nil, err
	}
	g := c.group(groupID, false)
	var out []FetchedOffset
	defer func() { c.markUnstable(groupID, out) }()
	if topics == nil {
		if g == nil {
			return nil, nil
		}
		g.mu.Lock()
		for tp, o := range g.offsets {
			out = append(out, FetchedOffset{Topic: tp.Topic, Partition: tp.Partition, CommittedOffset: o, Found: true})
		}
		g.unlock()
		sort.Slice(out, func(i, j int) bool {
			if out[i].Topic != out[j].Topic {
				return out[i].Topic < out[j].Topic
			}
			return out[i].Partition < out[j].Partition
		})
		return out, nil
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		for _, p := range topics[t] {
			f := FetchedOffset{Topic: t, Partition: p}
			if g != nil {
				g.mu.Lock()
				o, ok := g.offsets[TopicPartition{t, p}]
				g.unlock()
				f.CommittedOffset, f.Found = o, ok
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// DeleteGroup removes an empty group and its offsets.
func (c *Coordinator) DeleteGroup(id string) error {
	if err := c.checkCoordinator(id); err != nil {
		return err
	}
	g := c.group(id, false)
	if g == nil {
		// Not a classic or consumer group: a share group, if anything
		// (the share-partition states are looked for only then: in a
		// cluster that reads every partition's).
		share, err := c.deleteShareGroup(id)
		if err != nil || share {
			return err
		}
		return fmt.Errorf("%w: group %q", kerr.GroupIDNotFound, id)
	}
	// After any consumer-protocol change being written: its records
	// must not land after the deletion's tombstones.
	g.consumerWrite.Lock()
	defer g.consumerWrite.Unlock()
	g.mu.Lock()
	if g.state != StateEmpty || !g.leaveConsumerProtocol() {
		st := g.state
		if g.consumer != nil {
			st = GroupState(g.consumer.State())
		}
		g.unlock()
		return fmt.Errorf("%w: group %q is %s; stop its members first", kerr.NonEmptyGroup, id, st)
	}
	g.setState(StateDead)
	var recs []kv
	for tp := range g.offsets {
		recs = append(recs, kv{key: (&kmsg.OffsetCommitKey{Version: 1, Group: id, Topic: tp.Topic, Partition: tp.Partition}).AppendTo(nil)})
	}
	g.unlock()
	// The consumer protocol's group records too, whichever protocol the
	// group speaks now: one it spoke before may still be in the log.
	for _, typ := range []int16{recConsumerTargetMD, recConsumerGroup} {
		recs = append(recs, kv{key: consumerKey{typ: typ, group: id}.append(nil)})
	}
	recs = append(recs, kv{key: (&kmsg.GroupMetadataKey{Version: 2, Group: id}).AppendTo(nil)})
	if err := c.write(id, recs); err != nil {
		g.mu.Lock()
		g.setState(StateEmpty)
		g.unlock()
		return err
	}
	c.mu.Lock()
	if c.groups[id] == g {
		g.detached.Store(true)
		delete(c.groups, id)
	}
	c.mu.Unlock()
	return nil
}

// DeleteOffsets removes committed offsets of partitions the group is not
// subscribed to (OffsetDelete). errs has one entry per partition.
func (c *Coordinator) DeleteOffsets(id string, parts []TopicPartition) ([]error, error) {
	if err := c.checkCoordinator(id); err != nil {
		return nil, err
	}
	g := c.group(id, false)
	if g == nil {
		return nil, fmt.Errorf("%w: group %q", kerr.GroupIDNotFound, id)
	}
	subscribed := g.subscribedTopics()
	errs := make([]error, len(parts))
	var recs []kv
	var del []TopicPartition
	for i, p := range parts {
		if subscribed[p.Topic] {
			errs[i] = fmt.Errorf("%w: group %q consumes %s", kerr.GroupSubscribedToTopic, id, p.Topic)
			continue
		}
		tp := TopicPartition{p.Topic, p.Partition}
		recs = append(recs, kv{key: (&kmsg.OffsetCommitKey{Version: 1, Group: id, Topic: tp.Topic, Partition: tp.Partition}).AppendTo(nil)})
		del = append(del, tp)
	}
	if len(recs) > 0 {
		if err := c.write(id, recs); err != nil {
			return nil, err
		}
		g.mu.Lock()
		for _, tp := range del {
			delete(g.offsets, tp)
		}
		g.unlock()
	}
	return errs, nil
}

// subscribedTopics returns the topics the members' consumer-protocol
// subscriptions name.
func (g *Group) subscribedTopics() map[string]bool {
	g.mu.Lock()
	defer g.unlock()
	if g.consumer != nil {
		return g.consumer.SubscribedTopics(g.topics.view())
	}
	out := map[string]bool{}
	if g.protocolType != "consumer" {
		return out
	}
	for _, m := range g.members {
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(m.metadataFor(g.protocol)); err != nil {
			continue
		}
		for _, t := range meta.Topics {
			out[t] = true
		}
	}
	return out
}

// GroupLag is a group's committed offset and lag in one partition, for
// metrics.
type GroupLag struct {
	Group     string
	Topic     string
	Partition int32
	// Committed is the group's committed offset; -1 when it has none.
	Committed int64
	// Lag is the high watermark minus Committed (at least 0) or, without
	// a commit, minus the log start offset (every record in the log is
	// still to be consumed); -1 when the partition is offline.
	Lag int64
}

// Lags returns, for every group, the committed offset and lag of each
// partition of each topic the group has a commit in or whose members are
// subscribed to it. This is what `ringlog group describe` shows, so the
// metrics and the tool agree.
func (c *Coordinator) Lags() []GroupLag {
	var out []GroupLag
	for _, g := range c.Groups() {
		topics := g.subscribedTopics()
		g.mu.Lock()
		offsets := maps.Clone(g.offsets)
		g.unlock()
		for tp := range offsets {
			topics[tp.Topic] = true
		}
		for _, name := range slices.Sorted(maps.Keys(topics)) {
			t := c.eng.Topic(name)
			if t == nil {
				continue
			}
			for _, p := range t.Partitions() {
				committed, lag := int64(-1), int64(-1)
				o, ok := offsets[TopicPartition{name, p.Index}]
				if ok {
					committed = o.Offset
				}
				if hw := p.HighWatermark(); hw >= 0 {
					if ok {
						lag = max(hw-o.Offset, 0)
					} else {
						lag = max(hw-p.LogStartOffset(), 0)
					}
				}
				out = append(out, GroupLag{Group: g.ID, Topic: name, Partition: p.Index, Committed: committed, Lag: lag})
			}
		}
	}
	return out
}
