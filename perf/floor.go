package perf

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The relay floor: what end-to-end latency this machine gives a process
// that does nothing but move the records, measured with the same paced
// producer and long-polling consumer as e2e-raw. Between the e2e-raw
// clients and a broker, a record costs a timer wake-up of the producer,
// a request to another process, its answer, a long-poll answer to the
// consumer and that consumer's next poll; on a shared machine each of
// these waits for a core. The relay (ServeRelay) keeps that pattern and
// drops everything else (no Kafka protocol, no disk, no index: the
// standard library's net package with a goroutine per connection), so the
// latency it measures is the floor the host sets for any broker, and the
// broker's own share is its distance from it, measured side by side.
//
// Its wire protocol, on one TCP connection per client, starts with one
// role byte: relayProducer or relayConsumer.
//   - A producer sends frames: a 4-byte big-endian length, then that many
//     bytes of records (RecordSize bytes each, stamped as e2e-raw's values
//     are: stampRecord's due and send times). The relay answers every
//     frame, in order, with its 4-byte length.
//   - A consumer sends one byte (relayPoll) per poll. The relay answers a
//     poll with a frame (length, then bytes) of every record the producers
//     sent since the last answer, at once when there are some, otherwise
//     as soon as a producer's frame arrives (a long poll with no timeout).
//
// One relay serves one run: its records go to whichever consumer polls.

// The relay floor's role bytes and the consumer's poll byte.
const (
	relayProducer = 'p'
	relayConsumer = 'c'
	relayPoll     = 'f'
)

// relayMaxFrame bounds a producer's frame (a corrupt length must not
// allocate gigabytes).
const relayMaxFrame = 64 << 20

// relay is the relay floor's shared state: records not yet polled and
// whether a consumer waits for them.
type relay struct {
	mu sync.Mutex
	// pending holds the records not polled yet, from pending[head:];
	// frames are the lengths of the producer frames they came in, so
	// that an answer ends on a frame's end (whole records).
	pending []byte
	head    int
	frames  []int
	waiting net.Conn // the consumer with a poll outstanding, or nil
}

// relayMaxAnswer bounds one answer to a poll: a consumer that fell behind
// catches up in answers of this size (or one producer frame, when
// larger) rather than one answer of everything, which outgrew what it
// reads (256 MiB) and failed the run. (Seen at 205k records/s on a host
// whose page faults were slow: the load generator ran seconds late in its
// first seconds, the relay's pending records grew to 340-560 MB, and
// growing them faulted in fresh pages all the while. With 4 MiB answers
// the consumer had not caught up 40 s later, in two runs; with 32 MiB it
// did in the 4th and 5th second, in two runs.)
const relayMaxAnswer = 32 << 20

// take moves the pending records of whole producer frames, at least one
// and up to relayMaxAnswer bytes, after a length prefix into out
// (rl.mu held, something pending).
func (rl *relay) take(out []byte) []byte {
	n, k := 0, 0
	for k < len(rl.frames) && (k == 0 || n+rl.frames[k] <= relayMaxAnswer) {
		n += rl.frames[k]
		k++
	}
	out = binary.BigEndian.AppendUint32(out[:0], uint32(n))
	out = append(out, rl.pending[rl.head:rl.head+n]...)
	rl.head += n
	rl.frames = rl.frames[:copy(rl.frames, rl.frames[k:])]
	switch {
	case len(rl.frames) == 0:
		rl.pending, rl.head = rl.pending[:0], 0
	case rl.head >= len(rl.pending)/2:
		// Compact once the answered half is the larger one: each
		// byte is moved at most once more than it is answered.
		rl.pending = rl.pending[:copy(rl.pending, rl.pending[rl.head:])]
		rl.head = 0
	}
	return out
}

// ServeRelay serves the relay floor's protocol on ln until ctx ends or ln
// fails; it closes ln and every connection before it returns. It calls
// ready (when not nil) once it is set up, before it accepts: a relay
// process announces itself there (RelayReadyPrefix), so that the setup
// is done before the run's clock starts.
func ServeRelay(ctx context.Context, ln net.Listener, ready func()) error {
	// Room for two answers' worth of records not polled yet, mapped
	// before the first client comes (see prefaulted).
	rl := &relay{pending: prefaulted(2 * relayMaxAnswer)[:0]}
	if ready != nil {
		ready()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer func() {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("relay: accept: %w", err)
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = rl.serve(c) // a client's error ends only its connection
			c.Close()
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}()
	}
}

// serve runs one client connection.
func (rl *relay) serve(c net.Conn) error {
	br := bufio.NewReaderSize(c, 256<<10)
	role, err := br.ReadByte()
	if err != nil {
		return err
	}
	switch role {
	case relayProducer:
		return rl.serveProducer(c, br)
	case relayConsumer:
		return rl.serveConsumer(c, br)
	}
	return fmt.Errorf("relay: unknown role byte %#x", role)
}

