// Package broker assembles and runs one broker process: the engine, the
// Kafka listener, the optional native-protocol listener, the Prometheus
// instruments and the optional HTTP endpoint (/metrics, /healthz,
// /debug/pprof).
//
// Config holds every setting and DefaultConfig is what ships. `ringlog
// serve` maps its flags onto a Config (their defaults are DefaultConfig's
// values) and calls New; the in-process test harness
// (internal/brokertest) starts the same broker from the same defaults, so
// tests run the broker that ships.
//
// The package owns the wiring and its order: the instruments (every
// API's) exist before a listener can count in them; the engine opens
// before the listeners start; a listener that fails to start undoes what
// started before it. Shutdown drains the listeners (no new requests
// parsed, those in flight answered), stops them, stops the HTTP endpoint
// and closes the engine last (logs flushed, the data directory marked
// clean).
package broker

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringlog/ringlog/cluster"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/metadata"
	"github.com/ringlog/ringlog/metrics"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/quorum"
	"github.com/ringlog/ringlog/security"
)

// Config is every setting of one broker process.
type Config struct {
	// Engine configures the engine (data directory, shards, topic
	// defaults, group coordinator...). The broker sets its Logger and
	// ObserveSync.
	Engine engine.Config
	// Kafka configures the Kafka listener: Addr (port 0 picks a free
	// port), AdvertisedAddr, the limits and event loops, which the native
	// listener shares. The broker sets its Native, Logger and Metrics.
	Kafka netio.Config
	// Listeners are Kafka listeners besides Kafka.Addr, each with its
	// own security protocol (SSL, SASL_PLAINTEXT, SASL_SSL, PLAINTEXT).
	// They share Kafka's limits.
	Listeners []Listener
	// Security configures TLS, SASL and ACLs.
	Security SecurityConfig
	// NativeAddr is the native-protocol listener's host:port (port 0
	// picks a free port); empty: no native listener. The native
	// protocol has no TLS or SASL: an address that is not loopback is
	// refused unless Security.NativeInsecure.
	NativeAddr string
	// HTTPAddr is the listener of /metrics, /healthz and /debug/pprof;
	// empty: none.
	HTTPAddr string
	// ShutdownTimeout bounds how long Shutdown waits for the requests in
	// flight to be answered.
	ShutdownTimeout time.Duration
	// Logger receives every part's logs. Default: slog.Default().
	Logger *slog.Logger
	// Cluster, if set, runs the broker in cluster mode (package cluster):
	// a member of the metadata quorum. Nil: a single broker, without
	// Raft. The broker fills its DataDir, DefaultPartitions and Logger.
	Cluster *cluster.Config
	// Build describes the binary; it is exported as the metric
	// ringlog_build_info. An empty GoVersion is runtime.Version().
	Build BuildInfo
}

// Listener is one more Kafka listener.
type Listener struct {
	// Protocol is its security protocol.
	Protocol netio.SecurityProtocol
	// Addr is host:port to listen on (port 0 picks a free port).
	Addr string
	// AdvertisedAddr is what clients connected to it are told to
	// connect to; empty: the bound address.
	AdvertisedAddr string
}

// ParseListeners reads a comma-separated list of PROTOCOL://host:port,
// as Kafka's listeners setting ("SASL_SSL://0.0.0.0:9095,SSL://:9096").
func ParseListeners(spec string) ([]Listener, error) {
	var out []Listener
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		proto, addr, ok := strings.Cut(item, "://")
		if !ok {
			return nil, fmt.Errorf("listener %q: not PROTOCOL://host:port", item)
		}
		p, err := netio.ParseSecurityProtocol(proto)
		if err != nil {
			return nil, fmt.Errorf("listener %q: %w", item, err)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("listener %q: %w", item, err)
		}
		out = append(out, Listener{Protocol: p, Addr: addr})
	}
	return out, nil
}

