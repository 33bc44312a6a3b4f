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
// Offsets are dense and strictly increasing (compaction may leave gaps,
// never reorder). The file name is the base offset of its first batch.
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
// Linux is the product. Two facilities are Linux-only and have no-op
// stand-ins elsewhere (the _other.go files), so the package builds and its
// tests run on macOS: Options.Preallocate (fallocate; nothing is reserved)
// and Options.WritebackBytes (sync_file_range; the kernel's own writeback
// policy stays in charge).
package wal
