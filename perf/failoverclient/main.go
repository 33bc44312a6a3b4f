// Command failoverclient is the franz-go half of perf/failover-clients.sh: it
// produces one small record every 5 ms (acks=all, idempotent, the kgo
// defaults) to one topic and prints one line per record once the client has
// settled it:
//
//	<produce unix nanos> <ack unix nanos> <ok|err:MESSAGE>
//
// "produce" is when the record was handed to the client, "ack" when its
// promise ran. The script pauses or kills the partition leader while this
// runs and reads the stall off these lines.
//
// It stops producing after --duration or at SIGINT/SIGTERM, then waits up to
// --drain for the records still in flight; records not settled by then are
// failed by closing the client and reported as errors.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produceInterval is the gap between two records.
const produceInterval = 5 * time.Millisecond

// output serialises the result lines of concurrent promises onto stdout.
type output struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// line writes one result line and flushes it, so the script sees the lines
// of a producer it has to kill.
func (o *output) line(produced, acked time.Time, err error) {
	status := "ok"
	if err != nil {
		status = "err:" + strings.Join(strings.Fields(err.Error()), "_")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(o.w, "%d %d %s\n", produced.UnixNano(), acked.UnixNano(), status)
	o.w.Flush()
}

// options returns the kgo options: the defaults, plus the fast-failover
// timeouts when fast is set.
func options(brokers []string, topic string, fast bool) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}
	if fast {
		opts = append(opts,
			kgo.ProduceRequestTimeout(2*time.Second),
			kgo.RequestTimeoutOverhead(time.Second),
			kgo.MetadataMinAge(250*time.Millisecond),
		)
	}
	return opts
}

// main parses the flags, produces until told to stop and drains.
func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	topic := flag.String("topic", "failover", "topic to produce to")
	fast := flag.Bool("fast", false, "fast failover: ProduceRequestTimeout 2s, RequestTimeoutOverhead 1s, MetadataMinAge 250ms")
	duration := flag.Duration("duration", 30*time.Second, "how long to produce (SIGINT/SIGTERM stops earlier)")
	drain := flag.Duration("drain", 60*time.Second, "how long to wait for records in flight after producing stops")
	flag.Parse()

	cl, err := kgo.NewClient(options(strings.Split(*brokers, ","), *topic, *fast)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failoverclient:", err)
		os.Exit(1)
	}
	out := &output{w: bufio.NewWriter(os.Stdout)}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()

	var n int
	tick := time.NewTicker(produceInterval)
	defer tick.Stop()
produce:
	for {
		select {
		case <-ctx.Done():
			break produce
		case <-tick.C:
		}
		n++
		produced := time.Now()
		rec := &kgo.Record{Value: fmt.Appendf(nil, "record %d", n)}
		// The record context is not ctx: stopping production must not
		// cancel the records already buffered.
		cl.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
			out.line(produced, time.Now(), err)
		})
	}

	dctx, dcancel := context.WithTimeout(context.Background(), *drain)
	defer dcancel()
	if err := cl.Flush(dctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(os.Stderr, "failoverclient: flush:", err)
	}
	// Close fails whatever is still buffered; those promises print errors.
	cl.Close()
	fmt.Fprintf(os.Stderr, "failoverclient: produced %d records\n", n)
}
