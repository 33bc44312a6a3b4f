package main

// Tests of the client tools (topic, group, produce, consume, dump-segment):
// they run the built binary (ringlogBinary, from proc_test.go) against a
// real broker in the test process (internal/brokertest) and check output
// and exit codes.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/wal/batch"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// toolBroker is an in-process broker (brokertest: the broker `ringlog
// serve` runs, from the same defaults) for the tool tests.
type toolBroker struct {
	*brokertest.Broker
}

// startToolBroker starts a broker on free ports with a fresh data
// directory, stopped at cleanup. New groups start at once (no initial
// rebalance delay) and retention does not run during a test.
func startToolBroker(t *testing.T) *toolBroker {
	t.Helper()
	return &toolBroker{brokertest.Start(t, func(c *broker.Config) {
		c.Engine.Groups.InitialRebalanceDelay = 0
		c.Engine.RetentionCheckInterval = time.Hour
	})}
}

// toolResult is one run of the binary.
type toolResult struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// tool runs the ringlog binary with args and stdin, without
// RINGLOG_BROKERS in its environment unless env sets it.
func tool(t *testing.T, stdin string, env []string, args ...string) toolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ringlogBinary(t), args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, brokersEnv+"=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := toolResult{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("ringlog %s: still running after 30s; stderr:\n%s", strings.Join(args, " "), r.stderr)
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("ringlog %s: %v", strings.Join(args, " "), err)
	}
	r.code = cmd.ProcessState.ExitCode()
	return r
}

// run runs `ringlog args... --brokers ADDR` and checks the exit code.
func (b *toolBroker) run(t *testing.T, wantCode int, stdin string, args ...string) toolResult {
	t.Helper()
	r := tool(t, stdin, nil, append(args, "--brokers", b.Addr)...)
	if r.code != wantCode {
		t.Fatalf("ringlog %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, wantCode, r.stdout, r.stderr)
	}
	return r
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON (%v):\n%s", err, s)
	}
	return v
}

func describeTopic(t *testing.T, b *toolBroker, name string) topicDescribeJSON {
	t.Helper()
	ds := decodeJSON[[]topicDescribeJSON](t, b.run(t, 0, "", "topic", "describe", name, "--output", "json").stdout)
	if len(ds) != 1 || ds[0].Name != name {
		t.Fatalf("describe %s: got %+v", name, ds)
	}
	return ds[0]
}

func configOf(t *testing.T, d topicDescribeJSON, name string) (string, string) {
	t.Helper()
	for _, c := range d.Configs {
		if c.Name == name {
			v := "<null>"
			if c.Value != nil {
				v = *c.Value
			}
			return v, c.Source
		}
	}
	t.Fatalf("topic %s: no config %s in %+v", d.Name, name, d.Configs)
	return "", ""
}

