package tlsconf

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locking-center/locking-center/internal/testcerts"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("runtime.runCleanups"))
}

// pki is a CA, a server certificate and a client certificate, on disk.
type pki struct {
	dir    string
	ca     *testcerts.CA
	server testcerts.Files
	caFile string
	client *testcerts.Cert
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "test CA")
	return &pki{dir: dir, ca: ca, server: ca.Server(t).Write(t, dir, "server"), caFile: ca.Write(t, dir, "ca"),
		client: ca.Client(t, "svc-a")}
}

func (p *pki) load(t *testing.T, mutual, named bool) *Store {
	t.Helper()
	cfg := Config{CertFile: p.server.Cert, KeyFile: p.server.Key, NamedClients: named}
	if mutual {
		cfg.ClientCAFile = p.caFile
	}
	s, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// result is how one handshake went, seen from both sides.
type result struct {
	client, server tls.ConnectionState
	err            error // the client's, at its first read
	peer           string
	named          bool
}

// connect runs one handshake between a server with srv and a client with
// cli on a loopback connection, the client asking for localhost; the
// server writes one byte, which the client reads (so that session tickets
// of TLS 1.3 reach it).
func connect(t *testing.T, srv, cli *tls.Config) result {
	t.Helper()
	cfg := cli.Clone()
	cfg.ServerName = "localhost"
	return handshake(t, srv, cfg)
}

// handshake is connect with cli as it is.
func handshake(t *testing.T, srv, cli *tls.Config) result {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var r result
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		tc := tls.Server(c, srv)
		if tc.Handshake() != nil {
			return
		}
		r.server = tc.ConnectionState()
		r.peer, r.named = PeerName(tc)
		tc.Write([]byte{'+'})
		io.Copy(io.Discard, tc)
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), cli)
	if err == nil {
		var b [1]byte
		_, err = io.ReadFull(c, b[:])
		r.client = c.ConnectionState()
		c.Close()
	}
	<-done
	r.err = err
	return r
}

func TestClientCertificates(t *testing.T) {
	p := newPKI(t)
	other := testcerts.NewCA(t, "other CA")
	noName := p.ca.Client(t, "")
	dnsOnly := p.ca.Client(t, "", "worker-3.example")
	tests := []struct {
		name           string
		mutual, named  bool
		clients        Clients
		cert           *testcerts.Cert
		ok             bool
		peer           string // "" when PeerName reports none
		serverSawCerts bool
	}{
		{"mutual: a certificate of the CA", true, false, Require, p.client, true, "svc-a", true},
		{"mutual: no certificate", true, false, Require, nil, false, "", false},
		{"mutual: a certificate of another CA", true, false, Require, other.Client(t, "svc-a"), false, "", false},
		{"mutual: the DNS name when no common name", true, false, Require, dnsOnly, true, "worker-3.example", true},
		{"mutual: a certificate without a name", true, false, Require, noName, true, "", true},
		{"named: a certificate without a name", true, true, Require, noName, false, "", false},
		{"named: a certificate with a name", true, true, Require, p.client, true, "svc-a", true},
		{"if given: no certificate", true, true, VerifyIfGiven, nil, true, "", false},
		{"if given: a certificate of the CA", true, true, VerifyIfGiven, p.client, true, "svc-a", true},
		{"if given: a certificate of another CA", true, true, VerifyIfGiven, other.Client(t, "x"), false, "", false},
		{"no client CAs: none asked for", false, false, Require, p.client, true, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := p.load(t, tt.mutual, tt.named)
			cli := testcerts.ClientConfig(p.ca, tt.cert)
			if tt.cert != nil {
				// Sent whatever CAs the server names: a Go client would
				// keep quiet a certificate of a CA the server does not name.
				cli.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
					return &tt.cert.TLS, nil
				}
			}
			r := connect(t, s.Config(tt.clients), cli)
			if (r.err == nil) != tt.ok {
				t.Fatalf("handshake error %v, want success %v", r.err, tt.ok)
			}
			if !tt.ok {
				return
			}
			if r.peer != tt.peer || r.named != (tt.peer != "") {
				t.Errorf("PeerName = %q, %v; want %q", r.peer, r.named, tt.peer)
			}
			if got := len(r.server.PeerCertificates) > 0; got != tt.serverSawCerts {
				t.Errorf("server saw a client certificate: %v, want %v", got, tt.serverSawCerts)
			}
		})
	}
}

func TestOldTLSRefused(t *testing.T) {
	p := newPKI(t)
	cli := testcerts.ClientConfig(p.ca, nil)
	cli.MaxVersion = tls.VersionTLS11
	cli.MinVersion = tls.VersionTLS10
	if r := connect(t, p.load(t, false, false).Config(Require), cli); r.err == nil {
		t.Fatalf("a TLS 1.1 client was served with version %x", r.client.Version)
	}
	cli.MaxVersion = tls.VersionTLS12
	if r := connect(t, p.load(t, false, false).Config(Require), cli); r.err != nil || r.client.Version != tls.VersionTLS12 {
		t.Fatalf("TLS 1.2: %v, version %x", r.err, r.client.Version)
	}
}

