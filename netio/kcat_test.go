package netio_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/wal/batch"
)

// kcat is librdkafka's command-line client: a third, independent Kafka
// client implementation (after franz-go, sarama and kafka-go). .ci/run
// installs it and sets RINGLOG_REQUIRE_KCAT so CI never skips this.
func kcatPath(t *testing.T) string { return testenv.KcatPath(t) }

func runKcat(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	return testenv.RunKcat(t, stdin, args...)
}

func kcatOutput(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	return testenv.KcatOutput(t, stdin, args...)
}

func TestKcatCodecsAndGroups(t *testing.T) {
	kcatPath(t)
	b := startBroker(t)
	var lines []string
	for i := 0; i < 100; i++ {
		lines = append(lines, fmt.Sprintf("k%d:value-%d-%s", i%5, i, strings.Repeat("x", 100)))
	}
	input := strings.Join(lines, "\n") + "\n"
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			topic := "kcat-" + codec
			runKcat(t, input, "-b", b.Addr, "-t", topic, "-P", "-K:", "-z", codec, "-X", "enable.idempotence=true")
			out := runKcat(t, "", "-b", b.Addr, "-t", topic, "-C", "-o", "beginning", "-e", "-q", "-f", "%k=%s\n")
			got := strings.Split(strings.TrimSpace(out), "\n")
			if len(got) != 100 {
				t.Fatalf("consumed %d of 100 lines:\n%s", len(got), out)
			}
			for i, g := range got {
				if want := fmt.Sprintf("k%d=value-%d-%s", i%5, i, strings.Repeat("x", 100)); g != want {
					t.Fatalf("line %d: %q want %q", i, g, want)
				}
			}
			// The batches are stored as librdkafka sent them: compressed.
			l, _ := b.Eng.Topic(topic).Partition(0).Log()
			buf, err := l.ReadBytes(nil, 0, 1<<20, l.EndOffset())
			if err != nil {
				t.Fatal(err)
			}
			h, _ := batch.ParseHeader(buf)
			if h.Codec().String() != codec || h.ProducerID < 0 {
				t.Fatalf("stored codec %s producer %d, want %s and idempotent", h.Codec(), h.ProducerID, codec)
			}
		})
	}
	// A librdkafka group consumer (balanced consumer, read_committed by
	// default in kcat's librdkafka).
	out := runKcat(t, "", "-b", b.Addr, "-G", "kcat-group", "kcat-lz4", "-o", "beginning", "-e", "-q", "-f", "%o\n",
		"-X", "isolation.level=read_committed")
	if n := len(strings.Split(strings.TrimSpace(out), "\n")); n != 100 {
		t.Fatalf("group consumer read %d of 100", n)
	}
	// Its commit is visible: a second run of the same group reads nothing.
	out = runKcat(t, "", "-b", b.Addr, "-G", "kcat-group", "kcat-lz4", "-e", "-q", "-f", "%o\n")
	if strings.TrimSpace(out) != "" {
		t.Fatalf("the group re-read committed records:\n%s", out)
	}
	meta := runKcat(t, "", "-b", b.Addr, "-L")
	if !strings.Contains(meta, `topic "kcat-zstd" with 1 partitions`) {
		t.Fatalf("metadata listing:\n%s", meta)
	}
}

// TestKcatReadCommitted: librdkafka (through kcat) as the read_committed
// consumer of franz-go's transactions: the aborted records never reach
// it, the committed ones do, and -e ends at the last stable offset.
func TestKcatReadCommitted(t *testing.T) {
	kcatPath(t)
	b := startBroker(t)
	ctx := testCtx(t, 30*time.Second)
	const topic = "kcat-txn"
	b.e2eCreate(ctx, topic, 1, nil)
	prod := b.client(kgo.TransactionalID("kcat-txn-producer"))
	txnProduce(t, ctx, prod, topic, true, "c1")
	txnProduce(t, ctx, prod, topic, false, "a1", "a2")
	txnProduce(t, ctx, prod, topic, true, "c2")
	read := func(level string) string {
		return runKcat(t, "", "-b", b.Addr, "-t", topic, "-C", "-o", "beginning", "-e", "-q", "-f", "%s\n", "-X", "isolation.level="+level)
	}
	if got := read("read_committed"); got != "c1\nc2\n" {
		t.Fatalf("kcat read_committed:\n%s", got)
	}
	if got := read("read_uncommitted"); got != "c1\na1\na2\nc2\n" {
		t.Fatalf("kcat read_uncommitted:\n%s", got)
	}
}
