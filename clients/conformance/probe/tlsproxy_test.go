package main

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTLSProxy checks that tls-proxy forwards plain TCP to a TLS server
// whose certificate the CA verifies, and nothing to one it does not.
func TestTLSProxy(t *testing.T) {
	checkLeaks(t)
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if err := writeTLSFiles(d); err != nil {
			t.Fatal(err)
		}
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	target := serveConns(t, func(c net.Conn) {
		tc := tls.Server(c, cfg)
		defer tc.Close()
		buf := make([]byte, 64)
		for {
			n, err := tc.Read(buf)
			if err != nil {
				return
			}
			tc.Write(buf[:n])
		}
	})
	for _, tc := range []struct {
		ca   string
		echo bool
	}{{filepath.Join(dir, "ca.crt"), true}, {filepath.Join(other, "ca.crt"), false}} {
		addr, _, ok := strings.Cut(serving(t, "tls-proxy", target, tc.ca), " ")
		if !ok {
			t.Fatalf("tls-proxy printed no control address")
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		err = echo(c, "through TLS")
		c.Close()
		if tc.echo && err != nil {
			t.Errorf("with the server's CA: %v", err)
		}
		if !tc.echo && err == nil {
			t.Errorf("with another CA the proxy forwarded to the server")
		}
	}
}
