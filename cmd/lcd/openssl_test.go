package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

// opensslRecipe returns the shell block of docs/security.md that the
// marker line names this test in.
func opensslRecipe(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- TestOpenSSLRecipe (cmd/lcd) runs the block below as it stands. -->\n```sh\n")
	block, _, closed := strings.Cut(rest, "```\n")
	if !ok || !closed || !strings.Contains(block, "openssl") {
		t.Fatal("docs/security.md has no openssl block after the line that names TestOpenSSLRecipe")
	}
	return block
}

// The openssl commands of docs/security.md, run as they stand, make a CA,
// a server and a client certificate that lcd serves mutual TLS with:
// lc-cli and a Go session presenting the client certificate take keys,
// held by the certificate's name; a client without one is refused.
func TestOpenSSLRecipe(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed: the recipe of docs/security.md cannot be run here (Debian: apt-get install openssl)")
	}
	dir := t.TempDir()
	sh := exec.Command("sh", "-e", "-c", opensslRecipe(t))
	sh.Dir = dir
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the recipe failed: %v\n%s", err, out)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	_, addrs := startLCD(t, "", "TLS_CERT_FILE="+file("server.crt"), "TLS_KEY_FILE="+file("server.key"),
		"TLS_CLIENT_CA_FILE="+file("ca.crt"), "TLS_SOURCE_FROM_CERT=true")

	env := []string{"LC_ADDRESS=" + addrs.Mutex, "LC_MANAGER_ADDRESS=" + addrs.Manager, "LC_CA_FILE=" + file("ca.crt"),
		"LC_CERT_FILE=" + file("client.crt"), "LC_KEY_FILE=" + file("client.key")}
	if code, out, errOut := runLcCli(t, env, "trylock", "recipe/cli"); code != 0 {
		t.Fatalf("lc-cli trylock under mutual TLS: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	cert, err := tls.LoadX509KeyPair(file("client.crt"), file("client.key"))
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(file("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("ca.crt holds no certificate")
	}
	ctx := context.Background()
	cfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
	s, err := lockingcenter.NewSession(ctx, addrs.Mutex, lockingcenter.WithTLS(cfg))
	if err != nil {
		t.Fatalf("a Go session under mutual TLS: %v", err)
	}
	defer s.Close()
	if _, err := s.Acquire(ctx, "recipe/go"); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runLcCli(t, env, "keys", "-d")
	if code != 0 || strings.Count(out, "billing-worker") != 2 || !strings.Contains(out, "recipe/cli") ||
		!strings.Contains(out, "recipe/go") {
		t.Errorf("lc-cli keys -d: exit %d, stdout %q, stderr %q; want both keys held by billing-worker", code, out, errOut)
	}
	noCert := lockingcenter.New(addrs.Mutex, lockingcenter.WithTLS(&tls.Config{RootCAs: pool}))
	if err := noCert.Lock(ctx, "recipe/none"); err == nil {
		t.Error("a client without a certificate took a key")
	}
}
