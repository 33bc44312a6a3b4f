package main

// ringlog tls init: a private CA and the certificates a TLS deployment
// needs, in one directory: the broker's (serverAuth for its listeners
// and clientAuth for its connections to other brokers in cluster mode)
// and one per client (clientAuth; the subject CN=NAME makes the principal
// User:CN=NAME). Keys are ECDSA P-256, which Go, Java and librdkafka
// (OpenSSL) clients all take; they are written in PKCS#8 PEM.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ringlog/ringlog/internal/cli"
	"github.com/ringlog/ringlog/internal/fsutil"
)

func runTLS(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("ringlog", "tls", "Makes the certificates of a TLS deployment (SSL and SASL_SSL listeners, mTLS clients).", []cli.Subcommand{
		{Name: "init", Summary: "make a CA, a broker certificate and client certificates", Run: runTLSInit},
	}, args, stdout, stderr)
}

const tlsInitUsage = `
Usage: ringlog tls init --out DIR [--hosts HOST,...] [--client NAME ...] [flags]

Makes, in DIR, a private CA (ca.pem, ca-key.pem), a broker certificate
signed by it (broker.pem, broker-key.pem) for localhost, 127.0.0.1, ::1
and --hosts, usable both to serve (serverAuth) and, in cluster mode, to
connect to the other brokers (clientAuth), and one client certificate per
--client (NAME.pem, NAME-key.pem; default: admin) whose subject CN=NAME
is the principal User:CN=NAME the broker's ACLs name. Keys are ECDSA
P-256, written 0600; certificates 0644. Existing files are left alone
unless --force. It prints the serve and client flags that use them.
`

const tlsInitExamples = `
Examples:
  ringlog tls init --out tls
  ringlog tls init --out tls --hosts broker1.example.com,broker2.example.com,10.0.0.1 --client admin --client billing
  ringlog tls init --out tls --days 90 --force     # a new set, replacing the old one

The CA key (ca-key.pem) signs certificates everyone with ca.pem trusts:
keep it off the brokers. In a cluster, give every broker the same
broker.pem (its --hosts naming every broker's address) or run tls init
once per set. Renewing: make a new set and send the brokers SIGHUP (they
reread --tls-cert, --tls-key and --tls-client-ca).
Exit status: 0 written, 1 failed, 2 usage.
`

// certFile is one file tls init writes.
type certFile struct {
	name string // in --out
	data []byte
	perm os.FileMode
	what string // for the report
}

func runTLSInit(args []string, stdout, stderr io.Writer) error {
	var out, brokerName string
	var hosts, clients stringList
	var days int
	var force bool
	fs := cli.NewFlagSet("tls init", tlsInitUsage, tlsInitExamples, stdout)
	fs.StringVar(&out, "out", "", "directory to write the files to (made if missing, mode 0700)")
	fs.Var(&hosts, "hosts", "more names and IP addresses of the brokers, for the broker certificate (comma list, repeatable; localhost, 127.0.0.1 and ::1 are always in)")
	fs.Var(&clients, "client", "make a client certificate `NAME` (CN=NAME, principal User:CN=NAME; repeatable; default: admin)")
	fs.StringVar(&brokerName, "broker", "broker", "the broker certificate's `NAME`: files NAME.pem and NAME-key.pem, subject CN=NAME (principal User:CN=NAME in cluster mode)")
	fs.IntVar(&days, "days", 365, "days the broker and client certificates are valid; the CA's are 10 years, or these if longer")
	fs.BoolVar(&force, "force", false, "replace existing files")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("tls init takes no arguments, got %q (give the directory with --out)", rest)
	}
	if out == "" {
		return cli.Usagef("tls init: give --out DIR, the directory to write the CA and certificates to")
	}
	if days < 1 || days > 100*365 {
		return cli.Usagef("--days must be between 1 and 36500, got %d", days)
	}
	names, err := tlsNames(brokerName, clients)
	if err != nil {
		return err
	}
	dnsNames, ips, err := tlsHosts(hosts)
	if err != nil {
		return err
	}

	now := time.Now()
	leafEnd := now.Add(time.Duration(days) * 24 * time.Hour)
	caEnd := now.Add(max(time.Duration(days), 3650) * 24 * time.Hour)
	set, err := newCertSet(now, caEnd)
	if err != nil {
		return err
	}
	files := []certFile{
		{name: "ca.pem", data: set.caPEM, perm: 0o644, what: "the CA certificate: clients' --tls-ca, brokers' --tls-client-ca"},
		{name: "ca-key.pem", data: set.caKeyPEM, perm: 0o600, what: "the CA's key: keep it offline, it signs what everyone with ca.pem trusts"},
	}
	hostList := strings.Join(append(slices.Clone(dnsNames), ipStrings(ips)...), ", ")
	certPEM, keyPEM, err := set.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: brokerName},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, now, leafEnd)
	if err != nil {
		return err
	}
	files = append(files,
		certFile{name: brokerName + ".pem", data: certPEM, perm: 0o644, what: fmt.Sprintf("broker certificate, CN=%s (principal User:CN=%s), for %s; serverAuth and clientAuth", brokerName, brokerName, hostList)},
		certFile{name: brokerName + "-key.pem", data: keyPEM, perm: 0o600, what: "its key: the broker's --tls-key"})
	for _, c := range names[1:] {
		certPEM, keyPEM, err := set.sign(&x509.Certificate{
			Subject:     pkix.Name{CommonName: c},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, now, leafEnd)
		if err != nil {
			return err
		}
		files = append(files,
			certFile{name: c + ".pem", data: certPEM, perm: 0o644, what: fmt.Sprintf("client certificate, CN=%s (principal User:CN=%s)", c, c)},
			certFile{name: c + "-key.pem", data: keyPEM, perm: 0o600, what: "its key"})
	}
	if err := writeCertFiles(out, files, force); err != nil {
		return err
	}

	tw := newTable(stdout)
	for _, f := range files {
		fmt.Fprintf(tw, "wrote %s\t%s\n", filepath.Join(out, f.name), f.what)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "Certificates valid until %s, the CA until %s.\n\n", leafEnd.UTC().Format(time.DateOnly), caEnd.UTC().Format(time.DateOnly))
	printTLSUsage(stdout, out, brokerName, names[1], dnsNames, ips)
	return nil
}