// serveProducer reads frames, hands their records to a waiting consumer
// (or keeps them for the next poll), then answers the frame.
func (rl *relay) serveProducer(c net.Conn, br *bufio.Reader) error {
	var hdr [4]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > relayMaxFrame {
			return fmt.Errorf("relay: a frame of %d bytes (at most %d)", n, relayMaxFrame)
		}
		buf = append(slices.Grow(buf[:0], 4+int(n)), hdr[:]...)[:4+n]
		if _, err := io.ReadFull(br, buf[4:]); err != nil {
			return err
		}
		rl.mu.Lock()
		consumer := rl.waiting
		if consumer != nil {
			rl.waiting = nil
		} else {
			rl.pending = append(rl.pending, buf[4:]...)
			if n > 0 {
				rl.frames = append(rl.frames, int(n))
			}
		}
		rl.mu.Unlock()
		if consumer != nil {
			// The consumer has nothing else outstanding (it polled and
			// nothing was pending), so this frame is its answer whole.
			if _, err := consumer.Write(buf); err != nil {
				consumer.Close()
			}
		}
		if _, err := c.Write(hdr[:]); err != nil {
			return err
		}
	}
}

// serveConsumer answers polls with the pending records, or parks the
// poll until a producer's frame arrives.
func (rl *relay) serveConsumer(c net.Conn, br *bufio.Reader) error {
	var out []byte
	for {
		b, err := br.ReadByte()
		if err != nil {
			return err
		}
		if b != relayPoll {
			return fmt.Errorf("relay: unknown poll byte %#x", b)
		}
		rl.mu.Lock()
		if len(rl.frames) == 0 {
			rl.waiting = c
			rl.mu.Unlock()
			continue
		}
		out = rl.take(out)
		rl.mu.Unlock()
		if _, err := c.Write(out); err != nil {
			return err
		}
	}
}

// ModeFloor is the Mode of a relay floor run's Result.
const ModeFloor = "relay-floor"

// RunRelayFloor measures the relay floor at addr (a ServeRelay, best in
// a process of its own, as a broker is): c.Producers paced producers send
// c.Rate records/s of c.RecordSize bytes for c.Duration, each wake-up's
// due records as one frame (at most c.BatchBytes of them, at most
// c.MaxInflight frames unanswered), and one consumer long-polls them. The
// result is an e2e run's: e2e latency from due times (no coordinated
// omission), ack latency as ProduceLatency, the producers' lateness as
// SendLag, and the machine's CPU split (the relay's with c.BrokerPID).
func RunRelayFloor(ctx context.Context, c Config, addr string, progress io.Writer) (*Result, error) {
	c.Mode = ModeE2E
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch {
	case c.Rate <= 0 || c.Records > 0:
		return nil, errors.New("the relay floor runs at a fixed --rate for --duration (no --records)")
	case c.Consumers != 1:
		return nil, fmt.Errorf("the relay floor has one consumer, not %d", c.Consumers)
	case c.RecordSize < 8:
		return nil, fmt.Errorf("record size %d: the relay floor's records carry an 8-byte due time", c.RecordSize)
	}
	c.Mode = ModeFloor
	env := HostEnv()
	if c.Procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.Procs))
		env.GOMAXPROCS = c.Procs
	}
	st := newRawE2EStats()
	var d net.Dialer
	consumer, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("relay floor: %w", err)
	}
	defer consumer.Close()
	if _, err := consumer.Write([]byte{relayConsumer}); err != nil {
		return nil, fmt.Errorf("relay floor: %w", err)
	}
	var producers []net.Conn
	defer func() {
		for _, p := range producers {
			p.Close()
		}
	}()
	for range c.Producers {
		p, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("relay floor: %w", err)
		}
		producers = append(producers, p)
		if _, err := p.Write([]byte{relayProducer}); err != nil {
			return nil, fmt.Errorf("relay floor: %w", err)
		}
	}

	body := prefaulted(relayMaxAnswer) // before the clock starts
	start := time.Now()
	st.measureFrom = start.Add(c.Warmup.D()).UnixNano()
	end := start.Add(c.Duration.D())
	st.measureTo = end.UnixNano()
	st.timeline.origin = start.UnixNano()
	st.latTimeline.origin = start.UnixNano()
	cpu0 := sampleCPU(c.BrokerPID)
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	cdone := make(chan struct{})
	go func() {
		defer close(cdone)
		if err := relayConsume(consumer, c.RecordSize, st, body); err != nil && cctx.Err() == nil {
			st.fail(err)
		}
	}()
	rep := startReporter(progress, c.ReportEvery.D(), plannedLength(c), func(d time.Duration, w window) string { return consumeLine(w, d) }, st.takeWindow)
	var wg sync.WaitGroup
	perBatch := int64(max(1, c.BatchBytes/c.RecordSize))
	for i, sched := range ProducerSchedules(start, c.Rate, len(producers)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := relayProduce(ctx, producers[i], sched, end, &c, perBatch, st); err != nil {
				st.fail(err)
			}
		}()
	}
	wg.Wait()
	st.waitConsumed(ctx, c.Timeout.D())
	stopConsumer()
	consumer.SetReadDeadline(time.Now()) // ends the consumer's poll
	<-cdone
	rep.stop()

	res := &Result{Mode: ModeFloor, Label: c.Label, Config: c, Env: env, Start: start.UTC(), OfferedRate: c.Rate}
	res.setCPU(cpu0, sampleCPU(c.BrokerPID))
	return st.finish(res, &c, start, end, progress)
}

