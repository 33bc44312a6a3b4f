package engine

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine/sharegroup"
	"github.com/ringlog/ringlog/wal/batch"
)

// ShareStateTopic is the internal compacted topic holding the state of
// every share-partition (KIP-932): one snapshot record per change, keyed
// by group, topic id and partition; the last one of a key wins.
const ShareStateTopic = "__share_group_state"

// ShareStatePartitions is the partition count of ShareStateTopic (a
// single broker creates it on first use, a cluster's controller at once).
const ShareStatePartitions = 8

// maxShareSpan bounds the offsets a persisted state's batches may span
// past its start: a state is never wider than its in-flight window, and a
// hostile or corrupt record must not size an allocation.
const maxShareSpan = 1 << 20

// ShareKey names a share-partition: a share group's view of one topic
// partition.
type ShareKey struct {
	Group     string
	Topic     TopicID
	Partition int32
}

func (k ShareKey) String() string {
	return strconv.Quote(k.Group) + "/" + k.Topic.String() + "-" + strconv.Itoa(int(k.Partition))
}

// ShareState is a share-partition's persisted state. A state whose Start
// is NoState is a placeholder: no state (never written, or deleted) but
// the epochs a writer must not go below.
type ShareState struct {
	sharegroup.State
	// StateEpoch grows when an admin resets or deletes the state: the
	// share-partition leader's writes of an older epoch are refused.
	StateEpoch int32
	// LeaderEpoch is the partition leader epoch of the last writer.
	LeaderEpoch int32
}

// NoState is the Start of a placeholder state (ShareState).
const NoState = -1

// The share-state record: key = int16 type 0 (Kafka's ShareSnapshot),
// group, topic id, partition; value = int16 version 0, snapshot epoch,
// state epoch, leader epoch, start offset, and the state batches (first,
// last, state, delivery count). A nil value deletes the key.
const (
	shareSnapshotKey     int16 = 0
	shareSnapshotVersion int16 = 0
	// shareBatchBytes is the encoded size of one state batch.
	shareBatchBytes = 8 + 8 + 1 + 2
)

func appendShareKey(dst []byte, k ShareKey) []byte {
	dst = kbin.AppendInt16(dst, shareSnapshotKey)
	dst = kbin.AppendString(dst, k.Group)
	dst = append(dst, k.Topic[:]...)
	return kbin.AppendInt32(dst, k.Partition)
}

func readShareKey(b []byte) (ShareKey, error) {
	r := kbin.Reader{Src: b}
	var k ShareKey
	if typ := r.Int16(); typ != shareSnapshotKey {
		return k, fmt.Errorf("share state key type %d", typ)
	}
	k.Group = r.String()
	k.Topic = r.Uuid()
	k.Partition = r.Int32()
	if err := r.Complete(); err != nil {
		return k, fmt.Errorf("share state key: %w", err)
	}
	return k, nil
}

func appendShareValue(dst []byte, s ShareState, snapshotEpoch int32) []byte {
	dst = kbin.AppendInt16(dst, shareSnapshotVersion)
	dst = kbin.AppendInt32(dst, snapshotEpoch)
	dst = kbin.AppendInt32(dst, s.StateEpoch)
	dst = kbin.AppendInt32(dst, s.LeaderEpoch)
	dst = kbin.AppendInt64(dst, s.Start)
	dst = kbin.AppendArrayLen(dst, len(s.Batches))
	for _, b := range s.Batches {
		dst = kbin.AppendInt64(dst, b.First)
		dst = kbin.AppendInt64(dst, b.Last)
		dst = kbin.AppendInt8(dst, int8(b.State))
		dst = kbin.AppendInt16(dst, b.DeliveryCount)
	}
	return dst
}

func readShareValue(b []byte) (ShareState, error) {
	r := kbin.Reader{Src: b}
	var s ShareState
	if v := r.Int16(); v != shareSnapshotVersion {
		return s, fmt.Errorf("share state value version %d", v)
	}
	r.Int32() // snapshot epoch
	s.StateEpoch = r.Int32()
	s.LeaderEpoch = r.Int32()
	s.Start = r.Int64()
	n := r.ArrayLen()
	if n < 0 || int(n) > len(r.Src)/shareBatchBytes {
		return s, fmt.Errorf("share state value: %d batches in %d bytes", n, len(r.Src))
	}
	s.Batches = make([]sharegroup.StateBatch, n)
	for i := range s.Batches {
		s.Batches[i] = sharegroup.StateBatch{First: r.Int64(), Last: r.Int64(), State: sharegroup.RecordState(r.Int8()), DeliveryCount: r.Int16()}
	}
	if err := r.Complete(); err != nil {
		return s, fmt.Errorf("share state value: %w", err)
	}
	return s, nil
}

