// Package wal owns one partition's log on disk: segment files of Kafka v2
// record batches, their sparse offset and time indexes, recovery after a
// crash, retention, and the staged append path the broker's writer shards
// use to write many logs with one submission (group commit).
//
// It knows nothing about the network or Kafka requests; the format of a
// record batch lives in the leaf package wal/batch, and the system calls
// that move bytes to disk in package ring.
//
// # Directory layout (as Kafka's, so its tools can read it)
//
//	<data-dir>/<topic>-<partition>/
//	    00000000000000000000.log        segment: batches, baseOffset-named
//	    00000000000000000000.index      sparse offset index
//	    00000000000000000000.timeindex  time index
//	    00000000000000004096.log        next segment, first offset 4096
//	    ...
//	    recovery-point                  offset below which all is flushed
//	    leader-epoch-checkpoint         the epoch cache (see Leader epochs)
//	    truncation-pending              only during TruncateTo / ResetTo
//
// # Segment (.log)
//
// Record batches back to back, exactly as producers sent them except for
// the fields the broker assigns (baseOffset, partitionLeaderEpoch, and the
// timestamp for LogAppendTime topics):
//
//	+---------------------------------+---------------------------------+----
//	| batch: baseOffset=B             | batch: baseOffset=B+n           | ...
//	| [8 baseOffset][4 length][...]   | [8 baseOffset][4 length][...]   |
//	+---------------------------------+---------------------------------+----
//	^ position 0                      ^ position 12+length
//
// Offsets are dense and strictly increasing (compaction, and a replica
// copying a compacted leader, may leave gaps, never reorder). The file name
// is the base offset of its first batch, or below it when a gap follows
// the name. Leader epochs never decrease along the log and are never
// negative.
//
// # Offset index (.index), 8-byte entries
//
//	+----------------------+----------------------+
//	| relativeOffset (4)   | position (4)         |   offset - segment base,
//	+----------------------+----------------------+   byte position in .log
//
// An entry for the first batch, then one at most every index.interval.bytes
// of log. Lookup: binary search for the last entry at or before the target,
// then walk batch headers. The file is preallocated and mmapped; a sealed
// segment's index is trimmed to its entries.
//
// # Time index (.timeindex), 12-byte entries
//
//	+-------------------------------+----------------------+
//	| timestamp (8)                 | relativeOffset (4)   |
//	+-------------------------------+----------------------+
//
// "The largest timestamp so far is timestamp, first reached by the batch at
// relativeOffset"; timestamps strictly increase.
//
// Indexes are derived data. Recovery rebuilds any index that is missing,
// short, zeroed or inconsistent from the log; a damaged index never loses
// a record.
//
// # Recovery
//
// After a clean shutdown everything is trusted. Otherwise, every segment
// from the recovery point on (rolled segments are fdatasync'ed in the
// background and then advance it) is rescanned, CRC32C-checked, and its
// indexes rebuilt. The first invalid batch ends the scan: a torn tail
// (nothing valid after it) is truncated; damage followed by valid batches
// is corruption and Open refuses the log with a *CorruptionError, unless
// Options.RepairCorruption moves the damaged bytes to a .corrupt file and
// keeps every valid batch.
//
// # Platforms
//
// Linux is the product. Two facilities are Linux-only and do nothing
// elsewhere, so the package builds and its tests run on macOS:
// Options.Preallocate (fallocate, fallocate_other.go; nothing is reserved)
// and Options.WritebackBytes (sync_file_range, through
// ring.StartWriteback; the kernel's own writeback policy stays in charge).
// The writeback hint goes to the backend that committed the writes, so a
// shard with an io_uring hands it to the kernel without waiting.
//
// # Leader epochs (KIP-101, KIP-279)
//
// Append stamps Options.LeaderEpoch into each batch's partitionLeaderEpoch
// (0 unless StartLeaderEpoch changed it: a single node stays at epoch 0).
// The epoch cache lists where each epoch starts:
//
//	epoch 0 ── 0 ────────── epoch 3 ── 150 ──────── epoch 5 ── 400 ──── LEO
//	EndOffsetForEpoch(3) = (3, 400)   EndOffsetForEpoch(4) = (3, 400)
//	EndOffsetForEpoch(5) = (5, LEO)   EndOffsetForEpoch(6) = (-1, -1)
//
// It always equals the epochs of the batches themselves (the first batch
// of each run of one epoch) plus at most one entry at the log end for a
// leader that has not appended yet (StartLeaderEpoch); appends of a lower
// epoch than the data are refused (ErrEpochOrder). It is persisted as
// Kafka's leader-epoch-checkpoint, a text file Kafka's tools read:
//
//	0              version
//	3              number of entries
//	0 0            "epoch startOffset", epochs and offsets increasing
//	3 150
//	5 400
//
// written atomically (temporary file, fdatasync, rename, directory fsync).
// StartLeaderEpoch, TruncateTo and ResetTo write it before they return;
// what appends and retention change is written lazily, before the recovery
// point moves past it (with the flush of a rolled segment, and at Close).
// So at Open the entries below the first rescanned offset come from the
// file (checked against the batches they name: a few header reads), and
// the rest from the headers of the rescanned segments, found by bisecting
// the sparse index (epochs never decrease: a few header reads per segment
// and a short walk per epoch change). A missing or inconsistent file is
// rebuilt the same way from the whole log.
//
// # Replication primitives
//
// A follower copies its leader with Batch.AppendReplica (offsets, epochs
// and timestamps kept; every batch CRC-checked; gaps allowed; the same
// staged group commit and fdatasync as Append), drops a divergent tail
// with TruncateTo (every batch holding an offset at or after the target;
// a straddling batch goes whole, so the new end may be below the target)
// and starts over at the leader's log start with ResetTo. A new leader
// calls StartLeaderEpoch. Truncation and reset commit by writing a
// truncation-pending marker ("truncate <offset>" or "reset <offset>",
// written like the checkpoint) before changing anything, and remove it
// when done; Open completes an operation whose marker it finds, so after a
// crash the log is the old one or the new one, never in between. Both
// first lower the recovery point to the new end, so bytes written later
// at the same offsets are rescanned after a crash. The high watermark is
// the caller's: it clamps it to the end TruncateTo returns.
package wal
