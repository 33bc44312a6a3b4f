package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine/sharegroup"
	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// ShareConfig holds the broker-wide settings of share groups (KIP-932);
// a group config of the same meaning overrides them per group
// (GroupConfigKeys).
type ShareConfig struct {
	// Group: session timeout, heartbeat interval, max members.
	Group sharegroup.Config
	// LockDuration is how long a fetch's acquisition lasts
	// (group.share.record.lock.duration.ms).
	LockDuration time.Duration
	// DeliveryLimit is how many deliveries a record gets before it is
	// archived (group.share.delivery.count.limit).
	DeliveryLimit int16
	// MaxInFlight bounds a share-partition's in-flight records
	// (group.share.partition.max.record.locks).
	MaxInFlight int
	// MaxGroups bounds the share groups a coordinator holds
	// (group.share.max.groups): each may keep in-flight state for every
	// partition it reads.
	MaxGroups int
}

// DefaultShareConfig returns Kafka's defaults.
func DefaultShareConfig() ShareConfig {
	return ShareConfig{
		Group:         sharegroup.Config{SessionMillis: 45000, HeartbeatMillis: 5000, MaxSize: 200},
		LockDuration:  30 * time.Second,
		DeliveryLimit: 5,
		MaxInFlight:   2000,
		MaxGroups:     100,
	}
}

// ShareAcquisition is a range of offsets a share fetch acquired.
type ShareAcquisition = sharegroup.Acquisition

// ShareAck is one acknowledgement batch of a share fetch or acknowledge.
type ShareAck struct {
	First, Last int64
	Types       []int8
}

// SharePartitions is the share-partition leader's side of share groups:
// for each share-partition of a topic partition this broker leads, the
// in-flight records (sharegroup.Partition), loaded from the share
// coordinator (ShareStates) on first use, written back there before an
// acknowledgement is answered.
type SharePartitions struct {
	eng *Engine
	mu  sync.Mutex
	// parts is guarded by mu; each part by its own lock.
	parts map[ShareKey]*sharePart
}

// sharePart is one share-partition on its leader. mu guards everything
// in it; a write of its state runs with mu released (writing set, others
// wait on written), and covers every change made before it started, so
// concurrent acknowledgements share one write (group commit).
type sharePart struct {
	key         ShareKey
	mu          sync.Mutex
	written     *sync.Cond // on mu: a write ended
	writing     bool
	p           *sharegroup.Partition
	leaderEpoch int32
	stateEpoch  int32
	saved       uint64 // p.Changes() at the last durable write
	stored      bool   // a state was written (or read): a new one is written at first use
	// loading is closed when a load of p (part: a read from the share
	// coordinator, a metadata sync) ends; nil while none runs.
	loading chan struct{}
}

// Owner is who holds acquired records: one share session of a member
// (records acquired in a session are acknowledged in it; a member's new
// session never acknowledges the old one's).
func Owner(member string, session uint64) string {
	return member + "\x00" + strconv.FormatUint(session, 10)
}

// ownedBy matches the owners of member, whatever the session.
func ownedBy(member string) func(string) bool {
	return func(o string) bool {
		rest, ok := strings.CutPrefix(o, member+"\x00")
		return ok && !strings.Contains(rest, "\x00")
	}
}

// maxShareParts bounds the share-partitions a broker keeps in memory;
// past it, those with nothing acquired and nothing unwritten are dropped
// (they load again from their state when used).
const maxShareParts = 100_000

// evictIdle drops share-partitions with nothing acquired and nothing
// unwritten, and reports whether any was (s.mu held).
func (s *SharePartitions) evictIdle() bool {
	n := 0
	for k, sp := range s.parts {
		if !sp.mu.TryLock() {
			continue
		}
		idle := sp.loading == nil && (sp.p == nil || (!sp.writing && sp.stored && sp.saved == sp.p.Changes() && !sp.p.Holds()))
		sp.mu.Unlock()
		if idle {
			delete(s.parts, k)
			n++
			if n >= maxShareParts/10 {
				break
			}
		}
	}
	return n > 0
}