// SetAdvertised sets the advertised address of listeners from spec, a
// list as ParseListeners reads it (Kafka's advertised.listeners): each
// entry names the listener of its protocol.
func SetAdvertised(listeners []Listener, spec string) error {
	adv, err := ParseListeners(spec)
	if err != nil {
		return err
	}
	for _, a := range adv {
		found := false
		for i := range listeners {
			if listeners[i].Protocol == a.Protocol {
				if listeners[i].AdvertisedAddr != "" {
					return fmt.Errorf("%s is advertised twice", a.Protocol)
				}
				listeners[i].AdvertisedAddr, found = a.Addr, true
				break
			}
		}
		if !found {
			return fmt.Errorf("%s://%s: no %s listener in --listeners", a.Protocol, a.Addr, a.Protocol)
		}
	}
	return nil
}

// SecurityConfig is TLS, SASL and ACLs. Credentials and ACLs live in the
// data directory's security.json. Single broker only for now: cluster
// mode refuses them (see Validate).
type SecurityConfig struct {
	// TLS names the certificate, key and client CAs of SSL and SASL_SSL
	// listeners.
	TLS security.TLSFiles
	// SASLMechanisms are the mechanisms SASL listeners offer; empty:
	// PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
	SASLMechanisms []string
	// Authorizer turns ACL checks on for every listener: deny unless an
	// ACL allows (super users excepted).
	Authorizer bool
	// SuperUsers are principals ("User:admin") allowed everything.
	SuperUsers []string
	// NativeInsecure accepts a native listener anyone can use: on an
	// address that is not loopback, or without Authorizer beside Kafka
	// listeners that authenticate their clients.
	NativeInsecure bool
	// NativePrincipal is who every native-protocol request acts as, for
	// the authorizer (the protocol authenticates nobody); empty:
	// User:ANONYMOUS.
	NativePrincipal string
	// HTTPInsecure allows the HTTP listener (/metrics, /healthz) on an
	// address that is not loopback; /debug/pprof is served on loopback
	// only, whatever this says.
	HTTPInsecure bool
}

// nativePrincipal is the principal of the native listener's requests.
func (s SecurityConfig) nativePrincipal() string {
	if s.NativePrincipal == "" {
		return "User:ANONYMOUS"
	}
	return s.NativePrincipal
}

// BuildInfo describes the binary a broker runs.
type BuildInfo struct {
	// Version is the release or `git describe` version ("devel" when
	// unknown).
	Version string
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
	// Revision is the VCS revision the binary was built from, if known.
	Revision string
	// Time is the revision's commit time (RFC 3339), if known.
	Time string
}

// DefaultConfig is the broker that ships: what `ringlog serve` runs
// without flags.
func DefaultConfig() Config {
	c := Config{
		Engine:          engine.DefaultConfig(),
		Kafka:           netio.DefaultConfig(),
		NativeAddr:      "127.0.0.1:9093",
		HTTPAddr:        "127.0.0.1:9094",
		ShutdownTimeout: 10 * time.Second,
	}
	c.Engine.DataDir = "./data"
	c.Kafka.Addr = "127.0.0.1:9092"
	c.Security.TLS.ClientAuth = "none"
	c.Security.NativePrincipal = "User:ANONYMOUS"
	return c
}

// ConfigError is a setting Validate refuses.
type ConfigError struct {
	// Setting is the setting's name as `ringlog serve` spells it (the
	// flag without dashes, the config file's key).
	Setting string
	// Problem says what is wrong with its value.
	Problem string
}

func (e *ConfigError) Error() string { return e.Setting + " " + e.Problem }