// checkShareState refuses a state replay could not read back (a
// placeholder: no batches).
func checkShareState(st ShareState) error {
	if st.Start == NoState {
		if len(st.Batches) > 0 {
			return fmt.Errorf("share-partition state: a placeholder with %d batches", len(st.Batches))
		}
		return nil
	}
	return sharegroup.CheckState(st.State, maxShareSpan)
}

// checkShareKey refuses a key the record format cannot hold.
func checkShareKey(k ShareKey) error {
	if k.Group == "" || len(k.Group) > math.MaxInt16 || k.Partition < 0 {
		return fmt.Errorf("%w: share-partition key: group of %d bytes, partition %d", kerr.InvalidRequest, len(k.Group), k.Partition)
	}
	return nil
}

// ShareStates is the share coordinator: it owns ShareStateTopic, keeps
// the last state of each share-partition in memory (rebuilt from the
// topic at start, or when this broker becomes the leader of one of its
// partitions in cluster mode) and writes every new state there before it
// answers. The share-partition leaders (SharePartitions) read and write
// through it.
type ShareStates struct {
	eng *Engine
	// mu guards states and loaded; it is not held across a write (a
	// key's writes are serialized by their share-partition).
	mu     sync.Mutex
	states map[ShareKey]ShareState
	// loaded: the partitions replayed (cluster mode); nil on a single
	// broker, where every partition is replayed at start.
	loaded map[int32]bool
	snap   int32
	// createMu serializes the creation of ShareStateTopic on first use.
	createMu sync.Mutex
	// keyMu serialize a key's check, append and store (striped by key):
	// a write checked against an epoch lands before any newer one.
	keyMu [64]sync.Mutex
}

func (s *ShareStates) lockKey(k ShareKey) func() {
	m := &s.keyMu[sharePartitionFor(k, len(s.keyMu))]
	m.Lock()
	return m.Unlock
}

func newShareStates(e *Engine) *ShareStates {
	s := &ShareStates{eng: e, states: map[ShareKey]ShareState{}}
	if e.cfg.Replicated {
		s.loaded = map[int32]bool{}
	}
	return s
}

// ShareStates returns the engine's share coordinator.
func (e *Engine) ShareStates() *ShareStates { return e.shareStates }

// SharePartitionFor is the ShareStateTopic partition of a key among n.
func SharePartitionFor(k ShareKey, n int) int32 { return sharePartitionFor(k, n) }

func sharePartitionFor(k ShareKey, n int) int32 {
	h := fnv.New32a()
	h.Write([]byte(k.Group))
	h.Write(k.Topic[:])
	h.Write([]byte(strconv.Itoa(int(k.Partition))))
	return int32(h.Sum32() % uint32(n))
}

// topic returns ShareStateTopic, created on a single broker on first use
// (replaying nothing: it is new). In cluster mode the controller creates
// it; nil until then.
func (s *ShareStates) topic(create bool) (*Topic, error) {
	if t := s.eng.Topic(ShareStateTopic); t != nil {
		return t, nil
	}
	if s.loaded != nil || !create {
		return nil, nil
	}
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if t := s.eng.Topic(ShareStateTopic); t != nil {
		return t, nil
	}
	t, err := s.eng.CreateTopic(CreateTopicRequest{
		Name: ShareStateTopic, Partitions: ShareStatePartitions, ReplicationFactor: 1, Internal: true,
		Configs: map[string]string{"cleanup.policy": "compact", "segment.bytes": offsetsSegmentBytes},
	})
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return s.eng.Topic(ShareStateTopic), nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: create %s: %w", kerr.CoordinatorNotAvailable, ShareStateTopic, err)
	}
	return t, nil
}

