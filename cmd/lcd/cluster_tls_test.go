package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/internal/testcerts"
	"github.com/locking-center/locking-center/internal/tlsconf"
	"github.com/locking-center/locking-center/manager"
)

// holderOf returns the source and token of key's holder as the
// management port at addr lists it; ok is false when nobody holds it.
func holderOf(ctx context.Context, m *manager.Client, key string) (manager.Holder, bool, error) {
	hs, err := m.Holders(ctx)
	if err != nil {
		return manager.Holder{}, false, err
	}
	i := slices.IndexFunc(hs, func(h manager.Holder) bool { return h.Key == key })
	if i < 0 {
		return manager.Holder{}, false, nil
	}
	return hs[i], true, nil
}

// Three lcd processes under TLS, client ports and raft ports alike (one
// node certificate for server and client use, TLS_CLIENT_CA_FILE and
// TLS_PEER_CA_FILE of one CA): a leader is elected; a v1 lock sent to a
// follower is forwarded to the leader under TLS, and so is an HTTP
// acquire; the Go client given a
// follower first opens its session at the leader; the membership listing
// at a follower reaches every node; after the leader's SIGTERM the new
// leader holds both locks, and a follower forwards to it.
func TestClusterTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "lcd test CA")
	node := ca.Node(t, "lcd-node").Write(t, dir, "node")
	caFile := ca.Write(t, dir, "ca")
	lc := startClusterWith(t, 3, []string{"TLS_CERT_FILE=" + node.Cert, "TLS_KEY_FILE=" + node.Key,
		"TLS_CLIENT_CA_FILE=" + caFile, "TLS_PEER_CA_FILE=" + caFile})
	client := testcerts.ClientConfig(ca, ca.Client(t, "svc"))
	lc.tls = client
	lead, ok := lc.leader(all(3), 30*time.Second)
	if !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	rest := slices.DeleteFunc(all(3), func(i int) bool { return i == lead })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	v1 := lockingcenter.New(lc.addrs(rest[0]).Mutex, lockingcenter.WithTLS(client), lockingcenter.WithSource("v1-client"))
	if err := v1.Lock(ctx, "v1/key"); err != nil {
		t.Fatalf("v1 lock at a follower: %v\n%s", err, lc.logs())
	}
	leader := &manager.Client{Addr: lc.addrs(lead).Manager, TLS: client}
	h, ok, err := holderOf(ctx, leader, "v1/key")
	if err != nil || !ok || h.Source != "v1-client" {
		t.Fatalf("the leader's holder of v1/key: %+v, %v, %v", h, ok, err)
	}

	// An HTTP acquire at a follower, forwarded under TLS.
	if a := lc.postUntilServed(t, rest[0], "/api/v1/locks/acquire", `{"key":"http/key","owner":"http-client"}`,
		30*time.Second, func(httpAnswer) {}); a.code != 200 {
		t.Fatalf("HTTP acquire at a follower: %d %s\n%s", a.code, a.raw, lc.logs())
	}
	if h, ok, err := holderOf(ctx, leader, "http/key"); err != nil || !ok || h.Source != "http-client" {
		t.Fatalf("the leader's holder of http/key: %+v, %v, %v", h, ok, err)
	}

	addrs := strings.Join(lc.mutexAddrs([]int{rest[0], lead, rest[1]}), ",")
	s, err := lockingcenter.NewSession(ctx, addrs, lockingcenter.WithTLS(client), lockingcenter.WithTTL(20*time.Second))
	if err != nil {
		t.Fatalf("session at %s: %v\n%s", addrs, err, lc.logs())
	}
	defer s.Close()
	held, err := s.Acquire(ctx, "v2/key")
	if err != nil {
		t.Fatal(err)
	}

	ms, err := (&manager.Client{Addr: lc.addrs(rest[1]).Manager, TLS: client}).Members(ctx)
	if err != nil || len(ms) != 3 {
		t.Fatalf("members at a follower: %+v, %v", ms, err)
	}
	for _, m := range ms {
		if !m.Reachable || m.Applied == 0 {
			t.Errorf("member %+v", m)
		}
	}

	lc.stop(lead)
	next, ok := lc.leader(rest, 30*time.Second)
	if !ok {
		t.Fatalf("no leader after the leader's stop:\n%s", lc.logs())
	}
	follower := rest[0]
	if follower == next {
		follower = rest[1]
	}
	if err := lockingcenter.New(lc.addrs(follower).Mutex, lockingcenter.WithTLS(client)).TryLock(ctx, "v1/key"); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("try-lock of v1/key at the follower left: %v\n%s", err, lc.logs())
	}
	if h2, ok, err := holderOf(ctx, &manager.Client{Addr: lc.addrs(next).Manager, TLS: client}, "v1/key"); err != nil || !ok || h2.Token != h.Token {
		t.Fatalf("the new leader's holder of v1/key: %+v, %v, %v; was %+v", h2, ok, err, h)
	}
	awaitInfo(t, s, "v2/key", "v2/key still the session's", func(ki lockingcenter.KeyInfo) bool {
		return len(ki.Holders) == 1 && ki.Holders[0].Token == held.Token() && ki.Holders[0].Session == s.ID()
	})
}