// Validate refuses values the broker cannot run with, before anything
// touches the data directory; its errors are *ConfigError. New calls it.
func (c Config) Validate() error {
	if c.Engine.WritebackBytes < 0 {
		return &ConfigError{"writeback-bytes", fmt.Sprintf("must be 0 (off) or a positive byte count, got %d", c.Engine.WritebackBytes)}
	}
	if c.Engine.PageCacheTailBytes < 0 {
		return &ConfigError{"page-cache-tail-bytes", fmt.Sprintf("must be 0 (off) or a positive byte count, got %d", c.Engine.PageCacheTailBytes)}
	}
	if c.Engine.DefaultPartitions < 1 {
		return &ConfigError{"default-partitions", "must be at least 1"}
	}
	if _, err := netio.ParseSecurityProtocol(c.Kafka.Protocol.String()); err != nil {
		return &ConfigError{"kafka-security-protocol", err.Error()}
	}
	if c.needsTLS() {
		if c.Security.TLS.CertFile == "" || c.Security.TLS.KeyFile == "" {
			return &ConfigError{"tls-cert", "and --tls-key are needed by SSL and SASL_SSL listeners"}
		}
		if _, err := security.NewTLSReloader(c.Security.TLS); err != nil {
			return &ConfigError{"tls-cert", err.Error()}
		}
	}
	if c.Security.Authorizer && slices.Contains(c.Security.SuperUsers, "User:ANONYMOUS") && c.Security.TLS.ClientAuth != "required" &&
		slices.Contains(c.protocols(), netio.SSL) {
		return &ConfigError{"super-users", "lists User:ANONYMOUS, and an SSL listener without --tls-client-auth required gives every client that sends no certificate that principal, so it would be a super user: require client certificates, or drop User:ANONYMOUS"}
	}
	if c.Cluster != nil {
		if err := c.validateClusterListeners(); err != nil {
			return err
		}
	}
	if err := c.validateNative(); err != nil {
		return err
	}
	if c.HTTPAddr != "" && !c.Security.HTTPInsecure && !isLoopback(c.HTTPAddr) {
		return &ConfigError{"http-addr", fmt.Sprintf("%s is not a loopback address: /metrics and /healthz have no authentication, and the metrics name every topic, group and client; bind it to 127.0.0.1 (and scrape through a proxy or tunnel), or pass --http-insecure to accept that (/debug/pprof stays loopback-only)", c.HTTPAddr)}
	}
	return nil
}

// validateNative refuses a native listener that would be a side door
// around the Kafka listeners' security. The native protocol has no TLS
// and authenticates nobody: its requests act as one principal
// (--native-principal) that the authorizer checks like any other.
func (c Config) validateNative() error {
	if c.NativeAddr == "" {
		return nil
	}
	if p := c.Security.NativePrincipal; p != "" && (strings.TrimSpace(p) != p || !strings.Contains(p, ":") || strings.HasSuffix(p, ":")) {
		return &ConfigError{"native-principal", fmt.Sprintf("%q is not a principal: want TYPE:NAME, e.g. User:native", c.Security.NativePrincipal)}
	}
	if _, _, err := net.SplitHostPort(c.NativeAddr); err == nil && !c.Security.NativeInsecure && !isLoopback(c.NativeAddr) {
		return &ConfigError{"native-addr", fmt.Sprintf("%s is not a loopback address: the native protocol has no TLS or SASL, so anyone who reaches it acts as %s (with --authorizer, what that principal's ACLs allow; without, everything); bind it to 127.0.0.1, turn it off with --native-addr '', or pass --native-insecure to accept that", c.NativeAddr, c.Security.nativePrincipal())}
	}
	if c.Security.Authorizer {
		if p := c.Security.nativePrincipal(); slices.Contains(c.Security.SuperUsers, p) {
			return &ConfigError{"native-principal", fmt.Sprintf("is %s, a super user (--super-users), so anyone who reaches --native-addr %s could do anything: give the native listener a principal of its own (--native-principal User:native) and grant it ACLs (ringlog acl add --principal User:native ...), or turn it off with --native-addr ''", p, c.NativeAddr)}
		}
		return nil
	}
	if !c.Security.NativeInsecure {
		for _, p := range c.protocols() {
			if p != netio.Plaintext && p != "" {
				return &ConfigError{"native-addr", fmt.Sprintf("%s would let anyone who reaches it read and write every topic, while the %s listener authenticates its clients: turn on --authorizer (native requests then act as --native-principal, %s, and need ACLs), turn it off with --native-addr '', or pass --native-insecure to accept that", c.NativeAddr, p, c.Security.nativePrincipal())}
			}
		}
	}
	return nil
}

