package lockingcenter_test

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/internal/testcerts"
	"github.com/locking-center/locking-center/internal/tlsconf"
	"github.com/locking-center/locking-center/session"
)

// tlsServer is a lock server whose mutex port speaks TLS and requires
// client certificates of ca.
type tlsServer struct {
	*lockServer
	ca *testcerts.CA
}

func startTLSServer(t *testing.T, cfg session.Config) *tlsServer {
	t.Helper()
	ca := testcerts.NewCA(t, "client test CA")
	dir := t.TempDir()
	files := ca.Server(t).Write(t, dir, "server")
	st, err := tlsconf.Load(tlsconf.Config{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: ca.Write(t, dir, "ca"),
		NamedClients: cfg.SourceFromCert})
	if err != nil {
		t.Fatal(err)
	}
	return &tlsServer{lockServer: startServer(t, serverOptions{cfg: cfg, tls: st.Config(tlsconf.Require)}), ca: ca}
}

// client returns the TLS config of a client with a certificate named cn.
func (s *tlsServer) client(t *testing.T, cn string) *tls.Config {
	t.Helper()
	return testcerts.ClientConfig(s.ca, s.ca.Client(t, cn))
}

// v1 calls and a session over TLS, the server's name taken from the
// address.
func TestTLS(t *testing.T) {
	srv := startTLSServer(t, session.Config{})
	ctx := context.Background()
	cfg := srv.client(t, "svc")
	c := lockingcenter.New(srv.addr, lockingcenter.WithTLS(cfg), lockingcenter.WithSource("v1-client"))
	if err := c.Lock(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := c.TryLock(ctx, "v1"); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("TryLock of a held key: %v", err)
	}
	s := srv.open(lockingcenter.WithTLS(cfg), lockingcenter.WithSource("session-client"))
	lock, err := s.Acquire(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := srv.node.Holder("v1"); !ok || h.Source != "v1-client" {
		t.Fatalf("v1 holder %+v, %v", h, ok)
	}
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	if err := c.Unlock(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if n := srv.node.Len(); n != 0 {
		t.Fatalf("%d keys left", n)
	}
	if cfg.ServerName != "" {
		t.Fatal("the client wrote its name into the caller's config")
	}
}

// A client without a certificate, with one the server does not trust, or
// without TLS fails with an error, and changes nothing.
func TestTLSRefused(t *testing.T) {
	srv := startTLSServer(t, session.Config{})
	ctx := context.Background()
	other := testcerts.NewCA(t, "other CA")
	untrusting := srv.client(t, "svc")
	untrusting.RootCAs = other.Pool()
	for name, opt := range map[string]lockingcenter.Option{
		"no certificate":        lockingcenter.WithTLS(testcerts.ClientConfig(srv.ca, nil)),
		"server not trusted":    lockingcenter.WithTLS(untrusting),
		"plain TCP on TLS port": lockingcenter.WithSource("plain"),
	} {
		if err := lockingcenter.New(srv.addr, opt).Lock(ctx, "k"); err == nil {
			t.Errorf("%s: v1 lock succeeded", name)
		}
		if s, err := lockingcenter.NewSession(ctx, srv.addr, opt); err == nil {
			s.Close()
			t.Errorf("%s: session opened", name)
		}
	}
	if n := srv.node.Len(); n != 0 || len(srv.node.Snapshot().Sessions) != 0 {
		t.Fatalf("refused clients left %d keys and %d sessions", n, len(srv.node.Snapshot().Sessions))
	}
}

// Behind a server that takes sources from certificates, the locks of both
// protocols belong to the certificate's name.
func TestTLSSourceFromCert(t *testing.T) {
	srv := startTLSServer(t, session.Config{SourceFromCert: true})
	ctx := context.Background()
	opts := []lockingcenter.Option{lockingcenter.WithTLS(srv.client(t, "billing-7")), lockingcenter.WithSource("ignored")}
	if err := lockingcenter.New(srv.addr, opts...).Lock(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	s := srv.open(lockingcenter.WithTLS(srv.client(t, "billing-7")), lockingcenter.WithSource("ignored"))
	if _, err := s.Acquire(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"v1", "s"} {
		if h, ok := srv.node.Holder(key); !ok || h.Source != "billing-7" {
			t.Errorf("holder of %s: %+v", key, h)
		}
	}
}
