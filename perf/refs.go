package perf

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
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
