package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ringlog/ringlog/internal/fsutil"
)

// MetadataRecovery is what RecoverMetadata rebuilt: where it started from,
// every topic of the new file and what to check by hand.
type MetadataRecovery struct {
	// Base is the file the rebuild started from: metaFile when it was
	// intact, metaBackupFile when only the copy was, "" when neither.
	Base string
	// Topics is every topic of the rebuilt file, by name.
	Topics []RecoveredTopic
	// Warnings are what the operator should check: topics whose configs
	// are unknown, listed topics without logs, partitions added.
	Warnings []string
	// Written is false for a dry run.
	Written bool
}

// RecoveredTopic is one topic of a rebuilt metadata file.
type RecoveredTopic struct {
	Name       string
	Partitions int32
	// Source says where the topic came from: "metadata", "backup", or
	// "directories" (found only as partition logs: new id, no configs).
	Source string
	// Logs is how many of its partitions have a directory here.
	Logs int
}

// RecoverMetadata rebuilds the metadata file of a stopped broker's data
// directory, for a file that was lost or damaged (Open refuses to start
// then, ErrMetadataLost), or to take back partition logs that a start set
// aside as *.orphan-stray once they are renamed back. It starts from the
// metadata file if intact, else from its backup copy, else from nothing,
// and adds every partition directory (<topic>-<n> holding a log) it does
// not list: a topic found only as directories gets a new id, as many
// partitions as its highest directory says, and the broker's default
// configs (its overrides are lost; the report says so). The producer-id
// watermark of a file that was lost moves far past any block handed out
// before, so no producer id is reused. The clean-shutdown marker is
// removed, so the next start checks every log. With dryRun nothing is
// written. It takes the data directory's lock: the broker must be
// stopped.
func RecoverMetadata(dir string, dryRun bool) (*MetadataRecovery, error) {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("data directory %s: not a directory (%v)", dir, err)
	}
	// What is written gets the modes the broker gave the directory
	// (--data-dir-group-access or not).
	perm := fsutil.Perm{GroupRead: fi.Mode().Perm()&0o050 != 0}
	lock, err := lockDataDir(dir, perm)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	rep := &MetadataRecovery{}
	m, err := readMetaFile(filepath.Join(dir, metaFile))
	switch {
	case err == nil:
		rep.Base = metaFile
	default:
		if !errors.Is(err, os.ErrNotExist) {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s is damaged (%v): not used", metaFile, err))
		}
		m, err = readMetaFile(filepath.Join(dir, metaBackupFile))
		switch {
		case err == nil:
			rep.Base = metaBackupFile
		case errors.Is(err, os.ErrNotExist):
			rep.Warnings = append(rep.Warnings, "no backup copy "+metaBackupFile+": topic ids, configs and the cluster id are new")
			m = &brokerMeta{Version: 1, ClusterID: newClusterID()}
		default:
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s is damaged too (%v): topic ids, configs and the cluster id are new", metaBackupFile, err))
			m = &brokerMeta{Version: 1, ClusterID: newClusterID()}
		}
		// Blocks of producer ids may have been handed out after the copy
		// was written: start far past any of them.
		m.NextProducerID = max(m.NextProducerID, time.Now().UnixNano())
	}
	source := "metadata"
	if rep.Base == metaBackupFile {
		source = "backup"
	}
	nBase := len(m.Topics)
	index := map[string]int{}
	for i, tm := range m.Topics {
		index[tm.Name] = i
	}
	logs := map[string]int{}
	for _, name := range partitionDirs(dir) {
		topic, n, _ := parsePartitionDir(name)
		logs[topic]++
		i, ok := index[topic]
		if !ok {
			tm := topicMeta{Name: topic, ID: newTopicID(), Partitions: n + 1}
			if topic == OffsetsTopic || topic == TransactionStateTopic {
				tm.Internal = true
				tm.Configs = map[string]string{"cleanup.policy": "compact", "segment.bytes": offsetsSegmentBytes}
			} else {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("topic %q was found only as partition directories: its config overrides are unknown (set them again with ringlog topic alter)", topic))
			}
			index[topic] = len(m.Topics)
			m.Topics = append(m.Topics, tm)
			continue
		}
		if tm := &m.Topics[i]; n >= tm.Partitions {
			if i < nBase {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("topic %q had %d partitions, but a directory of partition %d exists: it now has %d", topic, tm.Partitions, n, n+1))
			}
			tm.Partitions = n + 1
		}
	}
	for i, tm := range m.Topics {
		src := source
		if i >= nBase {
			src = "directories"
		}
		rep.Topics = append(rep.Topics, RecoveredTopic{Name: tm.Name, Partitions: tm.Partitions, Source: src, Logs: logs[tm.Name]})
		if logs[tm.Name] == 0 && !tm.Internal {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("topic %q is listed but none of its partition logs is here: it will start empty", tm.Name))
		}
	}
	slices.SortFunc(rep.Topics, func(a, b RecoveredTopic) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	if b, err := json.Marshal(m); err != nil {
		return nil, err
	} else if _, err := decodeMeta(b); err != nil {
		return nil, fmt.Errorf("the rebuilt metadata does not check: %w", err)
	}
	if dryRun {
		return rep, nil
	}
	if err := saveMeta(dir, perm, m); err != nil {
		return nil, fmt.Errorf("write %s: %w", metaFile, err)
	}
	if err := os.Remove(filepath.Join(dir, cleanShutdownFile)); err == nil {
		if err := fsutil.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("sync %s: %w", dir, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove the clean-shutdown marker: %w", err)
	}
	rep.Written = true
	return rep, nil
}

// readMetaFile reads and decodes a metadata file (errors wrap
// os.ErrNotExist for a missing one).
func readMetaFile(path string) (*brokerMeta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeMeta(b)
}