func newSharePartitions(e *Engine) *SharePartitions {
	return &SharePartitions{eng: e, parts: map[ShareKey]*sharePart{}}
}

// Shares returns the engine's share-partition leader side.
func (e *Engine) Shares() *SharePartitions { return e.shares }

// limits returns group's share-partition limits.
func (s *SharePartitions) limits(group string) sharegroup.Limits {
	c := s.eng.shareSettings(group)
	return sharegroup.Limits{LockMillis: c.LockDuration.Milliseconds(), DeliveryLimit: c.DeliveryLimit, MaxInFlight: c.MaxInFlight}
}

// LockMillis is group's acquisition lock duration, as ShareFetch reports it.
func (s *SharePartitions) LockMillis(group string) int32 {
	return int32(s.eng.shareSettings(group).LockDuration.Milliseconds())
}

// part returns k's share-partition for p, loading it from the share
// coordinator, or starting it from share.auto.offset.reset, when this
// broker has none for p's current leader epoch.
//
// A share-partition with no state starts from share.auto.offset.reset as
// it stood at since (when the request asking for it arrived): in cluster
// mode it first waits until this broker's metadata holds every change
// committed before then (syncGroupConfigs).
func (s *SharePartitions) part(k ShareKey, p *Partition, since time.Time) (*sharePart, error) {
	if err := s.checkLeader(p); err != nil {
		return nil, err
	}
	epoch := p.LeaderEpoch()
	s.mu.Lock()
	sp := s.parts[k]
	if sp == nil || sp.leaderEpoch != epoch {
		if sp == nil && len(s.parts) >= maxShareParts && !s.evictIdle() {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: this broker holds %d share-partitions, all with records in flight", kerr.CoordinatorNotAvailable, len(s.parts))
		}
		sp = &sharePart{key: k, leaderEpoch: epoch}
		sp.written = sync.NewCond(&sp.mu)
		s.parts[k] = sp
	}
	s.mu.Unlock()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for tries := 0; sp.p == nil; tries++ {
		if sp.loading != nil {
			ch := sp.loading
			sp.mu.Unlock()
			<-ch
			sp.mu.Lock()
			continue
		}
		// Loaded without sp.mu: the state may come from another
		// broker (up to shareCallTimeout) and the start may wait
		// for the metadata, while the publisher takes sp.mu to apply
		// the group's configs (applyLimits).
		ch := make(chan struct{})
		sp.loading = ch
		sp.mu.Unlock()
		l, err := s.load(k, p, epoch, since)
		sp.mu.Lock()
		sp.loading = nil
		close(ch)
		if err != nil {
			return nil, err
		}
		if cur := s.limits(k.Group); cur != l.lim {
			// The group's configs changed while it loaded:
			// applyLimits found no partition to apply them to. Load
			// again with them (a restore archives by the delivery
			// limit), or, changing once more, take them as they are.
			if tries == 0 {
				continue
			}
			l.p.SetLimits(cur)
		}
		sp.p, sp.saved, sp.stored, sp.stateEpoch = l.p, l.saved, l.stored, l.stateEpoch
	}
	return sp, nil
}

// loadedPart is a share-partition's state as load found or made it.
type loadedPart struct {
	p          *sharegroup.Partition
	saved      uint64
	stored     bool
	stateEpoch int32
	lim        sharegroup.Limits // what p was made with
}

