package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
)

const (
	testOpsToken      = "ops-token-0123456789abcdef"
	testDeployerToken = "deployer-token-0123456789"
	testNewbieToken   = "newbie-token-0123456789ab"
)

// writeTokens writes a tokens file into dir and returns its path.
func writeTokens(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startLCD starts the built lcd with env added to lcdEnv's (without a
// DATA_PATH), through sh when shell is not empty (e.g. "ulimit -n 160 &&
// exec"), and waits for its "lcd started" line only: with authentication
// on, the probes waitStarted makes would be refused.
func startLCD(t *testing.T, shell string, env ...string) (*subprocess, lcdAddrs) {
	t.Helper()
	p := &subprocess{log: newLCDLog(), exited: make(chan struct{})}
	if shell == "" {
		p.cmd = exec.Command(lcdBinary)
	} else {
		p.cmd = exec.Command("sh", "-c", shell+` "$0"`, lcdBinary)
	}
	p.cmd.Env = append(append(os.Environ(), lcdEnv("")...), env...)
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		p.err = p.cmd.Wait()
	}()
	t.Cleanup(p.kill)
	select {
	case <-p.log.started:
	case <-p.exited:
		t.Fatalf("lcd exited before it started:\n%s", p.log)
	case <-time.After(startTimeout):
		t.Fatalf("lcd did not start within %v:\n%s", startTimeout, p.log)
	}
	p.log.mu.Lock()
	defer p.log.mu.Unlock()
	return p, p.log.addrs
}