// TestToolsTopicRoundTrip creates, lists, describes, alters and deletes a
// topic, with the exit codes of --if-not-exists / --if-exists.
func TestToolsTopicRoundTrip(t *testing.T) {
	t.Parallel()
	b := startToolBroker(t)

	r := b.run(t, 0, "", "topic", "create", "orders", "--partitions", "2", "--config", "retention.ms=3600000")
	if want := "created topic \"orders\" with 2 partitions, replication factor 1\n"; r.stdout != want {
		t.Errorf("create: stdout %q, want %q", r.stdout, want)
	}
	r = b.run(t, 1, "", "topic", "create", "orders")
	wantContains(t, "create existing: stderr", r.stderr, `topic "orders" already exists`, "--if-not-exists")
	r = b.run(t, 0, "", "topic", "create", "orders", "--if-not-exists")
	wantContains(t, "create --if-not-exists: stdout", r.stdout, "already exists")
	r = b.run(t, 1, "", "topic", "create", "bad", "--config", "no.such.config=1")
	wantContains(t, "create with a bad config: stderr", r.stderr, "--config rejected", "no.such.config")
	r = b.run(t, 1, "", "topic", "create", "bad", "--replication-factor", "3")
	wantContains(t, "create with replication factor 3: stderr", r.stderr, "--replication-factor rejected")
	// A name that collides with an existing one says with which, not
	// that the name is invalid.
	b.run(t, 0, "", "topic", "create", "my.topic", "--partitions", "1")
	r = b.run(t, 1, "", "topic", "create", "my_topic")
	wantContains(t, "create a colliding name: stderr", r.stderr, `topic "my_topic"`, `collides with existing topic "my.topic"`)
	b.run(t, 0, "", "topic", "delete", "my.topic")
	// A line too large for the topic: the message says the limit and the
	// fix, and the fix works.
	b.run(t, 0, "", "topic", "create", "small", "--partitions", "1", "--config", "max.message.bytes=1000")
	big := strings.Repeat("x", 2000) + "\n"
	r = b.run(t, 1, big, "produce", "small")
	wantContains(t, "produce a line too large: stderr", r.stderr, "max.message.bytes = 1000 bytes", "ringlog topic alter small --set max.message.bytes=")
	b.run(t, 0, "", "topic", "alter", "small", "--set", "max.message.bytes=4000")
	b.run(t, 0, big, "produce", "small")
	b.run(t, 0, "", "topic", "delete", "small")

	// list hides the internal topic unless asked.
	r = b.run(t, 0, "", "topic", "list")
	wantContains(t, "list", r.stdout, "TOPIC", "orders")
	if strings.Contains(r.stdout, "__consumer_offsets") || strings.Contains(r.stdout, "bad") {
		t.Errorf("list shows more than orders:\n%s", r.stdout)
	}
	r = b.run(t, 0, "", "topic", "list", "--internal", "--output", "json")
	list := decodeJSON[[]topicListJSON](t, r.stdout)
	want := []topicListJSON{{Name: "__consumer_offsets", Partitions: 1, ReplicationFactor: 1, Internal: true},
		{Name: "orders", Partitions: 2, ReplicationFactor: 1}}
	for i := range list {
		list[i].ID = ""
	}
	if !slices.Equal(list, want) {
		t.Errorf("list --internal --output json: %+v, want %+v", list, want)
	}

	// describe: partitions with leader and offsets, configs with sources.
	d := describeTopic(t, b, "orders")
	if len(d.Partitions) != 2 || d.ReplicationFactor != 1 || d.ID == "" {
		t.Errorf("describe: %+v", d)
	}
	for i, p := range d.Partitions {
		if p.Partition != int32(i) || p.Leader != 0 || p.StartOffset != 0 || p.EndOffset != 0 || p.Error != "" {
			t.Errorf("describe: partition %d: %+v", i, p)
		}
	}
	if v, src := configOf(t, d, "retention.ms"); v != "3600000" || src != "DYNAMIC_TOPIC_CONFIG" {
		t.Errorf("retention.ms = %s from %s, want 3600000 from DYNAMIC_TOPIC_CONFIG", v, src)
	}
	if v, src := configOf(t, d, "cleanup.policy"); v != "delete" || src != "DEFAULT_CONFIG" {
		t.Errorf("cleanup.policy = %s from %s, want delete from DEFAULT_CONFIG", v, src)
	}
	r = b.run(t, 0, "", "topic", "describe", "orders")
	wantContains(t, "describe (text)", r.stdout, "Topic: orders", "2 partitions, replication factor 1",
		"PARTITION", "LEADER", "START", "END", "retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG")
	r = b.run(t, 1, "", "topic", "describe", "orders", "nope")
	wantContains(t, "describe of a missing topic: stdout", r.stdout, "Topic: orders")
	wantContains(t, "describe of a missing topic: stderr", r.stderr, `topic "nope" does not exist: create it with 'ringlog topic create nope'`)

	// elect-leaders: a single broker leads every partition it has.
	r = b.run(t, 0, "", "cluster", "elect-leaders")
	wantContains(t, "elect-leaders", r.stdout, "No partition needed an election.")
	r = b.run(t, 0, "", "cluster", "elect-leaders", "--topic", "orders")
	wantContains(t, "elect-leaders --topic", r.stdout, "PARTITION", "orders-0", "orders-1", "not needed")
	r = b.run(t, 1, "", "cluster", "elect-leaders", "--topic", "orders", "--partitions", "7")
	wantContains(t, "elect-leaders of a missing partition", r.stdout+r.stderr, "orders-7", "UNKNOWN_TOPIC_OR_PARTITION", "1 of 1 elections failed")
	r = b.run(t, 2, "", "cluster", "elect-leaders", "--type", "dirty")
	wantContains(t, "elect-leaders --type dirty", r.stderr, "use preferred or unclean")
	r = b.run(t, 2, "", "cluster", "elect-leaders", "--type", "unclean")
	wantContains(t, "elect-leaders --type unclean of everything", r.stderr, "--all-topic-partitions")
	b.run(t, 0, "", "cluster", "elect-leaders", "--type", "unclean", "--all-topic-partitions")

	// alter: set, grow, refuse to shrink, delete back to the default.
	r = b.run(t, 0, "", "topic", "alter", "orders", "--set", "retention.ms=60000", "--partitions", "3")
	wantContains(t, "alter", r.stdout, "retention.ms=60000", "from 2 to 3 partitions")
	d = describeTopic(t, b, "orders")
	if v, _ := configOf(t, d, "retention.ms"); v != "60000" || len(d.Partitions) != 3 {
		t.Errorf("after alter: retention.ms %s, %d partitions; want 60000, 3", v, len(d.Partitions))
	}
	r = b.run(t, 1, "", "topic", "alter", "orders", "--partitions", "2")
	wantContains(t, "alter to fewer partitions", r.stderr, "can only be added")
	b.run(t, 0, "", "topic", "alter", "orders", "--partitions", "3")
	r = b.run(t, 1, "", "topic", "alter", "orders", "--set", "retention.ms=soon")
	wantContains(t, "alter with a bad value", r.stderr, "retention.ms", "soon")
	b.run(t, 0, "", "topic", "alter", "orders", "--delete", "retention.ms")
	if v, src := configOf(t, describeTopic(t, b, "orders"), "retention.ms"); src != "DEFAULT_CONFIG" {
		t.Errorf("after --delete: retention.ms = %s from %s, want the default", v, src)
	}
	// --unset, the word other tools use, is --delete.
	b.run(t, 0, "", "topic", "alter", "orders", "--set", "retention.ms=60000")
	b.run(t, 0, "", "topic", "alter", "orders", "--unset", "retention.ms")
	if v, src := configOf(t, describeTopic(t, b, "orders"), "retention.ms"); src != "DEFAULT_CONFIG" {
		t.Errorf("after --unset: retention.ms = %s from %s, want the default", v, src)
	}
	r = b.run(t, 1, "", "topic", "alter", "nope", "--set", "retention.ms=1")
	wantContains(t, "alter of a missing topic", r.stderr, `topic "nope" does not exist`)

	// delete, twice.
	r = b.run(t, 0, "", "topic", "delete", "orders")
	if r.stdout != "deleted topic \"orders\"\n" {
		t.Errorf("delete: stdout %q", r.stdout)
	}
	r = b.run(t, 1, "", "topic", "delete", "orders")
	wantContains(t, "delete again", r.stderr, `topic "orders" does not exist`, "--if-exists")
	b.run(t, 0, "", "topic", "delete", "orders", "--if-exists")
	if r = b.run(t, 0, "", "topic", "list"); strings.Contains(r.stdout, "orders") {
		t.Errorf("list after delete:\n%s", r.stdout)
	}
}

