package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/tiered"
)

// fakeRemoteMeta stands for the metadata quorum's side of tiered storage
// in cluster mode: it applies a leader's manifest writes as
// metadata.SetRemoteLog does (the next version, at the current leader
// epoch) and hands each applied one to the partition, as the publisher
// would, unless held.
type fakeRemoteMeta struct {
	mu          sync.Mutex
	p           *Partition
	leaderEpoch int32
	version     int64
	manifest    []byte
	writes      int
	// attempts counts every write asked for, refused or not.
	attempts int
	// maxSegments, when set, refuses (INVALID_REQUEST, as a too-large
	// manifest) a manifest with more segments.
	maxSegments int
	// loseAnswer applies the next write that finishes a copy but answers
	// an error, and holds every write from the partition until publish.
	loseAnswer bool
	held       bool
}

// finishes reports whether manifest b finishes a copy.
func finishes(b []byte) bool {
	m, err := tiered.DecodeManifest(b)
	if err != nil {
		return false
	}
	n, _ := finished(m)
	return n > 0
}

func (f *fakeRemoteMeta) set(_ TopicID, _, leaderEpoch int32, version int64, manifest []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.maxSegments > 0 {
		if m, err := tiered.DecodeManifest(manifest); err == nil && len(m.Segments) > f.maxSegments {
			return fmt.Errorf("%w: %d segments", kerr.InvalidRequest, len(m.Segments))
		}
	}
	if leaderEpoch != f.leaderEpoch {
		return fmt.Errorf("%w: leader epoch %d, not %d", kerr.FencedLeaderEpoch, leaderEpoch, f.leaderEpoch)
	}
	if version == f.version && string(manifest) == string(f.manifest) {
		return nil // the same write again (after a lost answer): a no-op
	}
	if version != f.version+1 {
		return fmt.Errorf("%w: version %d after %d", kerr.InvalidUpdateVersion, version, f.version)
	}
	f.version, f.manifest = version, append([]byte(nil), manifest...)
	f.writes++
	if f.loseAnswer && finishes(manifest) {
		f.loseAnswer, f.held = false, true
		return errors.New("connection reset")
	}
	if !f.held {
		f.p.SetRemoteLog(f.version, f.manifest)
	}
	return nil
}

// setLeaderEpoch is the partition's leader epoch the metadata has now.
func (f *fakeRemoteMeta) setLeaderEpoch(epoch int32) {
	f.mu.Lock()
	f.leaderEpoch = epoch
	f.mu.Unlock()
}

// followerOf2 is the replica state of a follower of broker 2 at epoch.
func followerOf2(epoch int32) ReplicaState {
	return ReplicaState{Role: RoleFollower, Leader: 2, LeaderEpoch: epoch, PartitionEpoch: epoch, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}}
}

// publish hands the partition what was applied (after a held write).
func (f *fakeRemoteMeta) publish() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = false
	f.p.SetRemoteLog(f.version, f.manifest)
}

func (f *fakeRemoteMeta) state() (int64, *tiered.Manifest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.version == 0 {
		return 0, &tiered.Manifest{}
	}
	m, err := tiered.DecodeManifest(f.manifest)
	if err != nil {
		panic(err)
	}
	return f.version, m
}

func finished(m *tiered.Manifest) (n int, end int64) {
	for _, s := range m.Segments {
		if s.State == tiered.CopyFinished {
			n++
			end = s.End
		}
	}
	return n, end
}

// tieredClusterTopic opens a replicated engine with a tiered topic of
// one partition whose manifest writes go to a fakeRemoteMeta.
func tieredClusterTopic(t *testing.T) (*Partition, *fakeRemoteMeta) {
	return tieredClusterTopicOn(t, newMemStore())
}

