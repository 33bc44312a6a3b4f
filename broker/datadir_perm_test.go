package broker_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/security"
)

// processUmask is the umask, read from /proc/self/status (syscall.Umask
// would change it for a moment under the other tests); ok is false where
// it cannot be read.
func processUmask(t *testing.T) (fs.FileMode, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err != nil {
				t.Fatalf("Umask line %q: %v", line, err)
			}
			return fs.FileMode(m), true
		}
	}
	return 0, false
}

// TestDataDirModes: everything a broker writes under its data directory
// (the directory itself, partition directories, segments and indexes,
// the transaction index, checkpoints, the metadata, the lock and
// clean-shutdown files, the credentials) is owner-only, 0600 and 0700;
// with --data-dir-group-access, 0640 and 0750, but for security.json,
// which stays 0600.
func TestDataDirModes(t *testing.T) {
	mask, maskKnown := processUmask(t)
	for _, tc := range []struct {
		name      string
		group     bool
		file, dir fs.FileMode
	}{
		{"owner-only", false, 0o600, 0o700},
		{"group access", true, 0o640, 0o750},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data") // created by the broker
			b := brokertest.Start(t, func(c *broker.Config) {
				c.Engine.DataDir = dataDir
				c.Engine.Perm.GroupRead = tc.group
				c.Security.Authorizer = true
				c.Security.SuperUsers = []string{"User:ANONYMOUS"}
				c.NativeAddr = "" // ANONYMOUS may do anything: no native side door
			})
			cred, err := security.NewScramCredential(security.ScramSHA256, "alice-secret", 4096, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.B.Security().UpsertCredential("alice", cred); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			adm := kadm.NewClient(b.Client())
			if r, err := adm.CreateTopic(ctx, 2, 1, map[string]*string{"segment.bytes": kadm.StringPtr("1024")}, "modes"); err != nil || r.Err != nil {
				t.Fatalf("create topic: %v %v", err, r.Err)
			}
			cl := b.Client(kgo.DefaultProduceTopic("modes"))
			for i := 0; i < 40; i++ { // past a few 1 KiB segments
				if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "record %03d, padded to a few hundred bytes %0200d", i, i)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			// An aborted transaction: the transaction state topic and a
			// .txnindex.
			txn := b.Client(kgo.DefaultProduceTopic("modes"), kgo.TransactionalID("modes-txn"))
			if err := txn.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := txn.ProduceSync(ctx, &kgo.Record{Value: []byte("aborted")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Fatal(err)
			}
			// A group's committed offsets: __consumer_offsets.
			if _, err := adm.CommitOffsets(ctx, "modes-group", kadm.OffsetsFromRecords(kgo.Record{Topic: "modes", Partition: 0, Offset: 3})); err != nil {
				t.Fatal(err)
			}
			b.Restart() // the files of a clean shutdown, and a start on them
			b.Stop()

			seen := map[string]bool{}
			err = filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				fi, err := d.Info()
				if err != nil {
					return err
				}
				want, name := tc.file, d.Name()
				switch {
				case d.IsDir():
					want = tc.dir
				case name == "security.json":
					want = 0o600
				}
				got := fi.Mode().Perm()
				if got&^want != 0 || maskKnown && got != want&^mask {
					t.Errorf("%s: mode %04o, want %04o", strings.TrimPrefix(path, dataDir), got, want&^mask)
				}
				seen[filepath.Ext(name)] = true
				seen[name] = true
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{".log", ".index", ".timeindex", ".txnindex", "security.json", "ringlog-meta.json",
				".ringlog-clean-shutdown", ".ringlog.lock", "recovery-point", "leader-epoch-checkpoint", "producer-state.json"} {
				if !seen[want] {
					t.Errorf("no %s under the data directory: the test no longer covers it", want)
				}
			}
		})
	}
}
