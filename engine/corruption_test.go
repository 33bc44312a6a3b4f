package engine

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/internal/testenv"
)

// TestCorruptMetadataFile: a damaged ringlog-meta.json is refused at start
// with an error naming the file and the way out, and nothing is created
// from it (no directory for a topic name that escapes the data dir).
func TestCorruptMetadataFile(t *testing.T) {
	for name, content := range map[string]string{
		"truncated":    `{"version":1,"cluster_id":"c","topics":[{"na`,
		"garbage":      "\x00\xff\x13garbage",
		"escaping":     `{"version":1,"cluster_id":"c","next_producer_id":1,"topics":[{"name":"../../escaped","id":"01000000000000000000000000000000","partitions":1}]}`,
		"negative":     `{"version":1,"cluster_id":"c","next_producer_id":1,"topics":[{"name":"t","id":"01000000000000000000000000000000","partitions":-1}]}`,
		"huge":         `{"version":1,"cluster_id":"c","next_producer_id":1,"topics":[{"name":"t","id":"01000000000000000000000000000000","partitions":2000000000}]}`,
		"duplicate id": `{"version":1,"cluster_id":"c","next_producer_id":1,"topics":[{"name":"a","id":"01000000000000000000000000000000","partitions":1},{"name":"b","id":"01000000000000000000000000000000","partitions":1}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "data")
			e := openTestEngine(t, dir, nil)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, metaFile), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			e, err := Open(Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
			if err == nil {
				e.Close()
				t.Fatal("a damaged metadata file was accepted")
			}
			if !strings.Contains(err.Error(), metaFile) || !strings.Contains(err.Error(), "restore it from a backup") {
				t.Fatalf("error does not name the file and the way out: %v", err)
			}
			ents, _ := os.ReadDir(parent)
			if len(ents) != 1 {
				t.Fatalf("the data dir's parent holds %d entries, want only the data dir", len(ents))
			}
		})
	}
}

// TestCorruptProducerState: a damaged producer-state.json is logged and
// the state is rebuilt from the log, so a retried batch is still
// recognized as a duplicate.
func TestCorruptProducerState(t *testing.T) {
	dir := t.TempDir()
	e := openTestEngine(t, dir, nil)
	p := idemTopic(t, e, "durable")
	const pid = 7
	first := appendOK(t, p, idem(t, pid, 0, 0, 3))
	appendOK(t, p, idem(t, pid, 0, 3, 2))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "durable-0", producerSnapshotFile)
	if err := os.WriteFile(path, []byte(`{"offset":5,"producers":{"7":{"epoch":0,"batches":[{"first_offset":9,"last_offset":2}]}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var logBuf testenv.SyncBuffer
	e = openEngine(t, dir, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logBuf, nil)) })
	if !strings.Contains(logBuf.String(), "ignoring unreadable producer-state snapshot") {
		t.Fatalf("damaged snapshot not logged:\n%s", logBuf.String())
	}
	retry(t, e.Topic("durable").Partition(0), first, idem(t, pid, 0, 0, 3))
}