// waitLog waits until lcd's log holds want n times in all.
func (p *subprocess) waitLog(t *testing.T, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for strings.Count(p.log.String(), want) < n {
		if time.Now().After(deadline) {
			t.Fatalf("lcd never logged %q %d times:\n%s", want, n, p.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metric returns the text of the metrics endpoint, with token as a bearer
// token when not empty, and its status.
func metricsText(t *testing.T, addr, path, token string) (int, string) {
	t.Helper()
	return httpDo(t, addr, http.MethodGet, path, "", token)
}

func TestAuthenticationEndToEnd(t *testing.T) {
	dir := t.TempDir()
	tokensPath := writeTokens(t, filepath.Join(dir, "tokens"), "ops admin "+testOpsToken+"\n"+
		"deployer client "+testDeployerToken+" deploy/\n")
	p, addrs := startLCD(t, "", "AUTH_TOKENS_FILE="+tokensPath)
	ctx := context.Background()

	if err := lockingcenter.New(addrs.Mutex).TryLock(ctx, "deploy/x"); !errors.Is(err, lockingcenter.ErrFailed) {
		t.Errorf("v1 with authentication on: %v, want ErrFailed", err)
	}
	if _, err := lockingcenter.NewSession(ctx, addrs.Mutex); !errors.Is(err, lockingcenter.ErrUnauthenticated) {
		t.Errorf("a session without a token: %v, want ErrUnauthenticated", err)
	}
	s, err := lockingcenter.NewSession(ctx, addrs.Mutex, lockingcenter.WithToken(testDeployerToken))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Acquire(ctx, "deploy/prod"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "billing/ledger"); !errors.Is(err, lockingcenter.ErrForbidden) {
		t.Errorf("a key outside the prefixes: %v, want ErrForbidden", err)
	}
	m := &manager.Client{Addr: addrs.Manager}
	if _, err := m.Keys(ctx); !errors.Is(err, manager.ErrFailed) {
		t.Errorf("management without a token: %v", err)
	}
	m.Token = testDeployerToken
	if _, err := m.Keys(ctx); !errors.Is(err, manager.ErrFailed) {
		t.Errorf("management with a client's token: %v", err)
	}
	m.Token = testOpsToken
	if keys, err := m.Keys(ctx); err != nil || len(keys) != 1 || keys[0] != "deploy/prod" {
		t.Errorf("an admin's keys: %v, %v", keys, err)
	}
	if strings.Contains(p.log.String(), testDeployerToken) {
		t.Error("a token reached the log")
	}

	// SIGHUP: a new principal can connect; a broken file changes nothing.
	if _, err := lockingcenter.NewSession(ctx, addrs.Mutex, lockingcenter.WithToken(testNewbieToken)); !errors.Is(err, lockingcenter.ErrUnauthenticated) {
		t.Fatalf("an unknown token: %v", err)
	}
	writeTokens(t, tokensPath, "ops admin "+testOpsToken+"\nnewbie client "+testNewbieToken+"\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "tokens file reloaded", 1)
	newbie, err := lockingcenter.NewSession(ctx, addrs.Mutex, lockingcenter.WithToken(testNewbieToken))
	if err != nil {
		t.Fatalf("a token added by the reload: %v", err)
	}
	newbie.Close()
	if _, err := lockingcenter.NewSession(ctx, addrs.Mutex, lockingcenter.WithToken(testDeployerToken)); !errors.Is(err, lockingcenter.ErrUnauthenticated) {
		t.Errorf("a token removed by the reload: %v", err)
	}
	writeTokens(t, tokensPath, "newbie superuser "+testNewbieToken+"\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "tokens file not reloaded", 1)
	if s, err := lockingcenter.NewSession(ctx, addrs.Mutex, lockingcenter.WithToken(testNewbieToken)); err != nil {
		t.Errorf("after a broken file, the tokens in force: %v", err)
	} else {
		s.Close()
	}

	code, text := metricsText(t, addrs.Metrics, "/metrics", "")
	if code != http.StatusOK || !strings.Contains(text, `locking_center_refusals_total{reason="v1"} 1`) ||
		!strings.Contains(text, `locking_center_refusals_total{reason="forbidden"} 2`) {
		t.Errorf("metrics %d: refusals not as counted:\n%s", code, grepLines(text, "refusals"))
	}
	if code := p.terminate(); code != 0 {
		t.Errorf("exit %d", code)
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestV1NetworksAndMetricsToken(t *testing.T) {
	tokensPath := writeTokens(t, filepath.Join(t.TempDir(), "tokens"), "ops admin "+testOpsToken+"\n")
	_, addrs := startLCD(t, "", "AUTH_TOKENS_FILE="+tokensPath, "AUTH_V1_NETWORKS=10.0.0.0/8,127.0.0.1/32",
		"AUTH_METRICS=true")
	ctx := context.Background()
	if err := lockingcenter.New(addrs.Mutex).TryLock(ctx, "k"); err != nil {
		t.Errorf("v1 from an allowed network: %v", err)
	}
	if code, _ := metricsText(t, addrs.Metrics, "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	if code, _ := metricsText(t, addrs.Metrics, "/metrics", "wrong-token-000000000"); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a wrong token: %d, want 401", code)
	}
	if code, text := metricsText(t, addrs.Metrics, "/metrics", testOpsToken); code != http.StatusOK ||
		!strings.Contains(text, `locking_center_refusals_total{reason="unauthenticated"} 2`) {
		t.Errorf("/metrics with a token: %d\n%s", code, grepLines(text, "refusals"))
	}
	if code, _ := metricsText(t, addrs.Metrics, "/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz: %d, want 200 without a token", code)
	}
}

// TestConnectionCapUnderLowUlimit runs lcd with its open files limited to
// 160: MAX_CONNECTIONS comes to 96, 64 of them for the client ports. A
// session holds the key on one of them (a connection that stays open, so
// the count is exact); a flood of parked v1 waiters fills the other 63;
// further lock requests are refused at once, while the management port and
// /metrics keep answering from the reserve; once the waiters leave, locking
// works again.
func TestConnectionCapUnderLowUlimit(t *testing.T) {
	_, addrs := startLCD(t, "ulimit -n 160 && exec")
	ctx := context.Background()
	holder, err := lockingcenter.NewSession(ctx, addrs.Mutex)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.Acquire(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
	c := lockingcenter.New(addrs.Mutex)
	var waiters []net.Conn
	defer func() {
		for _, w := range waiters {
			w.Close()
		}
	}()
	refused := 0
	for i := range 80 {
		w, err := net.Dial("tcp", addrs.Mutex)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(lockingcenter.EncodeRequest(1, "hot", fmt.Sprint("w", i))); err != nil {
			t.Fatal(err)
		}
		waiters = append(waiters, w)
	}
	m := &manager.Client{Addr: addrs.Manager}
	deadline := time.Now().Add(startTimeout)
	for {
		hs, err := m.Holders(ctx)
		if err != nil {
			t.Fatalf("the management port while the mutex port is full: %v", err)
		}
		if len(hs) == 1 && hs[0].Waiters == 63 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("holders %+v: want 63 parked waiters", hs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The refusals are counted once answered: then every '-' is there to read.
	deadline = time.Now().Add(startTimeout)
	for {
		_, text := metricsText(t, addrs.Metrics, "/metrics", "")
		if strings.Contains(text, `locking_center_refusals_total{reason="connections"} 17`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refusals never reached 17:\n%s", grepLines(text, "refusals"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, w := range waiters {
		w.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		var b [1]byte
		if n, _ := w.Read(b[:]); n == 1 && b[0] == '-' {
			refused++
		}
	}
	if refused != 17 {
		t.Errorf("%d waiters refused, want 17", refused)
	}
	if err := c.TryLock(ctx, "other"); err == nil || errors.Is(err, lockingcenter.ErrBusy) {
		t.Errorf("a lock request while the client ports are full: %v, want a refusal", err)
	}
	code, text := metricsText(t, addrs.Metrics, "/metrics", "")
	if code != http.StatusOK || !strings.Contains(text, `locking_center_refusals_total{reason="connections"} 18`) {
		t.Errorf("metrics %d while full:\n%s", code, grepLines(text, "refusals"))
	}
	for _, w := range waiters {
		w.Close()
	}
	waiters = nil
	deadline = time.Now().Add(startTimeout)
	for c.TryLock(ctx, "other") != nil {
		if time.Now().After(deadline) {
			t.Fatal("locking did not come back once the waiters left")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
