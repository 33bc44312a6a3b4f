package perf

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/wal/batch"
)

// rawProduceVersion is the Produce version the raw producers send: v7
// (Kafka 2.1) is the newest non-flexible one, which every broker with
// record batch v2 and idempotence-era semantics understands.
const rawProduceVersion = 7

// RunRawProduce measures the broker's ingest rate: each of c.Producers
// connections per partition leader sends the same prebuilt Produce request
// (one record batch per partition, compressed with c.Compression) over and
// over, up to c.MaxInflight requests in flight, for c.Duration. No client
// library builds, partitions or encodes records, so on a machine the
// broker shares, what the run measures is the broker (validation, offset
// assignment, the write) rather than a producer client competing for the
// same cores (compare with RunProduce). Each request carries about
// c.BatchBytes: c.BatchBytes divided among the connection's partitions.
// The broker still checks every batch's CRC and writes every byte.
func RunRawProduce(ctx context.Context, c Config, progress io.Writer) (*Result, error) {
	c.Mode = ModeProduce
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Rate > 0 || c.Records > 0 {
		return nil, errors.New("raw produce runs at max rate for --duration (no --rate, no --records)")
	}
	acks, codec, err := rawWire(&c)
	if err != nil {
		return nil, err
	}
	r, err := newRun(ctx, &c)
	if err != nil {
		return nil, err
	}
	defer r.close(ctx)
	actx, cancel := context.WithTimeout(ctx, c.Timeout.D())
	leaders, err := r.adm.leaders(actx, r.topic)
	cancel()
	if err != nil {
		return nil, err
	}

	start := time.Now()
	measureFrom := start.Add(c.Warmup.D())
	end := start.Add(c.Duration.D())
	st := &rawProduceStats{lat: NewHist(), measureFrom: measureFrom, end: end}
	cpu0 := sampleCPU(c.BrokerPID)
	rctx, rcancel := context.WithDeadline(ctx, end)
	defer rcancel()
	var wg sync.WaitGroup
	for i := 0; i < c.Producers; i++ {
		for addr, parts := range leaders {
			req, records, bytes, err := rawProduceRequest(&c, r.topic, parts, acks, codec, uint64(i))
			if err != nil {
				return nil, err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := rawProduceConn(rctx, &c, addr, req, records, bytes, st); err != nil {
					st.fail(err)
					rcancel()
				}
			}()
		}
	}
	rep := startReporter(progress, c.ReportEvery.D(), plannedLength(c), func(elapsed time.Duration, w window) string {
		return produceLine(w, elapsed)
	}, st.takeWindow)
	wg.Wait()
	rep.stop()

	res := r.result(start)
	res.setCPU(cpu0, sampleCPU(c.BrokerPID))
	st.mu.Lock()
	defer st.mu.Unlock()
	res.Sent, res.Acked, res.Errors = st.sent, st.acked, st.errs
	if st.firstErr != nil {
		res.FirstError = st.firstErr.Error()
	}
	res.setThroughput(st.measured, st.measuredBytes, end.Sub(measureFrom))
	if s := st.lat.Summary(); s != nil {
		s.Comment = "closed loop (rate=max): one Produce request, send to response"
		res.ProduceLatency = s
	}
	finalLine(progress, res)
	if res.Acked == 0 {
		return res, fmt.Errorf("no record was acknowledged: %s", res.FirstError)
	}
	if st.firstErr != nil {
		return res, st.firstErr
	}
	return res, nil
}

// rawWire is what the raw runs put on the wire for c: the acks field and
// the batch codec.
func rawWire(c *Config) (int16, batch.Codec, error) {
	acks, err := rawAcks(c.Acks)
	if err != nil {
		return 0, 0, err
	}
	codec, err := batchCodec(c.Compression)
	return acks, codec, err
}

