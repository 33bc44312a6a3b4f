package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// TestCreateTopicConcurrentNames races creations of one name and of names
// that collide with it: exactly one wins, the others are told why, and
// auto-creations of a name being created get the one topic.
func TestCreateTopicConcurrentNames(t *testing.T) {
	e := openTestEngine(t, t.TempDir(), nil)
	defer e.Close()
	names := []string{"a.b", "a.b", "a.b", "a_b", "A.B", "a.b"}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.CreateTopic(CreateTopicRequest{Name: name, Partitions: 20, ReplicationFactor: 1})
		}()
	}
	wg.Wait()
	won := ""
	for i, err := range errs {
		switch {
		case err == nil:
			if won != "" {
				t.Fatalf("both %q and %q were created", won, names[i])
			}
			won = names[i]
		case errors.Is(err, kerr.TopicAlreadyExists), errors.Is(err, kerr.InvalidTopicException):
		default:
			t.Fatalf("create %q: %v", names[i], err)
		}
	}
	if won == "" {
		t.Fatal("no creation won")
	}
	for i, err := range errs {
		if err != nil && names[i] == won && !errors.Is(err, kerr.TopicAlreadyExists) {
			t.Fatalf("create %q again: %v, want TOPIC_ALREADY_EXISTS", won, err)
		}
		if err != nil && names[i] != won && !errors.Is(err, kerr.InvalidTopicException) {
			t.Fatalf("create %q colliding with %q: %v, want INVALID_TOPIC_EXCEPTION", names[i], won, err)
		}
	}
	if n := len(e.Topic(won).Partitions()); n != 20 {
		t.Fatalf("%s has %d partitions", won, n)
	}

	got := make([]*Topic, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tp, err := e.GetOrCreateTopic("auto")
			if err != nil {
				t.Error(err)
			}
			got[i] = tp
		}()
	}
	wg.Wait()
	for _, tp := range got {
		if tp == nil || tp != e.Topic("auto") {
			t.Fatal("auto-creations of one name returned different topics")
		}
	}
}

// blockMetaWrites makes the metadata file's atomic replacement fail (its
// temporary path is a directory) until the returned function is called.
func blockMetaWrites(t *testing.T, dir string) func() {
	t.Helper()
	tmp := filepath.Join(dir, metaFile+".tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(tmp); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAdminMetadataWriteFailure checks that a failed metadata write
// leaves every admin operation undone (no topic, no partitions, no
// directories, the old metadata on disk) and that the error keeps both
// the Kafka code and the cause.
func TestAdminMetadataWriteFailure(t *testing.T) {
	dir := t.TempDir()
	e := openTestEngine(t, dir, nil)
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "kept", Partitions: 2, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	unblock := blockMetaWrites(t, dir)

	_, err := e.CreateTopic(CreateTopicRequest{Name: "lost", Partitions: 8, ReplicationFactor: 1})
	if !errors.Is(err, kerr.KafkaStorageError) || !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("create with a failing metadata write: %v, want KAFKA_STORAGE_ERROR caused by EISDIR", err)
	}
	var ke *kerr.Error
	if !errors.As(err, &ke) || ke != kerr.KafkaStorageError {
		t.Fatalf("errors.As finds %v, want KAFKA_STORAGE_ERROR", ke)
	}
	if e.Topic("lost") != nil {
		t.Fatal("topic published although its metadata was not written")
	}
	for i := range 8 {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("lost-%d", i))); !os.IsNotExist(err) {
			t.Fatalf("lost-%d left behind: %v", i, err)
		}
	}
	if err := e.CreatePartitions("kept", 5, false); !errors.Is(err, kerr.KafkaStorageError) || !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("create partitions: %v", err)
	}
	if n := len(e.Topic("kept").Partitions()); n != 2 {
		t.Fatalf("kept has %d partitions after a failed CreatePartitions", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "kept-2")); !os.IsNotExist(err) {
		t.Fatalf("kept-2 left behind: %v", err)
	}
	if err := e.DeleteTopic("kept"); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("delete: %v", err)
	}
	v := "1000"
	if err := e.AlterTopicConfig("kept", map[string]*string{"retention.ms": &v}, false, false); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("alter config: %v", err)
	}
	if _, ok := e.Topic("kept").Config().Overrides()["retention.ms"]; ok {
		t.Fatal("config changed although the metadata was not written")
	}
	if err := e.AlterBrokerDefaults(map[string]*string{"retention.ms": &v}, false); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("alter broker defaults: %v", err)
	}
	if _, ok := e.BrokerConfigs()["retention.ms"]; ok {
		t.Fatal("broker default changed although the metadata was not written")
	}

	unblock()
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "lost", Partitions: 8, ReplicationFactor: 1}); err != nil {
		t.Fatalf("the name stayed reserved after a failed creation: %v", err)
	}
	if err := e.CreatePartitions("kept", 5, false); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTestEngine(t, dir, nil)
	defer e.Close()
	if e.Topic("kept") == nil || len(e.Topic("kept").Partitions()) != 5 || e.Topic("lost") == nil {
		t.Fatal("metadata after reopening does not match what succeeded")
	}
	for _, p := range e.Topic("kept").Partitions() {
		if err := p.Offline(); err != nil {
			t.Fatalf("%s offline: %v", p, err)
		}
	}
}