// The combinations of TLS and a cluster that cannot work stop lcd at
// start with exit 2 and one line that names the setting or the file.
func TestClusterTLSRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "nodes CA")
	node := ca.Node(t, "n1").Write(t, dir, "node")
	serverOnly := ca.Server(t).Write(t, dir, "server")
	caFile := ca.Write(t, dir, "ca")
	otherCA := testcerts.NewCA(t, "clients CA").Write(t, dir, "clients-ca")
	expired := ca.ExpiredNode(t, "n1-old").Write(t, dir, "expired")
	cluster := []string{"NODE_ID=n1", "RAFT_ADDRESS=127.0.0.1:0", "RAFT_DIR=" + t.TempDir()}
	withTLS := append(slices.Clone(cluster), "TLS_CERT_FILE="+node.Cert, "TLS_KEY_FILE="+node.Key)
	for _, tt := range []struct {
		name string
		env  []string
		want string
	}{
		{"no peer CA", withTLS, "need TLS_PEER_CA_FILE"},
		{"source from the certificate", append(slices.Clone(withTLS), "TLS_PEER_CA_FILE="+caFile,
			"TLS_CLIENT_CA_FILE="+caFile, "TLS_SOURCE_FROM_CERT=true"), "TLS_SOURCE_FROM_CERT"},
		{"a node certificate for servers only", append(slices.Clone(cluster), "TLS_CERT_FILE="+serverOnly.Cert,
			"TLS_KEY_FILE="+serverOnly.Key, "TLS_PEER_CA_FILE="+caFile), "clientAuth"},
		{"a node certificate the client CAs did not sign", append(slices.Clone(withTLS), "TLS_PEER_CA_FILE="+caFile,
			"TLS_CLIENT_CA_FILE="+otherCA), "TLS_CLIENT_CA_FILE"},
		{"a node certificate the peer CAs did not sign", append(slices.Clone(withTLS), "TLS_PEER_CA_FILE="+otherCA), "TLS peer CA file"},
		{"an expired node certificate", append(slices.Clone(withTLS), "TLS_PEER_CA_FILE="+caFile,
			"TLS_PEER_CERT_FILE="+expired.Cert, "TLS_PEER_KEY_FILE="+expired.Key), "expired"},
		{"a peer certificate without its key", append(slices.Clone(withTLS), "TLS_PEER_CA_FILE="+caFile,
			"TLS_PEER_CERT_FILE="+node.Cert), "go together"},
		{"peer settings without NODE_ID", []string{"TLS_CERT_FILE=" + node.Cert, "TLS_KEY_FILE=" + node.Key,
			"TLS_PEER_CA_FILE=" + caFile}, "set NODE_ID"},
		{"peer settings without client TLS", append(slices.Clone(cluster), "TLS_PEER_CA_FILE="+caFile), "need TLS_CERT_FILE"},
	} {
		t.Run(tt.name, func(t *testing.T) { exitsUsage(t, tt.env, tt.want) })
	}

	// TLS_PEER_CERT_FILE and its key, when set, are the node's certificate;
	// TLS_CERT_FILE's otherwise.
	peer := ca.Node(t, "n1-peer").Write(t, dir, "peer")
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{append(slices.Clone(withTLS), "TLS_PEER_CA_FILE="+caFile), node.Cert},
		{append(slices.Clone(withTLS), "TLS_PEER_CA_FILE="+caFile, "TLS_PEER_CERT_FILE="+peer.Cert, "TLS_PEER_KEY_FILE="+peer.Key), peer.Cert},
	} {
		cfg, err := resolve(t, nil, tt.env)
		if err != nil || cfg.PeerTLS == nil || cfg.PeerTLS.CertFile != tt.want || cfg.PeerTLS.CAFile != caFile {
			t.Errorf("%v: %+v, %v", tt.env, cfg.PeerTLS, err)
		}
	}
	if cfg, err := resolve(t, nil, cluster); err != nil || cfg.PeerTLS != nil {
		t.Errorf("a cluster without TLS: %+v, %v", cfg.PeerTLS, err)
	}
}

