package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testenv"
)

// kgoCompatTests are franz-go's own kgo tests that exercise the group
// protocols, classic, KIP-848 and share groups (KIP-932)
// (TestPauseIssueOct2023 runs first, not in parallel, so that the suite
// has asked the broker's ApiVersions before TestGroupSimple decides
// whether to skip its 848 case).
const kgoCompatTests = `^(TestPauseIssueOct2023|TestGroupSimple|Test848RegexBrokerResolves|TestGroupETL|TestTxnEtl|` +
	`TestShareGroup|TestShareGroupETL|TestShareGroupAckOnClose|TestShareGroupOffsetsAdmin|TestConsumeRegexShareSkipsInternal)$`

// shareTest names the franz-go tests that skip when the broker does not
// offer share groups.
var shareTest = regexp.MustCompile(`Share`)

// TestKgoCompat runs franz-go's kgo test suite's group tests (the
// version go.mod pins, from the module cache) against `ringlog serve`:
// one broker, then a three-broker cluster with replication factor 3. It
// fails on any failed test and on any KIP-848 case that skipped (the
// broker would then not have advertised the protocol). Slow (a few
// minutes): `make kgo-compat`, or RINGLOG_KGO_COMPAT=1.
func TestKgoCompat(t *testing.T) {
	if os.Getenv("RINGLOG_KGO_COMPAT") == "" {
		t.Skip("franz-go's group tests against ringlog take minutes: make kgo-compat (RINGLOG_KGO_COMPAT=1)")
	}
	tests := kgoCompatTests
	if p := os.Getenv("RINGLOG_KGO_TESTS"); p != "" {
		tests = p // a narrower pattern, to chase one failure
	}
	records := os.Getenv("RINGLOG_KGO_RECORDS")
	if records == "" {
		records = "50000"
	}
	bin := filepath.Join(t.TempDir(), "kgo.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "github.com/twmb/franz-go/pkg/kgo")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build franz-go's kgo tests: %v\n%s", err, out)
	}
	dir, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/twmb/franz-go/pkg/kgo").Output()
	if err != nil {
		t.Fatalf("find franz-go's kgo package: %v", err)
	}
	// shares: share groups are offered (a skipped share test fails).
	run := func(t *testing.T, seeds []string, rf string, shares bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "-test.run", tests, "-test.v", "-test.timeout", "9m")
		cmd.Dir = strings.TrimSpace(string(dir))
		cmd.Env = append(os.Environ(), "KGO_SEEDS="+strings.Join(seeds, ","), "KGO_TEST_RF="+rf, "KGO_TEST_RECORDS="+records)
		out, err := cmd.CombinedOutput()
		text := string(out)
		if dir := os.Getenv("RINGLOG_TEST_LOG_DIR"); dir != "" {
			// The whole output of franz-go's tests, next to the brokers'.
			if werr := os.WriteFile(filepath.Join(dir, "kgo-"+strings.ReplaceAll(t.Name(), "/", "-")+".log"), out, 0o644); werr != nil {
				t.Logf("keep franz-go's output: %v", werr)
			}
		}
		results := regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL|SKIP): (\S+)`).FindAllStringSubmatch(text, -1)
		for _, r := range results {
			t.Logf("%s %s", r[1], r[2])
			if r[1] == "SKIP" && strings.Contains(r[2], "848") {
				t.Errorf("%s skipped: the broker did not offer KIP-848", r[2])
			}
			if r[1] == "SKIP" && shares && shareTest.MatchString(r[2]) {
				t.Errorf("%s skipped: the broker did not offer share groups", r[2])
			}
		}
		if err != nil || len(results) == 0 {
			// What the failing tests said (their t.Errorf lines), then
			// the end of the output.
			said := regexp.MustCompile(`(?m)^\s+\w+_test\.go:\d+: .*$`).FindAllString(text, -1)
			var kept []string
			for _, l := range said {
				if !strings.Contains(l, "deleting ") {
					kept = append(kept, l)
				}
			}
			t.Fatalf("franz-go's tests: %v\n%s\n...\n%s", err, strings.Join(kept, "\n"), lastChars(text, 4000))
		}
	}
	t.Run("single", func(t *testing.T) {
		b := startServe(t, t.TempDir(), "--group-initial-rebalance-delay", "0s")
		run(t, []string{b.Kafka}, "1", true)
	})
	t.Run("cluster", func(t *testing.T) {
		c := newTestCluster(t, 3)
		for id := 1; id <= 3; id++ {
			c.start(id)
		}
		ctx := deadlineCtx(t, 2*time.Minute)
		c.converge(ctx, 3)
		// The offsets, transaction and share-state topics exist before
		// the suite asks for a coordinator.
		testenv.Eventually(time.Minute, func() bool {
			m, err := metadataFrom(ctx, c.kafka[0])
			if err != nil {
				return false
			}
			n := 0
			for _, tp := range m.Topics {
				if tp.Topic != nil && (*tp.Topic == "__consumer_offsets" || *tp.Topic == "__transaction_state" || *tp.Topic == "__share_group_state") {
					n++
				}
			}
			return n == 3
		})
		run(t, c.kafka, "3", true)
	})
}