// TestCloseDuringCreateTopic closes the engine while a topic is being
// created: either the creation finishes before the shards stop (and the
// topic is whole after reopening) or it is refused; never half of it.
func TestCloseDuringCreateTopic(t *testing.T) {
	dir := t.TempDir()
	e := openTestEngine(t, dir, nil)
	errc := make(chan error, 1)
	go func() {
		_, err := e.CreateTopic(CreateTopicRequest{Name: "racing", Partitions: 200, ReplicationFactor: 1})
		errc <- err
	}()
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	cerr := <-errc
	if cerr != nil && !errors.Is(cerr, kerr.BrokerNotAvailable) {
		t.Fatalf("create during close: %v", cerr)
	}
	e = openTestEngine(t, dir, nil)
	defer e.Close()
	tp := e.Topic("racing")
	if cerr != nil {
		if tp != nil {
			t.Fatal("a refused creation is in the metadata")
		}
		return
	}
	if tp == nil || len(tp.Partitions()) != 200 {
		t.Fatal("a finished creation is missing after reopening")
	}
	for _, p := range tp.Partitions() {
		if err := p.Offline(); err != nil {
			t.Fatalf("%s offline: %v", p, err)
		}
	}
}

// TestDeleteThenRecreate deletes a topic and creates one of the same name
// at once: the new topic starts empty, with its own id.
func TestDeleteThenRecreate(t *testing.T) {
	e := openTestEngine(t, t.TempDir(), nil)
	defer e.Close()
	old, err := e.CreateTopic(CreateTopicRequest{Name: "again", Partitions: 3, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	bb := batch.NewBuilder()
	bb.Add(time.Now().UnixMilli(), nil, []byte("x"), nil)
	data, err := bb.Build(nil, batch.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	if res := appendSync(t, old.Partition(0), data, 1); res.Err != nil {
		t.Fatal(res.Err)
	}
	if err := e.DeleteTopic("again"); err != nil {
		t.Fatal(err)
	}
	tp, err := e.CreateTopic(CreateTopicRequest{Name: "again", Partitions: 3, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	if tp.ID == old.ID || tp.Partition(0).HighWatermark() != 0 {
		t.Fatalf("recreated topic: same id %v, high watermark %d", tp.ID == old.ID, tp.Partition(0).HighWatermark())
	}
	if !old.Deleted() {
		t.Fatal("old topic not marked deleted")
	}
}

// TestOfflinePartitionErrorKeepsCause damages a partition's log in the
// middle and restarts uncleanly: the partition is offline, and its error
// is KAFKA_STORAGE_ERROR for netio while errors.Is still finds the wal's
// corruption underneath.
func TestOfflinePartitionErrorKeepsCause(t *testing.T) {
	dir := t.TempDir()
	e := openTestEngine(t, dir, nil)
	tp, err := e.CreateTopic(CreateTopicRequest{Name: "damaged", Partitions: 1, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		bb := batch.NewBuilder()
		bb.Add(time.Now().UnixMilli(), nil, []byte(fmt.Sprintf("value-%d", i)), nil)
		data, err := bb.Build(nil, batch.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		if res := appendSync(t, tp.Partition(0), data, 1); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Flip a byte inside the first batch's records (valid batches follow),
	// and forget that anything was flushed, so that recovery rescans.
	pdir := filepath.Join(dir, "damaged-0")
	segs, err := filepath.Glob(filepath.Join(pdir, "*.log"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	f, err := os.OpenFile(segs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, batch.HeaderSize+2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, name := range []string{cleanShutdownFile, filepath.Join("damaged-0", "recovery-point")} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}

	e = openTestEngine(t, dir, nil)
	defer e.Close()
	_, err = e.Topic("damaged").Partition(0).Log()
	var ke *kerr.Error
	if !errors.As(err, &ke) || ke != kerr.KafkaStorageError {
		t.Fatalf("offline partition: %v, want KAFKA_STORAGE_ERROR first", err)
	}
	if !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("offline partition: %v does not say the log is corrupt", err)
	}
}

// TestOrphanPartitionDirs: partition directories no topic in the
// metadata has (a deletion or creation a kill interrupted) are removed at
// open when their logs hold no record, and kept, renamed *.orphan-stray,
// when they do (the metadata is never a reason to delete data); the
// directories of the topics it has, and directories that are not logs,
// stay; with no metadata file at all Open refuses to start and nothing is
// touched.
func TestOrphanPartitionDirs(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, nil)
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "kept", Partitions: 2, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	mkLog := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "00000000000000000000.log"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mkLog("gone-0", "")     // an interrupted creation's empty log
	mkLog("kept-2", "")     // an empty partition beyond the topic's count
	mkLog("kept-1-0", "x")  // topic "kept-1" does not exist, and has records
	mkLog("deleted-0", "x") // a deleted topic's partition the kill left behind
	if err := os.MkdirAll(filepath.Join(dir, "notes-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "notes-1", "readme.txt"), []byte("mine"), 0o644)

	e = openEngine(t, dir, nil)
	defer e.Close()
	for name, want := range map[string]bool{"kept-0": true, "kept-1": true, "gone-0": false, "kept-2": false, "kept-1-0": false, "deleted-0": false,
		"kept-1-0.orphan-stray": true, "deleted-0.orphan-stray": true, "notes-1": true} {
		_, err := os.Stat(filepath.Join(dir, name))
		if got := err == nil; got != want {
			t.Errorf("%s exists: %v, want %v", name, got, want)
		}
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, "*"+deleteSuffix)); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}

	// No metadata file: Open refuses, naming the recovery command, and
	// nothing is removed or created.
	e.Close()
	mkLog("gone-0", "")
	if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadDir(dir)
	_, err := Open(Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, ErrMetadataLost) || !strings.Contains(err.Error(), "ringlog recover-metadata --data-dir") {
		t.Fatalf("Open without a metadata file beside partition logs: %v, want ErrMetadataLost naming the command", err)
	}
	after, _ := os.ReadDir(dir)
	if len(after) != len(before) {
		t.Errorf("the refused Open changed the data directory: %d entries, then %d", len(before), len(after))
	}
}