// load reads k's state from its share coordinator, or starts it from
// share.auto.offset.reset as it stood at since.
func (s *SharePartitions) load(k ShareKey, p *Partition, epoch int32, since time.Time) (loadedPart, error) {
	for synced := false; ; synced = true {
		st, ok, err := s.eng.shareStates.Read(k, epoch)
		if err != nil {
			return loadedPart{}, err
		}
		lim := s.limits(k.Group)
		l := loadedPart{stateEpoch: st.StateEpoch, lim: lim} // after a deletion: past the tombstone's
		if ok {
			rp, err := sharegroup.Restore(st.State, lim, maxShareSpan)
			if err != nil {
				return loadedPart{}, fmt.Errorf("%w: share-partition %s: %w", kerr.KafkaStorageError, k, err)
			}
			l.p, l.saved, l.stored = rp, rp.Changes(), true
			return l, nil
		}
		if h := s.eng.clusterHooks(); !synced && h != nil && h.SyncMetadata != nil {
			if err := syncGroupConfigs(h, k, since); err != nil {
				return loadedPart{}, err
			}
			if now := p.LeaderEpoch(); now != epoch {
				return loadedPart{}, fmt.Errorf("%w: %s: the leader epoch moved from %d to %d while its share-partition started", kerr.NotLeaderForPartition, p, epoch, now)
			}
			continue // a reset may have stored a state meanwhile
		}
		start, err := s.initialOffset(k.Group, p)
		if err != nil {
			return loadedPart{}, err
		}
		// Written at its first use (persist), so that a restart does
		// not start it again somewhere else (latest moves).
		l.p = sharegroup.NewPartition(start, lim)
		return l, nil
	}
}

// shareStartSync bounds how long a share-partition's first fetch waits
// for this broker's metadata to catch up with the controller's.
const shareStartSync = 5 * time.Second

// syncGroupConfigs makes sure, in cluster mode, that this broker's
// metadata holds every group config committed before since, when k's
// share-partition is to start: the AlterConfigs that set its
// share.auto.offset.reset may have been answered by another broker while
// this one's image lagged, and a share-partition started from the
// default (latest) would pass over every record already written. A
// broker that cannot catch up in time refuses the fetch (retriable)
// rather than start it from a guess.
func syncGroupConfigs(h *ClusterHooks, k ShareKey, since time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), shareStartSync)
	defer cancel()
	if err := h.SyncMetadata(ctx, since); err != nil {
		return fmt.Errorf("%w: share-partition %s not started: this broker's metadata may lack the group's share.auto.offset.reset: %w", kerr.LeaderNotAvailable, k, err)
	}
	return nil
}

func (s *SharePartitions) checkLeader(p *Partition) error {
	if err := p.Offline(); err != nil {
		return err
	}
	if p.Replicated() && p.Role() != RoleLeader {
		return fmt.Errorf("%w: %s is not led here", kerr.NotLeaderForPartition, p)
	}
	if !p.Hosted() {
		return fmt.Errorf("%w: %s is not hosted here", kerr.NotLeaderForPartition, p)
	}
	return nil
}

// initialOffset is where a share-partition with no state starts, as the
// group's share.auto.offset.reset says: latest (the high watermark, the
// default), earliest (the log start), or by_duration:<ISO-8601> (the
// first record at or after now minus the duration).
func (s *SharePartitions) initialOffset(group string, p *Partition) (int64, error) {
	reset := s.eng.GroupConfigs(group)["share.auto.offset.reset"]
	switch {
	case reset == "earliest":
		// Share fetches read the local log only: tiered storage's
		// older data is not delivered to share groups.
		return p.LocalStartOffset(), nil
	case strings.HasPrefix(reset, "by_duration:"):
		d, err := parseISODuration(strings.TrimPrefix(reset, "by_duration:"))
		if err != nil {
			return p.HighWatermark(), nil // validated when set
		}
		l, err := p.Log()
		if err != nil {
			return 0, err
		}
		got, ok, err := l.OffsetForTime(time.Now().Add(-d).UnixMilli())
		if err != nil {
			return 0, err
		}
		if !ok {
			return p.HighWatermark(), nil
		}
		return got.Offset, nil
	default:
		return p.HighWatermark(), nil
	}
}

// maxShareRead bounds what one share fetch reads of one partition (at
// least one batch): a window of records, not the whole backlog
// MaxBytes would allow.
const maxShareRead = 4 << 20

