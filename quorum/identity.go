package quorum

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ringlog/ringlog/metadata"
)

// identityFile, in the node's directory, says whose Raft data the
// directory holds: {"version":1,"cluster_id":"…","node_id":N,"voters":"1@h:p,…"}. It is
// written before any Raft data; the cluster id is empty until the node is
// formatted with one or learns it from the committed InitCluster record.
const identityFile = "cluster.json"

type identity struct {
	Version   int    `json:"version"`
	ClusterID string `json:"cluster_id"`
	NodeID    int32  `json:"node_id"`
	// Voters is the founding voter set (--voters, canonical), recorded
	// at the first start: the Raft configuration's voters change since.
	Voters string `json:"voters,omitempty"`
}

func readIdentity(dir string) (identity, bool, error) {
	path := filepath.Join(dir, identityFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return identity{}, false, nil
	}
	if err != nil {
		return identity{}, false, fmt.Errorf("quorum: read %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var id identity
	if err := dec.Decode(&id); err != nil || id.Version != 1 || id.NodeID < 0 {
		return identity{}, false, fmt.Errorf("quorum: %s is damaged or from a newer version (%v): it names the cluster and node this directory belongs to", path, err)
	}
	return id, true, nil
}

// writeIdentity replaces the identity file atomically (write, fsync,
// rename, fsync the directory).
func writeIdentity(dir string, id identity) error {
	id.Version = 1
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, identityFile)
	tmp := path + ".tmp"
	if err := writeSync(tmp, append(b, '\n')); err != nil {
		return fmt.Errorf("quorum: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("quorum: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("quorum: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("quorum: sync %s: %w", dir, err)
	}
	return nil
}

func writeSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, metadataPerm().File())
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close() // failing already: the error returned says more
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close() // failing already: the error returned says more
		return err
	}
	return f.Close()
}

// Format prepares dir for node nodeID of cluster clusterID (the
// `ringlog cluster format` step): it writes the identity file, so the
// node refuses to join a quorum with another cluster id. Formatting is
// optional — an unformatted node takes the cluster id the first leader
// commits — and idempotent; a directory that already belongs to another
// node or cluster is an error.
func Format(dir string, nodeID int32, clusterID string) error {
	if nodeID < 0 {
		return fmt.Errorf("quorum: node id %d is negative", nodeID)
	}
	if err := metadata.ValidateClusterID(clusterID); err != nil {
		return fmt.Errorf("quorum: %w", err)
	}
	if err := metadataPerm().MkdirAll(dir); err != nil {
		return fmt.Errorf("quorum: %w", err)
	}
	cur, ok, err := readIdentity(dir)
	if err != nil {
		return err
	}
	if ok {
		if err := cur.check(dir, nodeID, clusterID); err != nil {
			return err
		}
		if cur.ClusterID == clusterID {
			return nil
		}
	} else if hasRaftData(dir) {
		return fmt.Errorf("quorum: %s holds Raft data but no %s; it is not safe to format", dir, identityFile)
	}
	cur.ClusterID, cur.NodeID = clusterID, nodeID
	return writeIdentity(dir, cur)
}

// check refuses a directory of another node, or of another cluster when
// both cluster ids are known.
func (id identity) check(dir string, nodeID int32, clusterID string) error {
	if id.NodeID != nodeID {
		return fmt.Errorf("quorum: %s belongs to node %d, not node %d", dir, id.NodeID, nodeID)
	}
	if id.ClusterID != "" && clusterID != "" && id.ClusterID != clusterID {
		return fmt.Errorf("quorum: %s belongs to cluster %s, not cluster %s: it is another cluster's data directory", dir, id.ClusterID, clusterID)
	}
	return nil
}

func hasRaftData(dir string) bool {
	for _, name := range []string{raftDBFile, snapshotsDir} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}