// SIGHUP's reload reads the node certificate again with the others; one
// that does not parse leaves the one in force.
func TestTransportReloadsNodeCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "nodes CA")
	node := ca.Node(t, "before").Write(t, dir, "node")
	caFile := ca.Write(t, dir, "ca")
	tr, err := newTransport(&tlsconf.Config{CertFile: node.Cert, KeyFile: node.Key},
		&tlsconf.PeerConfig{CertFile: node.Cert, KeyFile: node.Key, CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	ca.Node(t, "after").Write(t, dir, "node")
	tr.reload(log)
	if cn := tr.peer.Certificate().Subject.CommonName; cn != "after" {
		t.Fatalf("node certificate after the reload: %q", cn)
	}
	testcerts.WriteFile(t, caFile, []byte("not a certificate"))
	tr.reload(log)
	if cn := tr.peer.Certificate().Subject.CommonName; cn != "after" {
		t.Fatalf("node certificate after a reload that failed: %q", cn)
	}
}

// A server certificate that the other nodes would refuse when they
// forward v1 requests to this node is warned of at start: one of a CA
// that is neither the nodes' nor a system root, or one that does not
// name the host of the client address.
func TestTransportChecksForwarding(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "nodes CA")
	node := ca.Node(t, "n1").Write(t, dir, "node")
	stranger := testcerts.NewCA(t, "another CA").Server(t).Write(t, dir, "stranger")
	peer := &tlsconf.PeerConfig{CertFile: node.Cert, KeyFile: node.Key, CAFile: ca.Write(t, dir, "ca")}
	for _, tt := range []struct {
		server testcerts.Files
		addr   string
		warned bool
	}{
		{node, "127.0.0.1:22119", false},
		{node, "localhost:22119", false},
		{node, "10.1.2.3:22119", true},
		{stranger, "127.0.0.1:22119", true},
	} {
		tr, err := newTransport(&tlsconf.Config{CertFile: tt.server.Cert, KeyFile: tt.server.Key}, peer)
		if err != nil {
			t.Fatal(err)
		}
		var logged strings.Builder
		tr.checkForwarding(tt.addr, slog.New(slog.NewTextHandler(&logged, nil)))
		if warned := strings.Contains(logged.String(), "level=WARN"); warned != tt.warned {
			t.Errorf("%s at %s: logged %q", tt.server.Cert, tt.addr, logged.String())
		}
	}
}
