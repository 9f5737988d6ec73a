package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/locking-center/locking-center/store"
)

func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	if code, _ := runProbe(t, time.Second, "tls-files", dir); code != exitOK {
		t.Fatalf("tls-files: exit %d", code)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"localhost", "127.0.0.1"} {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("the server certificate for %s: %v", name, err)
		}
	}
}

func TestBigTokenWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	if code, _ := runProbe(t, time.Second, "big-token-wal", path); code != exitOK {
		t.Fatalf("big-token-wal: exit %d", code)
	}
	if code, _ := runProbe(t, time.Second, "big-token-wal", path); code != exitError {
		t.Errorf("big-token-wal over an existing log: exit %d, want %d", code, exitError)
	}
	log, table, err := store.Open(store.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	srv := startServersOn(t, table)
	s := openSession(t, srv.mutex)
	lock, err := s.Acquire(context.Background(), "probe/big")
	if err != nil {
		t.Fatal(err)
	}
	if lock.Token() <= 1<<63 {
		t.Fatalf("token %d, want one above 2^63", lock.Token())
	}
	want := fmt.Sprintf("%d %d", lock.Token(), s.ID())
	if code, out := runProbe(t, time.Second, "holders", srv.manager, "probe/big"); code != exitOK || out != want {
		t.Fatalf("holders: exit %d, %q, want %q", code, out, want)
	}
}
