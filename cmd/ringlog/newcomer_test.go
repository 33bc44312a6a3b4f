package main

// Tests of what a new user meets first: version, flag typos, a busy port,
// the startup and recovery logs, the backend choice, dump-segment on the
// wrong file, group consumers across runs and broker restarts, group
// administration, and lag in /metrics versus `group describe`.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/internal/cli"
	"github.com/ringlog/ringlog/internal/testenv"
)

// TestVersion: `ringlog version` (text and JSON) and `--version` name the
// Go toolchain; a version set at link time wins over the build info.
func TestVersion(t *testing.T) {
	saved := version
	version = "v9.8.7-test"
	if got := buildVersion().Version; got != "v9.8.7-test" {
		t.Errorf("buildVersion with main.version set: %q", got)
	}
	version = saved
	if got := buildVersion(); got.Version == "" || got.GoVersion != runtime.Version() {
		t.Errorf("buildVersion without main.version: %+v", got)
	}

	r := tool(t, "", nil, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ringlog ") || !strings.Contains(r.stdout, runtime.Version()) {
		t.Errorf("version: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r2 := tool(t, "", nil, "--version")
	if r2.code != 0 || r2.stdout != r.stdout {
		t.Errorf("--version: exit %d, output %q, want %q", r2.code, r2.stdout, r.stdout)
	}
	r = tool(t, "", nil, "version", "--output", "json")
	v := decodeJSON[versionJSON](t, r.stdout)
	if r.code != 0 || v.Version == "" || v.GoVersion != runtime.Version() || v.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("version --output json: exit %d, %+v", r.code, v)
	}
}

// TestMistypedFlag: a flag typo prints one error line naming the flag
// meant and pointing at --help, and not the whole usage (nothing on
// stdout either).
func TestMistypedFlag(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--kafka-adr", "127.0.0.1:0"}, "unknown flag --kafka-adr (did you mean --kafka-addr?)"},
		{[]string{"consume", "t", "--max-mesages", "3"}, "unknown flag --max-mesages (did you mean --max-messages?)"},
		{[]string{"group", "reset-offsets", "g", "--to-earlest"}, "did you mean --to-earliest?"},
		{[]string{"topic", "create", "t", "--partitons=3"}, "did you mean --partitions?"},
	}
	for _, tc := range cases {
		r := tool(t, "", nil, tc.args...)
		what := "ringlog " + strings.Join(tc.args, " ")
		if r.code != 2 {
			t.Errorf("%s: exit %d, want 2", what, r.code)
		}
		wantContains(t, what, r.stderr, tc.want)
		if n := strings.Count(r.stderr+r.stdout, "Usage: ringlog"); n != 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: want one error line and no usage, got:\n%s", what, r.stderr+r.stdout)
		}
		wantContains(t, what, r.stderr, "--help lists the flags")
		if n := strings.Count(r.stderr, "-"+strings.TrimLeft(strings.Fields(strings.SplitN(tc.want, "--", 2)[1])[0], "-")); n < 1 {
			t.Errorf("%s: the bad flag is not named:\n%s", what, r.stderr)
		}
		if strings.Contains(r.stderr, "flag provided but not defined") {
			t.Errorf("%s: the flag package's own error line is printed too:\n%s", what, r.stderr)
		}
	}
	r := tool(t, "", nil, "vesion")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown command "vesion" (did you mean "version"?)`) {
		t.Errorf("ringlog vesion: exit %d\n%s", r.code, r.stderr)
	}
	if got := cli.Closest("anything", nil); got != "" {
		t.Errorf("cli.Closest with no candidates: %q", got)
	}
}

// TestServeListenersCheckedFirst: a busy port or a bad address is
// reported before the data directory is created.
func TestServeListenersCheckedFirst(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	cases := []struct {
		flags []string
		want  []string
	}{
		{[]string{"--kafka-addr", addr}, []string{"--kafka-addr " + addr, "address already in use", "another process listens"}},
		{[]string{"--http-addr", addr}, []string{"--http-addr " + addr, "address already in use"}},
		{[]string{"--kafka-addr", "127.0.0.1:notaport"}, []string{"--kafka-addr 127.0.0.1:notaport"}},
		{[]string{"--native-addr", "no-port-here"}, []string{"--native-addr no-port-here", "missing port"}},
	}
	for _, tc := range cases {
		dataDir := filepath.Join(t.TempDir(), "data")
		start := time.Now()
		code, _, stderr := runBinary(t, 30*time.Second, serveArgs(t, dataDir, tc.flags...)...)
		if code != 1 {
			t.Errorf("serve %v: exit %d, want 1\n%s", tc.flags, code, stderr)
		}
		wantContains(t, fmt.Sprintf("serve %v: stderr", tc.flags), stderr, tc.want...)
		if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
			t.Errorf("serve %v: the data directory was created (%v) before the listeners were checked", tc.flags, err)
		}
		if strings.Contains(stderr, "engine ready") || strings.Contains(stderr, "initialized data directory") {
			t.Errorf("serve %v: the engine opened before the listener check:\n%s", tc.flags, stderr)
		}
		t.Logf("serve %v: failed in %v", tc.flags, time.Since(start).Round(time.Millisecond))
	}
}

// TestServeBackendChoice: an explicit --io-backend wins over
// RINGLOG_BACKEND (with a warning), and the log says which backend runs
// and where the choice came from.
func TestServeBackendChoice(t *testing.T) {
	t.Setenv("RINGLOG_BACKEND", "pwritev")
	b := startServe(t, t.TempDir(), "--io-backend", "hybrid")
	logs := b.stderr.String()
	if !regexp.MustCompile(`msg=listening .*backend=hybrid\S* backend_from=flag`).MatchString(logs) {
		t.Errorf("--io-backend hybrid with RINGLOG_BACKEND=pwritev: the listening line does not show the hybrid backend chosen by the flag:\n%s", logs)
	}
	wantContains(t, "log", logs, "level=WARN", "RINGLOG_BACKEND ignored: --io-backend was given", "io_backend_from=flag")
	b.kill()

	b = startServe(t, t.TempDir())
	logs = b.stderr.String()
	if !regexp.MustCompile(`msg=listening .*backend=pwritev backend_from=env`).MatchString(logs) {
		t.Errorf("RINGLOG_BACKEND=pwritev without the flag: want backend=pwritev backend_from=env:\n%s", logs)
	}
	if strings.Contains(logs, "ignored") {
		t.Errorf("RINGLOG_BACKEND alone is reported as ignored:\n%s", logs)
	}
}

// TestServeStartupLogs: a fresh data directory logs "initialized", a
// restart after kill -9 warns of the unclean shutdown and says what
// recovery truncated; /metrics carries ringlog_build_info.
func TestServeStartupLogs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := startServe(t, dir)
	logs := b.stderr.String()
	wantContains(t, "fresh start log", logs, "initialized data directory", "start=initialized")
	if strings.Contains(logs, "clean_start") || strings.Contains(logs, "unclean") || strings.Contains(logs, "recovering") || strings.Contains(logs, "start=recovered") ||
		strings.Contains(logs, "nothing is dropped") {
		t.Errorf("a fresh start speaks of an unclean start or a recovery:\n%s", logs)
	}
	metrics := httpGet(t, "http://"+b.HTTP+"/metrics")
	if !regexp.MustCompile(`(?m)^ringlog_build_info\{goversion="` + regexp.QuoteMeta(runtime.Version()) + `",revision="[^"]*",version="[^"]+"\} 1$`).MatchString(metrics) {
		t.Errorf("/metrics lacks ringlog_build_info{goversion=%q,...} 1", runtime.Version())
	}

	cl := procClient(t, b.Kafka, kgo.AllowAutoTopicCreation())
	for i := range 5 {
		if err := cl.ProduceSync(deadlineCtx(t, 20*time.Second), &kgo.Record{Topic: "boot", Value: []byte("v" + strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	b.kill()
	seg, _ := activeSegment(t, filepath.Join(dir, "boot-0"))
	garbage := []byte(strings.Repeat("\xff", 37))
	appendToFile(t, seg, garbage)

	b = restartOn(t, dir, b.Kafka)
	logs = b.stderr.String()
	wantContains(t, "restart after kill -9", logs, `level=WARN msg="unclean shutdown: recovering"`,
		`level=WARN msg="unclean shutdown: recovery truncated logs" partitions=1 bytes=37 truncated=boot-0:37B`, "start=recovered")
	b.signal(syscall.SIGTERM, 20*time.Second)
	// The page cache tail without writeback hints drops nothing: said.
	b = restartOn(t, dir, b.Kafka, "--writeback-bytes", "0")
	logs = b.stderr.String()
	wantContains(t, "restart after SIGTERM", logs, "start=clean", "with --writeback-bytes 0 nothing is dropped")
	if strings.Contains(logs, "unclean") || strings.Contains(logs, "truncat") {
		t.Errorf("a clean restart speaks of an unclean start or truncation:\n%s", logs)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body)
}

// TestDumpSegmentNotASegment: a file that is not a segment is named so,
// not described as a huge torn batch.
func TestDumpSegmentNotASegment(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "notes.txt")
	writeTestFile(t, path, "# ringlog notes\nThis is plainly a text file and no record batch.\n")
	r := tool(t, "", nil, "dump-segment", path)
	if r.code != 1 {
		t.Errorf("dump-segment of a text file: exit %d, want 1", r.code)
	}
	wantContains(t, "dump-segment of a text file", r.stderr, "not a segment file", "magic")
	if strings.Contains(r.stdout+r.stderr, "torn") {
		t.Errorf("dump-segment of a text file speaks of a torn batch:\n%s%s", r.stdout, r.stderr)
	}
}

// consumedSet parses `--format '%p:%o\n'` output.
func consumedSet(t *testing.T, out string, seen map[string]int) {
	t.Helper()
	for _, l := range strings.Fields(out) {
		seen[l]++
	}
}

// produceSpread writes n records to each of the partitions of topic,
// value "p:i", and returns every "p:o" written.
func produceSpread(t *testing.T, addr, topic string, counts map[int32]int, ts func(i int) time.Time) map[string]bool {
	t.Helper()
	cl := procClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := map[string]bool{}
	for p, n := range counts {
		for i := range n {
			r := &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%d:%d", p, i)}
			if ts != nil {
				r.Timestamp = ts(i)
			}
			res := cl.ProduceSync(deadlineCtx(t, 20*time.Second), r)
			if err := res.FirstErr(); err != nil {
				t.Fatal(err)
			}
			rec, _ := res.First()
			want[fmt.Sprintf("%d:%d", p, rec.Offset)] = true
		}
	}
	return want
}

// TestConsumeGroupBoundedRuns: consecutive bounded runs of one group read
// every record of a multi-partition topic exactly once, although the
// first run stops before reaching every partition.
func TestConsumeGroupBoundedRuns(t *testing.T) {
	t.Parallel()
	b := startToolBroker(t)
	b.run(t, 0, "", "topic", "create", "runs", "--partitions", "3")
	want := produceSpread(t, b.Addr, "runs", map[int32]int{0: 10, 1: 10, 2: 10}, nil)
	seen := map[string]int{}
	for _, n := range []string{"4", "11"} {
		r := b.run(t, 0, "", "consume", "runs", "--group", "bounded", "--max-messages", n, "--format", `%p:%o\n`, "--timeout", "25s")
		if got := len(strings.Fields(r.stdout)); strconv.Itoa(got) != n {
			t.Fatalf("consume --max-messages %s printed %d records:\n%s", n, got, r.stdout)
		}
		consumedSet(t, r.stdout, seen)
	}
	r := b.run(t, 0, "", "consume", "runs", "--group", "bounded", "--idle-timeout", "2s", "--format", `%p:%o\n`, "--timeout", "25s")
	consumedSet(t, r.stdout, seen)
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("record %s read %d times over the three runs, want once", k, seen[k])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("read %d distinct records, want %d: %v", len(seen), len(want), seen)
	}
	// --offset-reset latest: a new group starts at the end.
	r = b.run(t, 0, "", "consume", "runs", "--group", "late", "--offset-reset", "latest", "--idle-timeout", "1500ms", "--timeout", "25s")
	if r.stdout != "" {
		t.Errorf("a new group with --offset-reset latest read old records:\n%s", r.stdout)
	}
	if r := tool(t, "", nil, "consume", "runs", "--offset-reset", "latest"); r.code != 2 || !strings.Contains(r.stderr, "--offset-reset is for --group") {
		t.Errorf("--offset-reset without --group: exit %d\n%s", r.code, r.stderr)
	}
}

// lineCounter collects a child's stdout lines.
type lineCounter struct{ testenv.SyncBuffer }

func (l *lineCounter) lines() []string { return strings.Fields(l.String()) }

// TestConsumeGroupRidesBrokerRestart: a group consumer keeps going when
// the broker restarts (same data directory, same port): it reconnects,
// reads what is produced after the restart, and exits 0 at its idle
// timeout having read every record (at least once, as documented; the
// duplicates are counted in the log).
func TestConsumeGroupRidesBrokerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	flags := []string{"--group-initial-rebalance-delay", "0"}
	b := startServe(t, dir, flags...)
	if r := tool(t, "", nil, "topic", "create", "ride", "--partitions", "3", "--brokers", b.Kafka); r.code != 0 {
		t.Fatalf("topic create: %d %s", r.code, r.stderr)
	}
	want := produceSpread(t, b.Kafka, "ride", map[int32]int{0: 10, 1: 10, 2: 10}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ringlogBinary(t), "consume", "ride", "--group", "rider", "--idle-timeout", "15s",
		"--format", `%p:%o\n`, "--brokers", b.Kafka)
	out, errOut := &lineCounter{}, &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitLines := func(n int) {
		t.Helper()
		var exited error
		gone := false
		printed := testenv.Eventually(60*time.Second, func() bool {
			if len(out.lines()) >= n {
				return true
			}
			select {
			case exited = <-done:
				gone = true
				return true
			default:
				return false
			}
		})
		switch {
		case gone:
			t.Fatalf("consume exited (%v) after %d of %d records; stderr:\n%s", exited, len(out.lines()), n, errOut.String())
		case !printed:
			t.Fatalf("consume printed %d of %d records in 60s; stderr:\n%s", len(out.lines()), n, errOut.String())
		}
	}
	waitLines(30)
	if code, _, err := b.signal(syscall.SIGTERM, 30*time.Second); err != nil || code != 0 {
		t.Fatalf("broker stop: exit %d, %v", code, err)
	}
	b = restartOn(t, dir, b.Kafka, flags...)
	for k := range produceSpread(t, b.Kafka, "ride", map[int32]int{0: 5, 1: 5, 2: 5}, nil) {
		want[k] = true
	}
	waitLines(45)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("consume across a broker restart: %v, want exit 0; stderr:\n%s", err, errOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("consume did not stop at its idle timeout; stderr:\n%s", errOut.String())
	}
	seen := map[string]int{}
	consumedSet(t, out.String(), seen)
	dups := 0
	for k := range want {
		if seen[k] == 0 {
			t.Errorf("record %s was never read", k)
		}
		dups += max(seen[k]-1, 0)
	}
	if len(seen) != len(want) {
		t.Errorf("read %d distinct records, want %d", len(seen), len(want))
	}
	t.Logf("read %d records, %d of them again after the restart; consumer stderr:\n%s", len(out.lines()), dups, errOut.String())
}

// TestGroupAdmin: reset-offsets in each mode (text, JSON, dry run),
// refusal while the group has members, delete-offsets and delete.
func TestGroupAdmin(t *testing.T) {
	t.Parallel()
	b := startToolBroker(t)
	b.run(t, 0, "", "topic", "create", "ledger", "--partitions", "2")
	base := time.Now().Add(-time.Hour).Truncate(time.Minute)
	produceSpread(t, b.Addr, "ledger", map[int32]int{0: 6, 1: 4}, func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute) })
	b.run(t, 0, "", "consume", "ledger", "--group", "acct", "--idle-timeout", "1500ms")

	committed := func() map[int32]*int64 {
		gs := decodeJSON[[]groupDescribeJSON](t, b.run(t, 0, "", "group", "describe", "acct", "--output", "json").stdout)
		m := map[int32]*int64{}
		for _, o := range gs[0].Offsets {
			m[o.Partition] = o.Committed
		}
		return m
	}
	check := func(what string, want map[int32]int64) {
		t.Helper()
		got := committed()
		for p, w := range want {
			if got[p] == nil || *got[p] != w {
				t.Errorf("%s: partition %d committed %s, want %d", what, p, optInt64(got[p]), w)
			}
		}
	}
	check("after consuming", map[int32]int64{0: 6, 1: 4})

	r := b.run(t, 0, "", "group", "reset-offsets", "acct", "--topic", "ledger", "--to-earliest", "--dry-run")
	wantContains(t, "reset --dry-run", r.stdout, "TOPIC", "PREVIOUS", "NEW", "Dry run: nothing committed")
	check("after a dry run", map[int32]int64{0: 6, 1: 4})

	res := decodeJSON[groupResetResultJSON](t, b.run(t, 0, "", "group", "reset-offsets", "acct", "--topic", "ledger", "--to-earliest", "--output", "json").stdout)
	if res.Group != "acct" || res.DryRun || len(res.Offsets) != 2 || res.Offsets[0].New != 0 || *res.Offsets[0].Previous != 6 || *res.Offsets[1].Previous != 4 {
		t.Errorf("reset --to-earliest --output json: %+v", res)
	}
	check("--to-earliest", map[int32]int64{0: 0, 1: 0})

	r = b.run(t, 0, "", "group", "reset-offsets", "acct", "--topic", "ledger", "--partitions", "0", "--to-offset", "3")
	wantContains(t, "reset --to-offset (text)", r.stdout, "Reset 1 offset of group acct")
	check("--to-offset 3 on partition 0", map[int32]int64{0: 3, 1: 0})
	b.run(t, 0, "", "group", "reset-offsets", "acct", "--topic", "ledger", "--to-offset", "100")
	check("--to-offset 100 (clamped to the ends)", map[int32]int64{0: 6, 1: 4})

	b.run(t, 0, "", "group", "reset-offsets", "acct", "--topic", "ledger", "--to-datetime", base.Add(2*time.Minute).UTC().Format(time.RFC3339))
	check("--to-datetime (the third record's time)", map[int32]int64{0: 2, 1: 2})
	b.run(t, 0, "", "group", "reset-offsets", "acct", "--topic", "ledger", "--to-datetime", strconv.FormatInt(base.Add(5*time.Minute).UnixMilli(), 10))
	check("--to-datetime past partition 1's newest record", map[int32]int64{0: 5, 1: 4})
	res = decodeJSON[groupResetResultJSON](t, b.run(t, 0, "", "group", "reset-offsets", "acct", "--topic", "ledger", "--to-latest", "--dry-run", "--output", "json").stdout)
	if !res.DryRun || res.Offsets[0].New != 6 || res.Offsets[1].New != 4 {
		t.Errorf("reset --to-latest --dry-run --output json: %+v", res)
	}
	b.run(t, 0, "", "group", "reset-offsets", "acct", "--topic", "ledger", "--to-earliest")

	// A live member: reset and delete are refused.
	live := exec.Command(ringlogBinary(t), "consume", "ledger", "--group", "acct", "--brokers", b.Addr)
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer live.Process.Kill()
	var gs []groupDescribeJSON
	if !testenv.Eventually(20*time.Second, func() bool {
		gs = decodeJSON[[]groupDescribeJSON](t, b.run(t, 0, "", "group", "describe", "acct", "--output", "json").stdout)
		return len(gs[0].Members) == 1
	}) {
		t.Fatalf("the live consumer never joined: %+v", gs)
	}
	r = b.run(t, 1, "", "group", "reset-offsets", "acct", "--topic", "ledger", "--to-earliest")
	wantContains(t, "reset with a live member", r.stderr, "1 active member", "stop its consumers first")
	r = b.run(t, 1, "", "group", "delete", "acct")
	wantContains(t, "delete with a live member", r.stderr, "active members")
	if n := strings.Count(r.stderr, "acct"); n != 1 {
		t.Errorf("delete with a live member names the group %d times, want once:\n%s", n, r.stderr)
	}
	live.Process.Signal(syscall.SIGTERM)
	if err := live.Wait(); err != nil {
		t.Fatalf("live consumer: %v", err)
	}

	dres := decodeJSON[[]groupDeleteOffsetJSON](t, b.run(t, 0, "", "group", "delete-offsets", "acct", "--topic", "ledger", "--partitions", "1", "--output", "json").stdout)
	if len(dres) != 1 || !dres[0].Deleted || dres[0].Partition != 1 {
		t.Errorf("delete-offsets --output json: %+v", dres)
	}
	if got := committed(); got[1] != nil || got[0] == nil {
		t.Errorf("after delete-offsets of partition 1: committed %s / %s, want 6 / none", optInt64(got[0]), optInt64(got[1]))
	}
	r = b.run(t, 0, "", "group", "delete-offsets", "acct", "--topic", "ledger")
	wantContains(t, "delete-offsets (text)", r.stdout, "deleted 2 committed offsets of group acct on topic ledger")

	r = b.run(t, 0, "", "group", "delete", "acct")
	wantContains(t, "delete (text)", r.stdout, "deleted group acct")
	b.run(t, 1, "", "group", "describe", "acct")
	gd := decodeJSON[[]groupDeleteJSON](t, b.run(t, 1, "", "group", "delete", "acct", "--output", "json").stdout)
	if len(gd) != 1 || gd[0].Deleted || !strings.Contains(gd[0].Error, "does not exist") {
		t.Errorf("delete of a deleted group --output json: %+v", gd)
	}
}

// TestGroupLagMetricsMatchDescribe: ringlog_group_lag covers the same
// partitions as `group describe`, with the same lag, committed or not.
func TestGroupLagMetricsMatchDescribe(t *testing.T) {
	t.Parallel()
	b := startToolBroker(t)
	b.run(t, 0, "", "topic", "create", "lagm", "--partitions", "3")
	produceSpread(t, b.Addr, "lagm", map[int32]int{0: 5, 1: 3}, nil)
	// A commit on partition 0 only: 1 and 2 have none.
	b.run(t, 0, "", "group", "reset-offsets", "lg", "--topic", "lagm", "--partitions", "0", "--to-offset", "2")

	gs := decodeJSON[[]groupDescribeJSON](t, b.run(t, 0, "", "group", "describe", "lg", "--output", "json").stdout)
	described := map[string]int64{}
	for _, o := range gs[0].Offsets {
		if o.Lag == nil {
			t.Fatalf("describe: partition %d without lag: %+v", o.Partition, o)
		}
		described[o.Topic+"/"+strconv.Itoa(int(o.Partition))] = *o.Lag
	}
	want := map[string]int64{"lagm/0": 3, "lagm/1": 3, "lagm/2": 0}
	if !maps.Equal(described, want) || gs[0].TotalLag != 6 {
		t.Errorf("describe lags %v (total %d), want %v (total 6)", described, gs[0].TotalLag, want)
	}
	scraped := map[string]int64{}
	re := regexp.MustCompile(`^ringlog_group_lag\{group="lg",partition="(\d+)",topic="([^"]+)"\} (\d+)$`)
	sc := bufio.NewScanner(strings.NewReader(httpGet(t, "http://"+b.HTTPAddr+"/metrics")))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseInt(m[3], 10, 64)
			scraped[m[2]+"/"+m[1]] = v
		}
	}
	if !maps.Equal(scraped, described) {
		t.Errorf("ringlog_group_lag %v, group describe %v: they must agree", scraped, described)
	}
}
