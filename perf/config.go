// Package perf is ringlog's load generator and benchmark harness: produce,
// consume and end-to-end runs over the Kafka protocol (franz-go) against
// any Kafka-compatible bootstrap address, partition and producer sweeps
// with charts, the physical reference measurements (a loopback TCP pump and
// an O_DIRECT writer) and the standard suite behind `make perf`. Its
// commands are the binary ringlog-perf (cmd/ringlog-perf), never the
// broker's; flame graphs are package perf/flame.
//
// Latency is recorded in HdrHistograms. At a fixed rate every record has a
// due time given by the schedule alone (never by the completion of earlier
// sends), and its latency is measured from that due time, so a stalled
// broker shows up as latency instead of silently lowering the offered load
// (coordinated omission).
//
// Linux-only parts, with stand-ins elsewhere: the timerfd pacer (a Go
// timer off Linux, whose lateness then counts in fixed-rate latencies),
// the O_DIRECT reference (ErrUnsupported, skipped by the suite), and what
// is read from /proc (broker CPU, CPU model, dirty page cache), which is
// missing off Linux.
package perf

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Modes of a run.
const (
	ModeProduce = "produce"
	ModeConsume = "consume"
	ModeE2E     = "e2e"
)

// MiB is the "MB" of the progress lines and results, as in Kafka's perf
// tools (1024*1024 bytes).
const MiB = 1 << 20