// tieredClusterTopicOn is tieredClusterTopic with its object store.
func tieredClusterTopicOn(t *testing.T, store tiered.Store) (*Partition, *fakeRemoteMeta) {
	t.Helper()
	e := openEngine(t, t.TempDir(), func(c *Config) {
		c.NodeID, c.Replicated = 1, true
		// (RequestTimeout: orphans are deleted again, and forgotten, 200 ms
		// after they were recorded.)
		c.Tier = TierConfig{Store: store, Interval: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, RequestTimeout: 100 * time.Millisecond}
		c.RetentionCheckInterval = 20 * time.Millisecond
	})
	top, err := e.CreateTopic(CreateTopicRequest{Name: "tc", Partitions: 1, ReplicationFactor: -1, Configs: map[string]string{
		"remote.storage.enable": "true", "segment.bytes": "2048", "local.retention.bytes": "4096", "min.insync.replicas": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	p := top.Partition(0)
	f := &fakeRemoteMeta{p: p, leaderEpoch: 1}
	e.SetClusterHooks(ClusterHooks{MayLead: func() bool { return true }, SetRemoteLog: f.set})
	return p, f
}

// In cluster mode the leader's copies write the manifest through the
// metadata, one version after the other, and never to a file; a follower
// copies nothing; a leader whose write's answer was lost waits for the
// metadata to say what was applied, and goes on from there; a leader
// that finds a newer manifest in the metadata (another leader's, while
// it followed) goes on from that one.
func TestTieredClusterManifestInMetadata(t *testing.T) {
	p, f := tieredClusterTopic(t)
	if err := p.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	appendFill(t, p, 12, "a")
	waitUntil(t, "the leader's copies", func() bool {
		_, m := f.state()
		n, _ := finished(m)
		return n >= 3 && p.LocalStartOffset() > 0
	})
	if _, err := os.Stat(filepath.Join(p.dir, tiered.ManifestFile)); err == nil {
		t.Fatal("cluster mode wrote a manifest file")
	}
	// Readers see the remote segments from the metadata's manifest.
	if p.LogStartOffset() != 0 {
		t.Fatalf("log start %d, want 0 (remote)", p.LogStartOffset())
	}

	// A follower copies nothing.
	if err := p.SetReplicaState(followerOf2(2)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	f.mu.Lock()
	writes := f.writes
	f.leaderEpoch = 2
	f.mu.Unlock()
	testenv.Holds(t, 200*time.Millisecond, "a follower writing no manifest", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.writes == writes
	})
	f.mu.Lock()
	// Broker 2 led meanwhile and wrote a version of its own (the same
	// segments, here).
	f.version++
	f.p.SetRemoteLog(f.version, f.manifest)
	f.leaderEpoch = 3
	f.mu.Unlock()
	_, before := f.state()
	_, endBefore := finished(before)

	// Leader again: it goes on from broker 2's version.
	if err := p.SetReplicaState(leaderState(3, 3, 1)); err != nil {
		t.Fatal(err)
	}
	appendFill(t, p, 8, "b")
	waitUntil(t, "copies after the leadership came back", func() bool {
		_, m := f.state()
		_, end := finished(m)
		return end > endBefore && end >= p.LocalStartOffset()
	})
	_, m := f.state()
	checkContiguous(t, m)
}

// checkContiguous fails the test unless m's segments start at 0 and
// follow each other with no gap.
func checkContiguous(t *testing.T, m *tiered.Manifest) {
	t.Helper()
	at := int64(0)
	for i, s := range m.Segments {
		if s.Base != at {
			t.Fatalf("segment %d starts at %d, not at %d: %+v", i, s.Base, at, m.Segments)
		}
		at = s.End
	}
}

// checkObjects fails the test if a finished segment of m lacks one of
// its objects in store.
func checkObjects(t *testing.T, p *Partition, store *memStore, m *tiered.Manifest) {
	t.Helper()
	for _, s := range m.Segments {
		if s.State != tiered.CopyFinished {
			continue
		}
		keys := p.topic.eng.remote.layout.Keys(p.topic.Name, p.topic.ID, p.Index, s.Base, s.ID)
		store.mu.Lock()
		_, okLog := store.objs[keys.Log]
		_, okIndex := store.objs[keys.Index]
		store.mu.Unlock()
		if !okLog || !okIndex {
			t.Fatalf("the metadata names segment [%d, %d) finished, but the store lacks its objects (log %v, index %v)", s.Base, s.End, okLog, okIndex)
		}
	}
}

// The answer of a write that finished a copy is lost (the write was
// applied), and the image has not shown it yet: the uploader sends the
// same write again rather than taking the copy for an orphan and
// deleting objects the metadata names as finished.
func TestTieredClusterLostAnswer(t *testing.T) {
	p, f := tieredClusterTopic(t)
	store := p.topic.eng.remote.store.(*memStore)
	f.loseAnswer = true
	if err := p.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	appendFill(t, p, 12, "a")
	waitUntil(t, "the lost answer", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.held
	})
	waitUntil(t, "more copies (the held image notwithstanding)", func() bool {
		_, m := f.state()
		n, _ := finished(m)
		return n >= 2
	})
	_, m := f.state()
	checkObjects(t, p, store, m)
	f.publish()
	waitUntil(t, "local retention", func() bool { return p.LocalStartOffset() > 0 })
	_, m = f.state()
	checkObjects(t, p, store, m)
	checkContiguous(t, m)
}

// putHookStore runs onPut once, after the first object whose key ends
// with suffix (".rix" when empty) lands.
type putHookStore struct {
	*memStore
	suffix string
	onPut  func(key string)
	once   sync.Once
	fired  bool // under memStore.mu
}

func (s *putHookStore) Put(ctx context.Context, key string, body io.ReadSeeker, size int64) error {
	if err := s.memStore.Put(ctx, key, body, size); err != nil {
		return err
	}
	if strings.HasSuffix(key, cmp.Or(s.suffix, ".rix")) {
		s.once.Do(func() {
			s.onPut(key)
			s.mu.Lock()
			s.fired = true
			s.mu.Unlock()
		})
	}
	return nil
}

// The leadership moves away and back (epoch 1 → 2 → 3) while a copy is
// in flight, and the other leader deleted its objects as an orphan's:
// the copy started at epoch 1 must not be finished at epoch 3.
func TestTieredClusterLeadershipFlap(t *testing.T) {
	ms := newMemStore()
	hs := &putHookStore{memStore: ms}
	p, f := tieredClusterTopicOn(t, hs)
	e := p.topic.eng
	hs.onPut = func(string) {
		// Broker 2 leads at epoch 2 and deletes the copy's objects (the
		// image has it copy-started); then this broker leads again.
		_, m := f.state()
		x := m.Segments[len(m.Segments)-1]
		keys := e.remote.layout.Keys(p.topic.Name, p.topic.ID, p.Index, x.Base, x.ID)
		ms.Delete(context.Background(), keys.Log)
		ms.Delete(context.Background(), keys.Index)
		_ = p.SetReplicaState(followerOf2(2))
		_ = p.SetReplicaState(leaderState(3, 3, 1, 2))
		f.mu.Lock()
		f.leaderEpoch = 3
		f.mu.Unlock()
	}
	if err := p.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	// No copy before every append is in (the flap would refuse the
	// appends after it): the metadata refuses the writes meanwhile.
	f.setLeaderEpoch(99)
	appendFill(t, p, 12, "a")
	f.setLeaderEpoch(1)
	waitUntil(t, "finished copies", func() bool {
		_, m := f.state()
		n, _ := finished(m)
		return n >= 2
	})
	_, m := f.state()
	checkObjects(t, p, ms, m)
	checkContiguous(t, m)
}

// A follower takes the metadata's manifest: readers see its segments,
// and local retention deletes what they cover once its own store shows
// them, though it copies nothing itself.
func TestTieredClusterFollowerFollowsManifest(t *testing.T) {
	p, f := tieredClusterTopic(t)
	f.leaderEpoch = 99 // the metadata refuses this leader's writes: nothing copied
	if err := p.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	appendFill(t, p, 20, "c") // more than local retention keeps
	waitUntil(t, "the leader's refused copies", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.attempts > 0
	})
	if err := p.SetReplicaState(followerOf2(2)); err != nil {
		t.Fatal(err)
	}
	segs := p.log.CopyableSegments(0, p.HighWatermark(), 4)
	if len(segs) < 2 {
		t.Fatalf("%d sealed segments", len(segs))
	}
	m := &tiered.Manifest{TopicID: p.topic.ID.String()}
	for _, ss := range segs[:2] {
		m.Segments = append(m.Segments, tiered.RemoteSegment{ID: tiered.NewSegmentID(), State: tiered.CopyFinished,
			Base: ss.Base, End: ss.End, Size: ss.Size, IndexSize: 10, MaxTimestamp: ss.MaxTimestamp})
		m.CopiedEnd = ss.End
		ss.Release()
	}
	for _, ss := range segs[2:] {
		ss.Release()
	}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// A follower copies nothing, though sealed segments are not copied
	// (this broker's writes as leader were all refused).
	time.Sleep(100 * time.Millisecond)
	f.mu.Lock()
	tried := f.attempts
	f.mu.Unlock()
	testenv.Holds(t, 200*time.Millisecond, "a follower writing no manifest", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.attempts == tried
	})
	p.SetRemoteLog(1, b)
	if end, ok := p.RemoteEnd(); !ok || end != m.CopiedEnd {
		t.Fatalf("remote end %d %v, want %d", end, ok, m.CopiedEnd)
	}
	// Its own store does not hold the segments (another store than the
	// leader's): the local copies stay.
	testenv.Holds(t, 200*time.Millisecond, "the local copies kept (local start 0) while this broker's store lacks them", func() bool {
		return p.LocalStartOffset() == 0
	})
	last := m.Segments[len(m.Segments)-1]
	keys := p.topic.eng.remote.layout.Keys(p.topic.Name, p.topic.ID, p.Index, last.Base, last.ID)
	if err := p.topic.eng.remote.store.Put(context.Background(), keys.Index, strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "local retention below the remote end", func() bool { return p.LocalStartOffset() == m.CopiedEnd })
	// An older version changes nothing.
	p.SetRemoteLog(1, []byte("{}"))
	if end, _ := p.RemoteEnd(); end != m.CopiedEnd {
		t.Fatal("an old version replaced the manifest")
	}
}

