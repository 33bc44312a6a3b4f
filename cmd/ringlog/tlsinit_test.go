package main

// Tests of `ringlog tls init` (the files, their modes and what the
// certificates say), of a broker and clients using them (franz-go, the
// ringlog tools, kcat), and of the TLS hints of the tools.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/security"
)

// tlsInit runs `ringlog tls init --out DIR args...` and checks it worked.
func tlsInit(t *testing.T, dir string, args ...string) toolResult {
	t.Helper()
	r := tool(t, "", nil, append([]string{"tls", "init", "--out", dir}, args...)...)
	if r.code != 0 {
		t.Fatalf("ringlog tls init --out %s %s: exit %d\n%s%s", dir, strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

// TestTLSInit checks the files: modes, keys, what each certificate is for
// and who signed it; that existing files are kept unless --force; and the
// usage errors.
func TestTLSInit(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tls")
	r := tlsInit(t, dir, "--hosts", "broker1.example.com,10.0.0.7, [fd00::1]", "--hosts", "Broker2.Example.com.", "--client", "admin", "--client", "billing", "--days", "30")
	names := []string{"ca.pem", "ca-key.pem", "broker.pem", "broker-key.pem", "admin.pem", "admin-key.pem", "billing.pem", "billing-key.pem"}
	for _, n := range names {
		p := filepath.Join(dir, n)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o644)
		if strings.HasSuffix(n, "-key.pem") {
			want = 0o600
			raw, _ := os.ReadFile(p)
			if block, _ := pem.Decode(raw); block == nil || block.Type != "PRIVATE KEY" {
				t.Errorf("%s: not a PKCS#8 PEM key", n)
			} else if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
				t.Errorf("%s: %v", n, err)
			}
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", n, fi.Mode().Perm(), want)
		}
		wantContains(t, "tls init's report", r.stdout, "wrote "+p)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != len(names) {
		t.Errorf("%s holds %d files, want %d", dir, len(entries), len(names))
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v, want 0700", dir, fi.Mode().Perm())
	}
	wantContains(t, "tls init's report", r.stdout,
		"ringlog serve --listeners SSL://0.0.0.0:9096 --advertised-listeners SSL://broker1.example.com:9096 --tls-cert "+filepath.Join(dir, "broker.pem"),
		"--tls-key "+filepath.Join(dir, "broker-key.pem"), "--tls-client-ca "+filepath.Join(dir, "ca.pem"), "--tls-client-auth required",
		"--security-protocol SSL --tls-ca "+filepath.Join(dir, "ca.pem")+" --tls-cert "+filepath.Join(dir, "admin.pem")+" --tls-key "+filepath.Join(dir, "admin-key.pem"),
		"ssl.certificate.location=", "User:CN=admin", "User:CN=broker")

	ca := readCert(t, filepath.Join(dir, "ca.pem"))
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 || ca.NotAfter.Before(time.Now().Add(9*365*24*time.Hour)) {
		t.Errorf("CA: IsCA %v, key usage %v, until %v", ca.IsCA, ca.KeyUsage, ca.NotAfter)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	brk := readCert(t, filepath.Join(dir, "broker.pem"))
	if got, want := brk.DNSNames, []string{"localhost", "broker1.example.com", "broker2.example.com"}; !slices.Equal(got, want) {
		t.Errorf("broker DNS names %q, want %q", got, want)
	}
	if got, want := ipStrings(brk.IPAddresses), []string{"127.0.0.1", "::1", "10.0.0.7", "fd00::1"}; !slices.Equal(got, want) {
		t.Errorf("broker IP addresses %q, want %q", got, want)
	}
	if d := time.Until(brk.NotAfter); d < 29*24*time.Hour || d > 31*24*time.Hour {
		t.Errorf("broker certificate valid until %v, want in 30 days", brk.NotAfter)
	}
	// The broker's certificate serves and, in cluster mode, connects.
	for _, host := range []string{"localhost", "127.0.0.1", "::1", "broker2.example.com", "10.0.0.7"} {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}
			if usage == x509.ExtKeyUsageServerAuth {
				opts.DNSName = host
			}
			if _, err := brk.Verify(opts); err != nil {
				t.Errorf("broker certificate for %s, usage %v: %v", host, usage, err)
			}
		}
	}
	if p, err := (security.TLSFiles{CertFile: filepath.Join(dir, "broker.pem"), KeyFile: filepath.Join(dir, "broker-key.pem")}).Principal(); err != nil || p != "User:CN=broker" {
		t.Errorf("the broker's principal: %q, %v; want User:CN=broker", p, err)
	}
	for _, c := range []string{"admin", "billing"} {
		cert := readCert(t, filepath.Join(dir, c+".pem"))
		if p := security.CertPrincipal(cert); p != "User:CN="+c {
			t.Errorf("%s's principal %q, want User:CN=%s", c, p, c)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s's certificate as a client's: %v", c, err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Errorf("%s's certificate is good for a server too", c)
		}
		if _, err := tls.LoadX509KeyPair(filepath.Join(dir, c+".pem"), filepath.Join(dir, c+"-key.pem")); err != nil {
			t.Errorf("%s's pair: %v", c, err)
		}
	}

	// Existing files stay unless --force, which makes a new set.
	before, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	r = tool(t, "", nil, "tls", "init", "--out", dir)
	if r.code != 1 {
		t.Fatalf("tls init over existing files: exit %d, want 1", r.code)
	}
	wantContains(t, "tls init over existing files", r.stderr, "already exist", filepath.Join(dir, "ca.pem"), "--force")
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(after) != string(before) {
		t.Error("tls init without --force changed ca.pem")
	}
	os.Chmod(filepath.Join(dir, "admin-key.pem"), 0o644)
	tlsInit(t, dir, "--force")
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(after) == string(before) {
		t.Error("tls init --force kept the old ca.pem")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "admin-key.pem")); fi.Mode().Perm() != 0o600 {
		t.Errorf("admin-key.pem after --force: mode %v, want 0600", fi.Mode().Perm())
	}
	if readCert(t, filepath.Join(dir, "admin.pem")).Issuer.String() != readCert(t, filepath.Join(dir, "ca.pem")).Subject.String() {
		t.Error("after --force, admin.pem is not signed by the new CA")
	}
	// The default set: localhost only, one client named admin.
	def := filepath.Join(t.TempDir(), "def")
	r = tlsInit(t, def)
	wantContains(t, "tls init's default report", r.stdout, "--listeners SSL://127.0.0.1:9096 ", "--brokers localhost:9096", filepath.Join(def, "admin.pem"))
	if entries, _ := os.ReadDir(def); len(entries) != 6 {
		t.Errorf("the default set has %d files, want 6", len(entries))
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tls", "init"}, "give --out"},
		{[]string{"tls", "init", "--out", def + "x", "--days", "0"}, "--days"},
		{[]string{"tls", "init", "--out", def + "x", "--client", "../evil"}, `--client "../evil"`},
		{[]string{"tls", "init", "--out", def + "x", "--client", "ca"}, "the CA's files"},
		{[]string{"tls", "init", "--out", def + "x", "--client", "broker"}, "given twice"},
		{[]string{"tls", "init", "--out", def + "x", "--hosts", "not a host"}, "neither an IP address nor a host name"},
		{[]string{"tls", "init", "--out", def + "x", "extra"}, "takes no arguments"},
	} {
		r := tool(t, "", nil, tc.args...)
		if r.code != 2 {
			t.Errorf("ringlog %s: exit %d, want 2\n%s", strings.Join(tc.args, " "), r.code, r.stderr)
		}
		wantContains(t, "ringlog "+strings.Join(tc.args, " "), r.stderr, tc.want)
	}
	if _, err := os.Stat(def + "x"); err == nil {
		t.Errorf("a refused tls init made %s", def+"x")
	}
	r = tool(t, "", nil, "tls", "init", "--help")
	if r.code != 0 {
		t.Errorf("tls init --help: exit %d", r.code)
	}
	wantContains(t, "tls init --help", r.stdout, "Usage: ringlog tls init", "Examples:", "ringlog tls init --out", "-hosts", "-client", "-days", "-force")
}

