package manager

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/testcerts"
	"github.com/locking-center/locking-center/internal/tlsconf"
	"github.com/locking-center/locking-center/mutex"
)

// startTLS serves the management port over TLS with client certificates
// of ca required.
func startTLS(t *testing.T, ca *testcerts.CA) (*mutex.Node, *Client) {
	t.Helper()
	dir := t.TempDir()
	files := ca.Server(t).Write(t, dir, "server")
	st, err := tlsconf.Load(tlsconf.Config{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: ca.Write(t, dir, "ca")})
	if err != nil {
		t.Fatal(err)
	}
	return startWith(t, Config{TLS: st.Config(tlsconf.Require), Timeout: time.Minute})
}

func TestTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "manager test CA")
	tb, c := startTLS(t, ca)
	ctx := context.Background()
	lock(t, tb, "k", "x")
	c.TLS = testcerts.ClientConfig(ca, ca.Client(t, "ops"))
	keys, err := c.Keys(ctx)
	if err != nil || len(keys) != 1 || keys[0] != "k" {
		t.Fatalf("keys over TLS: %q, %v", keys, err)
	}
	if err := c.ResetKey(ctx, "k"); err != nil {
		t.Fatal(err)
	}

	refused := map[string]*Client{
		"plain":          {Addr: c.Addr, ReadTimeout: 30 * time.Second},
		"no certificate": {Addr: c.Addr, TLS: testcerts.ClientConfig(ca, nil)},
		"untrusted server": {Addr: c.Addr,
			TLS: testcerts.ClientConfig(testcerts.NewCA(t, "other"), ca.Client(t, "ops"))},
	}
	lock(t, tb, "again", "x")
	for name, rc := range refused {
		if err := rc.ResetKey(ctx, "again"); err == nil {
			t.Errorf("%s: reset answered", name)
		}
		if _, held := tb.Holder("again"); !held {
			t.Errorf("%s: the reset took effect", name)
		}
	}
	if _, err := c.Keys(ctx); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
}

// The handshake is bounded by the server's timeout: a client that stalls
// in it is cut.
func TestTLSHandshakeTimeout(t *testing.T) {
	ca := testcerts.NewCA(t, "manager test CA")
	dir := t.TempDir()
	files := ca.Server(t).Write(t, dir, "server")
	st, err := tlsconf.Load(tlsconf.Config{CertFile: files.Cert, KeyFile: files.Key})
	if err != nil {
		t.Fatal(err)
	}
	_, c := startWith(t, Config{TLS: st.Config(tlsconf.Require), Timeout: 100 * time.Millisecond})
	stalled, err := net.Dial("tcp", c.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	stalled.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := stalled.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("a client stalled in its handshake was not cut")
	}
}
