package engine

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/tiered"
)

// indexCache holds decoded index objects of remote segments, engine-wide,
// bounded in bytes (their encoded size; least recently used out).
type indexCache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	lru   *list.List // of *indexEntry, most recent in front
	m     map[string]*list.Element
}

type indexEntry struct {
	id   string
	ix   *tiered.Index
	size int64
}

func newIndexCache(max int64) *indexCache {
	return &indexCache{max: max, lru: list.New(), m: map[string]*list.Element{}}
}

func (c *indexCache) get(id string) *tiered.Index {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[id]; ok {
		c.lru.MoveToFront(e)
		return e.Value.(*indexEntry).ix
	}
	return nil
}

func (c *indexCache) put(id string, ix *tiered.Index, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[id]; ok {
		return
	}
	c.m[id] = c.lru.PushFront(&indexEntry{id: id, ix: ix, size: size})
	c.bytes += size
	for c.bytes > c.max && c.lru.Len() > 1 {
		old := c.lru.Remove(c.lru.Back()).(*indexEntry)
		delete(c.m, old.id)
		c.bytes -= old.size
	}
}

func (c *indexCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[id]; ok {
		c.lru.Remove(e)
		delete(c.m, id)
		c.bytes -= e.Value.(*indexEntry).size
	}
}

// Deleting a deleted partition's objects survives a stop or a crash: its
// manifest is first copied into remote-deletions/ under the data
// directory (the partition directory goes at once), the deletion works
// from it and removes it last, and Open resumes the files it finds.

const pendingDeletionsDir = "remote-deletions"

// pendingDeletion is one file of remote-deletions/.
type pendingDeletion struct {
	Topic     string          `json:"topic"`
	TopicID   TopicID         `json:"topic_id"`
	Partition int32           `json:"partition"`
	Manifest  json.RawMessage `json:"manifest"`
}

func pendingDeletionPath(dataDir string, id TopicID, partition int32) string {
	return filepath.Join(dataDir, pendingDeletionsDir, fmt.Sprintf("%s-%d.json", id, partition))
}

// forgetRemote deletes the objects of a partition that is being deleted
// (its topic was): it records them durably in remote-deletions/ now
// (called before the partition directory goes), then deletes them in
// the background, retrying until they are gone or the broker stops (Open
// resumes it).
func (e *Engine) forgetRemote(p *Partition) {
	pt := p.tier.Load()
	if e.remote == nil || pt == nil {
		return
	}
	// The manifest on disk holds every copy started (saved before its
	// first put); a copy that passed its check of p.removed just before
	// may save one more after this read: the manifest in memory, once
	// that copy ended (pt.mu), is taken too.
	var m *tiered.Manifest
	var err error
	if pt.clustered {
		// The metadata's, as this replica last saw it (the topic's
		// deletion came after every change its leader made).
		if m = pt.imaged.Load(); m == nil {
			m = &tiered.Manifest{}
		}
	} else {
		m, err = tiered.LoadManifest(p.dir)
	}
	if err != nil {
		e.logger.Error("tiered storage: a deleted partition's manifest cannot be read: its objects stay in the store", "partition", p.String(), "err", err)
		return
	}
	path := pendingDeletionPath(e.cfg.DataDir, p.topic.ID, p.Index)
	if err := writePendingDeletion(e.cfg.DataDir, e.cfg.Perm, path, p.topic.Name, p.topic.ID, p.Index, m); err != nil {
		e.logger.Warn("tiered storage: cannot record a deletion durably (a stop before it ends leaves the objects in the store)", "partition", p.String(), "err", err)
	}
	r := e.remote
	r.forgets.Add(1)
	go func() {
		defer r.forgets.Done()
		pt.mu.Lock() // after a copy in flight
		pt.gone = true
		segs := append(slices.Clone(pt.manifest.Segments), pt.manifest.Orphans...)
		pt.mu.Unlock()
		for _, s := range append(m.Segments, m.Orphans...) {
			if !slices.ContainsFunc(segs, func(o tiered.RemoteSegment) bool { return o.ID == s.ID }) {
				segs = append(segs, s)
			}
		}
		e.deleteAll(p.topic.Name, p.topic.ID, p.Index, segs, path)
	}()
}

func writePendingDeletion(dataDir string, perm fsutil.Perm, path, topic string, id TopicID, partition int32, m *tiered.Manifest) error {
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	b, err := json.Marshal(pendingDeletion{Topic: topic, TopicID: id, Partition: partition, Manifest: mb})
	if err != nil {
		return err
	}
	dir := filepath.Join(dataDir, pendingDeletionsDir)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := perm.MkdirAll(dir); err != nil {
			return err
		}
		if err := fsutil.SyncDir(dataDir); err != nil {
			return err
		}
	}
	return fsutil.WriteFileAtomic(path, b, perm.File())
}

// deleteAll deletes the objects of segs, retrying, then the pending
// deletion file at path (on the tier's goroutines: r.forgets).
func (e *Engine) deleteAll(topic string, id TopicID, partition int32, segs []tiered.RemoteSegment, path string) {
	r := e.remote
	for wait := 100 * time.Millisecond; len(segs) > 0; wait = min(2*wait, r.cfg.MaxBackoff) {
		if err := e.deleteSegmentObjects(topic, id, partition, segs[0]); err != nil {
			e.logger.Warn("tiered storage: deleting a deleted partition's objects; will retry", "topic", topic, "partition", partition, "err", err)
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		segs = segs[1:]
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		e.logger.Warn("tiered storage: cannot remove a finished deletion's record", "path", path, "err", err)
	}
	e.logger.Info("tiered storage: deleted the objects of a deleted partition", "topic", topic, "partition", partition)
}

// resumeDeletions restarts the deletions recorded in remote-deletions/
// (Open, with a store). A record that cannot be read is
// logged and kept.
func (e *Engine) resumeDeletions() {
	dir := filepath.Join(e.cfg.DataDir, pendingDeletionsDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, ent := range ents {
		if !strings.HasSuffix(ent.Name(), ".json") {
			continue
		}
		path := filepath.Join(dir, ent.Name())
		pd, m, err := readPendingDeletion(path)
		if err != nil {
			e.logger.Error("tiered storage: a recorded deletion cannot be read: its objects stay in the store", "path", path, "err", err)
			continue
		}
		e.logger.Info("tiered storage: resuming the deletion of a deleted partition's objects", "topic", pd.Topic, "partition", pd.Partition)
		e.remote.forgets.Add(1)
		go func() {
			defer e.remote.forgets.Done()
			e.deleteAll(pd.Topic, pd.TopicID, pd.Partition, append(m.Segments, m.Orphans...), path)
		}()
	}
}

// readPendingDeletion reads and checks a recorded deletion (disk bytes:
// hostile; the topic name becomes part of object keys).
func readPendingDeletion(path string) (pendingDeletion, *tiered.Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return pendingDeletion{}, nil, err
	}
	var pd pendingDeletion
	if err := json.Unmarshal(b, &pd); err != nil {
		return pd, nil, err
	}
	if err := ValidateTopicName(pd.Topic); err != nil || pd.Partition < 0 {
		return pd, nil, fmt.Errorf("topic %q partition %d: not a partition", pd.Topic, pd.Partition)
	}
	m, err := tiered.DecodeManifest(pd.Manifest)
	return pd, m, err
}