// relayProduce is one floor producer: paceRecords with frames of due
// records, and a reader of the relay's answers recording ack latency.
func relayProduce(ctx context.Context, conn net.Conn, sched Schedule, end time.Time, c *Config, perBatch int64, st *rawE2EStats) error {
	inflight := make(chan rawInflight, max(1, c.MaxInflight))
	readErr := make(chan error, 1)
	go func() {
		var hdr [4]byte
		var err error
		for req := range inflight {
			if err == nil {
				if _, err = io.ReadFull(conn, hdr[:]); err != nil {
					err = fmt.Errorf("relay floor: read an answer: %w", err)
					conn.Close() // the sender's next write fails
					continue
				}
				st.acks(sched, req.from, req.to, time.Now())
			}
		}
		readErr <- err
	}()
	var frame []byte
	err := paceRecords(ctx, sched, end, c.Linger.D(), perBatch, st, func(from, to int64) error {
		n := int(to-from) * c.RecordSize
		frame = binary.BigEndian.AppendUint32(frame[:0], uint32(n))
		frame = slices.Grow(frame, n)[:4+n] // the filler bytes stay as they were
		sent := time.Now().UnixNano()
		for k := from; k < to; k++ {
			at := 4 + int(k-from)*c.RecordSize
			stampRecord(frame[at:at+c.RecordSize], sched.Due(k).UnixNano(), sent)
		}
		inflight <- rawInflight{from: from, to: to} // blocks while MaxInflight are unanswered
		if _, err := conn.Write(frame); err != nil {
			return fmt.Errorf("relay floor: send: %w", err)
		}
		return nil
	})
	close(inflight)
	if rerr := <-readErr; rerr != nil {
		return rerr
	}
	return err
}

// relayConsume polls the relay until the connection fails (or is closed
// under it), recording every record's e2e latency from its due time.
// body is its answer buffer, grown when an answer is larger.
func relayConsume(conn net.Conn, size int, st *rawE2EStats, body []byte) error {
	br := bufio.NewReaderSize(conn, 256<<10)
	for {
		if _, err := conn.Write([]byte{relayPoll}); err != nil {
			return fmt.Errorf("relay floor: poll: %w", err)
		}
		var err error
		if body, err = readFrame(br, body); err != nil {
			return fmt.Errorf("relay floor: read records: %w", err)
		}
		nowN := time.Now().UnixNano()
		recs := body
		if len(recs)%size != 0 {
			return fmt.Errorf("relay floor: %d bytes of records are not whole %d-byte records", len(recs), size)
		}
		st.mu.Lock()
		for ; len(recs) > 0; recs = recs[size:] {
			due, sent := readStamps(recs[:size])
			st.consume(due, sent, size, nowN)
		}
		st.mu.Unlock()
	}
}

// RelayReadyPrefix starts the line a relay process prints on stdout once
// it listens, followed by its address.
const RelayReadyPrefix = "ringlog-perf relay ready addr="

// RelayProcess is a relay floor relay in a process of its own, as a
// broker is, so that it takes turns for the cores as a broker would.
type RelayProcess struct {
	// Addr is where it listens; PID its process id.
	Addr string
	PID  int
	cmd  *exec.Cmd
}

// StartRelayProcess runs exe with args (a command that serves ServeRelay
// and prints RelayReadyPrefix and its address as its first line, such as
// 'ringlog-perf relay-serve') and waits up to 10 s for that line.
func StartRelayProcess(exe string, args ...string) (*RelayProcess, error) {
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("relay process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("relay process: %w", err)
	}
	p := &RelayProcess{PID: cmd.Process.Pid, cmd: cmd}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		io.Copy(io.Discard, out) // nothing more is expected; never block the relay
	}()
	select {
	case l, ok := <-line:
		if addr, found := strings.CutPrefix(l, RelayReadyPrefix); ok && found {
			p.Addr = addr
			return p, nil
		}
		p.Stop()
		return nil, fmt.Errorf("relay process %s: want a first line %q..., got %q", exe, RelayReadyPrefix, l)
	case <-time.After(10 * time.Second):
		p.Stop()
		return nil, fmt.Errorf("relay process %s: not ready within 10s", exe)
	}
}

// Stop ends the relay process and waits for it.
func (p *RelayProcess) Stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	err := p.cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) && !exit.Exited() {
		return nil // ended by the signal, as asked
	}
	return err
}
