package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testenv"
)

func TestHWCheckpointRoundTrip(t *testing.T) {
	hws := map[hwKey]int64{
		{TopicID{1, 2, 3}, 0}:  42,
		{TopicID{1, 2, 3}, 7}:  0,
		{TopicID{0xff}, 2}:     1 << 40,
		{TopicID{9, 9, 9}, 13}: 5,
	}
	got, err := decodeHWCheckpoint(bytes.NewReader(encodeHWCheckpoint(hws)))
	if err != nil || len(got) != len(hws) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for k, v := range hws {
		if got[k] != v {
			t.Fatalf("%v: %d, want %d", k, got[k], v)
		}
	}
	id := strings.Repeat("ab", 16)
	for name, in := range map[string]string{
		"empty":              "",
		"header":             "kafka 0\n1\n",
		"short line":         hwCheckpointHeader + "\n" + id + " 1\n",
		"long id":            hwCheckpointHeader + "\n" + id + "ab 1 2\n",
		"not hex":            hwCheckpointHeader + "\n" + strings.Repeat("zz", 16) + " 1 2\n",
		"negative partition": hwCheckpointHeader + "\n" + id + " -1 2\n",
		"negative hw":        hwCheckpointHeader + "\n" + id + " 1 -2\n",
		"huge partition":     hwCheckpointHeader + "\n" + id + " 4294967296 2\n",
		"twice":              hwCheckpointHeader + "\n" + id + " 1 2\n" + id + " 1 3\n",
		"long line":          hwCheckpointHeader + "\n" + strings.Repeat("x", 300) + "\n",
	} {
		if _, err := decodeHWCheckpoint(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzHWCheckpoint: the decoder of the file never panics, and what it
// accepts encodes to a file that decodes to the same entries.
func FuzzHWCheckpoint(f *testing.F) {
	f.Add(encodeHWCheckpoint(map[hwKey]int64{{TopicID{1}, 0}: 10, {TopicID{2}, 3}: 0}))
	f.Add([]byte(hwCheckpointHeader + "\n"))
	f.Add([]byte(hwCheckpointHeader + "\n" + strings.Repeat("0", 32) + " 0 0\n"))
	f.Add([]byte("0\n1\nt 0 5\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		hws, err := decodeHWCheckpoint(bytes.NewReader(b))
		if err != nil {
			return
		}
		again, err := decodeHWCheckpoint(bytes.NewReader(encodeHWCheckpoint(hws)))
		if err != nil || len(again) != len(hws) {
			t.Fatalf("re-encoded checkpoint: %v (%d of %d entries)", err, len(again), len(hws))
		}
		for k, v := range hws {
			if again[k] != v {
				t.Fatalf("%v: %d after re-encoding, was %d", k, again[k], v)
			}
		}
	})
}

// A replicated partition's high watermark reaches the data directory's
// checkpoint within the interval, and a broker that restarts without its
// clean-shutdown file (as after kill -9) takes it from there; an entry of
// another topic id (a topic of the same name made anew) is not taken.
func TestHighWatermarkCheckpoint(t *testing.T) {
	dir := t.TempDir()
	mod := func(c *Config) {
		c.NodeID, c.Replicated = 1, true
		c.HighWatermarkCheckpointInterval = 20 * time.Millisecond
	}
	e := openEngine(t, dir, mod)
	tp, err := e.CreateTopic(CreateTopicRequest{Name: "r", Partitions: 1, ReplicationFactor: -1, Configs: map[string]string{"min.insync.replicas": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	f := tp.Partition(0)
	if err := f.SetReplicaState(ReplicaState{Role: RoleFollower, Leader: 2, LeaderEpoch: 1, PartitionEpoch: 1,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}); err != nil {
		t.Fatal(err)
	}
	leader := replicatedTopic(t, nil, "1")
	if err := leader.SetReplicaState(leaderState(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		appendOK(t, leader, idem(t, 9, 0, int32(2*i), 2))
	}
	ll, _ := leader.Log()
	var batches [][]byte
	for off := int64(0); off < ll.EndOffset(); off += 2 {
		b, err := ll.ReadBytes(nil, off, 1, ll.EndOffset())
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
	}
	appendReplicaOK(t, f, batches...)
	f.SetFollowerHighWatermark(6)
	path := filepath.Join(dir, hwCheckpointFile)
	var b []byte
	var readErr error
	if !testenv.Eventually(5*time.Second, func() bool {
		if b, readErr = os.ReadFile(path); readErr != nil {
			return false
		}
		var hws map[hwKey]int64
		hws, readErr = decodeHWCheckpoint(bytes.NewReader(b))
		return readErr == nil && hws[hwKey{tp.ID, 0}] == 6
	}) {
		t.Fatalf("no checkpoint of high watermark 6 in %s: %q %v", path, b, readErr)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// As after kill -9: no clean-shutdown file.
	if err := os.Remove(filepath.Join(f.dir, highWatermarkFile)); err != nil {
		t.Fatal(err)
	}
	e2 := openEngine(t, dir, mod)
	if hw := e2.Topic("r").Partition(0).HighWatermark(); hw != 6 {
		t.Fatalf("after the restart the high watermark is %d, want the checkpoint's 6", hw)
	}
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}

	// A clean shutdown's file is newer than the checkpoint, also when
	// lower (a truncation lowered the high watermark): it wins, and is
	// removed once read.
	if err := os.WriteFile(filepath.Join(f.dir, highWatermarkFile), []byte("4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e3 := openEngine(t, dir, mod)
	if hw := e3.Topic("r").Partition(0).HighWatermark(); hw != 4 {
		t.Fatalf("the clean-shutdown file's 4 lost to the checkpoint: %d", hw)
	}
	if _, err := os.Stat(filepath.Join(f.dir, highWatermarkFile)); !os.IsNotExist(err) {
		t.Fatalf("the clean-shutdown file is left after it was read: %v", err)
	}
	if err := e3.Close(); err != nil {
		t.Fatal(err)
	}

	// Another topic id under the same key is not taken.
	other := map[hwKey]int64{{TopicID{0xee}, 0}: 9}
	if err := os.WriteFile(path, encodeHWCheckpoint(other), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(f.dir, highWatermarkFile)); err != nil {
		t.Fatal(err)
	}
	e4 := openEngine(t, dir, mod)
	if hw := e4.Topic("r").Partition(0).HighWatermark(); hw != 0 {
		t.Fatalf("the high watermark of another topic id was taken: %d", hw)
	}
}
