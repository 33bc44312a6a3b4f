package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/wal/batch"
)

// TestCorruptionMatrix damages a cleanly closed three-segment log in each
// way disks damage files, opens it as after a crash (or cleanly, where the
// damage is to files a clean start trusts), and checks what is served, what
// is logged and what is refused. Nothing after damage in the middle of a
// log is served silently, and indexes rebuild from the log.
func TestCorruptionMatrix(t *testing.T) {
	const perSeg, segs = 6, 3
	const total = perSeg * segs
	type outcome struct {
		refused string  // substring of Open's error; "" when it opens
		served  []int64 // with repair or truncation: the base offsets served
		logged  string  // substring of the captured log
	}
	all := func(n int) []int64 {
		var o []int64
		for i := 0; i < n; i++ {
			o = append(o, int64(i))
		}
		return o
	}
	cases := []struct {
		name   string
		clean  bool
		repair bool
		damage func(t *testing.T, dir string, segBases []int64)
		want   outcome
		after  func(t *testing.T, dir string, segBases []int64, l *Log)
		// logsAfter is a substring of the log once after has run.
		logsAfter string
	}{
		{
			name: "flip a byte mid sealed segment, recovery point lost",
			damage: func(t *testing.T, dir string, b []int64) {
				flipMid(t, filepath.Join(dir, segmentName(b[1], logSuffix)))
				os.Remove(filepath.Join(dir, recoveryPointFile))
			},
			want: outcome{refused: "--repair-corrupt-logs"},
		},
		{
			name: "flip a byte mid sealed segment, repair", repair: true,
			damage: func(t *testing.T, dir string, b []int64) {
				flipMid(t, filepath.Join(dir, segmentName(b[1], logSuffix)))
				os.Remove(filepath.Join(dir, recoveryPointFile))
			},
			want: outcome{served: without(all(total), 9), logged: "moved damaged bytes aside"},
		},
		{
			name: "flip a byte mid sealed segment below the recovery point",
			damage: func(t *testing.T, dir string, b []int64) {
				flipMid(t, filepath.Join(dir, segmentName(b[1], logSuffix)))
			},
			// Not rescanned at start (as in Kafka): every batch is served,
			// the damaged one with its stored CRC32C, which fails the
			// consumer's check (never silently wrong data).
			want: outcome{},
			after: func(t *testing.T, dir string, b []int64, l *Log) {
				for off := int64(0); off < total; off++ {
					buf, err := l.ReadBytes(nil, off, 1, l.EndOffset())
					if err != nil || len(buf) == 0 {
						t.Fatalf("read %d: %d bytes, %v", off, len(buf), err)
					}
					h, err := batch.CheckStored(buf[:batch.BatchLength(buf)+batch.LogOverhead])
					if (err != nil) != (off == 9) || h.BaseOffset != off {
						t.Fatalf("batch %d (base %d): CRC check %v", off, h.BaseOffset, err)
					}
				}
			},
		},
		{
			name: "flip a byte mid active segment",
			damage: func(t *testing.T, dir string, b []int64) {
				flipMid(t, filepath.Join(dir, segmentName(b[2], logSuffix)))
			},
			want: outcome{refused: "is corrupt at byte"},
		},
		{
			name: "flip a byte mid active segment, repair", repair: true,
			damage: func(t *testing.T, dir string, b []int64) {
				flipMid(t, filepath.Join(dir, segmentName(b[2], logSuffix)))
			},
			want: outcome{served: without(all(total), 15), logged: "repairing corrupt segment"},
			after: func(t *testing.T, dir string, b []int64, l *Log) {
				if fi, err := os.Stat(filepath.Join(dir, segmentName(b[2], corruptSuffix))); err != nil || fi.Size() == 0 {
					t.Fatalf("damaged bytes not kept aside: %v", err)
				}
			},
		},
		{
			name: "truncate mid batch",
			damage: func(t *testing.T, dir string, b []int64) {
				p := filepath.Join(dir, segmentName(b[2], logSuffix))
				fi, _ := os.Stat(p)
				if err := os.Truncate(p, fi.Size()-7); err != nil {
					t.Fatal(err)
				}
			},
			want: outcome{served: all(total - 1), logged: "truncating torn tail"},
		},
		{
			name: "append garbage to the log",
			damage: func(t *testing.T, dir string, b []int64) {
				f, err := os.OpenFile(filepath.Join(dir, segmentName(b[2], logSuffix)), os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.Write(bytes.Repeat([]byte{0xa5}, 100))
				f.Close()
			},
			want: outcome{served: all(total), logged: "truncating torn tail"},
		},
		{
			name: "append garbage to a sealed segment", clean: true,
			damage: func(t *testing.T, dir string, b []int64) {
				f, err := os.OpenFile(filepath.Join(dir, segmentName(b[0], logSuffix)), os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.Write(bytes.Repeat([]byte{0xa5}, 100))
				f.Close()
			},
			want: outcome{refused: "later segments hold valid data"},
		},
		{
			name: "zero the offset index", clean: true,
			damage: func(t *testing.T, dir string, b []int64) {
				p := filepath.Join(dir, segmentName(b[1], indexSuffix))
				fi, _ := os.Stat(p)
				if err := os.WriteFile(p, make([]byte, fi.Size()), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want:  outcome{served: all(total), logged: "rebuilding segment indexes"},
			after: indexRebuilt(1),
		},
		{
			name: "delete the offset index", clean: true,
			damage: func(t *testing.T, dir string, b []int64) {
				if err := os.Remove(filepath.Join(dir, segmentName(b[1], indexSuffix))); err != nil {
					t.Fatal(err)
				}
			},
			want:  outcome{served: all(total), logged: "offset index is missing or empty"},
			after: indexRebuilt(1),
		},
		{
			name: "offset index entry names the wrong batch", clean: true,
			damage: func(t *testing.T, dir string, b []int64) {
				// Move entry 1 to the batch after the one it names: the
				// entries still increase and stay inside the log, so the
				// checks at open pass.
				logBytes, err := os.ReadFile(filepath.Join(dir, segmentName(b[1], logSuffix)))
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, segmentName(b[1], indexSuffix))
				idx, err := os.ReadFile(p)
				if err != nil || len(idx) < 3*offsetEntrySize {
					t.Fatalf("index of %d bytes: %v", len(idx), err)
				}
				pos := int(binary.BigEndian.Uint32(idx[offsetEntrySize+4:]))
				next := pos + int(batch.BatchLength(logBytes[pos:])) + batch.LogOverhead
				if next >= int(binary.BigEndian.Uint32(idx[2*offsetEntrySize+4:])) {
					t.Fatal("no batch between index entries 1 and 2")
				}
				binary.BigEndian.PutUint32(idx[offsetEntrySize+4:], uint32(next))
				if err := os.WriteFile(p, idx, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: outcome{served: all(total)},
			after: func(t *testing.T, dir string, b []int64, l *Log) {
				for off := int64(0); off < total; off++ {
					buf, err := l.ReadBytes(nil, off, 1, l.EndOffset())
					if err != nil || len(buf) == 0 {
						t.Fatalf("read %d: %d bytes, %v", off, len(buf), err)
					}
					if h, err := batch.CheckStored(buf[:batch.BatchLength(buf)+batch.LogOverhead]); err != nil || h.BaseOffset != off {
						t.Fatalf("read %d returned batch %d: %v", off, h.BaseOffset, err)
					}
				}
				if _, err := os.Stat(filepath.Join(dir, segmentName(b[1], indexSuffix))); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the wrong index was not removed for a rebuild: %v", err)
				}
			},
			logsAfter: "offset index disagrees with the log",
		},
		{
			name: "delete the time index", clean: true,
			damage: func(t *testing.T, dir string, b []int64) {
				if err := os.Remove(filepath.Join(dir, segmentName(b[1], timeIndexSuffix))); err != nil {
					t.Fatal(err)
				}
			},
			want: outcome{served: all(total), logged: "time index is missing or empty"},
			after: func(t *testing.T, dir string, b []int64, l *Log) {
				// The segment's timestamps are known again: a lookup by
				// the time of its first batch finds that batch.
				got, ok, err := l.OffsetForTime(1000 + 6)
				if err != nil || !ok || got.Offset != 6 {
					t.Fatalf("offset for time of batch 6: %+v %v %v", got, ok, err)
				}
			},
		},
		{
			name: "corrupt the recovery-point file",
			damage: func(t *testing.T, dir string, b []int64) {
				if err := os.WriteFile(filepath.Join(dir, recoveryPointFile), []byte("\x00zz9"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			// Read as 0: every segment is rescanned, nothing is lost.
			want: outcome{served: all(total)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			backend := ring.NewPortable()
			defer backend.Close()
			size := int64(len(makeBatch(t, total, 1, 10, 1000)))
			opts := Options{SegmentBytes: perSeg*size + size/2, IndexIntervalBytes: 100, Logger: testLogger(t),
				Now: func() time.Time { return time.UnixMilli(1_700_000_000_000) }}
			l := openLog(t, dir, opts)
			for i := 0; i < total; i++ {
				if _, err := l.Append(backend, [][]byte{makeBatch(t, i, 1, 10, int64(1000+i))}, false); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			bases, err := listSegments(dir, slog.New(slog.DiscardHandler))
			if err != nil || len(bases) != segs {
				t.Fatalf("segments %v (%v), want %d", bases, err, segs)
			}
			tc.damage(t, dir, bases)
			var logBuf testenv.SyncBuffer
			opts.Logger = slog.New(slog.NewTextHandler(&logBuf, nil))
			opts.Clean, opts.RepairCorruption = tc.clean, tc.repair
			l, err = Open(dir, opts)
			t.Logf("log:\n%s", logBuf.String())
			if tc.want.refused != "" {
				var ce *CorruptionError
				if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want.refused) {
					l.Close()
					t.Fatalf("open: %v, want a refusal saying %q", err, tc.want.refused)
				}
				if errors.As(err, &ce) && !strings.Contains(err.Error(), "--repair-corrupt-logs") {
					t.Fatalf("refusal does not say how to repair: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer l.Close()
			if tc.want.served != nil {
				var got []int64
				for _, h := range readAll(t, l, true) {
					got = append(got, h.BaseOffset)
				}
				if !slicesEqual(got, tc.want.served) {
					t.Fatalf("served base offsets %v, want %v", got, tc.want.served)
				}
			}
			if !strings.Contains(logBuf.String(), tc.want.logged) {
				t.Fatalf("log lacks %q:\n%s", tc.want.logged, logBuf.String())
			}
			if tc.after != nil {
				tc.after(t, dir, bases, l)
			}
			if !strings.Contains(logBuf.String(), tc.logsAfter) {
				t.Fatalf("log lacks %q:\n%s", tc.logsAfter, logBuf.String())
			}
			end := l.EndOffset()
			if res, err := l.Append(backend, [][]byte{makeBatch(t, 99, 1, 3, 5)}, false); err != nil || res[0].BaseOffset != end {
				t.Fatalf("append after recovery: %+v %v", res, err)
			}
		})
	}
}

// flipMid flips one bit in the middle batch of a segment file.
func flipMid(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2+40] ^= 0x10 // inside the header of the middle batch, past its length and magic
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// indexRebuilt checks that segment i's offset index was rewritten with
// entries that name the batches there.
func indexRebuilt(i int) func(t *testing.T, dir string, b []int64, l *Log) {
	return func(t *testing.T, dir string, b []int64, l *Log) {
		s := l.segs[i]
		if n := s.idx.entries.Load(); n < 2 {
			t.Fatalf("rebuilt index has %d entries", n)
		}
		if err := s.idx.sane(s.size.Load(), -1); err != nil {
			t.Fatal(err)
		}
		var hdr [batch.HeaderSize]byte
		for e := int64(0); e < s.idx.entries.Load(); e++ {
			rel, pos := s.idx.entry(e)
			if h, err := s.readHeader(int64(pos), &hdr); err != nil || h.BaseOffset != s.base+int64(rel) {
				t.Fatalf("rebuilt entry %d (+%d, %d) names batch %d: %v", e, rel, pos, h.BaseOffset, err)
			}
		}
	}
}

func without(s []int64, v int64) []int64 {
	var o []int64
	for _, x := range s {
		if x != v {
			o = append(o, x)
		}
	}
	return o
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
