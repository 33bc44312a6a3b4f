package quorum

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
)

// TLS is the mutual TLS of the Raft connections: each side presents a
// certificate the other verifies, then Peer (if set) decides whether
// that certificate belongs to a member of the quorum. The handshake
// (hello) and Raft's own messages then run inside it.
type TLS struct {
	// Server returns the configuration of an accepted connection. It
	// must require and verify client certificates
	// (tls.RequireAndVerifyClientCert with ClientCAs).
	Server func() *tls.Config
	// Client returns the configuration of a dialed connection: this
	// node's certificate and the CAs to check the peer's. An empty
	// ServerName is set to the peer's host.
	Client func() *tls.Config
	// Peer, if set, checks the other side's verified leaf certificate;
	// an error drops the connection.
	Peer func(*x509.Certificate) error
}

// Dialed runs the client side of TLS on conn, a connection to addr,
// with Client's configuration (an empty ServerName set to addr's host),
// bounded by ctx, and checks the peer's certificate. On an error conn is
// closed. Package cluster uses it for the brokers' Kafka connections too.
func (t *TLS) Dialed(ctx context.Context, conn net.Conn, addr string) (*tls.Conn, error) {
	cfg := t.Client().Clone()
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	tc := tls.Client(conn, cfg)
	if err := t.handshake(ctx, tc); err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS with %s: %w", addr, err)
	}
	return tc, nil
}

// handshake runs c's TLS handshake (bounded by ctx and the connection's
// deadline) and checks the peer's certificate.
func (t *TLS) handshake(ctx context.Context, c *tls.Conn) error {
	if err := c.HandshakeContext(ctx); err != nil {
		return err
	}
	certs := c.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return errors.New("the peer presented no certificate")
	}
	if t.Peer != nil {
		if err := t.Peer(certs[0]); err != nil {
			return fmt.Errorf("the peer's certificate (%s): %w", certs[0].Subject, err)
		}
	}
	return nil
}
