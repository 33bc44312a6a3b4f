package engine

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringlog/ringlog/internal/fsutil"
)

// The high-watermark checkpoint (Kafka's replication-offset-checkpoint):
// in cluster mode the engine writes every replicated partition's high
// watermark to one file in the data directory every
// Config.HighWatermarkCheckpointInterval, so that a broker killed with
// -9 restarts from a high watermark at most that old rather than from
// its logs' starts. Clean shutdowns also write each partition's own
// file (highWatermarkFile), which is newer when present (see
// loadHighWatermark); the value is clamped into the log.
//
// Format, text:
//
//	ringlog-high-watermarks 1
//	<topic id, 32 hex digits> <partition> <high watermark>
//	...
//
// The topic id, not the name, keys an entry: a topic deleted and created
// again under the same name is another topic, and its new log must not
// take the old one's high watermark.
const hwCheckpointFile = "replication-offset-checkpoint"

const hwCheckpointHeader = "ringlog-high-watermarks 1"

// Bounds on a checkpoint read back (the file is hostile input, like any
// on disk): its size and entries.
const (
	maxHWCheckpointBytes   = 64 << 20
	maxHWCheckpointEntries = 1 << 18
)

// hwKey names one partition in the checkpoint.
type hwKey struct {
	topic     TopicID
	partition int32
}

// encodeHWCheckpoint writes the entries, sorted, in the file's format.
func encodeHWCheckpoint(hws map[hwKey]int64) []byte {
	keys := make([]hwKey, 0, len(hws))
	for k := range hws {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b hwKey) int {
		if c := bytes.Compare(a.topic[:], b.topic[:]); c != 0 {
			return c
		}
		return int(a.partition) - int(b.partition)
	})
	var b bytes.Buffer
	b.WriteString(hwCheckpointHeader + "\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d %d\n", hex.EncodeToString(k.topic[:]), k.partition, hws[k])
	}
	return b.Bytes()
}

// decodeHWCheckpoint parses a checkpoint: the header, then one entry per
// line (a topic id, a partition >= 0, a high watermark >= 0). Anything
// else is an error: the whole file is then ignored (its values are only
// a head start).
func decodeHWCheckpoint(r io.Reader) (map[hwKey]int64, error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxHWCheckpointBytes+1))
	sc.Buffer(make([]byte, 0, 256), 256)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("high-watermark checkpoint: %w", err)
		}
		return nil, errors.New("high-watermark checkpoint: empty")
	}
	if sc.Text() != hwCheckpointHeader {
		return nil, fmt.Errorf("high-watermark checkpoint: header %.40q, want %q", sc.Text(), hwCheckpointHeader)
	}
	out := map[hwKey]int64{}
	read := len(hwCheckpointHeader) + 1
	for line := 2; sc.Scan(); line++ {
		read += len(sc.Bytes()) + 1
		if read > maxHWCheckpointBytes {
			return nil, fmt.Errorf("high-watermark checkpoint: more than %d bytes", maxHWCheckpointBytes)
		}
		if len(out) >= maxHWCheckpointEntries {
			return nil, fmt.Errorf("high-watermark checkpoint: more than %d entries", maxHWCheckpointEntries)
		}
		f := strings.Fields(sc.Text())
		if len(f) != 3 || len(f[0]) != 32 {
			return nil, fmt.Errorf("high-watermark checkpoint: line %d: want a topic id, a partition and a high watermark", line)
		}
		var k hwKey
		if _, err := hex.Decode(k.topic[:], []byte(f[0])); err != nil {
			return nil, fmt.Errorf("high-watermark checkpoint: line %d: topic id: %w", line, err)
		}
		p, err := strconv.ParseInt(f[1], 10, 32)
		if err != nil || p < 0 {
			return nil, fmt.Errorf("high-watermark checkpoint: line %d: partition %q", line, f[1])
		}
		hw, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || hw < 0 {
			return nil, fmt.Errorf("high-watermark checkpoint: line %d: high watermark %q", line, f[2])
		}
		k.partition = int32(p)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("high-watermark checkpoint: line %d: partition %d of topic %s twice", line, p, f[0])
		}
		out[k] = hw
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("high-watermark checkpoint: %w", err)
	}
	return out, nil
}

// loadHWCheckpoint reads the data directory's checkpoint (at open; none
// is an empty map, an unreadable one is logged and ignored).
func (e *Engine) loadHWCheckpoint() map[hwKey]int64 {
	path := filepath.Join(e.cfg.DataDir, hwCheckpointFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		e.logger.Warn("ignoring the high-watermark checkpoint", "file", path, "err", err)
		return nil
	}
	defer f.Close()
	hws, err := decodeHWCheckpoint(f)
	if err != nil {
		e.logger.Warn("ignoring the high-watermark checkpoint", "file", path, "err", err)
		return nil
	}
	return hws
}

// highWatermarks collects every replicated partition's high watermark
// (those above 0).
func (e *Engine) highWatermarks() map[hwKey]int64 {
	hws := map[hwKey]int64{}
	for _, t := range e.Topics() {
		for _, p := range t.Partitions() {
			if p.rep == nil || p.removed.Load() {
				continue
			}
			if hw := p.hw.Load(); hw > 0 {
				hws[hwKey{t.ID, p.Index}] = hw
			}
		}
	}
	return hws
}

// runHWCheckpoints writes the checkpoint every interval while a high
// watermark moved, until stop; its last write happens at stop.
func (e *Engine) runHWCheckpoints(interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	var last map[hwKey]int64
	failing := false // logged once a streak
	write := func() {
		hws := e.highWatermarks()
		if last != nil && maps.Equal(hws, last) {
			return
		}
		path := filepath.Join(e.cfg.DataDir, hwCheckpointFile)
		if err := fsutil.WriteFileAtomic(path, encodeHWCheckpoint(hws), e.cfg.Perm.File()); err != nil {
			if !failing {
				e.logger.Warn("writing the high-watermark checkpoint failed; trying again every interval", "file", path, "err", err)
				failing = true
			}
			return
		}
		if failing {
			e.logger.Info("the high-watermark checkpoint is written again", "file", path)
			failing = false
		}
		last = hws
	}
	for {
		select {
		case <-stop:
			write()
			return
		case <-t.C:
			write()
		}
	}
}
