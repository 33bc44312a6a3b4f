package wal

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/ringlog/ringlog/internal/fsutil"
)

// Options configure a Log. The zero value of a field means its default.
type Options struct {
	// SegmentBytes rolls the active segment when the next batch would take
	// it past this size (segment.bytes). Default 1 GiB.
	SegmentBytes int64
	// SegmentAge rolls the active segment once its first batch is older
	// than this (segment.ms). 0: never roll by age.
	SegmentAge time.Duration
	// IndexIntervalBytes is the most log bytes between two sparse index
	// entries (index.interval.bytes). Default 4096.
	IndexIntervalBytes int
	// MaxIndexBytes is the preallocated size of each offset index
	// (segment.index.bytes); a full index rolls the segment. Default 10 MiB.
	MaxIndexBytes int
	// RetentionBytes deletes the oldest segments while the log is larger
	// than this (retention.bytes). Negative or 0: unlimited.
	RetentionBytes int64
	// RetentionAge deletes segments whose newest timestamp is older than
	// this (retention.ms). Negative or 0: unlimited.
	RetentionAge time.Duration
	// Tiered says the log's closed segments are copied to an object
	// store (remote.storage.enable): retention then deletes a local
	// segment only once SetRemoteEnd says it was copied, and by the local
	// limits below instead of RetentionBytes and RetentionAge (the
	// remote copies expire by those, which the uploader enforces).
	Tiered bool
	// LocalRetentionBytes and LocalRetentionAge are the local limits of a
	// tiered log (local.retention.bytes, local.retention.ms). Negative or
	// 0: unlimited.
	LocalRetentionBytes int64
	LocalRetentionAge   time.Duration
	// FlushMessages makes an append also fdatasync the log once this many
	// records were appended since the last sync (flush.messages). 0: never.
	FlushMessages int64
	// FlushInterval asks for a sync when unsynced data is older than this
	// (flush.ms); the owner checks FlushDue. 0: never.
	FlushInterval time.Duration
	// WritebackBytes starts the kernel's writeback of a segment's data
	// every time this many more bytes of it were appended (sync_file_range
	// SYNC_FILE_RANGE_WRITE on the whole chunks behind the tail: no wait
	// for the disk, no durability promise). The page cache then never
	// holds more than about this much dirty data per log, so the kernel
	// does not throttle appends, or stall them behind writeback, in bursts
	// once gigabytes are dirty. 0: leave writeback to the kernel. Linux
	// only: elsewhere the hint is a no-op.
	WritebackBytes int64
	// PageCacheTailBytes drops a segment's data from the page cache once
	// its writeback was started and more than this many bytes were
	// appended after it (posix_fadvise DONTNEED on the whole writeback
	// chunks behind: the kernel drops only clean pages). Readers within
	// this distance of the tail read the page cache; the freed pages are
	// the ones the next appends take, instead of fresh ones, which on a VM
	// whose free memory the hypervisor takes back cost several times the
	// copy. 0: leave the page cache to the kernel. Needs WritebackBytes;
	// Linux only, like it.
	PageCacheTailBytes int64
	// DirectWrites writes appends with O_DIRECT, past the page cache: each
	// submission copies a log's batches, after the partial block the last
	// one ended in, into one aligned buffer and writes it whole, zero
	// padded to a 4 KiB block (the next write rewrites that block). The
	// kernel allocates and copies no page-cache pages for them, and
	// readers read the disk (the file through the page cache as before,
	// which caches what they read). A padded segment is cut back to its
	// data when sealed or closed; recovery drops the padding left by a
	// crash. WritebackBytes and PageCacheTailBytes do nothing with it
	// (there are no dirty pages). Linux only, and the file system must
	// support O_DIRECT (tmpfs does not).
	DirectWrites bool
	// Preallocate reserves SegmentBytes of disk when a segment is created
	// (fallocate, released past the data when the segment is sealed).
	// Linux only: elsewhere nothing is reserved.
	Preallocate bool
	// LogAppendTime makes the broker stamp each batch with its append time
	// (message.timestamp.type=LogAppendTime).
	LogAppendTime bool
	// LeaderEpoch is written into each batch Append stages (the
	// partitionLeaderEpoch field, outside the CRC, patched in place like
	// baseOffset), and the first batch of a new epoch adds an entry to the
	// epoch cache. It is the epoch at Open; StartLeaderEpoch changes it
	// (SetOptions keeps it). Append refuses an epoch below the epoch of
	// data already in the log (ErrEpochOrder). Not negative. Default 0:
	// one node, one epoch forever.
	LeaderEpoch int32

	// Clean says the previous owner of the directory closed it cleanly, so
	// Open trusts the files instead of rescanning what may be unclean.
	Clean bool
	// Perm is the mode of the files and directories the log creates (its
	// directory, segments, indexes, checkpoints, markers). The zero value
	// is owner-only. Fixed at Open (SetOptions keeps it).
	Perm fsutil.Perm
	// RepairCorruption makes Open salvage a log with damage in the middle:
	// the damaged bytes are moved to a .corrupt file next to the segment
	// and every valid batch is kept (with a gap in offsets). Without it,
	// Open refuses such a log with a *CorruptionError.
	RepairCorruption bool

	// Logger receives recovery and retention actions. Default: discard.
	Logger *slog.Logger
	// Now is the clock (tests replace it). Default time.Now.
	Now func() time.Time
	// SyncFile flushes a segment file the log writes outside the ring
	// (a sealed segment's background flush, a compacted or truncated
	// segment). Default (*os.File).Sync; tests observe syncs through it
	// (internal/powerloss).
	SyncFile func(*os.File) error

	// crashHook, when set (tests), is called at each step of TruncateTo,
	// ResetTo and their completion at Open; an error stops the operation
	// right there, as a crash would.
	crashHook func(step string) error
}

// Defaults.
const (
	DefaultSegmentBytes       = 1 << 30
	DefaultIndexIntervalBytes = 4096
	DefaultMaxIndexBytes      = 10 << 20
)

func (o *Options) withDefaults() (Options, error) {
	r := *o
	if r.SegmentBytes == 0 {
		r.SegmentBytes = DefaultSegmentBytes
	}
	if r.SyncFile == nil {
		r.SyncFile = (*os.File).Sync
	}
	if r.SegmentBytes < batchMin {
		return r, fmt.Errorf("segment bytes %d is too small", r.SegmentBytes)
	}
	if r.SegmentBytes > 1<<31-1 {
		// Positions in the index are 4 bytes, as in Kafka.
		return r, fmt.Errorf("segment bytes %d exceeds the 2 GiB index limit", r.SegmentBytes)
	}
	if r.LeaderEpoch < 0 {
		return r, fmt.Errorf("leader epoch %d is negative", r.LeaderEpoch)
	}
	if r.WritebackBytes < 0 {
		return r, fmt.Errorf("writeback bytes %d is negative", r.WritebackBytes)
	}
	if r.PageCacheTailBytes < 0 {
		return r, fmt.Errorf("page cache tail bytes %d is negative", r.PageCacheTailBytes)
	}
	if r.DirectWrites {
		r.WritebackBytes, r.PageCacheTailBytes = 0, 0
	}
	if r.IndexIntervalBytes <= 0 {
		r.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if r.MaxIndexBytes == 0 {
		r.MaxIndexBytes = DefaultMaxIndexBytes
	}
	if r.MaxIndexBytes < 4*offsetEntrySize {
		return r, fmt.Errorf("max index bytes %d is too small", r.MaxIndexBytes)
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return r, nil
}

// batchMin is the smallest possible record batch.
const batchMin = 61