// A copy whose leadership ends between its two puts does not put the
// second (checkLeads), and its segment is never finished.
func TestTieredClusterPutStopsWithLeadership(t *testing.T) {
	ms := newMemStore()
	hs := &putHookStore{memStore: ms, suffix: ".log"}
	p, f := tieredClusterTopicOn(t, hs)
	var id string
	hs.onPut = func(key string) {
		id = key
		_ = p.SetReplicaState(followerOf2(2))
	}
	if err := p.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	f.setLeaderEpoch(99) // nothing copied while appending
	appendFill(t, p, 12, "a")
	f.setLeaderEpoch(1)
	waitUntil(t, "the first log object", func() bool {
		hs.mu.Lock()
		defer hs.mu.Unlock()
		return hs.fired
	})
	index := strings.TrimSuffix(id, ".log") + ".rix"
	testenv.Holds(t, 200*time.Millisecond, index+" not put after the leadership ended", func() bool {
		ms.mu.Lock()
		defer ms.mu.Unlock()
		_, put := ms.objs[index]
		return !put
	})
	if _, m := f.state(); len(m.Segments) != 1 || m.Segments[0].State != tiered.CopyStarted {
		t.Fatalf("manifest %+v: want the one copy started", m.Segments)
	}
}

// A new leader records the orphans of its predecessor's copy before it
// deletes their objects: with the record refused, the objects stay.
func TestTieredClusterOrphansRecordedFirst(t *testing.T) {
	p, f := tieredClusterTopic(t)
	store := p.topic.eng.remote.store.(*memStore)
	seg := tiered.RemoteSegment{ID: tiered.NewSegmentID(), State: tiered.CopyStarted, Base: 0, End: 3, Size: 100, IndexSize: 10}
	keys := p.topic.eng.remote.layout.Keys(p.topic.Name, p.topic.ID, p.Index, seg.Base, seg.ID)
	for _, k := range []string{keys.Log, keys.Index} {
		if err := store.Put(context.Background(), k, strings.NewReader("x"), 1); err != nil {
			t.Fatal(err)
		}
	}
	m := &tiered.Manifest{TopicID: p.topic.ID.String(), Segments: []tiered.RemoteSegment{seg}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.version, f.manifest, f.leaderEpoch = 1, b, 99 // every write refused
	f.mu.Unlock()
	p.SetRemoteLog(1, b)
	if err := p.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the orphan's record tried", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.attempts > 0
	})
	testenv.Holds(t, 100*time.Millisecond, "the orphan's objects kept until the record of it is committed", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		_, okLog := store.objs[keys.Log]
		return okLog
	})
	// Accepted (the refused record is sent again): recorded, then its
	// objects deleted, at the latest once its grace is over.
	f.setLeaderEpoch(1)
	waitUntil(t, "the orphan's objects to go", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		_, okLog := store.objs[keys.Log]
		return !okLog
	})
	if _, m := f.state(); len(m.Segments) != 0 {
		t.Fatalf("manifest %+v, want the segment gone", m)
	}
}

// A manifest the metadata can never take (too large) is no pending write:
// remote retention goes on, shrinks it, and the copies resume.
func TestTieredClusterTooLargeManifest(t *testing.T) {
	p, f := tieredClusterTopic(t)
	f.maxSegments = 3
	if err := p.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	appendFill(t, p, 20, "a")
	var end3 int64
	waitUntil(t, "three copies, the most the metadata takes", func() bool {
		_, m := f.state()
		n, end := finished(m)
		end3 = end
		return n == 3
	})
	if err := p.topic.eng.AlterTopicConfig("tc", map[string]*string{"retention.bytes": new("4096")}, false, false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "copies past the first three once retention made room", func() bool {
		_, m := f.state()
		_, end := finished(m)
		return end > end3
	})
}
