package main

// ringlog produce: stdin lines to records.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/cli"
)

const produceUsage = `
Usage: ringlog produce TOPIC [flags] < lines

Reads lines from standard input and produces one record per line (the
newline is not part of the record; an empty line is a record with an empty
value). With --key-separator, the part of a line before the first separator
is the key and the rest the value; a line without the separator has a null
key. At the end it prints a summary to standard error.

The topic must exist (create it with 'ringlog topic create TOPIC'): unlike
kcat or a Kafka producer, which ask the broker to create a missing topic
when it allows auto-creation (--auto-create-topics), this command never
creates one, so that a typo in TOPIC is an error and not a new topic with
the broker's default partitions and configs.
`

const produceExamples = `
Examples:
  echo hello | ringlog produce demo
  printf 'user1:login\nuser2:logout\n' | ringlog produce events --key-separator :
  ringlog produce events --header source=batch --header v=2 --acks 1 --compression zstd < events.txt
  ringlog produce events --partition 3 --linger 50ms < big.txt

Exit status: 0 when every record was acknowledged, 1 if any failed (the
summary says how many and why), 2 usage. SIGINT or SIGTERM stops reading
and waits for the records already read.
`

func runProduce(args []string, stdout, stderr io.Writer) error {
	return produce(args, os.Stdin, stdout, stderr)
}

func produce(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var cf connFlags
	var keySep, acks, compression string
	var headers kvFlag
	var partition optInt
	var linger time.Duration
	fs := cli.NewFlagSet("produce", produceUsage, produceExamples, stdout)
	cf.Register(fs, 30*time.Second, "how long a record may wait to be acknowledged (and the broker to answer at start)")
	fs.StringVar(&keySep, "key-separator", "", "split each line into key and value at the first `SEP` (default: no key)")
	fs.Var(&headers, "header", "add header `key=value` to every record (repeatable)")
	fs.Var(&partition, "partition", "produce every record to partition `N` (default: by key hash, or spread when there is no key)")
	fs.StringVar(&acks, "acks", "all", "acknowledgement to wait for: all (every in-sync replica, durable), 1 (the leader) or 0 (none)")
	fs.StringVar(&compression, "compression", "none", "batch compression: none, gzip, snappy, lz4 or zstd")
	fs.DurationVar(&linger, "linger", 10*time.Millisecond, "how long to wait for more records before sending a batch")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return cli.Usagef("produce: give exactly one topic, got %d arguments (records come from standard input)", len(rest))
	}
	topic := rest[0]
	if cf.Timeout <= 0 {
		return cli.Usagef("--timeout must be positive")
	}
	if linger < 0 {
		return cli.Usagef("--linger must not be negative")
	}
	opts := []kgo.Opt{kgo.ClientID("ringlog-produce"), kgo.ProducerLinger(linger), kgo.RecordDeliveryTimeout(cf.Timeout), kgo.DefaultProduceTopic(topic),
		// The topic's max.message.bytes decides, not the client's 1 MB
		// default: raising it is then the whole fix for a large line.
		kgo.ProducerBatchMaxBytes(cliMaxBatchBytes)}
	switch strings.ToLower(acks) {
	case "all", "-1":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	default:
		return cli.Usagef("--acks %q: use all, 1 or 0", acks)
	}
	switch strings.ToLower(compression) {
	case "none", "":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	case "gzip":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.GzipCompression()))
	case "snappy":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	case "lz4":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	case "zstd":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	default:
		return cli.Usagef("--compression %q: use none, gzip, snappy, lz4 or zstd", compression)
	}
	if partition.set && (partition.v < 0 || partition.v > math.MaxInt32) {
		return cli.Usagef("--partition must be 0 or more, got %d", partition.v)
	}
	if partition.set {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	var hdrs []kgo.RecordHeader
	for i, k := range headers.keys {
		hdrs = append(hdrs, kgo.RecordHeader{Key: k, Value: []byte(headers.vals[i])})
	}

	s, err := cf.connect(0, opts...)
	if err != nil {
		return err
	}
	defer s.Close()
	parts, err := s.check(cf.Timeout, func(s *session) ([]int32, error) { return s.requireTopic("produce "+topic, kmsg.Produce, topic) })
	if err != nil {
		return err
	}
	if partition.set && !slices.Contains(parts, int32(partition.v)) {
		return fmt.Errorf("--partition %d: topic %q has %s (0-%d); grow it with 'ringlog topic alter %s --partitions N'",
			partition.v, topic, plural(len(parts), "partition", "partitions"), len(parts)-1, topic)
	}

	var st produceStats
	st.partitions = map[int32]bool{}
	var stopped atomic.Bool
	readDone := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(stdin, 64<<10)
		sep := []byte(keySep)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 && !stopped.Load() {
				line = bytes.TrimSuffix(line, []byte{'\n'})
				rec := &kgo.Record{Value: line, Headers: hdrs}
				if len(sep) > 0 {
					if k, v, ok := bytes.Cut(line, sep); ok {
						rec.Key, rec.Value = k, v
					}
				}
				if partition.set {
					rec.Partition = int32(partition.v)
				}
				st.sent.Add(1)
				s.cl.Produce(s.base, rec, st.done)
			}
			if err != nil || stopped.Load() {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				readDone <- err
				return
			}
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	var readErr error
	interrupted := false
	select {
	case readErr = <-readDone:
	case <-sig:
		stopped.Store(true)
		interrupted = true
	}
	// Every record read is now buffered or in flight; each ends within
	// --timeout (RecordDeliveryTimeout).
	fctx, cancel := context.WithTimeout(s.base, cf.Timeout+5*time.Second)
	defer cancel()
	if err := s.cl.Flush(fctx); err != nil && !errors.Is(err, context.Canceled) {
		st.fail(s.explain(err))
	}
	summary := st.summary(topic)
	if interrupted {
		summary += " (interrupted: stopped reading standard input)"
	}
	fmt.Fprintln(stderr, summary)
	if readErr != nil {
		return fmt.Errorf("reading standard input: %w", readErr)
	}
	if err := st.err(s, topic); err != nil {
		return err
	}
	return nil
}