// tlsBroker is a broker whose SSL listener uses a tls init set and
// requires client certificates, with the authorizer on and no super
// user: only what ACLs grant is allowed.
type tlsBroker struct {
	*brokertest.Broker
	dir string // the tls init set
	ssl string // the SSL listener
}

func startTLSBroker(t *testing.T) *tlsBroker {
	t.Helper()
	dir := t.TempDir()
	tlsInit(t, dir, "--client", "admin,bob")
	b := brokertest.Start(t, func(c *broker.Config) {
		c.Listeners = []broker.Listener{{Protocol: netio.SSL, Addr: "127.0.0.1:0"}}
		c.Security.TLS = security.TLSFiles{CertFile: filepath.Join(dir, "broker.pem"), KeyFile: filepath.Join(dir, "broker-key.pem"),
			ClientCAFile: filepath.Join(dir, "ca.pem"), ClientAuth: "required"}
		c.Security.Authorizer = true
	})
	// User:CN=admin may do anything to the topic "secure", nobody else
	// anything at all.
	if errs := b.B.Security().CreateACLs([]security.ACL{{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "secure",
		PatternType: kmsg.ACLResourcePatternTypeLiteral, Principal: "User:CN=admin", Host: "*",
		Operation: kmsg.ACLOperationAll, Permission: kmsg.ACLPermissionTypeAllow}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	return &tlsBroker{Broker: b, dir: dir, ssl: b.B.Listeners()[0].Addr().String()}
}

// client is a franz-go client of the SSL listener with the certificate
// of name (from the set).
func (b *tlsBroker) client(t *testing.T, name string) *kgo.Client {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(b.dir, name+".pem"), filepath.Join(b.dir, name+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(b.dir, "ca.pem"))
	roots.AppendCertsFromPEM(caPEM)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.ssl), kgo.DialTLSConfig(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}),
		kgo.RecordDeliveryTimeout(10*time.Second), kgo.RequestRetries(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// sslArgs are the tools' flags for the SSL listener as name.
func (b *tlsBroker) sslArgs(name string) []string {
	return []string{"--brokers", b.ssl, "--security-protocol", "SSL", "--tls-ca", filepath.Join(b.dir, "ca.pem"),
		"--tls-cert", filepath.Join(b.dir, name+".pem"), "--tls-key", filepath.Join(b.dir, name+"-key.pem")}
}

// TestTLSInitBroker runs a broker on a tls init set: a client with the
// admin certificate is User:CN=admin (the one principal an ACL allows),
// one with bob's is not; the ringlog tools and kcat connect with the
// files as tls init printed them.
func TestTLSInitBroker(t *testing.T) {
	t.Parallel()
	b := startTLSBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	admin := b.client(t, "admin")
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "secure"); err != nil {
		t.Fatalf("create topic as User:CN=admin: %v", err)
	}
	if err := admin.ProduceSync(ctx, &kgo.Record{Topic: "secure", Value: []byte("from-admin")}).FirstErr(); err != nil {
		t.Fatalf("produce as User:CN=admin: %v", err)
	}
	bob := b.client(t, "bob")
	if err := bob.ProduceSync(ctx, &kgo.Record{Topic: "secure", Value: []byte("from-bob")}).FirstErr(); !isDenied(err) {
		t.Fatalf("produce as User:CN=bob: %v, want an authorization failure", err)
	}

	// The tools, with the flags tls init printed.
	r := tool(t, "", nil, append([]string{"topic", "describe", "secure"}, b.sslArgs("admin")...)...)
	if r.code != 0 {
		t.Fatalf("topic describe as admin: exit %d\n%s", r.code, r.stderr)
	}
	wantContains(t, "topic describe as admin", r.stdout, "Topic: secure")
	r = tool(t, "from-tool\n", nil, append([]string{"produce", "secure"}, b.sslArgs("admin")...)...)
	if r.code != 0 {
		t.Fatalf("produce as admin: exit %d\n%s", r.code, r.stderr)
	}
	// bob is told which principal he is and what he lacks.
	r = tool(t, "", nil, append([]string{"topic", "describe", "secure"}, b.sslArgs("bob")...)...)
	if r.code != 1 {
		t.Fatalf("topic describe as bob: exit %d\n%s", r.code, r.stderr)
	}
	wantContains(t, "topic describe as bob", r.stderr, `topic describe secure: TOPIC_AUTHORIZATION_FAILED: needs DESCRIBE on topic "secure" (ask an admin: ringlog acl add --principal User:CN=bob --operation describe --topic secure)`)

	// librdkafka reads the files too (PKCS#8 P-256 key, SANs for
	// 127.0.0.1 with its hostname verification on).
	testenv.KcatPath(t)
	kc := []string{"-b", b.ssl, "-X", "security.protocol=ssl", "-X", "ssl.ca.location=" + filepath.Join(b.dir, "ca.pem"),
		"-X", "ssl.certificate.location=" + filepath.Join(b.dir, "admin.pem"), "-X", "ssl.key.location=" + filepath.Join(b.dir, "admin-key.pem"),
		"-X", "ssl.endpoint.identification.algorithm=https"}
	testenv.RunKcat(t, "from-kcat\n", append(kc, "-P", "-t", "secure")...)
	out := testenv.RunKcat(t, "", append(kc, "-C", "-t", "secure", "-o", "beginning", "-e", "-q")...)
	if got := strings.Fields(out); !slices.Equal(got, []string{"from-admin", "from-tool", "from-kcat"}) {
		t.Errorf("kcat read %q, want from-admin, from-tool, from-kcat", got)
	}
	bobKc := slices.Clone(kc)
	bobKc[7], bobKc[9] = "ssl.certificate.location="+filepath.Join(b.dir, "bob.pem"), "ssl.key.location="+filepath.Join(b.dir, "bob-key.pem")
	if out, err := testenv.KcatOutput(t, "", append(bobKc, "-C", "-t", "secure", "-o", "beginning", "-e", "-q")...); err == nil || !strings.Contains(out, "authoriz") {
		t.Errorf("kcat as bob: %v\n%s\nwant an authorization failure", err, out)
	}
}

// TestToolsTLSHints: a failed TLS handshake ends the command at once,
// naming the flag or certificate to fix.
func TestToolsTLSHints(t *testing.T) {
	t.Parallel()
	b := startTLSBroker(t)
	other := t.TempDir()
	tlsInit(t, other)

	run := func(args ...string) toolResult {
		t.Helper()
		r := tool(t, "", nil, append([]string{"topic", "list"}, args...)...)
		if r.code != 1 {
			t.Fatalf("topic list %s: exit %d, want 1\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		if r.took > 10*time.Second {
			t.Errorf("topic list %s: took %v (the --timeout is 30s: a TLS failure should end it at once)", strings.Join(args, " "), r.took)
		}
		return r
	}
	ca, otherCA := filepath.Join(b.dir, "ca.pem"), filepath.Join(other, "ca.pem")
	cert, key := filepath.Join(b.dir, "admin.pem"), filepath.Join(b.dir, "admin-key.pem")
	base := []string{"--brokers", b.ssl, "--security-protocol", "SSL"}

	r := run(append(base, "--tls-cert", cert, "--tls-key", key)...)
	wantContains(t, "without --tls-ca", r.stderr, "TLS with the broker at "+b.ssl+" failed", "unknown authority",
		"signed by an authority this system does not trust: give its CA with --tls-ca FILE")
	r = run(append(base, "--tls-ca", otherCA, "--tls-cert", cert, "--tls-key", key)...)
	wantContains(t, "with another CA", r.stderr, "is not signed by a CA in --tls-ca "+otherCA, "ringlog CA ")
	r = run(append(base, "--tls-ca", ca, "--tls-cert", cert, "--tls-key", key, "--tls-server-name", "kafka.example.com")...)
	wantContains(t, "with another server name", r.stderr, "the broker's certificate is for localhost, 127.0.0.1, ::1, not \"kafka.example.com\" (--tls-server-name)",
		"ringlog tls init --hosts kafka.example.com")
	// The address used, when the certificate does not name it.
	brk := readCert(t, filepath.Join(b.dir, "broker.pem"))
	if got := hostnameFix(x509.HostnameError{Certificate: brk, Host: "10.1.2.3"}, ""); !strings.Contains(got, `is for localhost, 127.0.0.1, ::1, not "10.1.2.3", the host of the address used`) ||
		!strings.Contains(got, "ringlog tls init --hosts 10.1.2.3") {
		t.Errorf("hostnameFix without --tls-server-name: %s", got)
	}
	r = run(append(base, "--tls-ca", ca)...)
	wantContains(t, "without a client certificate", r.stderr, "requires a client certificate", "give --tls-cert and --tls-key")
	r = run(append(base, "--tls-ca", ca, "--tls-cert", filepath.Join(other, "admin.pem"), "--tls-key", filepath.Join(other, "admin-key.pem"))...)
	wantContains(t, "with a certificate of another CA", r.stderr, "--tls-cert "+filepath.Join(other, "admin.pem")+" is not signed by one", "--tls-client-ca")

	// The hints come from the errors crypto/tls gives; a plain dial error
	// gets none.
	var sec clientSecurity
	if sec.tlsHint("h:1", kerr.UnknownServerError) != nil || sec.tlsHint("h:1", context.DeadlineExceeded) != nil {
		t.Error("tlsHint explains errors that are not TLS failures")
	}
}
