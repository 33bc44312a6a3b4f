package main

// ringlog consume: records to stdout, formatted or as JSON lines.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/cli"
)

const consumeUsage = `
Usage: ringlog consume TOPIC [flags]

Prints records of a topic to standard output, one per line (see --format)
or as JSON lines (--output json), until --max-messages records were printed,
nothing new arrived for --idle-timeout, --timeout passed, or SIGINT/SIGTERM.

Where it starts: new records only (the default), --from-beginning, or
--offset N. With --group G it consumes as a member of consumer group G: it
starts each partition at the group's committed offset, and a partition
the group has no commit for at --offset-reset (earliest by default, as a
Kafka consumer with auto.offset.reset=earliest: nothing produced before
the group's first run is skipped). It commits exactly the records it
printed, once printed, so the next consume with the same group goes on
where this one stopped: two bounded runs (--max-messages) of one group
print every record once.

A group consumer rides through a broker restart: it reconnects, rejoins
the group and goes on from the committed offsets (records printed but not
yet committed when the broker went away are printed again: at-least-once
across a broker failure). If the broker is still unreachable when
--idle-timeout passes, it exits 1.

With --share-group S it is a member of share group S (a queue): the
group's members split the records, each printed record is accepted once
printed (never delivered again), the ones fetched but not printed are
released for other members. A new group starts where its
share.auto.offset.reset config says (latest unless set).

--format placeholders:
  %k key    %v value    %t topic    %p partition    %o offset
  %T timestamp (Unix milliseconds)    %h headers (k=v,k=v)    %% a percent sign
and the escapes \n \t \r \\. A null key or value prints as nothing.
`

const consumeExamples = `
Examples:
  ringlog consume demo --from-beginning --idle-timeout 2s
  ringlog consume events --from-beginning --format '%k\t%v\n'
  ringlog consume events --partition 0 --offset 42 --max-messages 10 --format '%o %T %h %v\n'
  ringlog consume events --group billing --idle-timeout 5s
  ringlog consume events --group billing --offset-reset latest   # a new group skips the backlog
  ringlog consume jobs --share-group workers --max-messages 100   # run several: each record goes to one
  ringlog consume events --from-beginning --output json --idle-timeout 1s | jq -r .value

Exit status: 0 when it stopped as asked (count, idle, timeout or signal),
1 on a failure (topic missing, broker unreachable, commit failed), 2 usage.
`

