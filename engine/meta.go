package engine

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ringlog/ringlog/internal/fsutil"
)

// metaFile is the broker's metadata in the data directory: the cluster id,
// the topics with their ids, partition counts and config overrides, and
// the producer-id allocation watermark. It is small and rewritten whole,
// atomically (write, fsync, rename, fsync the directory), on every change.
const metaFile = "ringlog-meta.json"

// metaBackupFile is a second copy of the metadata, written (atomically)
// after every change of metaFile: what `ringlog recover-metadata` starts
// from when metaFile is lost or damaged. It is never read at start.
const metaBackupFile = "ringlog-meta.backup.json"

// cleanShutdownFile marks a data directory whose last broker stopped
// cleanly, with every log flushed: the next start trusts the files instead
// of rescanning what may be unclean. It is removed (durably) at start.
const cleanShutdownFile = ".ringlog-clean-shutdown"

// TopicID is a topic's stable 16-byte id (Kafka's topic UUID).
type TopicID [16]byte

func (id TopicID) String() string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// MarshalText encodes the id as hex for the metadata file.
func (id TopicID) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(id[:])), nil }

// UnmarshalText decodes a hex id.
func (id *TopicID) UnmarshalText(b []byte) error {
	// hex.Decode writes len(b)/2 bytes: check the length first.
	if hex.DecodedLen(len(b)) != len(id) {
		return fmt.Errorf("bad topic id %q: want %d hex digits", b, 2*len(id))
	}
	if _, err := hex.Decode(id[:], b); err != nil {
		return fmt.Errorf("bad topic id %q: %w", b, err)
	}
	return nil
}

func newTopicID() TopicID {
	var id TopicID
	for id == (TopicID{}) {
		if _, err := rand.Read(id[:]); err != nil {
			panic(err) // crypto/rand does not fail on Linux
		}
	}
	return id
}

type topicMeta struct {
	Name       string            `json:"name"`
	ID         TopicID           `json:"id"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
	Internal   bool              `json:"internal,omitempty"`
	// NotHosted lists the partitions whose log lives on other brokers
	// (cluster mode); empty: every partition is hosted here.
	NotHosted []int32 `json:"not_hosted,omitempty"`
}

type brokerMeta struct {
	Version        int               `json:"version"`
	ClusterID      string            `json:"cluster_id"`
	NextProducerID int64             `json:"next_producer_id"`
	Topics         []topicMeta       `json:"topics"`
	BrokerConfigs  map[string]string `json:"broker_configs,omitempty"`
	// GroupConfigs are the groups' config overrides (IncrementalAlterConfigs
	// on a GROUP resource), by group id.
	GroupConfigs map[string]map[string]string `json:"group_configs,omitempty"`
}

// clone copies m for a change: the topic list is copied, the maps are
// shared (a change replaces a map, never modifies one in place).
func (m *brokerMeta) clone() *brokerMeta {
	c := *m
	c.Topics = slices.Clone(m.Topics)
	return &c
}

// ErrMetadataLost is Open's error for a data directory whose metadata
// file is missing or damaged while partition logs are there: the broker
// refuses to start rather than take the logs for strays (or delete them),
// and names the command that rebuilds the file (RecoverMetadata).
var ErrMetadataLost = errors.New("metadata lost")

// loadMeta reads the metadata file. found is false for a directory that
// never had one (no partition logs either): a new broker. A file that is
// missing or does not decode while partition logs exist is
// ErrMetadataLost, with the recovery command.
func loadMeta(dir string) (*brokerMeta, bool, error) {
	path := filepath.Join(dir, metaFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if logs := partitionDirs(dir); len(logs) > 0 {
			return nil, false, fmt.Errorf("%w: %s is missing, but the data directory holds the logs of %d partitions (%s): "+
				"the broker will not start without the file that lists them; rebuild it with `ringlog recover-metadata --data-dir %s` (from %s and the partition directories), then start again",
				ErrMetadataLost, path, len(logs), strings.Join(logs[:min(len(logs), 5)], ", "), dir, metaBackupFile)
		}
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", metaFile, err)
	}
	m, err := decodeMeta(b)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %s: %w (the file is the broker's topic registry): rebuild it with `ringlog recover-metadata --data-dir %s` (from %s and the partition directories), or restore it from a backup",
			ErrMetadataLost, path, err, dir, metaBackupFile)
	}
	return m, true, nil
}

// partitionDirs lists the directories of dir named <topic>-<n> that look
// like partition logs (see looksLikeLog), sorted.
func partitionDirs(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, ent := range ents {
		if _, _, ok := parsePartitionDir(ent.Name()); ok && ent.IsDir() && looksLikeLog(filepath.Join(dir, ent.Name())) {
			out = append(out, ent.Name())
		}
	}
	slices.Sort(out)
	return out
}

// parsePartitionDir splits a partition directory's name, <topic>-<n>;
// deleted and stray directories (suffixes -delete, -stray) do not parse.
func parsePartitionDir(name string) (topic string, n int32, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, false
	}
	v, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || v < 0 || strconv.FormatInt(v, 10) != name[i+1:] || ValidateTopicName(name[:i]) != nil {
		return "", 0, false
	}
	return name[:i], int32(v), true
}

// decodeMeta parses the metadata file and checks what the broker builds
// on it: topic names become directory names and partition counts become
// allocations, so a damaged file must not reach either.
func decodeMeta(b []byte) (*brokerMeta, error) {
	var m brokerMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if m.Version != 1 {
		return nil, fmt.Errorf("unknown version %d", m.Version)
	}
	if m.ClusterID == "" {
		return nil, errors.New("no cluster id")
	}
	if m.NextProducerID < 0 {
		return nil, fmt.Errorf("negative next producer id %d", m.NextProducerID)
	}
	names := make(map[string]bool, len(m.Topics))
	ids := make(map[TopicID]bool, len(m.Topics))
	for _, t := range m.Topics {
		if err := ValidateTopicName(t.Name); err != nil {
			return nil, err
		}
		if t.Partitions <= 0 || t.Partitions > MaxPartitions {
			return nil, fmt.Errorf("topic %q has %d partitions, want 1 to %d", t.Name, t.Partitions, MaxPartitions)
		}
		if t.ID == (TopicID{}) {
			return nil, fmt.Errorf("topic %q has no id", t.Name)
		}
		if names[t.Name] || ids[t.ID] {
			return nil, fmt.Errorf("topic %q (id %s) is listed twice", t.Name, t.ID)
		}
		names[t.Name], ids[t.ID] = true, true
	}
	return &m, nil
}

// saveMeta writes m to the backup copy, then to the metadata file, each
// atomically (write, fsync, rename, fsync the directory) and created with
// perm's file mode. A change that fails leaves the metadata file as it
// was; the backup may then be one change ahead, which only
// recover-metadata reads.
func saveMeta(dir string, perm fsutil.Perm, m *brokerMeta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, metaBackupFile), b, perm.File()); err != nil {
		return fmt.Errorf("%s: %w", metaBackupFile, err)
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, metaFile), b, perm.File())
}

func newClusterID() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
