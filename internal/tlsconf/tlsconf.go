// Package tlsconf is the server side of lcd's TLS: the certificate, its
// key and the client CAs, read from PEM files; the tls.Config of each
// port; a reload that swaps the files' contents in for new handshakes;
// and the name a verified client certificate gives its holder. Peer is
// the same for a cluster node's TLS towards the other nodes, both sides of
// it: the node certificate, the nodes' CAs, and the configs of the raft
// port and of the dials to the other nodes.
//
// Every tls.Config a Store hands out reads the store's current contents at
// each handshake (tls.Config.GetConfigForClient), so a Reload takes effect
// at the next handshake of every port, and connections already open keep
// what they negotiated. Each set of contents gets session-ticket keys of
// its own: a TLS session from before a reload is not resumed after it, and
// the client's next connection is verified against the client CAs then in
// force.
package tlsconf

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
)

// MaxName is the longest name CertName accepts, in bytes: the longest
// source of a lock.
const MaxName = 127

// MinVersion is the oldest TLS version a Store's configs accept.
const MinVersion = tls.VersionTLS12

// Errors.
var (
	// ErrNoName: a client certificate with neither a common name nor a
	// DNS name, or with one longer than MaxName bytes.
	ErrNoName = errors.New("tlsconf: the client certificate names nobody lcd can use as a source")
	// ErrNoCertificate: a client CA file without a certificate.
	ErrNoCertificate = errors.New("tlsconf: no certificate in the file")
)

// Config names the PEM files of a server's TLS.
type Config struct {
	CertFile string // the server's certificate, then any intermediates
	KeyFile  string // the certificate's private key
	// ClientCAFile holds the CA certificates that sign client
	// certificates. Set, a port asks every client for a certificate
	// (see Clients); empty, none is asked for.
	ClientCAFile string
	// NamedClients refuses, on the ports that require a client
	// certificate, one that names nobody (CertName fails): for a server
	// that takes each client's source from its certificate.
	NamedClients bool
}

// Clients is what a port asks of client certificates when the Store has
// client CAs; without them no port asks for one.
type Clients int

const (
	// Require: a handshake without a client certificate signed by a
	// client CA fails.
	Require Clients = iota
	// VerifyIfGiven: a client certificate is verified if one is given;
	// a client without one is served.
	VerifyIfGiven
)

// Store holds the certificate, key and client CAs in force. It is safe
// for concurrent use.
type Store struct {
	cfg Config
	reloadable[contents]
}

// contents is what one read of the files gave.
type contents struct {
	cert tls.Certificate
	cas  *x509.CertPool // nil without ClientCAFile
}

// Load reads cfg's files. Errors: a file that cannot be read or does not
// parse, a key that does not match the certificate, ErrNoCertificate; each
// names its file.
func Load(cfg Config) (*Store, error) {
	s := &Store{cfg: cfg}
	c, err := s.read()
	if err != nil {
		return nil, err
	}
	s.cur.Store(c)
	return s, nil
}

// Reload reads the files again. When all of them parse, new handshakes use
// their contents; otherwise it returns the error of Load and the contents
// in force stay.
func (s *Store) Reload() error {
	return s.reload(s.read)
}

// reloadable holds the contents read from files that are in force, and
// reads them again on reload.
type reloadable[T any] struct {
	mu  sync.Mutex // one reload at a time
	cur atomic.Pointer[T]
}

// reload puts what read returns in force, unless read fails: then it
// returns read's error and the contents in force stay.
func (r *reloadable[T]) reload(read func() (*T, error)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := read()
	if err != nil {
		return err
	}
	r.cur.Store(c)
	return nil
}

// Certificate returns the server certificate in force (the leaf).
func (s *Store) Certificate() *x509.Certificate { return s.cur.Load().cert.Leaf }