func runConsume(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var out outputFlag
	var fromBeginning bool
	var offset, partition optInt
	var group, format, offsetReset, groupProtocol, shareGroup string
	var maxMessages int
	var idle time.Duration
	fs := cli.NewFlagSet("consume", consumeUsage, consumeExamples, stdout)
	cf.Register(fs, 0, "stop after this long in all (0: no limit); also how long to wait for the broker at start (30s when 0)")
	addOutputFlag(fs, &out)
	fs.BoolVar(&fromBeginning, "from-beginning", false, "start at the oldest record (with --group this is already where partitions without a commit start; see --offset-reset)")
	fs.Var(&offset, "offset", "start at offset `N` (of --partition, or of every partition)")
	fs.StringVar(&group, "group", "", "consume as a member of consumer group `G`, committing what was printed")
	fs.StringVar(&shareGroup, "share-group", "", "consume as a member of share group `S` (KIP-932, a queue): records are split between the group's members, each printed record is accepted (never delivered again), the rest released; where a new group starts is its share.auto.offset.reset config (latest by default)")
	fs.StringVar(&groupProtocol, "group-protocol", "classic", "with --group: the group protocol, `classic` (the client assigns) or consumer (KIP-848: the broker assigns, no stop-the-world rebalances; group.protocol)")
	fs.StringVar(&offsetReset, "offset-reset", "", "with --group: where a partition without a committed offset starts, `earliest` or latest (auto.offset.reset; default earliest)")
	fs.Var(&partition, "partition", "consume only partition `N`")
	fs.IntVar(&maxMessages, "max-messages", 0, "stop after `N` records (0: no limit)")
	fs.DurationVar(&idle, "idle-timeout", 0, "stop when no record arrived for this long (0: wait forever)")
	fs.StringVar(&format, "format", "", "how to print each record (placeholders above; default '%v\\n')")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return cli.Usagef("consume: give exactly one topic, got %d arguments", len(rest))
	}
	if groupProtocol != "classic" && groupProtocol != "consumer" {
		return cli.Usagef("--group-protocol %q: classic or consumer", groupProtocol)
	}
	topic := rest[0]
	switch {
	case offset.set && offset.v < 0:
		return cli.Usagef("--offset must be 0 or more, got %d", offset.v)
	case offset.set && fromBeginning:
		return cli.Usagef("give --from-beginning or --offset, not both")
	case shareGroup != "" && (group != "" || offset.set || partition.set || fromBeginning || offsetReset != ""):
		return cli.Usagef("--share-group cannot be used with --group, --offset, --partition, --from-beginning or --offset-reset: a share group starts where its share.auto.offset.reset group config says (set it with IncrementalAlterConfigs on the group, e.g. kafka-configs --entity-type groups)")
	case group != "" && offset.set:
		return cli.Usagef("--offset cannot be used with --group: a group starts at its committed offsets (reset them, or consume without --group)")
	case group != "" && partition.set:
		return cli.Usagef("--partition cannot be used with --group: the group assigns partitions to its members")
	case partition.set && (partition.v < 0 || partition.v > math.MaxInt32):
		return cli.Usagef("--partition must be 0 or more, got %d", partition.v)
	case maxMessages < 0:
		return cli.Usagef("--max-messages must not be negative")
	case idle < 0:
		return cli.Usagef("--idle-timeout must not be negative")
	case format != "" && out == "json":
		return cli.Usagef("give --format or --output json, not both")
	case offsetReset != "" && group == "":
		return cli.Usagef("--offset-reset is for --group (where a partition without a commit starts); without a group use --from-beginning or --offset")
	case offsetReset != "" && offsetReset != "earliest" && offsetReset != "latest":
		return cli.Usagef("--offset-reset: want earliest or latest, got %q", offsetReset)
	case offsetReset == "latest" && fromBeginning:
		return cli.Usagef("give --from-beginning or --offset-reset latest, not both")
	}
	if format == "" {
		format = `%v\n`
	}
	var pr recordPrinter
	if out == "json" {
		pr = jsonPrinter{}
	} else {
		f, err := parseFormat(format)
		if err != nil {
			return cli.Usagef("--format: %v", err)
		}
		pr = f
	}

	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	parts, err := s.check(cf.Timeout, func(s *session) ([]int32, error) { return s.requireTopic("consume "+topic, kmsg.Fetch, topic) })
	if err != nil {
		return err
	}
	if partition.set && !slices.Contains(parts, int32(partition.v)) {
		return fmt.Errorf("--partition %d: topic %q has %s (0-%d)", partition.v, topic, plural(len(parts), "partition", "partitions"), len(parts)-1)
	}

	start := kgo.NewOffset().AtEnd()
	if fromBeginning || (group != "" && offsetReset != "latest") {
		start = kgo.NewOffset().AtStart()
	}
	var assigned atomic.Bool
	opts := []kgo.Opt{kgo.ClientID("ringlog-consume"), kgo.FetchMaxWait(500 * time.Millisecond)}
	switch {
	case shareGroup != "":
		opts = append(opts, kgo.ShareGroup(shareGroup), kgo.ConsumeTopics(topic))
		assigned.Store(true)
	case group != "":
		opts = append(opts, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(start),
			kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { assigned.Store(true) }),
			// Commits are ours (of what was printed); nothing is
			// committed on the way out of a generation.
			kgo.OnPartitionsRevoked(func(context.Context, *kgo.Client, map[string][]int32) {}),
			kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) {}))
		if groupProtocol == "consumer" {
			opts = append(opts, kgo.ServerSideBalancer())
		}
	case partition.set || offset.set:
		if offset.set {
			start = kgo.NewOffset().At(offset.v)
		}
		ps := parts
		if partition.set {
			ps = []int32{int32(partition.v)}
		}
		m := map[int32]kgo.Offset{}
		for _, p := range ps {
			m[p] = start
		}
		// An --offset past the end waits for new records rather than
		// starting over.
		opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: m}), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
		assigned.Store(true)
	default:
		opts = append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(start))
		assigned.Store(true)
	}
	// The consuming client is separate from the one that checked the
	// topic, so that its options are the consumer's.
	cs, err := cf.connect(0, opts...)
	if err != nil {
		return err
	}
	defer cs.Close()
	// The run ends at --timeout, on SIGINT/SIGTERM, or when the broker is
	// found unreachable (a hopeless dial cancels cs.base).
	runCtx, cancelRun := context.WithCancelCause(cs.base)
	defer cancelRun(nil)
	if cf.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeoutCause(runCtx, cf.Timeout, errTimeoutReached)
		defer cancel()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		select {
		case <-sig:
			cancelRun(errInterrupted)
		case <-runCtx.Done():
		}
	}()

	w := bufio.NewWriterSize(stdout, 64<<10)
	printed := 0
	lastActivity := time.Now()
	var buf []byte
	var runErr error
	var outage error // the last transient error since records last arrived