var timestampRE = regexp.MustCompile(`"timestamp":\d+`)

// TestToolsProduceConsume produces lines with keys and headers and
// consumes them back with --format and --output json.
func TestToolsProduceConsume(t *testing.T) {
	t.Parallel()
	b := startToolBroker(t)
	b.run(t, 0, "", "topic", "create", "events", "--partitions", "1")

	r := b.run(t, 0, "k1:v1\nk2:v:2\nno key\n\n:empty key\nlast line", "produce", "events",
		"--key-separator", ":", "--header", "src=test", "--header", "eq=a=b")
	if want := "produced 6 records (33 bytes of keys and values) to topic \"events\", partition 0\n"; r.stderr != want {
		t.Errorf("produce: stderr %q, want %q", r.stderr, want)
	}

	// --idle-timeout ends it once everything was read (the other consumes
	// stop at a count, which does not depend on how fast the machine is).
	r = b.run(t, 0, "", "consume", "events", "--from-beginning", "--idle-timeout", "2s", "--format", `%o|%k|%v|%h|%t/%p\n`)
	want := "0|k1|v1|src=test,eq=a=b|events/0\n" +
		"1|k2|v:2|src=test,eq=a=b|events/0\n" +
		"2||no key|src=test,eq=a=b|events/0\n" +
		"3|||src=test,eq=a=b|events/0\n" +
		"4||empty key|src=test,eq=a=b|events/0\n" +
		"5||last line|src=test,eq=a=b|events/0\n"
	if r.stdout != want {
		t.Errorf("consume --format: got\n%s\nwant\n%s", r.stdout, want)
	}

	start := time.Now().Add(-time.Minute).UnixMilli()
	r = b.run(t, 0, "", "consume", "events", "--from-beginning", "--max-messages", "3", "--output", "json")
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		rec := decodeJSON[recordJSON](t, line)
		if rec.Timestamp < start || rec.Timestamp > time.Now().UnixMilli() {
			t.Errorf("record timestamp %d is not about now", rec.Timestamp)
		}
	}
	hdrs := `"headers":[{"key":"src","value":"test"},{"key":"eq","value":"a=b"}]`
	want = `{"topic":"events","partition":0,"offset":0,"timestamp":T,"key":"k1","value":"v1",` + hdrs + "}\n" +
		`{"topic":"events","partition":0,"offset":1,"timestamp":T,"key":"k2","value":"v:2",` + hdrs + "}\n" +
		`{"topic":"events","partition":0,"offset":2,"timestamp":T,"key":null,"value":"no key",` + hdrs + "}\n"
	if got := timestampRE.ReplaceAllString(r.stdout, `"timestamp":T`); got != want {
		t.Errorf("consume --output json: got\n%s\nwant\n%s", got, want)
	}

	r = b.run(t, 0, "", "consume", "events", "--partition", "0", "--offset", "4", "--max-messages", "2", "--timeout", "20s", "--format", `%o %v\n`)
	if want := "4 empty key\n5 last line\n"; r.stdout != want {
		t.Errorf("consume --offset 4: got %q, want %q", r.stdout, want)
	}

	// Compressed, acks=1 and acks=0 batches read back the same.
	b.run(t, 0, "z1\nz2\n", "produce", "events", "--compression", "zstd", "--acks", "1")
	b.run(t, 0, "g1\n", "produce", "events", "--compression", "gzip", "--acks", "0")
	r = b.run(t, 0, "", "consume", "events", "--offset", "6", "--max-messages", "3", "--timeout", "20s")
	if want := "z1\nz2\ng1\n"; r.stdout != want {
		t.Errorf("consume compressed: got %q, want %q", r.stdout, want)
	}

	r = b.run(t, 1, "x\n", "produce", "events", "--partition", "4")
	wantContains(t, "produce to a missing partition", r.stderr, "--partition 4", "1 partition")
	r = b.run(t, 1, "x\n", "produce", "nope")
	wantContains(t, "produce to a missing topic", r.stderr, `topic "nope" does not exist: create it with 'ringlog topic create nope'`)
	r = b.run(t, 1, "", "consume", "nope", "--idle-timeout", "1s")
	wantContains(t, "consume of a missing topic", r.stderr, `topic "nope" does not exist`)
}