// rawAcks maps --acks onto the request field; acks=0 has no responses to
// count, so it is refused.
func rawAcks(acks string) (int16, error) {
	switch acks {
	case "1":
		return 1, nil
	case "all", "-1":
		return -1, nil
	}
	return 0, fmt.Errorf("raw produce counts acknowledgements: --acks 1 or all, not %q", acks)
}

// batchCodec maps --compression onto a record batch codec.
func batchCodec(name string) (batch.Codec, error) {
	switch name {
	case "none", "":
		return batch.CodecNone, nil
	case "gzip":
		return batch.CodecGzip, nil
	case "snappy":
		return batch.CodecSnappy, nil
	case "lz4":
		return batch.CodecLZ4, nil
	case "zstd":
		return batch.CodecZstd, nil
	}
	return 0, fmt.Errorf("compression %q: use none, gzip, snappy, lz4 or zstd", name)
}

// rawProduceRequest builds the frame of one Produce request with a batch
// of records for each of parts, and returns it with the records and value
// bytes it carries. The correlation id (bytes 8-11) is patched per send.
func rawProduceRequest(c *Config, topic string, parts []int32, acks int16, codec batch.Codec, seed uint64) ([]byte, int64, int64, error) {
	perBatch := max(1, c.BatchBytes/len(parts)/(c.RecordSize+16))
	rng := rand.New(rand.NewPCG(seed+91, 7))
	value := make([]byte, c.RecordSize)
	b := batch.NewBuilder()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = acks
	req.TimeoutMillis = int32(c.Timeout.D().Milliseconds())
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	now := time.Now().UnixMilli()
	for _, p := range parts {
		b.Reset()
		for i := 0; i < perBatch; i++ {
			for j := range value {
				value[j] = byte('A' + rng.IntN(26)) // as the franz-go producers: text-like
			}
			b.Add(now, nil, value, nil)
		}
		data, err := b.Build(nil, codec)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("build a batch: %w", err)
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = p, data
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	req.SetVersion(rawProduceVersion)
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("ringlog-perf-raw"))
	records := int64(perBatch * len(parts))
	return f.AppendRequest(nil, req, 0), records, records * int64(c.RecordSize), nil
}

// rawProduceConn sends req on one connection to addr until ctx ends,
// keeping up to c.MaxInflight requests in flight, and counts the answers.
func rawProduceConn(ctx context.Context, c *Config, addr string, req []byte, records, bytes int64, st *rawProduceStats) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("raw produce: %w", err)
	}
	// At the end, the requests in flight are still answered (and counted,
	// outside the measured window), within the timeout.
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now().Add(c.Timeout.D())) })
	defer stop()
	defer conn.Close()

	inflight := max(1, c.MaxInflight)
	sentAt := make(chan time.Time, inflight) // FIFO of send times: answers come in order
	readErr := make(chan error, 1)
	go func() { readErr <- rawProduceAnswers(conn, sentAt, records, bytes, st) }()
	frame := append([]byte(nil), req...)
	for corr := int32(0); ; corr++ {
		select {
		case sentAt <- time.Now(): // blocks while inflight requests are unanswered
		case err := <-readErr:
			return err
		case <-ctx.Done():
			close(sentAt)
			return waitAnswers(readErr)
		}
		binary.BigEndian.PutUint32(frame[8:], uint32(corr))
		if _, err := conn.Write(frame); err != nil {
			close(sentAt)
			if ctx.Err() != nil {
				return waitAnswers(readErr)
			}
			return fmt.Errorf("raw produce to %s: %w", addr, err)
		}
		st.addSent(records)
	}
}

// waitAnswers waits for the reader to read the answers still due after
// the run's end.
func waitAnswers(readErr <-chan error) error {
	return <-readErr
}

