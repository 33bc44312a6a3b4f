package main

// The client side of the broker's security, for every command that talks
// to a broker: --security-protocol, SASL credentials and TLS files, as
// Kafka's client properties (security.protocol, sasl.mechanism, ssl.*).

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ringlog/ringlog/internal/cli"
)

// clientSecurity are the security flags of a broker connection.
type clientSecurity struct {
	protocol, mechanism, user, passwordFile string
	caFile, certFile, keyFile, serverName   string
}

// Register registers --brokers and --timeout, then the security flags.
func (c *connFlags) Register(fs *flag.FlagSet, timeout time.Duration, timeoutHelp string) {
	c.ConnFlags.Register(fs, timeout, timeoutHelp)
	s := &c.sec
	fs.StringVar(&s.protocol, "security-protocol", "PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (the listener's)")
	fs.StringVar(&s.mechanism, "sasl-mechanism", "SCRAM-SHA-512", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	fs.StringVar(&s.user, "sasl-username", "", "SASL user name")
	fs.StringVar(&s.passwordFile, "sasl-password-file", "", "file holding the SASL password (its first line; - reads standard input)")
	fs.StringVar(&s.caFile, "tls-ca", "", "PEM CAs to check the broker's certificate against (default: the system's)")
	fs.StringVar(&s.certFile, "tls-cert", "", "PEM client certificate (mTLS), with --tls-key")
	fs.StringVar(&s.keyFile, "tls-key", "", "PEM key of --tls-cert")
	fs.StringVar(&s.serverName, "tls-server-name", "", "name to check the broker's certificate for (default: the host of --brokers)")
}

// options are the kgo options the flags ask for.
func (s *clientSecurity) options() ([]kgo.Opt, error) {
	proto := strings.ToUpper(s.protocol)
	useTLS, useSASL := false, false
	switch proto {
	case "PLAINTEXT":
	case "SSL":
		useTLS = true
	case "SASL_PLAINTEXT":
		useSASL = true
	case "SASL_SSL":
		useTLS, useSASL = true, true
	default:
		return nil, cli.Usagef("--security-protocol %q: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", s.protocol)
	}
	var opts []kgo.Opt
	if useTLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.serverName}
		if s.caFile != "" {
			pem, err := os.ReadFile(s.caFile)
			if err != nil {
				return nil, cli.Usagef("--tls-ca: %v", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, cli.Usagef("--tls-ca %s holds no PEM certificate", s.caFile)
			}
		}
		if (s.certFile == "") != (s.keyFile == "") {
			return nil, cli.Usagef("--tls-cert and --tls-key go together")
		}
		if s.certFile != "" {
			pair, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
			if err != nil {
				return nil, cli.Usagef("--tls-cert/--tls-key: %v", err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	} else if s.caFile != "" || s.certFile != "" {
		return nil, cli.Usagef("--tls-ca and --tls-cert need --security-protocol SSL or SASL_SSL")
	}
	if !useSASL {
		if s.user != "" {
			return nil, cli.Usagef("--sasl-username needs --security-protocol SASL_PLAINTEXT or SASL_SSL")
		}
		return opts, nil
	}
	if s.user == "" || s.passwordFile == "" {
		return nil, cli.Usagef("%s needs --sasl-username and --sasl-password-file", proto)
	}
	pass, err := readPassword(s.passwordFile)
	if err != nil {
		return nil, err
	}
	switch strings.ToUpper(s.mechanism) {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.user, Pass: pass}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.user, Pass: pass}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.user, Pass: pass}.AsSha512Mechanism()))
	default:
		return nil, cli.Usagef("--sasl-mechanism %q: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.mechanism)
	}
	return opts, nil
}