// TestToolsConsumerGroup consumes with --group (commits after printing),
// checks a second consume gets nothing new, and group describe's members,
// committed offsets and lag.
func TestToolsConsumerGroup(t *testing.T) {
	t.Parallel()
	b := startToolBroker(t)
	b.run(t, 0, "", "topic", "create", "jobs", "--partitions", "2")
	var in strings.Builder
	for i := range 6 {
		fmt.Fprintf(&in, "k%d=job%d\n", i, i)
	}
	b.run(t, 0, in.String(), "produce", "jobs", "--key-separator", "=")

	consume := func(stop ...string) []string {
		r := b.run(t, 0, "", append([]string{"consume", "jobs", "--group", "workers", "--from-beginning"}, stop...)...)
		lines := strings.Fields(r.stdout)
		slices.Sort(lines)
		return lines
	}
	if got, want := consume("--max-messages", "6", "--timeout", "20s"), []string{"job0", "job1", "job2", "job3", "job4", "job5"}; !slices.Equal(got, want) {
		t.Fatalf("first consume with --group: %q, want %q", got, want)
	}
	if got := consume("--idle-timeout", "1500ms"); len(got) != 0 {
		t.Fatalf("second consume with the same group got %q, want nothing new", got)
	}

	describe := func() groupDescribeJSON {
		gs := decodeJSON[[]groupDescribeJSON](t, b.run(t, 0, "", "group", "describe", "workers", "--output", "json").stdout)
		if len(gs) != 1 || gs[0].Group != "workers" {
			t.Fatalf("group describe: %+v", gs)
		}
		return gs[0]
	}
	g := describe()
	var committed int64
	for _, o := range g.Offsets {
		if o.Committed == nil || o.LogEnd == nil || o.Lag == nil || *o.Committed != *o.LogEnd || *o.Lag != 0 {
			t.Errorf("group describe: partition %d: committed %s, end %s, lag %s; want committed = end, lag 0",
				o.Partition, optInt64(o.Committed), optInt64(o.LogEnd), optInt64(o.Lag))
			continue
		}
		committed += *o.Committed
	}
	if g.State != "Empty" || len(g.Members) != 0 || len(g.Offsets) != 2 || committed != 6 || g.TotalLag != 0 {
		t.Errorf("group describe after consuming all: %+v (committed %d in all), want Empty, 2 partitions, 6 committed, lag 0", g, committed)
	}

	b.run(t, 0, "more1\nmore2\nmore3\n", "produce", "jobs")
	if g = describe(); g.TotalLag != 3 {
		t.Errorf("total lag after 3 more records: %d, want 3 (%+v)", g.TotalLag, g.Offsets)
	}
	r := b.run(t, 0, "", "group", "describe", "workers")
	wantContains(t, "group describe (text)", r.stdout, "Group: workers", "State: Empty", "COMMITTED", "LOG-END", "LAG", "Total lag: 3")
	r = b.run(t, 0, "", "group", "list")
	wantContains(t, "group list", r.stdout, "workers", "Empty", "consumer")
	r = b.run(t, 1, "", "group", "describe", "nope")
	wantContains(t, "group describe of a missing group", r.stderr, `group "nope" does not exist`)

	// A live member: describe shows it with its assignment (decoded from
	// the consumer protocol) until SIGTERM ends the consume with exit 0.
	live := exec.Command(ringlogBinary(t), "consume", "jobs", "--group", "workers", "--brokers", b.Addr)
	var liveOut bytes.Buffer
	live.Stdout = &liveOut
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer live.Process.Kill()
	if !testenv.Eventually(15*time.Second, func() bool {
		g = describe()
		return g.State == "Stable" && len(g.Members) == 1 && len(g.Members[0].Assigned) == 1 && g.TotalLag == 0
	}) {
		t.Fatalf("no stable group with one member that consumed everything within 15s: %+v", g)
	}
	m := g.Members[0]
	if m.ClientID != "ringlog-consume" || m.Host == "" || m.Assigned[0].Topic != "jobs" || !slices.Equal(m.Assigned[0].Partitions, []int32{0, 1}) {
		t.Errorf("member: %+v, want client ringlog-consume assigned jobs [0 1]", m)
	}
	for _, o := range g.Offsets {
		if o.MemberID != m.MemberID {
			t.Errorf("partition %d: member %q, want %q", o.Partition, o.MemberID, m.MemberID)
		}
	}
	live.Process.Signal(syscall.SIGTERM)
	if err := live.Wait(); err != nil {
		t.Errorf("consume --group after SIGTERM: %v, want exit 0", err)
	}
	lines := strings.Fields(liveOut.String())
	slices.Sort(lines)
	if want := []string{"more1", "more2", "more3"}; !slices.Equal(lines, want) {
		t.Errorf("live member consumed %q, want %q", lines, want)
	}
}

