package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/internal/testcerts"
	"github.com/locking-center/locking-center/manager"
)

// tlsFiles are the PEM files of an lcd under mutual TLS, made by a CA of
// the test.
type tlsFiles struct {
	ca     *testcerts.CA
	server testcerts.Files
	caFile string
}

func newTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "lcd test CA")
	return tlsFiles{ca: ca, server: ca.Server(t).Write(t, dir, "server"), caFile: ca.Write(t, dir, "clients-ca")}
}

func (f tlsFiles) env() []string {
	return []string{"TLS_CERT_FILE=" + f.server.Cert, "TLS_KEY_FILE=" + f.server.Key,
		"TLS_CLIENT_CA_FILE=" + f.caFile, "TLS_SOURCE_FROM_CERT=true"}
}

// httpsGet GETs url with cfg and returns the status and body.
func httpsGet(url string, cfg *tls.Config) (int, string, error) {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// An lcd under mutual TLS serves every port over TLS: v1 and the session
// protocol on the mutex port, the management port, the HTTP API and the
// metrics endpoint; a client without a certificate is refused where one
// is required, and the source of a lock is the certificate's name.
func TestTLSEveryPort(t *testing.T) {
	f := newTLSFiles(t)
	p, addrs := startLCD(t, "", f.env()...)
	ctx := context.Background()
	withCert := testcerts.ClientConfig(f.ca, f.ca.Client(t, "svc-a"))
	noCert := testcerts.ClientConfig(f.ca, nil)

	v1 := lockingcenter.New(addrs.Mutex, lockingcenter.WithTLS(withCert), lockingcenter.WithSource("ignored"))
	if err := v1.Lock(ctx, "tls/v1"); err != nil {
		t.Fatalf("v1 lock over TLS: %v", err)
	}
	s, err := lockingcenter.NewSession(ctx, addrs.Mutex, lockingcenter.WithTLS(withCert))
	if err != nil {
		t.Fatalf("session over TLS: %v", err)
	}
	defer s.Close()
	if _, err := s.Acquire(ctx, "tls/v2"); err != nil {
		t.Fatalf("session acquire over TLS: %v", err)
	}
	m := &manager.Client{Addr: addrs.Manager, TLS: withCert}
	hs, err := m.Holders(ctx)
	if err != nil {
		t.Fatalf("management port over TLS: %v", err)
	}
	var got []string
	for _, h := range hs {
		got = append(got, h.Key+" by "+h.Source)
	}
	if want := "tls/v1 by svc-a, tls/v2 by svc-a"; strings.Join(got, ", ") != want {
		t.Errorf("holders %q, want %q", strings.Join(got, ", "), want)
	}

	// Mutual TLS: no certificate, no service, on every port that needs one.
	if err := lockingcenter.New(addrs.Mutex, lockingcenter.WithTLS(noCert)).TryLock(ctx, "tls/x"); err == nil {
		t.Error("v1 without a client certificate served")
	}
	if s, err := lockingcenter.NewSession(ctx, addrs.Mutex, lockingcenter.WithTLS(noCert)); err == nil {
		s.Close()
		t.Error("a session without a client certificate served")
	}
	if _, err := (&manager.Client{Addr: addrs.Manager, TLS: noCert}).Keys(ctx); err == nil {
		t.Error("the management port without a client certificate served")
	}
	if err := lockingcenter.New(addrs.Mutex).TryLock(ctx, "tls/x"); err == nil {
		t.Error("plain TCP served on a TLS port")
	}

	// The HTTP API requires a certificate; the metrics port verifies one
	// if given.
	acquire := func(cfg *tls.Config) (int, error) {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
		resp, err := c.Post("https://"+addrs.HTTP+"/api/v1/locks/acquire", "application/json",
			strings.NewReader(`{"key":"tls/v1","owner":"web"}`))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := acquire(withCert); err != nil || code != http.StatusConflict {
		t.Errorf("HTTP acquire of a held key over TLS: %d, %v; want 409", code, err)
	}
	if _, err := acquire(noCert); err == nil {
		t.Error("the HTTP API without a client certificate served")
	}
	if code, body, err := httpsGet("https://"+addrs.Metrics+"/metrics", noCert); err != nil || code != http.StatusOK ||
		!strings.Contains(body, "locking_center_locked_keys 2") {
		t.Errorf("metrics over TLS without a client certificate: %d, %v", code, err)
	}
	// A certificate of another CA, presented though the server does not
	// ask for one of its kind, is refused.
	stranger := testcerts.NewCA(t, "another CA").Client(t, "svc-a")
	foreign := testcerts.ClientConfig(f.ca, nil)
	foreign.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger.TLS, nil }
	if _, _, err := httpsGet("https://"+addrs.Metrics+"/metrics", foreign); err == nil {
		t.Error("metrics served to a certificate of an unknown CA")
	}

	// lcd health speaks HTTPS when TLS_CERT_FILE is set.
	var stderr bytes.Buffer
	if code := run(ctx, []string{"health"}, []string{"METRICS_ADDRESS=" + addrs.Metrics, "TLS_CERT_FILE=" + f.server.Cert},
		io.Discard, &stderr); code != 0 {
		t.Errorf("lcd health over TLS: exit %d: %s", code, stderr.String())
	}
	other := f.ca.Server(t).Write(t, t.TempDir(), "other")
	stderr.Reset()
	if code := run(ctx, []string{"health"}, []string{"METRICS_ADDRESS=" + addrs.Metrics, "TLS_CERT_FILE=" + other.Cert},
		io.Discard, &stderr); code != exitRuntime || !strings.Contains(stderr.String(), "not the one in") {
		t.Errorf("lcd health against another certificate than the file's: exit %d: %s", code, stderr.String())
	}
	if code := p.terminate(); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// serverCert returns the certificate a new TLS connection to addr is
// shown.
func serverCert(t *testing.T, addr string, cfg *tls.Config) []byte {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Raw
}

// SIGHUP reloads the certificate and key: a new connection is shown the
// new certificate on every port; the session's lock and the v1 lock taken
// before the reload stay held.
func TestTLSReloadOnSIGHUP(t *testing.T) {
	f := newTLSFiles(t)
	p, addrs := startLCD(t, "", f.env()...)
	ctx := context.Background()
	cfg := testcerts.ClientConfig(f.ca, f.ca.Client(t, "svc-a"))
	before := serverCert(t, addrs.Mutex, cfg)
	if err := lockingcenter.New(addrs.Mutex, lockingcenter.WithTLS(cfg)).Lock(ctx, "reload/v1"); err != nil {
		t.Fatal(err)
	}
	s, err := lockingcenter.NewSession(ctx, addrs.Mutex, lockingcenter.WithTLS(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lock, err := s.Acquire(ctx, "reload/v2")
	if err != nil {
		t.Fatal(err)
	}

	// A file that does not parse changes nothing.
	testcerts.WriteFile(t, f.server.Key, []byte("not a key"))
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "TLS files not reloaded", 1)
	if got := serverCert(t, addrs.Mutex, cfg); !bytes.Equal(got, before) {
		t.Fatal("a broken key file replaced the certificate")
	}

	next := f.ca.Server(t)
	testcerts.WriteFile(t, f.server.Cert, next.CertPEM)
	testcerts.WriteFile(t, f.server.Key, next.KeyPEM)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "TLS files reloaded", 1)
	for _, addr := range []string{addrs.Mutex, addrs.Manager, addrs.Metrics, addrs.HTTP} {
		if got := serverCert(t, addr, cfg); !bytes.Equal(got, next.Leaf.Raw) {
			t.Errorf("%s: a new connection after the reload is shown the old certificate", addr)
		}
	}
	hs, err := (&manager.Client{Addr: addrs.Manager, TLS: cfg}).Holders(ctx)
	if err != nil || len(hs) != 2 {
		t.Fatalf("holders after the reload: %+v, %v", hs, err)
	}
	select {
	case <-lock.Done():
		t.Fatal("the session's lock was lost in the reload")
	default:
	}
	if err := lock.Release(); err != nil {
		t.Errorf("release of the session's lock from before the reload: %v", err)
	}
	if code := p.terminate(); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// A certificate or key that cannot be used stops lcd at start with exit 2
// and a line that names the file.
func TestTLSBadFilesAtStart(t *testing.T) {
	f := newTLSFiles(t)
	dir := t.TempDir()
	mismatched := f.ca.Server(t).Write(t, dir, "mismatched")
	garbage := filepath.Join(dir, "garbage.crt")
	testcerts.WriteFile(t, garbage, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	for _, tt := range []struct {
		name string
		env  []string
		want string
	}{
		{"key of another certificate", []string{"TLS_CERT_FILE=" + f.server.Cert, "TLS_KEY_FILE=" + mismatched.Key}, f.server.Cert},
		{"missing file", []string{"TLS_CERT_FILE=" + filepath.Join(dir, "absent.crt"), "TLS_KEY_FILE=" + f.server.Key}, "absent.crt"},
		{"client CA file without a certificate", []string{"TLS_CERT_FILE=" + f.server.Cert, "TLS_KEY_FILE=" + f.server.Key,
			"TLS_CLIENT_CA_FILE=" + f.server.Key}, f.server.Key},
		{"client CA file that does not parse", []string{"TLS_CERT_FILE=" + f.server.Cert, "TLS_KEY_FILE=" + f.server.Key,
			"TLS_CLIENT_CA_FILE=" + garbage}, garbage},
		{"cert without key", []string{"TLS_CERT_FILE=" + f.server.Cert}, "go together"},
		{"source from cert without client CAs", []string{"TLS_CERT_FILE=" + f.server.Cert, "TLS_KEY_FILE=" + f.server.Key,
			"TLS_SOURCE_FROM_CERT=true"}, "needs TLS_CLIENT_CA_FILE"},
	} {
		t.Run(tt.name, func(t *testing.T) { exitsUsage(t, tt.env, tt.want) })
	}
}

// exitsUsage runs lcd with env beside lcdEnv's and checks that it exits 2
// with one line on stderr that holds want. An lcd that starts instead is
// stopped after a minute, and fails the check.
func exitsUsage(t *testing.T, env []string, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	code := run(ctx, nil, append(lcdEnv(""), env...), io.Discard, &stderr)
	line := strings.TrimSpace(stderr.String())
	if code != exitUsage || strings.Count(line, "\n") != 0 || !strings.Contains(line, want) {
		t.Errorf("exit %d, stderr %q; want exit 2 and one line naming %q", code, line, want)
	}
}

// lc-cli speaks TLS to an lcd under mutual TLS, its management commands
// included; sources come from the certificate.
func TestTLSWithLcCli(t *testing.T) {
	dir := t.TempDir()
	cli := lcCli(t)
	f := newTLSFiles(t)
	p, addrs := startLCD(t, "", f.env()...)
	ops := f.ca.Client(t, "ops").Write(t, dir, "ops")
	env := append(os.Environ(), "LC_ADDRESS="+addrs.Mutex, "LC_MANAGER_ADDRESS="+addrs.Manager, "LC_CA_FILE="+f.caFile,
		"LC_CERT_FILE="+ops.Cert, "LC_KEY_FILE="+ops.Key)
	lc := func(env []string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Run()
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}
	for _, step := range []struct {
		args []string
		out  string
	}{
		{[]string{"trylock", "tls/cli"}, ""},
		{[]string{"keys", "-d"}, "ops"},
		{[]string{"lock", "tls/run", "--", cli, "keys"}, "tls/cli\ntls/run\n"},
		{[]string{"reset", "-s", "ops"}, ""},
		{[]string{"keys"}, ""},
	} {
		code, out, errOut := lc(env, step.args...)
		if code != 0 || !strings.Contains(out, step.out) || step.out == "" && out != "" {
			t.Errorf("lc-cli %q: exit %d, stdout %q, stderr %q; want 0 and %q", step.args, code, out, errOut, step.out)
		}
	}
	noCert := append(os.Environ(), "LC_ADDRESS="+addrs.Mutex, "LC_MANAGER_ADDRESS="+addrs.Manager, "LC_CA_FILE="+f.caFile)
	if code, _, errOut := lc(noCert, "keys"); code != 2 || !strings.Contains(errOut, "certificate") {
		t.Errorf("lc-cli keys without a client certificate: exit %d, %q", code, errOut)
	}
	if code := p.terminate(); code != 0 {
		t.Errorf("exit %d", code)
	}
}
