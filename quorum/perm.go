package quorum

import (
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/ringlog/ringlog/internal/fsutil"
)

// metadataPerm is the mode of everything in a node's directory: always
// owner-only (files 0600, directories 0700), even when the broker gives
// its group read access to the rest of the data directory
// (--data-dir-group-access). The Raft log and snapshots carry the
// cluster's SCRAM credentials and ACLs, like security.json on a single
// broker, which stays 0600 too.
//
// Not every file here is created by ringlog: raft-boltdb creates raft.db
// 0600 itself (a constant, dbFileMode, with no option), which is what we
// want; raft's FileSnapshotStore creates snapshots/ and each snapshot's
// directory 0755 and its meta.json and state.bin 0644 (less the umask),
// with no option for another mode. Open therefore restricts the whole
// directory after opening the store (also tightening what an older
// ringlog left), and ownerOnlySnapshots does so for every new snapshot
// right after raft created its files, before it writes the image into
// them.
func metadataPerm() fsutil.Perm { return fsutil.Perm{} }

// ownerOnlySnapshots is raft's FileSnapshotStore with the files of every
// snapshot made owner-only as soon as they exist (see metadataPerm).
type ownerOnlySnapshots struct {
	*raft.FileSnapshotStore
	dir string // the node's directory, which holds the store's
}

// Create starts a snapshot as FileSnapshotStore.Create does, then takes
// the group's and others' bits from its directory and (still empty)
// files; the rename that completes it keeps them.
func (s ownerOnlySnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	if err := metadataPerm().Restrict(s.dir); err != nil {
		if cerr := sink.Cancel(); cerr != nil {
			err = fmt.Errorf("%w (and cancelling the snapshot: %v)", err, cerr)
		}
		return nil, fmt.Errorf("quorum: restrict the modes of snapshot %s: %w", sink.ID(), err)
	}
	return sink, nil
}