// TestToolsDumpSegment dumps the segment of a partition after the broker
// stopped, then copies with a flipped byte and with a torn end.
func TestToolsDumpSegment(t *testing.T) {
	t.Parallel()
	b := startToolBroker(t)
	b.run(t, 0, "", "topic", "create", "seg", "--partitions", "1")
	// The batches are built here and sent as they are: a client's
	// batching depends on timing (franz-go sends what it has once a flush
	// starts), and the checks below need exactly these three.
	now := time.Now().UnixMilli()
	cl := b.Client()
	bb := batch.NewBuilder()
	for _, kv := range [][2]string{{"a", "1"}, {"b", "2"}, {"c", "3"}} {
		bb.Add(now, []byte(kv[0]), []byte(kv[1]), []batch.RecordHeader{{Key: "h", Value: []byte("v")}})
	}
	produceBuilt(t, cl, "seg", bb, batch.CodecNone)
	bb.Reset()
	bb.Add(now, nil, []byte(strings.Repeat("d", 300)), nil)
	bb.Add(now, nil, []byte(strings.Repeat("e", 300)), nil)
	produceBuilt(t, cl, "seg", bb, batch.CodecGzip)
	bb.Reset()
	bb.Add(now, nil, []byte("f"), nil)
	produceBuilt(t, cl, "seg", bb, batch.CodecNone)
	b.Stop() // clean, or the test has failed
	if t.Failed() {
		t.FailNow()
	}
	dir := filepath.Join(b.Dir, "seg-0")
	seg := filepath.Join(dir, "00000000000000000000.log")

	r := tool(t, "", nil, "dump-segment", seg)
	if r.code != 0 {
		t.Fatalf("dump-segment: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var positions []int64
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "batch ") {
			for _, f := range strings.Fields(l) {
				if v, ok := strings.CutPrefix(f, "position="); ok {
					p, _ := strconv.ParseInt(v, 10, 64)
					positions = append(positions, p)
				}
			}
		}
	}
	if len(positions) != 3 {
		t.Fatalf("dump-segment: %d batches, want 3:\n%s", len(positions), r.stdout)
	}
	wantContains(t, "dump-segment", r.stdout, "batch base=0 last=2 count=3 ", "batch base=3 last=4 count=2 ", "codec=gzip",
		"batch base=5 last=5 count=1 ", "crc=ok", "Summary: 3 batches, 6 records, offsets 0-5, every CRC ok")

	r = tool(t, "", nil, "dump-segment", "--records", seg)
	if r.code != 0 || strings.Count(r.stdout, "  record offset=") != 6 {
		t.Fatalf("dump-segment --records: exit %d, want 0 and 6 records:\n%s%s", r.code, r.stdout, r.stderr)
	}
	wantContains(t, "dump-segment --records", r.stdout, `record offset=0 `, `key="a" value="1" headers=["h"="v"]`, `record offset=4 `, `key=null value="eeeeeeeeee`)

	r = tool(t, "", nil, "dump-segment", filepath.Join(dir, "00000000000000000000.index"), filepath.Join(dir, "00000000000000000000.timeindex"))
	if r.code != 0 {
		t.Fatalf("dump-segment of the indexes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	wantContains(t, "dump-segment of the indexes", r.stdout, "Offset index", "entry 0: offset=0 (+0) position=0", "Time index", "checked against")

	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	// A flipped byte in the second batch's records: its CRC fails, the
	// batches around it are fine.
	flipped := slices.Clone(data)
	flipped[positions[1]+70] ^= 0x40
	bad := filepath.Join(t.TempDir(), "00000000000000000000.log")
	if err := os.WriteFile(bad, flipped, 0o644); err != nil {
		t.Fatal(err)
	}
	r = tool(t, "", nil, "dump-segment", bad)
	if r.code != 1 {
		t.Errorf("dump-segment of a flipped byte: exit %d, want 1", r.code)
	}
	wantContains(t, "dump-segment of a flipped byte: stdout", r.stdout, "crc=BAD", "batch base=5 last=5")
	wantContains(t, "dump-segment of a flipped byte: stderr", r.stderr, fmt.Sprintf("corrupt batch at position %d (offsets 3-4", positions[1]), "CRC")

	// A torn end: the last batch is cut short.
	torn := filepath.Join(t.TempDir(), "00000000000000000000.log")
	if err := os.WriteFile(torn, data[:len(data)-5], 0o644); err != nil {
		t.Fatal(err)
	}
	r = tool(t, "", nil, "dump-segment", torn)
	if r.code != 1 {
		t.Errorf("dump-segment of a torn file: exit %d, want 1", r.code)
	}
	wantContains(t, "dump-segment of a torn file", r.stderr, fmt.Sprintf("torn batch (offsets 5-5) at position %d", positions[2]))

	// The padding a direct write leaves: zeros to a block's end, not a
	// problem.
	padded := filepath.Join(t.TempDir(), "00000000000000000000.log")
	if err := os.WriteFile(padded, append(slices.Clone(data), make([]byte, 4096-len(data)%4096)...), 0o644); err != nil {
		t.Fatal(err)
	}
	r = tool(t, "", nil, "dump-segment", padded)
	if r.code != 0 {
		t.Errorf("dump-segment of a padded segment: exit %d, want 0\n%s%s", r.code, r.stdout, r.stderr)
	}
	wantContains(t, "dump-segment of a padded segment", r.stdout, fmt.Sprintf("padding at position %d", len(data)), "Summary: 3 batches")

	r = tool(t, "", nil, "dump-segment", filepath.Join(dir, "nope.log"))
	if r.code != 1 || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("dump-segment of a missing file: exit %d, stderr %q", r.code, r.stderr)
	}
}

// produceBuilt sends the batch in bb, compressed with codec, to partition
// 0 of topic as one produce request, and fails the test unless it is
// appended.
func produceBuilt(t *testing.T, cl *kgo.Client, topic string, bb *batch.Builder, codec batch.Codec) {
	t.Helper()
	raw, err := bb.Build(nil, codec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rp, err := sendBatch(ctx, cl, topic, 0, raw, 10000)
	if err == nil {
		err = kerr.ErrorForCode(rp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("produce to %s-0: %v", topic, err)
	}
}

// TestToolsUsage checks that bad command lines exit 2 with a message,
// before talking to any broker, and that --help exits 0 with examples.
func TestToolsUsage(t *testing.T) {
	t.Parallel()
	dead := "127.0.0.1:1" // a usage error must not get as far as dialing
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"topic"}, "missing subcommand"},
		{[]string{"topic", "frob"}, `unknown subcommand "frob"`},
		{[]string{"topic", "create", "--brokers", dead}, "give the name"},
		{[]string{"topic", "create", "x", "--partitions", "0", "--brokers", dead}, "--partitions"},
		{[]string{"topic", "create", "x", "--bogus"}, "unknown flag --bogus"},
		{[]string{"topic", "create", "x", "--config", "retention.ms"}, "want key=value"},
		{[]string{"topic", "list", "extra", "--brokers", dead}, "takes no arguments"},
		{[]string{"topic", "list", "--output", "yaml"}, "want text or json"},
		{[]string{"topic", "alter", "x", "--brokers", dead}, "nothing to change"},
		{[]string{"topic", "describe", "--brokers", dead}, "give one or more topic names"},
		{[]string{"topic", "delete", "--brokers", dead}, "give the names"},
		{[]string{"topic", "list", "--brokers", ""}, "--brokers is empty"},
		{[]string{"group"}, "missing subcommand"},
		{[]string{"group", "describe", "--brokers", dead}, "give one or more group names"},
		{[]string{"group", "reset-offsets", "g", "--topic", "t", "--brokers", dead}, "give exactly one of --to-earliest"},
		{[]string{"group", "reset-offsets", "g", "--to-latest", "--brokers", dead}, "give --topic"},
		{[]string{"group", "reset-offsets", "g", "--topic", "t", "--to-datetime", "soon", "--brokers", dead}, "--to-datetime"},
		{[]string{"group", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest", "--brokers", dead}, "exactly one of"},
		{[]string{"group", "delete", "--brokers", dead}, "give one or more group names"},
		{[]string{"group", "delete-offsets", "g", "--brokers", dead}, "give --topic"},
		{[]string{"consume", "t", "--group", "g", "--offset-reset", "middle", "--brokers", dead}, "want earliest or latest"},
		{[]string{"produce", "--brokers", dead}, "give exactly one topic"},
		{[]string{"produce", "t", "--acks", "2", "--brokers", dead}, "--acks"},
		{[]string{"produce", "t", "--compression", "brotli", "--brokers", dead}, "--compression"},
		{[]string{"produce", "t", "--header", "novalue", "--brokers", dead}, "want key=value"},
		{[]string{"consume", "--brokers", dead}, "give exactly one topic"},
		{[]string{"consume", "t", "--format", "%x", "--brokers", dead}, "unknown placeholder %x"},
		{[]string{"consume", "t", "--offset", "3", "--from-beginning", "--brokers", dead}, "not both"},
		{[]string{"consume", "t", "--group", "g", "--partition", "0", "--brokers", dead}, "--partition cannot be used with --group"},
		{[]string{"consume", "t", "--offset", "x"}, "not an integer"},
		{[]string{"dump-segment"}, "give one or more"},
		{[]string{"nosuch"}, `unknown command "nosuch"`},
	}
	for _, tc := range cases {
		r := tool(t, "", nil, tc.args...)
		if r.code != 2 {
			t.Errorf("ringlog %s: exit %d, want 2 (usage)\n%s", strings.Join(tc.args, " "), r.code, r.stderr)
		}
		wantContains(t, "ringlog "+strings.Join(tc.args, " ")+": stderr", r.stderr, tc.want)
	}
	for _, cmd := range [][]string{{"topic", "create"}, {"topic", "list"}, {"topic", "describe"}, {"topic", "alter"},
		{"topic", "delete"}, {"group", "list"}, {"group", "describe"}, {"group", "reset-offsets"}, {"group", "delete"},
		{"group", "delete-offsets"}, {"produce"}, {"consume"}, {"dump-segment"}} {
		r := tool(t, "", nil, append(cmd, "--help")...)
		if r.code != 0 {
			t.Errorf("ringlog %s --help: exit %d, want 0", strings.Join(cmd, " "), r.code)
		}
		// Help goes to stdout ('ringlog topic create --help | grep x').
		wantContains(t, "ringlog "+strings.Join(cmd, " ")+" --help", r.stdout, "Usage: ringlog "+strings.Join(cmd, " "), "Examples:", "ringlog "+strings.Join(cmd, " ")+" ")
		if cmd[0] != "dump-segment" {
			wantContains(t, "ringlog "+strings.Join(cmd, " ")+" --help", r.stdout, "-brokers", brokersEnv, "-timeout")
		}
		if r.stderr != "" {
			t.Errorf("ringlog %s --help: stderr %q, want nothing", strings.Join(cmd, " "), r.stderr)
		}
	}
	r := tool(t, "", nil, "topic", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "describe") {
		t.Errorf("topic --help: exit %d\n%s", r.code, r.stdout)
	}
	r = tool(t, "", nil, "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Commands:") || r.stderr != "" {
		t.Errorf("--help: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// TestToolsUnreachableBroker checks that every client command waits for a
// broker that refuses connections until its --timeout, then fails with
// exit 1 and says to start the broker; and that one started meanwhile is
// used (the cluster quick start starts brokers and creates a topic at
// once).
func TestToolsUnreachableBroker(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	for _, args := range [][]string{{"topic", "list"}, {"topic", "create", "x"}, {"topic", "describe", "x"},
		{"group", "list"}, {"group", "describe", "g"}, {"produce", "x"}, {"consume", "x"}} {
		r := tool(t, "line\n", nil, append(args, "--brokers", dead, "--timeout", "1s")...)
		if r.code != 1 {
			t.Errorf("ringlog %s: exit %d, want 1\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
		if r.took < 900*time.Millisecond || r.took > 6*time.Second {
			t.Errorf("ringlog %s: gave up after %v, want about --timeout 1s", strings.Join(args, " "), r.took)
		}
		wantContains(t, "ringlog "+strings.Join(args, " "), r.stderr, dead, "within 1s", "connection refused", "is the broker running?", "ringlog serve")
	}
	// RINGLOG_BROKERS is the default of --brokers.
	r := tool(t, "", []string{brokersEnv + "=" + dead}, "topic", "list", "--timeout", "1s")
	if r.code != 1 || !strings.Contains(r.stderr, dead) {
		t.Errorf("with %s=%s: exit %d, stderr %q", brokersEnv, dead, r.code, r.stderr)
	}
	// A broker that comes up while the command waits is used.
	late := make(chan toolResult, 1)
	go func() {
		cmd := exec.Command(ringlogBinary(t), "topic", "create", "late", "--brokers", dead, "--timeout", "20s")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		r := toolResult{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
		if err != nil && r.code == 0 {
			r.code = -1
		}
		late <- r
	}()
	time.Sleep(time.Second)
	b := startServe(t, t.TempDir(), "--kafka-addr", dead)
	defer b.kill()
	if r := <-late; r.code != 0 || !strings.Contains(r.stdout, "late") {
		t.Errorf("topic create while the broker starts: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	// A listener that never answers: the --timeout ends it.
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	r = tool(t, "", nil, "topic", "list", "--brokers", ln.Addr().String(), "--timeout", "1s")
	if r.code != 1 || r.took > 5*time.Second {
		t.Errorf("silent broker: exit %d after %v, want 1 after about 1s", r.code, r.took)
	}
	wantContains(t, "silent broker", r.stderr, "did not answer within 1s", "--timeout")
}
