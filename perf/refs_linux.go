package perf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// ODirectWrite measures a raw sequential O_DIRECT writer: 1 MiB aligned
// writes to a new file in dir (so on the filesystem of the broker's data
// directory) for d or until maxBytes, then one fdatasync; the file is
// removed afterwards.
func ODirectWrite(ctx context.Context, dir string, d time.Duration, maxBytes int64) (RefResult, error) {
	res := RefResult{Name: "odirect_write", Detail: "1 MiB aligned sequential O_DIRECT pwrites to a file in " + dir + ", then fdatasync"}
	path := filepath.Join(dir, fmt.Sprintf(".ringlog-perf-odirect-%d", os.Getpid()))
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return res, fmt.Errorf("open %s with O_DIRECT: %w", path, err)
	}
	defer os.Remove(path)
	defer unix.Close(fd)
	// An anonymous mapping is page-aligned, as O_DIRECT needs.
	buf, err := unix.Mmap(-1, 0, refChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return res, err
	}
	defer unix.Munmap(buf)
	for i := range buf {
		buf[i] = byte('A' + i%26)
	}
	start := time.Now()
	end := start.Add(d)
	var off int64
	for time.Now().Before(end) && off < maxBytes && ctx.Err() == nil {
		n, err := unix.Pwrite(fd, buf, off)
		if err != nil {
			return res, fmt.Errorf("O_DIRECT write at %d: %w", off, err)
		}
		off += int64(n)
	}
	if err := unix.Fdatasync(fd); err != nil {
		return res, err
	}
	dur := time.Since(start)
	res.Bytes, res.Seconds = off, dur.Seconds()
	res.MBPerSec = float64(off) / MiB / dur.Seconds()
	return res, nil
}