// Fetch acquires for owner (Owner: a member's session) up to maxRecords
// records (0: no limit) of group's share-partition of p, reading at most
// maxBytes (at least one batch, at most maxShareRead), and returns the
// whole batches holding them and the acquired ranges (strict: never more
// than maxRecords, see sharegroup.Partition.Acquire). No records is not
// an error. since is when the request arrived (see part).
func (s *SharePartitions) Fetch(since time.Time, group, owner string, p *Partition, maxBytes, maxRecords int, strict bool) ([]byte, []sharegroup.Acquisition, error) {
	k := ShareKey{Group: group, Topic: p.Topic().ID, Partition: p.Index}
	sp, err := s.part(k, p, since)
	if err != nil {
		return nil, nil, err
	}
	l, err := p.Log()
	if err != nil {
		return nil, nil, err
	}
	sp.mu.Lock()
	if s.stale(sp) {
		sp.mu.Unlock()
		return nil, nil, nil // evicted or reset meanwhile: the next fetch loads it again
	}
	sp.p.Expire(time.Now().UnixMilli())
	if ls := p.LocalStartOffset(); sp.p.Start() < ls {
		sp.p.SkipTo(ls) // retention deleted them: nothing to deliver
	}
	// Locks expired (records available again with their delivery counts,
	// or archived at the limit) or the start moved: durable before
	// anything is delivered again, so a restart neither forgets an
	// archiving nor undercounts a delivery.
	if err := s.persist(sp); err != nil {
		sp.mu.Unlock()
		return nil, nil, err
	}
	hw := p.HighWatermark()
	from, ok := sp.p.FetchFrom()
	sp.mu.Unlock()
	if !ok || from >= hw {
		return nil, nil, nil
	}
	// The read runs unlocked; Acquire looks at every offset's state
	// again, and what the log holds does not change below hw.
	buf, err := l.ReadBytes(nil, from, min(max(maxBytes, 1), maxShareRead), hw)
	if errors.Is(err, wal.ErrOffsetOutOfRange) {
		return nil, nil, nil // retention moved the log start meanwhile: the next fetch skips
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read %s at %d: %w", p, from, err)
	}
	var spans []sharegroup.Span
	var at [][2]int // each batch's bytes in buf
	for pos := 0; pos+batch.LogOverhead <= len(buf); {
		n := int(batch.BatchLength(buf[pos:])) + batch.LogOverhead
		if n <= batch.LogOverhead || pos+n > len(buf) {
			break
		}
		h, err := batch.ParseHeader(buf[pos : pos+n])
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s at %d: %w", kerr.CorruptMessage, p, from, err)
		}
		spans = append(spans, sharegroup.Span{First: h.BaseOffset, Last: h.LastOffset(), Control: h.Control()})
		at = append(at, [2]int{pos, pos + n})
		pos += n
	}
	sp.mu.Lock()
	if s.stale(sp) {
		sp.mu.Unlock()
		return nil, nil, nil // reset or deleted meanwhile: the next fetch loads it again
	}
	acq, send := sp.p.Acquire(owner, time.Now().UnixMilli(), from, spans, maxRecords, strict)
	sp.mu.Unlock()
	if len(acq) == 0 {
		return nil, nil, nil
	}
	out := buf[:0] // the batches to send, moved down in place
	for i, ok := range send {
		if ok {
			out = append(out, buf[at[i][0]:at[i][1]]...)
		}
	}
	return out, acq, nil
}

// stale reports whether sp is no longer the share-partition's current
// state here (an admin reset or deleted it, a newer leader epoch took
// over): nothing may be acquired from it.
func (s *SharePartitions) stale(sp *sharePart) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parts[sp.key] != sp
}