// anonymousAuthorizer reports the configuration where the authorizer is on
// but nobody can be told apart: every listener is PLAINTEXT (everyone is
// User:ANONYMOUS) and no super user is named, so only ACLs already in
// the store for ANONYMOUS allow anything, and nobody can add more.
func (c Config) anonymousAuthorizer() bool {
	if !c.Security.Authorizer || len(c.Security.SuperUsers) > 0 {
		return false
	}
	for _, p := range c.protocols() {
		if p != netio.Plaintext && p != "" {
			return false
		}
	}
	return true
}

// validateClusterListeners refuses listeners cluster mode cannot
// register. Each listener is registered under its security protocol's
// name, and clients are sent to the other brokers' listener of the same
// name, so a name may appear once. --kafka-addr's listener is the
// inter-broker one, which the brokers' own connections (replica fetches,
// forwarded requests) use, in PLAINTEXT or SSL (with their certificates).
func (c Config) validateClusterListeners() error {
	inter := c.Kafka.Protocol
	if inter == "" {
		inter = netio.Plaintext
	}
	if inter == netio.SSL && c.Security.TLS.ClientCAFile == "" {
		return &ConfigError{"tls-client-ca", "is needed with an SSL inter-broker listener in cluster mode: the brokers check each other's certificates against it (the metadata quorum's connections are mutual TLS then)"}
	}
	if inter == netio.SASLPlaintext || inter == netio.SASLSSL {
		return &ConfigError{"kafka-security-protocol", string(inter) + ": in cluster mode --kafka-addr is the inter-broker listener, and brokers authenticate to each other with TLS client certificates (SSL), not SASL; use SSL (or PLAINTEXT on a private address) there and give clients SASL listeners with --listeners"}
	}
	if c.Security.Authorizer {
		if err := c.checkInterBrokerPrincipal(inter); err != nil {
			return err
		}
	}
	seen := map[netio.SecurityProtocol]bool{inter: true}
	for _, l := range c.Listeners {
		if seen[l.Protocol] {
			return &ConfigError{"listeners", fmt.Sprintf("has two %s listeners (--kafka-addr's is %s): in cluster mode a listener is named by its protocol, so each protocol may appear once", l.Protocol, inter)}
		}
		seen[l.Protocol] = true
	}
	return nil
}

// checkInterBrokerPrincipal: with the authorizer on, the other brokers
// need CLUSTER_ACTION (replica fetches, registrations, forwarded admin
// requests) as the principal they have on the inter-broker listener, so
// that principal must be a super user.
func (c Config) checkInterBrokerPrincipal(inter netio.SecurityProtocol) error {
	if inter == netio.Plaintext {
		if !slices.Contains(c.Security.SuperUsers, "User:ANONYMOUS") {
			return &ConfigError{"authorizer", "in cluster mode needs the brokers' principal on the inter-broker listener (--kafka-addr) to be a super user: on PLAINTEXT that is User:ANONYMOUS, so anyone who reaches that listener could do anything. Use --kafka-security-protocol SSL with --tls-client-auth required and the brokers' certificate principals in --super-users, or, if --kafka-addr is on a private network, add User:ANONYMOUS to --super-users"}
		}
		return nil
	}
	if c.Security.TLS.ClientAuth != "required" {
		return &ConfigError{"tls-client-auth", fmt.Sprintf("is %q: with --authorizer in cluster mode the brokers authenticate to each other's SSL inter-broker listener with their certificates, so set it to required", c.Security.TLS.ClientAuth)}
	}
	p, err := c.Security.TLS.Principal()
	if err != nil {
		return &ConfigError{"tls-cert", err.Error()}
	}
	if !slices.Contains(c.Security.SuperUsers, p) {
		return &ConfigError{"super-users", fmt.Sprintf("lacks %s, the principal this broker's certificate gives it on the other brokers: with --authorizer in cluster mode every broker's principal must be a super user (separate principals with ';')", p)}
	}
	return nil
}

