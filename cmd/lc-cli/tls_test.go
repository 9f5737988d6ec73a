package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locking-center/locking-center/internal/testcerts"
	"github.com/locking-center/locking-center/internal/tlsconf"
	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
	"github.com/locking-center/locking-center/session"
)

// tlsServer is a testServer whose ports speak TLS and require a client
// certificate of ca; certs are the files of a client certificate
// ("lc-cli-test") and of the CA.
type tlsServer struct {
	*testServer
	ca                *testcerts.CA
	caFile, cert, key string
	client            *tls.Config // a client of the test with a certificate
}

func startTLSServer(t *testing.T) *tlsServer {
	t.Helper()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "lc-cli test CA")
	srvFiles := ca.Server(t).Write(t, dir, "server")
	caFile := ca.Write(t, dir, "ca")
	st, err := tlsconf.Load(tlsconf.Config{CertFile: srvFiles.Cert, KeyFile: srvFiles.Key, ClientCAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(tLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := &testServer{table: mutex.NewNode(mutex.NodeConfig{})}
	t.Cleanup(s.table.Close)
	if s.sessionSrv, err = session.NewServer(s.table, session.Config{Logger: log}); err != nil {
		t.Fatal(err)
	}
	handoff := &oneshot.Handoff{First: session.Preface[0], Serve: s.sessionSrv.Serve}
	if s.mutexSrv, err = oneshot.NewServer(s.table, oneshot.ServerConfig{Logger: log, Handoff: handoff,
		TLS: st.Config(tlsconf.Require)}); err != nil {
		t.Fatal(err)
	}
	s.managerSrv = manager.NewServer(s.table, manager.Config{Logger: log, TLS: st.Config(tlsconf.Require)})
	mutexLn, managerLn := listen(t), listen(t)
	s.addr, s.managerAddr = mutexLn.Addr().String(), managerLn.Addr().String()
	s.served.Go(func() { s.mutexSrv.Serve(context.Background(), mutexLn) })
	s.served.Go(func() { s.managerSrv.Serve(context.Background(), managerLn) })
	t.Cleanup(s.close)
	cert := ca.Client(t, "lc-cli-test")
	files := cert.Write(t, dir, "client")
	return &tlsServer{testServer: s, ca: ca, caFile: caFile, cert: files.Cert, key: files.Key,
		client: testcerts.ClientConfig(ca, cert)}
}

// tlsEnviron points lc-cli at s with the CA and the client certificate.
func (s *tlsServer) tlsEnviron() []string {
	return append(s.environ(), "LC_CA_FILE="+s.caFile, "LC_CERT_FILE="+s.cert, "LC_KEY_FILE="+s.key)
}

// heldKeys lists the held keys over TLS.
func (s *tlsServer) heldKeys(t *testing.T) []string {
	t.Helper()
	keys, err := (&manager.Client{Addr: s.managerAddr, TLS: s.client}).Keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// Every command speaks TLS with the CA and the client certificate of the
// environment: the mutex port's (v1 and, for lock --, the session
// protocol) and the management port's.
func TestTLSEveryCommand(t *testing.T) {
	s := startTLSServer(t)
	env := s.tlsEnviron()
	for _, step := range []struct {
		args []string
		want exitCode
		out  string
	}{
		{[]string{"trylock", "tls/a"}, exitOK, ""},
		{[]string{"trylock", "tls/a"}, exitBusy, ""},
		{[]string{"keys"}, exitOK, "tls/a\n"},
		{[]string{"keys", "-d"}, exitOK, "lc-cli@testhost"},
		{[]string{"unlock", "tls/a"}, exitOK, ""},
		{[]string{"wait", "tls/a"}, exitOK, ""},
		{[]string{"lock", "tls/b"}, exitOK, ""},
		{[]string{"reset", "tls/b"}, exitOK, ""},
		{[]string{"lock", "tls/c", "--", "sh", "-c", "exit 3"}, 3, ""},
		{[]string{"sessions"}, exitOK, ""},
	} {
		r := runInProcess(t, env, step.args...)
		if r.code != step.want || !strings.Contains(r.stdout, step.out) {
			t.Errorf("lc-cli %q over TLS: exit %d, stdout %q, stderr %q; want %d and %q", step.args, r.code, r.stdout,
				r.stderr, step.want, step.out)
		}
	}
	if keys := s.heldKeys(t); len(keys) != 0 {
		t.Errorf("keys left held: %q", keys)
	}
}

// The flags do what the variables do, and lock -- holds the key over TLS
// while its command runs (here lc-cli keys, over TLS too), in process and
// as the built binary.
func TestTLSFlagsAndLockCommand(t *testing.T) {
	s := startTLSServer(t)
	flags := []string{"--address", s.addr, "--manager-address", s.managerAddr, "--tls-ca", s.caFile, "--tls-cert", s.cert, "--tls-key", s.key}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			args := append(append(flags, "lock", "tls/job", "--", binary), append(flags, "keys")...)
			r := m.start(t, nil, args...).wait(t)
			if r.code != exitOK || r.stdout != "tls/job\n" {
				t.Errorf("lock -- lc-cli keys over TLS: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			if keys := s.heldKeys(t); len(keys) != 0 {
				t.Errorf("keys held after the command: %q", keys)
			}
		})
	}
}

// The old names of the TLS flags still work, for one release, each with a
// warning on stderr.
func TestOldTLSFlagNamesWarn(t *testing.T) {
	s := startTLSServer(t)
	r := runInProcess(t, nil, "--address", s.addr, "--manager-address", s.managerAddr,
		"--ca", s.caFile, "--cert", s.cert, "--key", s.key, "trylock", "old/names")
	if r.code != exitOK {
		t.Fatalf("trylock with --ca, --cert and --key = %d %q", r.code, r.stderr)
	}
	for _, name := range []string{"--ca is now --tls-ca", "--cert is now --tls-cert", "--key is now --tls-key"} {
		if !strings.Contains(r.stderr, "lc-cli: warning: "+name) {
			t.Errorf("stderr %q does not say %q", r.stderr, name)
		}
	}
	if strings.Count(r.stderr, "\n") != 3 {
		t.Errorf("stderr %q: want three warnings", r.stderr)
	}
	if keys := s.heldKeys(t); len(keys) != 1 {
		t.Errorf("keys held: %q", keys)
	}
	// A flag wins over its variable by its old name too.
	r = runInProcess(t, append(s.environ(), "LC_CA_FILE=/absent"), "--ca", s.caFile, "--tls-cert", s.cert, "--tls-key", s.key, "keys")
	if r.code != exitOK || !strings.Contains(r.stdout, "old/names") {
		t.Errorf("--ca over LC_CA_FILE = %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// Without what the server asks for, a command fails with exit 2 and one
// line; flags that do not make a TLS config are usage errors, before any
// connection.
func TestTLSFailures(t *testing.T) {
	s := startTLSServer(t)
	plain := startServer(t, nil)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	testcerts.WriteFile(t, notPEM, []byte("hello"))
	for _, tt := range []struct {
		name  string
		env   []string
		args  []string
		parts []string
	}{
		{"plain TCP to a TLS port", s.environ(), []string{"--timeout", "1s", "keys"}, []string{"keys", "add --tls"}},
		{"plain TCP to a TLS mutex port", s.environ(), []string{"--timeout", "1s", "trylock", "k"}, []string{"k", "add --tls"}},
		{"TLS to a plain port", append(s.environ(), "LC_TLS=true", "LC_CA_FILE="+s.caFile, "LC_CERT_FILE="+s.cert, "LC_KEY_FILE="+s.key,
			"LC_ADDRESS="+plain.addr, "LC_MANAGER_ADDRESS="+plain.managerAddr), []string{"keys"}, []string{"drop --tls"}},
		{"no client certificate", append(s.environ(), "LC_CA_FILE="+s.caFile), []string{"trylock", "k"}, []string{"k"}},
		{"no client certificate, management", append(s.environ(), "LC_CA_FILE="+s.caFile), []string{"keys"}, []string{s.managerAddr}},
		{"no client certificate, session", append(s.environ(), "LC_CA_FILE="+s.caFile), []string{"lock", "k", "--", "true"}, []string{"certificate required"}},
		{"server not of the CA", append(s.environ(), "LC_TLS=true", "LC_CERT_FILE="+s.cert, "LC_KEY_FILE="+s.key),
			[]string{"trylock", "k"}, []string{"certificate"}},
		{"cert without key", s.environ(), []string{"--tls-cert", s.cert, "keys"}, []string{"--tls-cert and --tls-key"}},
		{"key of no file", s.environ(), []string{"--tls-cert", s.cert, "--tls-key", filepath.Join(dir, "absent"), "keys"}, []string{"absent"}},
		{"CA file without a certificate", s.environ(), []string{"--tls-ca", notPEM, "keys"}, []string{"no PEM certificate"}},
		{"--key read as a lock's key", s.environ(), []string{"lock", "--key", "foo", "--", "true"}, []string{"not a lock's key", "lc-cli lock KEY -- CMD"}},
		{"LC_TLS not a boolean", append(s.environ(), "LC_TLS=maybe"), []string{"keys"}, []string{"LC_TLS"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runInProcess(t, tt.env, tt.args...)
			if r.code != exitFailure {
				t.Errorf("exit %d, want %d; stderr %q", r.code, exitFailure, r.stderr)
			}
			oneLine(t, r.stderr, tt.parts...)
		})
	}
	if keys := s.heldKeys(t); len(keys) != 0 {
		t.Errorf("keys held after the failures: %q", keys)
	}
}
