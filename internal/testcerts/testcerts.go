// Package testcerts makes throwaway X.509 material for tests of TLS
// listeners: a CA, a server certificate for 127.0.0.1 and localhost, and
// client certificates (valid or expired) signed by the CA, written as PEM
// files. Tests only.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Set is a CA and the files of what it signed.
type Set struct {
	// Dir holds the PEM files.
	Dir string
	// CAFile is the CA certificate; ServerCert and ServerKey the
	// broker's.
	CAFile, ServerCert, ServerKey string
	// CAPool holds the CA, for clients.
	CAPool *x509.CertPool

	t      testing.TB
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

// New makes a CA and a server certificate in a fresh temporary directory.
func New(t testing.TB) *Set {
	t.Helper()
	s := &Set{t: t, Dir: t.TempDir(), serial: 1}
	key := s.key()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(s.next()), Subject: pkix.Name{CommonName: "ringlog test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	s.ca, err = x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	s.caKey = key
	s.CAFile = s.write("ca.pem", "CERTIFICATE", der)
	s.CAPool = x509.NewCertPool()
	s.CAPool.AddCert(s.ca)
	s.ServerCert, s.ServerKey = s.Server("server")
	return s
}

// Server signs a server certificate for 127.0.0.1, ::1 and localhost and
// returns its certificate and key files (name.pem, name-key.pem).
func (s *Set) Server(name string) (certFile, keyFile string) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	return s.sign(name, tmpl)
}

// Broker signs a certificate a broker both serves with and presents to
// other brokers (serverAuth and clientAuth) for 127.0.0.1, ::1 and
// localhost, with subject CN=cn,O=ringlog-test (principal
// "User:CN=cn,O=ringlog-test"); it returns its certificate and key files.
func (s *Set) Broker(cn string) (certFile, keyFile string) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: []string{"ringlog-test"}},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	return s.sign("broker-"+cn, tmpl)
}

// Client signs a client certificate with subject CN=cn, O=ringlog-test,
// valid now, or expired an hour ago when expired is set; it returns it
// ready for a tls.Config.
func (s *Set) Client(cn string, expired bool) tls.Certificate {
	notAfter := time.Now().Add(24 * time.Hour)
	if expired {
		notAfter = time.Now().Add(-time.Hour)
	}
	tmpl := &x509.Certificate{
		Subject:   pkix.Name{CommonName: cn, Organization: []string{"ringlog-test"}},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	certFile, keyFile := s.sign("client-"+cn, tmpl)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		s.t.Fatal(err)
	}
	return pair
}

// ClientFiles is Client, returning the certificate and key files (for
// command-line clients such as kcat).
func (s *Set) ClientFiles(cn string) (certFile, keyFile string) {
	s.Client(cn, false)
	return filepath.Join(s.Dir, "client-"+cn+".pem"), filepath.Join(s.Dir, "client-"+cn+"-key.pem")
}

func (s *Set) sign(name string, tmpl *x509.Certificate) (string, string) {
	s.t.Helper()
	key := s.key()
	tmpl.SerialNumber = big.NewInt(s.next())
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, &key.PublicKey, s.caKey)
	if err != nil {
		s.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.write(name+".pem", "CERTIFICATE", der), s.write(name+"-key.pem", "EC PRIVATE KEY", kder)
}

func (s *Set) key() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		s.t.Fatal(err)
	}
	return k
}

func (s *Set) next() int64 { s.serial++; return s.serial }

func (s *Set) write(name, typ string, der []byte) string {
	p := filepath.Join(s.Dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return p
}
