package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// TLSFiles names the PEM files of a TLS listener.
type TLSFiles struct {
	// CertFile and KeyFile are the broker's certificate (chain) and key.
	CertFile, KeyFile string
	// ClientCAFile, if set, holds the CAs client certificates are
	// checked against (mTLS).
	ClientCAFile string
	// ClientAuth is "none" (the default), "requested" (a certificate is
	// checked if sent) or "required", as Kafka's ssl.client.auth.
	ClientAuth string
}

// TLSReloader serves a tls.Config read from TLSFiles and reads them
// again on Reload (SIGHUP): new handshakes use the new certificate and
// CAs, connections already open keep theirs. A reload that fails keeps
// the previous files' configuration.
type TLSReloader struct {
	files TLSFiles
	cur   atomic.Pointer[tls.Config]
	sasl  atomic.Pointer[tls.Config] // cur without client certificates
	peer  atomic.Pointer[tls.Config] // cur requiring client certificates
}

// NewTLSReloader reads the files once; an error names the file and what
// is wrong with it.
func NewTLSReloader(files TLSFiles) (*TLSReloader, error) {
	r := &TLSReloader{files: files}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the files again and, if they make a valid configuration,
// uses it for new handshakes.
func (r *TLSReloader) Reload() error {
	cfg, err := r.files.load()
	if err != nil {
		return err
	}
	sasl := cfg.Clone()
	sasl.ClientAuth = tls.NoClientCert
	r.sasl.Store(sasl)
	peer := cfg.Clone()
	peer.ClientAuth = tls.RequireAndVerifyClientCert
	r.peer.Store(peer)
	r.cur.Store(cfg)
	return nil
}

// Config is the listener's tls.Config: each handshake takes the
// configuration current when it starts.
func (r *TLSReloader) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.cur.Load(), nil
		},
	}
}

// CertPrincipal is the principal of a client certificate (mTLS):
// User:<its subject>, as Kafka's default principal builder names it
// ("User:CN=broker-1,O=example").
func CertPrincipal(cert *x509.Certificate) string { return "User:" + cert.Subject.String() }

// Principal is the principal this broker's own certificate gives it when
// it connects to another broker with it.
func (f TLSFiles) Principal() (string, error) {
	cfg, err := f.load()
	if err != nil {
		return "", err
	}
	leaf := cfg.Certificates[0].Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cfg.Certificates[0].Certificate[0]); err != nil {
			return "", fmt.Errorf("TLS certificate %s: %w", f.CertFile, err)
		}
	}
	return CertPrincipal(leaf), nil
}

// ClientConfig is a tls.Config for one connection to another broker's
// TLS listener, from the current files: it presents this broker's
// certificate (so the certificate needs the clientAuth key usage as well
// as serverAuth) and trusts the peer's if --tls-client-ca signed it, or
// the system's roots when no client CAs are set.
func (r *TLSReloader) ClientConfig() *tls.Config {
	cur := r.cur.Load()
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: cur.Certificates, RootCAs: cur.ClientCAs}
}

// SASLConfig is a SASL_SSL listener's tls.Config: Config without client
// certificates, since SASL authenticates there (as in Kafka, whose
// ssl.client.auth applies to SSL listeners only).
func (r *TLSReloader) SASLConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.sasl.Load(), nil
		},
	}
}

// PeerServerConfig is the configuration of a connection another broker
// opened (the metadata quorum's): Config requiring a client certificate
// that --tls-client-ca verifies, whatever --tls-client-auth says.
func (r *TLSReloader) PeerServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.peer.Load(), nil
		},
	}
}

// NotAfter is when the current certificate expires.
func (r *TLSReloader) NotAfter() time.Time {
	cfg := r.cur.Load()
	if cfg == nil || len(cfg.Certificates) == 0 || cfg.Certificates[0].Leaf == nil {
		return time.Time{}
	}
	return cfg.Certificates[0].Leaf.NotAfter
}

func (f TLSFiles) load() (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("TLS needs both a certificate file and a key file (--tls-cert, --tls-key)")
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s with key %s: %w", f.CertFile, f.KeyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	switch f.ClientAuth {
	case "", "none":
		cfg.ClientAuth = tls.NoClientCert
	case "requested":
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case "required":
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("TLS client auth %q: none, requested or required", f.ClientAuth)
	}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS client CA file %s holds no PEM certificate", f.ClientCAFile)
		}
		cfg.ClientCAs = pool
	} else if cfg.ClientAuth != tls.NoClientCert {
		return nil, fmt.Errorf("TLS client auth %q needs the CAs to check client certificates against (--tls-client-ca)", f.ClientAuth)
	}
	return cfg, nil
}
