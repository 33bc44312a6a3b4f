package quorum

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNodeDirectoryOwnerOnly: everything in a node's directory is
// owner-only, 0600 and 0700, though raft's snapshot store creates 0755
// and 0644: cluster.json, raft.db, the snapshots (which carry the
// credentials and ACLs), and what an older ringlog left wider.
func TestNodeDirectoryOwnerOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newTestCluster(t, 1, func(cfg *Config) {
		// The directory as an older version left it.
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(cfg.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.Dir, "operator-notes"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	c.initialized(ctx)
	c.registerBrokers(ctx)
	n := c.node(1)
	for i := 0; i < 2; i++ { // a second one: a new snapshot after the first was in place
		if err := n.Snapshot(); err != nil {
			t.Fatal(err)
		}
		c.registerBrokers(ctx)
	}
	dir := c.dirs[1]
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if got := fi.Mode().Perm(); got&^want != 0 {
			t.Errorf("%s: mode %04o, want at most %04o", strings.TrimPrefix(path, dir), got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, snapshotsDir)); err != nil || files < 5 {
		t.Fatalf("%d files and snapshots: %v; want cluster.json, raft.db, a snapshot's meta.json and state.bin", files, err)
	}
}