// A reload swaps the certificate for new handshakes; a file that does not
// parse leaves the one in force.
func TestReload(t *testing.T) {
	p := newPKI(t)
	s := p.load(t, true, false)
	cfg := s.Config(Require)
	cli := testcerts.ClientConfig(p.ca, p.client)
	serialOf := func() string {
		t.Helper()
		r := connect(t, cfg, cli)
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.client.PeerCertificates[0].SerialNumber.String()
	}
	first := serialOf()
	if first != s.Certificate().SerialNumber.String() {
		t.Fatalf("served serial %s, Certificate says %s", first, s.Certificate().SerialNumber)
	}
	next := p.ca.Server(t)
	next.Write(t, p.dir, "server")
	if got := serialOf(); got != first {
		t.Fatalf("a new file was served before the reload")
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, want := serialOf(), next.Leaf.SerialNumber.String(); got != want {
		t.Fatalf("after the reload: serial %s, want %s", got, want)
	}

	testcerts.WriteFile(t, p.server.Cert, []byte("not a certificate"))
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), p.server.Cert) {
		t.Fatalf("reload of a broken certificate: %v", err)
	}
	if got, want := serialOf(), next.Leaf.SerialNumber.String(); got != want {
		t.Fatalf("after a failed reload: serial %s, want the one in force %s", got, want)
	}

	// New client CAs: a client of the old CA is refused from then on.
	next.Write(t, p.dir, "server")
	ca2 := testcerts.NewCA(t, "second CA")
	ca2.Write(t, p.dir, "ca")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := connect(t, cfg, cli); r.err == nil {
		t.Fatal("a client of the CA no longer trusted was served")
	}
	cli2 := testcerts.ClientConfig(p.ca, ca2.Client(t, "svc-b"))
	if r := connect(t, cfg, cli2); r.err != nil {
		t.Fatalf("a client of the new CA: %v", r.err)
	}
}

// A TLS session from before a reload is not resumed after it: the client
// is verified again, against the client CAs then in force.
func TestReloadEndsResumption(t *testing.T) {
	p := newPKI(t)
	s := p.load(t, true, false)
	cfg := s.Config(Require)
	cli := testcerts.ClientConfig(p.ca, p.client)
	cli.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	resumed := func() bool {
		t.Helper()
		r := connect(t, cfg, cli)
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.client.DidResume
	}
	if resumed() {
		t.Fatal("the first connection resumed")
	}
	if !resumed() {
		t.Fatal("the second connection did not resume: the test shows nothing")
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if resumed() {
		t.Fatal("a session from before the reload was resumed")
	}
}

func TestLoadErrors(t *testing.T) {
	p := newPKI(t)
	otherKey := p.ca.Server(t).Write(t, p.dir, "other").Key
	garbage := filepath.Join(p.dir, "garbage.pem")
	testcerts.WriteFile(t, garbage, []byte("hello\n"))
	keyAsCA := p.server.Key
	clientOnly := p.ca.Client(t, "a-client").Write(t, p.dir, "client-only")
	tests := []struct {
		name string
		cfg  Config
		want string // in the error
		is   error
	}{
		{"missing certificate", Config{CertFile: filepath.Join(p.dir, "nope.crt"), KeyFile: p.server.Key}, "nope.crt", os.ErrNotExist},
		{"certificate not PEM", Config{CertFile: garbage, KeyFile: p.server.Key}, "garbage.pem", nil},
		{"key of another certificate", Config{CertFile: p.server.Cert, KeyFile: otherKey}, "other.key", nil},
		{"missing client CA file", Config{CertFile: p.server.Cert, KeyFile: p.server.Key, ClientCAFile: filepath.Join(p.dir, "nope-ca.crt")}, "nope-ca.crt", os.ErrNotExist},
		{"client CA file without a certificate", Config{CertFile: p.server.Cert, KeyFile: p.server.Key, ClientCAFile: garbage}, "garbage.pem", ErrNoCertificate},
		{"client CA file holding a key", Config{CertFile: p.server.Cert, KeyFile: p.server.Key, ClientCAFile: keyAsCA}, "PRIVATE KEY", nil},
		{"a client's certificate", Config{CertFile: clientOnly.Cert, KeyFile: clientOnly.Key}, "for clients only", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load: %v, want an error naming %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("Load: %v, want one matching %v", err, tt.is)
			}
		})
	}
}

func TestCertName(t *testing.T) {
	ca := testcerts.NewCA(t, "CA")
	long := strings.Repeat("x", MaxName+1)
	for _, tt := range []struct {
		cn   string
		dns  []string
		want string
	}{
		{"svc-a", []string{"a.example"}, "svc-a"},
		{"", []string{"a.example", "b.example"}, "a.example"},
		{"", nil, ""},
		{long, nil, ""},
		{strings.Repeat("y", MaxName), nil, strings.Repeat("y", MaxName)},
	} {
		got, err := CertName(ca.Client(t, tt.cn, tt.dns...).Leaf)
		if got != tt.want || (err == nil) != (tt.want != "") || err != nil && !errors.Is(err, ErrNoName) {
			t.Errorf("CertName(cn %q, dns %q) = %q, %v; want %q", tt.cn, tt.dns, got, err, tt.want)
		}
	}
	if _, ok := PeerName(&net.TCPConn{}); ok {
		t.Error("PeerName of a plain connection reports a name")
	}
}