// protocols are the security protocols of every Kafka listener.
func (c Config) protocols() []netio.SecurityProtocol {
	ps := []netio.SecurityProtocol{c.Kafka.Protocol}
	for _, l := range c.Listeners {
		ps = append(ps, l.Protocol)
	}
	return ps
}

func (c Config) needsTLS() bool {
	for _, p := range c.protocols() {
		if p == netio.SSL || p == netio.SASLSSL {
			return true
		}
	}
	return false
}

// needsStore: SASL or ACLs need the credentials and ACLs file.
func (c Config) needsStore() bool {
	if c.Security.Authorizer {
		return true
	}
	for _, p := range c.protocols() {
		if p == netio.SASLPlaintext || p == netio.SASLSSL {
			return true
		}
	}
	return false
}

// isLoopback reports whether addr's host is a loopback name or address
// (an empty host or 0.0.0.0 listens everywhere: not loopback).
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Broker is one running broker: an engine with its listeners.
type Broker struct {
	cfg     Config
	logger  *slog.Logger
	metrics *metrics.Metrics
	eng     *engine.Engine
	cluster *cluster.Cluster // nil: single node
	kafka   *netio.Server
	extra   []*netio.Server       // Config.Listeners, in order
	native  *netio.Server         // nil: off
	tls     *security.TLSReloader // nil: no TLS listener
	store   *security.Store       // nil: no SASL and no ACLs
	http    *http.Server          // nil: off
	httpLn  net.Listener

	closeOnce sync.Once
	closeErr  error
}