// check runs fn (a request at the start of a command) bounded by d, or by
// 30 s when d is 0.
func (s *session) check(d time.Duration, fn func(*session) ([]int32, error)) ([]int32, error) {
	if d <= 0 {
		d = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(s.ctx, d)
	defer cancel()
	sub := *s
	sub.ctx, sub.timeout = ctx, d
	return fn(&sub)
}

type produceStats struct {
	sent       atomic.Int64
	mu         sync.Mutex
	ok, bytes  int64
	partitions map[int32]bool
	failed     int64
	errs       map[string]int64
	firstErr   error
}

func (st *produceStats) done(r *kgo.Record, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.failLocked(err)
		return
	}
	st.ok++
	st.bytes += int64(len(r.Key) + len(r.Value))
	st.partitions[r.Partition] = true
}

func (st *produceStats) fail(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.errs == nil {
		st.errs = map[string]int64{}
	}
	if st.firstErr == nil {
		st.firstErr = err
	}
}

func (st *produceStats) failLocked(err error) {
	st.failed++
	if st.errs == nil {
		st.errs = map[string]int64{}
	}
	st.errs[err.Error()]++
	if st.firstErr == nil {
		st.firstErr = err
	}
}

func (st *produceStats) summary(topic string) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	ps := make([]int32, 0, len(st.partitions))
	for p := range st.partitions {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	sent := st.sent.Load()
	what := plural(int(st.ok), "record", "records")
	if st.ok != sent {
		what = fmt.Sprintf("%d of %d records", st.ok, sent)
	}
	msg := fmt.Sprintf("produced %s (%s of keys and values) to topic %q", what, plural(int(st.bytes), "byte", "bytes"), topic)
	if len(ps) > 0 {
		msg += fmt.Sprintf(", %s %s", map[bool]string{true: "partition", false: "partitions"}[len(ps) == 1], ints(ps))
	}
	if st.failed > 0 {
		msg += fmt.Sprintf("; %d failed", st.failed)
	}
	return msg
}

// cliMaxBatchBytes is the largest batch produce sends: the broker's
// default --max-request-bytes is 100 MiB, and a line this large is a
// mistake more often than not.
const cliMaxBatchBytes = 16 << 20

func (st *produceStats) err(s *session, topic string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.firstErr == nil {
		return nil
	}
	if st.failed == 0 {
		return st.firstErr
	}
	if d := s.denied("produce "+topic, kmsg.Produce, st.firstErr, topicResource(topic)); d != nil {
		return d // the summary line says how many records failed
	}
	var lines []string
	for msg, n := range st.errs {
		if len(st.errs) > 1 {
			msg = fmt.Sprintf("%s (%s)", msg, plural(int(n), "record", "records"))
		}
		lines = append(lines, msg)
	}
	sort.Strings(lines)
	hint := ""
	switch {
	case errors.Is(st.firstErr, kgo.ErrRecordTimeout), errors.Is(st.firstErr, kgo.ErrRecordRetries):
		hint = ": the broker did not acknowledge them within --timeout; is it running and reachable?"
	case errors.Is(st.firstErr, kerr.MessageTooLarge), errors.Is(st.firstErr, kerr.RecordListTooLarge):
		hint = tooLargeHint(s, topic)
	}
	if ex := s.explain(st.firstErr); ex != st.firstErr {
		hint = ": " + ex.Error()
	}
	return fmt.Errorf("%s failed: %s%s", plural(int(st.failed), "record", "records"), strings.Join(lines, "; "), hint)
}

// tooLargeHint says how large a batch topic accepts (its
// max.message.bytes, asked of the broker) and how to raise it.
func tooLargeHint(s *session, topic string) string {
	limit := "its max.message.bytes"
	if rcs, err := s.adm.DescribeTopicConfigs(s.ctx, topic); err == nil {
		for _, rc := range rcs {
			for _, c := range rc.Configs {
				if rc.Err == nil && c.Key == "max.message.bytes" && c.Value != nil {
					limit = fmt.Sprintf("max.message.bytes = %s bytes, a record's batch overhead included", *c.Value)
				}
			}
		}
	}
	return fmt.Sprintf(": a line is larger than topic %q accepts (%s); raise the limit with 'ringlog topic alter %s --set max.message.bytes=N' (at most %d bytes through this command)",
		topic, limit, topic, cliMaxBatchBytes)
}