// tlsNames checks the broker's and the clients' names (they name files)
// and returns the broker's first, then the clients' (admin if none).
func tlsNames(broker string, clients []string) ([]string, error) {
	if len(clients) == 0 {
		clients = []string{"admin"}
	}
	names := []string{broker}
	for _, v := range clients {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" {
				names = append(names, c)
			}
		}
	}
	if len(names) == 1 {
		return nil, cli.Usagef("--client: give a name")
	}
	for i, n := range names {
		flag := "--client"
		if i == 0 {
			flag = "--broker"
		}
		valid := n != "" && n[0] != '.' && n[0] != '-'
		for _, r := range n {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				valid = false
			}
		}
		switch {
		case !valid:
			return nil, cli.Usagef("%s %q: use letters, digits, '.', '_' and '-' (it names the files and is the certificate's CN)", flag, n)
		case n == "ca":
			return nil, cli.Usagef("%s %q: the CA's files are ca.pem and ca-key.pem; choose another name", flag, n)
		case slices.Contains(names[:i], n):
			return nil, cli.Usagef("%s %q is given twice (the broker's name is %q)", flag, n, broker)
		}
	}
	return names, nil
}

// tlsHosts is localhost, 127.0.0.1, ::1 and --hosts, split into DNS
// names and IP addresses, each once.
func tlsHosts(hosts []string) ([]string, []net.IP, error) {
	dns := []string{"localhost"}
	ips := []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}
	for _, v := range hosts {
		for _, h := range strings.Split(v, ",") {
			h = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(h), "["), "]")
			if h == "" {
				continue
			}
			if ip := net.ParseIP(h); ip != nil {
				if v4 := ip.To4(); v4 != nil {
					ip = v4
				}
				if !slices.ContainsFunc(ips, ip.Equal) {
					ips = append(ips, ip)
				}
				continue
			}
			h = strings.ToLower(strings.TrimSuffix(h, "."))
			if !validDNSName(h) {
				return nil, nil, cli.Usagef("--hosts: %q is neither an IP address nor a host name (letters, digits, '-' and '.', optionally starting with '*.')", h)
			}
			if !slices.Contains(dns, h) {
				dns = append(dns, h)
			}
		}
	}
	return dns, ips, nil
}

// validDNSName accepts host names (and *.wildcards) a certificate may
// name: labels of letters, digits and '-' of at most 63 bytes.
func validDNSName(h string) bool {
	if len(h) == 0 || len(h) > 253 {
		return false
	}
	for i, label := range strings.Split(h, ".") {
		if label == "*" && i == 0 && strings.Contains(h, ".") {
			continue
		}
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// certSet is a fresh CA and what signs with it.
type certSet struct {
	ca       *x509.Certificate
	caKey    *ecdsa.PrivateKey
	caPEM    []byte
	caKeyPEM []byte
}

// newCertSet makes a CA valid from an hour before now (clocks differ)
// until end. Its name carries a random id, so that a certificate's
// issuer tells which of several sets signed it.
func newCertSet(now, end time.Time) (*certSet, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the CA key: %w", err)
	}
	id := make([]byte, 4)
	if _, err := rand.Read(id); err != nil {
		return nil, fmt.Errorf("generate the CA's id: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "ringlog CA " + hex.EncodeToString(id), Organization: []string{"ringlog"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              end,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("make the CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("read back the CA certificate: %w", err)
	}
	keyPEM, err := keyToPEM(key)
	if err != nil {
		return nil, err
	}
	return &certSet{ca: ca, caKey: key, caPEM: certToPEM(der), caKeyPEM: keyPEM}, nil
}

// sign makes a key and a certificate from tmpl (subject, names, extended
// key usages), valid from an hour before now until end, signed by the
// CA; it returns both as PEM.
func (s *certSet) sign(tmpl *x509.Certificate, now, end time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate the key of %s: %w", tmpl.Subject.CommonName, err)
	}
	if tmpl.SerialNumber, err = randomSerial(); err != nil {
		return nil, nil, err
	}
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), end
	if end.After(s.ca.NotAfter) {
		tmpl.NotAfter = s.ca.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, &key.PublicKey, s.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign the certificate of %s: %w", tmpl.Subject.CommonName, err)
	}
	if keyPEM, err = keyToPEM(key); err != nil {
		return nil, nil, err
	}
	return certToPEM(der), keyPEM, nil
}