// partition returns the ShareStateTopic partition holding k, checking
// this broker coordinates it (cluster mode).
func (s *ShareStates) partition(k ShareKey, create bool) (*Partition, error) {
	t, err := s.topic(create)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, ShareStateTopic)
	}
	ps := t.Partitions()
	p := ps[sharePartitionFor(k, len(ps))]
	if s.loaded != nil {
		if err := checkLeads(p, ShareStateTopic, "share-partition "+k.String(), s.Loaded); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// start replays ShareStateTopic on a single broker.
func (s *ShareStates) start() error {
	if s.loaded != nil {
		return nil
	}
	t := s.eng.Topic(ShareStateTopic)
	if t == nil {
		return nil
	}
	n := 0
	for _, p := range t.Partitions() {
		m, err := s.replay(p)
		if err != nil {
			return err
		}
		n += m
	}
	s.eng.logger.Info("loaded share-partition states", "records", n, "states", len(s.states))
	return nil
}

// replay applies one ShareStateTopic partition's records.
func (s *ShareStates) replay(p *Partition) (int, error) {
	n, _, err := s.replayFrom(p, -1)
	return n, err
}

// replayFrom applies a ShareStateTopic partition's records from offset
// from (-1: the log start) and returns how many and the offset after.
func (s *ShareStates) replayFrom(p *Partition, from int64) (int, int64, error) {
	l, err := p.ReplicaLog()
	if err != nil {
		return 0, 0, fmt.Errorf("%s is offline: %w", p, err)
	}
	if from < 0 {
		from = l.StartOffset()
	}
	n := 0
	next, err := replayBatchesFrom(p, l, from, func(h *batch.Header, b []byte) error {
		if h.Control() {
			return nil
		}
		return forEachRecord(b, h, func(r *batch.Record) {
			n++
			k, err := readShareKey(r.Key)
			if err != nil {
				s.eng.logger.Warn("skipping unreadable record in "+ShareStateTopic, "offset", h.BaseOffset+int64(r.OffsetDelta), "err", err)
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if r.Value == nil {
				delete(s.states, k)
				return
			}
			st, err := readShareValue(r.Value)
			if err == nil {
				err = checkShareState(st)
			}
			if err != nil {
				s.eng.logger.Warn("skipping unreadable record in "+ShareStateTopic, "offset", h.BaseOffset+int64(r.OffsetDelta), "err", err)
				return
			}
			s.states[k] = st
		})
	})
	return n, next, err
}

// LoadPartition replays partition i of ShareStateTopic: this broker now
// leads it (cluster mode; the publisher calls it). Its keys answer
// COORDINATOR_LOAD_IN_PROGRESS until then.
func (s *ShareStates) LoadPartition(i int32) error {
	t := s.eng.Topic(ShareStateTopic)
	if t == nil || t.Partition(i) == nil {
		return fmt.Errorf("engine: %s has no partition %d", ShareStateTopic, i)
	}
	p := t.Partition(i)
	s.UnloadPartition(i) // what a previous leadership left
	// The replay runs on the partition's shard: no write lands between
	// the replay and the partition counting as loaded.
	n, next, err := s.replayFrom(p, -1)
	if err != nil {
		return err
	}
	err = p.shard.Call(func() error {
		m, _, err := s.replayFrom(p, next) // the tail written meanwhile
		if err != nil {
			return err
		}
		n += m
		s.mu.Lock()
		s.loaded[i] = true
		s.mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	s.eng.logger.Info("coordinating the share-partition states of a partition", "partition", p.String(), "records", n)
	return nil
}

// Loaded reports whether partition i was replayed (cluster mode).
func (s *ShareStates) Loaded(i int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded == nil || s.loaded[i]
}

// UnloadPartition forgets partition i's states: another broker leads it.
func (s *ShareStates) UnloadPartition(i int32) {
	if t := s.eng.Topic(ShareStateTopic); t != nil {
		s.dropPartition(t, i)
	}
	s.mu.Lock()
	delete(s.loaded, i)
	s.mu.Unlock()
}

func (s *ShareStates) dropPartition(t *Topic, i int32) {
	n := len(t.Partitions())
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.states {
		if sharePartitionFor(k, n) == i {
			delete(s.states, k)
		}
	}
}

// ShareStateRemote reaches the share coordinator of a key another broker
// leads (cluster mode; package cluster implements it over Kafka's
// share-state APIs). Its errors wrap a Kafka error.
type ShareStateRemote interface {
	Read(k ShareKey, leaderEpoch int32) (ShareState, bool, error)
	Write(k ShareKey, st ShareState) error
	Reset(k ShareKey, start int64) error
	Delete(k ShareKey) error
}

// remote returns the share coordinator elsewhere that serves k, nil when
// this broker does (or should: a single broker, a partition it leads but
// is still loading, whose error is returned).
func (s *ShareStates) remote(k ShareKey) (ShareStateRemote, error) {
	if s.loaded == nil {
		return nil, nil
	}
	_, err := s.partition(k, false)
	if err == nil {
		return nil, nil
	}
	if h := s.eng.clusterHooks(); errors.Is(err, kerr.NotCoordinator) && h != nil && h.ShareStates != nil {
		return h.ShareStates, nil
	}
	return nil, err
}

// Read returns k's state, from the share coordinator wherever it is;
// false when there is none (then the state epoch a new state must start
// at, past a deletion's, is set). leaderEpoch is the reading partition
// leader's (-1: not a leader): an older leader's writes are fenced from
// then on.
func (s *ShareStates) Read(k ShareKey, leaderEpoch int32) (ShareState, bool, error) {
	r, err := s.remote(k)
	if err != nil {
		return ShareState{}, false, err
	}
	if r != nil {
		return r.Read(k, leaderEpoch)
	}
	return s.ServeRead(k, leaderEpoch)
}

// ServeRead is Read on this broker only (the share coordinator's side of
// a ReadShareGroupState): NOT_COORDINATOR when it does not lead k's
// partition. A reader of a newer leader epoch than the state's makes
// the raise durable (a placeholder when there is no state) before it is
// answered: the older leader's writes are fenced from then on, here and
// after the coordinator moves.
func (s *ShareStates) ServeRead(k ShareKey, leaderEpoch int32) (ShareState, bool, error) {
	if err := checkShareKey(k); err != nil {
		return ShareState{}, false, err
	}
	if _, err := s.partition(k, false); err != nil && s.loaded != nil {
		return ShareState{}, false, err
	}
	if h := s.eng.clusterHooks(); h != nil && h.MayLead != nil && !h.MayLead() {
		return ShareState{}, false, fmt.Errorf("%w: this broker's leadership lease lapsed", kerr.NotCoordinator)
	}
	defer s.lockKey(k)()
	s.mu.Lock()
	st, ok := s.states[k]
	s.mu.Unlock()
	if !ok {
		st = ShareState{State: sharegroup.State{Start: NoState}, LeaderEpoch: -1}
	}
	if s.loaded != nil && leaderEpoch > st.LeaderEpoch {
		raised := st
		raised.LeaderEpoch = leaderEpoch
		if err := s.writeLocked(k, raised); err != nil {
			return ShareState{}, false, err
		}
		st = raised
	}
	if st.Start == NoState {
		return ShareState{StateEpoch: st.StateEpoch, LeaderEpoch: st.LeaderEpoch}, false, nil
	}
	return st, true, nil
}

// Write makes st k's state once it is durable. A write of an older state
// epoch (an admin reset or deleted it since) is FENCED_STATE_EPOCH, of an
// older leader epoch (a newer leader of the partition wrote)
// FENCED_LEADER_EPOCH.
func (s *ShareStates) Write(k ShareKey, st ShareState) error {
	r, err := s.remote(k)
	if err != nil {
		return err
	}
	if r != nil {
		return r.Write(k, st)
	}
	return s.ServeWrite(k, st)
}

// ServeWrite is Write on this broker only (WriteShareGroupState).
func (s *ShareStates) ServeWrite(k ShareKey, st ShareState) error {
	if len(st.Batches) > 0 && st.Batches[len(st.Batches)-1].Last-st.Start >= maxShareSpan {
		return fmt.Errorf("%w: share-partition %s spans %d offsets, more than %d", kerr.InvalidRecordState, k, st.Batches[len(st.Batches)-1].Last-st.Start+1, maxShareSpan)
	}
	if err := checkShareKey(k); err != nil {
		return err
	}
	if err := sharegroup.CheckState(st.State, maxShareSpan); err != nil {
		return fmt.Errorf("%w: %w", kerr.InvalidRequest, err) // what replay would refuse
	}
	defer s.lockKey(k)()
	return s.writeLocked(k, st)
}

func (s *ShareStates) writeLocked(k ShareKey, st ShareState) error {
	p, err := s.partition(k, true)
	if err != nil {
		return err
	}
	s.mu.Lock()
	cur, ok := s.states[k]
	if ok {
		if st.StateEpoch < cur.StateEpoch {
			s.mu.Unlock()
			return fmt.Errorf("%w: share-partition %s was reset (state epoch %d, written %d)", kerr.FencedStateEpoch, k, cur.StateEpoch, st.StateEpoch)
		}
		if st.LeaderEpoch < cur.LeaderEpoch {
			s.mu.Unlock()
			return fmt.Errorf("%w: share-partition %s has a newer leader (epoch %d, written %d)", kerr.FencedLeaderEpoch, k, cur.LeaderEpoch, st.LeaderEpoch)
		}
	}
	s.snap++
	val := appendShareValue(nil, st, s.snap)
	s.mu.Unlock()
	if err := appendRecords(p, time.Now().UnixMilli(), []kv{{appendShareKey(nil, k), val}}); err != nil {
		if errors.Is(err, kerr.NotLeaderForPartition) {
			return fmt.Errorf("%w: %s moved to another broker: %w", kerr.NotCoordinator, p, err)
		}
		return fmt.Errorf("%w: write %s: %w", kerr.CoordinatorNotAvailable, ShareStateTopic, err)
	}
	s.mu.Lock()
	s.states[k] = st
	s.mu.Unlock()
	return nil
}

// Reset makes k's state start at offset with nothing in flight, at a
// newer state epoch (AlterShareGroupOffsets): the share-partition
// leader's writes of the old epoch are fenced from then on.
func (s *ShareStates) Reset(k ShareKey, offset int64) error {
	r, err := s.remote(k)
	if err != nil {
		return err
	}
	if r != nil {
		return r.Reset(k, offset)
	}
	return s.ServeReset(k, offset)
}

// ServeReset is Reset on this broker only (InitializeShareGroupState).
func (s *ShareStates) ServeReset(k ShareKey, offset int64) error {
	if offset < 0 || offset > math.MaxInt64-maxShareSpan {
		return fmt.Errorf("%w: start offset %d", kerr.InvalidRequest, offset)
	}
	if err := checkShareKey(k); err != nil {
		return err
	}
	if _, err := s.partition(k, true); err != nil && s.loaded != nil {
		return err
	}
	defer s.lockKey(k)()
	s.mu.Lock()
	cur := s.states[k]
	s.mu.Unlock()
	if cur.StateEpoch == math.MaxInt32 {
		return fmt.Errorf("%w: share-partition %s: state epoch exhausted", kerr.InvalidRequest, k)
	}
	return s.writeLocked(k, ShareState{State: sharegroup.State{Start: offset}, StateEpoch: cur.StateEpoch + 1, LeaderEpoch: cur.LeaderEpoch})
}

// Delete removes k's state (a tombstone); nothing when there is none. A
// writer still holding the old state is fenced by the deletion's epoch.
func (s *ShareStates) Delete(k ShareKey) error {
	r, err := s.remote(k)
	if err != nil {
		return err
	}
	if r != nil {
		return r.Delete(k)
	}
	return s.ServeDelete(k)
}

// ServeDelete is Delete on this broker only (DeleteShareGroupState): the
// state becomes a placeholder of the next state epoch (durable: a holder
// of the deleted state is fenced here and after the coordinator moves).
func (s *ShareStates) ServeDelete(k ShareKey) error {
	if err := checkShareKey(k); err != nil {
		return err
	}
	defer s.lockKey(k)()
	s.mu.Lock()
	cur, ok := s.states[k]
	s.mu.Unlock()
	if !ok || cur.Start == NoState {
		return nil
	}
	if cur.StateEpoch == math.MaxInt32 {
		return fmt.Errorf("%w: share-partition %s: state epoch exhausted", kerr.InvalidRequest, k)
	}
	return s.writeLocked(k, ShareState{State: sharegroup.State{Start: NoState}, StateEpoch: cur.StateEpoch + 1, LeaderEpoch: cur.LeaderEpoch})
}

// Groups lists the groups with a state held here.
func (s *ShareStates) Groups() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for k, st := range s.states {
		if st.Start != NoState && !seen[k.Group] {
			seen[k.Group] = true
			out = append(out, k.Group)
		}
	}
	return out
}

// Keys returns the keys of group's states held here.
func (s *ShareStates) Keys(group string) []ShareKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ShareKey
	for k, st := range s.states {
		if k.Group == group && st.Start != NoState {
			out = append(out, k)
		}
	}
	return out
}
