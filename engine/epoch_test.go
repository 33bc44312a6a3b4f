package engine

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal"
)

// TestOpenAdoptsTheLogsLeaderEpoch: a single node appends at the leader
// epoch its data already has. A log whose last batch carries epoch 4 (it
// was written by a cluster's leader, or its epoch field was damaged: the
// CRC does not cover it) must still take appends after a restart, stamped
// with epoch 4, where wal refuses an append below the data's epoch.
func TestOpenAdoptsTheLogsLeaderEpoch(t *testing.T) {
	dir := t.TempDir()
	e := openTestEngine(t, dir, nil)
	if _, err := e.CreateTopic(CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	appendOK(t, e.Topic("t").Partition(0), buildBatch(t, time.Now().UnixMilli(), -1, 0, 0, values("a", 3)...))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	// The partition's log gets a batch of epoch 4 behind the engine's back.
	l, err := wal.Open(filepath.Join(dir, "t-0"), wal.Options{Clean: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.StartLeaderEpoch(4); err != nil {
		t.Fatal(err)
	}
	backend := ring.NewPortable()
	if _, err := l.Append(backend, [][]byte{buildBatch(t, time.Now().UnixMilli(), -1, 0, 0, values("b", 2)...)}, true); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	backend.Close()

	e = openEngine(t, dir, nil)
	p := e.Topic("t").Partition(0)
	if err := p.Offline(); err != nil {
		t.Fatalf("partition offline after reopening: %v", err)
	}
	if base := appendOK(t, p, buildBatch(t, time.Now().UnixMilli(), -1, 0, 0, values("c", 1)...)); base != 5 {
		t.Fatalf("append after reopening at offset %d, want 5", base)
	}
	pl, err := p.Log()
	if err != nil {
		t.Fatal(err)
	}
	if got := pl.LatestEpoch(); got != 4 {
		t.Fatalf("latest epoch %d after the append, want 4", got)
	}
	if ep, end := pl.EndOffsetForEpoch(4); ep != 4 || end != 6 {
		t.Fatalf("EndOffsetForEpoch(4) = (%d, %d), want (4, 6)", ep, end)
	}
}