poll:
	for maxMessages == 0 || printed < maxMessages {
		pctx, cancel := runCtx, context.CancelFunc(func() {})
		if idle > 0 {
			if !assigned.Load() {
				// Until the group assigns partitions nothing can arrive:
				// the idle clock starts at the assignment.
				pctx, cancel = context.WithTimeout(runCtx, 100*time.Millisecond)
				lastActivity = time.Now()
			} else {
				pctx, cancel = context.WithDeadline(runCtx, lastActivity.Add(idle))
			}
		}
		remaining := 0
		if maxMessages > 0 {
			remaining = maxMessages - printed
		}
		fetches := cs.cl.PollRecords(pctx, remaining)
		cancel()
		for _, fe := range fetches.Errors() {
			if errors.Is(fe.Err, context.Canceled) || errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, kgo.ErrClientClosed) {
				continue
			}
			if (group != "" || shareGroup != "") && transient(fe.Err) && runCtx.Err() == nil {
				// The client retries on its own (reconnects, rejoins the
				// group); say so once per outage.
				if outage == nil {
					fmt.Fprintf(stderr, "ringlog: warning: %v; retrying\n", fe.Err)
				}
				outage = fe.Err
				continue
			}
			if d := cs.denied("consume "+topic, kmsg.Fetch, fe.Err, topicResource(topic), groupResource(group)); d != nil {
				runErr = d
				break poll
			}
			runErr = fmt.Errorf("consuming %s[%d]: %w", fe.Topic, fe.Partition, cs.explain(fe.Err))
			break poll
		}
		var recs []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
		for _, r := range recs {
			buf = pr.format(buf[:0], r)
			if _, err := w.Write(buf); err != nil {
				runErr = err
				break poll
			}
		}
		if err := w.Flush(); err != nil {
			runErr = err
			break
		}
		printed += len(recs)
		if len(recs) > 0 {
			lastActivity = time.Now()
			if outage != nil {
				fmt.Fprintf(stderr, "ringlog: reconnected; consuming again\n")
				outage = nil
			}
			if shareGroup != "" {
				// Accepted after printing, as a commit below: a crash
				// between the two delivers them again.
				for _, r := range recs {
					r.Ack(kgo.AckAccept)
				}
				cctx, cancel := context.WithTimeout(context.Background(), commitTimeout(cf.Timeout))
				err := cs.cl.FlushAcks(cctx)
				cancel()
				switch {
				case err != nil && transient(err) && runCtx.Err() == nil:
					fmt.Fprintf(stderr, "ringlog: warning: acknowledging to share group %q: %v; these records will be delivered again\n", shareGroup, err)
					outage = err
				case err != nil:
					runErr = cmp.Or(cs.denied("consume "+topic, kmsg.ShareAcknowledge, err, groupResource(shareGroup), topicResource(topic)),
						fmt.Errorf("acknowledging to share group %q: %w", shareGroup, cs.explain(err)))
					break poll
				}
			}
			if group != "" {
				// Committed after printing: a crash between the two
				// prints records again rather than losing them. Only
				// these records are committed (the client may hold more
				// fetched ones, which the next run reads).
				cctx, cancel := context.WithTimeout(context.Background(), commitTimeout(cf.Timeout))
				err := cs.cl.CommitRecords(cctx, recs...)
				cancel()
				switch {
				case err != nil && transient(err) && runCtx.Err() == nil:
					fmt.Fprintf(stderr, "ringlog: warning: committing offsets of group %q: %v; the records since the last commit will be read again\n", group, err)
					outage = err
				case err != nil:
					runErr = cmp.Or(cs.denied("consume "+topic, kmsg.OffsetCommit, err, groupResource(group), topicResource(topic)),
						fmt.Errorf("committing offsets of group %q: %w", group, cs.explain(err)))
					break poll
				}
			}
		}
		if group != "" {
			cs.cl.AllowRebalance()
		}
		if runCtx.Err() != nil {
			break
		}
		if idle > 0 && assigned.Load() && time.Since(lastActivity) >= idle {
			if outage != nil {
				runErr = fmt.Errorf("nothing consumed for %v and the broker is still unreachable: %w", idle, cs.explain(outage))
			}
			break
		}
	}
	if runErr == nil && runCtx.Err() != nil {
		switch cause := context.Cause(runCtx); {
		case errors.Is(cause, errInterrupted), errors.Is(cause, errTimeoutReached):
		default:
			runErr = cs.explain(runCtx.Err())
		}
	}
	if group != "" {
		cs.cl.AllowRebalance()
		lctx, cancel := context.WithTimeout(context.Background(), commitTimeout(cf.Timeout))
		cs.cl.LeaveGroupContext(lctx)
		cancel()
	}
	fmt.Fprintf(stderr, "consumed %s\n", plural(printed, "record", "records"))
	return runErr
}

var errTimeoutReached = errors.New("--timeout reached")