// Duration is a time.Duration that reads and writes JSON as a string such
// as "5s".
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string (or a number of nanoseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return err
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// KeyDist says how records are keyed.
type KeyDist struct {
	// Kind is "none" (null keys, the client spreads records), "uniform"
	// (keys drawn uniformly from Count distinct keys) or "hot" (HotShare
	// of the records carry one hot key, the rest are uniform).
	Kind string `json:"kind"`
	// Count is the number of distinct keys (uniform and hot).
	Count int `json:"count,omitempty"`
	// HotShare is the share of records with the hot key (hot only).
	HotShare float64 `json:"hot_share,omitempty"`
}

// Config is the configuration of one produce, consume or e2e run.
type Config struct {
	// Mode is ModeProduce, ModeConsume or ModeE2E.
	Mode string `json:"mode"`
	// Brokers are the bootstrap addresses (host:port).
	Brokers []string `json:"brokers"`
	// Topic to use; empty: a fresh uniquely named topic, deleted after
	// the run unless KeepTopic. A named topic that does not exist is
	// created (with Partitions) and kept.
	Topic string `json:"topic"`
	// KeepTopic keeps a topic this run created.
	KeepTopic bool `json:"keep_topic,omitempty"`
	// ReplicationFactor of created topics (-1: the broker's default).
	ReplicationFactor int `json:"replication_factor"`
	// RecordSize is the value size in bytes (at least 8: the first 8
	// bytes carry the record's due time).
	RecordSize int `json:"record_size"`
	// Keys is the key distribution.
	Keys KeyDist `json:"keys"`
	// Partitions of a created topic.
	Partitions int `json:"partitions"`
	// Producers is the number of producer clients.
	Producers int `json:"producers"`
	// Consumers is the number of consumer clients (consume and e2e); the
	// partitions are split among them.
	Consumers int `json:"consumers"`
	// Acks is "0", "1" or "all".
	Acks string `json:"acks"`
	// Linger is how long a partition's batch waits for more records.
	Linger Duration `json:"linger"`
	// BatchBytes caps one record batch.
	BatchBytes int `json:"batch_bytes"`
	// Compression is none, gzip, snappy, lz4 or zstd.
	Compression string `json:"compression"`
	// MaxInflight is the produce requests in flight per broker
	// connection when idempotence is off (acks 0 and 1); idempotent
	// producers (acks=all) use 5.
	MaxInflight int `json:"max_inflight"`
	// BufferBytes bounds the bytes a producer client buffers; producing
	// blocks past it. It is what keeps enough records in flight in
	// max-rate runs.
	BufferBytes int `json:"buffer_bytes"`
	// Rate is the target in records/s over all producers; 0 means as
	// fast as the producers are accepted (closed loop).
	Rate float64 `json:"rate"`
	// Duration of the run, warm-up included (unless Records is set).
	Duration Duration `json:"duration"`
	// Records stops producing (or consuming) after this many records
	// (0: run for Duration).
	Records int64 `json:"records,omitempty"`
	// Warmup is excluded from the results.
	Warmup Duration `json:"warmup"`
	// PrefillBytes is how much a consume run writes into a topic it
	// created before reading it from offset 0.
	PrefillBytes int64 `json:"prefill_bytes,omitempty"`
	// FetchBytes is the consumer's per-partition fetch size.
	FetchBytes int `json:"fetch_bytes"`
	// ReportEvery is the interval of progress lines (0: none).
	ReportEvery Duration `json:"report_every"`
	// Timeout bounds admin requests, the final flush and draining.
	Timeout Duration `json:"timeout"`
	// Procs is the load generator's GOMAXPROCS during the run (0: leave
	// it). On a machine the broker shares, a generator that needs less
	// than a core does best with one P: its idle Ps' spinning otherwise
	// takes CPU from the broker. The result's env records what was used.
	Procs int `json:"procs,omitempty"`
	// BrokerPID, when set, is the broker's process id on this machine:
	// its CPU use is reported next to the load generator's.
	BrokerPID int `json:"broker_pid,omitempty"`
	// Label names the run in sweeps and summaries.
	Label string `json:"label,omitempty"`
}

// DefaultConfig returns the defaults of a run of the given mode.
func DefaultConfig(mode string) Config {
	c := Config{
		Mode:              mode,
		Brokers:           []string{"127.0.0.1:9092"},
		ReplicationFactor: -1,
		RecordSize:        1024,
		Keys:              KeyDist{Kind: "none", Count: 1000, HotShare: 0.5},
		Partitions:        16,
		Producers:         1,
		Consumers:         1,
		Acks:              "1",
		Linger:            0,
		BatchBytes:        1000000,
		Compression:       "none",
		MaxInflight:       5,
		BufferBytes:       32 << 20,
		Duration:          Duration(10 * time.Second),
		Warmup:            Duration(2 * time.Second),
		PrefillBytes:      512 << 20,
		FetchBytes:        4 << 20,
		ReportEvery:       Duration(5 * time.Second),
		Timeout:           Duration(30 * time.Second),
	}
	if mode == ModeConsume {
		c.Warmup = 0
	}
	return c
}

// Validate checks c and normalizes its spellings (acks "-1" → "all").
func (c *Config) Validate() error {
	switch c.Mode {
	case ModeProduce, ModeConsume, ModeE2E:
	default:
		return fmt.Errorf("mode %q: use produce, consume or e2e", c.Mode)
	}
	if len(c.Brokers) == 0 {
		return fmt.Errorf("no brokers given")
	}
	if c.Procs < 0 {
		return fmt.Errorf("procs %d: 0 (all CPUs) or more", c.Procs)
	}
	if c.RecordSize < 8 {
		return fmt.Errorf("record size %d: at least 8 bytes (the due time travels in the value)", c.RecordSize)
	}
	switch c.Keys.Kind {
	case "none", "":
		c.Keys.Kind = "none"
	case "uniform", "hot":
		if c.Keys.Count < 1 {
			return fmt.Errorf("key count %d: at least 1", c.Keys.Count)
		}
		if c.Keys.Kind == "hot" && (c.Keys.HotShare < 0 || c.Keys.HotShare > 1) {
			return fmt.Errorf("hot share %v: between 0 and 1", c.Keys.HotShare)
		}
	default:
		return fmt.Errorf("keys %q: use none, uniform or hot", c.Keys.Kind)
	}
	if c.Partitions < 1 {
		return fmt.Errorf("partitions %d: at least 1", c.Partitions)
	}
	if c.Producers < 1 {
		return fmt.Errorf("producers %d: at least 1", c.Producers)
	}
	if c.Consumers < 1 {
		return fmt.Errorf("consumers %d: at least 1", c.Consumers)
	}
	switch strings.ToLower(c.Acks) {
	case "all", "-1":
		c.Acks = "all"
	case "0", "1":
	default:
		return fmt.Errorf("acks %q: use 0, 1 or all", c.Acks)
	}
	if _, err := compressionCodec(c.Compression); err != nil {
		return err
	}
	if c.Linger < 0 {
		return fmt.Errorf("linger must not be negative")
	}
	if c.BatchBytes < 1024 {
		return fmt.Errorf("batch bytes %d: at least 1024", c.BatchBytes)
	}
	if c.MaxInflight < 1 {
		return fmt.Errorf("max in-flight %d: at least 1", c.MaxInflight)
	}
	if c.BufferBytes < c.RecordSize {
		return fmt.Errorf("buffer bytes %d: at least one record (%d)", c.BufferBytes, c.RecordSize)
	}
	if c.Rate < 0 {
		return fmt.Errorf("rate must not be negative")
	}
	if c.Duration <= 0 && c.Records <= 0 {
		return fmt.Errorf("give a positive duration or record count")
	}
	if c.Records < 0 {
		return fmt.Errorf("records must not be negative")
	}
	if c.Warmup < 0 {
		return fmt.Errorf("warm-up must not be negative")
	}
	if c.Records == 0 && c.Warmup >= c.Duration {
		return fmt.Errorf("warm-up %v leaves nothing of the %v run to measure", c.Warmup.D(), c.Duration.D())
	}
	if c.FetchBytes < 1024 {
		return fmt.Errorf("fetch bytes %d: at least 1024", c.FetchBytes)
	}
	if c.Timeout <= 0 {
		c.Timeout = Duration(30 * time.Second)
	}
	return nil
}

// compressionCodec maps a --compression name to franz-go's codec.
func compressionCodec(name string) (kgo.CompressionCodec, error) {
	switch strings.ToLower(name) {
	case "none", "":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("compression %q: use none, gzip, snappy, lz4 or zstd", name)
}

// clientOpts are the options every client of a run shares.
func (c *Config) clientOpts(id string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(id),
	}
}

// producerOpts are a producer client's options.
func (c *Config) producerOpts() []kgo.Opt {
	codec, _ := compressionCodec(c.Compression)
	opts := append(c.clientOpts("ringlog-perf-producer"),
		kgo.ProducerLinger(c.Linger.D()),
		kgo.ProducerBatchMaxBytes(int32(c.BatchBytes)),
		kgo.ProducerBatchCompression(codec),
		kgo.MaxBufferedBytes(c.BufferBytes),
		// The byte bound decides; the record bound only has to be
		// out of its way.
		kgo.MaxBufferedRecords(max(c.BufferBytes/c.RecordSize+1, 1000)),
		kgo.RecordDeliveryTimeout(c.Timeout.D()),
	)
	switch c.Acks {
	case "all":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
			kgo.MaxProduceRequestsInflightPerBroker(c.MaxInflight))
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite(),
			kgo.MaxProduceRequestsInflightPerBroker(c.MaxInflight))
	}
	return opts
}

// consumerOpts are a consumer client's options; it reads the given
// partitions from the given offsets.
func (c *Config) consumerOpts(topic string, parts map[int32]kgo.Offset) []kgo.Opt {
	return append(c.clientOpts("ringlog-perf-consumer"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchMaxPartitionBytes(int32(c.FetchBytes)),
		kgo.FetchMaxBytes(int32(max(c.FetchBytes*4, 64<<20))),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
}
