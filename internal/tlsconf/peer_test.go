package tlsconf

import (
	"crypto/tls"
	"os"
	"strings"
	"testing"

	"github.com/locking-center/locking-center/internal/testcerts"
)

// nodePKI writes a CA's certificate and a node certificate of it to dir.
func nodePKI(t *testing.T, dir, name string) (PeerConfig, *testcerts.CA) {
	t.Helper()
	ca := testcerts.NewCA(t, name+" CA")
	f := ca.Node(t, name).Write(t, dir, name)
	return PeerConfig{CertFile: f.Cert, KeyFile: f.Key, CAFile: ca.Write(t, dir, name+"-ca")}, ca
}

func loadPeer(t *testing.T, cfg PeerConfig) *Peer {
	t.Helper()
	p, err := LoadPeer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Two nodes of one CA authenticate each other, both ways; a node of
// another CA, a client without a certificate, and a certificate that
// does not name the host dialled are refused; a reload brings in another
// CA for new connections.
func TestPeerHandshakes(t *testing.T) {
	dir := t.TempDir()
	cfgA, caA := nodePKI(t, dir, "a")
	a := loadPeer(t, cfgA)
	b := loadPeer(t, PeerConfig{CertFile: caA.Node(t, "b").Write(t, dir, "b").Cert, KeyFile: dir + "/b.key", CAFile: cfgA.CAFile})
	cfgX, caX := nodePKI(t, dir, "x")
	x := loadPeer(t, cfgX)

	r := handshake(t, a.Server(), b.Client("127.0.0.1"))
	if r.err != nil || len(r.server.VerifiedChains) == 0 || r.server.PeerCertificates[0].Subject.CommonName != "b" ||
		r.client.Version < tls.VersionTLS12 {
		t.Fatalf("a node of the same CA: %v, %+v", r.err, r.server.PeerCertificates)
	}
	if r := handshake(t, a.Server(), b.Client("localhost")); r.err != nil {
		t.Fatalf("by DNS name: %v", r.err)
	}
	noCert := b.Client("127.0.0.1")
	noCert.Certificates = nil
	for name, cli := range map[string]*tls.Config{
		"a node of another CA":    x.Client("127.0.0.1"),
		"no client certificate":   noCert,
		"a host the cert lacks":   b.Client("10.9.9.9"),
		"a name the cert lacks":   b.Client("lcd-2.example"),
		"a CA that is not theirs": x.Leader("127.0.0.1"),
	} {
		if r := handshake(t, a.Server(), cli); r.err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// The leader's mutex port, with a server certificate of the nodes' CA.
	srv := &tls.Config{Certificates: []tls.Certificate{caA.Server(t).TLS}}
	if r := handshake(t, srv, b.Leader("127.0.0.1")); r.err != nil {
		t.Fatalf("the leader's mutex port: %v", r.err)
	}

	// a moves to x's CA, its certificate and the CAs it trusts: x gets
	// in, b no longer does.
	caX.Node(t, "a").Write(t, dir, "a")
	testcerts.WriteFile(t, cfgA.CAFile, mustRead(t, cfgX.CAFile))
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := handshake(t, a.Server(), x.Client("127.0.0.1")); r.err != nil || len(r.server.VerifiedChains) == 0 {
		t.Fatalf("x after the reload: %v", r.err)
	}
	if r := handshake(t, a.Server(), b.Client("127.0.0.1")); r.err == nil {
		t.Fatal("b after the reload: accepted")
	}
}

// A node certificate must serve as both server and client certificate,
// and pass the node's own check of the nodes' CAs (at load and at a
// reload, which keeps the one in force); a bad file names itself; a store
// with client CAs accepts a node certificate only when one of them signed
// it.
func TestPeerLoadErrors(t *testing.T) {
	dir := t.TempDir()
	cfg, ca := nodePKI(t, dir, "a")
	for name, tt := range map[string]struct {
		cfg  PeerConfig
		want string
	}{
		"server only":      {PeerConfig{CertFile: ca.Server(t).Write(t, dir, "srv").Cert, KeyFile: dir + "/srv.key", CAFile: cfg.CAFile}, "clientAuth"},
		"client only":      {PeerConfig{CertFile: ca.Client(t, "c").Write(t, dir, "cli").Cert, KeyFile: dir + "/cli.key", CAFile: cfg.CAFile}, "serverAuth"},
		"no CA file":       {PeerConfig{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, CAFile: dir + "/absent.crt"}, "absent.crt"},
		"another CA's":     {PeerConfig{CertFile: testcerts.NewCA(t, "x").Node(t, "x").Write(t, dir, "x").Cert, KeyFile: dir + "/x.key", CAFile: cfg.CAFile}, "unknown authority"},
		"expired":          {PeerConfig{CertFile: ca.ExpiredNode(t, "old").Write(t, dir, "old").Cert, KeyFile: dir + "/old.key", CAFile: cfg.CAFile}, "expired"},
		"CA file of a key": {PeerConfig{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, CAFile: cfg.KeyFile}, cfg.KeyFile},
	} {
		if _, err := LoadPeer(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tt.want)
		}
	}
	p := loadPeer(t, cfg)
	testcerts.NewCA(t, "y").Node(t, "a").Write(t, dir, "a")
	if err := p.Reload(); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("a reload to another CA's certificate: %v, want it refused", err)
	}
	if got := p.Certificate().Issuer.CommonName; got != "a CA" {
		t.Errorf("after a refused reload the certificate in force is of %q, want of a CA", got)
	}
	mine := &pki{}
	mine.server = ca.Server(t).Write(t, dir, "mine")
	mine.caFile = cfg.CAFile
	if err := mine.load(t, true, false).AcceptsClient(p.Chain()); err != nil {
		t.Errorf("client CAs of the node's CA: %v", err)
	}
	other := newPKI(t)
	if err := other.load(t, true, false).AcceptsClient(p.Chain()); err == nil {
		t.Error("client CAs of another CA accept the node certificate")
	}
	if err := other.load(t, false, false).AcceptsClient(p.Chain()); err != nil {
		t.Errorf("no client CAs: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