// transient reports whether a group consumer's error is one the client
// recovers from by itself: the broker went away (connection refused or
// reset, EOF) or the group is moving (coordinator changes, rebalances,
// a membership the restarted broker no longer knows).
func transient(err error) bool {
	var ne net.Error
	var ke *kerr.Error
	var eof *kgo.ErrFirstReadEOF
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.As(err, &eof), errors.As(err, &ne):
		return true
	case errors.As(err, &ke):
		return ke.Retriable || errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.UnknownMemberID) ||
			errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.CoordinatorNotAvailable)
	}
	return false
}

func commitTimeout(timeout time.Duration) time.Duration {
	if timeout > 0 && timeout < 10*time.Second {
		return timeout
	}
	return 10 * time.Second
}

// recordPrinter appends one record's output to a buffer.
type recordPrinter interface {
	format(dst []byte, r *kgo.Record) []byte
}

// formatPart is a literal (verb 0) or a placeholder.
type formatPart struct {
	verb byte
	lit  string
}

type formatPrinter []formatPart

// parseFormat compiles a --format string.
func parseFormat(f string) (formatPrinter, error) {
	var parts formatPrinter
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, formatPart{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		switch {
		case c == '%':
			if i+1 == len(f) {
				return nil, fmt.Errorf("%q ends with a lone %%: write %%%% for a percent sign", f)
			}
			i++
			switch v := f[i]; v {
			case '%':
				lit.WriteByte('%')
			case 'k', 'v', 't', 'p', 'o', 'T', 'h':
				flush()
				parts = append(parts, formatPart{verb: v})
			default:
				return nil, fmt.Errorf("unknown placeholder %%%c in %q: use %%k %%v %%t %%p %%o %%T %%h or %%%%", v, f)
			}
		case c == '\\' && i+1 < len(f):
			i++
			switch e := f[i]; e {
			case 'n':
				lit.WriteByte('\n')
			case 't':
				lit.WriteByte('\t')
			case 'r':
				lit.WriteByte('\r')
			case '\\':
				lit.WriteByte('\\')
			default:
				lit.WriteByte('\\')
				lit.WriteByte(e)
			}
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return parts, nil
}

func (f formatPrinter) format(dst []byte, r *kgo.Record) []byte {
	for _, p := range f {
		switch p.verb {
		case 0:
			dst = append(dst, p.lit...)
		case 'k':
			dst = append(dst, r.Key...)
		case 'v':
			dst = append(dst, r.Value...)
		case 't':
			dst = append(dst, r.Topic...)
		case 'p':
			dst = strconv.AppendInt(dst, int64(r.Partition), 10)
		case 'o':
			dst = strconv.AppendInt(dst, r.Offset, 10)
		case 'T':
			dst = strconv.AppendInt(dst, r.Timestamp.UnixMilli(), 10)
		case 'h':
			for i, h := range r.Headers {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, h.Key...)
				dst = append(dst, '=')
				dst = append(dst, h.Value...)
			}
		}
	}
	return dst
}

// recordJSON is one line of --output json. Keys and values that are not
// valid UTF-8 are base64 with key_encoding / value_encoding "base64".
type recordJSON struct {
	Topic         string       `json:"topic"`
	Partition     int32        `json:"partition"`
	Offset        int64        `json:"offset"`
	Timestamp     int64        `json:"timestamp"`
	Key           *string      `json:"key"`
	KeyEncoding   string       `json:"key_encoding,omitempty"`
	Value         *string      `json:"value"`
	ValueEncoding string       `json:"value_encoding,omitempty"`
	Headers       []headerJSON `json:"headers"`
}

type headerJSON struct {
	Key           string  `json:"key"`
	Value         *string `json:"value"`
	ValueEncoding string  `json:"value_encoding,omitempty"`
}

// jsonBytes renders b as a JSON string: as is when valid UTF-8, else
// base64 (with encoding "base64"); nil stays null.
func jsonBytes(b []byte) (*string, string) {
	if b == nil {
		return nil, ""
	}
	if utf8.Valid(b) {
		s := string(b)
		return &s, ""
	}
	s := base64.StdEncoding.EncodeToString(b)
	return &s, "base64"
}

type jsonPrinter struct{}

func (jsonPrinter) format(dst []byte, r *kgo.Record) []byte {
	j := recordJSON{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(), Headers: []headerJSON{}}
	j.Key, j.KeyEncoding = jsonBytes(r.Key)
	j.Value, j.ValueEncoding = jsonBytes(r.Value)
	for _, h := range r.Headers {
		hj := headerJSON{Key: h.Key}
		hj.Value, hj.ValueEncoding = jsonBytes(h.Value)
		j.Headers = append(j.Headers, hj)
	}
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(j); err != nil {
		// Only strings and numbers: cannot fail.
		panic(err)
	}
	return append(dst, sb.String()...)
}
