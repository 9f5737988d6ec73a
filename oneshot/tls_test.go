package oneshot

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/testcerts"
	"github.com/locking-center/locking-center/internal/tlsconf"
	"github.com/locking-center/locking-center/mutex"
)

// starter starts a server for a test.
type starter func(t *testing.T, cfg ServerConfig) *testServer

// bothTransports runs f over plain TCP, then over TLS with client
// certificates.
func bothTransports(t *testing.T, f func(t *testing.T, start starter)) {
	t.Run("tcp", func(t *testing.T) { f(t, startServer) })
	t.Run("tls", func(t *testing.T) { f(t, startTLSServer) })
}

// testPKI is a CA of the test and the files of a server certificate.
type testPKI struct {
	ca     *testcerts.CA
	server testcerts.Files
	caFile string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "oneshot test CA")
	return &testPKI{ca: ca, server: ca.Server(t).Write(t, dir, "server"), caFile: ca.Write(t, dir, "ca")}
}

// serverConfig returns the mutex port's TLS config as lcd makes it:
// client certificates of the CA required, named when named is set.
func (p *testPKI) serverConfig(t *testing.T, named bool) *tls.Config {
	t.Helper()
	st, err := tlsconf.Load(tlsconf.Config{CertFile: p.server.Cert, KeyFile: p.server.Key, ClientCAFile: p.caFile, NamedClients: named})
	if err != nil {
		t.Fatal(err)
	}
	return st.Config(tlsconf.Require)
}

// startTLSServer is startServer over TLS: clients present a certificate
// named "client".
func startTLSServer(t *testing.T, cfg ServerConfig) *testServer {
	t.Helper()
	p := newTestPKI(t)
	cfg.TLS = p.serverConfig(t, cfg.SourceFromCert)
	s := startServer(t, cfg)
	s.tls = testcerts.ClientConfig(p.ca, p.ca.Client(t, "client"))
	return s
}

// A connection that never starts its handshake, or stops halfway, holds
// up nobody: the handshake is not done in the accept loop. The header
// timeout closes such a connection.
func TestTLSHandshakeOutsideTheAcceptLoop(t *testing.T) {
	stalled := func(t *testing.T, s *testServer) []net.Conn {
		t.Helper()
		silent := s.dialPlain(t)
		half := s.dialPlain(t)
		half.Write([]byte{0x16, 0x03, 0x01}) // the start of a ClientHello
		return []net.Conn{silent, half}
	}
	patient := startTLSServer(t, ServerConfig{HeaderTimeout: time.Hour})
	stalled(t, patient)
	if a := patient.do(t, lockReq("k", "")); a != AnswerOK {
		t.Fatalf("lock behind stalled handshakes: %q", a)
	}
	strict := startTLSServer(t, ServerConfig{HeaderTimeout: 200 * time.Millisecond})
	for _, c := range stalled(t, strict) {
		if !readClosed(t, c) {
			t.Fatal("a connection that never finished its handshake stayed open")
		}
	}
}

// dialPlain opens a TCP connection to the server without TLS.
func (s *testServer) dialPlain(t *testing.T) *clientConn {
	t.Helper()
	return (&testServer{addr: s.addr}).dial(t)
}

// A client without TLS fails at once on a TLS port, changes nothing, and
// the server goes on serving.
func TestPlainClientOnTLSPort(t *testing.T) {
	// A request shorter than a TLS record header waits for the rest.
	s := startTLSServer(t, ServerConfig{HeaderTimeout: 200 * time.Millisecond})
	for _, r := range []Request{lockReq("k", "plain"), {Action: ActionUnlock, Key: "k"}} {
		c := s.dialPlain(t)
		c.Write(AppendRequest(nil, r))
		if !readClosed(t, c) {
			t.Fatal("a plain request on the TLS port was not refused")
		}
	}
	if n := s.table.Len(); n != 0 {
		t.Fatalf("a plain request changed the table: %s", describeTable(s.table))
	}
	if a := s.do(t, lockReq("k", "tls")); a != AnswerOK {
		t.Fatalf("TLS lock after the plain ones: %q", a)
	}
}

// Client certificates are required: a client without one, or with one of
// another CA, is refused before its request counts.
func TestTLSClientCertificateRequired(t *testing.T) {
	p := newTestPKI(t)
	s := startServer(t, ServerConfig{TLS: p.serverConfig(t, false)})
	intruder := testcerts.NewCA(t, "another CA").Client(t, "intruder")
	otherCA := testcerts.ClientConfig(p.ca, nil)
	// Sent although the server names another CA, as a client of another
	// library may.
	otherCA.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &intruder.TLS, nil }
	for name, cfg := range map[string]*tls.Config{
		"no certificate":              testcerts.ClientConfig(p.ca, nil),
		"a certificate of another CA": otherCA,
	} {
		c := (&testServer{addr: s.addr, tls: cfg}).send(t, AppendRequest(nil, lockReq("k", "")))
		if !readClosed(t, c) {
			t.Errorf("%s: served", name)
		}
	}
	if n := s.table.Len(); n != 0 {
		t.Fatalf("a refused client changed the table: %s", describeTable(s.table))
	}
	s.tls = testcerts.ClientConfig(p.ca, p.ca.Client(t, "client"))
	if a := s.do(t, lockReq("k", "")); a != AnswerOK {
		t.Fatalf("a client of the CA: %q", a)
	}
}

// With SourceFromCert the source of a lock is the client certificate's
// name, whatever the request says, and the lock is charged to it.
func TestTLSSourceFromCert(t *testing.T) {
	s := startTLSServer(t, ServerConfig{SourceFromCert: true})
	for _, r := range []Request{lockReq("k", "liar"), {Action: ActionTryLock, Key: "t", Source: ""}} {
		if a := s.do(t, r); a != AnswerOK {
			t.Fatalf("%v: %q", r, a)
		}
	}
	var accounts []string
	s.table.Export(func(r *mutex.Record) {
		if r.Kind == mutex.RecordHolder {
			accounts = append(accounts, r.Source+"/"+r.Account)
		}
	})
	if len(accounts) != 2 || accounts[0] != "client/client" || accounts[1] != "client/client" {
		t.Fatalf("holders (source/account) %q, want client/client twice", accounts)
	}
	if _, err := NewServer(newNode(), ServerConfig{SourceFromCert: true}); err == nil {
		t.Fatal("SourceFromCert without TLS accepted")
	}
}
