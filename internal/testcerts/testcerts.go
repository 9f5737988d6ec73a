// Package testcerts makes the certificates that tests of TLS need, at run
// time and in memory: a CA, server certificates for the loopback
// addresses, and client certificates, as PEM files in a test's temporary
// directory and as crypto/tls values. Keys are ECDSA P-256; nothing it
// makes outlives the test. It is for tests, benchmarks and the conformance
// probe (clients/conformance/probe) only.
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
	"time"
)

// T is what the package needs of a test: testing.TB has it.
type T interface {
	Helper()
	Fatal(args ...any)
}

// CA is a certificate authority of a test.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // the CA certificate, PEM
	key  *ecdsa.PrivateKey
}

// Cert is a certificate signed by a CA, with its key.
type Cert struct {
	Leaf    *x509.Certificate
	CertPEM []byte // the certificate then its CA's, PEM
	KeyPEM  []byte // PKCS #8, PEM
	TLS     tls.Certificate
}

// NewCA returns a new self-signed CA named cn.
func NewCA(t T, cn string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, PEM: pemBlock("CERTIFICATE", der), key: key}
}

// Pool returns a pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server returns a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t T) *Cert {
	t.Helper()
	return ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "lcd"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// Node returns a certificate of a cluster node named cn, good for both
// server and client authentication (a node presents it when it serves and
// when it dials), for hosts: IP addresses and DNS names; for 127.0.0.1,
// ::1 and localhost when none is given.
func (ca *CA) Node(t T, cn string, hosts ...string) *Cert {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "::1", "localhost"}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(t, tmpl)
}

// ExpiredNode returns a certificate like Node's for 127.0.0.1, ::1 and
// localhost, whose validity ended a day ago.
func (ca *CA) ExpiredNode(t T, cn string) *Cert {
	t.Helper()
	return ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		NotBefore:   time.Now().Add(-48 * time.Hour),
		NotAfter:    time.Now().Add(-24 * time.Hour),
	})
}

// Client returns a client certificate with common name cn (may be empty)
// and the DNS names dns.
func (ca *CA) Client(t T, cn string, dns ...string) *Cert {
	t.Helper()
	return ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    dns,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (ca *CA) issue(t T, tmpl *x509.Certificate) *Cert {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = serial(t)
	if tmpl.NotAfter.IsZero() {
		tmpl.NotBefore = time.Now().Add(-time.Hour)
		tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cert{Leaf: leaf, CertPEM: append(pemBlock("CERTIFICATE", der), ca.PEM...), KeyPEM: pemBlock("PRIVATE KEY", keyDER)}
	if c.TLS, err = tls.X509KeyPair(c.CertPEM, c.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return c
}

// Files are the PEM files of one certificate and its key.
type Files struct {
	Cert, Key string
}

// Write writes c and its key to dir as name.crt and name.key.
func (c *Cert) Write(t T, dir, name string) Files {
	t.Helper()
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	WriteFile(t, f.Cert, c.CertPEM)
	WriteFile(t, f.Key, c.KeyPEM)
	return f
}

// Write writes the CA certificate to dir as name.crt and returns its path.
func (ca *CA) Write(t T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name+".crt")
	WriteFile(t, path, ca.PEM)
	return path
}

// WriteFile writes b to path, readable by its owner only, replacing it
// at once (through a rename), as a deployment tool replaces a certificate.
func WriteFile(t T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// ClientConfig returns a client's tls.Config that trusts ca and presents
// cert, or no certificate when cert is nil.
func ClientConfig(ca *CA, cert *Cert) *tls.Config {
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.TLS}
	}
	return cfg
}

func newKey(t T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n.Add(n, big.NewInt(1))
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