// New validates cfg, opens the engine and starts the listeners; the
// broker serves when it returns. On an error, whatever had started is
// stopped again and the engine closed.
func New(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Broker{cfg: cfg, logger: cfg.Logger, metrics: metrics.New(netio.APIs()...)}
	if cfg.anonymousAuthorizer() {
		cfg.Logger.Warn("--authorizer is on, but every listener is PLAINTEXT and --super-users names nobody: every client is User:ANONYMOUS, " +
			"so only ACLs already stored for User:ANONYMOUS allow anything and nobody may add ACLs; add a SASL or SSL listener (--listeners) " +
			"and a super user (--super-users User:admin) to tell clients apart")
	}
	bi := cfg.Build
	if bi.Version == "" {
		bi.Version = "devel"
	}
	if bi.GoVersion == "" {
		bi.GoVersion = runtime.Version()
	}
	b.metrics.SetBuildInfo(bi.Version, bi.GoVersion, bi.Revision)
	// The listeners' addresses are checked before the data directory is
	// touched: a busy port or a bad address fails in milliseconds rather
	// than after a recovery, and leaves no fresh data directory behind.
	// The HTTP listener is bound for good here; the Kafka and native ones
	// (bound by the network library when they start) are bound and
	// released, which catches every conflict but one that starts in
	// between.
	if cfg.needsTLS() {
		tr, err := security.NewTLSReloader(cfg.Security.TLS)
		if err != nil {
			return nil, &ConfigError{"tls-cert", err.Error()}
		}
		b.tls = tr
	}
	httpLn, err := checkListeners(cfg)
	if err != nil {
		return nil, err
	}
	ecfg := cfg.Engine
	ecfg.Logger = cfg.Logger
	ecfg.Replicated = cfg.Cluster != nil
	ecfg.ObserveSync = func(d time.Duration) { b.metrics.SyncSeconds.Observe(d.Seconds()) }
	eng, err := engine.Open(ecfg)
	if err != nil {
		if httpLn != nil {
			httpLn.Close()
		}
		return nil, err
	}
	b.eng = eng
	b.metrics.RegisterEngine(eng)

	// closeEngine undoes what New started before the listeners.
	closeEngine := func() {
		if httpLn != nil {
			httpLn.Close()
		}
		if b.cluster != nil {
			b.cluster.Close()
		}
		eng.Close()
	}
	scfg := cfg.Kafka
	scfg.Native, scfg.Logger, scfg.Metrics = false, cfg.Logger, b.metrics
	if cfg.Cluster != nil {
		ccfg := *cfg.Cluster
		ccfg.DataDir, ccfg.DefaultPartitions, ccfg.Logger = cfg.Engine.DataDir, eng.DefaultPartitions(), cfg.Logger
		if cfg.Kafka.Protocol == netio.SSL {
			// The brokers' Kafka connections to each other and the
			// quorum's are TLS with this broker's certificate; with
			// the authorizer, a quorum peer's principal must be a
			// super user (Validate made sure this broker's is).
			ccfg.KafkaTLS = b.tls.ClientConfig
			ccfg.RaftTLS = &quorum.TLS{Server: b.tls.PeerServerConfig, Client: b.tls.ClientConfig}
			if cfg.Security.Authorizer {
				supers := cfg.Security.SuperUsers
				ccfg.RaftTLS.Peer = func(cert *x509.Certificate) error {
					if p := security.CertPrincipal(cert); !slices.Contains(supers, p) {
						return fmt.Errorf("principal %s is not a super user (--super-users)", p)
					}
					return nil
				}
			}
		}
		cl, err := cluster.Open(ccfg, eng)
		if err != nil {
			closeEngine()
			return nil, err
		}
		b.cluster = cl
		scfg.Cluster, scfg.Peers = cl, cl.Peers()
		b.metrics.RegisterController(cl.Node().IsLeader)
		// Credentials and ACLs are in the metadata image: their APIs are
		// served on every broker, the changes committed by the
		// controller.
		scfg.Security.Source, scfg.Security.Writer = cl.Security(), cl.Security()
	} else if cfg.needsStore() {
		path := filepath.Join(cfg.Engine.DataDir, "security.json")
		st, err := security.OpenStore(path)
		if err != nil {
			closeEngine()
			return nil, err
		}
		b.store = st
		scfg.Security.Source, scfg.Security.Writer = st, st
	}
	scfg.Security.Mechanisms = cfg.Security.SASLMechanisms
	if cfg.Security.Authorizer {
		scfg.Security.Authorizer = security.NewAuthorizer(scfg.Security.Source, cfg.Security.SuperUsers)
	}
	if b.tls != nil {
		scfg.TLS = b.tls.Config()
	}
	kafkaCfg := scfg
	if kafkaCfg.Protocol == netio.SASLSSL {
		kafkaCfg.TLS = b.tls.SASLConfig()
	}
	b.kafka = netio.NewServer(eng, kafkaCfg)
	if err := b.kafka.Start(); err != nil {
		closeEngine()
		return nil, err
	}
	stopListeners := func() {
		for _, s := range b.servers() {
			s.Stop(context.Background())
		}
	}
	for _, l := range cfg.Listeners {
		lcfg := scfg
		lcfg.Protocol, lcfg.Addr, lcfg.AdvertisedAddr = l.Protocol, l.Addr, l.AdvertisedAddr
		if l.Protocol == netio.SASLSSL {
			lcfg.TLS = b.tls.SASLConfig()
		}
		srv := netio.NewServer(eng, lcfg)
		if err := srv.Start(); err != nil {
			stopListeners()
			closeEngine()
			return nil, err
		}
		b.extra = append(b.extra, srv)
	}
	if cfg.NativeAddr != "" {
		ncfg := scfg
		ncfg.Native, ncfg.Addr, ncfg.AdvertisedAddr = true, cfg.NativeAddr, ""
		// The same authorizer and ACLs as the Kafka listeners, for the
		// one principal the native listener's requests act as.
		ncfg.Protocol, ncfg.TLS, ncfg.Security = netio.Plaintext, nil, netio.Security{Authorizer: scfg.Security.Authorizer}
		ncfg.NativePrincipal = cfg.Security.nativePrincipal()
		native := netio.NewServer(eng, ncfg)
		if err := native.Start(); err != nil {
			stopListeners()
			closeEngine()
			return nil, err
		}
		b.native = native
	}
	if httpLn != nil {
		b.httpLn = httpLn
		b.http = &http.Server{Handler: httpMux(b.metrics, eng, isLoopback(cfg.HTTPAddr)), ReadHeaderTimeout: 10 * time.Second}
		go b.http.Serve(httpLn)
	}
	if b.cluster != nil {
		// The first listener, --kafka-addr's, is the inter-broker one.
		var ls []metadata.Listener
		for _, s := range append([]*netio.Server{b.kafka}, b.extra...) {
			host, port := s.Advertised()
			ls = append(ls, metadata.Listener{Name: s.Protocol().String(), Addr: net.JoinHostPort(host, strconv.Itoa(int(port)))})
		}
		b.cluster.Start(ls)
	}
	return b, nil
}

