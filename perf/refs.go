package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// RefResult is one physical reference measurement: what the machine can
// do without a broker in the way.
type RefResult struct {
	// Name is tcp_loopback or odirect_write; MBPerSec (MiB/s) is Bytes
	// over Seconds; Detail says how it was measured; Error why it failed.
	Name     string  `json:"name"`
	MBPerSec float64 `json:"mb_per_sec"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	Detail   string  `json:"detail"`
	Error    string  `json:"error,omitempty"`
}

// refChunk is the write size of both references.
const refChunk = 1 << 20

// TCPLoopback measures a raw loopback TCP socket pump: one goroutine
// writes 1 MiB buffers to another over 127.0.0.1 for d; the rate is what
// the reader received after the first quarter second (warm-up).
func TCPLoopback(ctx context.Context, d time.Duration) (RefResult, error) {
	res := RefResult{Name: "tcp_loopback", Detail: "1 MiB writes from one goroutine to another over 127.0.0.1, default socket buffers"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	defer ln.Close()
	type count struct {
		bytes int64
		dur   time.Duration
		err   error
	}
	got := make(chan count, 1)
	warm := 250 * time.Millisecond
	if d < 4*warm {
		warm = d / 4
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- count{err: err}
			return
		}
		defer c.Close()
		buf := make([]byte, refChunk)
		var n int64
		var from, last time.Time
		start := time.Now()
		for {
			k, err := c.Read(buf)
			now := time.Now()
			if from.IsZero() && now.Sub(start) >= warm {
				from = now
			} else if !from.IsZero() {
				n += int64(k)
				last = now
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				got <- count{bytes: n, dur: last.Sub(from), err: err}
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return res, err
	}
	buf := make([]byte, refChunk)
	for i := range buf {
		buf[i] = byte(i)
	}
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return res, err
		}
	}
	c.Close()
	r := <-got
	if r.err != nil {
		return res, r.err
	}
	res.Bytes, res.Seconds = r.bytes, r.dur.Seconds()
	if r.dur > 0 {
		res.MBPerSec = float64(r.bytes) / MiB / r.dur.Seconds()
	}
	return res, nil
}

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