// rawProduceAnswers reads Produce responses until sentAt is closed and
// drained or the connection fails.
func rawProduceAnswers(conn net.Conn, sentAt <-chan time.Time, records, bytes int64, st *rawProduceStats) error {
	br := bufio.NewReaderSize(conn, 64<<10)
	var body []byte
	for t := range sentAt {
		var err error
		if body, err = readFrame(br, body); err != nil {
			return fmt.Errorf("read a produce response: %w", err)
		}
		if err := checkProduceResponse(body); err != nil {
			return err
		}
		st.addAcked(time.Now(), t, records, bytes)
	}
	return nil
}

// checkProduceResponse decodes a Produce response frame (v
// rawProduceVersion, after the size) and returns the first partition's
// error in it.
func checkProduceResponse(frame []byte) error {
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(rawProduceVersion)
	if err := resp.ReadFrom(frame[4:]); err != nil {
		return fmt.Errorf("decode a produce response: %w", err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				return fmt.Errorf("produce to %s-%d: %w", rt.Topic, rp.Partition, kerr.ErrorForCode(rp.ErrorCode))
			}
		}
	}
	return nil
}

// prefaulted returns a buffer of n bytes whose pages are already mapped.
//
// Why: a fresh page costs a fault on first touch, and on the PVM guest
// the suite runs on a fault is slow enough to show (56% of a relay's CPU
// in one profile). A reader that fell behind in a run's first second got
// a larger response, grew its buffer, faulted in every page of it while
// reading, and so fell further behind: the first seconds of runs at 240k
// records/s delivered 100-137k records/s and spilled their backlog into
// the measured window. A run's readers take their largest buffer up
// front, before the run starts.
func prefaulted(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
	return b
}

// readFrame reads one size-prefixed response into buf (grown as needed)
// and returns it without the size.
func readFrame(br *bufio.Reader, buf []byte) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return buf, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n < 4 || n > 256<<20 {
		return buf, fmt.Errorf("response of %d bytes", n)
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	_, err := io.ReadFull(br, buf)
	return buf, err
}

// rawProduceStats are the counters of every raw connection.
type rawProduceStats struct {
	measureFrom, end time.Time

	mu            sync.Mutex
	lat           *Hist
	win           window
	sent, acked   int64
	measured      int64
	measuredBytes int64
	errs          int64
	firstErr      error
}

func (s *rawProduceStats) addSent(records int64) {
	s.mu.Lock()
	s.sent += records
	s.mu.Unlock()
}

// addAcked counts one answered request of records carrying bytes, sent
// at sent and answered at now.
func (s *rawProduceStats) addAcked(now, sent time.Time, records, bytes int64) {
	lat := now.Sub(sent)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked += records
	s.win.records += records
	s.win.bytes += bytes
	s.win.latN++
	s.win.latSum += lat
	s.win.latMax = max(s.win.latMax, lat)
	if !now.Before(s.measureFrom) && !now.After(s.end) {
		s.measured += records
		s.measuredBytes += bytes
		s.lat.Record(lat)
	}
}

func (s *rawProduceStats) fail(err error) {
	s.mu.Lock()
	s.errs++
	if s.firstErr == nil {
		s.firstErr = err
	}
	s.mu.Unlock()
}

func (s *rawProduceStats) takeWindow() window {
	s.mu.Lock()
	w := s.win
	s.win = window{}
	s.mu.Unlock()
	return w
}

// leaders returns the partitions of topic by their leader's address.
func (a *admin) leaders(ctx context.Context, topic string) (map[string][]int32, error) {
	md, err := a.adm.Metadata(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("metadata of %q: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("metadata of %q: %v", topic, td.Err)
	}
	addrs := map[int32]string{}
	for _, b := range md.Brokers {
		addrs[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	out := map[string][]int32{}
	for _, p := range td.Partitions {
		addr, ok := addrs[p.Leader]
		if !ok || p.Err != nil {
			return nil, fmt.Errorf("partition %s-%d has no reachable leader (%v)", topic, p.Partition, p.Err)
		}
		out[addr] = append(out[addr], p.Partition)
	}
	return out, nil
}
