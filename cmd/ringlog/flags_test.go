package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
)

// TestServeFlags runs `ringlog serve` with good and bad command lines and
// config files and checks exit codes (0 ok, 1 failure, 2 usage) and that
// the messages name what was wrong.
func TestServeFlags(t *testing.T) {
	t.Run("help", func(t *testing.T) {
		for _, h := range []string{"--help", "-h"} {
			code, stdout, stderr := runBinary(t, 20*time.Second, "serve", h)
			if code != 0 || stderr != "" {
				t.Errorf("serve %s: exit %d, stderr %q; want 0 and the help on stdout", h, code, stderr)
			}
			for _, want := range []string{"Usage: ringlog serve", "-data-dir", "-kafka-addr", "-config", "Examples:",
				"ringlog serve --config", "ringlog ready kafka=HOST:PORT", "http=HOST:PORT", "SIGTERM"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("serve %s: usage lacks %q:\n%s", h, want, stdout)
				}
			}
		}
	})

	// Usage errors: exit 2 with a message naming the problem, before
	// anything touches the data directory.
	usage := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown flag", []string{"--bogus"}, []string{"unknown flag --bogus"}},
		{"io backend", []string{"--io-backend", "bogus"}, []string{"--io-backend", "bogus"}},
		{"unknown topic default", []string{"--topic-default", "nope=1"}, []string{"-topic-default", `unknown topic config "nope"`}},
		{"bad topic default value", []string{"--topic-default", "retention.ms=soon"}, []string{"retention.ms", "soon"}},
		{"topic default without =", []string{"--topic-default", "retention.ms"}, []string{"want key=value"}},
		{"default partitions", []string{"--default-partitions", "0"}, []string{"--default-partitions"}},
		{"log level", []string{"--log-level", "loud"}, []string{"--log-level", "loud"}},
		{"log format", []string{"--log-format", "xml"}, []string{"--log-format", "xml"}},
		{"argument", []string{"extra"}, []string{"serve takes no arguments"}},
		{"bad duration", []string{"--shutdown-timeout", "soon"}, []string{"-shutdown-timeout"}},
	}
	for _, tc := range usage {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			code, stdout, stderr := runBinary(t, 20*time.Second, serveArgs(t, dataDir, tc.args...)...)
			if code != 2 {
				t.Errorf("%v: exit %d, want 2 (usage); stderr:\n%s", tc.args, code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("%v: message lacks %q:\n%s", tc.args, w, stderr)
				}
			}
			if strings.Contains(stdout, "ringlog ready") {
				t.Errorf("%v: the broker started", tc.args)
			}
			if _, err := os.Stat(dataDir); err == nil {
				t.Errorf("%v: a usage error created the data directory", tc.args)
			}
		})
	}

	t.Run("config file", func(t *testing.T) {
		dir := t.TempDir()
		conf := filepath.Join(dir, "ringlog.conf")
		// kafka-addr is also on the command line (startServe): the
		// command line wins, so the file's unusable address is ignored.
		writeTestFile(t, conf, "# broker settings\n\ndefault-partitions = 2\n  kafka-addr = 127.0.0.1:1  \ntopic-default = retention.ms=3600000\n")
		b := startServe(t, filepath.Join(dir, "data"), "--config", conf)
		if strings.HasSuffix(b.Kafka, ":1") {
			t.Errorf("the config file's kafka-addr won over the command line: listening on %s", b.Kafka)
		}
		ctx := deadlineCtx(t, 20*time.Second)
		adm := kadm.NewClient(procClient(t, b.Kafka))
		cr, err := adm.CreateTopic(ctx, -1, -1, nil, "fromconf")
		if err == nil {
			err = cr.Err
		}
		if err != nil {
			t.Fatalf("create topic: %v", err)
		}
		if cr.NumPartitions != 2 {
			t.Errorf("topic created with %d partitions, want 2 from the config file's default-partitions", cr.NumPartitions)
		}
		// Auto-creation uses the same default.
		prod := procClient(t, b.Kafka, kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("auto"))
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		td, err := adm.ListTopics(ctx, "auto")
		if err != nil || td["auto"].Err != nil {
			t.Fatalf("list topics: %v %v", err, td["auto"].Err)
		}
		if n := len(td["auto"].Partitions); n != 2 {
			t.Errorf("auto-created topic has %d partitions, want 2", n)
		}
		rcs, err := adm.DescribeTopicConfigs(ctx, "fromconf")
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := rcs.On("fromconf", nil)
		found := false
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" {
				found = true
				if c.MaybeValue() != "3600000" {
					t.Errorf("retention.ms = %q, want 3600000 from the config file's topic-default", c.MaybeValue())
				}
			}
		}
		if !found {
			t.Errorf("retention.ms not described")
		}
	})

	badConfigs := []struct {
		name, text string
		want       []string
	}{
		{"no equals", "default-partitions = 2\n# fine\nauto-create-topics false\n", []string{":3:", "want name = value"}},
		{"unknown setting", "\nbogus-setting = 1\n", []string{":2:", "bogus-setting"}},
		{"bad value", "default-partitions = many\n", []string{":1:", "default-partitions"}},
		{"nested", "config = other.conf\n", []string{":1:", "do not nest"}},
		{"bad topic default", "default-partitions = 3\ntopic-default = nope=1\n", []string{":2:", "topic-default", `unknown topic config "nope"`}},
	}
	for _, tc := range badConfigs {
		t.Run("config "+tc.name, func(t *testing.T) {
			dir := t.TempDir()
			conf := filepath.Join(dir, "bad.conf")
			writeTestFile(t, conf, tc.text)
			code, stdout, stderr := runBinary(t, 20*time.Second, serveArgs(t, filepath.Join(dir, "data"), "--config", conf)...)
			if code != 2 {
				t.Errorf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, w := range append([]string{conf}, tc.want...) {
				if !strings.Contains(stderr, w) {
					t.Errorf("message lacks %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stdout, "ringlog ready") {
				t.Errorf("the broker started")
			}
		})
	}
	t.Run("config missing", func(t *testing.T) {
		dir := t.TempDir()
		conf := filepath.Join(dir, "nope.conf")
		code, _, stderr := runBinary(t, 20*time.Second, serveArgs(t, filepath.Join(dir, "data"), "--config", conf)...)
		if code != 2 || !strings.Contains(stderr, conf) {
			t.Errorf("missing config file: exit %d, want 2 naming the file; stderr:\n%s", code, stderr)
		}
	})

	t.Run("http endpoints", func(t *testing.T) {
		b := startServe(t, t.TempDir())
		for path, want := range map[string]string{"/healthz": "ok", "/metrics": "# HELP"} {
			resp, err := http.Get("http://" + b.HTTP + path)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
				t.Errorf("GET %s: %d %q, want 200 with %q", path, resp.StatusCode, lastChars(string(body), 200), want)
			}
		}
		off := startServe(t, t.TempDir(), "--http-addr", "")
		if off.HTTP != "off" {
			t.Errorf("--http-addr '': ready line says http=%s, want off", off.HTTP)
		}
	})

	t.Run("kafka address in use", func(t *testing.T) {
		first := startServe(t, t.TempDir())
		secondDir := t.TempDir()
		code, stdout, stderr := runBinary(t, 30*time.Second, serveArgs(t, secondDir, "--kafka-addr", first.Kafka)...)
		if code == 0 || strings.Contains(stdout, "ringlog ready") {
			t.Fatalf("a second broker on %s started (exit %d, stdout %q)", first.Kafka, code, stdout)
		}
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		if !strings.Contains(stderr, first.Kafka) || !strings.Contains(stderr, "address already in use") {
			t.Errorf("the error does not say the Kafka address %s is in use:\n%s", first.Kafka, lastChars(stderr, 2000))
		}
		checkServes(t, first)
	})

	t.Run("http address in use", func(t *testing.T) {
		first := startServe(t, t.TempDir())
		code, stdout, stderr := runBinary(t, 30*time.Second, serveArgs(t, t.TempDir(), "--http-addr", first.HTTP)...)
		if code != 1 || strings.Contains(stdout, "ringlog ready") {
			t.Errorf("a second broker on http %s: exit %d, want 1 (stdout %q)", first.HTTP, code, stdout)
		}
		if !strings.Contains(stderr, first.HTTP) || !strings.Contains(stderr, "address already in use") {
			t.Errorf("the error does not say the HTTP address %s is in use:\n%s", first.HTTP, lastChars(stderr, 2000))
		}
		checkServes(t, first)
	})

	t.Run("data directory in use", func(t *testing.T) {
		dir := t.TempDir()
		first := startServe(t, dir)
		checkServes(t, first)
		code, stdout, stderr := runBinary(t, 30*time.Second, serveArgs(t, dir)...)
		if code != 1 || strings.Contains(stdout, "ringlog ready") {
			t.Errorf("a second broker on the data directory %s while the first runs: exit %d, want 1 without starting", dir, code)
		}
		if !strings.Contains(stderr, "in use") {
			t.Errorf("the error does not say the data directory is in use:\n%s", lastChars(stderr, 2000))
		}
		if !strings.Contains(stderr, dir) {
			t.Errorf("the error does not name the data directory:\n%s", lastChars(stderr, 2000))
		}
		// The second process must not have touched the first's files:
		// a clean-shutdown marker written now would make a crash of the
		// first broker look clean at the next start.
		if _, err := os.Stat(filepath.Join(dir, cleanMarker)); err == nil {
			t.Errorf("the refused second broker left a clean-shutdown marker in a data directory that is in use")
		}
		checkServes(t, first)
	})
}

// TestServeFlagDefaults checks that serve without flags runs exactly
// broker.DefaultConfig, the configuration the in-process test brokers
// start from.
func TestServeFlagDefaults(t *testing.T) {
	var f serveFlags
	fs := serveFlagSet(&f, io.Discard)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	if want := broker.DefaultConfig(); !reflect.DeepEqual(cfg, want) {
		t.Errorf("serve without flags runs\n%+v\nbroker.DefaultConfig is\n%+v", cfg, want)
	}
	if cfg.Engine.WritebackBytes != 1<<20 {
		t.Errorf("--writeback-bytes defaults to %d, want 1 MiB", cfg.Engine.WritebackBytes)
	}
}

func writeTestFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkServes fails the test unless the broker still runs and a produce
// and a read back through it work.
func checkServes(t *testing.T, b *serveProc) {
	t.Helper()
	if b.exited() {
		t.Fatalf("broker on %s has exited: %v", b.Kafka, b.waitErr)
	}
	ctx := deadlineCtx(t, 20*time.Second)
	topic := fmt.Sprintf("alive-%d", time.Now().UnixNano())
	prod := procClient(t, b.Kafka, kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic(topic))
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("ping")}).FirstErr(); err != nil {
		t.Fatalf("broker on %s does not accept produces: %v", b.Kafka, err)
	}
	got := readBackTopic(t, ctx, b.Kafka, topic, 1)
	if _, ok := got.byValue["ping"]; !ok || got.ends[0] != 1 {
		t.Fatalf("broker on %s: produced record not read back (%v)", b.Kafka, got.ends)
	}
}