// Cluster is the broker's cluster mode; nil for a single broker.
func (b *Broker) Cluster() *cluster.Cluster { return b.cluster }

// Failed is closed when the broker cannot go on by itself (cluster mode
// stopped: see Cluster().Err()); nil for a single broker, which has no
// such failure.
func (b *Broker) Failed() <-chan struct{} {
	if b.cluster == nil {
		return nil
	}
	return b.cluster.Done()
}

// ListenError is a listener address that cannot be used: it does not
// parse or resolve, or its port is taken.
type ListenError struct {
	// Setting is the listener's setting as `ringlog serve` spells it
	// (kafka-addr, native-addr, http-addr).
	Setting string
	// Addr is the address as configured.
	Addr string
	// Err is what went wrong.
	Err error
}

func (e *ListenError) Error() string {
	msg := fmt.Sprintf("--%s %s: %v", e.Setting, e.Addr, e.Err)
	if errors.Is(e.Err, syscall.EADDRINUSE) {
		msg += " (another process listens on that port: stop it, or pick another port; port 0 picks a free one)"
	}
	return msg
}

func (e *ListenError) Unwrap() error { return e.Err }

// checkListeners resolves every configured listener address and binds
// it, before anything touches the data directory. The HTTP listener is
// returned bound (nil when off); the Kafka and native probes are closed
// again, and a fixed port shared by two listeners is refused.
func checkListeners(cfg Config) (httpLn net.Listener, err error) {
	type want struct{ setting, addr string }
	wants := []want{{"kafka-addr", cfg.Kafka.Addr}}
	for _, l := range cfg.Listeners {
		wants = append(wants, want{"listeners", l.Addr})
	}
	if cfg.NativeAddr != "" {
		wants = append(wants, want{"native-addr", cfg.NativeAddr})
	}
	if cfg.HTTPAddr != "" {
		wants = append(wants, want{"http-addr", cfg.HTTPAddr})
	}
	var probes []net.Listener
	defer func() {
		for _, ln := range probes {
			ln.Close()
		}
	}()
	for _, w := range wants {
		if _, _, err := net.SplitHostPort(w.addr); err != nil {
			return nil, &ListenError{w.setting, w.addr, err}
		}
		ta, err := net.ResolveTCPAddr("tcp", w.addr)
		if err != nil {
			return nil, &ListenError{w.setting, w.addr, err}
		}
		ln, err := net.ListenTCP("tcp", ta)
		if err != nil {
			var se *os.SyscallError
			if errors.As(err, &se) {
				err = se.Err
			}
			return nil, &ListenError{w.setting, w.addr, err}
		}
		if w.setting == "http-addr" {
			httpLn = ln
			continue
		}
		probes = append(probes, ln)
	}
	return httpLn, nil
}

// KafkaAddr is the Kafka listener's bound address.
func (b *Broker) KafkaAddr() string { return b.kafka.Addr().String() }

