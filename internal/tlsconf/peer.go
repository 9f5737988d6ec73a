package tlsconf

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
)

// PeerConfig names the PEM files of a cluster node's TLS towards the
// other nodes.
type PeerConfig struct {
	// CertFile and KeyFile are the node certificate (then any
	// intermediates) and its key: presented to the other nodes both when
	// this node serves and when it dials, so the certificate must be good
	// for server and client authentication.
	CertFile, KeyFile string
	// CAFile holds the CA certificates that sign the nodes' certificates.
	CAFile string
}

// Peer holds a node's certificate, key and the nodes' CAs in force, and
// makes the tls.Config of each side of a connection between nodes. It is
// safe for concurrent use.
type Peer struct {
	cfg PeerConfig
	reloadable[peerContents]
	server *tls.Config
}

// peerContents is what one read of a Peer's files gave.
type peerContents struct {
	cert   tls.Certificate
	cas    *x509.CertPool // the nodes' CAs
	roots  *x509.CertPool // the nodes' CAs and the system's roots
	server *tls.Config    // the config of the raft port's listener
}

// LoadPeer reads cfg's files. Errors: a file that cannot be read or does
// not parse, a key that does not match the certificate, a CA file without
// a certificate (ErrNoCertificate), a certificate whose extended key usage
// does not allow both server and client authentication, or that CAFile
// does not accept (another CA signed it, or it has expired or is not yet
// valid: the other nodes would refuse it); each names its file.
func LoadPeer(cfg PeerConfig) (*Peer, error) {
	p := &Peer{cfg: cfg}
	c, err := p.read()
	if err != nil {
		return nil, err
	}
	p.cur.Store(c)
	p.server = &tls.Config{MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return p.cur.Load().server, nil }}
	return p, nil
}

// Reload reads the files again. When all of them parse, new connections
// use their contents; otherwise it returns the error of LoadPeer and the
// contents in force stay.
func (p *Peer) Reload() error {
	return p.reload(p.read)
}

// Certificate returns the node certificate in force (the leaf).
func (p *Peer) Certificate() *x509.Certificate { return p.cur.Load().cert.Leaf }

// Chain returns the node certificate in force with its intermediates.
func (p *Peer) Chain() tls.Certificate { return p.cur.Load().cert }

func (p *Peer) read() (*peerContents, error) {
	cert, err := tls.LoadX509KeyPair(p.cfg.CertFile, p.cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS node certificate %s and key %s: %w", p.cfg.CertFile, p.cfg.KeyFile, err)
	}
	if leaf := cert.Leaf; leaf != nil && !(usableFor(leaf, x509.ExtKeyUsageServerAuth) && usableFor(leaf, x509.ExtKeyUsageClientAuth)) {
		return nil, fmt.Errorf("TLS node certificate %s: its extended key usage must allow both serverAuth and clientAuth "+
			"(or name none): each node presents it as a server and as a client", p.cfg.CertFile)
	}
	certs, err := readCertificates(p.cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("TLS peer CA file %s: %w", p.cfg.CAFile, err)
	}
	cas := x509.NewCertPool()
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	for _, ca := range certs {
		cas.AddCert(ca)
		roots.AddCert(ca)
	}
	// The other nodes check this certificate against their copy of the
	// nodes' CAs: one that this node's own copy does not accept (another
	// CA's, expired, not yet valid) would be refused by every one of them.
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if err := verify(cert, cas, "", usage); err != nil {
			return nil, fmt.Errorf("TLS node certificate %s: TLS peer CA file %s does not accept it (%w), "+
				"and every other node checks it against the nodes' CAs", p.cfg.CertFile, p.cfg.CAFile, err)
		}
	}
	c := &peerContents{cert: cert, cas: cas, roots: roots}
	c.server = &tls.Config{MinVersion: MinVersion, Certificates: []tls.Certificate{cert},
		ClientCAs: cas, ClientAuth: tls.RequireAndVerifyClientCert}
	var key [32]byte
	rand.Read(key[:])
	c.server.SetSessionTicketKeys([][32]byte{key})
	return c, nil
}

// Server returns the config of the raft port's listener: it presents the
// node certificate and requires one from the other side, signed by a CA
// of CAFile. Each handshake reads the contents in force. The caller must
// not modify it.
func (p *Peer) Server() *tls.Config { return p.server }

// Client returns the config of a dial to another node's raft port at
// host (an IP address or a DNS name): it presents the node certificate
// and accepts the other node's only when a CA of CAFile signed it for
// host.
func (p *Peer) Client(host string) *tls.Config {
	c := p.cur.Load()
	return &tls.Config{MinVersion: MinVersion, ServerName: host, RootCAs: c.cas, Certificates: []tls.Certificate{c.cert}}
}

// Leader returns the config of a dial to the leader's mutex port at host:
// it presents the node certificate, and accepts the leader's server
// certificate when a CA of CAFile or one of the system's roots signed it
// for host.
func (p *Peer) Leader(host string) *tls.Config {
	c := p.cur.Load()
	return &tls.Config{MinVersion: MinVersion, ServerName: host, RootCAs: c.roots, Certificates: []tls.Certificate{c.cert}}
}

// VerifyLeader checks chain (a certificate, then its intermediates) as a
// dial with Leader(host) would: nil when a CA of CAFile or a system root
// signed it for host and for servers.
func (p *Peer) VerifyLeader(chain tls.Certificate, host string) error {
	return verify(chain, p.cur.Load().roots, host, x509.ExtKeyUsageServerAuth)
}

// verify checks chain against roots for host (none: any) and usage.
func verify(chain tls.Certificate, roots *x509.CertPool, host string, usage x509.ExtKeyUsage) error {
	if chain.Leaf == nil {
		return nil
	}
	inter := x509.NewCertPool()
	for _, der := range chain.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	_, err := chain.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host,
		KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// AcceptsClient reports, when the store has client CAs, whether the ports
// that require a client certificate would accept chain from a client:
// nil when they would, or when the store has none.
func (s *Store) AcceptsClient(chain tls.Certificate) error {
	pool := s.cur.Load().cas
	if pool == nil {
		return nil
	}
	return verify(chain, pool, "", x509.ExtKeyUsageClientAuth)
}

// Chain returns the server certificate in force with its intermediates.
func (s *Store) Chain() tls.Certificate { return s.cur.Load().cert }