func (s *Store) read() (*contents, error) {
	cert, err := tls.LoadX509KeyPair(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", s.cfg.CertFile, s.cfg.KeyFile, err)
	}
	if leaf := cert.Leaf; leaf != nil && !usableFor(leaf, x509.ExtKeyUsageServerAuth) {
		return nil, fmt.Errorf("TLS certificate %s is for clients only: its extended key usage names neither serverAuth nor any use, "+
			"so no client would accept it from a server", s.cfg.CertFile)
	}
	c := &contents{cert: cert}
	if s.cfg.ClientCAFile != "" {
		if c.cas, err = readCAs(s.cfg.ClientCAFile); err != nil {
			return nil, fmt.Errorf("TLS client CA file %s: %w", s.cfg.ClientCAFile, err)
		}
	}
	return c, nil
}

// readCAs reads every certificate of a PEM file into a pool; anything
// else in it is an error.
func readCAs(path string) (*x509.CertPool, error) {
	certs, err := readCertificates(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// readCertificates reads every certificate of a PEM file, at least one;
// anything else in it is an error.
func readCertificates(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a PEM block of type %q, want CERTIFICATE", block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		certs = append(certs, cert)
		n++
	}
	if n == 0 {
		return nil, ErrNoCertificate
	}
	return certs, nil
}

// Config returns the tls.Config of a port that asks clients for what
// clients says. nextProtos are the ALPN protocols it offers, if any (an
// HTTP server: "h2", "http/1.1"). Give it to tls.Server, tls.NewListener
// or http.Server.TLSConfig (then serve with ServeTLS(ln, "", "")). The
// caller must not modify it.
func (s *Store) Config(clients Clients, nextProtos ...string) *tls.Config {
	v := &view{s: s, clients: clients, protos: nextProtos}
	return &tls.Config{MinVersion: MinVersion, NextProtos: nextProtos, GetConfigForClient: v.config}
}

// view is one port's way of using the store's contents.
type view struct {
	s       *Store
	clients Clients
	protos  []string
	built   atomic.Pointer[built]
}

// built is the config a view made of one contents.
type built struct {
	from *contents
	cfg  *tls.Config
}

// config returns the view's config of the contents in force, made once
// per contents.
func (v *view) config(*tls.ClientHelloInfo) (*tls.Config, error) {
	c := v.s.cur.Load()
	if b := v.built.Load(); b != nil && b.from == c {
		return b.cfg, nil
	}
	cfg := &tls.Config{MinVersion: MinVersion, Certificates: []tls.Certificate{c.cert}, NextProtos: v.protos}
	if c.cas != nil {
		cfg.ClientCAs = c.cas
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if v.clients == Require {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
			if v.s.cfg.NamedClients {
				cfg.VerifyConnection = verifyNamed
			}
		}
	}
	var key [32]byte
	rand.Read(key[:])
	cfg.SetSessionTicketKeys([][32]byte{key})
	v.built.Store(&built{from: c, cfg: cfg})
	return cfg, nil
}

// verifyNamed refuses a client certificate that names nobody.
func verifyNamed(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil // refused already, as no certificate
	}
	_, err := CertName(cs.PeerCertificates[0])
	return err
}

// CertName returns the name cert gives its holder: its common name, or,
// when that is empty, its first DNS name. Errors: ErrNoName.
func CertName(cert *x509.Certificate) (string, error) {
	name := cert.Subject.CommonName
	if name == "" && len(cert.DNSNames) > 0 {
		name = cert.DNSNames[0]
	}
	if name == "" || len(name) > MaxName {
		return "", ErrNoName
	}
	return name, nil
}

// PeerName returns the name of c's verified client certificate (see
// CertName), and false when c is not a TLS connection whose handshake
// verified a client certificate that has one. Call it once the handshake
// is done.
func PeerName(c net.Conn) (string, bool) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return "", false
	}
	cs := tc.ConnectionState()
	if !cs.HandshakeComplete || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return "", false
	}
	name, err := CertName(cs.PeerCertificates[0])
	return name, err == nil
}

// usableFor reports whether leaf may be accepted for usage (serverAuth
// from a server, clientAuth from a client): it names no extended key
// usage (then any), or usage, or any.
func usableFor(leaf *x509.Certificate, usage x509.ExtKeyUsage) bool {
	if len(leaf.ExtKeyUsage) == 0 && len(leaf.UnknownExtKeyUsage) == 0 {
		return true
	}
	for _, u := range leaf.ExtKeyUsage {
		if u == usage || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}