// NativeAddr is the native listener's bound address; empty when off.
func (b *Broker) NativeAddr() string {
	if b.native == nil {
		return ""
	}
	return b.native.Addr().String()
}

// HTTPAddr is the HTTP listener's bound address; empty when off.
func (b *Broker) HTTPAddr() string {
	if b.httpLn == nil {
		return ""
	}
	return b.httpLn.Addr().String()
}

// Engine is the broker's engine.
func (b *Broker) Engine() *engine.Engine { return b.eng }

// Metrics are the broker's instruments.
func (b *Broker) Metrics() *metrics.Metrics { return b.metrics }

// Kafka is the Kafka listener.
func (b *Broker) Kafka() *netio.Server { return b.kafka }

// Native is the native listener; nil when off.
func (b *Broker) Native() *netio.Server { return b.native }

// Listeners are the listeners of Config.Listeners, in order.
func (b *Broker) Listeners() []*netio.Server { return b.extra }

// ReloadTLS reads the TLS certificate, key and client CAs again (SIGHUP):
// new handshakes use them; a failure keeps the previous ones. Without a
// TLS listener it does nothing.
func (b *Broker) ReloadTLS() error {
	if b.tls == nil {
		return nil
	}
	if err := b.tls.Reload(); err != nil {
		return err
	}
	b.logger.Info("TLS certificate reloaded", "cert", b.cfg.Security.TLS.CertFile, "not_after", b.tls.NotAfter())
	return nil
}

// Security is the credential and ACL store; nil without SASL and ACLs.
func (b *Broker) Security() *security.Store { return b.store }

// servers are the listeners, Kafka first, then Config.Listeners, then
// native; those not started are left out.
func (b *Broker) servers() []*netio.Server {
	var out []*netio.Server
	if b.kafka != nil {
		out = append(out, b.kafka)
	}
	out = append(out, b.extra...)
	if b.native != nil {
		out = append(out, b.native)
	}
	return out
}

// Drain stops parsing new requests on every listener and waits until
// the requests already parsed are answered (or ctx ends).
func (b *Broker) Drain(ctx context.Context) error {
	var errs []error
	for _, s := range b.servers() {
		errs = append(errs, s.Drain(ctx))
	}
	return errors.Join(errs...)
}

// Close stops the listeners (closing every connection) and the HTTP
// endpoint, then closes the engine: logs flushed and synced, the data
// directory marked clean. Requests still in flight are cut off; Drain
// first, or call Shutdown. Only the first call does anything; later ones
// return its result.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for _, s := range b.servers() {
			wg.Add(1)
			go func() { defer wg.Done(); s.Stop(ctx) }()
		}
		wg.Wait()
		if b.http != nil {
			b.http.Shutdown(ctx)
		}
		if b.cluster != nil {
			if err := b.cluster.Close(); err != nil {
				b.logger.Warn("stopping the metadata quorum node", "err", err)
			}
		}
		if err := b.eng.Close(); err != nil {
			b.closeErr = fmt.Errorf("close engine: %w", err)
		}
	})
	return b.closeErr
}

// Shutdown is the clean stop: Drain for at most Config.ShutdownTimeout
// (a drain cut short is logged, not returned), then Close.
func (b *Broker) Shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ShutdownTimeout)
	defer cancel()
	if err := b.Drain(ctx); err != nil {
		b.logger.Warn("shutdown: not every request was answered", "err", err)
	}
	return b.Close()
}

// httpMux serves /metrics, /healthz (503 while a partition is offline)
// and, when the HTTP listener is loopback only, /debug/pprof (profiles
// and traces reveal memory contents and cost CPU: not for the network).
func httpMux(m *metrics.Metrics, eng *engine.Engine, pprofOn bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		offline := 0
		for _, t := range eng.Topics() {
			for _, p := range t.Partitions() {
				if p.Offline() != nil {
					offline++
				}
			}
		}
		if offline > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "degraded: %d partitions offline\n", offline)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if !pprofOn {
		return mux
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
