package tiered

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/wal"
)

// ManifestFile is the name of a partition's manifest in its directory.
const ManifestFile = "remote-log.json"

// SegmentState is where a remote segment is in its life (KIP-405's
// RemoteLogSegmentState).
type SegmentState string

// The states. A segment is readable only in CopyFinished. A
// CopyStarted one whose copier died is an orphan, and a DeleteStarted
// one is half gone: both are deleted (again) at the next pass.
const (
	CopyStarted   SegmentState = "copy-started"
	CopyFinished  SegmentState = "copy-finished"
	DeleteStarted SegmentState = "delete-started"
)

// RemoteSegment is one segment in the object store.
type RemoteSegment struct {
	ID    string       `json:"id"`
	State SegmentState `json:"state"`
	// Base is its first offset, End the offset after its last batch.
	Base int64 `json:"base"`
	End  int64 `json:"end"`
	// Size is the length of its log object.
	Size int64 `json:"size"`
	// IndexSize is the length of its index object.
	IndexSize    int64 `json:"index_size"`
	MaxTimestamp int64 `json:"max_timestamp"`
	// Aborted are the aborted transactions whose marker it holds (also in
	// its index object; here so that read_committed fetches know them
	// without reading every index).
	Aborted []wal.AbortedTxn `json:"aborted,omitempty"`
	// DeletedAt is when the objects of an orphan were deleted (Unix
	// ms).
	DeletedAt int64 `json:"deleted_at,omitempty"`
}

// Manifest is what a partition's object store holds, as its leader
// wrote it: segments in offset order. It is the only authority: an
// object it does not name is never read, and a local segment is deleted
// only once a CopyFinished segment here covers it.
type Manifest struct {
	// Version counts the manifest's changes (in cluster mode, the
	// metadata's version of it).
	Version int64 `json:"version,omitempty"`
	// TopicID is the id of the topic whose partition it describes (a
	// re-created topic of the same name has another).
	TopicID string `json:"topic_id,omitempty"`
	// CopiedEnd is the end of the last segment ever copied: it stays
	// when retention expires every remote segment, so the local copies
	// of those are not copied again.
	CopiedEnd int64           `json:"copied_end,omitempty"`
	Segments  []RemoteSegment `json:"segments"`
	// Orphans are the segments of interrupted copies: their objects
	// were deleted, and are deleted again once a put the copy sent can
	// no longer land, before they are forgotten.
	Orphans []RemoteSegment `json:"orphans,omitempty"`
}

// maxIndexSize bounds an index object: a 2 GiB segment's entries, with
// room for many aborted transactions.
const maxIndexSize = 64 << 20

// ErrBadManifest wraps every reason DecodeManifest refuses bytes.
var ErrBadManifest = errors.New("tiered: bad manifest")

// DecodeManifest parses a manifest (bytes from disk: hostile): states
// known, ids well-formed, each segment a non-empty range, in increasing
// and non-overlapping order.
func DecodeManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	if m.CopiedEnd < 0 || m.Version < 0 {
		return nil, fmt.Errorf("%w: copied end %d", ErrBadManifest, m.CopiedEnd)
	}
	prevEnd := int64(-1)
	for i, s := range m.Segments {
		switch s.State {
		case CopyStarted, CopyFinished, DeleteStarted:
		default:
			return nil, fmt.Errorf("%w: segment %d: state %q", ErrBadManifest, i, s.State)
		}
		if !validSegmentID(s.ID) {
			return nil, fmt.Errorf("%w: segment %d: id %q", ErrBadManifest, i, s.ID)
		}
		if s.Base < 0 || s.End <= s.Base || s.Size <= 0 || s.IndexSize <= 0 || s.IndexSize > maxIndexSize {
			return nil, fmt.Errorf("%w: segment %d: offsets [%d, %d), %d bytes", ErrBadManifest, i, s.Base, s.End, s.Size)
		}
		if s.Base < prevEnd {
			return nil, fmt.Errorf("%w: segment %d at %d overlaps the one before (ending at %d)", ErrBadManifest, i, s.Base, prevEnd)
		}
		prevEnd = s.End
	}
	for i, s := range m.Orphans {
		if !validSegmentID(s.ID) || s.Base < 0 || s.End <= s.Base {
			return nil, fmt.Errorf("%w: orphan %d: id %q, offsets [%d, %d)", ErrBadManifest, i, s.ID, s.Base, s.End)
		}
	}
	return &m, nil
}

// LoadManifest reads dir's manifest; none there is an empty one (nothing
// copied: the local log keeps everything).
func LoadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return &Manifest{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tiered: read manifest: %w", err)
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return m, nil
}

// Encode returns the manifest's encoding (DecodeManifest's input).
func (m *Manifest) Encode() ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("tiered: encode manifest: %w", err)
	}
	return b, nil
}

// Save writes the manifest into dir durably (atomically, synced).
func (m *Manifest) Save(dir string, perm fsutil.Perm) error {
	b, err := m.Encode()
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, ManifestFile), b, perm.File()); err != nil {
		return fmt.Errorf("tiered: write manifest: %w", err)
	}
	return nil
}

// Clone returns a deep copy.
func (m *Manifest) Clone() *Manifest {
	return &Manifest{Version: m.Version, TopicID: m.TopicID, CopiedEnd: m.CopiedEnd, Segments: slices.Clone(m.Segments), Orphans: slices.Clone(m.Orphans)}
}