// randomSerial is a random positive 128-bit serial number (RFC 5280
// allows up to 20 bytes).
func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate a serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

func certToPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// keyToPEM is key in PKCS#8 PEM ("PRIVATE KEY"), the form every client
// library reads.
func keyToPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode a private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// writeCertFiles writes files into dir (made 0700 if missing), each with
// its mode whatever the umask. Without force it refuses to start when any
// of them exists, creates each exclusively, and on a failure removes what
// it wrote; with force each replaces the old file atomically.
func writeCertFiles(dir string, files []certFile, force bool) error {
	if !force {
		var exist []string
		for _, f := range files {
			if _, err := os.Lstat(filepath.Join(dir, f.name)); err == nil {
				exist = append(exist, filepath.Join(dir, f.name))
			} else if !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("tls init: %w", err)
			}
		}
		if len(exist) > 0 {
			return fmt.Errorf("tls init: %s already exist: nothing written (give --force to replace them, or another --out)", strings.Join(exist, ", "))
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	var written []string
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := writeCertFile(path, f.data, f.perm, force); err != nil {
			if !force {
				for _, p := range written {
					os.Remove(p)
				}
			}
			return fmt.Errorf("tls init: %w", err)
		}
		written = append(written, path)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return fmt.Errorf("tls init: sync %s: %w", dir, err)
	}
	return nil
}

// writeCertFile writes one file with mode perm: created exclusively, or,
// with replace, through a temporary file renamed over the old one.
func writeCertFile(path string, data []byte, perm os.FileMode, replace bool) error {
	target, flags := path, os.O_WRONLY|os.O_CREATE|os.O_EXCL
	if replace {
		target, flags = path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC
	}
	f, err := os.OpenFile(target, flags, perm)
	if err != nil {
		return err
	}
	// The mode is set before the key goes in: a leftover temporary file,
	// or the umask, must not leave it readable by others.
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && replace {
		err = os.Rename(target, path)
	}
	if err != nil {
		os.Remove(target)
		return err
	}
	return nil
}

// printTLSUsage prints the serve and client flags that use the files.
func printTLSUsage(w io.Writer, dir, broker, client string, dnsNames []string, ips []net.IP) {
	p := func(name string) string { return shellQuote(filepath.Join(dir, name)) }
	const port = "9096"
	listen := "SSL://127.0.0.1:" + port
	advertised := ""
	host := "localhost"
	if len(dnsNames) > 1 {
		host = dnsNames[1]
	} else if len(ips) > 2 {
		host = ips[2].String()
	}
	if host != "localhost" {
		listen = "SSL://0.0.0.0:" + port
		advertised = " --advertised-listeners SSL://" + net.JoinHostPort(host, port)
	}
	fmt.Fprintf(w, "Broker, with an SSL listener that requires client certificates (add --authorizer --super-users 'User:CN=%s' to allow only what ACLs grant):\n", client)
	fmt.Fprintf(w, "  ringlog serve --listeners %s%s --tls-cert %s --tls-key %s --tls-client-ca %s --tls-client-auth required\n",
		listen, advertised, p(broker+".pem"), p(broker+"-key.pem"), p("ca.pem"))
	fmt.Fprintf(w, "In cluster mode, --kafka-security-protocol SSL makes --kafka-addr an SSL inter-broker listener with the same files; with --authorizer, --super-users must then also name User:CN=%s.\n\n", broker)
	fmt.Fprintf(w, "Clients, as %s (principal User:CN=%s):\n", client, client)
	fmt.Fprintf(w, "  ringlog topic list --brokers %s --security-protocol SSL --tls-ca %s --tls-cert %s --tls-key %s\n",
		net.JoinHostPort(host, port), p("ca.pem"), p(client+".pem"), p(client+"-key.pem"))
	fmt.Fprintf(w, "  kcat -b %s -X security.protocol=ssl -X ssl.ca.location=%s -X ssl.certificate.location=%s -X ssl.key.location=%s -L\n",
		net.JoinHostPort(host, port), p("ca.pem"), p(client+".pem"), p(client+"-key.pem"))
	fmt.Fprintf(w, "A SASL_SSL listener needs only the broker's files (--tls-cert, --tls-key), and its clients only --tls-ca.\n")
}
