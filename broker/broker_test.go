package broker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/client"
	"github.com/ringlog/ringlog/cluster"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/internal/testcerts"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/security"
)

// TestDefaultConfigValid: what ships passes its own validation, and the
// settings that made tests and the binary differ are the shipping ones.
func TestDefaultConfigValid(t *testing.T) {
	def := broker.DefaultConfig()
	if err := def.Validate(); err != nil {
		t.Fatalf("DefaultConfig does not validate: %v", err)
	}
	if def.Engine.WritebackBytes != 1<<20 || def.Engine.Groups.InitialRebalanceDelay != 3*time.Second || !def.Engine.AutoCreateTopics {
		t.Errorf("DefaultConfig: writeback %d, initial rebalance delay %v, auto-create %v; want 1 MiB, 3s, true",
			def.Engine.WritebackBytes, def.Engine.Groups.InitialRebalanceDelay, def.Engine.AutoCreateTopics)
	}
}

// TestValidate names the refused setting, and New refuses before touching
// the data directory.
func TestValidate(t *testing.T) {
	certs := testcerts.New(t)
	bcert, bkey := certs.Broker("b1")
	interSSL := func(c *broker.Config, clientAuth string, superUsers ...string) {
		c.Cluster = &cluster.Config{}
		c.Kafka.Protocol = netio.SSL
		c.Security.TLS = security.TLSFiles{CertFile: bcert, KeyFile: bkey, ClientCAFile: certs.CAFile, ClientAuth: clientAuth}
		c.Security.Authorizer, c.Security.SuperUsers = true, superUsers
	}
	for _, tc := range []struct {
		setting string
		change  func(*broker.Config)
	}{
		{"writeback-bytes", func(c *broker.Config) { c.Engine.WritebackBytes = -1 }},
		{"page-cache-tail-bytes", func(c *broker.Config) { c.Engine.PageCacheTailBytes = -1 }},
		{"default-partitions", func(c *broker.Config) { c.Engine.DefaultPartitions = 0 }},
		{"native-addr", func(c *broker.Config) { c.NativeAddr = "0.0.0.0:0" }},
		// The native listener authenticates nobody: beside a listener that
		// does, it needs the authorizer (or an explicit opt-in) ...
		{"native-addr", func(c *broker.Config) {
			c.Listeners = []broker.Listener{{Protocol: netio.SASLPlaintext, Addr: "127.0.0.1:0"}}
		}},
		// ... and its principal must not be a super user.
		{"native-principal", func(c *broker.Config) {
			c.Security.Authorizer, c.Security.SuperUsers = true, []string{"User:ANONYMOUS"}
		}},
		{"native-principal", func(c *broker.Config) {
			c.Security.Authorizer, c.Security.SuperUsers = true, []string{"User:admin", "User:native"}
			c.Security.NativePrincipal = "User:native"
		}},
		{"native-principal", func(c *broker.Config) { c.Security.NativePrincipal = "native" }},
		{"http-addr", func(c *broker.Config) { c.HTTPAddr = "0.0.0.0:0" }},
		{"tls-cert", func(c *broker.Config) { c.Listeners = []broker.Listener{{Protocol: netio.SSL, Addr: "127.0.0.1:0"}} }},
		{"tls-cert", func(c *broker.Config) {
			c.Listeners = []broker.Listener{{Protocol: netio.SASLSSL, Addr: "127.0.0.1:0"}}
			c.Security.TLS = security.TLSFiles{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent-key.pem"}
		}},
		{"kafka-security-protocol", func(c *broker.Config) {
			c.Kafka.Protocol = netio.SASLPlaintext
			c.Cluster = &cluster.Config{}
		}},
		{"listeners", func(c *broker.Config) {
			c.Listeners = []broker.Listener{{Protocol: netio.Plaintext, Addr: "127.0.0.1:0"}}
			c.Cluster = &cluster.Config{}
		}},
		{"authorizer", func(c *broker.Config) {
			c.Security.Authorizer = true
			c.Cluster = &cluster.Config{}
		}},
		// With the authorizer in cluster mode, the brokers' principal on
		// the inter-broker listener must be a super user.
		{"tls-client-auth", func(c *broker.Config) { interSSL(c, "requested", "User:CN=b1,O=ringlog-test") }},
		{"super-users", func(c *broker.Config) { interSSL(c, "required", "User:admin") }},
		{"super-users", func(c *broker.Config) {
			c.Listeners = []broker.Listener{{Protocol: netio.SSL, Addr: "127.0.0.1:0"}}
			c.Security.TLS = security.TLSFiles{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientAuth: "requested", ClientCAFile: certs.CAFile}
			c.Security.Authorizer, c.Security.SuperUsers = true, []string{"User:ANONYMOUS"}
		}},
		{"tls-client-ca", func(c *broker.Config) {
			interSSL(c, "none")
			c.Security.Authorizer, c.Security.TLS.ClientCAFile = false, ""
		}},
		{"listeners", func(c *broker.Config) {
			interSSL(c, "required", "User:CN=b1,O=ringlog-test")
			c.Listeners = []broker.Listener{{Protocol: netio.SASLSSL, Addr: "127.0.0.1:0"}, {Protocol: netio.SSL, Addr: "127.0.0.1:0"}}
		}},
		{"kafka-security-protocol", func(c *broker.Config) { c.Kafka.Protocol = "KERBEROS" }},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		cfg := brokertest.Config(dir)
		tc.change(&cfg)
		var ce *broker.ConfigError
		if err := cfg.Validate(); !errors.As(err, &ce) || ce.Setting != tc.setting {
			t.Errorf("%s: Validate: %v, want a ConfigError naming it", tc.setting, err)
		}
		if b, err := broker.New(cfg); !errors.As(err, &ce) {
			if err == nil {
				b.Close()
			}
			t.Errorf("%s: New: %v, want the ConfigError", tc.setting, err)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s: New created the data directory of a refused config", tc.setting)
		}
	}
}

// TestBrokerServesAndShutsDownClean starts every listener, uses each, and
// checks that Shutdown leaves a directory the next broker opens as clean.
func TestBrokerServesAndShutsDownClean(t *testing.T) {
	b := brokertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cl := b.Client(kgo.DefaultProduceTopic("wired"))
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("kafka")}).FirstErr(); err != nil {
		t.Fatalf("produce over Kafka: %v", err)
	}
	nc, err := client.Dial(ctx, b.NativeAddr)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := nc.Fetch(ctx, "wired", 0, 0, 1<<20)
	nc.Close()
	if err != nil || len(recs) != 1 || string(recs[0].Value) != "kafka" {
		t.Fatalf("fetch over the native protocol: %v %+v", err, recs)
	}

	get := func(path string) string {
		t.Helper()
		resp, err := http.Get("http://" + b.HTTPAddr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	if h := get("/healthz"); h != "ok\n" {
		t.Errorf("/healthz: %q", h)
	}
	m := get("/metrics")
	// Produce counted by the per-API instruments, fsyncs by the engine's
	// hook, partitions by the engine collector.
	for _, want := range []string{`ringlog_requests_total{api="Produce"} 1`, `ringlog_requests_total{api="DescribeCluster"} 0`,
		"ringlog_fsync_duration_seconds_count", `ringlog_partition_records_in_total{partition="0",topic="wired"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	get("/debug/pprof/")

	cl.Close()
	b.Stop()
	if _, err := os.Stat(filepath.Join(b.Dir, ".ringlog-clean-shutdown")); err != nil {
		t.Errorf("no clean-shutdown marker after Shutdown: %v", err)
	}
	b.Start()
	if got := b.Eng.Topic("wired"); got == nil {
		t.Fatalf("topic lost across the restart")
	}
}

// TestListenersOff: no native and no HTTP listener when their addresses
// are empty.
func TestListenersOff(t *testing.T) {
	b := brokertest.Start(t, func(c *broker.Config) { c.NativeAddr, c.HTTPAddr = "", "" })
	if b.NativeAddr != "" || b.Native != nil || b.HTTPAddr != "" {
		t.Errorf("native %q (%v), http %q; want both off", b.NativeAddr, b.Native, b.HTTPAddr)
	}
	if b.Addr == "" {
		t.Errorf("no Kafka listener")
	}
}

// TestNewUndoesOnListenerError: a listener that cannot bind fails New,
// which stops what had started and closes the engine (the directory can
// be opened again at once).
func TestNewUndoesOnListenerError(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	for _, which := range []string{"native", "http"} {
		cfg := brokertest.Config(dir)
		if which == "native" {
			cfg.NativeAddr = taken.Addr().String()
		} else {
			cfg.HTTPAddr = taken.Addr().String()
		}
		b, err := broker.New(cfg)
		if err == nil {
			b.Close()
			t.Fatalf("%s listener on a taken address: New succeeded", which)
		}
		if !strings.Contains(err.Error(), taken.Addr().String()) {
			t.Errorf("%s: error %q does not name the address", which, err)
		}
	}
	b, err := broker.New(brokertest.Config(dir))
	if err != nil {
		t.Fatalf("the data directory stayed locked after a failed New: %v", err)
	}
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

// TestExposureLimits: --native-insecure allows a native listener off
// loopback, or beside authenticating listeners without the authorizer;
// --http-insecure the HTTP listener off loopback, where /debug/pprof is
// still not served.
func TestExposureLimits(t *testing.T) {
	cfg := brokertest.Config(t.TempDir())
	cfg.Listeners = []broker.Listener{{Protocol: netio.SASLPlaintext, Addr: "127.0.0.1:0"}}
	cfg.Security.NativeInsecure = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("--native-insecure beside a SASL listener: %v", err)
	}
	b := brokertest.Start(t, func(c *broker.Config) {
		c.NativeAddr = "0.0.0.0:0"
		c.Security.NativeInsecure = true
		c.HTTPAddr = "0.0.0.0:0"
		c.Security.HTTPInsecure = true
	})
	if b.NativeAddr == "" {
		t.Fatal("no native listener with --native-insecure")
	}
	_, port, _ := net.SplitHostPort(b.HTTPAddr)
	resp, err := http.Get("http://127.0.0.1:" + port + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("pprof on an HTTP listener bound to every address: %d, want 404", resp.StatusCode)
	}
	lb := brokertest.Start(t)
	resp, err = http.Get("http://" + lb.HTTPAddr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pprof on a loopback HTTP listener: %d", resp.StatusCode)
	}
}

// TestValidateClusterSecurity: the settings cluster mode accepts.
func TestValidateClusterSecurity(t *testing.T) {
	certs := testcerts.New(t)
	bcert, bkey := certs.Broker("b1")
	for name, change := range map[string]func(*broker.Config){
		"SASL_SSL and SSL client listeners, PLAINTEXT inter-broker": func(c *broker.Config) {
			c.NativeAddr = ""
			c.Listeners = []broker.Listener{{Protocol: netio.SASLSSL, Addr: "127.0.0.1:0"}, {Protocol: netio.SSL, Addr: "127.0.0.1:0"}}
			c.Security.TLS = security.TLSFiles{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientAuth: "none"}
		},
		"authorizer with User:ANONYMOUS a super user": func(c *broker.Config) {
			c.Security.Authorizer, c.Security.SuperUsers = true, []string{"User:ANONYMOUS"}
			c.Security.NativePrincipal = "User:native"
		},
		"authorizer with the brokers' certificate principal a super user": func(c *broker.Config) {
			c.Kafka.Protocol = netio.SSL
			c.Security.TLS = security.TLSFiles{CertFile: bcert, KeyFile: bkey, ClientCAFile: certs.CAFile, ClientAuth: "required"}
			c.Security.Authorizer, c.Security.SuperUsers = true, []string{"User:admin", "User:CN=b1,O=ringlog-test"}
		},
	} {
		cfg := brokertest.Config(filepath.Join(t.TempDir(), "data"))
		cfg.Cluster = &cluster.Config{}
		change(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestAuthorizerWithoutIdentitiesWarns: --authorizer with only PLAINTEXT
// listeners and no super user makes everyone User:ANONYMOUS with nobody
// able to add ACLs: the broker says so at start.
func TestAuthorizerWithoutIdentitiesWarns(t *testing.T) {
	var logs testenv.SyncBuffer
	brokertest.Start(t, func(c *broker.Config) {
		c.Security.Authorizer = true
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	if !strings.Contains(logs.String(), "every client is User:ANONYMOUS") || !strings.Contains(logs.String(), "--super-users") {
		t.Fatalf("no warning naming the fix at start:\n%s", logs.String())
	}
	var quiet testenv.SyncBuffer
	brokertest.Start(t, func(c *broker.Config) {
		c.Security.Authorizer, c.Security.SuperUsers = true, []string{"User:admin"}
		c.Logger = slog.New(slog.NewTextHandler(&quiet, nil))
	})
	if strings.Contains(quiet.String(), "every client is User:ANONYMOUS") {
		t.Fatal("warned although a super user is named")
	}
}