// Acknowledge applies owner's acknowledgement batches to group's
// share-partition of p, all or none (the first bad batch's error, and
// nothing applied), and returns once the new state is durable. since is
// when the request arrived (see part).
func (s *SharePartitions) Acknowledge(since time.Time, group, owner string, p *Partition, acks []ShareAck) error {
	k := ShareKey{Group: group, Topic: p.Topic().ID, Partition: p.Index}
	sp, err := s.part(k, p, since)
	if err != nil {
		return err
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if s.stale(sp) {
		return fmt.Errorf("%w: the share-partition was reset; these records are not held any more", kerr.InvalidRecordState)
	}
	for _, a := range acks {
		if err := sp.p.CheckAcknowledge(owner, a.First, a.Last, a.Types); err != nil {
			return err
		}
	}
	now := time.Now().UnixMilli()
	for _, a := range acks {
		if err := sp.p.Acknowledge(owner, now, a.First, a.Last, a.Types); err != nil {
			return err // checked above: not reached
		}
	}
	return s.persist(sp)
}

// persist returns once every change of sp made so far is durable (sp.mu
// held; released while writing). One write covers all the changes made
// before it started: acknowledgements that arrive during a write share
// the next one.
func (s *SharePartitions) persist(sp *sharePart) error {
	target := sp.p.Changes()
	for !sp.stored || sp.saved < target {
		if sp.writing {
			sp.written.Wait()
			continue
		}
		if s.stale(sp) {
			// Evicted, reset or deleted: another sharePart may hold the
			// key's newer state; this one must not overwrite it.
			return fmt.Errorf("%w: the share-partition was reset or reloaded; fetch again", kerr.InvalidRecordState)
		}
		sp.writing = true
		ch := sp.p.Changes()
		st := ShareState{State: sp.p.State(), StateEpoch: sp.stateEpoch, LeaderEpoch: sp.leaderEpoch}
		sp.mu.Unlock()
		err := s.eng.shareStates.Write(sp.key, st)
		sp.mu.Lock()
		sp.writing = false
		sp.written.Broadcast()
		if err != nil {
			if errors.Is(err, kerr.FencedStateEpoch) || errors.Is(err, kerr.FencedLeaderEpoch) {
				s.forget(sp) // load it again: an admin or a newer leader changed it
			}
			return err
		}
		sp.saved, sp.stored = max(sp.saved, ch), true
	}
	return nil
}

// forget drops sp: the next use loads the state again.
func (s *SharePartitions) forget(sp *sharePart) {
	s.mu.Lock()
	if s.parts[sp.key] == sp {
		delete(s.parts, sp.key)
	}
	s.mu.Unlock()
}

// ReleaseMember makes the records member of group holds here, in any
// session, available again (it left the group or was removed), and
// persists what changed.
func (s *SharePartitions) ReleaseMember(group, member string) {
	s.release(group, ownedBy(member))
}

// ReleaseOwner makes the records of one share session (Owner) available
// again (the session or its connection closed), and persists what
// changed.
func (s *SharePartitions) ReleaseOwner(group, owner string) {
	s.release(group, func(o string) bool { return o == owner })
}

// ofGroup returns the share-partitions of group held here.
func (s *SharePartitions) ofGroup(group string) []*sharePart {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sps []*sharePart
	for k, sp := range s.parts {
		if k.Group == group {
			sps = append(sps, sp)
		}
	}
	return sps
}

func (s *SharePartitions) release(group string, match func(string) bool) {
	for _, sp := range s.ofGroup(group) {
		sp.mu.Lock()
		if sp.p != nil {
			sp.p.Release(match)
			if err := s.persist(sp); err != nil {
				s.eng.logger.Warn("share-partition state not written after a release", "share_partition", sp.key.String(), "err", err)
			}
		}
		sp.mu.Unlock()
	}
}

// InFlightOf counts one share-partition's records acquired now and
// available for another delivery (released, or their lock expired);
// false when this broker holds no state of it in memory.
func (s *SharePartitions) InFlightOf(k ShareKey) (acquired, redeliver int, ok bool) {
	s.mu.Lock()
	sp := s.parts[k]
	s.mu.Unlock()
	if sp == nil {
		return 0, 0, false
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.p == nil {
		return 0, 0, false
	}
	a, q, _ := sp.p.InFlight()
	return q, a, true
}

// Reset sets group's share-partition of p to start at offset, with no
// record in flight (AlterShareGroupOffsets; the group has no member), and
// returns once it is durable. A fetch or acknowledgement racing it
// loses: its state epoch is older.
func (s *SharePartitions) Reset(group string, topic TopicID, partition int32, offset int64) error {
	k := ShareKey{Group: group, Topic: topic, Partition: partition}
	s.dropKey(k)
	return s.eng.shareStates.Reset(k, offset)
}

// dropGroup forgets every share-partition of group held in memory (the
// group was deleted).
func (s *SharePartitions) dropGroup(group string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.parts {
		if k.Group == group {
			delete(s.parts, k)
		}
	}
}

// Delete removes group's state of topic's partitions (DeleteShareGroupOffsets,
// DeleteGroups).
func (s *SharePartitions) Delete(keys []ShareKey) error {
	var errs []error
	for _, k := range keys {
		s.dropKey(k)
		errs = append(errs, s.eng.shareStates.Delete(k))
	}
	return errors.Join(errs...)
}

func (s *SharePartitions) dropKey(k ShareKey) {
	s.mu.Lock()
	delete(s.parts, k)
	s.mu.Unlock()
}

// groupKeysParallel bounds the share-state reads groupKeys runs at once.
const groupKeysParallel = 16

// groupKeys lists the share-partitions of group that have a state,
// sorted: those this broker coordinates, and in cluster mode those other
// brokers do, found by reading the state of every partition of every
// topic from its share coordinator (one call each, 16 at a time: an
// admin's cost, paid by DescribeShareGroupOffsets of all topics and by
// deleting a share group).
func (s *SharePartitions) groupKeys(group string) ([]ShareKey, error) {
	keys := s.eng.shareStates.Keys(group)
	if s.eng.shareStates.loaded != nil {
		seen := map[ShareKey]bool{}
		for _, k := range keys {
			seen[k] = true
		}
		var ask []ShareKey
		for _, t := range s.eng.Topics() {
			if t.Internal || t.Deleted() {
				continue
			}
			for _, p := range t.Partitions() {
				if k := (ShareKey{Group: group, Topic: t.ID, Partition: p.Index}); !seen[k] {
					ask = append(ask, k)
				}
			}
		}
		found := make([]bool, len(ask))
		errs := make([]error, len(ask))
		var wg sync.WaitGroup
		sem := make(chan struct{}, groupKeysParallel)
		for i, k := range ask {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				_, found[i], errs[i] = s.eng.shareStates.Read(k, -1)
			}()
		}
		wg.Wait()
		for i, k := range ask {
			if errs[i] != nil {
				return nil, fmt.Errorf("the share state of partition %d of topic id %s: %w", k.Partition, k.Topic, errs[i])
			}
			if found[i] {
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, func(a, b ShareKey) int {
		if c := strings.Compare(string(a.Topic[:]), string(b.Topic[:])); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return keys, nil
}

// parseISODuration parses the subset of ISO-8601 durations Kafka's
// by_duration reset takes: PnDTnHnMnS (each part optional, seconds may
// be fractional).
func parseISODuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("duration %q: want ISO-8601 like P1DT2H30M or PT15M", s)
	if !strings.HasPrefix(s, "P") || len(s) < 3 {
		return 0, bad
	}
	s = s[1:]
	var d time.Duration
	inTime := false
	for s != "" {
		if s[0] == 'T' {
			if inTime {
				return 0, bad
			}
			inTime, s = true, s[1:]
			continue
		}
		i := strings.IndexAny(s, "DHMS")
		if i <= 0 {
			return 0, bad
		}
		v, err := strconv.ParseFloat(s[:i], 64)
		if err != nil || v < 0 {
			return 0, bad
		}
		var unit time.Duration
		switch {
		case s[i] == 'D' && !inTime:
			unit = 24 * time.Hour
		case s[i] == 'H' && inTime:
			unit = time.Hour
		case s[i] == 'M' && inTime:
			unit = time.Minute
		case s[i] == 'S' && inTime:
			unit = time.Second
		default:
			return 0, bad
		}
		d += time.Duration(v * float64(unit))
		s = s[i+1:]
	}
	return d, nil
}

// applyLimits gives group's share-partitions the group's current limits
// (a group config changed).
func (s *SharePartitions) applyLimits(group string) {
	lim := s.limits(group)
	for _, sp := range s.ofGroup(group) {
		sp.mu.Lock()
		if sp.p != nil {
			sp.p.SetLimits(lim)
		}
		sp.mu.Unlock()
	}
}
