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

	"github.com/ringlog/ringlog/internal/fsutil"
)

// metaFile is the broker's metadata in the data directory: the cluster id,
// the topics with their ids, partition counts and config overrides, and
// the producer-id allocation watermark. It is small and rewritten whole,
// atomically (write, fsync, rename, fsync the directory), on every change.
const metaFile = "ringlog-meta.json"

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
}

// clone copies m for a change: the topic list is copied, the maps are
// shared (a change replaces a map, never modifies one in place).
func (m *brokerMeta) clone() *brokerMeta {
	c := *m
	c.Topics = slices.Clone(m.Topics)
	return &c
}

func loadMeta(dir string) (*brokerMeta, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", metaFile, err)
	}
	m, err := decodeMeta(b)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w (the file is the broker's topic registry; restore it from a backup)", filepath.Join(dir, metaFile), err)
	}
	return m, true, nil
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

// saveMeta replaces the metadata file in dir durably, created with
// perm's file mode.
func saveMeta(dir string, perm fsutil.Perm, m *brokerMeta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, metaFile), append(b, '\n'), perm.File())
}

func newClusterID() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