func TestSplitPrincipals(t *testing.T) {
	for in, want := range map[string][]string{
		"User:admin":                        {"User:admin"},
		"User:a, User:b":                    {"User:a", "User:b"},
		"User:CN=b1,O=example":              {"User:CN=b1,O=example"},
		"User:CN=b1,O=example,User:admin":   {"User:CN=b1,O=example", "User:admin"},
		"User:CN=b1,O=ex;User:CN=b2,O=ex; ": {"User:CN=b1,O=ex", "User:CN=b2,O=ex"},
		"":                                  nil,
		"User:CN=a\\,b,O=x;User:admin":      {"User:CN=a\\,b,O=x", "User:admin"},
	} {
		if got := splitPrincipals(in); !slices.Equal(got, want) {
			t.Errorf("splitPrincipals(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAdvertisedListeners(t *testing.T) {
	ls, err := broker.ParseListeners("SASL_SSL://0.0.0.0:9095,SSL://0.0.0.0:9096")
	if err != nil {
		t.Fatal(err)
	}
	if err := broker.SetAdvertised(ls, "SSL://h1:9096, SASL_SSL://h1:9095"); err != nil {
		t.Fatal(err)
	}
	if ls[0].AdvertisedAddr != "h1:9095" || ls[1].AdvertisedAddr != "h1:9096" {
		t.Fatalf("advertised %+v", ls)
	}
	for _, bad := range []string{"PLAINTEXT://h1:9092", "SSL://h1:1,SSL://h1:2", "SSL://nohost"} {
		ls, _ := broker.ParseListeners("SSL://0.0.0.0:9096")
		if err := broker.SetAdvertised(ls, bad); err == nil {
			t.Errorf("SetAdvertised(%q): no error", bad)
		}
	}
}
