package engine

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// lostMetaDir is a closed engine's data directory with topic "orders" (2
// partitions, 5 and 3 records, retention.ms set) and "logs" (1 partition,
// 4 records); it returns the topics' ids.
func lostMetaDir(t *testing.T) (string, map[string]TopicID) {
	t.Helper()
	dir := t.TempDir()
	e := openTestEngine(t, dir, nil)
	ids := map[string]TopicID{}
	for name, parts := range map[string]int32{"orders": 2, "logs": 1} {
		cfg := map[string]string{}
		if name == "orders" {
			cfg["retention.ms"] = "123456789"
		}
		tp, err := e.CreateTopic(CreateTopicRequest{Name: name, Partitions: parts, ReplicationFactor: 1, Configs: cfg})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = tp.ID
	}
	ts := time.Now().UnixMilli()
	appendOK(t, e.Topic("orders").Partition(0), buildBatch(t, ts, -1, 0, 0, values("o0", 5)...))
	appendOK(t, e.Topic("orders").Partition(1), buildBatch(t, ts, -1, 0, 0, values("o1", 3)...))
	appendOK(t, e.Topic("logs").Partition(0), buildBatch(t, ts, -1, 0, 0, values("l", 4)...))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, ids
}

// checkRecovered opens dir and checks every record of lostMetaDir is
// there.
func checkRecovered(t *testing.T, dir string) *Engine {
	t.Helper()
	e := openEngine(t, dir, nil)
	for _, c := range []struct {
		topic string
		part  int32
		n     int
	}{{"orders", 0, 5}, {"orders", 1, 3}, {"logs", 0, 4}} {
		tp := e.Topic(c.topic)
		if tp == nil {
			t.Fatalf("topic %s is gone after recovery", c.topic)
		}
		if got := len(readLog(t, tp.Partition(c.part))); got != c.n {
			t.Fatalf("%s-%d holds %d records after recovery, want %d", c.topic, c.part, got, c.n)
		}
	}
	return e
}

// TestLostMetadataFile: losing ringlog-meta.json used to make the first
// start initialize a new registry and the second delete every partition
// as an orphan. Now every start refuses, naming recover-metadata, and
// touches nothing; recover-metadata rebuilds the file from its backup
// copy (ids and configs kept) and the broker serves every record.
func TestLostMetadataFile(t *testing.T) {
	dir, ids := lostMetaDir(t)
	if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		_, err := Open(Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
		if !errors.Is(err, ErrMetadataLost) || !strings.Contains(err.Error(), "orders-0") || !strings.Contains(err.Error(), "recover-metadata") {
			t.Fatalf("start %d without the metadata file: %v, want ErrMetadataLost naming the logs and the command", i+1, err)
		}
	}
	for _, d := range []string{"orders-0", "orders-1", "logs-0"} {
		if !holdsRecords(filepath.Join(dir, d)) {
			t.Fatalf("%s lost its records to a refused start", d)
		}
	}
	rep, err := RecoverMetadata(dir, true)
	if err != nil || rep.Written || rep.Base != metaBackupFile {
		t.Fatalf("dry run: %+v, %v", rep, err)
	}
	if _, err := os.Stat(filepath.Join(dir, metaFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dry run wrote the metadata file: %v", err)
	}
	rep, err = RecoverMetadata(dir, false)
	if err != nil || !rep.Written {
		t.Fatalf("recover: %+v, %v", rep, err)
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("recovery from an intact backup warned: %q", rep.Warnings)
	}
	e := checkRecovered(t, dir)
	for name, id := range ids {
		if got := e.Topic(name).ID; got != id {
			t.Errorf("%s's id changed: %s, was %s", name, got, id)
		}
	}
	if v := e.Topic("orders").Config().Overrides()["retention.ms"]; v != "123456789" {
		t.Errorf("orders' retention.ms after recovery: %q", v)
	}
}

// TestRecoverMetadataFromDirectoriesAlone: with the file and its backup
// both gone (or damaged), recover-metadata rebuilds the topics from the
// partition directories (new ids, default configs, a warning each), and
// damaged files are refused at start like missing ones.
func TestRecoverMetadataFromDirectoriesAlone(t *testing.T) {
	dir, ids := lostMetaDir(t)
	if err := os.WriteFile(filepath.Join(dir, metaFile), []byte(`{"version":1,"clus`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, metaBackupFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)}); !errors.Is(err, ErrMetadataLost) {
		t.Fatalf("start with a damaged metadata file: %v, want ErrMetadataLost", err)
	}
	rep, err := RecoverMetadata(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Base != "" || !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, `"orders"`) && strings.Contains(w, "config") }) {
		t.Fatalf("recovery from directories alone: %+v", rep)
	}
	e := checkRecovered(t, dir)
	if e.Topic("orders").ID == ids["orders"] {
		t.Error("a topic rebuilt from directories kept an id nothing recorded")
	}
	if got := e.Topic("orders").Partitions(); len(got) != 2 {
		t.Errorf("orders has %d partitions, want 2", len(got))
	}
	if !e.Topic(OffsetsTopic).Internal {
		t.Error("__consumer_offsets was rebuilt as a client topic")
	}
}

// TestRecoverMetadataRefusesARunningBroker: the command takes the data
// directory's lock.
func TestRecoverMetadataRefusesARunningBroker(t *testing.T) {
	dir := t.TempDir()
	openEngine(t, dir, nil)
	if _, err := RecoverMetadata(dir, false); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("recover-metadata beside a running broker: %v", err)
	}
}
