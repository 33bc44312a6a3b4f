package quorum

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testcerts"
)

// TestRaftOverMutualTLS: with Config.TLS the voters elect a leader and
// agree over mutual TLS, and the Raft port answers no hello to a plain
// TCP connection, to a certificate of another CA, or to one of the right
// CA that Peer refuses.
func TestRaftOverMutualTLS(t *testing.T) {
	certs := testcerts.New(t)
	pair, err := tls.LoadX509KeyPair(certs.Broker("broker"))
	if err != nil {
		t.Fatal(err)
	}
	quorumTLS := &TLS{
		Server: func() *tls.Config {
			return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: certs.CAPool, ClientAuth: tls.RequireAndVerifyClientCert}
		},
		Client: func() *tls.Config { return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: certs.CAPool} },
		Peer: func(c *x509.Certificate) error {
			if c.Subject.CommonName != "broker" {
				return errors.New("not a broker")
			}
			return nil
		},
	}
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.TLS = quorumTLS })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img := c.initialized(ctx)
	if img.ClusterID() == "" {
		t.Fatal("no cluster id over TLS")
	}

	addr := c.voters[0].Addr
	hello := hello{NodeID: 2, Voters: c.voters.String()}
	noAnswer := func(what string, conn net.Conn) {
		t.Helper()
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write(hello.encode())
		if h, err := readHello(conn); err == nil {
			t.Fatalf("%s: the Raft port answered a hello %+v", what, h)
		}
	}
	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	noAnswer("plain TCP", plain)

	other := testcerts.New(t)
	foreign, err := tls.LoadX509KeyPair(other.Broker("broker"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{foreign}, RootCAs: certs.CAPool, ServerName: "127.0.0.1"})
	if err == nil {
		noAnswer("a certificate of another CA", conn)
	}
	mallory, err := tls.LoadX509KeyPair(certs.Broker("mallory"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err = tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{mallory}, RootCAs: certs.CAPool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("TLS with a certificate of the quorum's CA: %v", err)
	}
	noAnswer("a certificate Peer refuses", conn)

	// The quorum still works after the intruders.
	c.registerBrokers(ctx)
	if got := len(c.converge(ctx).Brokers()); got != 3 {
		t.Fatalf("%d brokers registered over TLS, want 3", got)
	}
}
